//! Reconcile when the API server fails (fault injection in the sandbox): a deploy that stops
//! half-way, status writes that fail, a status write that conflicts.

use comb_api::{CombStatus, ConditionStatus, READY, STATUS_WRITTEN};
use comb_federation::engine::class::CombInstance;
use comb_testkit::engine::*;
use comb_testkit::fixtures::*;
use serde_json::json;

const STATUS_PATH: &str = "/apis/comb.internal/v1/namespaces/platform/combs/nats/status";
const COMB_PATH: &str = "/apis/comb.internal/v1/namespaces/platform/combs/nats";

/// A deploy of three objects over a settled Comb whose second object's apply the API server
/// answers with `code`: the Comb's status after that step, and the next.
async fn half_way(code: u16, answer: &str) -> (CombStatus, CombStatus, Cluster) {
    let cluster = Cluster::start_own().await;
    let comb = cluster
        .settled(
            "nats",
            vec![
                config_map("nats-a", json!({})),
                config_map("nats-old", json!({})),
            ],
        )
        .await;

    let mut comb = cluster
        .edit(
            &comb,
            manifests_spec(vec![
                config_map("nats-a", json!({"changed": "yes"})),
                service("nats", 4222),
                config_map("nats-b", json!({})),
            ]),
        )
        .await;
    cluster.fail(
        "PATCH",
        "/api/v1/namespaces/platform/services/nats",
        code,
        1,
        answer,
    );
    let failed = cluster.reconcile(&mut comb).await;
    let (phase, reason, _) = verdict(&failed);
    assert_eq!((phase.as_str(), reason.as_str()), ("Error", "DeployFailed"));
    // What came before the failure was applied, nothing after it, nothing pruned.
    let a = cluster
        .peek("v1", "ConfigMap", "nats-a")
        .await
        .expect("nats-a");
    assert_eq!(a["data"]["changed"], "yes");
    assert!(cluster.peek("v1", "ConfigMap", "nats-b").await.is_none());
    assert!(cluster.peek("v1", "ConfigMap", "nats-old").await.is_some());
    let next = cluster.reconcile(&mut comb).await;
    (failed, next, cluster)
}

/// What a deploy that stops half-way records: what it made with uids, and what it was about to
/// make without (written ahead), but for an object the server refused (it was not made, and
/// the record must not name an object comb did not make); the next step finishes and prunes.
#[tokio::test]
async fn a_deploy_that_fails_half_way_prunes_nothing() {
    let (refused, next, cluster) = half_way(403, "quota exceeded").await;
    assert_eq!(
        verdict(&refused).2,
        "deploy failed: ensure Service nats: Kubernetes API error (apply Service): 403 Forbidden: quota exceeded"
    );
    let recorded = |status: &CombStatus| -> Vec<String> {
        status
            .managed()
            .iter()
            .map(|entry| format!("{}/{} {}", entry.kind, entry.name, entry.uid.is_some()))
            .collect()
    };
    assert_eq!(
        recorded(&refused),
        [
            "ConfigMap/nats-a true",
            "ConfigMap/nats-old true",
            "ConfigMap/nats-b false"
        ],
        "the refused Service is not recorded"
    );
    assert_eq!(
        recorded(&next),
        [
            "ConfigMap/nats-a true",
            "Service/nats true",
            "ConfigMap/nats-b true"
        ]
    );
    assert_eq!(next.phase.as_ref().map(|p| p.as_str()), Some("Pending"));
    assert!(cluster.peek("v1", "ConfigMap", "nats-old").await.is_none());

    // Unanswered, the Service may have been made: it stays written ahead, so the next step
    // writes nothing ahead again and takes it if it is there.
    let (unanswered, next, _) = half_way(503, "etcd timeout").await;
    assert_eq!(
        recorded(&unanswered),
        [
            "ConfigMap/nats-a true",
            "ConfigMap/nats-old true",
            "Service/nats false",
            "ConfigMap/nats-b false"
        ]
    );
    assert_eq!(
        recorded(&next),
        [
            "ConfigMap/nats-a true",
            "Service/nats true",
            "ConfigMap/nats-b true"
        ]
    );
}

/// Records a status the next step will not find (another Ready message), so that the step
/// writes one: a status equal to the recorded one is not written at all.
async fn outdated(cluster: &Cluster, comb: &mut CombInstance) -> CombStatus {
    let mut cr = cluster.cr(comb.name()).await;
    let mut status = cr.status.clone().expect("a recorded status");
    for condition in status.conditions.iter_mut().flatten() {
        if condition.type_ == READY {
            condition.message = Some("outdated".into());
        }
    }
    cr.status = Some(status);
    let stored = cluster
        .ops
        .update_comb_status("comb.internal", cr)
        .await
        .expect("the outdated status written");
    comb.adopt_cr(stored.clone());
    stored.status.expect("the status written")
}

#[tokio::test]
async fn status_written_false_after_two_failed_writes_then_dropped() {
    let cluster = Cluster::start_own().await;
    let mut comb = cluster
        .settled("nats", vec![config_map("nats", json!({}))])
        .await;
    let settled = outdated(&cluster, &mut comb).await;

    cluster.fail("PUT", STATUS_PATH, 500, 2, "etcd is down");
    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    // Write, read the CR again, write again.
    assert_eq!(cluster.requests().get(STATUS_WRITE), Some(&2));
    assert_eq!(cluster.requests().get("get combs.comb.internal"), Some(&1));
    let written = status.condition(STATUS_WRITTEN).expect("StatusWritten");
    assert_eq!(
        (
            written.status,
            written.reason.as_ref().map(|r| r.as_str()),
            written.message.as_deref()
        ),
        (
            ConditionStatus::False,
            Some("WriteFailed"),
            Some(
                "writing the status into the custom resource failed: Kubernetes API error (update status of Comb): \
                 500 InternalError: etcd is down"
            )
        )
    );
    assert_eq!(verdict(&status), expect("Running", "Healthy", "healthy"));
    // Kept in the in-memory CR; the cluster still has the last written status.
    assert_eq!(comb.recorded_status(), Some(&status));
    assert_eq!(cluster.cr("nats").await.status, Some(settled));

    // The next successful write drops the condition.
    let status = cluster.reconcile(&mut comb).await;
    assert!(status.condition(STATUS_WRITTEN).is_none());
    assert_eq!(cluster.cr("nats").await.status, Some(status));
}

#[tokio::test]
async fn a_failed_reread_means_no_second_write() {
    let cluster = Cluster::start_own().await;
    let mut comb = cluster
        .settled("nats", vec![config_map("nats", json!({}))])
        .await;
    outdated(&cluster, &mut comb).await;

    cluster.fail("PUT", STATUS_PATH, 500, 1, "etcd is down");
    cluster.fail("GET", COMB_PATH, 500, 1, "the API server is shutting down");
    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    let written = status.condition(STATUS_WRITTEN).expect("StatusWritten");
    assert_eq!(
        written.message.as_deref(),
        Some(
            "writing the status into the custom resource failed: Kubernetes API error (get Comb): \
             500 InternalError: the API server is shutting down"
        )
    );
    assert_eq!(cluster.requests().get(STATUS_WRITE), Some(&1));
}

#[tokio::test]
async fn a_status_conflict_is_retried_on_a_fresh_read() {
    let cluster = Cluster::start_own().await;
    let mut comb = cluster
        .settled("nats", vec![config_map("nats", json!({}))])
        .await;
    outdated(&cluster, &mut comb).await;
    // Someone else changes the CR: the Comb's resourceVersion is stale now.
    cluster
        .ops
        .merge_patch(
            &comb_api::ManagedObject {
                api_version: "comb.internal/v1".into(),
                kind: "Comb".into(),
                namespace: Some(NS.into()),
                name: "nats".into(),
                uid: None,
            },
            &json!({"metadata": {"labels": {"team": "messaging"}}}),
            None,
        )
        .await
        .unwrap();

    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert!(status.condition(STATUS_WRITTEN).is_none());
    assert_eq!(cluster.requests().get(STATUS_WRITE), Some(&2));
    assert_eq!(cluster.requests().get("get combs.comb.internal"), Some(&1));
    let cr = cluster.cr("nats").await;
    assert_eq!(cr.status, Some(status));
    assert_eq!(
        comb.cr().metadata.resource_version,
        cr.metadata.resource_version
    );
    assert_eq!(cr.metadata.labels.unwrap()["team"], "messaging");
}

/// Another writer records `status` into the CR over the Comb's copy (another replica's step):
/// the Comb's next write conflicts.
async fn recorded_by_another_writer(cluster: &Cluster, status: CombStatus) {
    let mut cr = cluster.cr("nats").await;
    cr.status = Some(status);
    cluster
        .ops
        .update_comb_status("comb.internal", cr)
        .await
        .expect("the other writer's status");
}

#[tokio::test]
async fn a_conflicting_status_write_is_built_again_on_the_newer_record() {
    let cluster = Cluster::start_own().await;
    let mut comb = cluster
        .settled("nats", vec![config_map("nats", json!({}))])
        .await;
    let outdated = outdated(&cluster, &mut comb).await;
    // Another writer applied a ConfigMap of the Comb and recorded it, since the Comb's copy.
    cluster
        .write_as(
            "comb",
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "nats-theirs", "namespace": NS,
                                 "labels": {"comb.internal/comb": "nats",
                                            "comb.internal/comb-namespace": NS}}}),
        )
        .await;
    let mut theirs = outdated.clone();
    theirs
        .managed_resources
        .get_or_insert_with(Vec::new)
        .push(resource("v1", "ConfigMap", "nats-theirs"));
    recorded_by_another_writer(&cluster, theirs).await;

    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert!(status.condition(STATUS_WRITTEN).is_none());
    assert_eq!(verdict(&status), expect("Running", "Healthy", "healthy"));
    assert_eq!(cluster.requests().get(STATUS_WRITE), Some(&2));
    // Built again on the newer record: what it recorded is not forgotten.
    assert_eq!(
        managed(&status),
        ["ConfigMap/nats", "ConfigMap/nats-theirs"]
    );
    assert_eq!(cluster.cr("nats").await.status, Some(status));

    // So the next step prunes it, as it prunes anything the Comb no longer renders.
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(managed(&status), ["ConfigMap/nats"]);
    assert!(
        cluster
            .peek("v1", "ConfigMap", "nats-theirs")
            .await
            .is_none()
    );
}

#[tokio::test]
async fn a_status_of_a_later_generation_is_not_written_over() {
    let cluster = Cluster::start_own().await;
    let mut comb = cluster
        .settled("nats", vec![config_map("nats", json!({}))])
        .await;
    outdated(&cluster, &mut comb).await;
    // The spec changes, and another writer (the replica that took the Comb over) records what
    // it found for the new generation; this Comb still holds the older one.
    let edited = cluster
        .edit(
            &comb,
            manifests_spec(vec![config_map("nats", json!({"new": "yes"}))]),
        )
        .await;
    let mut theirs = edited.cr().status.clone().expect("a recorded status");
    theirs.observed_generation = edited.cr().metadata.generation;
    for condition in theirs.conditions.iter_mut().flatten() {
        if condition.type_ == READY {
            condition.message = Some("their verdict on the new spec".into());
        }
    }
    recorded_by_another_writer(&cluster, theirs.clone()).await;

    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert!(status.condition(STATUS_WRITTEN).is_none());
    // The write conflicted, the CR was read again, and its newer truth stands.
    assert_eq!(cluster.requests().get(STATUS_WRITE), Some(&1));
    assert_eq!(cluster.requests().get("get combs.comb.internal"), Some(&1));
    assert_eq!(cluster.cr("nats").await.status, Some(theirs.clone()));
    assert_eq!(status, theirs);
    assert_eq!(comb.cr().status, Some(theirs));
}
