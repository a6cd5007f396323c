//! The operations on a Comb against a sandbox cluster (reference §9): stop and restart and how
//! reconcile answers them, logs, describe, endpoint.

use comb_federation::engine::operations::{describe, endpoint, logs, restart, stop};
use comb_federation::engine::reconcile::DependencyVerdict;
use comb_testkit::engine::*;
use comb_testkit::fixtures::*;
use serde_json::json;

const RESTARTED_AT: &str = "comb.internal/restartedAt";

fn restarted_at(deployment: &serde_json::Value) -> Option<String> {
    deployment["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT]
        .as_str()
        .map(str::to_string)
}

#[tokio::test]
async fn stop_then_reconcile_redeploys() {
    let cluster = Cluster::start().await;
    let cron_job = json!({
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nats-backup"},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "OnFailure", "containers": [{"name": "backup", "image": "backup:1"}]}}}}}
    });
    let mut comb = cluster
        .settled(
            "nats",
            vec![
                deployment("nats", "nats:2"),
                service("nats", 4222),
                cron_job,
            ],
        )
        .await;

    let stopped = stop(&cluster.ops, comb.context(), comb.recorded_managed())
        .await
        .unwrap();
    assert_eq!(stopped, ["Deployment/nats", "CronJob/nats-backup"]);
    let live = cluster.get("apps/v1", "Deployment", "nats").await.unwrap();
    assert_eq!(live["spec"]["replicas"], 0);
    let cron = cluster
        .get("batch/v1", "CronJob", "nats-backup")
        .await
        .unwrap();
    assert_eq!(cron["spec"]["suspend"], true);

    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Pending",
            "Deployed",
            "applied 3 resource(s), not healthy yet (stopped)"
        )
    );
    let live = cluster.get("apps/v1", "Deployment", "nats").await.unwrap();
    assert_eq!(live["spec"]["replicas"], 1);
    let cron = cluster
        .get("batch/v1", "CronJob", "nats-backup")
        .await
        .unwrap();
    assert_ne!(cron["spec"]["suspend"], true);
    assert_eq!(
        verdict(&cluster.settle(&mut comb).await),
        expect("Running", "Healthy", "healthy")
    );
}

#[tokio::test]
async fn a_restart_is_kept_across_a_deploy_and_triggers_none() {
    let cluster = Cluster::start().await;
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nats-init"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "init", "image": "init:1"}]}}}
    });
    let mut comb = cluster
        .settled("nats", vec![deployment("nats", "nats:2"), job])
        .await;

    let restarted = restart(&cluster.ops, comb.context(), comb.recorded_managed())
        .await
        .unwrap();
    assert_eq!(restarted, ["Deployment/nats", "Job/nats-init"]);
    let live = cluster.get("apps/v1", "Deployment", "nats").await.unwrap();
    let stamp = restarted_at(&live).expect("restart annotation");
    assert!(cluster.get("batch/v1", "Job", "nats-init").await.is_none());

    // The restart alone changes no digest: the next steps only bring the Job back, with the
    // annotation kept on the Deployment.
    let status = cluster.settle(&mut comb).await;
    assert_eq!(verdict(&status), expect("Running", "Healthy", "healthy"));
    let live = cluster.get("apps/v1", "Deployment", "nats").await.unwrap();
    assert_eq!(restarted_at(&live).as_deref(), Some(stamp.as_str()));

    // A real change deploys the new template, still carrying the restart.
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nats-init"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "init", "image": "init:1"}]}}}
    });
    let mut comb = cluster
        .edit(
            &comb,
            manifests_spec(vec![deployment("nats", "nats:2.10"), job]),
        )
        .await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Pending",
            "Deployed",
            "applied 2 resource(s), rendered differently now: Deployment nats"
        )
    );
    let live = cluster.get("apps/v1", "Deployment", "nats").await.unwrap();
    assert_eq!(*first_image(&live), "nats:2.10");
    assert_eq!(restarted_at(&live).as_deref(), Some(stamp.as_str()));
}

#[tokio::test]
async fn logs_of_the_pods() {
    if !comb_sandbox::emulator_only(
        "engine_operations::logs_of_the_pods",
        "kwok runs no containers, so a real kubelet-less cluster serves no Pod logs",
    ) {
        return;
    }
    let cluster = Cluster::start_own().await;
    let comb = cluster
        .settled("nats", vec![deployment("nats", "nats:2")])
        .await;
    cluster
        .wait_until("the container logged", async |cluster| {
            cluster
                .peek_list("v1", "Pod", "comb.internal/comb=nats")
                .await
                .len()
                == 1
        })
        .await;
    let text = logs(&cluster.ops, comb.context(), 5, None).await.unwrap();
    // One pod with one container: just its text, no header.
    assert!(!text.is_empty());
    assert!(!text.contains("==>"), "{text}");
    assert!(text.ends_with('\n'));
    assert!(text.lines().count() <= 5);
}

#[tokio::test]
async fn describe_and_endpoint() {
    let cluster = Cluster::start_own().await;
    let spec = json!({"class": "Manifests", "dependsOn": ["db"], "config": {
        "manifests": [service("nats", 4222)],
        "endpoints": [{"name": "client", "port": 4222}, {"name": "monitor", "port": 8222, "service": "nats-monitor"}]
    }});
    let mut comb = cluster.comb("nats", spec).await;
    let healthy_db = dependencies(&[("db", DependencyVerdict::Healthy)]);
    cluster.reconcile_with(&mut comb, &healthy_db).await;

    let description = describe(&cluster.ops, &comb, None).await.unwrap();
    assert_eq!(description.class, "Manifests");
    assert_eq!(description.depends_on, ["db"]);
    assert_eq!(description.recorded.as_ref(), comb.recorded_status());
    assert!(
        description
            .status
            .as_ref()
            .is_some_and(|status| status.healthy)
    );
    let clusters: Vec<_> = description
        .endpoints
        .iter()
        .map(|e| e.cluster.clone().unwrap())
        .collect();
    assert_eq!(
        clusters,
        ["nats.platform.svc:4222", "nats-monitor.platform.svc:8222"]
    );

    let monitor = endpoint(&comb, "monitor", None).await.unwrap();
    assert_eq!(monitor.cluster(), Some("nats-monitor.platform.svc:8222"));
    let missing = endpoint(&comb, "web", None).await.unwrap_err();
    assert_eq!(
        missing.to_string(),
        "Manifests->endpoint: nats has no endpoint web (it has: client, monitor)"
    );
    assert_eq!(
        endpoint(&comb, "", None).await.unwrap_err().to_string(),
        "Manifests->endpoint needs a name"
    );
}

#[tokio::test]
async fn logs_of_a_crash_looping_container_are_its_previous_instance() {
    if !comb_sandbox::emulator_only(
        "engine_operations::logs_of_a_crash_looping_container_are_its_previous_instance",
        "kwok runs no containers, so a real kubelet-less cluster serves no Pod logs",
    ) {
        return;
    }
    let cluster = Cluster::start_own().await;
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![deployment("nats", "example/crashloop:1")]),
        )
        .await;
    cluster.reconcile(&mut comb).await;
    cluster
        .wait_until("the container crash-loops", async |cluster| {
            let pods = cluster
                .peek_list("v1", "Pod", "comb.internal/comb=nats")
                .await;
            pods.iter().any(|pod| {
                pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                    == "CrashLoopBackOff"
            })
        })
        .await;

    // Nothing to apply that would change it: the step records the Error the cluster shows.
    let status = cluster.reconcile(&mut comb).await;
    let (phase, reason, message) = verdict(&status);
    assert_eq!(
        (phase.as_str(), reason.as_str()),
        ("Error", "CrashLoopBackOff")
    );
    assert!(message.contains("CrashLoopBackOff"), "{message}");

    let text = logs(&cluster.ops, comb.context(), 10, None).await.unwrap();
    let header = text.lines().next().unwrap();
    assert!(
        header.starts_with("==> nats-") && header.ends_with(" (previous) <=="),
        "{text}"
    );
}
