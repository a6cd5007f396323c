//! The work queue of one layer: one step at a time per Comb, many Combs in parallel.
//!
//! A Comb is idle, queued, running, paced or backing off. Triggers for a queued Comb are merged
//! (one step serves them all); a trigger for a running Comb makes it run once more afterwards.
//! Such reruns are paced: the first comes at once, each further one in a row waits longer, so
//! that a step whose own writes wake it again (an unhealthy Comb re-applies its manifests, a
//! webhook rewrites what was applied) cannot spin. A failed step backs off exponentially. Only
//! an urgent trigger (the CR changed) cuts a wait short, and a wake from another Comb (a
//! dependency or upstream changed status) cuts pacing short: it is news the step could not have
//! caused itself, and a dependent must not sit Blocked behind its own pacing. Each Comb is
//! stepped again about `resync` after its last step, at its own place in the period
//! ([`resync_at`]), so that Combs that started together do not resync together. The bookkeeping is
//! [`QueueState`], a plain state machine driven with explicit instants so that tests need no
//! clock; [`WorkQueue`] wraps it for the workers.

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

use comb_api::{Phase, Reason};
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::backoff::BackoffPolicy;
use super::shards::stable_hash;
use crate::engine::cache::ReadSummary;
use crate::engine::keys::CombKey;

/// Why a Comb is stepped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Trigger {
    /// The CR appeared (or the controller started).
    Created,
    /// The CR's spec, annotations or finalizers changed.
    Changed,
    /// The CR is being deleted.
    Deleting,
    /// One of its resources changed or disappeared.
    Resource,
    /// A Comb it depends on changed status.
    Dependency,
    /// Its upstream peer in a higher layer changed status.
    Upstream,
    /// Its layer came back after being unreachable.
    LayerRecovered,
    /// Its fallback chain moved: the upstream it borrows from changes.
    Fallback,
    /// The periodic resync.
    Resync,
    /// The retry after a failed step.
    Retry,
}

impl Trigger {
    /// Whether the trigger cuts a backoff short: the user changed something, or the upstream to
    /// borrow from changed, so the next step may well succeed.
    pub fn urgent(self) -> bool {
        matches!(
            self,
            Trigger::Created | Trigger::Changed | Trigger::Deleting | Trigger::Fallback
        )
    }

    /// Whether the trigger is news from elsewhere (a dependency or the upstream peer changed
    /// status, the fallback chain moved): it ends pacing, since the Comb's own writes cannot
    /// have caused it.
    pub fn from_elsewhere(self) -> bool {
        matches!(
            self,
            Trigger::Dependency | Trigger::Upstream | Trigger::Fallback
        )
    }
}

/// What a Comb is doing now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Activity {
    #[default]
    Idle,
    Queued,
    Running,
    /// A rerun waits (its trigger is kept).
    Paced {
        until: Instant,
    },
    Backoff {
        until: Instant,
    },
}

/// What a step left its Comb as (the debug view, the metrics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepState {
    /// A reconcile step recorded this phase, with this Ready reason.
    Recorded {
        phase: Phase,
        reason: Option<Reason>,
    },
    /// The step failed before it could record a status (reading the CR, adding the
    /// finalizer, a panic): `Error` with the reason.
    Failed(Reason),
    /// The CR is being deleted and its cleanup goes on (why it waits or failed).
    Deleting(Reason),
    /// Cleanup done, the finalizer removed.
    Deleted,
    /// The CR was gone when the step came.
    Gone,
    /// The step was dropped unfinished (the layer's shard Lease ended).
    Dropped(Reason),
}

impl StepState {
    /// The phase word the debug view and the metrics show: the recorded phase, `Error`,
    /// `Deleting`, `Deleted`, `Gone`; none for a dropped step.
    pub fn phase_word(&self) -> Option<&str> {
        match self {
            StepState::Recorded { phase, .. } => Some(phase.as_str()),
            StepState::Failed(_) => Some(Phase::Error.as_str()),
            StepState::Deleting(_) => Some("Deleting"),
            StepState::Deleted => Some("Deleted"),
            StepState::Gone => Some("Gone"),
            StepState::Dropped(_) => None,
        }
    }

    pub fn reason(&self) -> Option<&Reason> {
        match self {
            StepState::Recorded { reason, .. } => reason.as_ref(),
            StepState::Failed(reason)
            | StepState::Deleting(reason)
            | StepState::Dropped(reason) => Some(reason),
            StepState::Deleted => Some(&Reason::CleanedUp),
            StepState::Gone => Some(&Reason::Gone),
        }
    }
}

/// How a step ended, as the queue needs to know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepReport {
    /// What the step left the Comb as (for the debug view).
    pub state: StepState,
    /// Whether to retry with backoff (phase Error, or the status could not be written).
    pub failed: bool,
    /// When the step started, as wall time (for the debug view).
    pub started_at: jiff::Timestamp,
    pub duration: Duration,
    /// Where the step's reads went (watches or the API server), when it counted them.
    pub reads: Option<ReadSummary>,
    /// Step again this soon, whatever else comes (its held-back progress is due then): the
    /// next resync comes early.
    pub again_after: Option<Duration>,
}

impl StepReport {
    /// A step that left its Comb as `state`, retried with backoff when `failed`; whoever timed
    /// the step sets when it started and how long it took.
    pub fn new(state: StepState, failed: bool) -> StepReport {
        StepReport {
            state,
            failed,
            started_at: jiff::Timestamp::UNIX_EPOCH,
            duration: Duration::ZERO,
            reads: None,
            again_after: None,
        }
    }
}

#[derive(Debug, Default)]
struct Entry {
    activity: Activity,
    /// The trigger of the next step: why the Comb is queued, or why it runs again after the
    /// running step.
    pending: Option<Trigger>,
    /// Failed steps in a row.
    failures: u32,
    /// Steps in a row that were woken again while they ran.
    reruns: u32,
    /// Removed from its layer while running: dropped when the step ends.
    forgotten: bool,
    /// Since when it waits for a worker (while `Queued`).
    queued_at: Option<Instant>,
    next_resync: Option<Instant>,
    /// The jitter of this Comb's resync place, drawn at its first step and kept: a jitter
    /// drawn anew each time would let the resyncs of Combs that started together overlap
    /// where one period's end meets the next.
    resync_jitter: Option<f64>,
    last: Option<StepReport>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKind {
    Retry,
    Paced,
    Resync,
}

/// A Comb due to be stepped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    pub key: CombKey,
    pub trigger: Trigger,
    /// How long it waited for a worker since it was queued.
    pub waited: Duration,
}

/// The queue's bookkeeping, without locks or clocks.
#[derive(Debug)]
pub struct QueueState {
    entries: HashMap<CombKey, Entry>,
    ready: VecDeque<CombKey>,
    timers: BinaryHeap<Reverse<(Instant, TimerKind, CombKey)>>,
    resync: Duration,
    /// What resync places are counted from.
    epoch: Instant,
    backoff: BackoffPolicy,
    pacing: BackoffPolicy,
    /// How many entries are `Queued`: the depth, kept as entries move rather than counted
    /// (counting walked every Comb of the layer after every step).
    queued: usize,
    paused: bool,
    closed: bool,
}

/// How much of the period a resync's jitter moves it at most.
pub const RESYNC_JITTER: f64 = 0.1;

/// Where `key` falls in a resync period, in `[0, 1)`: the stable hash of `namespace/name`
/// ([`stable_hash`]), the same in every process and run, its top 53 bits (exactly
/// representable).
pub fn resync_offset(key: &CombKey) -> f64 {
    let hash = stable_hash(&format!("{}/{}", key.namespace, key.name));
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

/// When `key` resyncs after a step that ended at `now`: at its own place in the period
/// (`epoch + (offset + jitter) * period + k * period`, the offset from [`resync_offset`], the
/// jitter `jitter * RESYNC_JITTER` of the period, drawn once per Comb), the first such place
/// at least half a period after `now`. Combs that all stepped at once (a start, a layer that came back) spread over one
/// period; a settled Comb resyncs once a period, give or take the jitter.
pub fn resync_at(
    epoch: Instant,
    now: Instant,
    period: Duration,
    key: &CombKey,
    jitter: f64,
) -> Instant {
    let period_secs = period.as_secs_f64();
    if period_secs <= 0.0 {
        return now;
    }
    let place = (resync_offset(key) + jitter.clamp(0.0, 1.0) * RESYNC_JITTER).fract();
    let earliest = now.saturating_duration_since(epoch).as_secs_f64() + period_secs / 2.0;
    let periods = ((earliest / period_secs) - place).ceil().max(0.0);
    let at = (periods + place) * period_secs;
    epoch + Duration::try_from_secs_f64(at).unwrap_or(period)
}

impl QueueState {
    /// A queue that resyncs every `resync`, backs off by `backoff` after failures and paces
    /// reruns in a row by `pacing`.
    pub fn new(resync: Duration, backoff: BackoffPolicy, pacing: BackoffPolicy) -> QueueState {
        QueueState {
            entries: HashMap::new(),
            ready: VecDeque::new(),
            timers: BinaryHeap::new(),
            resync,
            epoch: Instant::now(),
            backoff,
            pacing,
            queued: 0,
            paused: false,
            closed: false,
        }
    }

    /// Asks for a step of `key`. Returns whether the Comb became queued (workers should wake).
    pub fn enqueue(&mut self, key: &CombKey, trigger: Trigger) -> bool {
        let entry = self.entries.entry(key.clone()).or_default();
        entry.forgotten = false;
        let queue = match entry.activity {
            Activity::Idle => true,
            Activity::Paced { .. } | Activity::Backoff { .. } if trigger.urgent() => {
                entry.reruns = 0;
                true
            }
            Activity::Paced { .. } => trigger.from_elsewhere() && entry.reruns <= ELSEWHERE_RERUNS,
            Activity::Backoff { .. } => return false,
            Activity::Queued | Activity::Running => false,
        };
        // An idle, paced or backing-off Comb holds no urgent trigger (one would have queued it),
        // so whenever the Comb is queued here the merge keeps the new trigger.
        merge(&mut entry.pending, trigger);
        if queue {
            entry.activity = Activity::Queued;
            entry.queued_at = Some(Instant::now());
            self.queued += 1;
            self.ready.push_back(key.clone());
        }
        queue
    }

    /// Moves Combs whose retry or resync is due at `now` into the ready queue.
    pub fn promote_due(&mut self, now: Instant) {
        while let Some(timer) = self.timers.peek_mut() {
            if timer.0.0 > now {
                break;
            }
            let Reverse((at, kind, key)) = PeekMut::pop(timer);
            let Some(entry) = self.entries.get_mut(&key) else {
                continue;
            };
            // A timer is stale when the Comb has moved on since it was set.
            let due = match (kind, entry.activity) {
                (TimerKind::Retry, Activity::Backoff { until })
                | (TimerKind::Paced, Activity::Paced { until }) => until == at,
                (TimerKind::Resync, Activity::Idle) => entry.next_resync == Some(at),
                _ => false,
            };
            if due {
                entry.activity = Activity::Queued;
                entry.queued_at = Some(now);
                self.queued += 1;
                entry.pending = match kind {
                    TimerKind::Retry => Some(Trigger::Retry),
                    TimerKind::Paced => entry.pending.or(Some(Trigger::Resource)),
                    TimerKind::Resync => Some(Trigger::Resync),
                };
                self.ready.push_back(key);
            }
        }
    }

    /// The next Comb to step, now running; `None` when nothing is ready or the queue is paused.
    pub fn pop(&mut self) -> Option<Job> {
        if self.paused || self.closed {
            return None;
        }
        while let Some(key) = self.ready.pop_front() {
            let Some(entry) = self.entries.get_mut(&key) else {
                continue;
            };
            if entry.activity != Activity::Queued {
                continue;
            }
            entry.activity = Activity::Running;
            self.queued -= 1;
            let waited = entry
                .queued_at
                .take()
                .map_or(Duration::ZERO, |since| since.elapsed());
            let trigger = entry.pending.take().unwrap_or(Trigger::Resync);
            return Some(Job {
                key,
                trigger,
                waited,
            });
        }
        None
    }

    /// Records the end of the running step of `key` at `now`: queued again (or paced) when a
    /// trigger came in meanwhile, backing off after a failure (`jitter` in `[0, 1)` spreads the
    /// waits), else idle.
    pub fn finish(&mut self, key: &CombKey, report: StepReport, now: Instant, jitter: f64) {
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        if entry.forgotten {
            self.entries.remove(key);
            return;
        }
        entry.failures = if report.failed {
            entry.failures.saturating_add(1)
        } else {
            0
        };
        let again_after = report.again_after;
        entry.last = Some(report);
        let resync_jitter = *entry.resync_jitter.get_or_insert(jitter);
        let mut resync_at = resync_at(self.epoch, now, self.resync, key, resync_jitter);
        if let Some(after) = again_after {
            resync_at = resync_at.min(now + after);
        }
        entry.next_resync = Some(resync_at);
        self.timers
            .push(Reverse((resync_at, TimerKind::Resync, key.clone())));
        let again = entry.pending.take();
        let urgent = again.is_some_and(Trigger::urgent);
        entry.reruns = if again.is_some() && !urgent {
            entry.reruns.saturating_add(1)
        } else {
            0
        };
        let elsewhere =
            again.is_some_and(Trigger::from_elsewhere) && entry.reruns <= ELSEWHERE_RERUNS;
        entry.activity = if urgent {
            Activity::Queued
        } else if entry.failures > 0 {
            let until = now + self.backoff.delay(entry.failures, jitter);
            Activity::Backoff { until }
        } else if again.is_some() && entry.reruns > 1 && !elsewhere {
            let until = now + self.pacing.delay(entry.reruns - 1, jitter);
            Activity::Paced { until }
        } else if again.is_some() {
            Activity::Queued
        } else {
            Activity::Idle
        };
        // A backoff's retry serves whatever came in (`pending` is empty); a rerun keeps its
        // trigger.
        match entry.activity {
            Activity::Queued => {
                entry.pending = again;
                entry.queued_at = Some(now);
                self.queued += 1;
                self.ready.push_back(key.clone());
            }
            Activity::Paced { until } => {
                entry.pending = again;
                self.timers
                    .push(Reverse((until, TimerKind::Paced, key.clone())));
            }
            Activity::Backoff { until } => {
                self.timers
                    .push(Reverse((until, TimerKind::Retry, key.clone())));
            }
            Activity::Idle | Activity::Running => {}
        }
    }

    /// Drops `key` (its CR is gone); a running step finishes first.
    pub fn forget(&mut self, key: &CombKey) {
        if let Some(entry) = self.entries.get_mut(key) {
            if entry.activity == Activity::Running {
                entry.forgotten = true;
                entry.pending = None;
            } else {
                if entry.activity == Activity::Queued {
                    self.queued -= 1;
                }
                self.entries.remove(key);
            }
        }
    }

    /// The earliest timer, for a worker to sleep until.
    pub fn next_timer(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((at, _, _))| *at)
    }

    /// The number of Combs waiting for a worker.
    pub fn depth(&self) -> usize {
        self.queued
    }

    /// Whether `key` has a step queued or running.
    pub fn is_busy(&self, key: &CombKey) -> bool {
        self.entries
            .get(key)
            .is_some_and(|entry| matches!(entry.activity, Activity::Queued | Activity::Running))
    }

    /// The activity of `key`, if the queue knows it.
    pub fn activity(&self, key: &CombKey) -> Option<Activity> {
        self.entries.get(key).map(|entry| entry.activity)
    }

    /// What the debug view shows, sorted by Comb; `now`/`wall_now` convert backoff instants.
    pub fn snapshot(&self, now: Instant, wall_now: jiff::Timestamp) -> Vec<QueueEntryView> {
        let wall = |until: Instant| {
            let left = until.saturating_duration_since(now);
            jiff::SignedDuration::try_from(left)
                .ok()
                .and_then(|left| wall_now.checked_add(left).ok())
        };
        let mut views: Vec<QueueEntryView> = self
            .entries
            .iter()
            .map(|(key, entry)| {
                let (state, backoff_until) = match entry.activity {
                    Activity::Idle => ("idle", None),
                    Activity::Queued => ("queued", None),
                    Activity::Running => ("running", None),
                    Activity::Paced { until } => ("paced", wall(until)),
                    Activity::Backoff { until } => ("backoff", wall(until)),
                };
                let last = entry.last.as_ref();
                QueueEntryView {
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                    state,
                    backoff_until,
                    pending: entry.pending,
                    failures: entry.failures,
                    last_phase: last.and_then(|last| last.state.phase_word().map(str::to_string)),
                    last_reason: last.and_then(|last| last.state.reason().cloned()),
                    last_step_at: last.map(|last| last.started_at),
                    last_step_millis: last
                        .map(|last| u64::try_from(last.duration.as_millis()).unwrap_or(u64::MAX)),
                    last_reads: last.and_then(|last| last.reads.clone()),
                    next_resync_at: entry.next_resync.and_then(wall),
                }
            })
            .collect();
        views.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        views
    }
}

/// How many reruns in a row a wake from another Comb starts at once. Only a loop of status
/// changes between Combs could go beyond it (each such step changes its status again); from
/// there on it is paced like any rerun.
const ELSEWHERE_RERUNS: u32 = 16;

/// Keeps the more urgent of two triggers (an urgent one must not be lost to a resync), and a
/// wake from another Comb over the Comb's own (it decides whether a rerun is paced).
fn merge(pending: &mut Option<Trigger>, trigger: Trigger) {
    let rank = |trigger: Trigger| {
        if trigger.urgent() {
            2
        } else if trigger.from_elsewhere() {
            1
        } else {
            0
        }
    };
    match pending {
        Some(existing) if rank(*existing) >= rank(trigger) => {}
        _ => *pending = Some(trigger),
    }
}

/// One Comb in `/debug/queue`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueEntryView {
    pub namespace: String,
    pub name: String,
    /// `idle`, `queued`, `running`, `paced` (a rerun waits) or `backoff` (after a failure).
    pub state: &'static str,
    /// Until when it waits, when paced or backing off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_until: Option<jiff::Timestamp>,
    /// Why it is queued, or runs again after the running step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<Trigger>,
    pub failures: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_phase: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_reason: Option<Reason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_step_at: Option<jiff::Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_step_millis: Option<u64>,
    /// Where the last step's reads went: `cached` (answered by the watches) and `api` (sent to
    /// the API server because no watch covers them, by request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_reads: Option<ReadSummary>,
    /// When the periodic resync steps it next.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_resync_at: Option<jiff::Timestamp>,
}

/// [`QueueState`] behind a lock, with the wake-ups the workers wait on.
#[derive(Debug)]
pub struct WorkQueue {
    state: Mutex<QueueState>,
    notify: Notify,
}

impl WorkQueue {
    pub fn new(resync: Duration, backoff: BackoffPolicy, pacing: BackoffPolicy) -> WorkQueue {
        WorkQueue {
            state: Mutex::new(QueueState::new(resync, backoff, pacing)),
            notify: Notify::new(),
        }
    }

    pub fn enqueue(&self, key: &CombKey, trigger: Trigger) {
        if self.state.lock().enqueue(key, trigger) {
            // One job, one worker: waking every idle worker for it had all of them take the
            // lock to find nothing (a permit is kept when none waits, and a busy worker looks
            // at the queue before it waits again).
            self.notify.notify_one();
        }
    }

    /// Waits for the next job; `None` once the queue is closed.
    pub async fn next(&self) -> Option<Job> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wake_at = {
                let mut state = self.state.lock();
                if state.closed {
                    return None;
                }
                state.promote_due(Instant::now());
                if let Some(job) = state.pop() {
                    return Some(job);
                }
                state.next_timer()
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    pub fn finish(&self, key: &CombKey, report: StepReport) {
        self.state
            .lock()
            .finish(key, report, Instant::now(), rand::random::<f64>());
        // The Comb may be queued again, or have a timer earlier than sleeping workers wait
        // for: one worker looks (the finishing one looks too before it waits).
        self.notify.notify_one();
    }

    pub fn forget(&self, key: &CombKey) {
        self.state.lock().forget(key);
    }

    /// Holds every step back (the layer is unreachable); queued Combs wait.
    pub fn pause(&self) {
        self.state.lock().paused = true;
    }

    pub fn resume(&self) {
        self.state.lock().paused = false;
        self.notify.notify_waiters();
    }

    pub fn is_paused(&self) -> bool {
        self.state.lock().paused
    }

    /// Stops handing out jobs; running steps finish.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.notify.notify_waiters();
    }

    pub fn depth(&self) -> usize {
        self.state.lock().depth()
    }

    pub fn is_busy(&self, key: &CombKey) -> bool {
        self.state.lock().is_busy(key)
    }

    pub fn snapshot(&self) -> Vec<QueueEntryView> {
        self.state
            .lock()
            .snapshot(Instant::now(), jiff::Timestamp::now())
    }
}

#[cfg(test)]
mod tests;
