//! The evidence of docs/adr/0003-hand-written-runtime.md: what kube-runtime's and
//! kube-lease-manager's pieces do on an API server (either backend), where comb keeps its own.
//! Each test states the behaviour the ADR's decision rests on; when a new version of those
//! crates stops doing it, the test fails, and the decision is to be taken again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use comb_api::Comb;
use comb_testkit::{Setup, World, wait_until};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{self, finalizer};
use kube_lease_manager::LeaseManagerBuilder;
use serde_json::json;

const NS: &str = "platform";

async fn world() -> World {
    Setup::clusters(["test"])
        .namespace("test", NS)
        .start()
        .await
}

/// Recorder keeps the note of the first of a series: a second Event of the same type, reason
/// and action about the same object within its cache's six minutes is a PATCH of the first
/// one's series, and the new note is dropped. comb tells every transition with its own message
/// (`Running -> Pending: image web:3 rolling out`), so it writes its Events itself.
#[tokio::test]
async fn recorder_keeps_the_first_note_of_a_repeated_event() {
    let world = world().await;
    let comb = world
        .create_comb("test", NS, "web", json!({"class": "Manifests"}))
        .await;
    let client = world.client("test").await;
    let recorder = Recorder::new(client.clone(), Reporter::from("comb-adr-0003"));
    let regarding = ObjectReference {
        api_version: Some(format!("{}/{}", comb_api::DEFAULT_GROUP, comb_api::VERSION)),
        kind: Some(comb_api::KIND.to_string()),
        name: comb.metadata.name.clone(),
        namespace: comb.metadata.namespace.clone(),
        uid: comb.metadata.uid.clone(),
        ..ObjectReference::default()
    };
    for note in [
        "Running -> Pending: image web:2",
        "Running -> Pending: image web:3",
    ] {
        let event = Event {
            type_: EventType::Normal,
            reason: "Pending".to_string(),
            note: Some(note.to_string()),
            action: "Transition".to_string(),
            secondary: None,
        };
        recorder
            .publish(&event, &regarding)
            .await
            .expect("the Event is written");
    }
    let events: Api<EventsV1Event> = Api::namespaced(client, NS);
    let written = wait_until("the Event series", async || {
        let listed = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let ours: Vec<EventsV1Event> = listed
            .items
            .into_iter()
            .filter(|event| event.reporting_controller.as_deref() == Some("comb-adr-0003"))
            .collect();
        match ours.as_slice() {
            [one] if one.series.is_some() => Ok(one.clone()),
            other => Err(format!(
                "{} Events, series {:?}",
                other.len(),
                other.first().map(|e| &e.series)
            )),
        }
    })
    .await;
    assert_eq!(
        written.note.as_deref(),
        Some("Running -> Pending: image web:2")
    );
    assert_eq!(written.series.map(|series| series.count), Some(2));
}

/// `finalizer()` adds the finalizer and returns without calling the reconcile: the apply comes
/// with the next reconcile, which the watch event of that patch brings. comb adds its finalizer
/// and applies in the same step.
#[tokio::test]
async fn finalizer_helper_applies_only_on_the_reconcile_after_adding_the_finalizer() {
    let world = world().await;
    world
        .create_comb("test", NS, "db", json!({"class": "Manifests"}))
        .await;
    let combs: Api<Comb> = world.combs("test", NS).await;
    let reconciled = Arc::new(AtomicBool::new(false));
    let step = |cr: Comb| {
        let reconciled = reconciled.clone();
        let combs = combs.clone();
        async move {
            finalizer(
                &combs,
                "comb.internal/cleanup",
                Arc::new(cr),
                |event| async move {
                    if let finalizer::Event::Apply(_) = event {
                        reconciled.store(true, Ordering::SeqCst);
                    }
                    Ok::<_, kube::Error>(Action::await_change())
                },
            )
            .await
            .expect("the finalizer helper succeeds")
        }
    };
    let first = step(combs.get("db").await.expect("the Comb")).await;
    assert_eq!(first, Action::await_change());
    assert!(
        !reconciled.load(Ordering::SeqCst),
        "the first call only added the finalizer"
    );
    let patched = combs.get("db").await.expect("the Comb");
    assert_eq!(
        patched.metadata.finalizers.as_deref(),
        Some(&["comb.internal/cleanup".to_string()][..])
    );
    step(patched).await;
    assert!(reconciled.load(Ordering::SeqCst), "the second call applies");
}

/// kube-lease-manager judges a Lease by its holder's clock: `renewTime` (written by the holder)
/// plus the duration, against this process's clock. A Lease its holder renewed a moment ago, but
/// whose clock runs an hour behind, is taken at once. comb's sharding judges expiry by how long
/// it saw a Lease unchanged (as client-go's leader election does), so no clock but its own counts.
#[tokio::test]
async fn lease_manager_takes_a_lease_just_renewed_by_a_holder_whose_clock_is_behind() {
    let world = world().await;
    let client = world.client("test").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let an_hour_ago = Timestamp::now() - SignedDuration::from_hours(1);
    leases
        .create(
            &PostParams::default(),
            &Lease {
                metadata: ObjectMeta {
                    name: Some("shard-prod".to_string()),
                    namespace: Some(NS.to_string()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some("replica-behind".to_string()),
                    lease_duration_seconds: Some(15),
                    acquire_time: Some(MicroTime(an_hour_ago)),
                    renew_time: Some(MicroTime(an_hour_ago)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            },
        )
        .await
        .expect("the holder's Lease is written");
    let manager = LeaseManagerBuilder::new(client, "shard-prod")
        .with_namespace(NS)
        .with_identity("replica-ahead")
        .with_duration(15)
        .with_grace(5)
        .build()
        .await
        .expect("a lease manager");
    // Well inside the Lease's 15 s: the holder wrote it just now.
    let took = tokio::time::timeout(Duration::from_secs(10), manager.changed())
        .await
        .expect("it decides within the Lease's duration")
        .expect("it talks to the API server");
    assert!(took, "taken from a holder that renewed it a moment ago");
    let lease = leases.get("shard-prod").await.expect("the Lease");
    assert_eq!(
        lease.spec.and_then(|spec| spec.holder_identity).as_deref(),
        Some("replica-ahead")
    );
}
