//! Sandbox clusters and the federation controller over them, for the controller tests.
//!
//! Every test starts its own clusters (Pods Ready at once, the Comb CRD installed) on the
//! backend `COMB_TEST_BACKEND` names (the emulator by default, or real kube-apiservers with
//! kwok) and runs the real controller on them through `kube::Client`. Conditions are awaited
//! with a deadline, never slept for.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use comb_api::{Comb, CombSpec, DEFAULT_GROUP};
use comb_federation::config::Config;
use comb_federation::controller::{
    BackoffPolicy, Controller, ControllerHandle, ControllerOptions, RunOutcome, Transition,
};
use comb_federation::engine::class::ClassRegistry;
use comb_federation::error::Result;
use comb_kubeconfigs::ClientPool;
use comb_sandbox::controls::Controls;
use comb_sandbox::{Backend, Clusters, ExtraContext, SandboxOptions, StoreOptions};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long any awaited condition may take before the test fails: a real control plane's
/// controllers take longer than the emulator's simulation.
pub static DEADLINE: std::sync::LazyLock<Duration> =
    std::sync::LazyLock::new(|| match Backend::from_env() {
        Backend::Emulator => Duration::from_secs(30),
        Backend::Kube => Duration::from_secs(90),
    });

/// Sandbox clusters, a client pool over them, and their test controls.
pub struct World {
    pub clusters: Clusters,
    pub pool: ClientPool,
}

impl World {
    /// Clusters `clusters` (a context each), extra `contexts` as (name, cluster, namespace), and
    /// `namespaces` as (context, namespace); the Comb CRD on every cluster.
    pub async fn start(
        clusters: &[&str],
        contexts: &[(&str, &str, &str)],
        namespaces: &[(&str, &str)],
    ) -> World {
        World::start_with(clusters, contexts, namespaces, StoreOptions::default()).await
    }

    /// [`World::start`] with store options (e.g. a short watch history); the real backend has
    /// no such options and ignores them.
    pub async fn start_with(
        clusters: &[&str],
        contexts: &[(&str, &str, &str)],
        namespaces: &[(&str, &str)],
        store: StoreOptions,
    ) -> World {
        init_logging();
        let options = SandboxOptions {
            clusters: clusters.iter().map(|c| c.to_string()).collect(),
            contexts: contexts
                .iter()
                .map(|(name, cluster, namespace)| ExtraContext {
                    name: name.to_string(),
                    cluster: cluster.to_string(),
                    namespace: Some(namespace.to_string()),
                })
                .collect(),
            pod_ready_delay: Duration::ZERO,
            store,
            ..SandboxOptions::default()
        };
        let clusters_started = Clusters::start(Backend::from_env(), options, None)
            .await
            .expect("sandbox starts");
        let pool =
            ClientPool::from_kubeconfig(clusters_started.kubeconfig().build(), "the test sandbox");
        let world = World {
            clusters: clusters_started,
            pool,
        };
        for cluster in clusters {
            let client = world.client(cluster).await;
            let crd = comb_api::custom_resource_definition(DEFAULT_GROUP).expect("crd");
            Api::<CustomResourceDefinition>::all(client.clone())
                .create(&PostParams::default(), &crd)
                .await
                .expect("CRD created");
            // A real kube-apiserver serves a new CRD a moment after creating it.
            let combs: Api<Comb> = Api::all_with(client, &comb_api::api_resource(DEFAULT_GROUP));
            eventually(&format!("the Comb CRD served on {cluster}"), || {
                let combs = combs.clone();
                async move { combs.list(&Default::default()).await.ok().map(|_| ()) }
            })
            .await;
        }
        for (context, namespace) in namespaces {
            let ns: Namespace =
                serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
            Api::<Namespace>::all(world.client(context).await)
                .create(&PostParams::default(), &ns)
                .await
                .expect("namespace created");
        }
        for cluster in clusters {
            world.controls(cluster).reset_requests();
        }
        world
    }

    pub fn backend(&self) -> Backend {
        self.clusters.backend()
    }

    pub async fn client(&self, context: &str) -> kube::Client {
        self.pool.client(context).await.expect("client")
    }

    /// The test controls of `cluster` (partition, faults, request counts).
    pub fn controls(&self, cluster: &str) -> Controls {
        self.clusters
            .controls(cluster)
            .expect("controls of the cluster")
    }

    /// A configuration for these clusters.
    pub fn config(&self, yaml: &str) -> Config {
        Config::from_yaml(yaml, "test config", None).expect("a valid config")
    }

    /// Starts the controller with the built-in classes and fast test retries.
    pub async fn run(&self, config: Config) -> Running {
        self.run_with(config, ClassRegistry::with_builtins(), test_options())
            .await
    }

    pub async fn run_with(
        &self,
        config: Config,
        registry: ClassRegistry,
        options: ControllerOptions,
    ) -> Running {
        let controller = Controller::with_pool(config, self.pool.clone(), registry, options)
            .await
            .expect("the controller starts");
        let handle = controller.handle();
        let transitions = controller.subscribe();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(controller.run(shutdown.clone()));
        Running {
            handle,
            transitions,
            shutdown,
            task: Some(task),
        }
    }

    pub async fn combs(&self, context: &str, namespace: &str) -> Api<Comb> {
        Api::namespaced_with(
            self.client(context).await,
            namespace,
            &comb_api::api_resource(DEFAULT_GROUP),
        )
    }

    /// Creates Comb `namespace/name` in `context` with `spec`.
    pub async fn create_comb(
        &self,
        context: &str,
        namespace: &str,
        name: &str,
        spec: Value,
    ) -> Comb {
        let spec: CombSpec = serde_json::from_value(spec).expect("a spec");
        self.combs(context, namespace)
            .await
            .create(
                &PostParams::default(),
                &Comb::new(DEFAULT_GROUP, namespace, name, spec),
            )
            .await
            .expect("Comb created")
    }

    /// Merge-patches the spec of Comb `namespace/name`.
    pub async fn patch_spec(&self, context: &str, namespace: &str, name: &str, patch: Value) {
        self.combs(context, namespace)
            .await
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": patch})),
            )
            .await
            .expect("spec patched");
    }

    pub async fn delete_comb(&self, context: &str, namespace: &str, name: &str) {
        self.combs(context, namespace)
            .await
            .delete(name, &DeleteParams::default())
            .await
            .expect("Comb deleted");
    }

    /// Waits until Comb `namespace/name` records `phase` (and `reason`, if given).
    pub async fn wait_phase(
        &self,
        context: &str,
        namespace: &str,
        name: &str,
        phase: &str,
        reason: Option<&str>,
    ) -> Comb {
        let api = self.combs(context, namespace).await;
        eventually(
            &format!("{context}:{namespace}/{name} to be {phase} {reason:?}"),
            || {
                let api = api.clone();
                async move {
                    let comb = api.get_opt(name).await.ok().flatten()?;
                    let status = comb.status.as_ref()?;
                    let ready_reason = status
                        .ready()
                        .and_then(|r| r.reason.as_ref())
                        .map(|r| r.as_str());
                    (status.phase.as_ref().map(|p| p.as_str()) == Some(phase)
                        && reason.is_none_or(|reason| ready_reason == Some(reason)))
                    .then_some(comb.clone())
                }
            },
        )
        .await
    }

    /// Waits until the object `get` returns satisfies `test`.
    pub async fn wait_object<K>(
        &self,
        api: &Api<K>,
        name: &str,
        what: &str,
        test: impl Fn(Option<&K>) -> bool,
    ) -> Option<K>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        eventually(what, || async {
            let object = api.get_opt(name).await.ok()?;
            test(object.as_ref()).then_some(object)
        })
        .await
    }
}

/// A running controller.
pub struct Running {
    pub handle: ControllerHandle,
    pub transitions: broadcast::Receiver<Transition>,
    pub shutdown: CancellationToken,
    task: Option<JoinHandle<Result<RunOutcome>>>,
}

impl Running {
    /// Stops the controller and returns its outcome.
    pub async fn stop(mut self) -> RunOutcome {
        self.shutdown.cancel();
        self.finish().await
    }

    /// Waits for the controller to return (`--once`).
    pub async fn finish(&mut self) -> RunOutcome {
        let task = self.task.take().expect("running");
        tokio::time::timeout(*DEADLINE * 4, task)
            .await
            .expect("the controller stops in time")
            .expect("the controller task does not panic")
            .expect("the controller runs")
    }

    /// Waits for a transition that `test` accepts.
    pub async fn transition(
        &mut self,
        what: &str,
        test: impl Fn(&Transition) -> bool,
    ) -> Transition {
        let deadline = tokio::time::Instant::now() + *DEADLINE;
        loop {
            match tokio::time::timeout_at(deadline, self.transitions.recv()).await {
                Ok(Ok(transition)) if test(&transition) => return transition,
                Ok(Ok(_)) | Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
                Ok(Err(error)) => panic!("waiting for {what}: {error}"),
                Err(_) => panic!("timed out waiting for {what}"),
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Logs to the test output when `COMB_TEST_LOG` holds a filter (e.g. `comb_federation=debug`).
fn init_logging() {
    if let Ok(filter) = std::env::var("COMB_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(comb_federation::logging::body_safe_filter(&filter))
            .with_test_writer()
            .try_init();
    }
}

/// Test retries: quick, so that tests are fast.
pub fn test_options() -> ControllerOptions {
    ControllerOptions {
        workers_per_layer: 4,
        backoff: BackoffPolicy {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(500),
        },
        pacing: BackoffPolicy {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(500),
        },
        watch_backoff: BackoffPolicy {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
        },
        ..ControllerOptions::default()
    }
}

/// Polls `check` until it answers, failing the test after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + *DEADLINE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A Manifests Comb: Deployment and Service `name` running `image`, endpoint `http:80`.
pub fn web(name: &str, image: &str) -> Value {
    json!({
        "class": "Manifests",
        "config": {
            "manifests": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                          "template": {"metadata": {"labels": {"app": name}},
                                       "spec": {"containers": [{"name": "main", "image": image}]}}}},
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                 "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80}]}}
            ],
            "endpoints": [{"name": "http", "port": 80}]
        }
    })
}
