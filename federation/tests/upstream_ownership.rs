//! A borrow stays inside its source layer, and a copy is the Comb's only (issue 31, DESIGN.md
//! §11), as the controller runs it on two clusters, on either backend (`COMB_TEST_BACKEND`).
//!
//! The layers of attack 4: `prod` (cluster prod, namespace `platform`) and `billing` (cluster
//! prod, namespace `billing`, another tenant's) each run a Comb `db` with a replicable Secret
//! `db-password`; `dev` (cluster dev, every namespace) borrows `db` from prod and copies that
//! Secret, writing as `comb-writer` of each Comb's namespace and reading sources as its fixed
//! `comb-system/dev-reader`. Before the fix, a dev user who made a namespace `billing` in dev
//! and a Comb `db` there borrowed billing's Comb and copied billing's Secret, read in prod as
//! `system:serviceaccount:billing:comb-writer`, billing's own account.

use std::time::Duration;

use comb_sandbox::controls::Fault;
use comb_testkit::controller::World;
use comb_testkit::fixtures::ready_message;
use comb_testkit::wait_until;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const K8S: &str = "upstream Kubernetes::Comb::Upstream::K8s (context prod)";
/// The account dev reads sources as, in prod's cluster.
const READER: &str = "system:serviceaccount:comb-system:dev-reader";
/// billing's own account of the name dev writes as: never dev's identity in prod.
const BILLINGS_OWN: &str = "system:serviceaccount:billing:comb-writer";

fn config(resync: &str) -> String {
    config_copying(resync, "{kind: Secret, name: db-password}")
}

/// The layers, dev's borrow copying `replicate` (YAML flow entries).
fn config_copying(resync: &str, replicate: &str) -> String {
    format!(
        "resync: {resync}\nlayers:\n - {{name: prod, context: prod, namespaces: [platform]}}\n \
         - {{name: billing, context: prod, namespaces: [billing]}}\n \
         - {{name: dev, context: dev, serviceAccount: comb-writer, sourceServiceAccount: \
         comb-system/dev-reader, borrow: {{from: prod, combs: [db], replicate: [{replicate}]}}}}"
    )
}

/// prod's and billing's `db`: a Service and an address other clusters can reach.
fn db(address: &str) -> Value {
    json!({
        "class": "Manifests",
        "config": {
            "manifests": [
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
                 "spec": {"selector": {"app": "db"}, "ports": [{"name": "pg", "port": 5432}]}}
            ],
            "endpoints": [{"name": "pg", "port": 5432, "external": address}]
        }
    })
}

/// A dev Comb `db`: borrowed by its layer.
fn borrower() -> Value {
    json!({"class": "Manifests", "config": {"endpoints": [{"name": "pg", "port": 5432}]}})
}

async fn secrets(world: &World, context: &str, namespace: &str) -> Api<Secret> {
    Api::namespaced(world.client(context).await, namespace)
}

/// The clusters; in prod, platform's and billing's Combs `db` and their replicable Secrets;
/// what dev's accounts may do (on the real backend).
async fn start() -> World {
    let world = World::start(
        &["prod", "dev"],
        &[],
        &[
            ("prod", "platform"),
            ("prod", "billing"),
            ("dev", "platform"),
            ("dev", "billing"),
        ],
    )
    .await;
    for (namespace, password) in [("platform", "platform-pw"), ("billing", "billing-pw")] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "db-password",
                         "annotations": {"comb.internal/replicable": "true"}},
            "stringData": {"password": password}
        }))
        .expect("a Secret");
        secrets(&world, "prod", namespace)
            .await
            .create(&PostParams::default(), &secret)
            .await
            .expect("prod's Secret");
    }
    world
        .create_comb("prod", "platform", "db", db("192.0.2.10:5432"))
        .await;
    world
        .create_comb("prod", "billing", "db", db("192.0.2.20:5432"))
        .await;
    world
        .grant(
            "prod",
            "platform",
            "dev-reader",
            "comb-system/dev-reader",
            json!([{"apiGroups": [""], "resources": ["secrets"],
                "resourceNames": ["db-password"], "verbs": ["get"]}]),
        )
        .await;
    world
        .grant(
            "dev",
            "platform",
            "comb-writer",
            "platform/comb-writer",
            json!([{"apiGroups": ["", "discovery.k8s.io"],
                "resources": ["services", "secrets", "endpointslices"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]),
        )
        .await;
    world
}

/// Attack 4: dev's Comb in a namespace `billing` it made is refused before anything is read,
/// with the sentence `comb check` and the webhook say too; dev's Comb in `platform` borrows and
/// copies, its source read as dev's fixed account, never as billing's own.
#[tokio::test]
async fn a_borrow_stays_inside_its_source_layer_and_reads_as_the_layers_account() {
    let world = start().await;
    let running = world.run(world.config(&config("1h"))).await;
    world
        .wait_phase("prod", "billing", "db", "Running", None)
        .await;
    world.controls("prod").reset_requests();
    world.create_comb("dev", "billing", "db", borrower()).await;
    let refused = world
        .wait_phase("dev", "billing", "db", "Error", Some("UpstreamForbidden"))
        .await;
    assert_eq!(
        ready_message(&refused),
        "the borrow of layer dev names Comb billing/db in layer prod, which manages namespaces \
         platform only: a borrow stays inside the namespaces of the layer it borrows from (set \
         layers[2].borrow.namespace to one of them, or narrow layers[2].namespaces)"
    );
    assert!(
        secrets(&world, "dev", "billing")
            .await
            .get_opt("db-password")
            .await
            .unwrap()
            .is_none(),
        "billing's Secret was not copied"
    );

    world.create_comb("dev", "platform", "db", borrower()).await;
    let borrowed = world
        .wait_phase("dev", "platform", "db", "Running", Some("Borrowed"))
        .await;
    assert_eq!(
        ready_message(&borrowed),
        format!("borrowed from {K8S} via prod; replicated Secret db-password")
    );
    let copy = secrets(&world, "dev", "platform")
        .await
        .get("db-password")
        .await
        .expect("the copy");
    assert_eq!(copy.data.unwrap()["password"].0, b"platform-pw");
    let prod = world.controls("prod");
    assert!(
        prod.requests_as(READER).contains_key("get secrets"),
        "the source is read as dev's fixed account: {:?}",
        prod.requests()
    );
    assert_eq!(
        prod.requests_as(READER).get("get secrets").copied(),
        Some(prod.request_count("get", "secrets")),
        "and only as it: {:?}",
        prod.requests()
    );
    assert!(
        prod.requests_as(BILLINGS_OWN).is_empty(),
        "billing's own account was never used in prod"
    );
    running.stop().await;
}

/// A copy does not outlive its source's consent: once the source drops
/// `comb.internal/replicable`, the Comb's copy is removed and the Comb is told.
#[tokio::test]
async fn a_copy_goes_when_its_source_stops_being_replicable() {
    let world = start().await;
    // A short resync: nothing in dev watches prod's Secret, so the next step comes with it.
    let running = world.run(world.config(&config("2s"))).await;
    world.create_comb("dev", "platform", "db", borrower()).await;
    world
        .wait_phase("dev", "platform", "db", "Running", Some("Borrowed"))
        .await;
    let copies = secrets(&world, "dev", "platform").await;
    assert!(copies.get_opt("db-password").await.unwrap().is_some());

    secrets(&world, "prod", "platform")
        .await
        .patch(
            "db-password",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"comb.internal/replicable": null}}})),
        )
        .await
        .expect("the source no longer opts in");
    let refused = world
        .wait_phase("dev", "platform", "db", "Error", Some("ReplicationFailed"))
        .await;
    assert_eq!(
        ready_message(&refused),
        format!(
            "replicating from {K8S} failed: Secret db-password in namespace platform of context \
             prod is not replicable: annotate it comb.internal/replicable=true to allow copies; \
             its copy, Secret db-password in namespace platform of context dev, was removed"
        )
    );
    assert!(copies.get_opt("db-password").await.unwrap().is_none());
    running.stop().await;
}

/// The copy is made by an apply that cannot take over a Secret someone makes between comb's
/// read and its write: the write is held back, a person makes `db-password` meanwhile, and the
/// Comb ends `ResourceNotOwned` with the person's Secret as it was made.
#[tokio::test]
async fn a_copy_never_takes_over_a_secret_made_meanwhile() {
    let world = start().await;
    let dev = world.controls("dev");
    dev.inject(Fault::delay(
        "PATCH",
        "/api/v1/namespaces/platform/secrets/db-password",
        Duration::from_secs(5),
        1,
    ));
    dev.reset_requests();
    let running = world.run(world.config(&config("1h"))).await;
    world.create_comb("dev", "platform", "db", borrower()).await;
    wait_until("the copy's write to be on its way", async || {
        dev.request_count("patch", "secrets") > 0
    })
    .await;
    let mine: Secret = serde_json::from_value(json!({
        "metadata": {"name": "db-password"}, "stringData": {"password": "a person's own"}
    }))
    .expect("a Secret");
    let params = PostParams {
        field_manager: Some("kubectl-create".into()),
        ..PostParams::default()
    };
    let copies = secrets(&world, "dev", "platform").await;
    let made = copies.create(&params, &mine).await.expect("made meanwhile");
    let refused = world
        .wait_phase("dev", "platform", "db", "Error", Some("ResourceNotOwned"))
        .await;
    assert_eq!(
        ready_message(&refused),
        "Secret db-password in namespace platform of context dev exists and is not this Comb's: \
         it carries no Comb's labels (written by kubectl-create); comb leaves it untouched (to \
         hand it to this Comb, annotate it comb.internal/adopt=platform/db)"
    );
    let now = copies.get("db-password").await.expect("still there");
    assert_eq!(now.metadata.uid, made.metadata.uid);
    assert_eq!(
        now.metadata.resource_version, made.metadata.resource_version,
        "never written"
    );
    running.stop().await;
}

/// A copy made before a later copy failed is the Comb's: the step records it (with its uid)
/// though it ends `ReplicationFailed`, and once the other source opts in, the next step finds
/// the first copy its own, not someone else's.
#[tokio::test]
async fn a_copy_made_before_a_failure_stays_the_combs() {
    let world = start().await;
    let settings: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "db-settings"}, "data": {"pool": "10"}
    }))
    .expect("a ConfigMap");
    let prod_settings: Api<ConfigMap> = Api::namespaced(world.client("prod").await, "platform");
    prod_settings
        .create(&PostParams::default(), &settings)
        .await
        .expect("prod's ConfigMap, not replicable yet");
    world
        .grant(
            "prod",
            "platform",
            "dev-reader-settings",
            "comb-system/dev-reader",
            json!([{"apiGroups": [""], "resources": ["configmaps"],
                    "resourceNames": ["db-settings"], "verbs": ["get"]}]),
        )
        .await;
    world
        .grant(
            "dev",
            "platform",
            "comb-writer-settings",
            "platform/comb-writer",
            json!([{"apiGroups": [""], "resources": ["configmaps"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]),
        )
        .await;
    let running = world
        .run(world.config(&config_copying(
            "2s",
            "{kind: Secret, name: db-password}, {kind: ConfigMap, name: db-settings}",
        )))
        .await;
    world.create_comb("dev", "platform", "db", borrower()).await;
    let refused = world
        .wait_phase("dev", "platform", "db", "Error", Some("ReplicationFailed"))
        .await;
    let copy = secrets(&world, "dev", "platform")
        .await
        .get("db-password")
        .await
        .expect("the first copy");
    let recorded = refused.status.unwrap().managed().to_vec();
    assert!(
        recorded
            .iter()
            .any(|entry| entry.name == "db-password" && entry.uid == copy.metadata.uid),
        "the first copy is recorded as the Comb's: {recorded:?}"
    );

    prod_settings
        .patch(
            "db-settings",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"comb.internal/replicable": "true"}}}),
            ),
        )
        .await
        .expect("opted in");
    let borrowed = world
        .wait_phase("dev", "platform", "db", "Running", Some("Borrowed"))
        .await;
    assert_eq!(
        ready_message(&borrowed),
        format!(
            "borrowed from {K8S} via prod; replicated Secret db-password, ConfigMap db-settings"
        )
    );
    running.stop().await;
}

/// A name from a CR reaches no request path unchecked: `db-password?x=1` was read as
/// `db-password`. Refused before anything is read.
#[tokio::test]
async fn a_copy_named_as_no_kubernetes_object_is_refused() {
    let world = start().await;
    let running = world
        .run(world.config(
            "resync: 1h\nlayers:\n - {name: prod, context: prod, namespaces: [platform]}\n \
             - {name: dev, context: dev, namespaces: [platform], allowUpstreams: [{layer: prod, \
             replicate: true}]}",
        ))
        .await;
    world.controls("prod").reset_requests();
    let mut spec = borrower();
    spec["upstream"] = json!({"class": "K8s", "layer": "prod",
                              "replicate": [{"kind": "Secret", "name": "db-password?x=1"}]});
    world.create_comb("dev", "platform", "db", spec).await;
    let refused = world
        .wait_phase("dev", "platform", "db", "Error", Some("UpstreamFailed"))
        .await;
    assert_eq!(
        ready_message(&refused),
        "resolving the upstream failed: spec.upstream: Kubernetes::Comb::Upstream::K8s: a \
         replicate entry of \
         kind Secret: 'db-password?x=1' is not a Kubernetes object name (a DNS-1123 subdomain: \
         lowercase letters, digits, - and ., alphanumeric at both ends, at most 253 characters)"
    );
    assert_eq!(
        world.controls("prod").request_count("get", "secrets"),
        0,
        "the source was not read"
    );
    running.stop().await;
}
