//! Sandbox clusters for the borrowing tests: `prod` and `dev` on two API servers, and `staging`,
//! a second context on prod's server whose Combs live in namespace `staging`. Each context is a
//! layer of the same name. Steps are driven directly (resolution, then one reconcile step), the
//! way the federation controller runs them.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use comb_api::{Comb, CombSpec, CombStatus, DEFAULT_GROUP, UpstreamSpec};
use comb_federation::engine::borrow::{BorrowEnv, Controlling, resolution};
use comb_federation::engine::class::{ClassRegistry, CombInstance, Settings};
use comb_federation::engine::kube_ops::KubeOps;
use comb_federation::engine::reconcile::{StepEnv, reconcile};
use comb_kubeconfigs::ClientPool;
use comb_sandbox::controls::{ClusterControls, Controls};
use comb_sandbox::sim::Simulation;
use comb_sandbox::{ExtraContext, Sandbox, SandboxOptions, Store};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::time::Instant;

/// How long a test waits for the clusters to do something.
const DEADLINE: Duration = Duration::from_secs(20);

/// The clusters, and the engine's view of them.
pub struct Layers {
    sandbox: Sandbox,
    controls: Arc<ClusterControls>,
    pub pool: ClientPool,
    registry: ClassRegistry,
    pub settings: Settings,
}

/// The cluster a context talks to.
pub fn cluster_of(context: &str) -> &'static str {
    match context {
        "dev" => "dev",
        _ => "prod",
    }
}

impl Layers {
    pub async fn start() -> Layers {
        let controls = Arc::new(ClusterControls::default());
        let options = SandboxOptions {
            clusters: vec!["prod".into(), "dev".into()],
            contexts: vec![ExtraContext {
                name: "staging".into(),
                cluster: "prod".into(),
                namespace: Some("staging".into()),
            }],
            pod_ready_delay: Duration::ZERO,
            extensions: vec![Arc::new(Simulation::default()), controls.clone()],
            ..SandboxOptions::default()
        };
        let sandbox = Sandbox::start(options).await.expect("sandbox starts");
        let pool = ClientPool::from_kubeconfig(sandbox.kubeconfig().build(), "the test sandbox");
        let layers = Layers {
            sandbox,
            controls,
            pool,
            registry: ClassRegistry::with_builtins(),
            settings: Settings::default(),
        };
        for (context, namespaces) in [
            ("prod", &["platform", "staging"][..]),
            ("dev", &["platform"]),
        ] {
            let client = layers.client(context).await;
            let crd = comb_api::custom_resource_definition(DEFAULT_GROUP).expect("crd");
            Api::<CustomResourceDefinition>::all(client.clone())
                .create(&PostParams::default(), &crd)
                .await
                .expect("crd created");
            for namespace in namespaces {
                let namespace: Namespace =
                    serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
                Api::<Namespace>::all(client.clone())
                    .create(&PostParams::default(), &namespace)
                    .await
                    .expect("namespace created");
            }
        }
        layers
    }

    pub async fn client(&self, context: &str) -> kube::Client {
        self.pool
            .client(context)
            .await
            .expect("client of the context")
    }

    pub async fn ops(&self, context: &str) -> KubeOps {
        KubeOps::new(self.client(context).await)
    }

    /// The test controls of a cluster (`prod` or `dev`).
    pub fn controls(&self, cluster: &str) -> Controls {
        self.controls.get(cluster).expect("controls of the cluster")
    }

    pub fn store(&self, cluster: &str) -> Store {
        self.sandbox
            .cluster(cluster)
            .expect("cluster")
            .store()
            .clone()
    }

    /// The federation's view for the Combs of `context`: its layer's context, every layer.
    pub fn env(&self, context: &str) -> BorrowEnv {
        let mut env = BorrowEnv::new(self.pool.clone(), context);
        env.layers = ["prod", "staging", "dev"]
            .iter()
            .map(|layer| (layer.to_string(), layer.to_string()))
            .collect::<BTreeMap<_, _>>();
        env
    }

    async fn combs(&self, context: &str, namespace: &str) -> Api<Comb> {
        Api::namespaced_with(
            self.client(context).await,
            namespace,
            &comb_api::api_resource(DEFAULT_GROUP),
        )
    }

    /// Creates the Comb CR `namespace/name` in `context` and builds the Comb from what was
    /// stored.
    pub async fn comb(
        &self,
        context: &str,
        namespace: &str,
        name: &str,
        spec: Value,
    ) -> CombInstance {
        let spec: CombSpec = serde_json::from_value(spec).expect("a spec");
        let stored = self
            .combs(context, namespace)
            .await
            .create(
                &PostParams::default(),
                &Comb::new(DEFAULT_GROUP, namespace, name, spec),
            )
            .await
            .expect("Comb created");
        self.build(&stored).await
    }

    /// Changes the spec (a merge patch) and builds the Comb anew, as the controller does when a
    /// spec changes. The recorded status is the CR's.
    pub async fn edit(
        &self,
        context: &str,
        comb: &CombInstance,
        spec_patch: Value,
    ) -> CombInstance {
        let patched = self
            .combs(context, comb.namespace())
            .await
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

    /// The recorded status of `namespace/name` in `context`, as the API server has it.
    pub async fn recorded(&self, context: &str, namespace: &str, name: &str) -> CombStatus {
        let cr = self
            .combs(context, namespace)
            .await
            .get(name)
            .await
            .expect("Comb exists");
        cr.status.unwrap_or_default()
    }

    /// One step: resolution (the controlling code first), then reconcile.
    pub async fn step(
        &self,
        context: &str,
        comb: &mut CombInstance,
        controlling: &Controlling,
    ) -> CombStatus {
        let env = self.env(context);
        let upstream = resolution(comb, controlling, &env).await;
        let ops = self.ops(context).await;
        reconcile(
            comb,
            StepEnv {
                ops: &ops,
                resolver: None,
            },
            upstream,
        )
        .await
    }

    /// Steps until `done` holds for the recorded status, looking again after each change the
    /// clusters make to anything but Combs.
    pub async fn settle(
        &self,
        context: &str,
        comb: &mut CombInstance,
        controlling: &Controlling,
        done: impl Fn(&CombStatus) -> bool,
    ) -> CombStatus {
        let deadline = Instant::now() + DEADLINE;
        let mut events = self.store(cluster_of(context)).subscribe();
        loop {
            let status = self.step(context, comb, controlling).await;
            if done(&status) {
                return status;
            }
            loop {
                match tokio::time::timeout_at(deadline, events.recv()).await {
                    Err(_) => panic!("{} did not settle in {context}: {status:#?}", comb.name()),
                    Ok(Ok(event)) if event.resource.kind == "Comb" => continue,
                    Ok(_) => break,
                }
            }
        }
    }

    /// Waits until `check` holds, looking again after each change in `cluster`.
    pub async fn wait_until(&self, cluster: &str, what: &str, check: impl Fn(&Store) -> bool) {
        let deadline = Instant::now() + DEADLINE;
        let store = self.store(cluster);
        let mut events = store.subscribe();
        while !check(&store) {
            if tokio::time::timeout_at(deadline, events.recv())
                .await
                .is_err()
            {
                panic!("timed out waiting for {what}");
            }
        }
    }

    /// The object of `group`/`kind` named `name` in `namespace` of `cluster`, as the store has it
    /// (no request counted).
    pub fn peek(
        &self,
        cluster: &str,
        group: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        peek(&self.store(cluster), group, kind, namespace, name)
    }
}

/// An object as a store has it.
pub fn peek(store: &Store, group: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
    let resource_type = store.resource_type(group, kind)?;
    store.get(&resource_type, Some(namespace), name).ok()
}

/// The controlling code borrowing with `answer` (e.g. the layer's borrow).
pub fn borrow(layer: &str, answer: Value) -> Controlling {
    Controlling::new(
        format!("the borrow of layer {layer}"),
        UpstreamSpec::Declared(answer.as_object().cloned().expect("an object")),
    )
}

/// The phase, Ready reason and Ready message of a status.
pub fn verdict(status: &CombStatus) -> (String, String, String) {
    let ready = status.ready().expect("a Ready condition");
    (
        status.phase.clone().unwrap_or_default(),
        ready.reason.clone().unwrap_or_default(),
        ready.message.clone().unwrap_or_default(),
    )
}

/// The recorded endpoints as `(name, port, cluster)`.
pub fn endpoints(status: &CombStatus) -> Vec<(String, i32, Option<String>)> {
    status
        .endpoint_list()
        .iter()
        .map(|e| (e.name.clone(), e.port, e.cluster.clone()))
        .collect()
}

/// The recorded managed resources as `Kind/name`.
pub fn managed(status: &CombStatus) -> Vec<String> {
    status
        .managed()
        .iter()
        .map(|r| format!("{}/{}", r.kind, r.name))
        .collect()
}

/// A `Manifests` spec: Deployment and Service `db` (type `service_type`) on port 5432, and the
/// endpoint `postgres` (with `external` when given).
pub fn db_spec(service_type: &str, external: Option<&str>) -> Value {
    let mut endpoint = json!({"name": "postgres", "port": 5432});
    if let Some(external) = external {
        endpoint["external"] = json!(external);
    }
    json!({"class": "Manifests", "config": {
        "endpoints": [endpoint],
        "manifests": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "db"},
             "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "db"}},
                      "template": {"metadata": {"labels": {"app": "db"}},
                                   "spec": {"containers": [{"name": "postgres", "image": "postgres:17"}]}}}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
             "spec": {"type": service_type, "selector": {"app": "db"},
                      "ports": [{"name": "postgres", "port": 5432}]}}
        ]
    }})
}
