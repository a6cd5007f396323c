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

/// What a status write changed, the first of these that differs: a transition (the phase or
/// the Ready reason), else the upstream chain (`upstream.via`), the endpoints, the managed
/// resources, the observed generation, the conditions (their messages: a rollout's progress, a
/// wait with one dependency fewer), the rest of the upstream record. The floor of writes a
/// truthful controller needs is one per transition (issue 23); `comb_status_writes_total` says
/// by this what each write beyond it carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusChange {
    Transition,
    Via,
    Endpoints,
    ManagedResources,
    ObservedGeneration,
    Conditions,
    Upstream,
    /// Nothing of the above: a status written the same (a first write without a phase).
    Other,
}

impl StatusChange {
    pub fn between(old: Option<&CombStatus>, new: &CombStatus) -> StatusChange {
        let after = PhaseReason::of(Some(new));
        if after.is_some() && PhaseReason::of(old) != after {
            return StatusChange::Transition;
        }
        let Some(old) = old else {
            return StatusChange::Other;
        };
        let via = |status: &CombStatus| {
            status
                .upstream
                .as_ref()
                .and_then(|upstream| upstream.via.clone())
        };
        if via(old) != via(new) {
            StatusChange::Via
        } else if old.endpoints != new.endpoints {
            StatusChange::Endpoints
        } else if old.managed_resources != new.managed_resources {
            StatusChange::ManagedResources
        } else if old.observed_generation != new.observed_generation {
            StatusChange::ObservedGeneration
        } else if old.conditions != new.conditions {
            StatusChange::Conditions
        } else if old.upstream != new.upstream {
            StatusChange::Upstream
        } else {
            StatusChange::Other
        }
    }

    /// The label value, as the status field is spelt (`transition` for a transition).
    pub fn as_str(self) -> &'static str {
        match self {
            StatusChange::Transition => "transition",
            StatusChange::Via => "via",
            StatusChange::Endpoints => "endpoints",
            StatusChange::ManagedResources => "managedResources",
            StatusChange::ObservedGeneration => "observedGeneration",
            StatusChange::Conditions => "conditions",
            StatusChange::Upstream => "upstream",
            StatusChange::Other => "other",
        }
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

    #[test]
    fn status_changes() {
        use comb_api::{CombEndpoint, CombUpstreamStatus, ManagedObject};
        let running = status(
            "Running",
            "Borrowed",
            "borrowed from upstream (context staging)",
        );
        let with = |edit: fn(&mut CombStatus)| {
            let mut changed = running.clone();
            edit(&mut changed);
            changed
        };
        let chained = |via: &[&str]| {
            let mut chained = running.clone();
            chained.upstream = Some(CombUpstreamStatus {
                via: Some(via.iter().map(ToString::to_string).collect()),
                ..CombUpstreamStatus::default()
            });
            chained
        };
        let table: Vec<(&str, Option<CombStatus>, CombStatus, StatusChange)> = vec![
            (
                "first write",
                None,
                running.clone(),
                StatusChange::Transition,
            ),
            (
                "first write without a phase",
                None,
                CombStatus::default(),
                StatusChange::Other,
            ),
            (
                "another reason",
                Some(running.clone()),
                status("Running", "Healthy", "healthy"),
                StatusChange::Transition,
            ),
            (
                "another phase, same reason",
                Some(running.clone()),
                status("Pending", "Borrowed", ""),
                StatusChange::Transition,
            ),
            (
                "a longer chain, its message too",
                Some(chained(&["staging"])),
                {
                    let mut longer = chained(&["staging", "prod"]);
                    longer.conditions =
                        status("Running", "Borrowed", "via staging, prod").conditions;
                    longer
                },
                StatusChange::Via,
            ),
            (
                "endpoints",
                Some(running.clone()),
                with(|s| {
                    s.endpoints = Some(vec![CombEndpoint {
                        name: "http".into(),
                        protocol: None,
                        port: 80,
                        cluster: Some("web.staging.svc".into()),
                        external: None,
                    }])
                }),
                StatusChange::Endpoints,
            ),
            (
                "managed resources",
                Some(running.clone()),
                with(|s| {
                    s.managed_resources = Some(vec![ManagedObject {
                        api_version: "v1".into(),
                        kind: "Service".into(),
                        namespace: Some("platform".into()),
                        name: "web".into(),
                        uid: None,
                    }])
                }),
                StatusChange::ManagedResources,
            ),
            (
                "observed generation",
                Some(running.clone()),
                with(|s| s.observed_generation = Some(2)),
                StatusChange::ObservedGeneration,
            ),
            (
                "a message",
                Some(running.clone()),
                status("Running", "Borrowed", "borrowed, reworded"),
                StatusChange::Conditions,
            ),
            (
                "the upstream's phase",
                Some(chained(&["staging"])),
                {
                    let mut moved = chained(&["staging"]);
                    moved.upstream.as_mut().unwrap().phase = Some("Pending".into());
                    moved
                },
                StatusChange::Upstream,
            ),
            (
                "nothing",
                Some(running.clone()),
                running.clone(),
                StatusChange::Other,
            ),
        ];
        for (what, old, new, expected) in table {
            assert_eq!(
                StatusChange::between(old.as_ref(), &new),
                expected,
                "{what}"
            );
        }
    }
}
