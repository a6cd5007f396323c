//! A Comb cannot make the controller read what its layer does not allow (issue 19): its own
//! `spec.upstream` names another context or namespace, or copies Secrets and ConfigMaps, only
//! where the layer's `allowUpstreams` says; a copy is made only of a source that opts in
//! (`comb.internal/replicable: "true"`), read as the layer's fixed `sourceServiceAccount` (never
//! an account of the Comb's own namespace, issue 31), so that the
//! source cluster's RBAC decides. On either backend; the source's RBAC on the real one.
//!
//! The layers: `prod` (cluster prod, namespace `billing`, the Comb `ledger` and its Secret
//! `ledger-keys`) and `dev` (cluster dev, namespace `team-a`).

use comb_sandbox::Backend;
use comb_testkit::controller::World;
use comb_testkit::fixtures::ready_message;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const K8S: &str = "upstream Kubernetes::Comb::Upstream::K8s (context prod)";
const SECRET_VALUE: &[u8] = b"ledger-signing-key";

/// prod's ledger: a Service and an address other clusters can reach.
fn ledger() -> Value {
    json!({
        "class": "Manifests",
        "config": {
            "manifests": [
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ledger"},
                 "spec": {"selector": {"app": "ledger"}, "ports": [{"name": "grpc", "port": 7000}]}}
            ],
            "endpoints": [{"name": "grpc", "port": 7000, "external": "192.0.2.70:7000"}]
        }
    })
}

/// A Comb of dev that borrows ledger (when its layer says so, or `upstream` does).
fn borrower(upstream: Option<Value>) -> Value {
    let mut spec = json!({
        "class": "Manifests",
        "config": {"endpoints": [{"name": "grpc", "port": 7000}]}
    });
    if let Some(upstream) = upstream {
        spec["upstream"] = upstream;
    }
    spec
}

/// The attack: ledger's Secret, copied by naming it.
fn stealing() -> Value {
    json!({"class": "K8s", "context": "prod", "namespace": "billing", "name": "ledger",
           "replicate": [{"kind": "Secret", "name": "ledger-keys"}]})
}

fn config(dev_keys: &str) -> String {
    format!(
        "resync: 1h\nlayers:\n - {{name: prod, context: prod, namespaces: [billing]}}\n \
         - {{name: dev, context: dev, namespaces: [team-a]{dev_keys}}}"
    )
}

/// The clusters, prod's Secret (`replicable`: whether it opts in) and prod's ledger.
async fn start(replicable: bool) -> World {
    let world = World::start(
        &["prod", "dev"],
        &[],
        &[("prod", "billing"), ("dev", "team-a")],
    )
    .await;
    let mut secret = json!({
        "metadata": {"name": "ledger-keys"},
        "data": {"key": k8s_openapi::ByteString(SECRET_VALUE.to_vec())}
    });
    if replicable {
        secret["metadata"]["annotations"] = json!({"comb.internal/replicable": "true"});
    }
    secrets(&world, "prod", "billing")
        .await
        .create(
            &PostParams::default(),
            &serde_json::from_value(secret).expect("a Secret"),
        )
        .await
        .expect("prod's Secret is created");
    world
        .create_comb("prod", "billing", "ledger", ledger())
        .await;
    world
}

async fn secrets(world: &World, context: &str, namespace: &str) -> Api<Secret> {
    Api::namespaced(world.client(context).await, namespace)
}

/// dev's copy of ledger-keys, if there is one.
async fn copy(world: &World) -> Option<Secret> {
    secrets(world, "dev", "team-a")
        .await
        .get_opt("ledger-keys")
        .await
        .expect("the read answers")
}

/// Issue 19's attack, reproduced: without the fix the thief went `Running (Borrowed)` and dev's
/// team-a held prod's Secret. Now the layer decides, even for a source that opts in.
#[tokio::test]
async fn a_combs_own_upstream_cannot_copy_a_secret_its_layer_does_not_allow() {
    let world = start(true).await;
    let running = world.run(world.config(&config(""))).await;
    world
        .wait_phase("prod", "billing", "ledger", "Running", None)
        .await;
    world.controls("prod").reset_requests();
    world
        .create_comb("dev", "team-a", "thief", borrower(Some(stealing())))
        .await;
    let refused = world
        .wait_phase("dev", "team-a", "thief", "Error", Some("UpstreamForbidden"))
        .await;
    assert_eq!(
        ready_message(&refused),
        "spec.upstream names context prod, namespace billing and copies Secret ledger-keys from \
         it, which layer dev does not allow: add {layer: prod, namespaces: [billing], replicate: \
         true} to layers[1].allowUpstreams"
    );
    assert!(copy(&world).await.is_none(), "nothing was copied");
    assert_eq!(
        world.controls("prod").request_count("get", "secrets"),
        0,
        "prod's Secret was not even read"
    );
    running.stop().await;

    // Naming a peer elsewhere without copying is refused too, with its own sentence.
    let running = world.run(world.config(&config(""))).await;
    world
        .create_comb(
            "dev",
            "team-a",
            "peeker",
            borrower(Some(
                json!({"class": "K8s", "context": "prod", "namespace": "billing", "name": "ledger"}),
            )),
        )
        .await;
    let refused = world
        .wait_phase(
            "dev",
            "team-a",
            "peeker",
            "Error",
            Some("UpstreamForbidden"),
        )
        .await;
    assert_eq!(
        ready_message(&refused),
        "spec.upstream names context prod, namespace billing, which layer dev does not allow: add \
         {layer: prod, namespaces: [billing]} to layers[1].allowUpstreams"
    );
    running.stop().await;

    // The administrator allows it: the layer's word, and the source opted in.
    let running = world
        .run(world.config(&config(
            ", allowUpstreams: [{layer: prod, namespaces: [billing], replicate: true}]",
        )))
        .await;
    let borrowed = world
        .wait_phase("dev", "team-a", "thief", "Running", Some("Borrowed"))
        .await;
    assert_eq!(
        ready_message(&borrowed),
        format!("borrowed from {K8S} via prod; replicated Secret ledger-keys")
    );
    let copied = copy(&world).await.expect("the copy the layer allows");
    assert_eq!(copied.data.unwrap()["key"].0, SECRET_VALUE);
    world
        .wait_phase("dev", "team-a", "peeker", "Running", Some("Borrowed"))
        .await;
    running.stop().await;
}

/// A source is copied only when it opts in; the refusal names it and the annotation, and the
/// copy follows once it is there.
#[tokio::test]
async fn a_source_that_does_not_opt_in_is_not_copied() {
    let world = start(false).await;
    let running = world
        .run(world.config(&config(
            ", allowUpstreams: [{layer: prod, replicate: true}]",
        )))
        .await;
    world
        .create_comb("dev", "team-a", "ledger", borrower(Some(stealing())))
        .await;
    let refused = world
        .wait_phase(
            "dev",
            "team-a",
            "ledger",
            "Error",
            Some("ReplicationFailed"),
        )
        .await;
    assert_eq!(
        ready_message(&refused),
        format!(
            "replicating from {K8S} failed: Secret ledger-keys in namespace billing of context \
             prod is not replicable: annotate it comb.internal/replicable=true to allow copies"
        )
    );
    assert!(copy(&world).await.is_none());

    // The owner opts in: the next try copies it.
    secrets(&world, "prod", "billing")
        .await
        .patch(
            "ledger-keys",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"comb.internal/replicable": "true"}}}),
            ),
        )
        .await
        .unwrap();
    world
        .wait_phase("dev", "team-a", "ledger", "Running", Some("Borrowed"))
        .await;
    assert!(copy(&world).await.is_some());
    running.stop().await;
}

/// The user of the layer's `sourceServiceAccount: team-a/copier` (and of its `serviceAccount:
/// copier` for Combs in team-a).
const COPIER: &str = "system:serviceaccount:team-a:copier";

/// The layer's own `borrow.replicate` copies as the layer's accounts: the source is read as its
/// `sourceServiceAccount`, so the source cluster's RBAC decides (on the real backend: refused until a Role there
/// lets it read that Secret), and the copy is written as it.
#[tokio::test]
async fn replication_reads_its_source_as_the_layers_service_account() {
    let world = start(true).await;
    // What the service account may do in dev: the bridge and the copy.
    world
        .grant(
            "dev",
            "team-a",
            "copier-bridge",
            "team-a/copier",
            json!([{"apiGroups": ["", "discovery.k8s.io"],
                "resources": ["services", "secrets", "endpointslices"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]),
        )
        .await;
    let running = world
        .run(world.config(&config(
            ", serviceAccount: copier, sourceServiceAccount: team-a/copier, borrow: {from: prod, \
             namespace: billing, replicate: [{kind: Secret, name: ledger-keys}]}",
        )))
        .await;
    world.controls("prod").reset_requests();
    world
        .create_comb("dev", "team-a", "ledger", borrower(None))
        .await;
    if world.backend() == Backend::Kube {
        // prod's RBAC does not let copier read ledger-keys: the server's refusal, in its words.
        let refused = world
            .wait_phase(
                "dev",
                "team-a",
                "ledger",
                "Error",
                Some("ReplicationFailed"),
            )
            .await;
        let message = ready_message(&refused);
        assert!(
            message.starts_with(&format!(
                "replicating from {K8S} failed: reading Secret ledger-keys in namespace billing \
                 of context prod as {COPIER} failed: 403 Forbidden"
            )),
            "{message}"
        );
        assert!(copy(&world).await.is_none());
        world
            .grant(
                "prod",
                "billing",
                "copier-source",
                "team-a/copier",
                json!([{"apiGroups": [""], "resources": ["secrets"],
                    "resourceNames": ["ledger-keys"], "verbs": ["get"]}]),
            )
            .await;
    }
    world
        .wait_phase("dev", "team-a", "ledger", "Running", Some("Borrowed"))
        .await;
    assert_eq!(
        copy(&world).await.expect("the copy").data.unwrap()["key"].0,
        SECRET_VALUE
    );
    let prod = world.controls("prod");
    assert!(prod.request_count("get", "secrets") > 0);
    assert_eq!(
        prod.requests_as(COPIER).get("get secrets").copied(),
        Some(prod.request_count("get", "secrets")),
        "every read of the source was the service account's: {:?}",
        prod.requests()
    );
    assert!(
        world
            .controls("dev")
            .requests_as(COPIER)
            .contains_key("patch secrets"),
        "the copy is written as the service account"
    );
    running.stop().await;
}
