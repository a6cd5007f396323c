//! One bad Comb never stalls its layer: a CR that does not decode (possible when the CRD has no
//! schema) is recorded as `Error`/`BuildFailed` naming the field, the others converge, and the
//! layer is listed once, not in a loop.

use comb_api::DEFAULT_GROUP;
use comb_sandbox::controls::Fault;
use comb_testkit::controller::World;
use comb_testkit::fixtures::web;
use comb_testkit::wait_until;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Replaces the Comb CRD's schema by one that lets anything through, as a hand-written CRD
/// without a schema would.
async fn schemaless_crd(world: &World, context: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(world.client(context).await);
    let name = format!("combs.{DEFAULT_GROUP}");
    let mut crd = crds.get(&name).await.expect("the read answers");
    for version in &mut crd.spec.versions {
        version.schema = Some(
            serde_json::from_value(json!({"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": true
            }}))
            .expect("a valid object"),
        );
    }
    crd.metadata.managed_fields = None;
    crds.replace(&name, &PostParams::default(), &crd)
        .await
        .expect("replaced");
}

#[tokio::test]
async fn combs_that_do_not_decode_get_build_failed_and_the_others_converge() {
    let world = World::start(&["prod"], &[], &[("prod", "apps")]).await;
    schemaless_crd(&world, "prod").await;
    world
        .kit
        .create_raw_comb("prod", "apps", "class-five", json!({"class": 5}))
        .await;
    world
        .kit
        .create_raw_comb(
            "prod",
            "apps",
            "enabled-yes",
            json!({"class": "Manifests", "enabled": "yes"}),
        )
        .await;
    world
        .create_comb("prod", "apps", "web", web("web", "nginx:1"))
        .await;
    let controls = world.controls("prod");
    controls.reset_requests();

    let running = world
        .run(world.config("layers:\n - {name: prod, context: prod, namespaces: [apps]}"))
        .await;
    world
        .wait_phase("prod", "apps", "web", "Running", None)
        .await;
    for (name, field) in [
        ("class-five", "spec.class"),
        ("enabled-yes", "spec.enabled"),
    ] {
        let bad = world
            .wait_phase("prod", "apps", name, "Error", Some("BuildFailed"))
            .await;
        let message = bad
            .status
            .as_ref()
            .and_then(|s| s.ready())
            .and_then(|r| r.message.clone())
            .unwrap_or_default();
        assert!(
            message.contains(&format!("the custom resource does not decode: {field}: ")),
            "{name}: {message}"
        );
    }
    // The layer was listed once: nothing failed, so nothing listed again.
    assert_eq!(controls.request_count("list", "combs.comb.internal"), 1);

    // Fixing the spec makes the Comb build and converge.
    let mut fixed = web("fixed", "nginx:1");
    fixed["enabled"] = Value::Null;
    let api: Api<DynamicObject> = Api::namespaced_with(
        world.client("prod").await,
        "apps",
        &comb_api::api_resource(DEFAULT_GROUP),
    );
    api.patch(
        "enabled-yes",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": fixed})),
    )
    .await
    .unwrap();
    world
        .wait_phase("prod", "apps", "enabled-yes", "Running", None)
        .await;
    running.stop().await;
}

#[tokio::test]
async fn a_comb_whose_status_does_not_decode_reconciles_as_if_it_had_none() {
    let world = World::start(&["prod"], &[], &[("prod", "apps")]).await;
    schemaless_crd(&world, "prod").await;
    world
        .create_comb("prod", "apps", "web", web("web", "nginx:1"))
        .await;
    let api: Api<DynamicObject> = Api::namespaced_with(
        world.client("prod").await,
        "apps",
        &comb_api::api_resource(DEFAULT_GROUP),
    );
    api.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": ["garbage"]}})),
    )
    .await
    .unwrap();
    let running = world
        .run(world.config("layers:\n - {name: prod, context: prod, namespaces: [apps]}"))
        .await;
    world
        .wait_phase("prod", "apps", "web", "Running", None)
        .await;
    running.stop().await;
}

/// A Comb that does not build records Error / BuildFailed through the one status writer: a
/// write the API refuses (both tries of a step) is retried with backoff until it goes
/// through, and once recorded it is not written again while the CR stays.
#[tokio::test]
async fn a_build_failed_status_the_api_refuses_is_written_on_a_retry_and_then_left() {
    let world = World::start(&["prod"], &[], &[("prod", "apps")]).await;
    let controls = world.controls("prod");
    controls.inject(Fault::status(
        "*",
        "/apis/comb.internal/v1/namespaces/apps/combs/odd/status",
        500,
        2,
    ));
    world
        .create_comb("prod", "apps", "odd", json!({"class": "NoSuchClass"}))
        .await;
    let running = world
        .run(
            world.config("resync: 1h\nlayers:\n - {name: prod, context: prod, namespaces: [apps]}"),
        )
        .await;
    world
        .wait_phase("prod", "apps", "odd", "Error", Some("BuildFailed"))
        .await;
    // The step that wrote it is over and nothing is queued: no later step wrote again.
    let handle = running.handle.clone();
    wait_until("odd idle", || {
        let handle = handle.clone();
        async move {
            handle
                .queue()
                .iter()
                .flat_map(|layer| layer.combs.iter())
                .find(|comb| comb.name == "odd")
                .is_some_and(|comb| comb.state == "idle" && comb.pending.is_none())
                .then_some(())
        }
    })
    .await;
    assert_eq!(
        controls.request_count("update", "combs.comb.internal/status"),
        3,
        "two refused, one written"
    );
    running.stop().await;
}
