//! A sandbox cluster and the engine over it, shared by the engine integration tests.
//!
//! Every test starts its own cluster (`test`, namespace `platform`, the Comb CRD installed, Pods
//! Ready at once) on the backend `COMB_TEST_BACKEND` names (the emulator by default, or a real
//! kube-apiserver with kwok) and talks to it through the real `kube::Client`. What the tests
//! observe they read through the API too, as an impersonated observer whose requests the
//! counts leave out, and conditions are polled with a deadline, never slept for.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use comb_api::{Comb, CombSpec, CombStatus, DEFAULT_GROUP, ManagedObject};
use comb_federation::engine::borrow::{BorrowEnv, Controlling, resolution};
use comb_federation::engine::class::{ClassRegistry, CombClass, CombInstance, Settings};
use comb_federation::engine::kube_ops::KubeOps;
use comb_federation::engine::reconcile::{
    Dependency, DependencyResolver, StepEnv, UpstreamResolution, reconcile,
};
use comb_federation::engine::tenancy::{GroupKind, Tenancy};
use comb_federation::error::{Error, Result};
use comb_kubeconfigs::ClientPool;
use comb_sandbox::controls::{Controls, Fault};
use comb_sandbox::{Backend, Clusters, SandboxOptions};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::time::Instant;

/// The namespace every test Comb lives in.
pub const NS: &str = "platform";
/// The request that writes a Comb's status, as the sandbox counts it.
pub const STATUS_WRITE: &str = "update combs.comb.internal/status";
/// The user the tests' own reads impersonate, so that [`Cluster::requests`] can leave them out.
pub const OBSERVER: &str = "comb-test-observer";

/// One sandbox cluster with the engine's client over it.
pub struct Cluster {
    clusters: Clusters,
    pub controls: Controls,
    pub client: kube::Client,
    pub pool: ClientPool,
    pub ops: KubeOps,
    /// Reads of the test itself, as [`OBSERVER`] (in `system:masters`).
    observer: KubeOps,
    registry: ClassRegistry,
    settings: Settings,
}

impl Cluster {
    pub async fn start() -> Cluster {
        let options = SandboxOptions {
            clusters: vec!["test".into()],
            pod_ready_delay: Duration::ZERO,
            ..SandboxOptions::default()
        };
        let clusters = Clusters::start(Backend::from_env(), options, None)
            .await
            .expect("sandbox starts");
        let kubeconfig = clusters.kubeconfig().build();
        let observer = KubeOps::new(observer_client(kubeconfig.clone(), "test").await);
        let pool = ClientPool::from_kubeconfig(kubeconfig, "the test sandbox");
        let client = pool.client("test").await.expect("client");
        let crd = comb_api::custom_resource_definition(DEFAULT_GROUP).expect("crd");
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(&PostParams::default(), &crd)
            .await
            .expect("crd created");
        let cluster = Cluster {
            controls: clusters.controls("test").expect("controls of the cluster"),
            ops: KubeOps::new(client.clone()),
            observer,
            client,
            pool,
            clusters,
            registry: ClassRegistry::with_builtins(),
            settings: Settings::default(),
        };
        cluster.namespace(NS).await;
        // A real kube-apiserver serves a new CRD a moment after creating it.
        let combs = cluster.combs();
        cluster
            .wait_until("the Comb CRD served", async |_| {
                combs.list(&Default::default()).await.is_ok()
            })
            .await;
        cluster.reset_requests();
        cluster
    }

    pub fn backend(&self) -> Backend {
        self.clusters.backend()
    }

    /// The tenancy of the Combs built from now on (the default: own namespace only, nothing
    /// cluster-scoped).
    pub fn set_tenancy(&mut self, tenancy: Tenancy) {
        self.settings.tenancy = tenancy;
    }

    /// Creates namespace `name`.
    pub async fn namespace(&self, name: &str) {
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .expect("namespace created");
    }

    /// One step of a Comb whose upstream its CR or class names (`spec.upstream`), resolved as
    /// the controller would without a layer's say.
    pub async fn reconcile_resolved(&self, comb: &mut CombInstance) -> CombStatus {
        let env = BorrowEnv::new(self.pool.clone(), "test");
        let upstream = resolution(comb, &Controlling::none(), &env).await;
        self.reconcile_upstream(comb, upstream).await
    }

    /// Registers another class (one instance shared by every Comb of it).
    pub fn register(&mut self, class: Arc<dyn CombClass>) {
        self.registry.register_shared(class);
    }

    /// One step with the given answer of step 1.
    pub async fn reconcile_upstream(
        &self,
        comb: &mut CombInstance,
        upstream: UpstreamResolution,
    ) -> CombStatus {
        let env = StepEnv {
            ops: &self.ops,
            resolver: None,
        };
        reconcile(comb, env, upstream).await
    }

    fn combs(&self) -> Api<Comb> {
        Api::namespaced_with(
            self.client.clone(),
            NS,
            &comb_api::api_resource(DEFAULT_GROUP),
        )
    }

    /// Creates the Comb CR `name` with `spec` and builds the Comb from what was stored.
    pub async fn comb(&self, name: &str, spec: Value) -> CombInstance {
        let spec: CombSpec = serde_json::from_value(spec).expect("a spec");
        let stored = self
            .combs()
            .create(
                &PostParams::default(),
                &Comb::new(DEFAULT_GROUP, NS, name, spec),
            )
            .await
            .expect("Comb created");
        self.build(&stored).await
    }

    /// Changes the CR's spec (a merge patch) and builds the Comb anew from it, as the
    /// controller does when a spec changes. The recorded status is the CR's.
    pub async fn edit(&self, comb: &CombInstance, spec_patch: Value) -> CombInstance {
        let patched = self
            .combs()
            .patch(
                comb.name(),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec_patch})),
            )
            .await
            .expect("spec patched");
        self.build(&patched).await
    }

    async fn build(&self, cr: &Comb) -> CombInstance {
        self.registry
            .build(cr, &self.settings, &|_: &CombInstance| false)
            .await
            .expect("the Comb builds")
    }

    /// The CR as the cluster has it now.
    pub async fn cr(&self, name: &str) -> Comb {
        self.combs().get(name).await.expect("Comb exists")
    }

    /// One local reconcile step without a dependency resolver.
    pub async fn reconcile(&self, comb: &mut CombInstance) -> CombStatus {
        self.reconcile_with(comb, None).await
    }

    pub async fn reconcile_with(
        &self,
        comb: &mut CombInstance,
        resolver: Option<&dyn DependencyResolver>,
    ) -> CombStatus {
        let env = StepEnv {
            ops: &self.ops,
            resolver,
        };
        reconcile(comb, env, UpstreamResolution::Local).await
    }

    /// Reconciles until the step finds the Comb plainly healthy (`Running`, `Healthy`,
    /// `healthy`), stepping again after a short pause until [`Cluster::deadline`].
    pub async fn settle(&self, comb: &mut CombInstance) -> CombStatus {
        let deadline = self.deadline();
        loop {
            let status = self.reconcile(comb).await;
            let ready = status.ready().expect("Ready");
            if ready.reason.as_ref().map(|r| r.as_str()) == Some("Healthy")
                && ready.message.as_deref() == Some("healthy")
            {
                return status;
            }
            if Instant::now() > deadline {
                panic!("{} did not settle: {status:?}", comb.name());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until `check` holds, asking again after a short pause until [`Cluster::deadline`].
    pub async fn wait_until(&self, what: &str, check: impl AsyncFn(&Cluster) -> bool) {
        let deadline = self.deadline();
        while !check(self).await {
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// When a condition awaited from now on must hold: a real control plane's controllers take
    /// longer than the emulator's simulation.
    pub fn deadline(&self) -> Instant {
        Instant::now()
            + match self.backend() {
                Backend::Emulator => Duration::from_secs(20),
                Backend::Kube => Duration::from_secs(90),
            }
    }

    /// The object of `kind` named `name` in the test namespace (or cluster-scoped), if any.
    pub async fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        self.ops
            .get_opt(&resource(api_version, kind, name))
            .await
            .expect("get answers")
    }

    /// The object in the test namespace (or cluster-scoped) as the server has it now, read as
    /// [`OBSERVER`] (left out of [`Cluster::requests`]).
    pub async fn peek(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        self.peek_in(api_version, kind, NS, name).await
    }

    /// The object in `namespace` (ignored for a cluster-scoped kind), read as [`OBSERVER`].
    pub async fn peek_in(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        let resource = ManagedObject {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: Some(namespace.into()),
            name: name.into(),
        };
        self.observer
            .get_opt(&resource)
            .await
            .expect("peek answers")
    }

    /// The objects of a kind in the test namespace matching `label_selector`, read as
    /// [`OBSERVER`].
    pub async fn peek_list(&self, api_version: &str, kind: &str, selector: &str) -> Vec<Value> {
        self.observer
            .list(api_version, kind, Some(NS), selector)
            .await
            .expect("list answers")
    }

    /// Whether discovery names `api_version`/`kind` and its objects can be listed (a new CRD's
    /// kind is served a moment after the CRD is created), asked as [`OBSERVER`].
    pub async fn served(&self, api_version: &str, kind: &str) -> bool {
        self.observer.resource_type(api_version, kind).await.is_ok()
            && self
                .observer
                .list(api_version, kind, None, "")
                .await
                .is_ok()
    }

    /// The counted requests that wrote something (`create`, `update`, `patch`, `delete`,
    /// `deletecollection`), but for Comb status writes.
    pub fn writes_but_status(&self) -> Vec<String> {
        self.requests()
            .into_keys()
            .filter(|request| {
                ["create ", "update ", "patch ", "delete"]
                    .iter()
                    .any(|verb| request.starts_with(verb))
                    && request != STATUS_WRITE
            })
            .collect()
    }

    /// Counted API requests so far, by `<verb> <resource>`, but for the test's own reads (as
    /// [`OBSERVER`]).
    pub fn requests(&self) -> BTreeMap<String, u64> {
        let observed = self.controls.requests_as(OBSERVER);
        let mut requests = self.controls.requests();
        requests.retain(|request, count| {
            *count -= observed.get(request).copied().unwrap_or(0);
            *count > 0
        });
        requests
    }

    pub fn reset_requests(&self) {
        self.controls.reset_requests();
    }

    /// The next `count` requests with `method` on `path` answer `status` with `message`.
    pub fn fail(&self, method: &str, path: &str, status: u16, count: u64, message: &str) {
        let mut fault = Fault::status(method, path, status, count);
        fault.message = Some(message.to_string());
        self.controls.inject(fault);
    }
}

/// The pause between two looks at a condition.
const POLL: Duration = Duration::from_millis(50);

/// A client of `context` that impersonates [`OBSERVER`] in `system:masters`: it may read
/// everything on a real server too, and the controls count its requests apart.
async fn observer_client(kubeconfig: kube::config::Kubeconfig, context: &str) -> kube::Client {
    let options = kube::config::KubeConfigOptions {
        context: Some(context.into()),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("the sandbox kubeconfig");
    config.auth_info.impersonate = Some(OBSERVER.into());
    config.auth_info.impersonate_groups = Some(vec!["system:masters".into()]);
    kube::Client::try_from(config).expect("the observer's client")
}

/// The identity of an object in the test namespace (namespace ignored for cluster-scoped kinds).
pub fn resource(api_version: &str, kind: &str, name: &str) -> ManagedObject {
    ManagedObject {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: Some(NS.into()),
        name: name.into(),
    }
}

/// `(phase, Ready reason, Ready message)` of a status.
pub fn verdict(status: &CombStatus) -> (String, String, String) {
    let ready = status.ready().expect("Ready condition");
    (
        status
            .phase
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        ready
            .reason
            .as_ref()
            .map(|r| r.to_string())
            .unwrap_or_default(),
        ready.message.clone().unwrap_or_default(),
    )
}

/// `(phase, reason, message)` as owned strings, to compare with [`verdict`].
pub fn expect(phase: &str, reason: &str, message: &str) -> (String, String, String) {
    (phase.into(), reason.into(), message.into())
}

/// `kind/name` of every recorded managed resource.
pub fn managed(status: &CombStatus) -> Vec<String> {
    status
        .managed()
        .iter()
        .map(|r| format!("{}/{}", r.kind, r.name))
        .collect()
}

/// A Deployment of one replica of `image`, named `name`, selecting `app: name`.
pub fn deployment(name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": image}]}
            }
        }
    })
}

/// A ClusterIP Service `name` on `port`, selecting `app: name`.
pub fn service(name: &str, port: i32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"name": "client", "port": port}]}
    })
}

/// A ConfigMap `name` holding `data`.
pub fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

/// The spec of a `Manifests` Comb with these manifests and a `client` endpoint on 4222.
pub fn manifests_spec(manifests: Vec<Value>) -> Value {
    json!({"class": "Manifests", "config": {
        "manifests": manifests,
        "endpoints": [{"name": "client", "port": 4222}]
    }})
}

/// A tenancy that allows, besides a Comb's own namespace, these cluster-scoped Kinds.
pub fn allowing_cluster_scoped(kinds: &[GroupKind]) -> Tenancy {
    Tenancy {
        allow_cluster_scoped: kinds.to_vec(),
        ..Tenancy::default()
    }
}

/// A dependency with a fixed answer.
pub struct FixedDependency(pub Result<bool, String>);

#[async_trait]
impl Dependency for FixedDependency {
    async fn healthy(&self) -> Result<bool> {
        self.0.clone().map_err(Error::Class)
    }
}

/// What the test resolver answers for a reference.
#[derive(Clone)]
pub enum Answer {
    Missing,
    Healthy(bool),
    HealthFails(String),
    LookupFails(String),
    Panics,
}

/// A resolver answering from a table; unknown references are not found.
pub struct TableResolver(pub BTreeMap<String, Answer>);

#[async_trait]
impl DependencyResolver for TableResolver {
    async fn resolve(
        &self,
        reference: &str,
        _comb: &CombInstance,
    ) -> Result<Option<Arc<dyn Dependency>>> {
        match self.0.get(reference).cloned().unwrap_or(Answer::Missing) {
            Answer::Missing => Ok(None),
            Answer::Healthy(healthy) => Ok(Some(Arc::new(FixedDependency(Ok(healthy))))),
            Answer::HealthFails(message) => Ok(Some(Arc::new(FixedDependency(Err(message))))),
            Answer::LookupFails(message) => Err(Error::Class(message)),
            Answer::Panics => panic!("the resolver broke"),
        }
    }
}
