//! comb-testkit: what every comb test suite stands on, in one place.
//!
//! - [`Setup`] starts clusters on the backend `COMB_TEST_BACKEND` names (the emulator by
//!   default, or real kube-apiservers with kwok), installs the Comb CRD, makes namespaces and
//!   builds the kubeconfig; the [`World`] it returns hands out clients per context, the test
//!   controls per cluster, an observer client, and writes the kubeconfig for the binary.
//! - [`wait_until`] is the one way to wait: it polls a condition until it holds and fails the
//!   test with what it waited for (and the last thing it saw) after [`deadline`]. Tests never
//!   sleep for a condition.
//! - [`OBSERVER`]: what a test reads to check its assertions it reads as an impersonated
//!   observer, whose requests [`World::requests`] leaves out, so request counts measure only
//!   the code under test.
//! - [`comb`] is the `comb` binary of this workspace, for the end-to-end tests; [`kubectl`]
//!   finds the real kubectl or says why a test skips (and fails in CI, where it must be there).
//! - With the `federation` feature (comb-federation's tests turn it on), comb-federation's
//!   side: `controller` runs the real controller on the kit's clusters, `engine` drives one
//!   reconcile step on one cluster, `upstream` the borrowing chain prod <- staging <- dev.
//!   [`fixtures`] holds the specs and manifests every suite builds on.
//!
//! On the real backend a control plane takes seconds to start. [`Setup::shared`] lets a test
//! that touches only its own namespaces use its test binary's one set of control planes (see
//! [`shared`]); its requests are counted apart by the user its clients impersonate. Tests that
//! inject faults or partitions keep clusters of their own (the default), because a proxy's
//! controls act on every request that passes it.

pub mod bin;
pub mod cli;
#[cfg(feature = "federation")]
pub mod controller;
#[cfg(feature = "federation")]
pub mod engine;
pub mod fixtures;
pub mod network;
pub mod process;
pub mod shared;
#[cfg(feature = "federation")]
pub mod upstream;

use std::collections::BTreeMap;
use std::fmt::{Debug, Display};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use comb_api::{Comb, CombSpec, DEFAULT_GROUP};
use comb_kubeconfigs::ClientPool;
use comb_kubeconfigs::write::KubeconfigBuilder;
use comb_sandbox::controls::Controls;
use comb_sandbox::sandbox::SANDBOX_USER;
use comb_sandbox::{Clusters, ExtraContext, SandboxOptions, StoreOptions};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use tokio::time::Instant;

pub use bin::comb;
pub use comb_sandbox::Backend;
pub use comb_sandbox::backend::emulator_only;
pub use comb_sandbox::backend::kubectl_or_skip as kubectl;
pub use comb_sandbox::real::record_skip;

/// The user the tests' own reads impersonate (in `system:masters`), so that
/// [`World::requests`] can leave them out.
pub const OBSERVER: &str = "comb-test-observer";

/// How long an awaited condition may take before the test fails: a real control plane's
/// controllers take longer than the emulator's simulation.
pub fn deadline() -> Duration {
    match Backend::from_env() {
        Backend::Emulator => Duration::from_secs(30),
        Backend::Kube => Duration::from_secs(90),
    }
}

/// The pause between two looks at a condition.
pub const POLL: Duration = Duration::from_millis(20);

/// What a condition of [`wait_until`] answers: `true`, `Some(value)` or `Ok(value)` when it
/// holds; `Err(seen)` names what it saw instead, for the message on timeout.
pub trait Outcome {
    type Value;
    fn into_result(self) -> Result<Self::Value, Option<String>>;
}

impl Outcome for bool {
    type Value = ();
    fn into_result(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

impl<T> Outcome for Option<T> {
    type Value = T;
    fn into_result(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Debug> Outcome for Result<T, E> {
    type Value = T;
    fn into_result(self) -> Result<T, Option<String>> {
        self.map_err(|seen| Some(format!("{seen:#?}")))
    }
}

/// Asks `check` until it holds, pausing [`POLL`] between looks, and fails the test after
/// [`deadline`] with `what` (and what `check` last saw, if it says).
pub async fn wait_until<O: Outcome>(
    what: impl Display,
    mut check: impl AsyncFnMut() -> O,
) -> O::Value {
    let limit = deadline();
    let deadline = Instant::now() + limit;
    loop {
        let seen = match check().await.into_result() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if Instant::now() > deadline {
            match seen {
                Some(seen) => panic!(
                    "timed out after {}s waiting for {what}; last seen: {seen}",
                    limit.as_secs()
                ),
                None => panic!("timed out after {}s waiting for {what}", limit.as_secs()),
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What to start: clusters (a context each), extra contexts and namespaces.
#[derive(Debug, Clone)]
pub struct Setup {
    clusters: Vec<String>,
    /// `(name, cluster, namespace)`.
    contexts: Vec<(String, String, String)>,
    /// `(context, namespace)`.
    namespaces: Vec<(String, String)>,
    dead_contexts: Vec<String>,
    store: StoreOptions,
    shared: bool,
    backend: Option<Backend>,
    network: Option<comb_sandbox::real::network::NetworkOptions>,
}

impl Setup {
    /// Clusters `names` with the Comb CRD installed on each.
    pub fn clusters<'a>(names: impl IntoIterator<Item = &'a str>) -> Setup {
        Setup {
            clusters: names.into_iter().map(str::to_string).collect(),
            contexts: Vec::new(),
            namespaces: Vec::new(),
            dead_contexts: Vec::new(),
            store: StoreOptions::default(),
            shared: false,
            backend: None,
            network: None,
        }
    }

    /// Another context on `cluster`'s server whose default namespace is `namespace` (not
    /// created: [`Setup::namespace`] does that).
    pub fn context(mut self, name: &str, cluster: &str, namespace: &str) -> Setup {
        self.contexts
            .push((name.into(), cluster.into(), namespace.into()));
        self
    }

    /// Namespace `namespace` in `context`'s cluster.
    pub fn namespace(mut self, context: &str, namespace: &str) -> Setup {
        self.namespaces.push((context.into(), namespace.into()));
        self
    }

    /// Namespace `namespace` in every cluster.
    pub fn namespace_everywhere(mut self, namespace: &str) -> Setup {
        for cluster in self.clusters.clone() {
            self.namespaces.push((cluster, namespace.into()));
        }
        self
    }

    /// A context `name` whose server does not exist (a port nobody listens on).
    pub fn dead_context(mut self, name: &str) -> Setup {
        self.dead_contexts.push(name.into());
        self
    }

    /// Store options of the emulator (e.g. a short watch history); the real backend has no such
    /// options and ignores them.
    pub fn store(mut self, store: StoreOptions) -> Setup {
        self.store = store;
        self
    }

    /// On `backend` whatever `COMB_TEST_BACKEND` says (for a test of what only one has).
    pub fn on(mut self, backend: Backend) -> Setup {
        self.backend = Some(backend);
        self
    }

    /// On the real backend, this test binary's one set of control planes ([`shared`]) instead
    /// of the test's own, with the test's namespaces named apart ([`World::ns`]). Only for tests
    /// that touch nothing but their own namespaces and use no test controls: a shared proxy's
    /// faults, partitions and counts would reach the other tests. The emulator starts in
    /// milliseconds: there every test keeps its own clusters.
    pub fn shared(mut self) -> Setup {
        self.shared = true;
        self
    }

    /// With the sandbox network ([`network::options_or_skip`] gives the options): clusters of
    /// the test's own on the real backend, whose Pods answer calls
    /// ([`Clusters::network`](comb_sandbox::Clusters::network)).
    pub fn network(mut self, options: comb_sandbox::real::network::NetworkOptions) -> Setup {
        self.network = Some(options);
        self.backend = Some(Backend::Kube);
        self.shared = false;
        self
    }

    pub async fn start(self) -> World {
        let backend = self.backend.unwrap_or_else(Backend::from_env);
        let shared = self.shared && backend == Backend::Kube;
        let suffix = if shared {
            format!("-t{}", NEXT_WORLD.fetch_add(1, Ordering::Relaxed))
        } else {
            String::new()
        };
        let ns = |namespace: &str| format!("{namespace}{suffix}");
        let (held, base) = if shared {
            let set = shared::clusters(&self.clusters).await;
            let base = set.kubeconfig();
            (Held::Shared(set), base)
        } else {
            let options = SandboxOptions {
                clusters: self.clusters.clone(),
                contexts: self
                    .contexts
                    .iter()
                    .map(|(name, cluster, namespace)| ExtraContext {
                        name: name.clone(),
                        cluster: cluster.clone(),
                        namespace: Some(namespace.clone()),
                    })
                    .collect(),
                pod_ready_delay: Duration::ZERO,
                store: self.store.clone(),
                network: self.network.clone(),
                ..SandboxOptions::default()
            };
            let clusters = Clusters::start(backend, options, None)
                .await
                .expect("the test clusters start");
            let base = clusters.kubeconfig();
            (Held::Own(Box::new(clusters)), base)
        };
        let mut builder = base;
        if shared {
            for (name, cluster, namespace) in &self.contexts {
                builder = builder.context(name, cluster, SANDBOX_USER, Some(&ns(namespace)));
            }
        }
        for name in &self.dead_contexts {
            // A port nobody listens on: bound, then released.
            let closed = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free port");
            builder = builder
                .cluster(name, &format!("http://{closed}"), None)
                .context(name, name, SANDBOX_USER, None);
        }
        let user = shared.then(|| format!("comb-test{suffix}"));
        let builder_kubeconfig = builder.clone().build();
        let world = World {
            held,
            kubeconfig: builder,
            pool: ClientPool::from_kubeconfig(
                impersonating(builder_kubeconfig, user.as_deref()),
                "the sandbox kubeconfig",
            ),
            contexts: self
                .contexts
                .iter()
                .map(|(name, cluster, _)| (name.clone(), cluster.clone()))
                .collect(),
            suffix,
            user,
            baseline: Default::default(),
            observers: Default::default(),
        };
        for cluster in &self.clusters {
            world.install_crd(cluster).await;
        }
        for (context, namespace) in &self.namespaces {
            world.namespace(context, namespace).await;
        }
        for cluster in &self.clusters {
            world.reset_requests(cluster);
        }
        world
    }
}

/// Gives every shared [`World`] of this process its own namespace suffix.
static NEXT_WORLD: AtomicU64 = AtomicU64::new(1);

enum Held {
    Own(Box<Clusters>),
    Shared(&'static shared::SharedClusters),
}

impl Held {
    fn clusters(&self) -> &Clusters {
        match self {
            Held::Own(clusters) => clusters,
            Held::Shared(set) => set.clusters(),
        }
    }
}

/// Running test clusters, the kubeconfig and a client pool over them.
pub struct World {
    held: Held,
    kubeconfig: KubeconfigBuilder,
    /// Clients of every context, as the code under test would build them.
    pub pool: ClientPool,
    /// Extra context -> its cluster.
    contexts: BTreeMap<String, String>,
    /// What the test's namespaces are named with on shared clusters (empty on its own).
    suffix: String,
    /// On shared clusters, the user every client of the test impersonates, by which the
    /// proxies' counts tell its requests from the other tests'.
    user: Option<String>,
    /// Counts at the last [`World::reset_requests`] on shared clusters, per cluster.
    baseline: std::sync::Mutex<BTreeMap<String, BTreeMap<String, u64>>>,
    /// The observer's client per context, built once.
    observers: tokio::sync::Mutex<BTreeMap<String, kube::Client>>,
}

impl World {
    pub fn backend(&self) -> Backend {
        self.held.clusters().backend()
    }

    /// Whether these clusters are the test binary's shared ones ([`Setup::shared`]).
    pub fn is_shared(&self) -> bool {
        matches!(self.held, Held::Shared(_))
    }

    /// The name namespace `namespace` of the test has on the server: itself on the test's own
    /// clusters, suffixed apart from the other tests' on shared ones.
    pub fn ns(&self, namespace: &str) -> String {
        format!("{namespace}{}", self.suffix)
    }

    /// The cluster a context talks to (a cluster's own context is named like it).
    pub fn cluster_of<'a>(&'a self, context: &'a str) -> &'a str {
        self.contexts
            .get(context)
            .map(String::as_str)
            .unwrap_or(context)
    }

    /// The clusters themselves (their URLs, the emulator's store).
    pub fn clusters(&self) -> &Clusters {
        self.held.clusters()
    }

    pub async fn client(&self, context: &str) -> kube::Client {
        self.pool
            .client(context)
            .await
            .unwrap_or_else(|error| panic!("a client of context {context}: {error}"))
    }

    /// A client of `context` that impersonates [`OBSERVER`] in `system:masters`: it may read
    /// everything on a real server too, and the controls count its requests apart.
    pub async fn observer(&self, context: &str) -> kube::Client {
        let mut observers = self.observers.lock().await;
        if let Some(client) = observers.get(context) {
            return client.clone();
        }
        let options = kube::config::KubeConfigOptions {
            context: Some(context.into()),
            ..Default::default()
        };
        let mut config = kube::Config::from_custom_kubeconfig(self.kubeconfig(), &options)
            .await
            .expect("the test kubeconfig");
        config.auth_info.impersonate = Some(OBSERVER.into());
        config.auth_info.impersonate_groups = Some(vec!["system:masters".into()]);
        let client = kube::Client::try_from(config).expect("the observer's client");
        observers.insert(context.to_string(), client.clone());
        client
    }

    /// The object of `api_version`/`kind` named `name` in `namespace` (ignored for a
    /// cluster-scoped kind) as `context`'s server has it now, read as [`OBSERVER`], so that
    /// [`World::requests`] leaves the read out.
    pub async fn peek(
        &self,
        context: &str,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<serde_json::Value> {
        let client = self.observer(context).await;
        let gvk = kube::core::GroupVersionKind::try_from(&kube::core::TypeMeta {
            api_version: api_version.into(),
            kind: kind.into(),
        })
        .unwrap_or_else(|error| panic!("{api_version} {kind}: {error}"));
        let (resource, capabilities) = kube::discovery::pinned_kind(&client, &gvk)
            .await
            .unwrap_or_else(|error| panic!("discovery of {api_version} {kind}: {error}"));
        let api: Api<kube::api::DynamicObject> = match capabilities.scope {
            kube::discovery::Scope::Namespaced => {
                Api::namespaced_with(client, namespace, &resource)
            }
            kube::discovery::Scope::Cluster => Api::all_with(client, &resource),
        };
        api.get_opt(name)
            .await
            .unwrap_or_else(|error| panic!("reading {kind} {namespace}/{name}: {error}"))
            .map(|object| serde_json::to_value(object).expect("an object as JSON"))
    }

    /// The test controls of `cluster` (request counts, faults, partitions). A test on shared
    /// clusters has none: they would act on the other tests' requests too.
    pub fn controls(&self, cluster: &str) -> Controls {
        assert!(
            !self.is_shared(),
            "a test on shared clusters may not use their controls: give it its own clusters"
        );
        self.held
            .clusters()
            .controls(cluster)
            .unwrap_or_else(|| panic!("no cluster {cluster}"))
    }

    /// Counted API requests to `cluster` since the last [`World::reset_requests`], by
    /// `<verb> <resource>`, but for the test's own reads (as [`OBSERVER`]). On shared clusters,
    /// only this test's (by the user its clients impersonate).
    pub fn requests(&self, cluster: &str) -> BTreeMap<String, u64> {
        let controls = self
            .held
            .clusters()
            .controls(cluster)
            .expect("the cluster's controls");
        let mut requests = match &self.user {
            Some(user) => controls.requests_as(user),
            None => controls.requests(),
        };
        let mut seen = controls.requests_as(OBSERVER);
        if self.user.is_some() {
            seen = self.baseline_of(cluster);
        }
        requests.retain(|request, count| {
            *count -= seen.get(request).copied().unwrap_or(0).min(*count);
            *count > 0
        });
        requests
    }

    /// Counts from zero again for [`World::requests`]: on the test's own clusters the
    /// proxies' counters are reset, on shared ones this test's are remembered as they are.
    pub fn reset_requests(&self, cluster: &str) {
        let Some(controls) = self.held.clusters().controls(cluster) else {
            return;
        };
        match &self.user {
            Some(user) => {
                self.baseline
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .insert(cluster.to_string(), controls.requests_as(user));
            }
            None => controls.reset_requests(),
        }
    }

    fn baseline_of(&self, cluster: &str) -> BTreeMap<String, u64> {
        self.baseline
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(cluster)
            .cloned()
            .unwrap_or_default()
    }

    /// The kubeconfig: a context per cluster, then the extra ones (on shared clusters, as the
    /// test's user).
    pub fn kubeconfig(&self) -> kube::config::Kubeconfig {
        impersonating(self.kubeconfig.clone().build(), self.user.as_deref())
    }

    /// Writes the kubeconfig (for the `comb` binary or kubectl).
    pub fn write_kubeconfig(&self, path: &Path) {
        let yaml = serde_saphyr::to_string(&self.kubeconfig()).expect("the kubeconfig as YAML");
        comb_kubeconfigs::write::write_atomic(path, yaml.as_bytes())
            .unwrap_or_else(|error| panic!("writing {}: {error}", path.display()));
    }

    /// Installs the Comb CRD on `cluster` and waits until it is served (a real kube-apiserver
    /// serves a new CRD a moment after creating it). Already there is fine.
    pub async fn install_crd(&self, cluster: &str) {
        let client = self.client(cluster).await;
        let crd = comb_api::custom_resource_definition(DEFAULT_GROUP).expect("the Comb CRD");
        create_crd(&client, cluster, &crd).await;
        let combs: Api<Comb> = Api::all_with(client, &comb_api::api_resource(DEFAULT_GROUP));
        wait_until(format!("the Comb CRD served on {cluster}"), || async {
            combs.list(&Default::default()).await.map(|_| ())
        })
        .await;
    }

    /// Installs the CombLayer CRD on `cluster` (the controller's `layerContext`) and waits
    /// until it is served. Already there is fine.
    pub async fn install_layer_crd(&self, cluster: &str) {
        let client = self.client(cluster).await;
        let crd =
            comb_api::layer_custom_resource_definition(DEFAULT_GROUP).expect("the CombLayer CRD");
        create_crd(&client, cluster, &crd).await;
        let layers: Api<comb_api::CombLayer> =
            Api::all_with(client, &comb_api::layer_api_resource(DEFAULT_GROUP));
        wait_until(format!("the CombLayer CRD served on {cluster}"), || async {
            layers.list(&Default::default()).await.map(|_| ())
        })
        .await;
    }

    /// The Combs of `namespace` (as the server names it) through `context`.
    pub async fn combs(&self, context: &str, namespace: &str) -> Api<Comb> {
        Api::namespaced_with(
            self.client(context).await,
            namespace,
            &comb_api::api_resource(DEFAULT_GROUP),
        )
    }

    /// Creates the Comb CR `namespace/name` with `spec` through `context`: what was stored.
    pub async fn create_comb(
        &self,
        context: &str,
        namespace: &str,
        name: &str,
        spec: serde_json::Value,
    ) -> Comb {
        let spec: CombSpec = serde_json::from_value(spec).expect("a Comb spec");
        let comb = Comb::new(DEFAULT_GROUP, namespace, name, spec);
        create_after_crd_change(&self.combs(context, namespace).await, &comb).await
    }

    /// Creates a Comb CR whose `spec` is raw JSON, one no typed client could write (a CRD
    /// without a schema lets it through): what was stored.
    pub async fn create_raw_comb(
        &self,
        context: &str,
        namespace: &str,
        name: &str,
        spec: serde_json::Value,
    ) -> DynamicObject {
        let combs: Api<DynamicObject> = Api::namespaced_with(
            self.client(context).await,
            namespace,
            &comb_api::api_resource(DEFAULT_GROUP),
        );
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": format!("{DEFAULT_GROUP}/v1"), "kind": "Comb",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }))
        .expect("a valid object");
        create_after_crd_change(&combs, &object).await
    }

    /// Merge-patches the spec of Comb `namespace/name` through `context`: what was stored.
    pub async fn patch_comb_spec(
        &self,
        context: &str,
        namespace: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> Comb {
        self.combs(context, namespace)
            .await
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": patch})),
            )
            .await
            .unwrap_or_else(|error| panic!("patching Comb {namespace}/{name}: {error}"))
    }

    /// Creates the test's namespace `namespace` ([`World::ns`]) in `context`'s cluster.
    pub async fn namespace(&self, context: &str, namespace: &str) {
        self.held
            .clusters()
            .create_namespace(self.cluster_of(context), &self.ns(namespace))
            .await
            .unwrap_or_else(|error| panic!("creating namespace {namespace}: {error}"));
    }

    /// Stops the test's own clusters (shared ones live as long as the test binary).
    pub async fn shutdown(self) {
        if let Held::Own(clusters) = self.held {
            clusters.shutdown().await;
        }
    }
}

/// `kubeconfig` with every user impersonating `user` in `system:masters`, if given.
fn impersonating(
    mut kubeconfig: kube::config::Kubeconfig,
    user: Option<&str>,
) -> kube::config::Kubeconfig {
    if let Some(user) = user {
        for named in &mut kubeconfig.auth_infos {
            if let Some(auth) = named.auth_info.as_mut() {
                auth.impersonate = Some(user.to_string());
                auth.impersonate_groups = Some(vec!["system:masters".into()]);
            }
        }
    }
    kubeconfig
}

/// Creates `object` through `api`: what was stored. A real kube-apiserver answers 503
/// ("apiserver is shutting down") for a moment after a CRD changed, to requests that reached
/// the kind's old storage while it is replaced: that is not the test's failure, so it is asked
/// again until the deadline.
pub async fn create_after_crd_change<K>(api: &Api<K>, object: &K) -> K
where
    K: kube::Resource
        + Clone
        + k8s_openapi::serde::Serialize
        + k8s_openapi::serde::de::DeserializeOwned
        + Debug,
{
    let key = format!(
        "{}/{}",
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default()
    );
    wait_until(format!("{key} created"), async || {
        match api.create(&PostParams::default(), object).await {
            Ok(stored) => Ok(stored),
            Err(kube::Error::Api(status)) if status.code == 503 => Err(status),
            Err(error) => panic!("creating {key}: {error}"),
        }
    })
    .await
}

/// Creates `crd` on `cluster`; already there is fine.
async fn create_crd(client: &kube::Client, cluster: &str, crd: &CustomResourceDefinition) {
    match Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), crd)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("creating a CRD on {cluster}: {error}"),
    }
}
