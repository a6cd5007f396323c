//! Deletion as kube-apiserver and kube-controller-manager perform it, seen through a real
//! client: finalizers and deletionTimestamp, Background/Foreground/Orphan propagation over
//! ownerReferences, namespace deletion and CRD deletion taking their objects along.

mod api_support;

use api_support::{cluster, until};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::json;

async fn owner_and_dependent(api: &Api<ConfigMap>, block: bool) {
    let owner: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "owner"}})).expect("owner");
    let owner = api
        .create(&PostParams::default(), &owner)
        .await
        .expect("owner created");
    let dependent: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "dependent", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid, "blockOwnerDeletion": block
        }]}}),
    )
    .expect("dependent");
    api.create(&PostParams::default(), &dependent)
        .await
        .expect("dependent created");
}

async fn exists(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get_opt(name).await.expect("get").is_some()
}

#[tokio::test]
async fn background_deletes_dependents_after_the_owner() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    owner_and_dependent(&api, false).await;
    api.delete("owner", &DeleteParams::background())
        .await
        .expect("deleted");
    assert!(!exists(&api, "owner").await, "the owner goes at once");
    until(&sandbox, "the dependent to be collected", || async {
        !exists(&api, "dependent").await
    })
    .await;
}

#[tokio::test]
async fn foreground_keeps_the_owner_until_blocking_dependents_are_gone() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    owner_and_dependent(&api, true).await;
    let pending = api
        .delete("owner", &DeleteParams::foreground())
        .await
        .expect("deleting");
    let owner = pending
        .left()
        .expect("the owner is still there, being deleted");
    assert!(owner.metadata.deletion_timestamp.is_some());
    assert_eq!(
        owner.metadata.finalizers,
        Some(vec!["foregroundDeletion".to_string()])
    );
    until(&sandbox, "the owner to go", || async {
        !exists(&api, "owner").await
    })
    .await;
    assert!(!exists(&api, "dependent").await, "the dependent went first");
}

#[tokio::test]
async fn orphan_keeps_dependents_and_drops_their_reference() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    owner_and_dependent(&api, true).await;
    api.delete("owner", &DeleteParams::orphan())
        .await
        .expect("deleting");
    until(&sandbox, "the owner to go", || async {
        !exists(&api, "owner").await
    })
    .await;
    let dependent = api.get("dependent").await.expect("the dependent stays");
    assert!(
        dependent
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test]
async fn finalizers_hold_an_object_until_removed() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    let held: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
    )
    .expect("cm");
    api.create(&PostParams::default(), &held)
        .await
        .expect("created");
    let pending = api
        .delete("held", &DeleteParams::default())
        .await
        .expect("deleting");
    assert!(
        pending
            .left()
            .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
    );
    let terminating = api.get("held").await.expect("still there");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let (code, _, message) = api_support::reason(
        api.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}),
            ),
        )
        .await
        .expect_err("no new finalizers while deleting"),
    );
    assert_eq!(code, 422, "{message}");
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("finalizer removed");
    assert!(
        api.get_opt("held").await.expect("get").is_none(),
        "gone with its last finalizer"
    );
}

#[tokio::test]
async fn deleting_a_namespace_deletes_what_is_in_it() {
    let (sandbox, client) = cluster().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}})).expect("ns"),
        )
        .await
        .expect("namespace");
    let api: Api<ConfigMap> = Api::namespaced(client, "team");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "c"}})).expect("cm"),
    )
    .await
    .expect("content");
    let terminating = namespaces
        .delete("team", &DeleteParams::default())
        .await
        .expect("deleting");
    let phase = terminating
        .left()
        .and_then(|n| n.status)
        .and_then(|s| s.phase);
    assert_eq!(phase.as_deref(), Some("Terminating"));
    until(&sandbox, "the namespace to go", || async {
        namespaces.get_opt("team").await.expect("get").is_none()
    })
    .await;
    assert!(api.get_opt("c").await.expect("get").is_none());
}

#[tokio::test]
async fn delete_options_in_the_query_or_the_body_and_preconditions() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "p"}})).expect("cm"),
        )
        .await
        .expect("created");
    let wrong = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("00000000-0000-0000-0000-000000000000".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let (code, why, _) =
        api_support::reason(api.delete("p", &wrong).await.expect_err("precondition"));
    assert_eq!((code, why.as_str()), (409, "Conflict"));
    let right = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(kube::api::Preconditions {
            uid: created.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let status = api
        .delete("p", &right)
        .await
        .expect("deleted")
        .right()
        .expect("a Status for a deleted configmap");
    assert_eq!(status.details.map(|d| d.name), Some("p".to_string()));
}
