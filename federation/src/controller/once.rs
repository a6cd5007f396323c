//! `comb run --once`: when every Comb is settled, and what the run's exit code is.

use std::time::Duration;

use comb_api::{CombStatus, Phase, Reason};
use serde::Serialize;

use super::layer::Layers;

/// What `--once` knows about one Comb at a moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettleView {
    /// The controller stepped it at least once in this run (a status from an earlier run does
    /// not count).
    pub stepped: bool,
    /// A step is queued or running.
    pub busy: bool,
    /// The recorded phase.
    pub phase: Option<Phase>,
    /// How long its recorded status has stayed the same.
    pub unchanged_for: Duration,
}

/// A Comb is settled when it was stepped, nothing is queued or running for it, and its phase is
/// not Pending or its recorded status has not changed for `settle`.
pub fn is_settled(view: &SettleView, settle: Duration) -> bool {
    view.stepped
        && !view.busy
        && (view.phase != Some(Phase::Pending) || view.unchanged_for >= settle)
}

/// One Comb as the run left it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CombOutcome {
    pub layer: String,
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Every Comb's last recorded state.
pub(crate) fn outcomes(layers: &Layers) -> Vec<CombOutcome> {
    layers
        .iter()
        .flat_map(|layer| {
            layer.each_entry(|key, entry| {
                // A kept status that does not decode is reported; the outcome has none.
                let status = entry.recorded_status();
                let ready = status.and_then(CombStatus::ready);
                CombOutcome {
                    layer: layer.name().to_string(),
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                    phase: status.and_then(|s| s.phase.clone()),
                    reason: ready.and_then(|r| r.reason.clone()),
                    message: ready.and_then(|r| r.message.clone()),
                }
            })
        })
        .collect()
}

/// How a run ended: every Comb's last recorded state, and whether `--timeout` hit first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RunOutcome {
    pub combs: Vec<CombOutcome>,
    pub timed_out: bool,
}

impl RunOutcome {
    /// 1 when the timeout hit or any Comb ended in Error, else 0.
    pub fn exit_code(&self) -> u8 {
        let failed = self.timed_out
            || self
                .combs
                .iter()
                .any(|comb| comb.phase == Some(Phase::Error));
        u8::from(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settling() {
        let settle = Duration::from_secs(10);
        let view = |stepped, busy, phase: Option<&str>, secs| SettleView {
            stepped,
            busy,
            phase: phase.map(Phase::from),
            unchanged_for: Duration::from_secs(secs),
        };
        let cases = [
            (view(true, false, Some("Running"), 0), true),
            (view(true, false, Some("Error"), 0), true),
            (view(true, false, Some("Blocked"), 0), true),
            (view(true, false, Some("Pending"), 9), false),
            (view(true, false, Some("Pending"), 10), true),
            (view(false, false, Some("Running"), 100), false),
            (view(true, true, Some("Running"), 100), false),
            (view(true, false, None, 0), true),
        ];
        for (view, expected) in cases {
            assert_eq!(is_settled(&view, settle), expected, "{view:?}");
        }
    }

    #[test]
    fn exit_codes() {
        let comb = |phase: &str| CombOutcome {
            layer: "prod".into(),
            namespace: "platform".into(),
            name: "nats".into(),
            phase: Some(Phase::from(phase)),
            reason: None,
            message: None,
        };
        let outcome = |phases: &[&str], timed_out| RunOutcome {
            combs: phases.iter().map(|p| comb(p)).collect(),
            timed_out,
        };
        assert_eq!(
            outcome(&["Running", "Blocked", "Pending"], false).exit_code(),
            0
        );
        assert_eq!(outcome(&["Running", "Error"], false).exit_code(), 1);
        assert_eq!(outcome(&["Running"], true).exit_code(), 1);
        assert_eq!(outcome(&[], false).exit_code(), 0);
    }
}
