//! Fallback along the chain at run time (issue 22): comb looks at every upstream a borrow with a
//! `fallback` depends on, feeds what it sees into each borrower's chain
//! ([`FallbackChain`](crate::engine::borrow::FallbackChain), pure), and steps a borrower whose
//! chain moved; the step then borrows from (or runs as) the entry in use.
//!
//! What comb looks at, and how often (every
//! [`HealthPolicy::check_period`](crate::engine::borrow::HealthPolicy::check_period) of the
//! shortest `unhealthyAfter` that depends on it):
//!
//! - each upstream layer's API server: one `GET /readyz` per kube context, whatever the number
//!   of borrowers (a settled layer sends no other request, so a partition that leaves its
//!   connections hanging would otherwise go unnoticed until a watch times out), with a deadline
//!   ([`HealthPolicy::check_timeout`](crate::engine::borrow::HealthPolicy::check_timeout)); a
//!   layer whose watches failed counts as unreachable at once;
//! - the peer Comb in each entry's layer, as the watches hold it: serving while Running (or
//!   rolling out) with endpoints ([`peer_serves`]);
//! - with `probe: tcp`, one TCP connect per address the bridge to each entry would use, from the
//!   controller.
//!
//! Without a `fallback` anywhere nothing here runs: no check, no chain.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use comb_api::{CombStatus, ConditionStatus, Reason, UPSTREAM_FALLBACK};
use futures::StreamExt;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::events::EventType;
use super::fanout::Fanout;
use super::layer::{LayerRuntime, LayerState, Layers};
use super::metrics::Metrics;
use super::report::Reports;
use super::triggers::chain_peer;
use crate::config::{Config, Fallback, Probe};
use crate::engine::borrow::fallback::{Serving, peer_serves, written_duration};
use crate::engine::borrow::redirect::with_port;
use crate::engine::borrow::{
    ApiHealth, Candidate, Controlling, FallbackChain, FallbackState, Observation,
};
use crate::engine::keys::CombKey;

/// How many TCP probes run at once.
const PROBES_AT_ONCE: usize = 16;

/// How often one upstream context is checked, and how long a check may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Schedule {
    pub period: Duration,
    pub timeout: Duration,
}

impl Schedule {
    /// The tighter of two schedules (a context several borrows depend on is checked as the
    /// most demanding one needs).
    fn tighter(self, other: Schedule) -> Schedule {
        Schedule {
            period: self.period.min(other.period),
            timeout: self.timeout.min(other.timeout),
        }
    }
}

/// The upstream contexts the borrows with a fallback depend on (each entry's layer, the
/// preferred one included), each with its schedule. Pure over the configuration.
pub(crate) fn checked_contexts(config: &crate::config::Config) -> BTreeMap<String, Schedule> {
    let mut contexts: BTreeMap<String, Schedule> = BTreeMap::new();
    for layer in &config.layers {
        let Some(borrow) = &layer.borrow else {
            continue;
        };
        let Some(fallback) = &borrow.fallback else {
            continue;
        };
        let schedule = Schedule {
            period: fallback.policy.check_period(),
            timeout: fallback.policy.check_timeout(),
        };
        let layers = std::iter::once(borrow.from.as_str()).chain(fallback.to.iter().filter_map(
            |candidate| match candidate {
                Candidate::Layer(name) => Some(name.as_str()),
                Candidate::Local => None,
            },
        ));
        for upstream in layers.filter_map(|name| config.layer(name)) {
            contexts
                .entry(upstream.context.clone())
                .and_modify(|known| *known = known.tighter(schedule))
                .or_insert(schedule);
        }
    }
    contexts
}

/// What a look at one API server found, as words for the chain: a server that says it is not
/// ready (`/readyz` fails), one that cannot be reached (refused, or a proxy or load balancer in
/// front of it answering 502, 503 or 504), or no answer in time.
fn check_failure(outcome: Result<kube::Error, Duration>) -> String {
    match outcome {
        Ok(kube::Error::Api(status)) if !matches!(status.code, 502..=504) => {
            "context not ready".to_string()
        }
        Ok(_) => "context unreachable".to_string(),
        Err(timeout) => format!("context not answering within {}", written_duration(timeout)),
    }
}

/// The Event of a step whose record moved on or off a fallback: `UpstreamFallback` (Warning)
/// when it moved onto one or to another, `UpstreamRecovered` (Normal) when it came back to the
/// preferred upstream. `fallback` gives the timing the message names.
pub(crate) fn fallback_event(
    previous: Option<&CombStatus>,
    status: &CombStatus,
    fallback: &Fallback,
) -> Option<(EventType, Reason, String)> {
    let condition = |status: Option<&CombStatus>| {
        status
            .and_then(|status| status.condition(UPSTREAM_FALLBACK))
            .map(|condition| {
                (
                    condition.status,
                    condition.message.clone().unwrap_or_default(),
                )
            })
    };
    let (before, after) = (condition(previous), condition(Some(status))?);
    match (before, after) {
        (Some(before), after) if before == after => None,
        (_, (ConditionStatus::True, message)) => {
            Some((EventType::Warning, Reason::UpstreamFallback, message))
        }
        (Some((ConditionStatus::True, _)), (_, message)) => Some((
            EventType::Normal,
            Reason::UpstreamRecovered,
            format!(
                "healthy again for {}; {message}",
                written_duration(fallback.policy.healthy_after)
            ),
        )),
        _ => None,
    }
}

/// Fallback at run time: what comb knows about the upstreams of borrows with a fallback, each
/// such borrower's chain, and the checks and evaluations that keep them.
pub(crate) struct Fallbacks {
    config: Arc<Config>,
    layers: Arc<Layers>,
    metrics: Arc<Metrics>,
    /// A borrower's switch is announced as an Event.
    reports: Arc<Reports>,
    /// A borrower whose chain moved is stepped.
    fanout: Arc<Fanout>,
    /// Per upstream kube context: what its checks found.
    api: Mutex<HashMap<String, ApiHealth>>,
    /// Per address: when it was last probed, and what that found.
    probes: Mutex<HashMap<String, Probed>>,
    /// Per borrower: its chain.
    chains: Mutex<HashMap<(usize, CombKey), FallbackChain>>,
}

/// When an address was probed, and what that found.
type Probed = (Instant, Serving);

impl Fallbacks {
    pub(crate) fn new(
        config: Arc<Config>,
        layers: Arc<Layers>,
        metrics: Arc<Metrics>,
        reports: Arc<Reports>,
        fanout: Arc<Fanout>,
    ) -> Fallbacks {
        Fallbacks {
            config,
            layers,
            metrics,
            reports,
            fanout,
            api: Mutex::default(),
            probes: Mutex::default(),
            chains: Mutex::default(),
        }
    }

    /// The controlling code's answer for Comb `key` of `layer`, and where its fallback chain
    /// stands when its layer's borrow has one. A borrower met for the first time resumes from its
    /// recorded status (`recorded`): one that was on a fallback stays there until its preferred
    /// upstream has been healthy for `healthyAfter`.
    pub(crate) fn upstream_choice(
        &self,
        layer: &LayerRuntime,
        key: &CombKey,
        recorded: Option<&CombStatus>,
    ) -> (Controlling, Option<FallbackState>) {
        let config = &self.config;
        let Some((candidates, fallback)) =
            config.fallback_of(&layer.layer, &key.namespace, &key.name)
        else {
            return (
                config.controlling(&layer.layer, &key.namespace, &key.name),
                None,
            );
        };
        let mut chains = self.chains.lock();
        let chain = chains
            .entry((layer.index, key.clone()))
            .or_insert_with(|| resumed_chain(config, candidates, fallback, recorded));
        let controlling =
            config.controlling_on(&layer.layer, &key.namespace, &key.name, chain.current());
        (controlling, Some(chain.state()))
    }

    /// After a step recorded `status` (previously `previous`): an Event and a log line when the
    /// borrower moved onto a fallback, to another one, or back.
    pub(crate) async fn announce_switch(
        &self,
        layer: &LayerRuntime,
        cr: &comb_api::Comb,
        previous: Option<&CombStatus>,
        status: &CombStatus,
    ) {
        let Some(fallback) = layer.fallback() else {
            return;
        };
        let Some((kind, reason, message)) = fallback_event(previous, status, fallback) else {
            return;
        };
        info!("{reason}: {message}");
        self.reports.event(layer, cr, kind, reason, &message).await;
    }

    /// Checks the API server of every upstream context a fallback depends on, until `cancel`.
    pub(crate) fn spawn_upstream_checks(
        self: &Arc<Self>,
        tasks: &mut tokio::task::JoinSet<()>,
        cancel: &CancellationToken,
    ) {
        let contexts = checked_contexts(&self.config);
        if contexts.is_empty() {
            return;
        }
        for (context, schedule) in &contexts {
            let Some(layer) = self.layers.iter().find(|l| &l.layer.context == context) else {
                continue;
            };
            tasks.spawn(check_context(
                self.clone(),
                context.clone(),
                layer.ops.client().clone(),
                *schedule,
                cancel.clone(),
            ));
        }
        let tick = contexts
            .values()
            .map(|schedule| schedule.period)
            .min()
            .unwrap_or(Duration::from_secs(2));
        tasks.spawn(evaluate_fallbacks(
            self.clone(),
            contexts,
            tick,
            cancel.clone(),
        ));
    }

    /// One look at every borrower with a fallback: probes first (they wait on the network), then
    /// each chain takes in what was seen and chooses; a borrower whose chain moved is stepped.
    async fn evaluate(&self, schedules: &BTreeMap<String, Schedule>) {
        let borrowers = self.fallback_borrowers();
        self.probe(&borrowers).await;
        let now = Instant::now();
        let mut chains = self.chains.lock();
        let mut on_fallback: BTreeMap<usize, i64> = BTreeMap::new();
        let mut kept: BTreeSet<(usize, CombKey)> = BTreeSet::new();
        for borrower in &borrowers {
            let id = (borrower.layer.index, borrower.key.clone());
            kept.insert(id.clone());
            let chain = chains.entry(id).or_insert_with(|| {
                resumed_chain(
                    &self.config,
                    borrower.candidates.clone(),
                    borrower.fallback,
                    borrower.layer.recorded_status(&borrower.key).as_ref(),
                )
            });
            for (index, peer) in borrower.peers.iter().enumerate() {
                let Some(peer) = peer else { continue };
                if let Some(observation) = self.look(peer, schedules, borrower.fallback, now) {
                    chain.observe(index, now, observation);
                }
            }
            if let Some(switch) = chain.choose(now) {
                let message = match &switch.state {
                    FallbackState::Fallback { message } => message.clone(),
                    FallbackState::Preferred { layer } => {
                        format!("{layer} is healthy again; borrowing from it")
                    }
                };
                info!(
                    layer = borrower.layer.name(),
                    namespace = %borrower.key.namespace,
                    comb = %borrower.key.name,
                    "switching from {} to {}: {message}",
                    switch.from,
                    switch.to
                );
                self.fanout.chain_moved(borrower.layer, &borrower.key);
            }
            *on_fallback.entry(borrower.layer.index).or_default() += i64::from(chain.on_fallback());
        }
        // Chains of Combs that are gone, no longer borrow, or whose layer another replica steps.
        chains.retain(|id, _| kept.contains(id));
        drop(chains);
        for layer in self.layers.iter() {
            if layer.fallback().is_some() {
                self.metrics.set_borrowers_on_fallback(
                    layer.name(),
                    on_fallback.get(&layer.index).copied().unwrap_or(0),
                );
            }
        }
    }

    /// Every Comb this replica steps whose layer's borrow has a fallback for it, with the peer
    /// of each entry of its chain.
    fn fallback_borrowers(&self) -> Vec<Borrower<'_>> {
        let mut borrowers = Vec::new();
        for layer in self.layers.iter().filter(|layer| layer.is_holding()) {
            if layer.fallback().is_none() {
                continue;
            }
            for key in layer.keys() {
                let Some((candidates, fallback)) =
                    self.config
                        .fallback_of(&layer.layer, &key.namespace, &key.name)
                else {
                    continue;
                };
                let peers = candidates
                    .iter()
                    .map(|candidate| self.peer_of(layer, &key, candidate))
                    .collect();
                borrowers.push(Borrower {
                    layer,
                    key,
                    candidates,
                    fallback,
                    peers,
                });
            }
        }
        borrowers
    }

    /// Where the peer of entry `candidate` of `key`'s chain is; `None` for `local`.
    fn peer_of(&self, layer: &LayerRuntime, key: &CombKey, candidate: &Candidate) -> Option<Peer> {
        // The runtimes are the configuration's layers, in its order.
        let (index, peer) = chain_peer(&self.config, &layer.layer, key, candidate)?;
        let runtime = self.layers.get(index)?.clone();
        // Every layer's pool is the controller's one.
        let pool = &layer.borrow_env.pool;
        let same_server = matches!(
            (pool.server_url(&runtime.layer.context), pool.server_url(&layer.layer.context)),
            (Ok(upstream), Ok(here)) if upstream == here
        );
        Some(Peer {
            layer: runtime,
            key: peer,
            same_server,
        })
    }

    /// What one look at `peer` finds at `now`; `None` while there is nothing to go by yet (no
    /// check of its context has finished, an address is not probed).
    fn look(
        &self,
        peer: &Peer,
        schedules: &BTreeMap<String, Schedule>,
        fallback: &Fallback,
        now: Instant,
    ) -> Option<Observation> {
        let layer = &peer.layer;
        let context = &layer.layer.context;
        let schedule = schedules.get(context)?;
        let api = self.api.lock().get(context).cloned()?;
        let api_trouble = if layer.state() == LayerState::Down {
            Some("context unreachable".to_string())
        } else {
            api.trouble(now, schedule.period)
        };
        let serves = if layer.is_listed() {
            self.serves(peer, fallback)
        } else {
            None
        };
        Observation::of(api.answered_at, api_trouble, serves)
    }

    /// Whether `peer`'s Comb serves, by its status as the watch holds it and (`probe: tcp`) the
    /// probes of its addresses; `None` while an address is not probed yet.
    fn serves(&self, peer: &Peer, fallback: &Fallback) -> Option<Serving> {
        let place = format!("Comb {}", peer.key);
        let Some(status) = peer.layer.kept_status(&peer.key) else {
            return Some(Serving::No(format!("no {place}")));
        };
        if let Serving::No(why) = peer_serves(&place, status.as_ref()) {
            return Some(Serving::No(why));
        }
        if fallback.probe == Some(Probe::Tcp) {
            let probes = self.probes.lock();
            for address in bridge_addresses(status.as_ref(), peer.same_server) {
                match probes.get(&address)? {
                    (_, Serving::No(why)) => return Some(Serving::No(why.clone())),
                    (_, Serving::Yes) => {}
                }
            }
        }
        Some(Serving::Yes)
    }

    /// Probes the addresses the bridges of `borrowers` with `probe: tcp` would use, each at most
    /// once per check period, at most [`PROBES_AT_ONCE`] at a time.
    async fn probe(&self, borrowers: &[Borrower<'_>]) {
        let mut due: BTreeMap<String, Duration> = BTreeMap::new();
        let now = Instant::now();
        {
            let probes = self.probes.lock();
            for borrower in borrowers {
                if borrower.fallback.probe != Some(Probe::Tcp) {
                    continue;
                }
                let policy = &borrower.fallback.policy;
                for peer in borrower.peers.iter().flatten() {
                    let status = peer.layer.kept_status(&peer.key).flatten();
                    for address in bridge_addresses(status.as_ref(), peer.same_server) {
                        let fresh = probes.get(&address).is_some_and(|(at, _)| {
                            now.saturating_duration_since(*at) < policy.check_period()
                        });
                        if !fresh {
                            let timeout = policy.check_timeout();
                            due.entry(address)
                                .and_modify(|known| *known = (*known).min(timeout))
                                .or_insert(timeout);
                        }
                    }
                }
            }
        }
        if due.is_empty() {
            return;
        }
        let results: Vec<(String, Serving)> =
            futures::stream::iter(due.into_iter().map(|(address, timeout)| async move {
                let result = connect(&address, timeout).await;
                (address, result)
            }))
            .buffer_unordered(PROBES_AT_ONCE)
            .collect()
            .await;
        let at = Instant::now();
        let mut probes = self.probes.lock();
        for (address, result) in results {
            if let Serving::No(why) = &result {
                debug!("probe: {why}");
            }
            probes.insert(address, (at, result));
        }
    }
}

/// A chain for a borrower met for the first time, on the entry its recorded status shows.
fn resumed_chain(
    config: &crate::config::Config,
    candidates: Vec<Candidate>,
    fallback: &Fallback,
    recorded: Option<&CombStatus>,
) -> FallbackChain {
    let entry = config.recorded_entry(&candidates, recorded);
    let message = recorded
        .and_then(|status| status.condition(UPSTREAM_FALLBACK))
        .and_then(|condition| condition.message.clone());
    FallbackChain::resume(candidates, fallback.policy, Instant::now(), entry, message)
}

/// A borrower with a fallback, as one evaluation sees it.
struct Borrower<'a> {
    layer: &'a Arc<LayerRuntime>,
    key: CombKey,
    candidates: Vec<Candidate>,
    fallback: &'a Fallback,
    /// The peer of each entry (`None` for `local`, or a layer this controller does not run).
    peers: Vec<Option<Peer>>,
}

/// The peer Comb of one entry.
struct Peer {
    layer: Arc<LayerRuntime>,
    key: CombKey,
    /// Whether its layer's API server is the borrower's: its `cluster` addresses are usable.
    same_server: bool,
}

/// The addresses a bridge to a peer with `status` would point at (`host:port`): what the peer
/// publishes that is usable from the borrower's cluster, as the K8s upstream picks it.
fn bridge_addresses(status: Option<&CombStatus>, same_server: bool) -> Vec<String> {
    status
        .map(CombStatus::endpoint_list)
        .unwrap_or_default()
        .iter()
        .filter_map(|endpoint| {
            comb_upstreams::usable_address(same_server, endpoint)
                .map(|address| with_port(address, endpoint.port))
        })
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect()
}

/// A TCP connect to `address` within `timeout`; the error names the address and what failed.
async fn connect(address: &str, timeout: Duration) -> Serving {
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(address)).await {
        Ok(Ok(_)) => Serving::Yes,
        Ok(Err(error)) => Serving::No(format!("tcp {address}: {}", error.kind())),
        Err(_) => Serving::No(format!(
            "tcp {address}: no answer within {}",
            written_duration(timeout)
        )),
    }
}

/// Checks one upstream context's API server every period until `cancel`: `GET /readyz`, a path
/// no step reads, so request counts tell the checks apart.
async fn check_context(
    fallbacks: Arc<Fallbacks>,
    context: String,
    client: kube::Client,
    schedule: Schedule,
    cancel: CancellationToken,
) {
    let mut ticks = tokio::time::interval(schedule.period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut answering = true;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
            return;
        };
        let outcome = tokio::select! {
            () = cancel.cancelled() => return,
            outcome = tokio::time::timeout(schedule.timeout, client.request_text(request)) => outcome,
        };
        let at = Instant::now();
        let failure = match outcome {
            Ok(Ok(_)) => None,
            Ok(Err(error)) => {
                debug!(context = %context, %error, "upstream check failed");
                Some(check_failure(Ok(error)))
            }
            Err(_) => Some(check_failure(Err(schedule.timeout))),
        };
        fallbacks
            .metrics
            .upstream_check(&context, failure.is_none());
        let mut api = fallbacks.api.lock();
        let health = api.entry(context.clone()).or_default();
        match failure {
            None => {
                health.answered(at);
                if !answering {
                    info!(context = %context, "upstream context {context} answers again");
                }
                answering = true;
            }
            Some(why) => {
                health.failed(at, why.clone());
                if answering {
                    warn!(context = %context, "upstream context {context}: {why}");
                }
                answering = false;
            }
        }
    }
}

/// Evaluates every borrower with a fallback every `tick` until `cancel`.
async fn evaluate_fallbacks(
    fallbacks: Arc<Fallbacks>,
    schedules: BTreeMap<String, Schedule>,
    tick: Duration,
    cancel: CancellationToken,
) {
    let mut ticks = tokio::time::interval(tick);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        fallbacks.evaluate(&schedules).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::engine::borrow::HealthPolicy;
    use serde_json::json;

    fn config(yaml: &str) -> Config {
        Config::from_yaml(yaml, "test", None).unwrap()
    }

    #[test]
    fn only_the_upstreams_of_fallbacks_are_checked_each_as_the_tightest_borrow_needs() {
        let none = config(
            "layers:\n - {name: prod, context: prod}\n - {name: dev, context: dev, borrow: {from: prod}}",
        );
        assert!(checked_contexts(&none).is_empty(), "no fallback, no check");
        let chain = config(
            "layers:
 - {name: prod, context: prod}
 - {name: staging, context: staging, borrow: {from: prod, fallback: [local], unhealthyAfter: 8s}}
 - {name: dev, context: dev, borrow: {from: staging, fallback: [prod], unhealthyAfter: 1s}}
 - {name: qa, context: qa, borrow: {from: staging}}",
        );
        let checked = checked_contexts(&chain);
        assert_eq!(
            checked,
            BTreeMap::from([
                (
                    "prod".to_string(),
                    Schedule {
                        period: Duration::from_millis(250),
                        timeout: Duration::from_secs(1)
                    }
                ),
                (
                    "staging".to_string(),
                    Schedule {
                        period: Duration::from_millis(250),
                        timeout: Duration::from_secs(1)
                    }
                ),
            ])
        );
    }

    #[test]
    fn check_failures_in_words() {
        let refused = kube::Error::Service(Box::new(std::io::Error::other("refused")));
        assert_eq!(check_failure(Ok(refused)), "context unreachable");
        assert_eq!(
            check_failure(Err(Duration::from_secs(2))),
            "context not answering within 2s"
        );
    }

    fn status(fallback: Option<(&str, &str)>) -> CombStatus {
        let mut conditions = vec![json!({"type": "Ready", "status": "True", "reason": "Borrowed"})];
        if let Some((status, message)) = fallback {
            conditions
                .push(json!({"type": "UpstreamFallback", "status": status, "message": message}));
        }
        serde_json::from_value(json!({"phase": "Running", "conditions": conditions})).unwrap()
    }

    #[test]
    fn events_on_each_switch_and_on_the_way_back() {
        let fallback = Fallback {
            to: vec![Candidate::Layer("prod".into())],
            policy: HealthPolicy::default(),
            probe: None,
        };
        let preferred = status(Some((
            "False",
            "borrowing from staging, the preferred upstream",
        )));
        let on_prod = status(Some((
            "True",
            "staging unhealthy for 30s (context unreachable); borrowing from prod",
        )));
        let on_local = status(Some((
            "True",
            "staging unhealthy for 30s (context unreachable), prod unhealthy for 30s (context \
             unreachable); running locally",
        )));
        let cases = [
            (Some(&preferred), &preferred, None),
            (None, &preferred, None),
            (
                Some(&preferred),
                &on_prod,
                Some((
                    EventType::Warning,
                    "UpstreamFallback",
                    "staging unhealthy for 30s (context unreachable); borrowing from prod",
                )),
            ),
            (Some(&on_prod), &on_prod, None),
            (
                Some(&on_prod),
                &on_local,
                Some((
                    EventType::Warning,
                    "UpstreamFallback",
                    "staging unhealthy for 30s (context unreachable), prod unhealthy for 30s \
                     (context unreachable); running locally",
                )),
            ),
            (
                Some(&on_prod),
                &preferred,
                Some((
                    EventType::Normal,
                    "UpstreamRecovered",
                    "healthy again for 1m; borrowing from staging, the preferred upstream",
                )),
            ),
            (Some(&status(None)), &preferred, None),
        ];
        for (previous, status, want) in cases {
            let got = fallback_event(previous, status, &fallback);
            assert_eq!(
                got.as_ref().map(|(kind, reason, message)| (
                    *kind,
                    reason.as_str(),
                    message.as_str()
                )),
                want,
                "{previous:?} -> {status:?}"
            );
        }
    }

    #[test]
    fn bridges_point_at_what_is_usable_from_here_with_a_port() {
        let status: CombStatus = serde_json::from_value(json!({"phase": "Running", "endpoints": [
            {"name": "client", "port": 4222, "cluster": "nats.platform.svc:4222", "external": "192.0.2.10:4222"},
            {"name": "monitor", "port": 8222, "cluster": "nats.platform.svc", "external": "192.0.2.10"},
            {"name": "inside", "port": 9000, "cluster": "nats.platform.svc:9000"}
        ]}))
        .unwrap();
        assert_eq!(
            bridge_addresses(Some(&status), false),
            ["192.0.2.10:4222", "192.0.2.10:8222"]
        );
        assert_eq!(
            bridge_addresses(Some(&status), true),
            [
                "nats.platform.svc:4222",
                "nats.platform.svc:8222",
                "nats.platform.svc:9000"
            ]
        );
        assert!(bridge_addresses(None, true).is_empty());
    }

    #[tokio::test]
    async fn a_probe_connects_or_says_why_not() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().to_string();
        assert_eq!(connect(&open, Duration::from_secs(1)).await, Serving::Yes);
        drop(listener);
        assert_eq!(
            connect(&open, Duration::from_secs(1)).await,
            Serving::No(format!("tcp {open}: connection refused"))
        );
    }
}
