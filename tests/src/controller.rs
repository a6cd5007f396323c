//! The federation controller over the kit's clusters, for the controller tests: the real
//! controller runs on them through `kube::Client`, and what it does is awaited with the kit's
//! deadline, never slept for.

use std::time::Duration;

use comb_api::Comb;
use comb_federation::config::Config;
use comb_federation::controller::{
    BackoffPolicy, Controller, ControllerHandle, ControllerOptions, LayersOnDemand, RunOutcome,
    Transition,
};
use comb_federation::engine::class::ClassRegistry;
use comb_federation::error::Result;
use comb_kubeconfigs::ClientPool;
use comb_sandbox::StoreOptions;
use comb_sandbox::controls::Controls;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::Value;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{Backend, Setup, wait_until};

/// The kit's clusters and a client pool over them.
pub struct World {
    pub kit: crate::World,
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
        let mut setup = Setup::clusters(clusters.iter().copied()).store(store);
        for (name, cluster, namespace) in contexts {
            setup = setup.context(name, cluster, namespace);
        }
        for (context, namespace) in namespaces {
            setup = setup.namespace(context, namespace);
        }
        let kit = setup.start().await;
        World {
            pool: kit.pool.clone(),
            kit,
        }
    }

    /// The clusters `setup` says (dead contexts and all), the Comb CRD on every cluster.
    pub async fn from_setup(setup: Setup) -> World {
        init_logging();
        let kit = setup.start().await;
        World {
            pool: kit.pool.clone(),
            kit,
        }
    }

    /// Starts the layers on demand of `config` (its `layerTemplates`, the CombLayers of its
    /// `layerContext`) beside `controller`, the file's layers' (they run while it reconciles),
    /// with test retries.
    pub fn run_layers_on_demand(&self, config: Config, controller: &Running) -> OnDemand {
        let on_demand = LayersOnDemand::new(
            config,
            self.pool.clone(),
            ClassRegistry::with_builtins(),
            test_options(),
        )
        .while_reconciling(controller.handle.clone());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(on_demand.run(shutdown.clone()));
        OnDemand {
            shutdown,
            task: Some(task),
        }
    }

    pub fn backend(&self) -> Backend {
        self.kit.backend()
    }

    /// The clusters themselves (the emulator's store).
    pub fn clusters(&self) -> &comb_sandbox::Clusters {
        self.kit.clusters()
    }

    pub async fn client(&self, context: &str) -> kube::Client {
        self.pool.client(context).await.expect("client")
    }

    /// The test controls of `cluster` (partition, faults, request counts).
    pub fn controls(&self, cluster: &str) -> Controls {
        self.kit.controls(cluster)
    }

    /// A configuration for these clusters.
    pub fn config(&self, yaml: &str) -> Config {
        Config::from_yaml(yaml, "test config", None).expect("a valid config")
    }

    /// Starts the controller with the built-in classes and fast test retries.
    pub async fn run(&self, config: Config) -> Running {
        self.run_options(config, test_options()).await
    }

    /// The controller with the built-in classes and `options`.
    pub async fn run_options(&self, config: Config, options: ControllerOptions) -> Running {
        self.run_with(config, ClassRegistry::with_builtins(), options)
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

    /// `rules` in `namespace` of `context` for the service account `subject` (`NAMESPACE/NAME`),
    /// by a Role and a RoleBinding named `name`: what a real API server needs to let an account
    /// comb impersonates act (the emulator authorizes every request).
    pub async fn grant(
        &self,
        context: &str,
        namespace: &str,
        name: &str,
        subject: &str,
        rules: Value,
    ) {
        let (subject_namespace, subject_name) =
            subject.split_once('/').expect("a subject NAMESPACE/NAME");
        let client = self.client(context).await;
        let role: Role = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": namespace}, "rules": rules
        }))
        .expect("a Role");
        Api::<Role>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &role)
            .await
            .expect("the Role is created");
        let binding: RoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": subject_name,
                          "namespace": subject_namespace}]
        }))
        .expect("a RoleBinding");
        Api::<RoleBinding>::namespaced(client, namespace)
            .create(&PostParams::default(), &binding)
            .await
            .expect("the RoleBinding is created");
    }

    pub async fn combs(&self, context: &str, namespace: &str) -> Api<Comb> {
        self.kit.combs(context, namespace).await
    }

    /// Creates Comb `namespace/name` in `context` with `spec`.
    pub async fn create_comb(
        &self,
        context: &str,
        namespace: &str,
        name: &str,
        spec: Value,
    ) -> Comb {
        self.kit.create_comb(context, namespace, name, spec).await
    }

    /// Merge-patches the spec of Comb `namespace/name`.
    pub async fn patch_spec(&self, context: &str, namespace: &str, name: &str, patch: Value) {
        self.kit
            .patch_comb_spec(context, namespace, name, patch)
            .await;
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
        wait_until(
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

    /// Waits until Comb `namespace/name` of `context` is gone (its finalizer done).
    pub async fn wait_gone(&self, context: &str, namespace: &str, name: &str) {
        let combs = self.combs(context, namespace).await;
        wait_until(format!("Comb {namespace}/{name} to be gone"), async || {
            combs
                .get_opt(name)
                .await
                .expect("the read answers")
                .is_none()
        })
        .await;
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
        wait_until(what, || async {
            let object = api.get_opt(name).await.ok()?;
            test(object.as_ref()).then_some(object)
        })
        .await
    }
}

/// Layers on demand, running.
pub struct OnDemand {
    pub shutdown: CancellationToken,
    task: Option<JoinHandle<Result<()>>>,
}

impl OnDemand {
    /// Stops them; the layers' controllers stop with them.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(crate::deadline() * 4, task)
                .await
                .expect("the layers on demand stop in time")
                .expect("the layers on demand do not panic")
                .expect("the layers on demand run");
        }
    }
}

impl Drop for OnDemand {
    fn drop(&mut self) {
        self.shutdown.cancel();
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
        tokio::time::timeout(crate::deadline() * 4, task)
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
        let deadline = tokio::time::Instant::now() + crate::deadline();
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

/// The Events about Comb `name` in `namespace` of `context`, as (type, reason, message),
/// oldest first.
pub async fn comb_events(
    events: &Api<k8s_openapi::api::core::v1::Event>,
    name: &str,
) -> Vec<(String, String, String)> {
    let mut list: Vec<k8s_openapi::api::core::v1::Event> = events
        .list(&kube::api::ListParams::default())
        .await
        .expect("the Events list")
        .items
        .into_iter()
        .filter(|event| {
            event.involved_object.kind.as_deref() == Some("Comb")
                && event.involved_object.name.as_deref() == Some(name)
        })
        .collect();
    list.sort_by_key(|event| event.first_timestamp.clone().map(|time| time.0));
    list.into_iter()
        .map(|event| {
            (
                event.type_.unwrap_or_default(),
                event.reason.unwrap_or_default(),
                event.message.unwrap_or_default(),
            )
        })
        .collect()
}
