//! Building and running the controller: the admin and webhook servers, leader election, the
//! watches and workers of every layer, and `--once` settling.

use std::collections::BTreeMap;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use comb_kubeconfigs::ClientPool;
use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, info_span, warn};

use super::LeaderElection;
use super::fallback::Fallbacks;
use super::fanout::Fanout;
use super::gate::Fence;
use super::health::Health;
use super::layer::{LayerRuntime, Layers};
use super::once::{RunOutcome, SettleView, is_settled, outcomes};
use super::queue::WorkQueue;
use super::reads::LayerPeers;
use super::report::Reports;
use super::work::LayerWork;
use super::{
    ControllerHandle, ControllerOptions, OnceOptions, Shared, Transition, admin, coordinator,
    leader, metrics, watch,
};
use crate::config::Config;
use crate::engine::cache::{ObjectCache, UnprojectableObjects};
use crate::engine::class::ClassRegistry;
use crate::engine::kube_ops::KubeOps;
use crate::error::{Error, Result};
use crate::webhook::Webhook;

/// The federation controller. Build it, [`subscribe`](Controller::subscribe) to transitions or
/// keep a [`handle`](Controller::handle), then [`run`](Controller::run) it.
pub struct Controller {
    shared: Arc<Shared>,
}

impl Controller {
    /// A controller over `config`'s kubeconfig and layers, with the classes of `registry`.
    pub async fn new(
        config: Config,
        registry: ClassRegistry,
        options: ControllerOptions,
    ) -> Result<Controller> {
        let pool = crate::config::client_pool(&config)?;
        Controller::with_pool(config, pool, registry, options).await
    }

    /// A controller over a client pool built elsewhere (the demo's sandbox, tests).
    pub async fn with_pool(
        config: Config,
        pool: ClientPool,
        registry: ClassRegistry,
        options: ControllerOptions,
    ) -> Result<Controller> {
        crate::config::check(&config)?;
        crate::config::check_pool(&config, &pool)?;
        let mut ops_by_context: BTreeMap<String, KubeOps> = BTreeMap::new();
        let peers = Arc::new(LayerPeers::default());
        let metrics = metrics::Metrics::new();
        let unprojectable = Arc::new(UnprojectableObjects::counted_by(
            metrics.unprojectable_counter(),
        ));
        let reads_from_watches = options.read_from_watches && options.once.is_none();
        let mut layers = Vec::new();
        for (index, layer) in config.layers.iter().enumerate() {
            let ops = match ops_by_context.get(&layer.context) {
                Some(ops) => ops.clone(),
                None => {
                    let client =
                        pool.client(&layer.context)
                            .await
                            .map_err(|source| Error::Kubeconfig {
                                what: format!("layer {}", layer.name),
                                source,
                            })?;
                    let mut ops = KubeOps::new(client, config.label_keys());
                    // Steps read what the watches hold; `--once` reads the API server, as the
                    // CLI does (its run is too short for watches to pay off).
                    if reads_from_watches {
                        let cache = ObjectCache::new(config.label_keys())
                            .reporting_to(&layer.context, unprojectable.clone());
                        ops = ops.with_cache(Arc::new(cache));
                    }
                    ops_by_context.insert(layer.context.clone(), ops.clone());
                    ops
                }
            };
            let mut borrow_env = config.borrow_env(&pool, layer);
            borrow_env.classes = options.upstream_classes.clone();
            if reads_from_watches {
                borrow_env.peers = Some(peers.clone());
            }
            layers.push(Arc::new(LayerRuntime::new(
                index,
                layer.clone(),
                config.settings(layer),
                ops,
                borrow_env,
                WorkQueue::new(config.resync, options.backoff, options.pacing),
            )));
        }
        peers.set(&layers);
        for layer in &layers {
            metrics.set_layer_up(layer.name(), false);
            if layer.fallback().is_some() {
                metrics.set_borrowers_on_fallback(layer.name(), 0);
            }
            metrics.set_queue_depth(layer.name(), 0);
        }
        let config = Arc::new(config);
        let layers: Arc<Layers> = layers.into();
        let metrics = Arc::new(metrics);
        let stopping = CancellationToken::new();
        let reports = Arc::new(Reports::new(
            &config.group,
            &options.identity,
            metrics.clone(),
        ));
        let fanout = Arc::new(Fanout::new(config.clone(), layers.clone(), reports.clone()));
        let health = Arc::new(Health::new(
            metrics.clone(),
            fanout.clone(),
            options.watch_backoff,
            stopping.clone(),
        ));
        let fallbacks = Arc::new(Fallbacks::new(
            config.clone(),
            layers.clone(),
            metrics.clone(),
            reports.clone(),
            fanout.clone(),
        ));
        Ok(Controller {
            shared: Arc::new(Shared {
                config,
                registry: Arc::new(registry),
                layers,
                metrics,
                reports,
                fanout,
                health,
                fallbacks,
                active: AtomicBool::new(false),
                shards: Mutex::new(None),
                options,
                stopping,
                admin_address: OnceLock::new(),
                webhook_address: OnceLock::new(),
            }),
        })
    }

    /// Every transition from now on (a lagging receiver loses the oldest).
    pub fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.shared.reports.subscribe()
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
                        Error::controller_from(
                            format!("the admin address {address} cannot be used"),
                            error,
                        )
                    })?;
                if let Ok(bound) = listener.local_addr() {
                    let _ = shared.admin_address.set(bound);
                }
                Some(tokio::spawn(admin::serve(
                    listener,
                    ControllerHandle {
                        shared: shared.clone(),
                    },
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
        for server in admin.into_iter().chain(webhook) {
            let _ = server.await;
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
                return Err(Error::controller("leader election ended before this replica led"));
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
        return Err(Error::controller(format!(
            "lost the leader Lease {}/{}; exiting so that a fresh start competes again",
            election.namespace, election.lease
        )));
    }
    Ok(outcome)
}

/// The controller proper: the Comb watches of every layer, and the work (managed-resource
/// watches and workers) of every layer, or with sharding of the layers this replica holds,
/// until `shutdown` (or settled).
async fn run_active(shared: &Arc<Shared>, shutdown: &CancellationToken) -> RunOutcome {
    shared.active.store(true, Ordering::SeqCst);
    if shared.options.sharding.is_some() {
        for layer in shared.layers.iter() {
            layer.set_holding(false);
        }
    }
    let watches = shutdown.child_token();
    let mut tasks = JoinSet::new();
    // Every replica watches every layer's Combs, held or not: a layer's peers in lower layers
    // are woken by its Combs' status, and a taker's queue is ready when it starts.
    for layer in shared
        .layers
        .iter()
        .filter(|layer| watched(shared, layer.name()))
    {
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
        }
    }
    // The upstreams of fallbacks are looked at while this replica reconciles.
    shared.fallbacks.spawn_upstream_checks(&mut tasks, &watches);
    let timed_out = match shared.options.sharding.clone() {
        Some(sharding) => {
            if let Err(error) =
                coordinator::coordinate(shared.clone(), sharding, shutdown.clone()).await
            {
                error!(%error, "sharding failed");
            }
            false
        }
        None => run_every_layer(shared, shutdown).await,
    };
    watches.cancel();
    while tasks.join_next().await.is_some() {}
    shared.active.store(false, Ordering::SeqCst);
    RunOutcome {
        combs: outcomes(&shared.layers),
        timed_out,
    }
}

/// Without sharding: the work of every layer until `shutdown` (or settled); whether `--once`'s
/// timeout hit.
async fn run_every_layer(shared: &Arc<Shared>, shutdown: &CancellationToken) -> bool {
    let unlimited = Fence::new(None);
    let fence = shared.options.fence.as_deref().unwrap_or(&unlimited);
    let works: Vec<LayerWork> = shared
        .layers
        .iter()
        .filter(|layer| stepped(shared, layer.name()))
        .map(|layer| LayerWork::start(shared, layer, fence, false))
        .collect();
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
    for layer in shared.layers.iter() {
        layer.queue.close();
    }
    for work in &works {
        work.stop();
    }
    for work in works {
        work.join().await;
    }
    timed_out
}

/// Whether this controller steps layer `name` (`steps_only`).
fn stepped(shared: &Shared, name: &str) -> bool {
    shared
        .options
        .steps_only
        .as_ref()
        .is_none_or(|only| only.iter().any(|layer| layer == name))
}

/// Whether this controller watches the Combs of layer `name`: a layer it steps, or one such a
/// layer borrows from (directly, through others, or as a fallback).
fn watched(shared: &Shared, name: &str) -> bool {
    let Some(only) = &shared.options.steps_only else {
        return true;
    };
    only.iter().any(|stepped| {
        let config = &shared.config;
        let fallbacks = config
            .layer(stepped)
            .and_then(|layer| layer.borrow.as_ref())
            .and_then(|borrow| borrow.fallback.as_ref())
            .map(|fallback| fallback.to.as_slice())
            .unwrap_or_default();
        stepped == name
            || config
                .chain_above(stepped)
                .iter()
                .any(|above| above.name == name)
            || fallbacks.iter().any(|entry| {
                matches!(entry, crate::engine::borrow::Candidate::Layer(layer) if layer == name)
            })
    })
}

/// `--once`: waits until every layer has listed and every Comb is settled; returns whether the
/// timeout hit first.
async fn wait_settled(shared: &Shared, once: OnceOptions, shutdown: &CancellationToken) -> bool {
    let started = tokio::time::Instant::now();
    let deadline = started + once.timeout;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    // On a terminal, a line that counts the settled Combs while the run waits; never in a
    // pipe or a file, where stdout carries only the summary.
    let mut progress = std::io::IsTerminal::is_terminal(&std::io::stdout()).then(Progress::default);
    let outcome = loop {
        tokio::select! {
            () = shutdown.cancelled() => break false,
            () = tokio::time::sleep_until(deadline) => break true,
            _ = tick.tick() => {
                let count = settled_count(&shared.layers, once.settle);
                if let Some(progress) = &mut progress {
                    progress.show(count, started.elapsed());
                }
                if count.all_settled() {
                    info!("--once: every Comb is settled");
                    break false;
                }
            }
        }
    };
    if let Some(progress) = &mut progress {
        progress.clear();
    }
    outcome
}

/// How far `--once` got: whether every layer listed, and settled Combs of all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct SettledCount {
    pub listed: bool,
    pub settled: usize,
    pub total: usize,
}

impl SettledCount {
    fn all_settled(&self) -> bool {
        self.listed && self.settled == self.total
    }
}

/// The `--once` progress line: `waiting for Combs to settle: 5 of 9 (12s)`.
pub(super) fn progress_line(count: SettledCount, elapsed: Duration) -> String {
    if count.listed {
        format!(
            "waiting for Combs to settle: {} of {} ({}s)",
            count.settled,
            count.total,
            elapsed.as_secs()
        )
    } else {
        format!(
            "waiting for every layer to list its Combs ({}s)",
            elapsed.as_secs()
        )
    }
}

/// Rewrites one terminal line in place, only when its text changes.
#[derive(Default)]
struct Progress {
    shown: String,
}

impl Progress {
    fn show(&mut self, count: SettledCount, elapsed: Duration) {
        use std::io::Write as _;
        let line = progress_line(count, elapsed);
        if line != self.shown {
            let mut out = std::io::stdout();
            let _ = write!(out, "\r\x1b[2K{line}");
            let _ = out.flush();
            self.shown = line;
        }
    }

    fn clear(&mut self) {
        use std::io::Write as _;
        if !self.shown.is_empty() {
            let mut out = std::io::stdout();
            let _ = write!(out, "\r\x1b[2K");
            let _ = out.flush();
        }
    }
}

/// How many Combs of `layers` are settled (`--once`), of how many, and whether every layer
/// listed.
fn settled_count(layers: &Layers, settle: Duration) -> SettledCount {
    let mut count = SettledCount {
        listed: true,
        ..SettledCount::default()
    };
    for layer in layers {
        count.listed &= layer.is_listed();
        for settled in layer.each_entry(|key, entry| {
            is_settled(
                &SettleView {
                    stepped: entry.stepped(),
                    busy: layer.queue.is_busy(key),
                    phase: entry.recorded_phase(),
                    unchanged_for: entry.unchanged_for(),
                },
                settle,
            )
        }) {
            count.total += 1;
            count.settled += usize::from(settled);
        }
    }
    count
}

#[cfg(test)]
mod progress_tests {
    use super::*;

    #[test]
    fn the_progress_line_counts_settled_combs() {
        let count = |listed, settled, total| SettledCount {
            listed,
            settled,
            total,
        };
        assert_eq!(
            progress_line(count(true, 5, 9), Duration::from_millis(12_400)),
            "waiting for Combs to settle: 5 of 9 (12s)"
        );
        assert_eq!(
            progress_line(count(false, 0, 0), Duration::from_secs(1)),
            "waiting for every layer to list its Combs (1s)"
        );
        assert!(count(true, 9, 9).all_settled());
        assert!(!count(false, 9, 9).all_settled());
        assert!(!count(true, 8, 9).all_settled());
    }
}
