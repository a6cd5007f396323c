//! Calls from inside Pods of the sandbox network (`--backend kube --network`), for the tests that
//! prove a data path by traffic: each check repeats its call and requires the expected answer
//! [`CALLS`] times in a row, once the data path followed the objects (kube-proxy syncs at most
//! once a second, and during a switch both sides may answer for a moment).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use comb_sandbox::real::network::{
    CallOutcome, ClusterNetwork, Failure, NetworkOptions, ProxyMode,
};
use comb_sandbox::real::{network_available_or_skip, record_skip};

use crate::Backend;

/// How many calls a check makes once the first was answered as expected.
pub const CALLS: usize = 20;

/// The network options of a test, when the network can run here: on the real backend
/// (`COMB_TEST_BACKEND=kube`), as root, with kube-proxy, CoreDNS and the proxy mode's tool. Else
/// `None`, and the test says why it skips (on stderr and in `$COMB_SKIP_LOG`).
pub fn options_or_skip(
    test: &str,
    proxy_mode: ProxyMode,
    clusters: usize,
) -> Option<NetworkOptions> {
    if Backend::from_env() != Backend::Kube {
        record_skip(&format!(
            "{test}: skipped: the sandbox network runs on the real backend (COMB_TEST_BACKEND=kube)"
        ));
        return None;
    }
    let options = NetworkOptions {
        identity_bin: Some(crate::bin::identity_path().to_path_buf()),
        proxy_mode,
        real_node: None,
    };
    network_available_or_skip(test, &options, clusters).then_some(options)
}

fn limit() -> Duration {
    crate::deadline()
}

/// Calls `target` from Pod `namespace/pod` until it is answered [`CALLS`] times in a row by a
/// Pod whose identity starts with `answered_by` (`cluster/namespace/` or a whole
/// `cluster/namespace/pod`), within the kit's deadline: those calls.
pub async fn expect_answers(
    network: &ClusterNetwork,
    namespace: &str,
    pod: &str,
    target: &str,
    answered_by: &str,
) -> Vec<CallOutcome> {
    let expected = |outcome: &CallOutcome| {
        outcome
            .answered_by
            .as_deref()
            .is_some_and(|by| by.starts_with(answered_by))
    };
    let calls = network
        .calls_once_converged(namespace, pod, target, CALLS, limit(), expected)
        .await;
    assert!(
        calls.converged,
        "{namespace}/{pod} -> {target}: never answered by {answered_by}* within {:?}; the last call: {:?}",
        limit(),
        calls.outcomes
    );
    let wrong: Vec<&CallOutcome> = calls.outcomes.iter().filter(|o| !expected(o)).collect();
    assert!(
        wrong.is_empty(),
        "{namespace}/{pod} -> {target}: {} of {CALLS} calls not answered by {answered_by}*: {wrong:?}",
        wrong.len()
    );
    calls.outcomes
}

/// Calls `target` from Pod `namespace/pod` until it fails with `failure` [`CALLS`] times in a
/// row (nothing answers), within the kit's deadline: those calls.
pub async fn expect_failures(
    network: &ClusterNetwork,
    namespace: &str,
    pod: &str,
    target: &str,
    failure: Failure,
) -> Vec<CallOutcome> {
    let expected = |outcome: &CallOutcome| outcome.failure == Some(failure);
    let calls = network
        .calls_once_converged(namespace, pod, target, CALLS, limit(), expected)
        .await;
    assert!(
        calls.converged,
        "{namespace}/{pod} -> {target}: never failed with {failure:?} within {:?}; the last call: {:?}",
        limit(),
        calls.outcomes
    );
    let wrong: Vec<&CallOutcome> = calls.outcomes.iter().filter(|o| !expected(o)).collect();
    assert!(
        wrong.is_empty(),
        "{namespace}/{pod} -> {target}: {} of {CALLS} calls did not fail with {failure:?}: {wrong:?}",
        wrong.len()
    );
    calls.outcomes
}

/// Calls from a Pod at a steady rate, each call on its own (so a slow one delays none after
/// it), every outcome kept with when the call started, until [`Caller::stop`].
pub struct Caller {
    started: Instant,
    calls: Arc<Mutex<Vec<(Duration, CallOutcome)>>>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Caller {
    /// Calls `target` from Pod `namespace/pod` of `network` `rate` times a second.
    pub fn start(
        network: Arc<ClusterNetwork>,
        (namespace, pod, target): (&str, &str, &str),
        rate: usize,
    ) -> Caller {
        let started = Instant::now();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let (namespace, pod, target) = (namespace.to_string(), pod.to_string(), target.to_string());
        let log = calls.clone();
        let task = tokio::spawn(async move {
            let period = Duration::from_secs(1) / u32::try_from(rate.max(1)).unwrap_or(u32::MAX);
            let mut ticks = tokio::time::interval(period);
            let mut in_flight = Vec::new();
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = ticks.tick() => {}
                }
                let (network, namespace, pod, target, log) = (
                    network.clone(),
                    namespace.clone(),
                    pod.clone(),
                    target.clone(),
                    log.clone(),
                );
                in_flight.push(tokio::spawn(async move {
                    let at = started.elapsed();
                    let outcome = network.call(&namespace, &pod, &target).await;
                    lock(&log).push((at, outcome));
                }));
            }
            for call in in_flight {
                let _ = call.await;
            }
        });
        Caller {
            started,
            calls,
            stop,
            task,
        }
    }

    /// The time since the first call, on the clock of the calls' start times.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// When the first call that started at or after `since` and ended as `wanted` started.
    pub fn first_since(
        &self,
        since: Duration,
        wanted: impl Fn(&CallOutcome) -> bool,
    ) -> Option<Duration> {
        lock(&self.calls)
            .iter()
            .filter(|(at, outcome)| *at >= since && wanted(outcome))
            .map(|(at, _)| *at)
            .min()
    }

    /// How many calls that started at or after `since` have ended.
    pub fn ended_since(&self, since: Duration) -> usize {
        lock(&self.calls)
            .iter()
            .filter(|(at, _)| *at >= since)
            .count()
    }

    /// Stops calling, waits for the calls under way: every outcome, by start time.
    pub async fn stop(self) -> Vec<(Duration, CallOutcome)> {
        let _ = self.stop.send(());
        let _ = self.task.await;
        let mut calls = std::mem::take(&mut *lock(&self.calls));
        calls.sort_by_key(|(at, _)| *at);
        calls
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether `outcome` was answered by a Pod whose identity starts with `who`.
pub fn answered_by(outcome: &CallOutcome, who: &str) -> bool {
    outcome
        .answered_by
        .as_deref()
        .is_some_and(|by| by.starts_with(who))
}

/// Calls at a steady rate through a failover and back: from before `from` is lost until after
/// the calls are answered by `from` again.
#[derive(Debug, Clone)]
pub struct Failover {
    /// When the first call started: the clock of every figure below.
    pub started: Instant,
    /// Every call: when it started (since the first), and its outcome, by start time.
    pub calls: Vec<(Duration, CallOutcome)>,
    /// When `from` was lost, and when it was back, on the same clock.
    pub lost_at: Duration,
    pub back_at: Duration,
    /// Whose answers mean which side (`cluster/namespace/` or a Pod's start).
    pub from: String,
    pub to: String,
}

/// How long a node's connection tracking keeps an attempt that never connected (`SYN_SENT`: Linux's
/// `nf_conntrack_tcp_timeout_syn_sent`, 120 s, from the last retransmission, which comes within
/// the call's connect wait).
const STALE_TRACKING: Duration = Duration::from_secs(125);

/// Whether the call that started at `at` left from the source port of an earlier attempt in
/// `calls` that never connected (it timed out, or an ICMP error refused it or found no route:
/// errors that leave the tracking entry as it was; a refusal by TCP reset closes it, which the
/// call cannot tell apart) within [`STALE_TRACKING`]: the caller's node then still tracks that
/// attempt as `SYN_SENT`, and a new attempt from the same port is the same connection to it,
/// translated to where the first went, whatever kube-proxy programmed since.
/// kube-proxy clears stale tracking entries only for UDP (kubernetes#101607; 1.37's
/// `pkg/proxy/conntrack/cleanup.go`), so on a real node such a call goes to the upstream the
/// bridge left.
fn stale_tracked(calls: &[(Duration, CallOutcome)], at: Duration, outcome: &CallOutcome) -> bool {
    let Some(port) = outcome.local_port else {
        return false;
    };
    calls.iter().any(|(earlier, attempt)| {
        *earlier < at
            && at.saturating_sub(*earlier) <= STALE_TRACKING
            && attempt.local_port == Some(port)
            && matches!(
                attempt.failure,
                Some(Failure::Timeout | Failure::Refused | Failure::Unreachable)
            )
    })
}

/// When the first call of `calls` (in any order) that started at or after `since` and was
/// answered by `who` through the bridge (not through a stale tracking entry) started.
fn first_answer_since(
    calls: &[(Duration, CallOutcome)],
    since: Duration,
    who: &str,
) -> Option<Duration> {
    calls
        .iter()
        .filter(|(at, outcome)| {
            *at >= since && answered_by(outcome, who) && !stale_tracked(calls, *at, outcome)
        })
        .map(|(at, _)| *at)
        .min()
}

impl Failover {
    fn first_answer_since(&self, since: Duration, who: &str) -> Option<Duration> {
        first_answer_since(&self.calls, since, who)
    }

    /// Whether the call that started at `at` went where a stale tracking entry said
    /// ([`stale_tracked`]).
    pub fn stale_tracked(&self, at: Duration, outcome: &CallOutcome) -> bool {
        stale_tracked(&self.calls, at, outcome)
    }

    /// The calls after the first answer by `to` that a stale tracking entry took where the
    /// bridge no longer points ([`Failover::stale_tracked`]): lost, or answered by `from`.
    pub fn taken_by_stale_tracking(&self) -> Vec<&(Duration, CallOutcome)> {
        let Some(switched) = self.first_answer_by_to() else {
            return Vec::new();
        };
        self.calls
            .iter()
            .filter(|(at, outcome)| {
                *at >= switched
                    && !answered_by(outcome, &self.to)
                    && self.stale_tracked(*at, outcome)
            })
            .collect()
    }

    /// When the first call answered by `to` started, after the loss.
    pub fn first_answer_by_to(&self) -> Option<Duration> {
        self.first_answer_since(self.lost_at, &self.to)
    }

    /// From the loss to the first call answered by `to`.
    pub fn time_to_fail_over(&self) -> Option<Duration> {
        Some(self.first_answer_by_to()?.saturating_sub(self.lost_at))
    }

    /// From `from`'s return to the first call answered by it again.
    pub fn time_to_come_back(&self) -> Option<Duration> {
        let first = self.first_answer_since(self.back_at, &self.from)?;
        Some(first.saturating_sub(self.back_at))
    }

    /// The calls that started in `[since, until)` and were answered by neither side.
    pub fn lost(&self, since: Duration, until: Duration) -> Vec<&(Duration, CallOutcome)> {
        self.calls
            .iter()
            .filter(|(at, outcome)| {
                *at >= since
                    && *at < until
                    && !answered_by(outcome, &self.from)
                    && !answered_by(outcome, &self.to)
            })
            .collect()
    }

    /// The calls lost before the switch (after the loss, before the first answer by `to`).
    pub fn lost_before_switch(&self) -> Vec<&(Duration, CallOutcome)> {
        let switched = self.first_answer_by_to().unwrap_or(Duration::MAX);
        self.lost(self.lost_at, switched)
    }

    /// The calls lost once the first was answered by `to`, the way back included, but for
    /// those a stale tracking entry took ([`Failover::taken_by_stale_tracking`]).
    pub fn lost_after_switch(&self) -> Vec<&(Duration, CallOutcome)> {
        match self.first_answer_by_to() {
            Some(switched) => self
                .lost(switched, Duration::MAX)
                .into_iter()
                .filter(|(at, outcome)| !self.stale_tracked(*at, outcome))
                .collect(),
            None => Vec::new(),
        }
    }

    /// The calls lost once `from` was back, but for those a stale tracking entry took.
    pub fn lost_on_the_way_back(&self) -> Vec<&(Duration, CallOutcome)> {
        self.lost(self.back_at, Duration::MAX)
            .into_iter()
            .filter(|(at, outcome)| !self.stale_tracked(*at, outcome))
            .collect()
    }

    /// One line of figures, for the benchmark and the tests' output.
    pub fn summary(&self) -> String {
        let seconds = |d: Option<Duration>| {
            d.map_or("never".to_string(), |d| format!("{:.1} s", d.as_secs_f64()))
        };
        format!(
            "{} calls; failed over in {}, {} lost before, {} after; came back in {}, {} lost on the way back; {} taken by stale connection tracking after the switch",
            self.calls.len(),
            seconds(self.time_to_fail_over()),
            self.lost_before_switch().len(),
            self.lost_after_switch().len(),
            seconds(self.time_to_come_back()),
            self.lost_on_the_way_back().len(),
            self.taken_by_stale_tracking().len(),
        )
    }
}

/// Calls `target` from Pod `namespace/pod` of `network` at `rate` a second through a failover,
/// each stage waiting on what the calls met, within `limit`: answered by `from` `settle` times
/// in a row; then `lose` takes `from` away, and once a call is answered by `to` and `settle`
/// more have ended, `restore` brings it back; the calls go on until one is answered by `from`
/// again and `settle` more have ended. What the calls met, or what did not happen in time.
#[allow(clippy::too_many_arguments)]
pub async fn failover(
    network: Arc<ClusterNetwork>,
    call: (&str, &str, &str),
    rate: usize,
    (from, to): (&str, &str),
    lose: impl Future<Output = ()>,
    restore: impl Future<Output = ()>,
    limit: Duration,
    settle: usize,
) -> Result<Failover, String> {
    let caller = Caller::start(network, call, rate);
    let (namespace, pod, target) = call;
    let waited = async |what: String, done: &dyn Fn() -> bool| -> Result<(), String> {
        let deadline = Instant::now() + limit;
        while !done() {
            if Instant::now() > deadline {
                return Err(format!(
                    "{namespace}/{pod} -> {target}: not {what} within {limit:?}"
                ));
            }
            tokio::time::sleep(crate::POLL).await;
        }
        Ok(())
    };
    // Answered by `from` `settle` times in a row before the loss: the baseline.
    let baseline = waited(
        format!("answered by {from}* {settle} times in a row"),
        &|| {
            let calls = lock(&caller.calls);
            let mut ended: Vec<&(Duration, CallOutcome)> = calls.iter().collect();
            ended.sort_by_key(|(at, _)| *at);
            ended.len() >= settle
                && ended[ended.len() - settle..]
                    .iter()
                    .all(|(_, outcome)| answered_by(outcome, from))
        },
    )
    .await;
    if let Err(error) = baseline {
        caller.stop().await;
        return Err(error);
    }
    let lost_at = caller.elapsed();
    lose.await;
    let switched = waited(format!("answered by {to}* after the loss"), &|| {
        caller
            .first_since(lost_at, |o| answered_by(o, to))
            .is_some_and(|first| caller.ended_since(first) >= settle)
    })
    .await;
    let back_at = caller.elapsed();
    restore.await;
    let returned = match &switched {
        Ok(()) => {
            // An answer by `from` through a stale tracking entry is no return: the bridge
            // does not point there yet.
            waited(format!("answered by {from}* after its return"), &|| {
                let calls = lock(&caller.calls);
                first_answer_since(&calls, back_at, from).is_some_and(|first| {
                    calls.iter().filter(|(at, _)| *at >= first).count() >= settle
                })
            })
            .await
        }
        Err(_) => Ok(()),
    };
    let started = caller.started;
    let calls = caller.stop().await;
    switched?;
    returned?;
    Ok(Failover {
        started,
        calls,
        lost_at,
        back_at,
        from: from.to_string(),
        to: to.to_string(),
    })
}

/// What a watch saw of a Service's EndpointSlices, and when: printed beside calls that failed,
/// so that a failure says what the data path was told at the time.
pub struct SliceHistory {
    seen: Arc<Mutex<Vec<(Instant, String)>>>,
    task: JoinHandle<()>,
}

impl SliceHistory {
    /// Watches the EndpointSlices of Service `namespace/service` through `client` until dropped.
    pub fn watch(client: kube::Client, namespace: &str, service: &str) -> SliceHistory {
        use futures::StreamExt;
        use k8s_openapi::api::discovery::v1::EndpointSlice;
        use kube::runtime::{WatchStreamExt, watcher};

        let api: kube::Api<EndpointSlice> = kube::Api::namespaced(client, namespace);
        let config =
            watcher::Config::default().labels(&format!("kubernetes.io/service-name={service}"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            // With a backoff: once the cluster stops, its retries would otherwise spin.
            let mut events = std::pin::pin!(watcher(api, config).default_backoff());
            while let Some(event) = events.next().await {
                let line = match event {
                    Ok(watcher::Event::Apply(slice) | watcher::Event::InitApply(slice)) => {
                        describe_slice(&slice)
                    }
                    Ok(watcher::Event::Delete(slice)) => format!(
                        "{} deleted",
                        slice.metadata.name.as_deref().unwrap_or_default()
                    ),
                    Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
                    Err(error) => format!("watch error: {error}"),
                };
                lock(&log).push((Instant::now(), line));
            }
        });
        SliceHistory { seen, task }
    }

    /// What was seen, each line with its time on the clock that starts at `started` (negative
    /// before it).
    pub fn since(&self, started: Instant) -> Vec<String> {
        lock(&self.seen)
            .iter()
            .map(|(at, line)| {
                let offset = if *at >= started {
                    at.duration_since(started).as_secs_f64()
                } else {
                    -started.duration_since(*at).as_secs_f64()
                };
                format!("{offset:.2} s: {line}")
            })
            .collect()
    }
}

impl Drop for SliceHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One line of what an EndpointSlice says: its name, resourceVersion, addresses (with their
/// readiness) and ports.
fn describe_slice(slice: &k8s_openapi::api::discovery::v1::EndpointSlice) -> String {
    let addresses: Vec<String> = slice
        .endpoints
        .iter()
        .flatten()
        .map(|endpoint| {
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|conditions| conditions.ready)
                .map_or(String::new(), |ready| format!(" ready={ready}"));
            format!("{}{ready}", endpoint.addresses.join(","))
        })
        .collect();
    let ports: Vec<String> = slice
        .ports
        .iter()
        .flatten()
        .map(|port| {
            format!(
                "{}:{}",
                port.name.as_deref().unwrap_or_default(),
                port.port.unwrap_or_default()
            )
        })
        .collect();
    format!(
        "{} rv {}: [{}] ports [{}]",
        slice.metadata.name.as_deref().unwrap_or_default(),
        slice
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default(),
        addresses.join("; "),
        ports.join(", ")
    )
}
