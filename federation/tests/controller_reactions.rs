//! The controller reacts to what happens to a Comb's CR and resources, without waiting for a
//! resync (every configuration here resyncs once an hour).

use comb_testkit::controller::World;
use comb_testkit::fixtures::{deployment_image as image, web};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

const CONFIG: &str = "resync: 1h\nlayers: [{name: prod, context: prod, namespaces: [platform]}]";

#[tokio::test]
async fn a_deployment_deleted_by_hand_comes_back_at_once() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    let mut running = world.run(world.config(CONFIG)).await;
    world
        .create_comb("prod", "platform", "web", web("web", "nginx:1"))
        .await;
    // Transitions are told after the status is written: wait for Running there, so that the
    // next transition of web is what follows the deletion.
    running
        .transition("web Running", |t| {
            t.name == "web" && t.new.phase == "Running"
        })
        .await;
    let deployments: Api<Deployment> = Api::namespaced(world.client("prod").await, "platform");
    let first_uid = deployments.get("web").await.unwrap().metadata.uid;
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let restored = world
        .wait_object(&deployments, "web", "the Deployment to come back", |d| {
            d.is_some_and(|d| d.metadata.uid != first_uid)
        })
        .await
        .unwrap();
    assert_eq!(image(Some(&restored)).as_deref(), Some("nginx:1"));
    let noticed = running
        .transition("web to notice the missing Deployment", |t| t.name == "web")
        .await;
    assert_eq!(
        noticed.change(),
        "Running (Healthy) -> Pending (Deployed): applied 2 resource(s), not healthy yet (Deployment web is missing)"
    );
    running
        .transition("web to be Running again", |t| {
            t.name == "web" && t.new.phase == "Running"
        })
        .await;
    running.stop().await;
}

#[tokio::test]
async fn editing_the_image_redeploys_and_reaches_running() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    let mut running = world.run(world.config(CONFIG)).await;
    world
        .create_comb("prod", "platform", "web", web("web", "nginx:1"))
        .await;
    running
        .transition("web Running", |t| {
            t.name == "web" && t.new.phase == "Running"
        })
        .await;
    world
        .patch_spec("prod", "platform", "web", web("web", "nginx:2"))
        .await;
    let deployments: Api<Deployment> = Api::namespaced(world.client("prod").await, "platform");
    world
        .wait_object(&deployments, "web", "the new image", |d| {
            image(d).as_deref() == Some("nginx:2")
        })
        .await;
    let redeployed = running
        .transition("web redeployed", |t| {
            t.name == "web" && t.new.reason == Some(comb_api::Reason::Deployed)
        })
        .await;
    assert!(
        redeployed
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("rendered differently now: Deployment web"),
        "{redeployed:?}"
    );
    running
        .transition("web Running after the redeploy", |t| {
            t.name == "web" && t.new.phase == "Running"
        })
        .await;
    let comb = world
        .wait_phase("prod", "platform", "web", "Running", Some("Healthy"))
        .await;
    assert_eq!(
        comb.status.unwrap().observed_generation,
        comb.metadata.generation
    );
    running.stop().await;
}

#[tokio::test]
async fn maintenance_leaves_a_hand_edited_resource_alone() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    let running = world.run(world.config(CONFIG)).await;
    world
        .create_comb("prod", "platform", "web", web("web", "nginx:1"))
        .await;
    world
        .wait_phase("prod", "platform", "web", "Running", None)
        .await;
    world
        .patch_spec(
            "prod",
            "platform",
            "web",
            json!({"maintenance": "NoResourceReconciliation"}),
        )
        .await;
    world
        .wait_phase("prod", "platform", "web", "Maintenance", None)
        .await;
    // By hand: scale to 3 and change the image. Both are events the controller sees.
    let edited_at = jiff::Timestamp::now();
    let deployments: Api<Deployment> = Api::namespaced(world.client("prod").await, "platform");
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "main", "image": "debug:1"}]}}}})),
        )
        .await
        .unwrap();
    // Deleting another resource by hand must not bring it back either.
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(world.client("prod").await, "platform");
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let before = world
        .controls("prod")
        .request_count("update", "deployments");
    // The edits woke web: wait for a step that started after them and is over.
    comb_testkit::wait_until("a step after the hand edit", || {
        let handle = running.handle.clone();
        async move {
            let queue = handle.queue();
            let web = queue[0].combs.iter().find(|c| c.name == "web")?;
            (web.state == "idle"
                && web.last_step_at.is_some_and(|at| at > edited_at)
                && web.last_phase.as_deref() == Some("Maintenance"))
            .then_some(())
        }
    })
    .await;
    world
        .wait_object(&deployments, "web", "the pods of the hand edit", |d| {
            d.and_then(|d| d.status.as_ref())
                .and_then(|s| s.ready_replicas)
                == Some(3)
        })
        .await;
    let deployment = deployments.get("web").await.unwrap();
    assert_eq!(image(Some(&deployment)).as_deref(), Some("debug:1"));
    assert_eq!(deployment.spec.replicas, Some(3));
    assert!(services.get_opt("web").await.unwrap().is_none());
    assert_eq!(
        world
            .controls("prod")
            .request_count("update", "deployments"),
        before
    );
    // Leaving maintenance restores the manifests.
    world
        .patch_spec("prod", "platform", "web", json!({"maintenance": null}))
        .await;
    world
        .wait_object(&deployments, "web", "the manifest's image back", |d| {
            image(d).as_deref() == Some("nginx:1")
        })
        .await;
    world
        .wait_object(&services, "web", "the Service back", |s| s.is_some())
        .await;
    world
        .wait_phase("prod", "platform", "web", "Running", None)
        .await;
    running.stop().await;
}
