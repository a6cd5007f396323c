//! Deleting a Comb: its finalizer holds the CR until what it deployed is gone, except what is
//! marked keep, what is cluster-scoped, and everything under the Orphan deletion policy.

use comb_sandbox::controls::Fault;
use comb_testkit::controller::World;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, PersistentVolumeClaim, Secret, Service,
};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

/// db writes a Namespace, which the layer has to allow.
const CONFIG: &str = "resync: 1h\nlayers: [{name: prod, context: prod, namespaces: [platform], allowClusterScoped: [Namespace]}]";

/// db: a Deployment, a Service, two PVCs (one marked keep) and a Namespace (cluster-scoped).
fn db() -> Value {
    json!({
        "class": "Manifests",
        "orphanResources": [{"kind": "ConfigMap", "version": "v1"}],
        "config": {
            "manifests": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "db"},
                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "db"}},
                          "template": {"metadata": {"labels": {"app": "db"}},
                                       "spec": {"containers": [{"name": "db", "image": "postgres:16"}]}}}},
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
                 "spec": {"selector": {"app": "db"}, "ports": [{"name": "postgres", "port": 5432}]}},
                {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": "db-data", "annotations": {"comb.internal/keep": "true"}},
                 "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
                {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "db-scratch"},
                 "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "db-extra"}}
            ],
            "endpoints": [{"name": "postgres", "port": 5432}]
        }
    })
}

/// Objects the workload "made" at run time, carrying db's labels: a ConfigMap (an orphan kind)
/// it hands to db (`comb.internal/adopt`) and a Secret (not an orphan kind); and a ConfigMap
/// someone who may only label objects labelled as db's (issue 31, attack 5), which labels alone
/// do not make db's.
async fn runtime_objects(world: &World) {
    let labels = json!({"comb.internal/comb": "db", "comb.internal/comb-namespace": "platform"});
    let client = world.client("prod").await;
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), "platform");
    let handed = json!({"name": "db-state", "labels": labels,
                        "annotations": {"comb.internal/adopt": "platform/db"}});
    let labelled = json!({"name": "db-labelled", "labels": labels});
    for metadata in [handed, labelled] {
        let config_map: ConfigMap =
            serde_json::from_value(json!({"metadata": metadata})).expect("a valid object");
        config_maps
            .create(&PostParams::default(), &config_map)
            .await
            .expect("created");
    }
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "db-session", "labels": labels}}))
            .expect("a valid object");
    Api::<Secret>::namespaced(client, "platform")
        .create(&PostParams::default(), &secret)
        .await
        .expect("created");
}

async fn exists<K>(world: &World, name: &str) -> bool
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(world.client("prod").await, "platform")
        .get_opt(name)
        .await
        .expect("the read answers")
        .is_some()
}

#[tokio::test]
async fn deleting_a_comb_removes_its_resources_but_keeps_what_is_marked_keep() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    // The first two deletes of the Deployment fail: cleanup is retried until done.
    world.controls("prod").inject(Fault::status(
        "DELETE",
        "/apis/apps/v1/namespaces/platform/deployments/db",
        500,
        2,
    ));
    let running = world.run(world.config(CONFIG)).await;
    world.create_comb("prod", "platform", "db", db()).await;
    let comb = world
        .wait_phase("prod", "platform", "db", "Running", None)
        .await;
    assert_eq!(
        comb.metadata.finalizers,
        Some(vec!["comb.internal/cleanup".to_string()])
    );
    runtime_objects(&world).await;
    world.delete_comb("prod", "platform", "db").await;
    world.wait_gone("prod", "platform", "db").await;

    assert!(!exists::<Deployment>(&world, "db").await);
    assert!(!exists::<Service>(&world, "db").await);
    assert!(!exists::<PersistentVolumeClaim>(&world, "db-scratch").await);
    assert!(
        !exists::<ConfigMap>(&world, "db-state").await,
        "an orphan kind, handed to db"
    );
    assert!(
        exists::<ConfigMap>(&world, "db-labelled").await,
        "an orphan kind with db's labels only: not db's"
    );
    assert!(
        exists::<PersistentVolumeClaim>(&world, "db-data").await,
        "marked keep"
    );
    assert!(
        exists::<Secret>(&world, "db-session").await,
        "not an orphan kind"
    );
    let namespaces: Api<Namespace> = Api::all(world.client("prod").await);
    assert!(
        namespaces.get_opt("db-extra").await.unwrap().is_some(),
        "cluster-scoped, never deleted"
    );
    // What the cleanup left in place is an Event on the Comb, once, though the cleanup ran
    // three times.
    let events: Vec<Event> = Api::<Event>::namespaced(world.client("prod").await, "platform")
        .list(&ListParams::default())
        .await
        .expect("the Events list")
        .items
        .into_iter()
        .filter(|event| event.involved_object.name.as_deref() == Some("db"))
        .collect();
    let said = |reason: &str, message: &str| {
        events
            .iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason) && e.message.as_deref() == Some(message)
            })
            .count()
    };
    assert_eq!(
        said(
            "PruneSkipped",
            "left Namespace db-extra in place: cluster-scoped, never deleted"
        ),
        1,
        "{events:?}"
    );
    assert_eq!(
        said(
            "PruneSkipped",
            "left ConfigMap db-labelled alone: it carries this Comb's labels, but comb has no \
             record of making it for this Comb, and labels alone do not make it so"
        ),
        1,
        "{events:?}"
    );
    assert_eq!(
        world
            .controls("prod")
            .request_count("delete", "deployments.apps"),
        3,
        "two failed deletes, then one that worked"
    );
    let metrics = running.handle.metrics_text().unwrap();
    assert!(
        metrics.contains(r#"comb_api_errors_total{layer="prod",operation="cleanup"} 2"#),
        "{metrics}"
    );
    running.stop().await;
}

#[tokio::test]
async fn the_orphan_policy_leaves_everything_in_place() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    let running = world.run(world.config(CONFIG)).await;
    world.create_comb("prod", "platform", "db", db()).await;
    world
        .wait_phase("prod", "platform", "db", "Running", None)
        .await;
    world
        .combs("prod", "platform")
        .await
        .patch(
            "db",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"annotations": {"comb.internal/deletion-policy": "Orphan"}}}),
            ),
        )
        .await
        .unwrap();
    world.delete_comb("prod", "platform", "db").await;
    world.wait_gone("prod", "platform", "db").await;
    assert!(exists::<Deployment>(&world, "db").await);
    assert!(exists::<Service>(&world, "db").await);
    assert!(exists::<PersistentVolumeClaim>(&world, "db-scratch").await);
    running.stop().await;
}

/// Reference scenario S154: while every status write fails, the record a step made is kept in
/// memory and the next step prunes against it, even after a spec edit rebuilt the Comb. A
/// Service added and then dropped again, both while the status could not be written, is
/// deleted, not left behind with the Comb's labels and out of any record.
#[tokio::test]
async fn the_in_memory_record_survives_a_spec_edit_while_status_writes_fail() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    let running = world.run(world.config(CONFIG)).await;
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "main", "image": "nginx:1"}]}}}});
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]}});
    let spec = |manifests: Vec<Value>| {
        json!({"class": "Manifests", "config": {"manifests": manifests,
               "endpoints": [{"name": "http", "port": 80}]}})
    };
    world
        .create_comb("prod", "platform", "web", spec(vec![deployment.clone()]))
        .await;
    world
        .wait_phase("prod", "platform", "web", "Running", None)
        .await;

    // From now on no status of web is written.
    world.controls("prod").inject(Fault::status(
        "*",
        "/apis/comb.internal/v1/namespaces/platform/combs/web/status",
        500,
        1_000,
    ));
    let services: Api<Service> = Api::namespaced(world.client("prod").await, "platform");
    world
        .patch_spec(
            "prod",
            "platform",
            "web",
            json!({"config": {"manifests": [deployment.clone(), service]}}),
        )
        .await;
    world
        .wait_object(&services, "web", "the added Service deployed", |s| {
            s.is_some()
        })
        .await;
    world
        .patch_spec(
            "prod",
            "platform",
            "web",
            json!({"config": {"manifests": [deployment]}}),
        )
        .await;
    world
        .wait_object(&services, "web", "the dropped Service pruned", |s| {
            s.is_none()
        })
        .await;
    world.controls("prod").clear_faults();
    running.stop().await;
}
