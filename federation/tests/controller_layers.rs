//! Several layers in one controller: a layer whose API server is down is reported and waits
//! while the others go on; a borrower follows its upstream peer's status at once.

use comb_federation::controller::LayerState;
use comb_testkit::controller::World;
use comb_testkit::fixtures::{deployment_image as image, web};
use comb_testkit::wait_until;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams};
use serde_json::json;

#[tokio::test]
async fn a_partitioned_layer_is_down_while_another_keeps_reconciling() {
    let world = World::start(
        &["prod", "dev"],
        &[],
        &[("prod", "platform"), ("dev", "platform")],
    )
    .await;
    let config = world.config(
        "resync: 1h\nlayers:\n - {name: prod, context: prod, namespaces: [platform]}\n - {name: dev, context: dev, namespaces: [platform]}",
    );
    let running = world.run(config).await;
    for context in ["prod", "dev"] {
        world
            .create_comb(context, "platform", "web", web("web", "nginx:1"))
            .await;
    }
    for context in ["prod", "dev"] {
        world
            .wait_phase(context, "platform", "web", "Running", None)
            .await;
    }
    let handle = running.handle.clone();
    assert_eq!(handle.layer("dev").unwrap().state, LayerState::Up);

    world.controls("dev").partition();
    eprintln!(
        "probe: {:?}",
        world.client("dev").await.apiserver_version().await
    );
    eprintln!("partitioned: {}", world.controls("dev").is_partitioned());
    let down = wait_until("dev to be down", || {
        let handle = handle.clone();
        async move { handle.layer("dev").filter(|l| l.state == LayerState::Down) }
    })
    .await;
    assert!(down.error.is_some(), "{down:?}");
    let metrics = handle.metrics_text().unwrap();
    assert!(
        metrics.contains(r#"comb_layer_up{layer="dev"} 0"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"comb_layer_up{layer="prod"} 1"#),
        "{metrics}"
    );
    assert!(
        handle.readiness().is_ready(),
        "a down layer does not make the controller unready"
    );

    // prod goes on: an edit is applied and reaches Running.
    world
        .patch_spec("prod", "platform", "web", web("web", "nginx:2"))
        .await;
    let deployments: Api<Deployment> = Api::namespaced(world.client("prod").await, "platform");
    world
        .wait_object(&deployments, "web", "prod's new image", |d| {
            image(d).as_deref() == Some("nginx:2")
        })
        .await;
    world
        .wait_phase("prod", "platform", "web", "Running", Some("Healthy"))
        .await;
    assert_eq!(handle.layer("dev").unwrap().state, LayerState::Down);

    world.controls("dev").heal();
    wait_until("dev to be up again", || {
        let handle = handle.clone();
        async move { handle.layer("dev").filter(|l| l.state == LayerState::Up) }
    })
    .await;
    let metrics = handle.metrics_text().unwrap();
    assert!(
        metrics.contains(r#"comb_layer_up{layer="dev"} 1"#),
        "{metrics}"
    );
    // dev reconciles again: a Deployment deleted by hand comes back.
    let dev_deployments: Api<Deployment> = Api::namespaced(world.client("dev").await, "platform");
    let uid = dev_deployments.get("web").await.unwrap().metadata.uid;
    dev_deployments
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    world
        .wait_object(&dev_deployments, "web", "dev's Deployment back", |d| {
            d.is_some_and(|d| d.metadata.uid != uid)
        })
        .await;
    running.stop().await;
}

#[tokio::test]
async fn watches_resume_after_410_expired() {
    if !comb_sandbox::emulator_only(
        "controller_layers::watches_resume_after_410_expired",
        "forcing 410 Expired needs the emulator's short watch history and writes past the \
         partitioned server into its store; a real kube-apiserver's watch cache keeps far more",
    ) {
        return;
    }
    // A short watch history: a watch that resumes after much has happened gets 410 Expired.
    let store = comb_sandbox::StoreOptions {
        history_limit: 20,
        ..comb_sandbox::StoreOptions::default()
    };
    let world = World::start_with(&["prod"], &[], &[("prod", "platform")], store).await;
    let running =
        world
            .run(world.config(
                "resync: 1h\nlayers: [{name: prod, context: prod, namespaces: [platform]}]",
            ))
            .await;
    world
        .create_comb("prod", "platform", "web", web("web", "nginx:1"))
        .await;
    world
        .wait_phase("prod", "platform", "web", "Running", None)
        .await;
    // Cut the watches, and while they are away write more than the history keeps, the edit of
    // web among it (in-process, past the partitioned HTTP server).
    let handle = running.handle.clone();
    world.controls("prod").partition();
    wait_until("prod to be down", || {
        let handle = handle.clone();
        async move { handle.layer("prod").filter(|l| l.state == LayerState::Down) }
    })
    .await;
    let store = world
        .clusters()
        .emulator()
        .expect("the emulator")
        .cluster("prod")
        .unwrap()
        .store()
        .clone();
    let config_maps = store.resource_type("", "ConfigMap").unwrap();
    for i in 0..50 {
        store
            .create(
                &config_maps,
                Some("platform"),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("filler-{i}")}}),
            )
            .unwrap();
    }
    let combs = store.resource_type("comb.internal", "Comb").unwrap();
    store
        .modify(
            &combs,
            Some("platform"),
            "web",
            comb_sandbox::Subresource::Main,
            |comb| {
                comb["spec"]["config"]["manifests"][0]["spec"]["template"]["spec"]["containers"]
                    [0]["image"] = json!("nginx:2");
            },
        )
        .unwrap();
    world.controls("prod").heal();
    // The watch cannot resume (410), lists again, and sees the edit.
    let deployments: Api<Deployment> = Api::namespaced(world.client("prod").await, "platform");
    world
        .wait_object(
            &deployments,
            "web",
            "the edit applied after the re-list",
            |d| image(d).as_deref() == Some("nginx:2"),
        )
        .await;
    running.stop().await;
}

/// db with a Service and an external address other clusters can reach.
fn db() -> serde_json::Value {
    json!({
        "class": "Manifests",
        "config": {
            "manifests": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "db"},
                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "db"}},
                          "template": {"metadata": {"labels": {"app": "db"}},
                                       "spec": {"containers": [{"name": "db", "image": "postgres:16"}]}}}},
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
                 "spec": {"selector": {"app": "db"}, "ports": [{"name": "postgres", "port": 5432}]}}
            ],
            "endpoints": [{"name": "postgres", "port": 5432, "external": "192.0.2.10:5432"}]
        }
    })
}

#[tokio::test]
async fn a_borrower_follows_its_upstream_without_a_resync() {
    let world = World::start(
        &["prod", "dev"],
        &[],
        &[("prod", "platform"), ("dev", "platform")],
    )
    .await;
    let config = world.config(
        "resync: 1h\nlayers:\n - {name: prod, context: prod, namespaces: [platform]}\n - {name: dev, context: dev, namespaces: [platform], borrow: {from: prod}}",
    );
    let mut running = world.run(config).await;
    // The borrower first: it waits for an upstream that does not run yet.
    world.create_comb("dev", "platform", "db", db()).await;
    running
        .transition("dev's db to wait for its upstream", |t| {
            t.layer == "dev" && t.new.phase != "Running"
        })
        .await;
    world.create_comb("prod", "platform", "db", db()).await;
    // Transitions are told after the status is written: wait for the one that says so, so that
    // the next transition of dev's db is what follows.
    running
        .transition("dev's db to borrow", |t| {
            t.layer == "dev" && t.new.reason == Some(comb_api::Reason::Borrowed)
        })
        .await;
    let borrowed = world
        .wait_phase("dev", "platform", "db", "Running", Some("Borrowed"))
        .await;
    let status = borrowed.status.unwrap();
    assert_eq!(
        status.upstream.as_ref().and_then(|u| u.via.clone()),
        Some(vec!["prod".to_string()])
    );
    assert_eq!(
        status.endpoint_list()[0].cluster.as_deref(),
        Some("192.0.2.10:5432")
    );

    // prod's db stops running: dev's db follows at once (resync is an hour).
    world
        .patch_spec("prod", "platform", "db", json!({"enabled": false}))
        .await;
    let followed = running
        .transition("dev's db to follow prod's", |t| t.layer == "dev")
        .await;
    assert_eq!(
        followed.change(),
        "Running (Borrowed) -> Pending (UpstreamNotRunning): upstream Kubernetes::Comb::Upstream::K8s (context prod) is Disabled"
    );
    world
        .patch_spec("prod", "platform", "db", json!({"enabled": true}))
        .await;
    world
        .wait_phase("dev", "platform", "db", "Running", Some("Borrowed"))
        .await;
    running.stop().await;
}

#[tokio::test]
async fn a_layer_down_from_the_start_stays_down_until_it_answers() {
    let world = World::start(
        &["prod", "dev"],
        &[],
        &[("prod", "platform"), ("dev", "platform")],
    )
    .await;
    world.controls("dev").partition();
    let config = world.config(
        "resync: 1h\nlayers:\n - {name: prod, context: prod, namespaces: [platform]}\n - {name: dev, context: dev, namespaces: [platform]}",
    );
    let running = world.run(config).await;
    let handle = running.handle.clone();
    wait_until("dev to be down", || {
        let handle = handle.clone();
        async move { handle.layer("dev").filter(|l| l.state == LayerState::Down) }
    })
    .await;
    // A watch's retries prove nothing until the server answers: kube's watcher yields `Init`
    // before each list, which once marked the layer up (and reset its backoff) on every retry.
    let window = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
    while tokio::time::Instant::now() < window {
        let state = handle.layer("dev").map(|l| l.state);
        assert_eq!(
            state,
            Some(LayerState::Down),
            "dev flapped while partitioned"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    world.controls("dev").heal();
    wait_until("dev to be up", || {
        let handle = handle.clone();
        async move { handle.layer("dev").filter(|l| l.state == LayerState::Up) }
    })
    .await;
    running.stop().await;
}
