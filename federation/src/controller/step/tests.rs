use comb_api::{CombStatus, Phase, Reason};
use jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::engine::class::{ClassRegistry, Settings};
use crate::engine::status::{StepRecord, build_status};

const OURS: &str = "comb.internal/cleanup";

/// A CR's finalizers, if it has the field.
type Listed = Option<&'static [&'static str]>;

/// The finalizers with ours added, `None` when ours is there.
type Added = Option<Vec<String>>;

/// The Comb memory holds whose status could not be written.
type Kept = Option<Box<Built>>;

/// A build that failed: for which uid and generation, and why.
type Failure = Option<(Origin, String)>;

fn with_finalizers(finalizers: Option<&[&str]>) -> Comb {
    let mut cr = cr("u1", "1", 1);
    cr.metadata.finalizers = finalizers.map(|list| list.iter().map(|f| f.to_string()).collect());
    cr
}

#[test]
fn ours_is_added_after_the_other_finalizers_and_removed_alone() {
    let owned = |list: &[&str]| -> Vec<String> { list.iter().map(|f| f.to_string()).collect() };
    // (the CR's finalizers, with ours, without ours)
    let cases: [(Listed, Added, Vec<String>); 5] = [
        (None, Some(owned(&[OURS])), owned(&[])),
        (Some(&[]), Some(owned(&[OURS])), owned(&[])),
        (
            Some(&["backup.io/keep"]),
            Some(owned(&["backup.io/keep", OURS])),
            owned(&["backup.io/keep"]),
        ),
        (Some(&[OURS]), None, owned(&[])),
        (
            Some(&["a.io/x", OURS, "b.io/y"]),
            None,
            owned(&["a.io/x", "b.io/y"]),
        ),
    ];
    for (finalizers, with, without) in cases {
        let cr = with_finalizers(finalizers);
        assert_eq!(finalizers_with(&cr, OURS), with, "{finalizers:?}");
        assert_eq!(finalizers_without(&cr, OURS), without, "{finalizers:?}");
        assert_eq!(has_finalizer(&cr, OURS), with.is_none(), "{finalizers:?}");
    }
    assert_eq!(finalizer("comb.internal"), OURS);
}

/// Version `version` of CR `platform/db` (object `uid`, generation `generation`).
fn cr(uid: &str, version: &str, generation: i64) -> Comb {
    let mut cr = Comb::new(
        "comb.internal",
        "platform",
        "db",
        serde_json::from_value(json!({"class": "Manifests"})).expect("a spec"),
    );
    cr.metadata.uid = Some(uid.to_string());
    cr.metadata.resource_version = Some(version.to_string());
    cr.metadata.generation = Some(generation);
    cr
}

fn status(phase: Phase, message: &str) -> CombStatus {
    let record = StepRecord::finished(phase, Reason::Deployed, message);
    build_status(&record, None, Some(1), None, Timestamp::UNIX_EPOCH)
}

/// The Comb built from `cr`, holding `recorded` as its status (an unwritten one).
async fn unwritten(cr: &Comb, recorded: CombStatus) -> Box<Built> {
    let mut comb = ClassRegistry::with_builtins()
        .build(cr, &Settings::default(), &|_: &CombInstance| false)
        .await
        .expect("the Comb builds");
    comb.keep_status(recorded);
    Box::new(Built {
        comb,
        origin: Origin::of(cr),
    })
}

/// What a [`Start`] is, for comparing: `unwritten <version> <phase>`, `unbuildable <message>`,
/// `build` or `build from <phase>`.
fn described(start: Start) -> String {
    let phase = |status: Option<&CombStatus>| {
        status
            .and_then(|status| status.phase.as_ref())
            .map(Phase::to_string)
            .unwrap_or_default()
    };
    match start {
        Start::Unwritten(built) => format!(
            "unwritten {} {}",
            built
                .comb
                .cr()
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or(""),
            phase(built.comb.recorded_status())
        ),
        Start::Unbuildable(message) => format!("unbuildable {message}"),
        Start::Build { kept_record: None } => "build".to_string(),
        Start::Build {
            kept_record: Some(record),
        } => format!("build from {}", phase(Some(record.as_ref()))),
    }
}

#[tokio::test]
async fn a_step_starts_from_what_memory_holds_of_the_same_object_and_generation() {
    let original = cr("u1", "1", 1);
    let failed = status(Phase::Error, "the status write failed");
    let failure = |generation: i64, message: &str| {
        Some((Origin::of(&cr("u1", "1", generation)), message.to_string()))
    };
    let cases: Vec<(&str, Kept, Failure, Comb, &str)> = vec![
        ("nothing kept", None, None, original.clone(), "build"),
        (
            "the build failed for this generation",
            None,
            failure(1, "unknown class"),
            original.clone(),
            "unbuildable unknown class",
        ),
        (
            "the build failed for an older generation",
            None,
            failure(1, "unknown class"),
            cr("u1", "5", 2),
            "build",
        ),
        (
            "its status could not be written",
            Some(unwritten(&original, failed.clone()).await),
            None,
            original.clone(),
            "unwritten 1 Error",
        ),
        (
            "a later version of the same generation (another status write)",
            Some(unwritten(&original, failed.clone()).await),
            None,
            cr("u1", "2", 1),
            "unwritten 2 Error",
        ),
        (
            "an edit: built anew from the record memory holds",
            Some(unwritten(&original, failed.clone()).await),
            None,
            cr("u1", "3", 2),
            "build from Error",
        ),
        (
            "another object under the same name starts from its own CR",
            Some(unwritten(&original, failed.clone()).await),
            failure(1, "unknown class"),
            cr("u2", "9", 1),
            "build",
        ),
    ];
    for (what, unwritten, failure, cr, expected) in cases {
        assert_eq!(
            described(start_from(unwritten, failure, &cr)),
            expected,
            "{what}"
        );
    }
}

#[test]
fn a_step_reports_the_phase_and_ready_reason_it_recorded() {
    let running = status(Phase::Running, "applied 2 resource(s)");
    let outcome = recorded(&running, false);
    assert_eq!(
        (outcome.state, outcome.failed),
        (
            StepState::Recorded {
                phase: Phase::Running,
                reason: Some(Reason::Deployed)
            },
            false
        )
    );
    let no_ready = CombStatus {
        conditions: None,
        ..running
    };
    let outcome = recorded(&no_ready, true);
    assert_eq!(
        (outcome.state, outcome.failed),
        (
            StepState::Recorded {
                phase: Phase::Running,
                reason: None
            },
            true
        )
    );
    // A status without a phase is none comb records: the step failed to make one.
    let outcome = recorded(&CombStatus::default(), true);
    assert_eq!(outcome.state, StepState::Failed(Reason::StatusFailed));
    assert_eq!(outcome.state.phase_word(), Some("Error"));
}
