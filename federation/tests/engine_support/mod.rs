//! A sandbox cluster and the engine over it, shared by the engine integration tests.
//!
//! Every test starts its own in-process cluster (`test`, namespace `platform`, the Comb CRD
//! installed, Pods Ready at once) and talks to it through the real `kube::Client`.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use comb_api::{Comb, CombResource, CombSpec, CombStatus, DEFAULT_GROUP};
use comb_federation::engine::borrow::{BorrowEnv, Controlling, resolution};
use comb_federation::engine::class::{ClassRegistry, CombClass, CombInstance, Settings};
use comb_federation::engine::kube_ops::KubeOps;
use comb_federation::engine::reconcile::{
    Dependency, DependencyResolver, StepEnv, UpstreamResolution, reconcile,
};
use comb_federation::engine::tenancy::{GroupKind, Tenancy};
use comb_federation::error::{Error, Result};
use comb_kubeconfigs::ClientPool;
use comb_sandbox::controls::{ClusterControls, Controls, Fault};
use comb_sandbox::sim::Simulation;
use comb_sandbox::{Sandbox, SandboxOptions, Store};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::time::Instant;

/// The namespace every test Comb lives in.
pub const NS: &str = "platform";
/// The request that writes a Comb's status, as the sandbox counts it.
pub const STATUS_WRITE: &str = "update combs.comb.internal/status";

/// One sandbox cluster with the engine's client over it.
pub struct Cluster {
    _sandbox: Sandbox,
    pub controls: Controls,
    pub store: Store,
    pub client: kube::Client,
    pub pool: ClientPool,
    pub ops: KubeOps,
    registry: ClassRegistry,
    settings: Settings,
}

impl Cluster {
    pub async fn start() -> Cluster {
        let controls = Arc::new(ClusterControls::default());
        let options = SandboxOptions {
            clusters: vec!["test".into()],
            pod_ready_delay: Duration::ZERO,
            extensions: vec![Arc::new(Simulation::default()), controls.clone()],
            ..SandboxOptions::default()
        };
        let sandbox = Sandbox::start(options).await.expect("sandbox starts");
        let pool = ClientPool::from_kubeconfig(sandbox.kubeconfig().build(), "the test sandbox");
        let client = pool.client("test").await.expect("client");
        let crd = comb_api::custom_resource_definition(DEFAULT_GROUP).expect("crd");
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(&PostParams::default(), &crd)
            .await
            .expect("crd created");
        let store = sandbox.cluster("test").expect("cluster").store().clone();
        let cluster = Cluster {
            controls: controls.get("test").expect("controls of the cluster"),
            store,
            ops: KubeOps::new(client.clone()),
            client,
            pool,
            _sandbox: sandbox,
            registry: ClassRegistry::with_builtins(),
            settings: Settings::default(),
        };
        cluster.namespace(NS).await;
        cluster
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
    /// `healthy`), looking again after each change the cluster makes to anything but Combs.
    pub async fn settle(&self, comb: &mut CombInstance) -> CombStatus {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut events = self.store.subscribe();
        loop {
            let status = self.reconcile(comb).await;
            let ready = status.ready().expect("Ready");
            if ready.reason.as_deref() == Some("Healthy")
                && ready.message.as_deref() == Some("healthy")
            {
                return status;
            }
            loop {
                match tokio::time::timeout_at(deadline, events.recv()).await {
                    Err(_) => panic!("{} did not settle: {status:?}", comb.name()),
                    Ok(Ok(event)) if event.resource.kind == "Comb" => continue,
                    Ok(_) => break,
                }
            }
        }
    }

    /// Waits until `check` holds for the cluster's objects, looking again after each change.
    pub async fn wait_until(&self, what: &str, check: impl Fn(&Cluster) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut events = self.store.subscribe();
        while !check(self) {
            if tokio::time::timeout_at(deadline, events.recv())
                .await
                .is_err()
            {
                panic!("timed out waiting for {what}");
            }
        }
    }

    /// The object of `kind` named `name` in the test namespace (or cluster-scoped), if any.
    pub async fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        self.ops
            .get_opt(&resource(api_version, kind, name))
            .await
            .expect("get answers")
    }

    /// The object as the store has it now (no request counted).
    pub fn peek(&self, group: &str, kind: &str, name: &str) -> Option<Value> {
        self.peek_in(group, kind, NS, name)
    }

    /// The object in `namespace` (ignored for a cluster-scoped kind) as the store has it now.
    pub fn peek_in(&self, group: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let resource_type = self.store.resource_type(group, kind)?;
        let namespace = resource_type.namespaced.then_some(namespace);
        self.store.get(&resource_type, namespace, name).ok()
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

    /// Counted API requests so far, by `<verb> <resource>`.
    pub fn requests(&self) -> BTreeMap<String, u64> {
        self.controls.requests()
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

/// The identity of an object in the test namespace (namespace ignored for cluster-scoped kinds).
pub fn resource(api_version: &str, kind: &str, name: &str) -> CombResource {
    CombResource {
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
        status.phase.clone().unwrap_or_default(),
        ready.reason.clone().unwrap_or_default(),
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
