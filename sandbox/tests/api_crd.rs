//! Custom resources through a real client: a CRD becomes served and Established, kube's
//! Discovery finds it, a `kube::runtime::Controller` reconciles its objects, schemas prune
//! and validate, extra versions are served, deleting the CRD takes its objects; and HTTPS
//! with the sandbox's generated CA.

mod api_support;

use std::sync::Arc;
use std::time::Duration;

use api_support::{DEADLINE, cluster, cluster_with, plain, reason, until};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Discovery, Scope};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use serde_json::json;

/// The group of a test's Widget CRD: its own, as CRDs are cluster-wide and the tests of the
/// real backend share one cluster.
fn widget_group(ns: &str) -> String {
    format!("{ns}.example.com")
}

fn crd_name(group: &str) -> String {
    format!("widgets.{group}")
}

fn widget_crd(group: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name(group)},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                     "spec": {"type": "object", "properties": {
                         "size": {"type": "integer", "minimum": 0},
                         "color": {"type": "string", "default": "blue"}
                     }},
                     "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
                 }}}},
                {"name": "v1beta1", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
            ]
        }
    }))
    .expect("crd")
}

fn widget_resource(group: &str, version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, "Widget"), "widgets")
}

fn widget(group: &str, name: &str, spec: serde_json::Value) -> DynamicObject {
    let mut object = DynamicObject::new(name, &widget_resource(group, "v1"));
    object.data = json!({"spec": spec});
    object
}

async fn install_crd(client: &kube::Client, group: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &widget_crd(group))
        .await
        .expect("crd created");
    tokio::time::timeout(
        DEADLINE,
        await_condition(crds, &crd_name(group), conditions::is_crd_established()),
    )
    .await
    .expect("established before the deadline")
    .expect("watch");
}

#[tokio::test]
async fn a_crd_is_served_discovered_and_takes_its_objects_when_deleted() {
    let (sandbox, client) = cluster().await;
    let group = widget_group(&sandbox.ns);
    install_crd(&client, &group).await;

    // A real server publishes a new CRD's versions in discovery a moment after Established.
    until(
        &sandbox,
        "discovery to serve both versions of the CRD",
        || async {
            Discovery::new(client.clone())
                .run()
                .await
                .is_ok_and(|discovery| {
                    discovery
                        .get(&group)
                        .is_some_and(|group| group.versions().count() == 2)
                })
        },
    )
    .await;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let discovered = discovery.get(&group).expect("the group is discovered");
    let (resource, capabilities) = discovered
        .recommended_kind("Widget")
        .expect("the kind is discovered");
    assert_eq!(resource.plural, "widgets");
    assert_eq!(resource.version, "v1", "the storage version is preferred");
    assert_eq!(capabilities.scope, Scope::Namespaced);
    assert!(
        capabilities
            .subresources
            .iter()
            .any(|(sub, _)| sub.plural == "status")
    );

    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &sandbox.ns, &resource);
    let created = widgets
        .create(
            &PostParams::default(),
            &widget(&group, "w1", json!({"size": 3})),
        )
        .await
        .expect("created");
    assert_eq!(
        created.data["spec"]["color"], "blue",
        "schema defaults apply"
    );
    assert_eq!(created.metadata.generation, Some(1));
    let status = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        )
        .await
        .expect("status");
    assert_eq!(status.data["status"]["phase"], "Ready");
    assert_eq!(
        status.metadata.generation,
        Some(1),
        "status does not count as a spec change"
    );

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete(&crd_name(&group), &DeleteParams::default())
        .await
        .expect("crd deleting");
    until(&sandbox, "the CRD to go", || async {
        crds.get_opt(&crd_name(&group))
            .await
            .expect("get")
            .is_none()
    })
    .await;
    let (code, _, message) = reason(
        widgets
            .list(&ListParams::default())
            .await
            .expect_err("no longer served"),
    );
    // The group is gone with it: the plain 404 of a path nobody serves.
    assert_eq!((code, message.as_str()), (404, "404 page not found"));
    install_crd(&client, &group).await;
    // kube-apiserver answers 429 "storage is (re)initializing" for a moment after a CRD is
    // created again: served again is when a list answers.
    until(&sandbox, "the CRD to be served again", || async {
        widgets.list(&ListParams::default()).await.is_ok()
    })
    .await;
    assert!(
        widgets
            .list(&ListParams::default())
            .await
            .expect("served again")
            .items
            .is_empty(),
        "its objects went with it"
    );
}

#[tokio::test]
async fn schemas_prune_and_validate_and_other_versions_are_served() {
    let (sandbox, client) = cluster().await;
    let group = widget_group(&sandbox.ns);
    install_crd(&client, &group).await;
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &sandbox.ns, &widget_resource(&group, "v1"));
    let pruned = widgets
        .create(
            &PostParams::default(),
            &widget(&group, "w", json!({"size": 1, "unknown": true})),
        )
        .await
        .expect("created");
    assert!(
        pruned.data["spec"].get("unknown").is_none(),
        "unknown fields are pruned"
    );

    let (code, why, message) = reason(
        widgets
            .patch(
                "w",
                &PatchParams::default().validation_strict(),
                &Patch::Merge(json!({"spec": {"bogus": 1}})),
            )
            .await
            .expect_err("strict"),
    );
    assert_eq!((code, why.as_str()), (422, "Invalid"));
    assert!(
        message.contains(r#"unknown field "spec.bogus""#),
        "{message}"
    );
    let (code, why, _) = reason(
        widgets
            .patch(
                "w",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"size": -1}})),
            )
            .await
            .expect_err("minimum"),
    );
    assert_eq!((code, why.as_str()), (422, "Invalid"));

    let beta: Api<DynamicObject> =
        Api::namespaced_with(client, &sandbox.ns, &widget_resource(&group, "v1beta1"));
    let read = beta.get("w").await.expect("served in v1beta1");
    assert_eq!(
        read.types.map(|t| t.api_version).as_deref(),
        Some(format!("{group}/v1beta1").as_str())
    );
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct ReconcileError(#[from] kube::Error);

async fn reconcile(
    widget: Arc<DynamicObject>,
    api: Arc<Api<DynamicObject>>,
) -> Result<Action, ReconcileError> {
    let name = widget.metadata.name.clone().unwrap_or_default();
    let size = widget.data["spec"]["size"].as_i64().unwrap_or(0);
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": format!("size-{size}")}})),
    )
    .await?;
    Ok(Action::await_change())
}

fn error_policy(_: Arc<DynamicObject>, _: &ReconcileError, _: Arc<Api<DynamicObject>>) -> Action {
    Action::requeue(Duration::from_millis(50))
}

#[tokio::test]
async fn a_controller_reconciles_custom_resources() {
    let (sandbox, client) = cluster().await;
    let group = widget_group(&sandbox.ns);
    install_crd(&client, &group).await;
    let resource = widget_resource(&group, "v1");
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &sandbox.ns, &resource);
    let controller = Controller::new_with(
        widgets.clone(),
        watcher::Config::default(),
        resource.clone(),
    )
    .run(reconcile, error_policy, Arc::new(widgets.clone()))
    .for_each(|_| async {});
    let running = tokio::spawn(controller);

    for (name, size) in [("a", 1), ("b", 2)] {
        widgets
            .create(
                &PostParams::default(),
                &widget(&group, name, json!({"size": size})),
            )
            .await
            .expect("created");
    }
    let phases = || async {
        let list = widgets.list(&ListParams::default()).await.expect("list");
        list.items
            .iter()
            .map(|w| {
                w.data["status"]["phase"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect::<Vec<_>>()
    };
    until(&sandbox, "both reconciled", || async {
        phases().await == ["size-1", "size-2"]
    })
    .await;
    widgets
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 5}})),
        )
        .await
        .expect("changed");
    until(&sandbox, "the change reconciled", || async {
        phases().await == ["size-1", "size-5"]
    })
    .await;
    running.abort();
}

#[tokio::test]
async fn https_with_the_generated_certificate_authority() {
    let (sandbox, trusted) = cluster_with(comb_sandbox::SandboxOptions {
        https: true,
        ..plain(&["test"])
    })
    .await;
    assert!(
        sandbox.url.starts_with("https://127.0.0.1:"),
        "{}",
        sandbox.url
    );
    let ca = sandbox.ca.clone().expect("a CA for HTTPS");
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
    let namespaces: Api<Namespace> = Api::all(trusted);
    assert!(
        namespaces.get("default").await.is_ok(),
        "the kubeconfig's CA verifies the server"
    );

    let mut untrusted = kube::Config::new(sandbox.url.parse().expect("url"));
    untrusted.root_cert = None;
    let stranger = kube::Client::try_from(untrusted).expect("client");
    let refused: Api<Namespace> = Api::all(stranger);
    assert!(
        refused.get("default").await.is_err(),
        "without the CA the certificate is refused"
    );
}
