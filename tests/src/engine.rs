//! The engine over one test cluster, for the engine integration tests: the kit's clusters,
//! plus the engine's side (the class registry, one reconcile step, settling).
//!
//! A test's cluster is `test` (the Comb CRD installed, Pods Ready at once) on the backend
//! `COMB_TEST_BACKEND` names, and its Combs live in [`Cluster::ns`]. [`Cluster::start`] gives
//! it the test binary's shared cluster on the real backend, in a namespace of its own and with
//! its requests counted apart (see [`Setup::shared`]); [`Cluster::start_own`]
//! gives it a cluster of its own, namespace [`NS`], for a test that injects faults, writes
//! cluster-scoped objects or names the namespace in what it asserts. What the tests observe
//! they read as the kit's observer, whose requests the counts leave out.

use std::collections::BTreeMap;
use std::sync::Arc;

use comb_api::{Comb, CombStatus, LabelKeys, ManagedObject};
use comb_federation::engine::borrow::{BorrowEnv, Controlling, resolution};
use comb_federation::engine::class::{ClassRegistry, CombClass, CombInstance, Settings};
use comb_federation::engine::kube_ops::KubeOps;
use comb_federation::engine::reconcile::{
    Dependencies, DependencyVerdict, StepEnv, UpstreamResolution, reconcile,
};
use comb_federation::engine::tenancy::{GroupKind, Tenancy};
use comb_kubeconfigs::ClientPool;
use comb_sandbox::controls::Fault;
use kube::api::Api;
use serde_json::Value;

use crate::fixtures::manifests_spec;
use crate::{Backend, Setup, World, wait_until};

/// The namespace the Combs of a test on its own cluster live in.
pub const NS: &str = "platform";
/// The request that writes a Comb's status, as the sandbox counts it.
pub const STATUS_WRITE: &str = "update combs.comb.internal/status";

/// One test cluster with the engine's client over it.
pub struct Cluster {
    world: World,
    /// The namespace the test's Combs live in: [`NS`] on its own cluster.
    ns: String,
    pub client: kube::Client,
    pub pool: ClientPool,
    pub ops: KubeOps,
    /// Reads of the test itself, as the kit's observer.
    observer: KubeOps,
    registry: ClassRegistry,
    settings: Settings,
}

impl Cluster {
    /// The test binary's shared cluster on the real backend (the emulator's are the test's
    /// own anyway), in a namespace of the test's own.
    pub async fn start() -> Cluster {
        Cluster::with(Setup::clusters(["test"]).shared()).await
    }

    /// A cluster of the test's own, also on the real backend: for faults, cluster-scoped
    /// objects, and assertions that name [`NS`].
    pub async fn start_own() -> Cluster {
        Cluster::with(Setup::clusters(["test"])).await
    }

    async fn with(setup: Setup) -> Cluster {
        let world = setup.namespace("test", NS).start().await;
        let client = world.client("test").await;
        let cluster = Cluster {
            ns: world.ns(NS),
            ops: KubeOps::new(client.clone(), LabelKeys::default()),
            observer: KubeOps::new(world.observer("test").await, LabelKeys::default()),
            pool: world.pool.clone(),
            client,
            world,
            registry: ClassRegistry::with_builtins(),
            settings: Settings::default(),
        };
        cluster.reset_requests();
        cluster
    }

    /// The namespace the test's Combs live in.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    pub fn backend(&self) -> Backend {
        self.world.backend()
    }

    /// The tenancy of the Combs built from now on (the default: own namespace only, nothing
    /// cluster-scoped).
    pub fn set_tenancy(&mut self, tenancy: Tenancy) {
        self.settings.tenancy = tenancy;
    }

    /// Creates namespace `name`.
    pub async fn namespace(&self, name: &str) {
        self.world.namespace("test", name).await;
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
            dependencies: &Dependencies::Unknown,
            fallback: None,
            hold_progress_until: None,
        };
        let outcome = reconcile(comb, env, upstream).await;
        outcome.carry_into(comb);
        outcome.status
    }

    async fn combs(&self) -> Api<Comb> {
        self.world.combs("test", &self.ns).await
    }

    /// Creates the Comb CR `name` with `spec` and builds the Comb from what was stored.
    pub async fn comb(&self, name: &str, spec: Value) -> CombInstance {
        let stored = self.world.create_comb("test", &self.ns, name, spec).await;
        self.build(&stored).await
    }

    /// Changes the CR's spec (a merge patch) and builds the Comb anew from it, as the
    /// controller does when a spec changes. The recorded status is the CR's.
    pub async fn edit(&self, comb: &CombInstance, spec_patch: Value) -> CombInstance {
        let patched = self
            .world
            .patch_comb_spec("test", &self.ns, comb.name(), spec_patch)
            .await;
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
        self.combs().await.get(name).await.expect("Comb exists")
    }

    /// Writes `managed` as the `managedResources` the CR of Comb `name` records (the rest of
    /// its status as it is), as another writer of its status would (an older comb, a person);
    /// returns the CR as stored, for a Comb to adopt.
    pub async fn record_managed(&self, name: &str, managed: Vec<ManagedObject>) -> Comb {
        let mut cr = self.cr(name).await;
        let mut status = cr.status.take().unwrap_or_default();
        status.managed_resources = Some(managed);
        cr.status = Some(status);
        self.ops
            .update_comb_status("comb.internal", cr)
            .await
            .expect("the status is written")
    }

    /// One local reconcile step, nobody having looked at its dependencies.
    pub async fn reconcile(&self, comb: &mut CombInstance) -> CombStatus {
        self.reconcile_with(comb, &Dependencies::Unknown).await
    }

    /// One local reconcile step with its dependencies standing as `dependencies` say; `comb`
    /// is then what the next step starts from.
    pub async fn reconcile_with(
        &self,
        comb: &mut CombInstance,
        dependencies: &Dependencies,
    ) -> CombStatus {
        let env = StepEnv {
            ops: &self.ops,
            dependencies,
            fallback: None,
            hold_progress_until: None,
        };
        let outcome = reconcile(comb, env, UpstreamResolution::Local).await;
        outcome.carry_into(comb);
        outcome.status
    }

    /// Reconciles until the step finds the Comb plainly healthy (`Running`, `Healthy`,
    /// `healthy`).
    pub async fn settle(&self, comb: &mut CombInstance) -> CombStatus {
        let name = comb.name().to_string();
        wait_until(format!("{name} to settle"), async || {
            let status = self.reconcile(comb).await;
            let ready = status.ready().expect("Ready");
            if ready.reason.as_ref().map(|r| r.as_str()) == Some("Healthy")
                && ready.message.as_deref() == Some("healthy")
            {
                Ok(status)
            } else {
                Err(status)
            }
        })
        .await
    }

    /// The Comb `name` of `manifests` ([`Cluster::comb`]), settled ([`Cluster::settle`]).
    pub async fn settled(&self, name: &str, manifests: Vec<Value>) -> CombInstance {
        let mut comb = self.comb(name, manifests_spec(manifests)).await;
        self.settle(&mut comb).await;
        comb
    }

    /// Waits until `check` holds, with the kit's deadline.
    pub async fn wait_until(&self, what: &str, check: impl AsyncFn(&Cluster) -> bool) {
        wait_until(what, async || check(self).await).await
    }

    /// The object of `kind` named `name` in the test namespace (or cluster-scoped), if any.
    pub async fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        self.ops
            .get_whole(&self.resource(api_version, kind, name))
            .await
            .expect("get answers")
    }

    /// Writes `object` (in the test namespace unless it names one) by a forced server-side
    /// apply as field manager `manager`: what a person or another tool makes (`kubectl`), or
    /// another writer of comb's, never the engine's own step.
    pub async fn write_as(&self, manager: &str, object: &Value) {
        let mut object = object.clone();
        if object["metadata"].get("namespace").is_none() {
            object["metadata"]["namespace"] = Value::from(self.ns.clone());
        }
        let text = |key: &str| {
            object
                .pointer(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let target = ManagedObject::new(
            text("/apiVersion"),
            text("/kind"),
            Some(text("/metadata/namespace")),
            text("/metadata/name"),
        );
        self.ops
            .apply_as(&target, &object, manager)
            .await
            .expect("the object is written");
    }

    /// The identity of an object in the test's namespace (ignored for cluster-scoped kinds).
    pub fn resource(&self, api_version: &str, kind: &str, name: &str) -> ManagedObject {
        ManagedObject {
            namespace: Some(self.ns.clone()),
            ..resource(api_version, kind, name)
        }
    }

    /// The object in the test namespace (or cluster-scoped) as the server has it now, read as
    /// the kit's observer (left out of [`Cluster::requests`]).
    pub async fn peek(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        self.peek_in(api_version, kind, &self.ns, name).await
    }

    /// The object in `namespace` (ignored for a cluster-scoped kind), read as the kit's observer.
    pub async fn peek_in(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        self.world
            .peek("test", api_version, kind, namespace, name)
            .await
    }

    /// The objects of a kind in the test namespace matching `label_selector`, read as
    /// the kit's observer.
    pub async fn peek_list(&self, api_version: &str, kind: &str, selector: &str) -> Vec<Value> {
        self.observer
            .list_whole(api_version, kind, Some(&self.ns), selector)
            .await
            .expect("list answers")
    }

    /// Whether discovery names `api_version`/`kind` and its objects can be listed (a new CRD's
    /// kind is served a moment after the CRD is created), asked as the kit's observer.
    pub async fn served(&self, api_version: &str, kind: &str) -> bool {
        self.observer.resource_type(api_version, kind).await.is_ok()
            && self
                .observer
                .list_whole(api_version, kind, None, "")
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

    /// Fails the test, naming the requests, if anything but Comb status was written since the
    /// counts were reset.
    pub fn assert_only_status_written(&self) {
        assert!(
            self.writes_but_status().is_empty(),
            "nothing but the status is written: {:?}",
            self.requests()
        );
    }

    /// Counted API requests so far, by `<verb> <resource>`, but for the test's own reads.
    pub fn requests(&self) -> BTreeMap<String, u64> {
        self.world.requests("test")
    }

    pub fn reset_requests(&self) {
        self.world.reset_requests("test");
    }

    /// The next `count` requests with `method` on `path` answer `status` with `message`.
    pub fn fail(&self, method: &str, path: &str, status: u16, count: u64, message: &str) {
        let mut fault = Fault::status(method, path, status, count);
        fault.message = Some(message.to_string());
        self.world.controls("test").inject(fault);
    }
}

/// The identity of an object in [`NS`] (namespace ignored for cluster-scoped kinds).
pub fn resource(api_version: &str, kind: &str, name: &str) -> ManagedObject {
    ManagedObject {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: Some(NS.into()),
        name: name.into(),
        uid: None,
    }
}

/// A tenancy that allows, besides a Comb's own namespace, these cluster-scoped Kinds.
pub fn allowing_cluster_scoped(kinds: &[GroupKind]) -> Tenancy {
    Tenancy {
        allow_cluster_scoped: kinds.to_vec(),
        ..Tenancy::default()
    }
}

/// The dependencies of a step, each reference standing as its verdict says.
pub fn dependencies(verdicts: &[(&str, DependencyVerdict)]) -> Dependencies {
    Dependencies::Found {
        cycle: None,
        verdicts: verdicts
            .iter()
            .map(|(reference, verdict)| (reference.to_string(), verdict.clone()))
            .collect(),
    }
}
