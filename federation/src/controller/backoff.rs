//! How long a Comb waits after a failed step: exponential in the number of failures in a row,
//! capped, with jitter so that Combs failing together (a layer coming back) do not retry in step.

use std::time::Duration;

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
    /// capped at `max`, then scaled into its upper half by `jitter` (in `[0, 1)`; half the
    /// delay is kept so that retries never come faster than the exponent says).
    pub fn delay(&self, failures: u32, jitter: f64) -> Duration {
        let exponent = failures.saturating_sub(1).min(31);
        let base = self.initial.saturating_mul(1u32 << exponent).min(self.max);
        let jitter = jitter.clamp(0.0, 1.0);
        base.mul_f64(0.5 + 0.5 * jitter)
    }

    /// [`BackoffPolicy::delay`] with a random jitter.
    pub fn random_delay(&self, failures: u32) -> Duration {
        self.delay(failures, rand::random::<f64>())
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
        let random = policy.random_delay(2);
        assert!(random >= Duration::from_millis(100) && random <= Duration::from_millis(200));
    }
}
