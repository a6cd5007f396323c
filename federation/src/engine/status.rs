//! Building the recorded `CombStatus` from what a reconcile step decided (reference §6.7
//! carry-forward, §6.8 `_status_from`). Pure: `now` is a parameter.

use std::collections::{BTreeMap, HashMap, HashSet};

use comb_api::{
    CONFIG_READY, Comb, CombCondition, CombEndpoint, CombStatus, CombUpstreamStatus,
    ConditionStatus, DEPENDENCIES_READY, ManagedObject, Phase, READY, Reason, STATUS_WRITTEN,
    group_of,
};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::engine::values::clean_message;

/// A resource's identity regardless of its API version: how `managedResources` entries are
/// compared (a new API version of a Kind is the same object).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    pub group: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ResourceKey {
    pub fn of(resource: &ManagedObject) -> ResourceKey {
        ResourceKey {
            group: group_of(&resource.api_version).to_string(),
            kind: resource.kind.clone(),
            namespace: resource.namespace.clone(),
            name: resource.name.clone(),
        }
    }
}

/// `a ∪ b` by identity, keeping the first entry per identity, in order.
pub fn union(first: &[ManagedObject], second: &[ManagedObject]) -> Vec<ManagedObject> {
    let mut seen = HashSet::new();
    first
        .iter()
        .chain(second)
        .filter(|resource| seen.insert(ResourceKey::of(resource)))
        .cloned()
        .collect()
}

/// `recorded` with `made` written over it: each recorded entry keeps its place and takes the
/// entry `made` has for its identity (a fresh uid); what `made` adds goes last. The record's
/// order stays as it was, so a step that re-made a copy writes no status for the order alone.
pub fn refreshed(recorded: &[ManagedObject], made: &[ManagedObject]) -> Vec<ManagedObject> {
    let fresh: HashMap<ResourceKey, &ManagedObject> = made
        .iter()
        .map(|resource| (ResourceKey::of(resource), resource))
        .collect();
    let kept = recorded.iter().map(|resource| {
        fresh
            .get(&ResourceKey::of(resource))
            .copied()
            .unwrap_or(resource)
    });
    union(&kept.cloned().collect::<Vec<_>>(), made)
}

/// What a step established as serving the Comb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Established {
    /// The local path deployed or found the Comb healthy.
    Local,
    /// The upstream path ran (whatever its outcome).
    Upstream,
}

/// The content of one condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub status: ConditionStatus,
    pub reason: Reason,
    pub message: String,
}

impl Verdict {
    pub fn new(status: ConditionStatus, reason: Reason, message: impl Into<String>) -> Verdict {
        Verdict {
            status,
            reason,
            message: message.into(),
        }
    }
}

/// What one reconcile step decided (the reference's record `r`).
#[derive(Clone, Debug, PartialEq)]
pub struct StepRecord {
    /// The phase and the Ready condition's reason and message.
    pub phase: Phase,
    pub reason: Reason,
    pub message: String,
    /// Conditions the step set besides Ready (`DependenciesReady`, `ConfigReady`).
    pub conditions: BTreeMap<String, Verdict>,
    /// What apply-and-prune left managed; `None` when the step applied nothing (the previous
    /// record is carried forward).
    pub managed: Option<Vec<ManagedObject>>,
    /// The endpoints the step published (local, or redirected to the upstream).
    pub endpoints: Option<Vec<CombEndpoint>>,
    /// `status.upstream` of a borrowing step.
    pub upstream: Option<CombUpstreamStatus>,
    /// What the step established; `None` carries endpoints and upstream forward.
    pub established: Option<Established>,
    /// The prune notes of the step's apply (also in the Ready message): the controller makes
    /// each an Event the first time it comes.
    pub notes: Vec<String>,
    /// The CR as the step's write-ahead left it (what the deploy was about to make, recorded
    /// before it was made): the step's status is written over this version.
    pub written_ahead: Option<Box<Comb>>,
}

impl StepRecord {
    /// A record that ended with `phase`, `reason` and `message` and set nothing else.
    pub fn finished(phase: Phase, reason: Reason, message: impl Into<String>) -> StepRecord {
        StepRecord {
            phase,
            reason,
            message: message.into(),
            conditions: BTreeMap::new(),
            managed: None,
            endpoints: None,
            upstream: None,
            established: None,
            notes: Vec::new(),
            written_ahead: None,
        }
    }

    /// Ends the step with `phase`, `reason` and `message` (what else it set stays).
    pub fn finish(&mut self, phase: Phase, reason: Reason, message: impl Into<String>) {
        self.phase = phase;
        self.reason = reason;
        self.message = message.into();
    }

    /// Sets condition `kind` (e.g. `DependenciesReady`).
    pub fn set_condition(&mut self, kind: &str, verdict: Verdict) {
        self.conditions.insert(kind.to_string(), verdict);
    }
}

/// The status to record for a step. Conditions: `Ready` (True iff the phase is Running),
/// `DependenciesReady` and `ConfigReady` (`Unknown/NotChecked` unless the step set them), others
/// the step set sorted by type, and `StatusWritten` when `write_failure` says why writing
/// failed. A condition keeps its `lastTransitionTime` while its status stays. Managed resources
/// carry forward unless the step applied; endpoints and upstream carry forward unless the step
/// established something.
pub fn build_status(
    record: &StepRecord,
    previous: Option<&CombStatus>,
    generation: Option<i64>,
    write_failure: Option<&str>,
    now: Timestamp,
) -> CombStatus {
    let not_checked = || {
        Verdict::new(
            ConditionStatus::Unknown,
            Reason::NotChecked,
            "this step did not get that far",
        )
    };
    let mut others: BTreeMap<String, Verdict> = record.conditions.clone();
    others.remove(READY);
    let dependencies = others
        .remove(DEPENDENCIES_READY)
        .unwrap_or_else(not_checked);
    let config = others.remove(CONFIG_READY).unwrap_or_else(not_checked);
    if let Some(failure) = write_failure {
        others.insert(
            STATUS_WRITTEN.to_string(),
            Verdict::new(
                ConditionStatus::False,
                Reason::WriteFailed,
                format!(
                    "writing the status into the custom resource failed: {}",
                    clean_message(failure)
                ),
            ),
        );
    }
    let ready = Verdict::new(
        ConditionStatus::from(record.phase == Phase::Running),
        record.reason.clone(),
        record.message.clone(),
    );
    let conditions = [
        (READY.to_string(), ready),
        (DEPENDENCIES_READY.to_string(), dependencies),
        (CONFIG_READY.to_string(), config),
    ]
    .into_iter()
    .chain(others)
    .map(|(kind, verdict)| condition(kind, verdict, previous, now))
    .collect();

    let carried = record.established.is_none();
    CombStatus {
        phase: Some(record.phase.clone()),
        conditions: Some(conditions),
        managed_resources: record
            .managed
            .clone()
            .or_else(|| previous.and_then(|p| p.managed_resources.clone())),
        endpoints: match (&record.endpoints, carried) {
            (Some(endpoints), _) => Some(endpoints.clone()),
            (None, true) => previous.and_then(|p| p.endpoints.clone()),
            (None, false) => None,
        },
        upstream: if carried {
            previous.and_then(|p| p.upstream.clone())
        } else {
            record
                .upstream
                .clone()
                .map(|upstream| observed_since(upstream, previous))
        },
        observed_generation: generation,
    }
}

/// The status of a step built again on `current`, the status the CR records when writing the
/// step's status met a conflict (someone wrote the CR after the step read it), never the one
/// built for the older copy: [`build_status`] with `current` as the previous status (the
/// conditions keep its times, carried fields come from it), and what `current` records as
/// managed beyond what the step started from (`started_from`) stays recorded: another writer
/// applied it meanwhile, and a record without it would never prune it. `None` when `current`
/// observed a later generation than `generation`, the step's: its verdict is about a newer
/// spec than the step's, and stands.
pub fn rebuild_status(
    record: &StepRecord,
    started_from: Option<&CombStatus>,
    current: Option<&CombStatus>,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<CombStatus> {
    let observed = current.and_then(|current| current.observed_generation);
    if let (Some(observed), Some(generation)) = (observed, generation)
        && observed > generation
    {
        return None;
    }
    let mut status = build_status(record, current, generation, None, now);
    if record.managed.is_some() {
        let known: HashSet<ResourceKey> = started_from
            .map(CombStatus::managed)
            .unwrap_or_default()
            .iter()
            .map(ResourceKey::of)
            .collect();
        let recorded_since: Vec<ManagedObject> = current
            .map(CombStatus::managed)
            .unwrap_or_default()
            .iter()
            .filter(|resource| !known.contains(&ResourceKey::of(resource)))
            .cloned()
            .collect();
        if !recorded_since.is_empty() {
            let managed = status.managed_resources.take().unwrap_or_default();
            status.managed_resources = Some(union(&managed, &recorded_since));
        }
    }
    Some(status)
}

/// `upstream` with the previous `observedAt` while the rest of what comb knows of the upstream
/// stays the same: the time says since when the upstream stands as recorded, so that a settled
/// borrowing step records the status it found (and writes nothing).
fn observed_since(
    upstream: CombUpstreamStatus,
    previous: Option<&CombStatus>,
) -> CombUpstreamStatus {
    let without_time = |u: &CombUpstreamStatus| CombUpstreamStatus {
        observed_at: None,
        ..u.clone()
    };
    match previous.and_then(|p| p.upstream.as_ref()) {
        Some(before) if without_time(before) == without_time(&upstream) => CombUpstreamStatus {
            observed_at: before.observed_at.clone().or(upstream.observed_at),
            ..upstream
        },
        _ => upstream,
    }
}

/// One condition; the previous `lastTransitionTime` stays while the status does.
fn condition(
    kind: String,
    verdict: Verdict,
    previous: Option<&CombStatus>,
    now: Timestamp,
) -> CombCondition {
    let kept = previous
        .and_then(|p| p.condition(&kind))
        .filter(|old| old.status == verdict.status)
        .and_then(|old| old.last_transition_time.clone());
    CombCondition {
        type_: kind,
        status: verdict.status,
        reason: Some(verdict.reason),
        message: Some(verdict.message),
        last_transition_time: Some(kept.unwrap_or(Time(now))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn resource(name: &str) -> ManagedObject {
        ManagedObject {
            api_version: "v1".into(),
            kind: "Service".into(),
            namespace: Some("platform".into()),
            name: name.into(),
            uid: None,
        }
    }

    #[test]
    fn refreshed_keeps_the_records_order_and_takes_fresh_uids() {
        let with_uid = |name: &str, uid: &str| ManagedObject {
            uid: Some(uid.into()),
            ..resource(name)
        };
        let names = |list: &[ManagedObject]| -> Vec<(String, Option<String>)> {
            list.iter()
                .map(|r| (r.name.clone(), r.uid.clone()))
                .collect()
        };
        // (recorded, made, the record after: name and uid per entry)
        type Case<'a> = (
            &'a [ManagedObject],
            &'a [ManagedObject],
            Vec<(&'a str, Option<&'a str>)>,
        );
        let cases: [Case; 4] = [
            (&[], &[], vec![]),
            (
                &[with_uid("a", "1"), with_uid("b", "2")],
                &[],
                vec![("a", Some("1")), ("b", Some("2"))],
            ),
            (
                &[with_uid("a", "1"), with_uid("b", "2")],
                &[with_uid("b", "3")],
                vec![("a", Some("1")), ("b", Some("3"))],
            ),
            (
                &[with_uid("a", "1")],
                &[with_uid("c", "4"), with_uid("a", "5")],
                vec![("a", Some("5")), ("c", Some("4"))],
            ),
        ];
        for (recorded, made, expected) in cases {
            let expected: Vec<(String, Option<String>)> = expected
                .into_iter()
                .map(|(n, u)| (n.to_string(), u.map(str::to_string)))
                .collect();
            assert_eq!(names(&refreshed(recorded, made)), expected);
        }
    }

    fn endpoint(cluster: &str) -> CombEndpoint {
        CombEndpoint {
            name: "client".into(),
            protocol: Some("tcp".into()),
            port: 4222,
            cluster: Some(cluster.into()),
            external: None,
        }
    }

    fn previous() -> CombStatus {
        serde_json::from_value(json!({
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Healthy", "message": "healthy", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "DependenciesReady", "status": "True", "reason": "Healthy", "message": "all dependencies are healthy", "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {"type": "ConfigReady", "status": "True", "reason": "Complete", "message": "nothing missing", "lastTransitionTime": "2026-01-01T00:00:02Z"}
            ],
            "managedResources": [{"apiVersion": "v1", "kind": "Service", "namespace": "platform", "name": "old"}],
            "endpoints": [{"name": "client", "protocol": "tcp", "port": 4222, "cluster": "db.upstream:4222"}],
            "upstream": {"class": "Static", "phase": "Running", "via": ["dev"]},
            "observedGeneration": 1
        }))
        .unwrap()
    }

    #[test]
    fn conditions_order_defaults_and_transition_times() {
        let mut record = StepRecord::finished(
            Phase::Pending,
            Reason::Deployed,
            "applied 1 resource(s), not healthy yet",
        );
        record.set_condition(
            "Zeta",
            Verdict::new(ConditionStatus::True, Reason::from("Z"), "z"),
        );
        record.set_condition(
            CONFIG_READY,
            Verdict::new(
                ConditionStatus::True,
                Reason::Complete,
                "nothing missing (now)",
            ),
        );
        record.established = Some(Established::Local);
        let now = at("2026-09-26T12:00:00.750Z");
        let status = build_status(
            &record,
            Some(&previous()),
            Some(3),
            Some("409 conflict \n"),
            now,
        );
        let rows: Vec<(String, String, String, String, String)> = status
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.to_string(),
                    c.reason.as_ref().unwrap().to_string(),
                    c.message.clone().unwrap(),
                    serde_json::to_value(c.last_transition_time.as_ref().unwrap())
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .to_string(),
                )
            })
            .collect();
        let row = |a: &str, b: &str, c: &str, d: &str, e: &str| {
            (a.into(), b.into(), c.into(), d.into(), e.into())
        };
        assert_eq!(
            rows,
            [
                row(
                    "Ready",
                    "False",
                    "Deployed",
                    "applied 1 resource(s), not healthy yet",
                    "2026-09-26T12:00:00Z"
                ),
                row(
                    "DependenciesReady",
                    "Unknown",
                    "NotChecked",
                    "this step did not get that far",
                    "2026-09-26T12:00:00Z"
                ),
                row(
                    "ConfigReady",
                    "True",
                    "Complete",
                    "nothing missing (now)",
                    "2026-01-01T00:00:02Z"
                ),
                row(
                    "StatusWritten",
                    "False",
                    "WriteFailed",
                    "writing the status into the custom resource failed: 409 conflict",
                    "2026-09-26T12:00:00Z"
                ),
                row("Zeta", "True", "Z", "z", "2026-09-26T12:00:00Z"),
            ]
        );
        assert_eq!(status.observed_generation, Some(3));
        assert_eq!(status.phase, Some(Phase::Pending));
    }

    #[test]
    fn a_status_is_built_again_on_a_newer_record() {
        let now = at("2026-09-26T12:00:00Z");
        let names = |status: &CombStatus| {
            status
                .managed()
                .iter()
                .map(|r| r.name.clone())
                .collect::<Vec<_>>()
        };
        let started_from = previous();
        // Since the step read the CR, another writer recorded `theirs` and a later Ready time.
        let mut current = previous();
        current
            .managed_resources
            .get_or_insert_with(Vec::new)
            .push(resource("theirs"));
        let mut ready = current.conditions.clone().unwrap();
        ready[0].last_transition_time = Some(Time(at("2026-05-05T00:00:00Z")));
        current.conditions = Some(ready);
        let mut applied = StepRecord::finished(Phase::Running, Reason::Healthy, "healthy");
        applied.managed = Some(vec![resource("web"), resource("old")]);
        applied.established = Some(Established::Local);
        let mut pruned = applied.clone();
        pruned.managed = Some(vec![resource("web")]);
        let carried = StepRecord::finished(Phase::Blocked, Reason::DependencyNotReady, "db");
        // (case, the step's record, the status it started from, its generation, what the
        // rebuilt status records as managed; `None`: nothing is rebuilt).
        type Case<'a> = (
            &'a str,
            &'a StepRecord,
            Option<&'a CombStatus>,
            Option<i64>,
            Option<Vec<&'a str>>,
        );
        let cases: [Case; 6] = [
            // What the step applied, and what the other writer recorded since.
            (
                "applied",
                &applied,
                Some(&started_from),
                Some(1),
                Some(vec!["web", "old", "theirs"]),
            ),
            // What the step pruned stays pruned: only what was recorded since is added.
            (
                "pruned",
                &pruned,
                Some(&started_from),
                Some(1),
                Some(vec!["web", "theirs"]),
            ),
            // A step that applied nothing carries the newer record whole.
            (
                "carried",
                &carried,
                Some(&started_from),
                Some(1),
                Some(vec!["old", "theirs"]),
            ),
            // A step that started from no status adds all of it.
            (
                "first",
                &pruned,
                None,
                Some(1),
                Some(vec!["web", "old", "theirs"]),
            ),
            // The newer record observed a later generation: it stands.
            (
                "later generation",
                &applied,
                Some(&started_from),
                Some(0),
                None,
            ),
            // Without generations, nothing tells: built again.
            (
                "no generation",
                &pruned,
                Some(&started_from),
                None,
                Some(vec!["web", "theirs"]),
            ),
        ];
        for (case, record, started_from, generation, expected) in cases {
            let rebuilt = rebuild_status(record, started_from, Some(&current), generation, now);
            assert_eq!(
                rebuilt.as_ref().map(names),
                expected.map(|names| names.iter().map(|n| n.to_string()).collect()),
                "{case}"
            );
        }
        // The conditions keep the newer record's times.
        let rebuilt =
            rebuild_status(&applied, Some(&started_from), Some(&current), Some(1), now).unwrap();
        assert_eq!(
            rebuilt.ready().unwrap().last_transition_time,
            Some(Time(at("2026-05-05T00:00:00Z")))
        );
        assert_eq!(rebuilt.observed_generation, Some(1));
    }

    #[test]
    fn ready_is_true_only_when_running() {
        for (phase, ready) in [
            ("Running", ConditionStatus::True),
            ("Pending", ConditionStatus::False),
            ("Disabled", ConditionStatus::False),
        ] {
            let status = build_status(
                &StepRecord::finished(Phase::from(phase), Reason::from("R"), "m"),
                None,
                None,
                None,
                at("2026-01-01T00:00:00Z"),
            );
            assert_eq!(status.ready().unwrap().status, ready, "{phase}");
            assert_eq!(status.observed_generation, None);
            assert!(status.condition(STATUS_WRITTEN).is_none());
        }
    }

    #[test]
    fn carry_forward() {
        let now = at("2026-01-01T00:00:00Z");
        let prev = previous();

        // Established nothing (Disabled, Blocked, NeedsConfig, early errors): everything carried.
        let disabled = build_status(
            &StepRecord::finished(Phase::Disabled, Reason::Disabled, "spec.enabled is false"),
            Some(&prev),
            None,
            None,
            now,
        );
        assert_eq!(disabled.managed(), prev.managed());
        assert_eq!(disabled.endpoints, prev.endpoints);
        assert_eq!(disabled.upstream, prev.upstream);

        // The very first step of a local Comb that stops early publishes its own endpoints.
        let mut first = StepRecord::finished(
            Phase::NeedsConfig,
            Reason::MissingPrerequisites,
            "missing: secret x",
        );
        first.endpoints = Some(vec![endpoint("nats.platform.svc:4222")]);
        let status = build_status(&first, None, None, None, now);
        assert_eq!(
            status.endpoint_list()[0].cluster.as_deref(),
            Some("nats.platform.svc:4222")
        );
        assert_eq!(status.managed_resources, None);
        assert_eq!(status.upstream, None);

        // A local step that deployed: its own managed and endpoints, the upstream dropped.
        let mut local = StepRecord::finished(
            Phase::Pending,
            Reason::Deployed,
            "applied 1 resource(s), in place of the bridge",
        );
        local.established = Some(Established::Local);
        local.managed = Some(vec![resource("nats")]);
        local.endpoints = Some(vec![endpoint("nats.platform.svc:4222")]);
        let status = build_status(&local, Some(&prev), None, None, now);
        assert_eq!(status.managed(), [resource("nats")]);
        assert_eq!(
            status.endpoint_list()[0].cluster.as_deref(),
            Some("nats.platform.svc:4222")
        );
        assert_eq!(status.upstream, None);

        // A borrowing step that stopped (UpstreamUnreachable): endpoints [], upstream recorded,
        // managed carried because nothing was applied.
        let mut blocked = StepRecord::finished(
            Phase::Blocked,
            Reason::UpstreamUnreachable,
            "upstream Static is unreachable",
        );
        blocked.established = Some(Established::Upstream);
        blocked.endpoints = Some(vec![]);
        blocked.upstream = Some(CombUpstreamStatus {
            class: Some("Static".into()),
            reachable: Some(false),
            ..Default::default()
        });
        let status = build_status(&blocked, Some(&prev), None, None, now);
        assert_eq!(status.endpoints, Some(vec![]));
        assert_eq!(status.upstream.as_ref().unwrap().reachable, Some(false));
        assert_eq!(status.managed(), prev.managed());

        // A DeployFailed step: its union as managed, endpoints and upstream carried.
        let mut failed = StepRecord::finished(
            Phase::Error,
            Reason::DeployFailed,
            "deploy failed: ensure Service nats: quota exceeded",
        );
        failed.managed = Some(vec![resource("nats"), resource("old")]);
        let status = build_status(&failed, Some(&prev), None, None, now);
        assert_eq!(status.managed().len(), 2);
        assert_eq!(status.upstream, prev.upstream);
    }

    #[test]
    fn messages() {
        assert_eq!(clean_message("vault sealed \n\t"), "vault sealed");
        assert_eq!(clean_message("  \n"), "unknown error");
    }

    #[test]
    fn observed_at_moves_only_when_the_upstream_does() {
        let upstream = |phase: Phase, at_time: &str| CombUpstreamStatus {
            class: Some("Static".into()),
            phase: Some(phase),
            via: Some(vec!["dev".into()]),
            observed_at: Some(Time(at(at_time))),
            ..CombUpstreamStatus::default()
        };
        let mut prev = previous();
        prev.upstream = Some(upstream(Phase::Running, "2026-01-01T00:00:00Z"));
        let step = |phase: Phase| {
            let mut record = StepRecord::finished(Phase::Running, Reason::Borrowed, "borrowed");
            record.established = Some(Established::Upstream);
            record.upstream = Some(upstream(phase, "2026-03-03T00:00:00Z"));
            record
        };
        let now = at("2026-03-03T00:00:00Z");
        let same = build_status(&step(Phase::Running), Some(&prev), Some(1), None, now);
        assert_eq!(same.upstream, prev.upstream, "nothing new: the time stays");
        let moved = build_status(&step(Phase::Pending), Some(&prev), Some(1), None, now);
        assert_eq!(
            moved.upstream,
            Some(upstream(Phase::Pending, "2026-03-03T00:00:00Z")),
            "a new phase: a new time"
        );
        let first = build_status(&step(Phase::Running), None, Some(1), None, now);
        assert_eq!(
            first.upstream,
            Some(upstream(Phase::Running, "2026-03-03T00:00:00Z"))
        );
    }
}
