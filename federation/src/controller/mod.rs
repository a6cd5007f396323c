//! The federation controller (`comb run`, DESIGN.md §6): one process, every layer.
//!
//! Per layer it watches the Comb CRs and the resources Combs manage, and steps each Comb
//! through a per-layer work queue: one step at a time per Comb, `workers_per_layer` Combs at
//! once, so that a slow or unreachable layer never holds up another. A Comb is stepped when its
//! CR changes, when one of its resources changes or disappears, when a Comb it depends on or
//! the peer it borrows from (in a higher layer) changes status, after a failed step (backoff)
//! and every `resync`.
//!
//! Library use:
//!
//! ```no_run
//! # async fn run() -> comb_federation::error::Result<()> {
//! use comb_federation::config::Config;
//! use comb_federation::controller::{Controller, ControllerOptions};
//! use comb_federation::engine::class::ClassRegistry;
//! use tokio_util::sync::CancellationToken;
//!
//! let config = Config::load(std::path::Path::new("comb.yaml"))?;
//! let controller = Controller::new(config, ClassRegistry::with_builtins(), ControllerOptions::default()).await?;
//! let mut transitions = controller.subscribe();
//! tokio::spawn(async move {
//!     while let Ok(transition) = transitions.recv().await {
//!         println!("{transition}");
//!     }
//! });
//! let outcome = controller.run(CancellationToken::new()).await?;
//! # let _ = outcome;
//! # Ok(()) }
//! ```

pub mod admin;
pub mod backoff;
pub mod deletion;
pub mod events;
pub mod graph;
mod layer;
pub mod leader;
pub mod metrics;
pub mod once;
pub mod queue;
mod step;
pub mod transition;
pub mod triggers;
mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use comb_api::{Comb, CombStatus, Phase, Reason};
use comb_kubeconfigs::ClientPool;
use comb_upstreams::UpstreamClasses;
use futures::FutureExt;
use kube::api::ApiResource;
use serde::Serialize;
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, info_span, warn};

pub use backoff::BackoffPolicy;
pub use layer::{LayerState, LayerStatus};
pub use leader::LeaderElection;
pub use once::{CombOutcome, RunOutcome};
pub use queue::{CombKey, QueueEntryView, Trigger};
pub use transition::{PhaseReason, Transition};

use crate::config::Config;
use crate::engine::class::ClassRegistry;
use crate::engine::kube_ops::KubeOps;
use crate::error::{Error, Result};
use crate::webhook::{Webhook, WebhookOptions};
use events::EventType;
use graph::{BorrowIndex, describe_cycles};
use layer::LayerRuntime;
use once::{SettleView, is_settled};
use queue::WorkQueue;
use watch::Failure;

/// `--once`: stop when every Comb is settled, or at the timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnceOptions {
    /// How long a Pending Comb's status must stay unchanged to count as settled.
    pub settle: Duration,
    /// The whole run's bound.
    pub timeout: Duration,
}

impl Default for OnceOptions {
    fn default() -> Self {
        OnceOptions {
            settle: Duration::from_secs(10),
            timeout: Duration::from_secs(300),
        }
    }
}

/// How the controller runs (the configuration file says what it runs on).
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Combs stepped at once per layer.
    pub workers_per_layer: usize,
    /// Retry delays after a failed step.
    pub backoff: BackoffPolicy,
    /// Delays of reruns in a row: a Comb woken again while its step ran reruns at once the
    /// first time, then waits longer each time in a row (its own writes may be what woke it).
    pub pacing: BackoffPolicy,
    /// Delays between attempts of a failing watch, and of the probe of a layer that is down.
    pub watch_backoff: BackoffPolicy,
    /// Where to serve `/metrics`, `/healthz`, `/readyz` and `/debug/*` (port 0: any free port,
    /// see [`ControllerHandle::admin_address`]).
    pub admin_address: Option<SocketAddr>,
    /// Compete for a Lease and reconcile only while holding it.
    pub leader_election: Option<LeaderElection>,
    /// Stop when every Comb is settled.
    pub once: Option<OnceOptions>,
    /// This replica's name in Events.
    pub identity: String,
    /// The upstream classes `spec.upstream` and the layers may name (default: K8s, Static).
    pub upstream_classes: UpstreamClasses,
    /// Serve the validating admission webhook (every replica serves it, leading or not).
    pub webhook: Option<WebhookOptions>,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            workers_per_layer: 8,
            backoff: BackoffPolicy::default(),
            pacing: BackoffPolicy {
                initial: Duration::from_millis(200),
                max: Duration::from_secs(10),
            },
            watch_backoff: BackoffPolicy {
                initial: Duration::from_millis(200),
                max: Duration::from_secs(10),
            },
            admin_address: None,
            leader_election: None,
            once: None,
            identity: default_identity(),
            upstream_classes: UpstreamClasses::default(),
            webhook: None,
        }
    }
}

/// The pod name (`POD_NAME`, `HOSTNAME`), else `comb-<pid>`.
pub fn default_identity() -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("comb-{}", std::process::id()))
}

/// The federation controller. Build it, [`subscribe`](Controller::subscribe) to transitions or
/// keep a [`handle`](Controller::handle), then [`run`](Controller::run) it.
pub struct Controller {
    shared: Arc<Shared>,
}

/// State shared by the watches, the workers and the admin server.
pub(crate) struct Shared {
    pub(crate) config: Arc<Config>,
    pub(crate) registry: Arc<ClassRegistry>,
    pub(crate) layers: Vec<Arc<LayerRuntime>>,
    borrowers: Mutex<BorrowIndex>,
    pub(crate) metrics: metrics::Metrics,
    transitions: broadcast::Sender<Transition>,
    /// Woken when a layer has listed its Combs.
    pub(crate) listed: Notify,
    options: ControllerOptions,
    /// Cancelled when the controller stops: background probes end with it.
    stopping: CancellationToken,
    /// Reconciling (false while waiting for the Lease).
    active: AtomicBool,
    admin_address: OnceLock<SocketAddr>,
    webhook_address: OnceLock<SocketAddr>,
}

impl Controller {
    /// A controller over `config`'s kubeconfig and layers, with the classes of `registry`.
    pub async fn new(
        config: Config,
        registry: ClassRegistry,
        options: ControllerOptions,
    ) -> Result<Controller> {
        let pool = config.client_pool()?;
        Controller::with_pool(config, pool, registry, options).await
    }

    /// A controller over a client pool built elsewhere (the demo's sandbox, tests).
    pub async fn with_pool(
        config: Config,
        pool: ClientPool,
        registry: ClassRegistry,
        options: ControllerOptions,
    ) -> Result<Controller> {
        config.check()?;
        config.check_pool(&pool)?;
        let mut ops_by_context: BTreeMap<String, KubeOps> = BTreeMap::new();
        let mut layers = Vec::new();
        for (index, layer) in config.layers.iter().enumerate() {
            let ops = match ops_by_context.get(&layer.context) {
                Some(ops) => ops.clone(),
                None => {
                    let client = pool
                        .client(&layer.context)
                        .await
                        .map_err(|error| Error::Config(format!("layer {}: {error}", layer.name)))?;
                    let ops = KubeOps::new(client);
                    ops_by_context.insert(layer.context.clone(), ops.clone());
                    ops
                }
            };
            let mut borrow_env = config.borrow_env(&pool, layer);
            borrow_env.classes = options.upstream_classes.clone();
            layers.push(Arc::new(LayerRuntime::new(
                index,
                layer.clone(),
                config.settings(layer),
                ops,
                borrow_env,
                WorkQueue::new(config.resync, options.backoff, options.pacing),
            )));
        }
        let metrics = metrics::Metrics::new();
        for layer in &layers {
            metrics.set_layer_up(layer.name(), false);
            metrics.set_queue_depth(layer.name(), 0);
        }
        let (transitions, _) = broadcast::channel(1024);
        Ok(Controller {
            shared: Arc::new(Shared {
                config: Arc::new(config),
                registry: Arc::new(registry),
                layers,
                borrowers: Mutex::new(BorrowIndex::default()),
                metrics,
                transitions,
                listed: Notify::new(),
                active: AtomicBool::new(false),
                options,
                stopping: CancellationToken::new(),
                admin_address: OnceLock::new(),
                webhook_address: OnceLock::new(),
            }),
        })
    }

    /// Every transition from now on (a lagging receiver loses the oldest).
    pub fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.shared.transitions.subscribe()
    }

    /// A view of the running controller: layers, queue, readiness, metrics.
    pub fn handle(&self) -> ControllerHandle {
        ControllerHandle {
            shared: self.shared.clone(),
        }
    }

    /// Runs until `shutdown` is cancelled (or, with `--once`, until every Comb is settled or
    /// the timeout hits), then finishes the running steps and returns how every Comb ended.
    pub async fn run(self, shutdown: CancellationToken) -> Result<RunOutcome> {
        let shared = self.shared;
        let admin = match shared.options.admin_address {
            Some(address) => {
                let listener = tokio::net::TcpListener::bind(address)
                    .await
                    .map_err(|error| {
                        Error::Controller(format!(
                            "the admin address {address} cannot be used: {error}"
                        ))
                    })?;
                if let Ok(bound) = listener.local_addr() {
                    let _ = shared.admin_address.set(bound);
                }
                let handle = ControllerHandle {
                    shared: shared.clone(),
                };
                Some(tokio::spawn(admin::serve(
                    listener,
                    handle,
                    shared.stopping.clone(),
                )))
            }
            None => None,
        };
        let webhook = match &shared.options.webhook {
            Some(options) => {
                let webhook =
                    Webhook::bind(options, shared.config.clone(), shared.registry.clone()).await?;
                let _ = shared.webhook_address.set(webhook.address());
                Some(tokio::spawn(webhook.serve(shared.stopping.clone())))
            }
            None => None,
        };
        let outcome = match shared.options.leader_election.clone() {
            Some(election) => run_as_leader(&shared, &election, &shutdown).await,
            None => Ok(run_active(&shared, &shutdown).await),
        };
        shared.stopping.cancel();
        if let Some(admin) = admin {
            let _ = admin.await;
        }
        if let Some(webhook) = webhook {
            let _ = webhook.await;
        }
        info!("stopped");
        outcome
    }
}

/// Waits for the Lease, then reconciles while holding it. Losing it ends the run with an error
/// (the process restarts and competes again), so that two replicas never reconcile at once.
async fn run_as_leader(
    shared: &Arc<Shared>,
    election: &LeaderElection,
    shutdown: &CancellationToken,
) -> Result<RunOutcome> {
    let client = shared
        .layers
        .first()
        .map(|layer| layer.ops.client().clone())
        .ok_or_else(|| Error::Config("no layers".to_string()))?;
    let mut leadership = leader::campaign(client, election).await?;
    info!(
        lease = %format!("{}/{}", election.namespace, election.lease),
        identity = %election.identity,
        "waiting for the leader Lease"
    );
    tokio::select! {
        () = shutdown.cancelled() => return Ok(RunOutcome::default()),
        held = leadership.changes.wait_for(|leading| *leading) => {
            if held.is_err() {
                return Err(Error::Controller("leader election ended before this replica led".to_string()));
            }
        }
    }
    info!(identity = %election.identity, "leading: reconciling");
    let lost = CancellationToken::new();
    let active = shutdown.child_token();
    let watch_loss = {
        let mut changes = leadership.changes.clone();
        let active = active.clone();
        let lost = lost.clone();
        async move {
            if changes.wait_for(|leading| !*leading).await.is_ok() {
                lost.cancel();
                active.cancel();
            }
        }
    };
    let outcome = tokio::select! {
        outcome = run_active(shared, &active) => outcome,
        () = watch_loss => RunOutcome::default(),
    };
    // Dropping the receivers makes the Lease task release the Lease and end.
    drop(leadership.changes);
    let _ = leadership.task.await;
    if lost.is_cancelled() && !shutdown.is_cancelled() {
        return Err(Error::Controller(format!(
            "lost the leader Lease {}/{}; exiting so that a fresh start competes again",
            election.namespace, election.lease
        )));
    }
    Ok(outcome)
}

/// The controller proper: watches and workers of every layer until `shutdown` (or settled).
async fn run_active(shared: &Arc<Shared>, shutdown: &CancellationToken) -> RunOutcome {
    shared.active.store(true, Ordering::SeqCst);
    let watches = shutdown.child_token();
    let mut tasks = JoinSet::new();
    let mut workers = JoinSet::new();
    for layer in &shared.layers {
        let span = info_span!("layer", layer = layer.name());
        for (index, scope) in layer.scopes().into_iter().enumerate() {
            tasks.spawn(
                watch::watch_combs(
                    shared.clone(),
                    layer.clone(),
                    index,
                    scope.clone(),
                    watches.clone(),
                )
                .instrument(span.clone()),
            );
            for (group, version, kind) in watch::WATCHED_KINDS {
                let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
                tasks.spawn(
                    watch::watch_managed(
                        shared.clone(),
                        layer.clone(),
                        ApiResource::from_gvk(&gvk),
                        scope.clone(),
                        watches.clone(),
                    )
                    .instrument(span.clone()),
                );
            }
        }
        for _ in 0..shared.options.workers_per_layer.max(1) {
            workers.spawn(work(shared.clone(), layer.clone()));
        }
    }
    let timed_out = match shared.options.once {
        Some(once) => {
            let timed_out = wait_settled(shared, once, shutdown).await;
            if timed_out {
                warn!(
                    timeout = ?once.timeout,
                    "--once: the timeout hit before every Comb settled"
                );
            }
            timed_out
        }
        None => {
            shutdown.cancelled().await;
            false
        }
    };
    info!("stopping: finishing the running steps");
    for layer in &shared.layers {
        layer.queue.close();
    }
    while workers.join_next().await.is_some() {}
    watches.cancel();
    while tasks.join_next().await.is_some() {}
    shared.active.store(false, Ordering::SeqCst);
    RunOutcome {
        combs: shared.outcomes(),
        timed_out,
    }
}

/// One worker of a layer: steps Combs from its queue until the queue closes.
async fn work(shared: Arc<Shared>, layer: Arc<LayerRuntime>) {
    while let Some(job) = layer.queue.next().await {
        let span = info_span!(
            "comb",
            layer = layer.name(),
            namespace = %job.key.namespace,
            comb = %job.key.name,
            trigger = job.trigger.as_str(),
        );
        let stepped = std::panic::AssertUnwindSafe(step::step(&shared, &layer, &job.key))
            .catch_unwind()
            .instrument(span.clone())
            .await;
        let report = stepped.unwrap_or_else(|_| {
            span.in_scope(|| error!("the step panicked; retrying with backoff"));
            queue::StepReport {
                phase: Some("Error".to_string()),
                reason: Some("ReconcileFailed".to_string()),
                failed: true,
                started_at: jiff::Timestamp::now(),
                duration: Duration::ZERO,
            }
        });
        layer.queue.finish(&job.key, report);
        shared
            .metrics
            .set_queue_depth(layer.name(), layer.queue.depth());
    }
}

/// `--once`: waits until every layer has listed and every Comb is settled; returns whether the
/// timeout hit first.
async fn wait_settled(shared: &Shared, once: OnceOptions, shutdown: &CancellationToken) -> bool {
    let deadline = tokio::time::Instant::now() + once.timeout;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return false,
            () = tokio::time::sleep_until(deadline) => return true,
            _ = tick.tick() => {
                if shared.all_settled(once.settle) {
                    info!("--once: every Comb is settled");
                    return false;
                }
            }
        }
    }
}

impl Shared {
    /// A Comb CR as watched: store it, wake it, and wake whoever reacts to its status.
    pub(crate) fn cr_seen(self: &Arc<Self>, layer: &Arc<LayerRuntime>, cr: Comb) {
        let Some(key) = triggers::comb_key(&cr) else {
            return;
        };
        if let Some(problem) = &cr.status_error {
            warn!(
                layer = layer.name(),
                namespace = %key.namespace,
                comb = %key.name,
                problem = %problem,
                "the recorded status does not decode; it counts as absent until the next status write"
            );
        }
        let peer = triggers::upstream_peer(&self.config, layer.index, &cr);
        let references = cr.spec.dependencies().to_vec();
        let change = layer.observe_cr(&key, cr, false);
        self.lock_borrowers().set(&(layer.index, key.clone()), peer);
        // Until it is built, `spec.dependsOn` stands for the class's dependencies; each step
        // records the class's own.
        if change.trigger == Some(Trigger::Created)
            && let Some(cycles) = layer.set_dependencies(&key, &references)
        {
            self.spawn_cycle_report(layer, cycles);
        }
        self.react(layer, &key, &change);
    }

    /// A CR as our own write returned it: held at once (the watch brings it later), and whoever
    /// reacts to its status is woken now.
    pub(crate) fn own_write(&self, layer: &LayerRuntime, key: &CombKey, cr: Comb) {
        let change = layer.observe_cr(key, cr, true);
        self.react(layer, key, &change);
    }

    fn react(&self, layer: &LayerRuntime, key: &CombKey, change: &layer::CrChange) {
        if let Some(trigger) = change.trigger {
            layer.queue.enqueue(key, trigger);
        }
        if change.status_changed {
            self.wake_watchers_of(layer, key);
        }
    }

    /// A Comb CR is gone: forget it and wake whoever depended on or borrowed from it.
    pub(crate) fn cr_gone(self: &Arc<Self>, layer: &Arc<LayerRuntime>, key: &CombKey) {
        if let Some(cycles) = layer.set_dependencies(key, &[]) {
            self.spawn_cycle_report(layer, cycles);
        }
        if layer.remove_cr(key) {
            self.lock_borrowers().set(&(layer.index, key.clone()), None);
            self.wake_watchers_of(layer, key);
        }
    }

    /// Wakes the Combs of the layer that depend on `key`, and the Combs of lower layers that
    /// borrow from it.
    fn wake_watchers_of(&self, layer: &LayerRuntime, key: &CombKey) {
        for dependent in layer.dependents_of(key) {
            layer.queue.enqueue(&dependent, Trigger::Dependency);
        }
        self.wake_borrowers_of(layer, key);
    }

    /// Wakes the Combs of lower layers that borrow from `key`, and their dependents: a
    /// borrower's health, as its dependents judge it, is its live status, which reads this
    /// peer, so a dependent that judged while the peer could not be read must look again even
    /// when the borrower's own record never changed.
    fn wake_borrowers_of(&self, layer: &LayerRuntime, key: &CombKey) {
        let borrowers = self
            .lock_borrowers()
            .borrowers_of(&(layer.index, key.clone()));
        for (index, borrower) in borrowers {
            if let Some(lower) = self.layers.get(index) {
                lower.queue.enqueue(&borrower, Trigger::Upstream);
                for dependent in lower.dependents_of(&borrower) {
                    lower.queue.enqueue(&dependent, Trigger::Dependency);
                }
            }
        }
    }

    fn lock_borrowers(&self) -> std::sync::MutexGuard<'_, BorrowIndex> {
        // Updated in single calls that leave it consistent.
        self.borrowers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A watch of `layer` failed: count it, and mark the layer down when its API server does
    /// not answer (a probe then watches for it to come back).
    pub(crate) fn watch_failed(
        self: &Arc<Self>,
        layer: &Arc<LayerRuntime>,
        what: &str,
        failure: Failure,
        message: &str,
    ) {
        match failure {
            Failure::Expired => {
                info!(
                    layer = layer.name(),
                    watch = what,
                    "watch expired, listing again: {message}"
                );
                return;
            }
            Failure::NotServed | Failure::Other => {
                self.metrics.api_error(layer.name(), "watch");
                warn!(
                    layer = layer.name(),
                    watch = what,
                    "watch failed, retrying: {message}"
                );
                return;
            }
            Failure::Unavailable => self.metrics.api_error(layer.name(), "watch"),
        }
        if layer.mark_down(message) {
            warn!(
                layer = layer.name(),
                context = %layer.layer.context,
                "layer {} is down (its steps wait; other layers go on): {message}",
                layer.name()
            );
            self.metrics.set_layer_up(layer.name(), false);
            self.spawn_probe(layer);
        }
    }

    /// Something from `layer`'s API server arrived: if the layer was down it is up again.
    pub(crate) fn layer_answered(&self, layer: &LayerRuntime) {
        if layer.mark_up() {
            info!(
                layer = layer.name(),
                "layer {} is back; stepping its Combs",
                layer.name()
            );
            self.layer_up(layer);
            for key in layer.keys() {
                layer.queue.enqueue(&key, Trigger::LayerRecovered);
                // Lower layers read this one's Combs: whatever judged them while the layer was
                // down (a borrower, a dependent of a borrower) looks again now (a 2 s partition
                // of prod left dev's mailer Blocked until the resync without this).
                self.wake_borrowers_of(layer, &key);
            }
        } else if layer.state() == LayerState::Up {
            self.layer_up(layer);
        }
    }

    fn layer_up(&self, layer: &LayerRuntime) {
        self.metrics.set_layer_up(layer.name(), true);
    }

    /// Asks the down layer's API server for its version until it answers: a watch that resumes
    /// may stay silent, so its silence proves nothing.
    fn spawn_probe(self: &Arc<Self>, layer: &Arc<LayerRuntime>) {
        let shared = self.clone();
        let layer = layer.clone();
        tokio::spawn(async move {
            let mut attempts = 0u32;
            while layer.state() == LayerState::Down {
                attempts = attempts.saturating_add(1);
                if !shared.pause_after_failure(attempts, &shared.stopping).await {
                    return;
                }
                if layer.ops.client().apiserver_version().await.is_ok() {
                    shared.layer_answered(&layer);
                }
            }
        });
    }

    /// Waits the watch backoff after `failures` failures in a row; false when stopping.
    pub(crate) async fn pause_after_failure(
        &self,
        failures: u32,
        cancel: &CancellationToken,
    ) -> bool {
        let delay = self.options.watch_backoff.random_delay(failures);
        tokio::select! {
            () = cancel.cancelled() => false,
            () = self.stopping.cancelled() => false,
            () = tokio::time::sleep(delay) => true,
        }
    }

    fn spawn_cycle_report(self: &Arc<Self>, layer: &Arc<LayerRuntime>, cycles: Vec<Vec<CombKey>>) {
        let shared = self.clone();
        let layer = layer.clone();
        tokio::spawn(async move { shared.report_cycles(&layer, cycles).await });
    }

    /// Reports the dependency cycles of a layer (they changed): a log line, and an Event on
    /// every Comb in one. The Combs stay Blocked: each waits for another that is not healthy.
    pub(crate) async fn report_cycles(&self, layer: &LayerRuntime, cycles: Vec<Vec<CombKey>>) {
        if cycles.is_empty() {
            info!(layer = layer.name(), "no dependency cycles any more");
            return;
        }
        let message = format!(
            "dependency cycle: {} (these stay Blocked)",
            describe_cycles(&cycles)
        );
        warn!(layer = layer.name(), "{message}");
        let mut members: Vec<&CombKey> = cycles.iter().flatten().collect();
        members.sort();
        members.dedup();
        for key in members {
            if let Some(cr) = layer.cr(key) {
                self.event(layer, &cr, EventType::Warning, "DependencyCycle", &message)
                    .await;
            }
        }
    }

    /// After a step recorded `status` (previously `previous`): the transition, if any, in the
    /// log, as an Event and to subscribers.
    pub(crate) async fn after_status(
        &self,
        layer: &LayerRuntime,
        cr: &Comb,
        previous: Option<&CombStatus>,
        status: &CombStatus,
    ) {
        let (Some(namespace), Some(name)) = (
            cr.metadata.namespace.as_deref(),
            cr.metadata.name.as_deref(),
        ) else {
            return;
        };
        let Some(transition) = Transition::between(layer.name(), namespace, name, previous, status)
        else {
            return;
        };
        let change = transition.change();
        info!("{change}");
        let reason = transition
            .new
            .reason
            .clone()
            .unwrap_or_else(|| transition.new.phase.clone());
        self.event(
            layer,
            cr,
            EventType::for_phase(&transition.new.phase),
            &reason,
            &change,
        )
        .await;
        // Nobody listening is fine.
        let _ = self.transitions.send(transition);
    }

    /// Writes an Event about `cr`; a failure is logged and counted.
    pub(crate) async fn event(
        &self,
        layer: &LayerRuntime,
        cr: &Comb,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        let event = events::event_for(
            &self.config.group,
            cr,
            kind,
            reason,
            message,
            &self.options.identity,
        );
        if let Err(error) = events::publish(layer.ops.client().clone(), &event).await {
            self.metrics.api_error(layer.name(), "event");
            warn!("{error}");
        }
    }

    /// Whether every layer has listed and every Comb is settled (`--once`).
    fn all_settled(&self, settle: Duration) -> bool {
        self.layers.iter().all(|layer| {
            layer.is_listed()
                && layer
                    .each_entry(|key, entry| {
                        let status = entry.recorded_status();
                        is_settled(
                            &SettleView {
                                stepped: entry.stepped,
                                busy: layer.queue.is_busy(key),
                                phase: status.and_then(|s| s.phase.as_ref().map(Phase::to_string)),
                                unchanged_for: entry.changed_at.elapsed(),
                            },
                            settle,
                        )
                    })
                    .into_iter()
                    .all(|settled| settled)
        })
    }

    /// Every Comb's last recorded state.
    fn outcomes(&self) -> Vec<CombOutcome> {
        self.layers
            .iter()
            .flat_map(|layer| {
                layer.each_entry(|key, entry| {
                    let status = entry.recorded_status();
                    let ready = status.and_then(CombStatus::ready);
                    CombOutcome {
                        layer: layer.name().to_string(),
                        namespace: key.namespace.clone(),
                        name: key.name.clone(),
                        phase: status.and_then(|s| s.phase.as_ref().map(Phase::to_string)),
                        reason: ready.and_then(|r| r.reason.as_ref().map(Reason::to_string)),
                        message: ready.and_then(|r| r.message.clone()),
                    }
                })
            })
            .collect()
    }
}

/// A cheap view of a controller, for the admin server, tests and the demo.
#[derive(Clone)]
pub struct ControllerHandle {
    shared: Arc<Shared>,
}

/// The work queue of one layer, as `/debug/queue` shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LayerQueue {
    pub layer: String,
    pub paused: bool,
    pub depth: usize,
    pub combs: Vec<QueueEntryView>,
}

impl ControllerHandle {
    /// The health of every layer.
    pub fn layers(&self) -> Vec<LayerStatus> {
        self.shared
            .layers
            .iter()
            .map(|layer| layer.status())
            .collect()
    }

    /// The health of layer `name`.
    pub fn layer(&self, name: &str) -> Option<LayerStatus> {
        self.shared
            .layers
            .iter()
            .find(|layer| layer.name() == name)
            .map(|layer| layer.status())
    }

    /// Every layer's queue.
    pub fn queue(&self) -> Vec<LayerQueue> {
        self.shared
            .layers
            .iter()
            .map(|layer| LayerQueue {
                layer: layer.name().to_string(),
                paused: layer.queue.is_paused(),
                depth: layer.queue.depth(),
                combs: layer.queue.snapshot(),
            })
            .collect()
    }

    /// Ready when waiting for the Lease, or when every layer has listed its Combs once (a layer
    /// that is down does not count: the others serve).
    pub fn readiness(&self) -> std::result::Result<(), String> {
        if !self.shared.active.load(Ordering::SeqCst) {
            return if self.shared.options.leader_election.is_some() {
                Ok(())
            } else {
                Err("the controller is not running".to_string())
            };
        }
        let waiting: Vec<&str> = self
            .shared
            .layers
            .iter()
            .filter(|layer| !layer.is_listed() && layer.state() != LayerState::Down)
            .map(|layer| layer.name())
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "waiting for the first list of layer(s) {}",
                waiting.join(", ")
            ))
        }
    }

    /// The Prometheus text of the metrics.
    pub fn metrics_text(&self) -> Result<String> {
        for layer in &self.shared.layers {
            self.shared
                .metrics
                .set_queue_depth(layer.name(), layer.queue.depth());
        }
        self.shared.metrics.encode()
    }

    /// Where the admin server listens, once it does.
    pub fn admin_address(&self) -> Option<SocketAddr> {
        self.shared.admin_address.get().copied()
    }

    /// Where the admission webhook listens, once it does.
    pub fn webhook_address(&self) -> Option<SocketAddr> {
        self.shared.webhook_address.get().copied()
    }

    /// The last recorded state of every Comb.
    pub fn combs(&self) -> Vec<CombOutcome> {
        self.shared.outcomes()
    }

    /// Every transition from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.shared.transitions.subscribe()
    }
}
