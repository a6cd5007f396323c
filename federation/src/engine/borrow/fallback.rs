//! Fallback along the chain (issue 22): while the layer a borrower prefers is unhealthy, it
//! borrows from the next healthy entry of its layer's `borrow.fallback` (a layer further up, or
//! `local`), and goes back once the preferred one has been healthy for a while.
//!
//! Pure: every judgement takes the instant it is made at, so that the state machines are table
//! tests and the controller (which looks at the upstreams and feeds the observations in) is the
//! only part that knows the clock.
//!
//! - [`Hysteresis`]: one upstream's health from observations: unhealthy after `unhealthyAfter`
//!   without a healthy observation, healthy again after `healthyAfter` of nothing but healthy
//!   ones, so that a single lost probe switches nothing;
//! - [`FallbackChain`]: the entries of one borrower, each with its hysteresis, and which one is in
//!   use (the first healthy one; none healthy keeps the one in use);
//! - [`FallbackState`]: what the step records about it (the `UpstreamFallback` condition and the
//!   Ready message);
//! - [`peer_serves`] and [`ApiHealth::trouble`]: what one look at an upstream found.

use std::fmt;
use std::time::{Duration, Instant};

use comb_api::{CombStatus, ConditionStatus, Phase, Reason, UPSTREAM_FALLBACK};

use crate::engine::status::{StepRecord, Verdict};

/// The default `unhealthyAfter`.
pub const DEFAULT_UNHEALTHY_AFTER: Duration = Duration::from_secs(30);
/// The default `healthyAfter`.
pub const DEFAULT_HEALTHY_AFTER: Duration = Duration::from_secs(60);

/// One entry of a borrower's chain: the peer in a layer, or the Comb's own manifests here.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Candidate {
    Layer(String),
    Local,
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Candidate::Layer(name) => f.write_str(name),
            Candidate::Local => f.write_str("local"),
        }
    }
}

/// How long an upstream may go without a healthy observation, and how long it must be seen
/// healthy to be trusted again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthPolicy {
    pub unhealthy_after: Duration,
    pub healthy_after: Duration,
}

impl Default for HealthPolicy {
    fn default() -> HealthPolicy {
        HealthPolicy {
            unhealthy_after: DEFAULT_UNHEALTHY_AFTER,
            healthy_after: DEFAULT_HEALTHY_AFTER,
        }
    }
}

impl HealthPolicy {
    /// How often comb looks at an upstream of this policy: a tenth of `unhealthyAfter`, at
    /// least every 2 s and at most 4 times a second. A look is one `GET /readyz` per upstream
    /// context (and, with `probe: tcp`, one connect per address), whatever the number of
    /// borrowers.
    pub fn check_period(&self) -> Duration {
        (self.unhealthy_after / 10).clamp(Duration::from_millis(250), Duration::from_secs(2))
    }

    /// How long one look may take before it counts as no answer: a quarter of
    /// `unhealthyAfter`, between 1 s and 5 s.
    pub fn check_timeout(&self) -> Duration {
        (self.unhealthy_after / 4).clamp(Duration::from_secs(1), Duration::from_secs(5))
    }
}

/// What one look at an upstream found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// It serves; its API server last answered at `seen_at` (at or before the look).
    Healthy { seen_at: Instant },
    /// It does not serve, and why (`context unreachable`, `Comb platform/nats is Blocked`);
    /// `seen_healthy_at`, when the look can tell, is the last time it did (its API server's last
    /// answer, while its Comb served): an answer that came between two looks counts.
    Unhealthy {
        why: String,
        seen_healthy_at: Option<Instant>,
    },
}

impl Observation {
    /// Unhealthy for `why`, with no word on when it last served.
    pub fn unhealthy(why: impl Into<String>) -> Observation {
        Observation::Unhealthy {
            why: why.into(),
            seen_healthy_at: None,
        }
    }

    /// One look at an upstream from its parts: when its API server last answered and what is
    /// wrong with it now (`api_trouble`: a failed check, no answer for a while, its watches
    /// failing), and whether its Comb serves (`peer`: `None` while that cannot be told, such as
    /// an address not probed yet). Trouble with the API server is named first: it is why the
    /// rest cannot be trusted.
    pub fn of(
        answered_at: Option<Instant>,
        api_trouble: Option<String>,
        peer: Option<Serving>,
    ) -> Option<Observation> {
        match (api_trouble, peer) {
            (Some(why), peer) => Some(Observation::Unhealthy {
                why,
                seen_healthy_at: answered_at.filter(|_| peer == Some(Serving::Yes)),
            }),
            (None, Some(Serving::No(why))) => Some(Observation::unhealthy(why)),
            (None, None) => None,
            (None, Some(Serving::Yes)) => {
                answered_at.map(|seen_at| Observation::Healthy { seen_at })
            }
        }
    }
}

/// An upstream's health after hysteresis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    Healthy,
    /// Unhealthy since `since`, for the reason seen last before it turned.
    Unhealthy {
        since: Instant,
        why: String,
    },
}

/// The health of one upstream over time: unhealthy once `unhealthyAfter` passed without a
/// healthy observation, healthy again once every observation for `healthyAfter` was healthy.
/// Silence is not health: the caller turns a look that did not answer into an unhealthy
/// observation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hysteresis {
    health: Health,
    /// The latest instant it was seen healthy (or since when it is judged, at first).
    last_healthy: Instant,
    /// Since when every observation was healthy; `None` after an unhealthy one.
    healthy_run: Option<Instant>,
    /// Why the latest unhealthy observation said it does not serve.
    last_why: Option<String>,
}

impl Hysteresis {
    /// Healthy, judged from `now` on: it turns unhealthy only after `unhealthyAfter` without a
    /// healthy observation, as if it had been seen healthy now.
    pub fn healthy(now: Instant) -> Hysteresis {
        Hysteresis {
            health: Health::Healthy,
            last_healthy: now,
            healthy_run: None,
            last_why: None,
        }
    }

    /// Unhealthy since `now` for `why`: healthy again only after `healthyAfter` of healthy
    /// observations (a borrower that was on fallback when comb started stays there until then).
    pub fn unhealthy(now: Instant, why: impl Into<String>) -> Hysteresis {
        let why = why.into();
        Hysteresis {
            health: Health::Unhealthy {
                since: now,
                why: why.clone(),
            },
            last_healthy: now,
            healthy_run: None,
            last_why: Some(why),
        }
    }

    pub fn health(&self) -> &Health {
        &self.health
    }

    pub fn is_healthy(&self) -> bool {
        self.health == Health::Healthy
    }

    /// Takes in what a look at `now` found, then judges.
    pub fn observe(&mut self, now: Instant, observation: Observation, policy: &HealthPolicy) {
        match observation {
            Observation::Healthy { seen_at } => {
                self.last_healthy = self.last_healthy.max(seen_at.min(now));
                self.healthy_run.get_or_insert(now);
                // A reason is about the spell it was seen in, not one long over.
                if self.is_healthy() {
                    self.last_why = None;
                }
            }
            Observation::Unhealthy {
                why,
                seen_healthy_at,
            } => {
                if let Some(seen_at) = seen_healthy_at {
                    self.last_healthy = self.last_healthy.max(seen_at.min(now));
                }
                self.healthy_run = None;
                self.last_why = Some(why);
            }
        }
        self.judge(now, policy);
    }

    /// Judges at `now`: turns unhealthy after `unhealthyAfter` without a healthy observation,
    /// healthy after `healthyAfter` of healthy ones.
    pub fn judge(&mut self, now: Instant, policy: &HealthPolicy) {
        match &self.health {
            Health::Healthy => {
                if now.saturating_duration_since(self.last_healthy) >= policy.unhealthy_after {
                    self.health = Health::Unhealthy {
                        since: now,
                        why: self
                            .last_why
                            .clone()
                            .unwrap_or_else(|| "no healthy observation".to_string()),
                    };
                    self.healthy_run = None;
                }
            }
            Health::Unhealthy { .. } => {
                if self.healthy_run.is_some_and(|since| {
                    now.saturating_duration_since(since) >= policy.healthy_after
                }) {
                    self.health = Health::Healthy;
                    self.last_why = None;
                }
            }
        }
    }
}

/// The chain of one borrower: its preferred layer, then its layer's `fallback` entries, each
/// with its health, and the entry in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FallbackChain {
    entries: Vec<(Candidate, Hysteresis)>,
    current: usize,
    policy: HealthPolicy,
    /// The message recorded before comb started, kept while the entry in use stays: the reasons
    /// it names were seen by the run before.
    resumed_message: Option<String>,
}

/// A change of the entry in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switch {
    pub from: Candidate,
    pub to: Candidate,
    /// What the borrower records from now on.
    pub state: FallbackState,
}

impl FallbackChain {
    /// A chain on its preferred entry, every entry judged healthy from `now` on.
    /// `candidates` is the preferred layer, then the fallback entries in order.
    pub fn new(candidates: Vec<Candidate>, policy: HealthPolicy, now: Instant) -> FallbackChain {
        FallbackChain::resume(candidates, policy, now, 0, None)
    }

    /// A chain that was on entry `current` when comb started (its recorded status says so): the
    /// entries before it start unhealthy, so that the borrower goes back only after
    /// `healthyAfter` of them healthy, and `message` (what was recorded) stays while it is on
    /// that entry.
    pub fn resume(
        candidates: Vec<Candidate>,
        policy: HealthPolicy,
        now: Instant,
        current: usize,
        message: Option<String>,
    ) -> FallbackChain {
        let current = current.min(candidates.len().saturating_sub(1));
        let entries = candidates
            .into_iter()
            .enumerate()
            .map(|(index, candidate)| {
                let health = if index < current {
                    Hysteresis::unhealthy(now, "unhealthy when comb started")
                } else {
                    Hysteresis::healthy(now)
                };
                (candidate, health)
            })
            .collect();
        FallbackChain {
            entries,
            current,
            policy,
            resumed_message: message.filter(|_| current > 0),
        }
    }

    /// The entry in use.
    pub fn current(&self) -> &Candidate {
        &self.entries[self.current].0
    }

    /// Whether the entry in use is a fallback.
    pub fn on_fallback(&self) -> bool {
        self.current > 0
    }

    /// Takes in what a look at entry `index` found at `now`. `local` needs no look: it is
    /// always healthy.
    pub fn observe(&mut self, index: usize, now: Instant, observation: Observation) {
        let policy = self.policy;
        if let Some((_, health)) = self.entries.get_mut(index) {
            health.observe(now, observation, &policy);
        }
    }

    /// Judges every entry at `now` and moves to the first healthy one; with none healthy the
    /// entry in use stays. Returns the switch, if there was one.
    pub fn choose(&mut self, now: Instant) -> Option<Switch> {
        let policy = self.policy;
        for (_, health) in &mut self.entries {
            health.judge(now, &policy);
        }
        let first_healthy = self.entries.iter().position(|(candidate, health)| {
            *candidate == Candidate::Local || health.is_healthy()
        })?;
        if first_healthy == self.current {
            return None;
        }
        let from = self.current().clone();
        self.current = first_healthy;
        self.resumed_message = None;
        Some(Switch {
            from,
            to: self.current().clone(),
            state: self.state(),
        })
    }

    /// What the borrower records about the chain now.
    pub fn state(&self) -> FallbackState {
        let preferred = self.entries[0].0.to_string();
        if self.current == 0 {
            return FallbackState::Preferred { layer: preferred };
        }
        if let Some(message) = &self.resumed_message {
            return FallbackState::Fallback {
                message: message.clone(),
            };
        }
        let skipped: Vec<String> = self.entries[..self.current]
            .iter()
            .map(|(candidate, health)| match health.health() {
                Health::Unhealthy { why, .. } => format!(
                    "{candidate} unhealthy for {} ({why})",
                    written_duration(self.policy.unhealthy_after)
                ),
                Health::Healthy => format!("{candidate} healthy"),
            })
            .collect();
        let target = match self.current() {
            Candidate::Layer(layer) => format!("borrowing from {layer}"),
            Candidate::Local => "running locally".to_string(),
        };
        FallbackState::Fallback {
            message: format!("{}; {target}", skipped.join(", ")),
        }
    }
}

/// Where a borrow with `fallback` stands, as its step records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FallbackState {
    /// On the preferred layer.
    Preferred { layer: String },
    /// On a fallback entry: the message names the skipped layers, why, and the entry in use
    /// (`staging unhealthy for 30s (context unreachable); borrowing from prod`).
    Fallback { message: String },
}

impl FallbackState {
    /// The `UpstreamFallback` condition.
    pub fn condition(&self) -> Verdict {
        match self {
            FallbackState::Preferred { layer } => Verdict::new(
                ConditionStatus::False,
                Reason::PreferredUpstream,
                format!("borrowing from {layer}, the preferred upstream"),
            ),
            FallbackState::Fallback { message } => Verdict::new(
                ConditionStatus::True,
                Reason::UpstreamUnhealthy,
                message.clone(),
            ),
        }
    }

    /// Marks a step's record: the `UpstreamFallback` condition always; on a fallback, a step that
    /// got as far as serving says so in its Ready message. A borrowing or healthy verdict
    /// (`borrowed from ...`, `healthy`) gives way to the fallback's message, with whatever the
    /// step appended after it (`; replicated Secret a`, prune notes); any other verdict keeps its
    /// message behind the fallback's.
    pub fn mark(&self, record: &mut StepRecord) {
        record.set_condition(UPSTREAM_FALLBACK, self.condition());
        let FallbackState::Fallback { message } = self else {
            return;
        };
        if record.established.is_none() {
            return;
        }
        let serving = record.phase == Phase::Running
            && matches!(record.reason, Reason::Borrowed | Reason::Healthy);
        record.message = if serving {
            match record.message.split_once("; ") {
                Some((_, rest)) => format!("{message}; {rest}"),
                None => message.clone(),
            }
        } else {
            format!("{message}; {}", record.message)
        };
    }
}

/// `30s`, `1m30s`, `500ms`: a duration as the configuration writes it.
pub fn written_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis == 0 {
        return "0s".to_string();
    }
    if !millis.is_multiple_of(1000) {
        return format!("{millis}ms");
    }
    let seconds = millis / 1000;
    let (hours, minutes, seconds) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    let mut text = String::new();
    for (value, unit) in [(hours, "h"), (minutes, "m"), (seconds, "s")] {
        if value > 0 {
            text.push_str(&format!("{value}{unit}"));
        }
    }
    text
}

/// What one look found of a peer Comb or of an address its bridge would use: it serves, or why
/// it does not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Serving {
    Yes,
    No(String),
}

/// Whether a peer Comb serves, by its recorded status: it is Running and publishes endpoints.
/// Anything else is not serving, a rollout that takes longer than `unhealthyAfter` included:
/// `Pending (Deployed)` is also what a Comb whose Pods are gone says while they do not come back,
/// and its borrowers cannot tell the two apart. `place` names it in the reason
/// (`Comb platform/nats`).
pub fn peer_serves(place: &str, status: Option<&CombStatus>) -> Serving {
    let Some(status) = status else {
        return Serving::No(format!("{place} has not recorded a status"));
    };
    match &status.phase {
        Some(Phase::Running) => {}
        Some(phase) => return Serving::No(format!("{place} is {phase}")),
        None => return Serving::No(format!("{place} has no phase")),
    }
    if status.endpoint_list().is_empty() {
        return Serving::No(format!("{place} publishes no endpoints"));
    }
    Serving::Yes
}

/// What the checks of one upstream context's API server found lately.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiHealth {
    /// When it last answered that it is ready.
    pub answered_at: Option<Instant>,
    /// When a check last failed, and why; cleared by an answer.
    pub failed: Option<(Instant, String)>,
}

impl ApiHealth {
    /// Records an answer at `at`.
    pub fn answered(&mut self, at: Instant) {
        self.answered_at = Some(at);
        self.failed = None;
    }

    /// Records a failed check at `at`.
    pub fn failed(&mut self, at: Instant, why: impl Into<String>) {
        self.failed = Some((at, why.into()));
    }

    /// What is wrong with the API server at `now`, for checks every `period`: a failed check, or
    /// no answer for two periods (a server that takes connections and does not answer: its
    /// check waits for its timeout). `None` while it answers.
    ///
    /// A check that is merely slow counts against the upstream too: that only delays the way
    /// back (a run of healthy looks starts again), never a switch, which waits for
    /// `unhealthyAfter` since the last answer.
    pub fn trouble(&self, now: Instant, period: Duration) -> Option<String> {
        if let Some((_, why)) = &self.failed {
            return Some(why.clone());
        }
        let answered = self.answered_at?;
        (now.saturating_duration_since(answered) > period * 2)
            .then(|| "context not answering".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const POLICY: HealthPolicy = HealthPolicy {
        unhealthy_after: Duration::from_secs(30),
        healthy_after: Duration::from_secs(60),
    };

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// Feeds `looks` (second, healthy?) into a hysteresis started healthy at 0, and returns
    /// whether it is healthy after each.
    fn run(start: Hysteresis, t0: Instant, looks: &[(u64, bool)]) -> Vec<bool> {
        let mut health = start;
        looks
            .iter()
            .map(|(at, healthy)| {
                let now = t0 + secs(*at);
                let observation = if *healthy {
                    Observation::Healthy { seen_at: now }
                } else {
                    Observation::unhealthy("context unreachable")
                };
                health.observe(now, observation, &POLICY);
                health.is_healthy()
            })
            .collect()
    }

    #[test]
    fn unhealthy_after_unhealthy_after_without_a_healthy_look_and_back_after_healthy_after() {
        let t0 = Instant::now();
        type Case = (&'static str, Vec<(u64, bool)>, Vec<bool>);
        let cases: &[Case] = &[
            (
                "one lost look switches nothing",
                vec![(10, false), (20, true), (40, true)],
                vec![true, true, true],
            ),
            (
                "flapping looks keep it healthy: a healthy one comes within every 30s",
                (1..=20).map(|i| (i * 5, i % 2 == 0)).collect(),
                vec![true; 20],
            ),
            (
                "30s without a healthy look: unhealthy",
                vec![
                    (10, true),
                    (20, false),
                    (39, false),
                    (40, false),
                    (45, false),
                ],
                vec![true, true, true, false, false],
            ),
            (
                "back after 60s of healthy looks, not before",
                vec![
                    (0, false),
                    (30, false),
                    (31, true),
                    (60, true),
                    (90, true),
                    (91, true),
                ],
                vec![true, false, false, false, false, true],
            ),
            (
                "one bad look on the way back starts the 60s again",
                vec![
                    (0, false),
                    (30, false),
                    (31, true),
                    (80, false),
                    (81, true),
                    (140, true),
                    (141, true),
                ],
                vec![true, false, false, false, false, false, true],
            ),
        ];
        for (what, looks, want) in cases {
            assert_eq!(&run(Hysteresis::healthy(t0), t0, looks), want, "{what}");
        }
    }

    #[test]
    fn silence_is_judged_by_the_time_of_the_last_healthy_look() {
        let t0 = Instant::now();
        let mut health = Hysteresis::healthy(t0);
        // The API answered at 5s; looks at 10s and 20s still only know that answer.
        for at in [5, 10, 20] {
            health.observe(
                t0 + secs(at),
                Observation::Healthy {
                    seen_at: t0 + secs(5),
                },
                &POLICY,
            );
        }
        health.judge(t0 + secs(34), &POLICY);
        assert!(health.is_healthy());
        health.judge(t0 + secs(35), &POLICY);
        assert_eq!(
            health.health(),
            &Health::Unhealthy {
                since: t0 + secs(35),
                why: "no healthy observation".into()
            }
        );
    }

    fn layer(name: &str) -> Candidate {
        Candidate::Layer(name.into())
    }

    fn down(chain: &mut FallbackChain, index: usize, now: Instant, why: &str) {
        chain.observe(index, now, Observation::unhealthy(why));
    }

    fn up(chain: &mut FallbackChain, index: usize, now: Instant) {
        chain.observe(index, now, Observation::Healthy { seen_at: now });
    }

    #[test]
    fn the_chain_moves_to_the_first_healthy_entry_and_back() {
        let t0 = Instant::now();
        let mut chain = FallbackChain::new(
            vec![layer("staging"), layer("prod"), Candidate::Local],
            POLICY,
            t0,
        );
        assert_eq!(
            chain.state(),
            FallbackState::Preferred {
                layer: "staging".into()
            }
        );
        for at in (0..=29).step_by(3) {
            down(&mut chain, 0, t0 + secs(at), "context unreachable");
            up(&mut chain, 1, t0 + secs(at));
            assert_eq!(chain.choose(t0 + secs(at)), None, "at {at}s");
        }
        down(&mut chain, 0, t0 + secs(30), "context unreachable");
        up(&mut chain, 1, t0 + secs(30));
        let switch = chain.choose(t0 + secs(30)).expect("a switch");
        assert_eq!((switch.from, switch.to), (layer("staging"), layer("prod")));
        let message = "staging unhealthy for 30s (context unreachable); borrowing from prod";
        assert_eq!(
            switch.state,
            FallbackState::Fallback {
                message: message.into()
            }
        );
        // prod goes too: local, naming both.
        for at in (33..=63).step_by(3) {
            down(&mut chain, 0, t0 + secs(at), "context unreachable");
            down(
                &mut chain,
                1,
                t0 + secs(at),
                "Comb platform/nats is Blocked",
            );
            chain.choose(t0 + secs(at));
        }
        assert_eq!(chain.current(), &Candidate::Local);
        assert_eq!(
            chain.state(),
            FallbackState::Fallback {
                message: "staging unhealthy for 30s (context unreachable), prod unhealthy for 30s \
                          (Comb platform/nats is Blocked); running locally"
                    .into()
            }
        );
        // staging comes back first: after 60s of healthy looks the borrower goes straight back.
        for at in (66..=125).step_by(1) {
            up(&mut chain, 0, t0 + secs(at));
            down(
                &mut chain,
                1,
                t0 + secs(at),
                "Comb platform/nats is Blocked",
            );
            assert_eq!(chain.choose(t0 + secs(at)), None, "at {at}s");
        }
        up(&mut chain, 0, t0 + secs(126));
        let back = chain.choose(t0 + secs(126)).expect("back");
        assert_eq!((back.from, back.to), (Candidate::Local, layer("staging")));
        assert!(!chain.on_fallback());
    }

    #[test]
    fn with_no_healthy_entry_the_one_in_use_stays() {
        let t0 = Instant::now();
        let mut chain = FallbackChain::new(vec![layer("staging"), layer("prod")], POLICY, t0);
        for at in [10, 20, 30, 40] {
            down(&mut chain, 0, t0 + secs(at), "context unreachable");
            down(&mut chain, 1, t0 + secs(at), "context unreachable");
            assert_eq!(chain.choose(t0 + secs(at)), None);
        }
        assert_eq!(chain.current(), &layer("staging"));
    }

    #[test]
    fn a_resumed_chain_keeps_the_recorded_message_and_waits_healthy_after_to_go_back() {
        let t0 = Instant::now();
        let recorded = "staging unhealthy for 30s (context unreachable); borrowing from prod";
        let mut chain = FallbackChain::resume(
            vec![layer("staging"), layer("prod")],
            POLICY,
            t0,
            1,
            Some(recorded.into()),
        );
        assert_eq!(
            chain.state(),
            FallbackState::Fallback {
                message: recorded.into()
            }
        );
        for at in 0..60 {
            up(&mut chain, 0, t0 + secs(at));
            up(&mut chain, 1, t0 + secs(at));
            assert_eq!(chain.choose(t0 + secs(at)), None, "at {at}s");
        }
        up(&mut chain, 0, t0 + secs(60));
        assert_eq!(
            chain.choose(t0 + secs(60)).map(|s| s.to),
            Some(layer("staging"))
        );
    }

    fn record(phase: Phase, reason: Reason, message: &str) -> StepRecord {
        let mut record = StepRecord::finished(phase, reason, message);
        record.established = Some(crate::engine::status::Established::Upstream);
        record
    }

    #[test]
    fn a_fallback_marks_the_condition_and_the_ready_message() {
        let fallback = FallbackState::Fallback {
            message: "staging unhealthy for 30s (context unreachable); borrowing from prod".into(),
        };
        let cases = [
            (
                record(
                    Phase::Running,
                    Reason::Borrowed,
                    "borrowed from upstream K8s (context prod) via prod",
                ),
                "staging unhealthy for 30s (context unreachable); borrowing from prod",
            ),
            (
                record(
                    Phase::Running,
                    Reason::Borrowed,
                    "borrowed from upstream K8s (context prod) via prod; replicated Secret a",
                ),
                "staging unhealthy for 30s (context unreachable); borrowing from prod; replicated Secret a",
            ),
            (
                record(
                    Phase::Pending,
                    Reason::UpstreamNotRunning,
                    "upstream K8s (context prod) is Pending",
                ),
                "staging unhealthy for 30s (context unreachable); borrowing from prod; upstream K8s (context prod) is Pending",
            ),
            (
                StepRecord::finished(Phase::Disabled, Reason::Disabled, "spec.enabled is false"),
                "spec.enabled is false",
            ),
        ];
        for (mut record, message) in cases {
            fallback.mark(&mut record);
            assert_eq!(record.message, message);
            let condition = &record.conditions[UPSTREAM_FALLBACK];
            assert_eq!(
                (condition.status, &condition.reason),
                (ConditionStatus::True, &Reason::UpstreamUnhealthy)
            );
        }
        let mut preferred = record(
            Phase::Running,
            Reason::Borrowed,
            "borrowed from upstream K8s (context staging) via staging",
        );
        FallbackState::Preferred {
            layer: "staging".into(),
        }
        .mark(&mut preferred);
        assert_eq!(
            preferred.message,
            "borrowed from upstream K8s (context staging) via staging"
        );
        assert_eq!(
            preferred.conditions[UPSTREAM_FALLBACK],
            Verdict::new(
                ConditionStatus::False,
                Reason::PreferredUpstream,
                "borrowing from staging, the preferred upstream"
            )
        );
    }

    #[test]
    fn durations_read_as_the_configuration_writes_them() {
        for (duration, text) in [
            (Duration::from_millis(500), "500ms"),
            (secs(30), "30s"),
            (secs(60), "1m"),
            (secs(90), "1m30s"),
            (secs(3600), "1h"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(written_duration(duration), text);
        }
    }

    #[test]
    fn a_peer_serves_while_running_with_endpoints() {
        let status =
            |value: serde_json::Value| -> CombStatus { serde_json::from_value(value).unwrap() };
        let endpoints = json!([{"name": "client", "port": 4222, "cluster": "10.0.0.1:4222"}]);
        let ready = |reason: &str| json!([{"type": "Ready", "status": "False", "reason": reason}]);
        let place = "Comb platform/nats";
        let cases = [
            (
                Some(status(json!({"phase": "Running", "endpoints": endpoints}))),
                Serving::Yes,
            ),
            (
                Some(status(
                    json!({"phase": "Pending", "conditions": ready("Deployed"), "endpoints": endpoints}),
                )),
                Serving::No("Comb platform/nats is Pending".to_string()),
            ),
            (
                Some(status(
                    json!({"phase": "Pending", "conditions": ready("ReplicasNotReady"), "endpoints": endpoints}),
                )),
                Serving::No("Comb platform/nats is Pending".to_string()),
            ),
            (
                Some(status(
                    json!({"phase": "Maintenance", "endpoints": endpoints}),
                )),
                Serving::No("Comb platform/nats is Maintenance".to_string()),
            ),
            (
                Some(status(json!({"phase": "Running", "endpoints": []}))),
                Serving::No("Comb platform/nats publishes no endpoints".to_string()),
            ),
            (
                None,
                Serving::No("Comb platform/nats has not recorded a status".to_string()),
            ),
        ];
        for (status, want) in cases {
            assert_eq!(peer_serves(place, status.as_ref()), want, "{status:?}");
        }
    }

    #[test]
    fn api_checks_turn_failures_and_hangs_into_trouble() {
        let t0 = Instant::now();
        let trouble = |api: &ApiHealth, at: u64| api.trouble(t0 + secs(at), secs(1));
        let mut api = ApiHealth::default();
        assert_eq!(trouble(&api, 0), None, "nothing checked yet");
        api.answered(t0);
        assert_eq!(trouble(&api, 1), None);
        assert_eq!(trouble(&api, 2), None, "one check late is not silence yet");
        assert_eq!(
            trouble(&api, 3).as_deref(),
            Some("context not answering"),
            "a check that hangs"
        );
        api.failed(t0 + secs(3), "context not answering within 2s");
        assert_eq!(
            trouble(&api, 3).as_deref(),
            Some("context not answering within 2s")
        );
        api.answered(t0 + secs(6));
        assert_eq!(trouble(&api, 6), None);
    }

    #[test]
    fn a_look_names_the_api_first_and_keeps_its_last_answer() {
        let t0 = Instant::now();
        let unreachable = Some("context unreachable".to_string());
        let blocked = Serving::No("Comb platform/nats is Blocked".to_string());
        let cases = [
            (
                None,
                Some(Serving::Yes),
                Some(Observation::Healthy { seen_at: t0 }),
            ),
            (
                unreachable.clone(),
                Some(Serving::Yes),
                Some(Observation::Unhealthy {
                    why: "context unreachable".into(),
                    seen_healthy_at: Some(t0),
                }),
            ),
            (
                unreachable.clone(),
                Some(blocked.clone()),
                Some(Observation::unhealthy("context unreachable")),
            ),
            (
                None,
                Some(blocked),
                Some(Observation::unhealthy("Comb platform/nats is Blocked")),
            ),
            (None, None, None),
        ];
        for (api, peer, want) in cases {
            assert_eq!(
                Observation::of(Some(t0), api.clone(), peer.clone()),
                want,
                "{api:?} {peer:?}"
            );
        }
        // The answer that came between two looks counts, though the look after it failed.
        let mut health = Hysteresis::healthy(t0);
        health.observe(
            t0 + secs(40),
            Observation::Unhealthy {
                why: "context unreachable".into(),
                seen_healthy_at: Some(t0 + secs(20)),
            },
            &POLICY,
        );
        assert!(health.is_healthy(), "healthy at 20s, 30s have not passed");
        health.judge(t0 + secs(50), &POLICY);
        assert!(!health.is_healthy());
    }

    #[test]
    fn a_reason_is_about_the_spell_it_was_seen_in() {
        let t0 = Instant::now();
        let mut health = Hysteresis::healthy(t0);
        health.observe(
            t0,
            Observation::unhealthy("Comb platform/nats has not recorded a status"),
            &POLICY,
        );
        health.observe(
            t0 + secs(1),
            Observation::Healthy {
                seen_at: t0 + secs(1),
            },
            &POLICY,
        );
        health.judge(t0 + secs(31), &POLICY);
        assert_eq!(
            health.health(),
            &Health::Unhealthy {
                since: t0 + secs(31),
                why: "no healthy observation".into()
            },
            "silence, not the old reason"
        );
    }

    #[test]
    fn checks_are_bounded() {
        let policy = |ms: u64| HealthPolicy {
            unhealthy_after: Duration::from_millis(ms),
            healthy_after: secs(1),
        };
        assert_eq!(policy(30_000).check_period(), secs(2));
        assert_eq!(policy(30_000).check_timeout(), Duration::from_millis(5000));
        assert_eq!(policy(1_000).check_period(), Duration::from_millis(250));
        assert_eq!(policy(1_000).check_timeout(), secs(1));
        assert_eq!(policy(8_000).check_period(), Duration::from_millis(800));
    }
}
