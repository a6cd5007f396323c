//! State transitions of Combs: what the demo prints, the Events say and observers receive.

use std::fmt;

use comb_api::{CombStatus, Phase, Reason};
use serde::Serialize;

/// A phase with the reason of its Ready condition, shown as `Pending (Deployed)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PhaseReason {
    pub phase: Phase,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
}

impl PhaseReason {
    /// The phase and Ready reason of a recorded status; `None` without a phase.
    pub fn of(status: Option<&CombStatus>) -> Option<PhaseReason> {
        let status = status?;
        Some(PhaseReason {
            phase: status.phase.clone()?,
            reason: status.ready().and_then(|ready| ready.reason.clone()),
        })
    }
}

impl fmt::Display for PhaseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            Some(reason) => write!(f, "{} ({reason})", self.phase),
            None => f.write_str(self.phase.as_str()),
        }
    }
}

/// One Comb moving from one phase or Ready reason to another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Transition {
    pub at: jiff::Timestamp,
    pub layer: String,
    pub namespace: String,
    pub name: String,
    /// `None` the first time the controller records the Comb.
    pub old: Option<PhaseReason>,
    pub new: PhaseReason,
    /// The Ready message of the new state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Transition {
    /// The transition from `old` to `new`, if the phase or the Ready reason changed.
    pub fn between(
        layer: &str,
        namespace: &str,
        name: &str,
        old: Option<&CombStatus>,
        new: &CombStatus,
    ) -> Option<Transition> {
        let before = PhaseReason::of(old);
        let after = PhaseReason::of(Some(new))?;
        if before.as_ref() == Some(&after) {
            return None;
        }
        Some(Transition {
            at: jiff::Timestamp::now(),
            layer: layer.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            old: before,
            new: after,
            message: new.ready().and_then(|ready| ready.message.clone()),
        })
    }

    /// `Pending (Deployed) -> Running (Healthy): healthy`, the Event message (`new` stands in
    /// for a first state).
    pub fn change(&self) -> String {
        let old = self
            .old
            .as_ref()
            .map_or_else(|| "new".to_string(), ToString::to_string);
        match self.message.as_deref().filter(|m| !m.is_empty()) {
            Some(message) => format!("{old} -> {}: {message}", self.new),
            None => format!("{old} -> {}", self.new),
        }
    }
}

impl fmt::Display for Transition {
    /// `layer:namespace/name: <change>`, the demo's line without its time.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}/{}: {}",
            self.layer,
            self.namespace,
            self.name,
            self.change()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use comb_api::{CombCondition, ConditionStatus};

    fn status(phase: &str, reason: &str, message: &str) -> CombStatus {
        CombStatus {
            phase: Some(phase.into()),
            conditions: Some(vec![CombCondition {
                type_: "Ready".into(),
                status: ConditionStatus::from(phase == "Running"),
                reason: Some(reason.into()),
                message: Some(message.into()),
                last_transition_time: None,
            }]),
            ..CombStatus::default()
        }
    }

    #[test]
    fn transitions() {
        let pending = status(
            "Pending",
            "Deployed",
            "applied 2 resource(s), not healthy yet",
        );
        let running = status("Running", "Healthy", "healthy");
        let first = Transition::between("prod", "platform", "nats", None, &pending).unwrap();
        assert_eq!(
            first.to_string(),
            "prod:platform/nats: new -> Pending (Deployed): applied 2 resource(s), not healthy yet"
        );
        let next =
            Transition::between("prod", "platform", "nats", Some(&pending), &running).unwrap();
        assert_eq!(
            next.change(),
            "Pending (Deployed) -> Running (Healthy): healthy"
        );
        let reworded = status("Running", "Healthy", "healthy; the record differed");
        assert_eq!(
            Transition::between("prod", "platform", "nats", Some(&running), &reworded),
            None,
            "the message alone is no transition"
        );
        let other_reason = status("Running", "Borrowed", "");
        assert_eq!(
            Transition::between("prod", "platform", "nats", Some(&running), &other_reason)
                .unwrap()
                .change(),
            "Running (Healthy) -> Running (Borrowed)"
        );
        assert_eq!(
            Transition::between("prod", "platform", "nats", None, &CombStatus::default()),
            None
        );
    }
}
