//! One layer at run time: its Comb CRs as watched, what the controller keeps per Comb, its work
//! queue, its dependency graph and whether its API server answers.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use comb_api::{Comb, CombStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::value::RawValue;
use tokio::time::Instant;

use super::events::Announced;
use super::graph::DependencyGraph;
use super::queue::{Trigger, WorkQueue};
use super::triggers::{Source, StatusSignature, Versions, cr_trigger, status_signature};

use crate::config::{Fallback, Layer};
use crate::engine::borrow::BorrowEnv;
use crate::engine::class::{ClassRegistry, CombInstance, Settings};
use crate::engine::keys::{CombKey, dependency_key};
use crate::engine::kinds::ScopeLookup;
use crate::engine::kube_ops::KubeOps;
use crate::engine::reconcile::{DependencyVerdict, StepOutcome};
use crate::engine::render::RenderedItem;
use crate::error::{Error, Result};

/// kubectl apply's copy of what it applied, on every Comb a user applies.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A Comb's CR as the layer keeps it between steps: typed, as decoded, but for the class's
/// configuration (`spec.config`), which only the class reads when a step builds the Comb: it
/// is kept as the JSON text it came as. The configuration (the manifests) is most of a Comb,
/// and as `serde_json::Value`s it took several times its text (about 6 KiB of a
/// two-manifest Comb).
#[derive(Clone, Debug)]
pub struct KeptComb {
    /// The CR without its configuration.
    cr: Comb,
    config: Option<Box<RawValue>>,
}

impl KeptComb {
    pub fn new(mut cr: Comb) -> KeptComb {
        let config = cr.spec.config.take().map(|config| {
            // A map with string keys always encodes; were it not to, the `null` kept fails to
            // decode as a map when the Comb is built, which records BuildFailed (never an
            // empty configuration).
            serde_json::value::to_raw_value(&config).unwrap_or_else(|_| RawValue::NULL.to_owned())
        });
        KeptComb { cr, config }
    }

    /// A later version of the same CR: the kept spec is reused while the generation stays (a
    /// status write does not change the spec).
    fn next(&self, mut cr: Comb) -> KeptComb {
        let kept = &self.cr;
        let same_spec = cr.metadata.generation.is_some()
            && cr.metadata.uid == kept.metadata.uid
            && cr.metadata.generation == kept.metadata.generation
            && cr.spec_error == kept.spec_error;
        if !same_spec {
            return KeptComb::new(cr);
        }
        cr.spec = kept.spec.clone();
        KeptComb {
            cr,
            config: self.config.clone(),
        }
    }

    /// The whole CR. A kept configuration that does not decode again (it cannot: comb wrote
    /// its text) makes the spec fail to build, as a malformed spec does, never an empty one
    /// (a Comb without its manifests would prune everything).
    pub fn comb(&self) -> Comb {
        let mut comb = self.cr.clone();
        if let Some(text) = &self.config {
            match serde_json::from_str(text.get()) {
                Ok(config) => comb.spec.config = Some(config),
                Err(error) => {
                    comb.spec_error
                        .get_or_insert_with(|| format!("spec.config: {error}"));
                }
            }
        }
        comb
    }

    pub fn metadata(&self) -> &ObjectMeta {
        &self.cr.metadata
    }

    /// The recorded status.
    pub fn status(&self) -> Option<&CombStatus> {
        self.cr.status.as_ref()
    }
}

/// What the controller keeps about one Comb. A Comb is built for each step from its CR (that
/// is cheap) rather than kept, so that one copy of each spec is held, not four. Written only by
/// the methods of [`LayerRuntime`], each under the layer's one lock: a step's outcome is taken
/// in by [`LayerRuntime::record_step`] alone.
pub struct CombEntry {
    /// The latest CR known: as watched, or as our own write returned it, whichever is later.
    /// Without `managedFields`, which nothing here reads.
    cr: KeptComb,
    /// A Comb whose status could not be written keeps it in its in-memory CR for the next step
    /// to prune against (reference §6.8): kept until a status write succeeds. Boxed: rare, and
    /// a Comb instance is large beside the rest of an entry, which the layer holds for each Comb.
    unwritten: Option<Box<Built>>,
    /// Why the Comb of this uid and generation cannot be built.
    build_failure: Option<(Origin, String)>,
    /// Stepped at least once by this run.
    stepped: bool,
    /// When this run last wrote its status (a rollout's progress alone waits a while after).
    status_written_at: Option<std::time::Instant>,
    signature: StatusSignature,
    /// Which resourceVersion of the CR is the latest, by the watch's order.
    versions: Versions,
    /// When the recorded status last changed in a way others react to.
    changed_at: Instant,
    /// Counts what may change how the Comb stands: its CR, its objects, its upstream, its
    /// layer coming back. A dependency's verdict is kept for the count it was judged at.
    changes: u64,
    /// What its Events said (a new uid starts over).
    announced: Announced,
}

impl CombEntry {
    /// The phase of [`CombEntry::recorded_status`].
    pub fn recorded_phase(&self) -> Option<comb_api::Phase> {
        self.recorded_status()?.phase.clone()
    }

    /// What the Comb recorded last: the unwritten status, else the CR's.
    pub fn recorded_status(&self) -> Option<&CombStatus> {
        match &self.unwritten {
            Some(built) => built.comb.recorded_status(),
            None => self.cr.status(),
        }
    }

    /// Whether this run stepped it at least once.
    pub fn stepped(&self) -> bool {
        self.stepped
    }

    /// How long its recorded status has stayed the same, as others react to it.
    pub fn unchanged_for(&self) -> std::time::Duration {
        self.changed_at.elapsed()
    }

    fn new(cr: Comb, source: Source) -> CombEntry {
        let mut versions = Versions::default();
        versions.is_later(None, cr.metadata.resource_version.as_deref(), source);
        CombEntry {
            signature: status_signature(cr.status.as_ref()),
            versions,
            cr: KeptComb::new(cr),
            unwritten: None,
            build_failure: None,
            stepped: false,
            status_written_at: None,
            changed_at: Instant::now(),
            changes: 0,
            announced: Announced::default(),
        }
    }
}

/// How often the condition messages alone of a Pending or Blocked Comb are written: a change
/// of progress only (a rollout's `1 of 3 ready`, one fewer dependency waited on) is held back
/// until then after a status write, a transition never (the step's
/// [`StepEnv::hold_progress_until`](crate::engine::reconcile::StepEnv::hold_progress_until)).
pub const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The uid and generation of the CR a Comb was built from: a Comb is rebuilt when they change.
/// (The CR a built Comb holds changes with every status write, and may be a later generation
/// after a write that had to read the CR again, so it cannot tell.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    pub uid: Option<String>,
    pub generation: Option<i64>,
}

impl Origin {
    pub fn of(cr: &Comb) -> Origin {
        Origin::of_metadata(&cr.metadata)
    }

    fn of_metadata(metadata: &ObjectMeta) -> Origin {
        Origin {
            uid: metadata.uid.clone(),
            generation: metadata.generation,
        }
    }
}

/// A built Comb and the CR it was built from.
#[derive(Clone)]
pub struct Built {
    pub comb: CombInstance,
    pub origin: Origin,
}

impl Built {
    /// Whether it was built from `cr`'s uid and generation.
    pub fn is_of(&self, cr: &Comb) -> bool {
        self.origin == Origin::of(cr)
    }
}

/// What a dependent's step judges a Comb it depends on by (reference §6.3: the dependency's
/// live status, §8): the Comb built from its CR and, when it is local, its manifests rendered.
/// The layer keeps it for a Comb others depend on, for one [`Origin`], so that their steps do
/// not build and render it again each; their judgment still reads the live objects as they are
/// now (the watches' cache), and a borrowing dependency still asks its upstream.
///
/// The key is sufficient when the class is [`pure`](crate::engine::class::CombClass::pure):
/// a build reads the CR's name and namespace (one uid has one), its spec (a new spec is a new
/// generation) and the layer's settings and stub selection (both fixed for the layer's life);
/// the class's answers read that context alone; and a rendering adds what discovery says of
/// custom Kinds, which is why it is kept only when every object is of a built-in Kind. Another
/// class, a CR without a generation, or a render that asked discovery is made anew each time,
/// as before.
pub struct Judged {
    pub origin: Origin,
    pub comb: CombInstance,
    rendered: OnceLock<Arc<[RenderedItem]>>,
    /// The verdict on it, and the count of its entry's changes it was reached at: a dependent
    /// stepped before the next change takes it as it is, instead of looking again.
    verdict: Mutex<Option<(u64, DependencyVerdict)>>,
}

impl Judged {
    pub fn new(comb: CombInstance, origin: Origin) -> Judged {
        Judged {
            origin,
            comb,
            rendered: OnceLock::new(),
            verdict: Mutex::new(None),
        }
    }

    /// The verdict reached at `changes`, if one was.
    pub fn verdict_at(&self, changes: u64) -> Option<DependencyVerdict> {
        self.verdict
            .lock()
            .as_ref()
            .filter(|(at, _)| *at == changes)
            .map(|(_, verdict)| verdict.clone())
    }

    /// Keeps `verdict`, reached at `changes`.
    pub fn keep_verdict(&self, changes: u64, verdict: DependencyVerdict) {
        *self.verdict.lock() = Some((changes, verdict));
    }

    /// Whether it may be kept beyond the step that made it (see [`Judged`]).
    fn keepable(&self) -> bool {
        self.comb.is_pure() && self.origin.uid.is_some() && self.origin.generation.is_some()
    }

    /// Its manifests rendered: kept from before, else rendered now (and kept when no custom
    /// Kind's scope went into it). A rendering error is the dependency's, rendered again the
    /// next time.
    pub async fn rendered(&self, scopes: &dyn ScopeLookup) -> Result<Arc<[RenderedItem]>> {
        if let Some(items) = self.rendered.get() {
            return Ok(items.clone());
        }
        let items: Arc<[RenderedItem]> = self.comb.render(scopes).await?.into();
        if items.iter().all(RenderedItem::placed_without_discovery) {
            // Another step may have rendered the same meanwhile: either copy serves.
            let _ = self.rendered.set(items.clone());
        }
        Ok(items)
    }
}

/// What a CR change means.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrChange {
    /// Whether the Comb itself needs a step, and why.
    pub trigger: Option<Trigger>,
    /// Whether its status changed in a way dependents and borrowers react to.
    pub status_changed: bool,
}

/// Up or down, as the layer's watches and probes see its API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LayerState {
    /// Not listed yet, no failure yet.
    Starting,
    Up,
    Down,
}

/// The health of a layer, as `/debug/layers`, `/readyz` and `comb check` show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LayerStatus {
    pub name: String,
    pub context: String,
    pub state: LayerState,
    /// Since when the layer is in this state.
    pub since: jiff::Timestamp,
    /// Why it is down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Every Comb watch of the layer has listed once.
    pub listed: bool,
    pub combs: usize,
    pub queue_depth: usize,
}

struct Health {
    state: LayerState,
    since: jiff::Timestamp,
    error: Option<String>,
    listed_scopes: HashSet<usize>,
}

/// The layers at run time, in the configuration's order (a layer's index is its place here).
pub type Layers = [Arc<LayerRuntime>];

/// A layer at run time.
pub struct LayerRuntime {
    pub index: usize,
    pub layer: Layer,
    /// The engine's settings for the layer's Combs (its tenancy among them).
    pub settings: Settings,
    /// The layer's client, as the controller: watches, reads, the Combs' own status.
    pub ops: KubeOps,
    pub borrow_env: BorrowEnv,
    pub queue: WorkQueue,
    /// How many Comb watches the layer has (one per namespace, or one for all).
    scopes: usize,
    /// Boxed: the table keeps room for more entries than it holds, and an entry is over a KiB.
    store: Mutex<HashMap<CombKey, Box<CombEntry>>>,
    /// What dependents judge each Comb by that some Comb depends on; none for the others. Taken
    /// before `store` or `graph` when both are held.
    judged: Mutex<HashMap<CombKey, Arc<Judged>>>,
    graph: Mutex<DependencyGraph>,
    health: Mutex<Health>,
    /// Whether this replica steps the layer (always, but with sharding while it holds the
    /// layer's Lease): what only the stepping replica does (Events of cycles) asks it.
    holding: AtomicBool,
}

impl LayerRuntime {
    pub fn new(
        index: usize,
        layer: Layer,
        settings: Settings,
        ops: KubeOps,
        borrow_env: BorrowEnv,
        queue: WorkQueue,
    ) -> LayerRuntime {
        LayerRuntime {
            index,
            scopes: layer.namespaces.as_ref().map_or(1, Vec::len),
            layer,
            settings,
            ops,
            borrow_env,
            queue,
            store: Mutex::new(HashMap::new()),
            judged: Mutex::new(HashMap::new()),
            graph: Mutex::new(DependencyGraph::default()),
            health: Mutex::new(Health {
                state: LayerState::Starting,
                since: jiff::Timestamp::now(),
                error: None,
                listed_scopes: HashSet::new(),
            }),
            holding: AtomicBool::new(true),
        }
    }

    pub fn is_holding(&self) -> bool {
        self.holding.load(Ordering::SeqCst)
    }

    pub(crate) fn set_holding(&self, holding: bool) {
        self.holding.store(holding, Ordering::SeqCst);
    }

    pub fn name(&self) -> &str {
        &self.layer.name
    }

    /// The fallback of the layer's borrow, if it has one.
    pub fn fallback(&self) -> Option<&Fallback> {
        self.layer.borrow.as_ref()?.fallback.as_ref()
    }

    /// The client edge of one step of a Comb in `namespace`: the layer's own, whose writes
    /// impersonate the layer's `serviceAccount` when it names one (the client for that user is
    /// built once and kept by the pool).
    pub async fn comb_ops(&self, namespace: &str) -> Result<KubeOps> {
        let Some(user) = self.settings.tenancy.writer(namespace) else {
            return Ok(self.ops.clone());
        };
        let writer = self
            .borrow_env
            .pool
            .impersonating_client(&self.layer.context, &user)
            .await
            .map_err(|source| Error::Impersonation {
                layer: self.layer.name.clone(),
                user: user.clone(),
                source,
            })?;
        Ok(self.ops.writing_as(&user, writer))
    }

    /// The namespaces to watch: each of the layer's, or `None` for all.
    pub fn scopes(&self) -> Vec<Option<String>> {
        match &self.layer.namespaces {
            Some(namespaces) => namespaces.iter().cloned().map(Some).collect(),
            None => vec![None],
        }
    }

    /// Records a CR, as listed, watched or as our own write returned it, and says what it calls
    /// for. A version older than the one held changes nothing (the watch may deliver our own
    /// write after we have it).
    pub fn observe_cr(&self, key: &CombKey, cr: Comb, source: Source) -> CrChange {
        observe_in(&mut self.store.lock(), key, cr, source)
    }

    /// Takes in what a step of `key` produced, under the layer's one lock: when the status was
    /// written, the Comb memory keeps while its status is not written (`built`, carried to
    /// where the next step starts), that it was stepped and built, and the CR it ended with, as
    /// our own write. Says what that CR calls for.
    pub fn record_step(&self, key: &CombKey, built: Built, outcome: &StepOutcome) -> CrChange {
        let mut store = self.store.lock();
        let Some(entry) = store.get_mut(key) else {
            // Deleted meanwhile: its watch event said so.
            return CrChange::default();
        };
        if outcome.status_written {
            entry.status_written_at = Some(std::time::Instant::now());
        }
        entry.unwritten = outcome.write_failed.then(|| {
            let mut built = built;
            outcome.carry_into(&mut built.comb);
            Box::new(built)
        });
        entry.build_failure = None;
        entry.stepped = true;
        observe_in(&mut store, key, outcome.stored.clone(), Source::OwnWrite)
    }

    /// Takes in the step of a Comb that does not build: it was stepped, and, when its status
    /// was written, the CR it ended with, as our own write.
    pub fn record_unbuildable_step(&self, key: &CombKey, outcome: &StepOutcome) -> CrChange {
        let mut store = self.store.lock();
        let Some(entry) = store.get_mut(key) else {
            return CrChange::default();
        };
        entry.stepped = true;
        if outcome.write_failed {
            // Nothing holds it in memory (there is no Comb): the retry writes it again.
            return CrChange::default();
        }
        observe_in(&mut store, key, outcome.stored.clone(), Source::OwnWrite)
    }

    /// Remembers that the Comb of `origin` does not build, and why: not built again until its
    /// CR changes, by its own steps nor by its dependents'.
    pub fn record_build_failure(&self, key: &CombKey, origin: Origin, message: String) {
        if let Some(entry) = self.store.lock().get_mut(key) {
            entry.build_failure = Some((origin, message));
            entry.unwritten = None;
        }
    }

    /// What a step of `key` starts from: the Comb memory keeps because its status was not
    /// written, and why its build failed, if it did.
    pub fn starting_point(&self, key: &CombKey) -> (Option<Box<Built>>, Option<(Origin, String)>) {
        self.store
            .lock()
            .get(key)
            .map(|entry| (entry.unwritten.clone(), entry.build_failure.clone()))
            .unwrap_or_default()
    }

    /// Until when a change of progress alone of `key` is held back ([`PROGRESS_EVERY`] after
    /// this run last wrote its status).
    pub fn hold_progress_until(&self, key: &CombKey) -> Option<std::time::Instant> {
        self.store
            .lock()
            .get(key)?
            .status_written_at
            .map(|written| written + PROGRESS_EVERY)
    }

    /// Something `key` stands on changed (one of its objects, its upstream, its layer came
    /// back): a verdict reached on it before no longer holds.
    pub fn touch(&self, key: &CombKey) {
        if let Some(entry) = self.store.lock().get_mut(key) {
            entry.changes += 1;
        }
    }

    /// How many changes of `key` the layer has seen ([`LayerRuntime::touch`], its CR).
    pub fn changes_of(&self, key: &CombKey) -> Option<u64> {
        self.store.lock().get(key).map(|entry| entry.changes)
    }

    /// Runs `f` on what the Events about `key` said, if the Comb is known.
    pub fn with_announced<T>(
        &self,
        key: &CombKey,
        f: impl FnOnce(&mut Announced) -> T,
    ) -> Option<T> {
        self.store
            .lock()
            .get_mut(key)
            .map(|entry| f(&mut entry.announced))
    }

    /// The Comb memory keeps for `cr` (its status was not written), when it was built from
    /// `cr`'s uid and generation.
    pub fn unwritten_of(&self, key: &CombKey, cr: &Comb) -> Option<CombInstance> {
        self.store
            .lock()
            .get(key)?
            .unwritten
            .as_ref()
            .filter(|built| built.is_of(cr))
            .map(|built| built.comb.clone())
    }

    /// Why the Comb of `cr`'s uid and generation does not build, if it was found not to.
    pub fn build_failure_of(&self, key: &CombKey, cr: &Comb) -> Option<String> {
        self.store
            .lock()
            .get(key)?
            .build_failure
            .as_ref()
            .filter(|(origin, _)| *origin == Origin::of(cr))
            .map(|(_, message)| message.clone())
    }

    /// Builds the Comb of `cr` with `registry`'s classes, as the layer says (its settings, its
    /// stubs).
    pub async fn build(&self, registry: &ClassRegistry, cr: &Comb) -> Result<CombInstance> {
        let stubs = |comb: &CombInstance| self.layer.stubs_comb(comb.namespace(), comb.name());
        registry.build(cr, &self.settings, &stubs).await
    }

    /// Forgets a Comb whose CR is gone; returns whether it was known.
    pub fn remove_cr(&self, key: &CombKey) -> bool {
        self.queue.forget(key);
        // Its edges went when it was seen gone (`set_dependencies` with none): the cycles
        // were told then.
        let dropped = self
            .graph
            .lock()
            .set(key, BTreeSet::new())
            .map(|change| change.dropped)
            .unwrap_or_default();
        // Out of the store first: what a step judged of it meanwhile is not kept after.
        let known = self.store.lock().remove(key).is_some();
        self.forget_unjudged(std::iter::once(key).chain(&dropped));
        known
    }

    /// The keys of the Combs of `scope` (a namespace, or all).
    pub fn keys_in(&self, scope: Option<&str>) -> Vec<CombKey> {
        self.store
            .lock()
            .keys()
            .filter(|key| scope.is_none_or(|namespace| key.namespace == namespace))
            .cloned()
            .collect()
    }

    pub fn keys(&self) -> Vec<CombKey> {
        self.keys_in(None)
    }

    pub fn knows(&self, key: &CombKey) -> bool {
        self.store.lock().contains_key(key)
    }

    /// The uid and generation of the CR of `key` as last seen; `None` when it is not known.
    pub fn origin(&self, key: &CombKey) -> Option<Origin> {
        self.store
            .lock()
            .get(key)
            .map(|entry| Origin::of_metadata(entry.cr.metadata()))
    }

    /// The uid and generation of every Comb CR the layer holds: what changes when a Comb comes,
    /// goes or gets a new spec (not when its status is written).
    pub fn origins(&self) -> BTreeMap<CombKey, Origin> {
        self.store
            .lock()
            .iter()
            .map(|(key, entry)| (key.clone(), Origin::of_metadata(entry.cr.metadata())))
            .collect()
    }

    /// What dependents judge `key` by, if it is kept for `origin`.
    pub fn judged(&self, key: &CombKey, origin: &Origin) -> Option<Arc<Judged>> {
        self.judged
            .lock()
            .get(key)
            .filter(|judged| judged.origin == *origin)
            .cloned()
    }

    /// Keeps what dependents judge `key` by, when it may be kept and some Comb depends on it.
    pub fn keep_judged(&self, key: &CombKey, judged: &Arc<Judged>) {
        if !judged.keepable() {
            return;
        }
        let mut kept = self.judged.lock();
        if self.store.lock().contains_key(key) && self.graph.lock().is_depended_on(key) {
            kept.insert(key.clone(), judged.clone());
        }
    }

    /// Lets go of what is kept for Combs that are gone or that nothing depends on any more.
    fn forget_unjudged<'a>(&self, candidates: impl IntoIterator<Item = &'a CombKey>) {
        let mut kept = self.judged.lock();
        if kept.is_empty() {
            return;
        }
        let store = self.store.lock();
        let graph = self.graph.lock();
        for key in candidates {
            if !(store.contains_key(key) && graph.is_depended_on(key)) {
                kept.remove(key);
            }
        }
    }

    /// The CR of `key` as last seen; `None` when it is not known.
    pub fn cr(&self, key: &CombKey) -> Option<Comb> {
        self.store.lock().get(key).map(|entry| entry.cr.comb())
    }

    /// What the Comb of `key` recorded last (see [`CombEntry::recorded_status`]).
    pub fn recorded_status(&self, key: &CombKey) -> Option<CombStatus> {
        self.store
            .lock()
            .get(key)
            .and_then(|entry| entry.recorded_status().cloned())
    }

    /// The phase the Comb of `key` recorded last (see [`CombEntry::recorded_status`]).
    pub fn recorded_phase(&self, key: &CombKey) -> Option<comb_api::Phase> {
        self.store.lock().get(key)?.recorded_phase()
    }

    /// The status the CR of `key` carries as last seen (not a status only memory holds): what a
    /// borrower reading it as its peer sees. `None` when the Comb is not known.
    pub fn kept_status(&self, key: &CombKey) -> Option<Option<CombStatus>> {
        self.store
            .lock()
            .get(key)
            .map(|entry| entry.cr.status().cloned())
    }

    /// Every entry, for `--once` and the final outcome: `f` over each.
    pub fn each_entry<T>(&self, mut f: impl FnMut(&CombKey, &CombEntry) -> T) -> Vec<T> {
        let store = self.store.lock();
        let mut entries: Vec<(&CombKey, &Box<CombEntry>)> = store.iter().collect();
        entries.sort_by_key(|(key, _)| *key);
        entries
            .into_iter()
            .map(|(key, entry)| f(key, entry))
            .collect()
    }

    /// Every CR as last seen with its recorded status, in key order.
    pub fn recorded_combs(&self) -> Vec<Comb> {
        self.each_entry(|_, entry| Comb {
            status: entry.recorded_status().cloned(),
            ..entry.cr.comb()
        })
    }

    /// Records the dependencies of `key` (its `dependsOn` entries as written). Returns the
    /// dependency cycles of the layer when they differ from those reported last.
    pub fn set_dependencies(
        &self,
        key: &CombKey,
        references: &[String],
    ) -> Option<Vec<Vec<CombKey>>> {
        let dependencies: BTreeSet<CombKey> = references
            .iter()
            .filter_map(|reference| dependency_key(reference, &key.namespace))
            .collect();
        let mut graph = self.graph.lock();
        let change = graph.set(key, dependencies)?;
        let cycles = change.cycles_changed.then(|| graph.cycles().to_vec());
        drop(graph);
        self.forget_unjudged(&change.dropped);
        cycles
    }

    /// The dependency cycle `key` is in, if any, starting and ending at `key`.
    pub fn cycle_of(&self, key: &CombKey) -> Option<Vec<CombKey>> {
        let cycle = self
            .graph
            .lock()
            .cycles()
            .iter()
            .find(|cycle| cycle.contains(key))?
            .clone();
        // The cycle repeats its first Comb at the end: rotate the loop to begin at `key`.
        let mut ring = cycle[..cycle.len().saturating_sub(1)].to_vec();
        let start = ring.iter().position(|member| member == key)?;
        ring.rotate_left(start);
        ring.push(key.clone());
        Some(ring)
    }

    /// The Combs of this layer that depend on `key`.
    pub fn dependents_of(&self, key: &CombKey) -> Vec<CombKey> {
        self.graph.lock().dependents_of(key)
    }

    /// Marks one Comb watch as listed; returns whether the whole layer just became listed.
    pub fn mark_listed(&self, scope: usize) -> bool {
        let mut health = self.health.lock();
        let was = health.listed_scopes.len() >= self.scopes;
        health.listed_scopes.insert(scope);
        let listed = health.listed_scopes.len() >= self.scopes;
        if listed && health.state == LayerState::Starting {
            health.state = LayerState::Up;
            health.since = jiff::Timestamp::now();
        }
        listed && !was
    }

    /// Every Comb watch has listed once.
    pub fn is_listed(&self) -> bool {
        self.health.lock().listed_scopes.len() >= self.scopes
    }

    /// Marks the layer down; returns whether it was not down before.
    pub fn mark_down(&self, error: &str) -> bool {
        let mut health = self.health.lock();
        health.error = Some(error.to_string());
        if health.state == LayerState::Down {
            return false;
        }
        health.state = LayerState::Down;
        health.since = jiff::Timestamp::now();
        self.queue.pause();
        true
    }

    /// Marks the layer up after it was down; returns whether it was down.
    pub fn mark_up(&self) -> bool {
        let mut health = self.health.lock();
        if health.state != LayerState::Down {
            return false;
        }
        health.state = if health.listed_scopes.len() >= self.scopes {
            LayerState::Up
        } else {
            LayerState::Starting
        };
        health.since = jiff::Timestamp::now();
        health.error = None;
        self.queue.resume();
        true
    }

    pub fn state(&self) -> LayerState {
        self.health.lock().state
    }

    pub fn status(&self) -> LayerStatus {
        let combs = self.store.lock().len();
        let health = self.health.lock();
        LayerStatus {
            name: self.layer.name.clone(),
            context: self.layer.context.clone(),
            state: health.state,
            since: health.since,
            error: health.error.clone(),
            listed: health.listed_scopes.len() >= self.scopes,
            combs,
            queue_depth: self.queue.depth(),
        }
    }
}

/// [`LayerRuntime::observe_cr`] on the layer's store, locked by the caller.
fn observe_in(
    store: &mut HashMap<CombKey, Box<CombEntry>>,
    key: &CombKey,
    mut cr: Comb,
    source: Source,
) -> CrChange {
    // Neither is read, and both are as large as the spec: kept for every Comb, they were a
    // good part of the layer's memory.
    cr.metadata.managed_fields = None;
    if let Some(annotations) = &mut cr.metadata.annotations {
        annotations.remove(LAST_APPLIED);
    }
    let own_write = source == Source::OwnWrite;
    let Some(entry) = store.get_mut(key) else {
        if own_write {
            // Deleted meanwhile: its watch event said so.
            return CrChange::default();
        }
        store.insert(key.clone(), Box::new(CombEntry::new(cr, source)));
        return CrChange {
            trigger: Some(Trigger::Created),
            status_changed: true,
        };
    };
    let kept = entry.cr.metadata();
    let same_object = kept.uid == cr.metadata.uid;
    if same_object
        && !entry.versions.is_later(
            kept.resource_version.as_deref(),
            cr.metadata.resource_version.as_deref(),
            source,
        )
    {
        return CrChange::default();
    }
    // Without a generation (a server that keeps none) the trigger compares the specs.
    let trigger = if cr.metadata.generation.is_some() {
        // The trigger reads only the metadata then: the CR without its configuration serves.
        cr_trigger(Some(&entry.cr.cr), &cr, own_write)
    } else {
        cr_trigger(Some(&entry.cr.comb()), &cr, own_write)
    };
    if trigger == Some(Trigger::Created) {
        // Another object under the same name: nothing of the old one applies.
        **entry = CombEntry::new(cr, source);
        return CrChange {
            trigger,
            status_changed: true,
        };
    }
    let signature = status_signature(cr.status.as_ref());
    let status_changed = entry.signature != signature;
    if status_changed {
        entry.signature = signature;
        entry.changed_at = Instant::now();
    }
    entry.changes += 1;
    entry.cr = entry.cr.next(cr);
    CrChange {
        trigger,
        status_changed,
    }
}

#[cfg(test)]
mod tests;
