//! How long to wait after failures in a row: exponential in their number, capped, with jitter
//! so that what fails together (Combs of a layer coming back, its watches) does not retry in
//! step. The jitter keeps the upper half of each delay, so retries never come faster than the
//! exponent says.
//!
//! Loops that retry until something works (a watch, the probe of a layer that is down) take
//! their delays from backon's exponential backoff ([`Retries`]). The work queue instead asks
//! [`BackoffPolicy::delay`] with a jitter it is handed: it is a state machine that tests drive
//! with chosen instants and jitters, and backon's iterator draws its own random numbers and
//! computes in `f32` seconds, which would make those delays inexact.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// The bounds of the retry delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// The delay after the first failure (before jitter).
    pub initial: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(300),
        }
    }
}

impl BackoffPolicy {
    /// The delay after `failures` failures in a row (at least 1): `initial * 2^(failures-1)`,
    /// capped at `max`, then scaled into its upper half by `jitter` (in `[0, 1)`).
    pub fn delay(&self, failures: u32, jitter: f64) -> Duration {
        let exponent = failures.saturating_sub(1).min(31);
        let base = self.initial.saturating_mul(1u32 << exponent).min(self.max);
        let jitter = jitter.clamp(0.0, 1.0);
        base.mul_f64(0.5 + 0.5 * jitter)
    }

    /// backon's exponential backoff with the same bounds: its jitter adds up to one delay
    /// again, so it starts from half of each.
    fn backon(&self) -> ExponentialBackoff {
        ExponentialBuilder::new()
            .with_min_delay(self.initial / 2)
            .with_max_delay(self.max / 2)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times()
            .build()
    }
}

/// The delays of something retried until it works: each failure in a row waits the next delay
/// of the policy, and a success starts over.
#[derive(Debug)]
pub struct Retries {
    policy: BackoffPolicy,
    backoff: Option<ExponentialBackoff>,
}

impl Retries {
    pub fn new(policy: BackoffPolicy) -> Retries {
        Retries {
            policy,
            backoff: None,
        }
    }

    /// The wait after one more failure.
    pub fn next_delay(&mut self) -> Duration {
        let policy = self.policy;
        self.backoff
            .get_or_insert_with(|| policy.backon())
            .next()
            .unwrap_or(policy.max)
    }

    /// It worked: the next failure waits the shortest delay again.
    pub fn reset(&mut self) {
        self.backoff = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_caps_and_jitters() {
        let policy = BackoffPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        let cases = [
            (1, 0.0, 50),
            (1, 1.0, 100),
            (2, 0.0, 100),
            (3, 0.5, 300),
            (4, 1.0, 800),
            (5, 0.0, 500),
            (5, 1.0, 1000),
            (40, 1.0, 1000),
            (0, 1.0, 100),
        ];
        for (failures, jitter, millis) in cases {
            assert_eq!(
                policy.delay(failures, jitter).as_millis(),
                millis,
                "{failures} failures, jitter {jitter}"
            );
        }
    }

    #[test]
    fn retries_stay_in_the_upper_half_and_start_over_after_a_success() {
        let policy = BackoffPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        let mut retries = Retries::new(policy);
        // The upper half of 100, 200, 400, 800, 1000, 1000 ms (f32 arithmetic: a little slack).
        let slack = Duration::from_millis(1);
        for failures in 1..=6 {
            let delay = retries.next_delay();
            let full = policy.delay(failures, 1.0);
            assert!(
                delay + slack >= full / 2 && delay <= full + slack,
                "failure {failures}: {delay:?} outside [{:?}, {full:?}]",
                full / 2
            );
        }
        retries.reset();
        assert!(retries.next_delay() <= Duration::from_millis(101));
    }
}
