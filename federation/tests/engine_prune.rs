//! Pruning after a successful apply (reference §6.7): what a Comb no longer renders is deleted
//! when it still carries both labels, left alone when it lost them, and never touched when it
//! is cluster-scoped. The layer allows the cluster-scoped Kinds these tests write.

mod engine_support;

use comb_federation::engine::class::CombInstance;
use comb_federation::engine::tenancy::GroupKind;
use engine_support::*;
use serde_json::json;

fn namespace(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// The Comb edited down to its Deployment (what the tests' Combs render first, with more), as
/// the controller builds it from the new spec.
async fn down_to_the_deployment(cluster: &Cluster, comb: &CombInstance) -> CombInstance {
    cluster
        .edit(comb, manifests_spec(vec![deployment("nats", "nats:2")]))
        .await
}

/// The verdict of the step after [`down_to_the_deployment`]: healthy, the record differed,
/// the Deployment applied, and `note` on what prune did not delete (empty: nothing).
fn healthy_after_the_edit(note: &str) -> (String, String, String) {
    expect(
        "Running",
        "Healthy",
        &format!("healthy; the record differed from the manifests: applied 1 resource(s){note}"),
    )
}

#[tokio::test]
async fn a_dropped_resource_is_pruned() {
    let cluster = Cluster::start_own().await;
    let comb = cluster
        .settled(
            "nats",
            vec![
                deployment("nats", "nats:2"),
                config_map("nats-extra", json!({"a": "1"})),
            ],
        )
        .await;
    assert!(cluster.get("v1", "ConfigMap", "nats-extra").await.is_some());

    let mut comb = down_to_the_deployment(&cluster, &comb).await;
    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(verdict(&status), healthy_after_the_edit(""));
    assert_eq!(managed(&status), ["Deployment/nats"]);
    assert!(
        cluster
            .peek("v1", "ConfigMap", "nats-extra")
            .await
            .is_none()
    );
    // One list with both labels found it, and it was deleted.
    assert_eq!(cluster.requests().get("list configmaps"), Some(&1));
    assert_eq!(cluster.requests().get("delete configmaps"), Some(&1));
    assert_eq!(cluster.requests().get("get configmaps"), None);
}

#[tokio::test]
async fn a_resource_that_lost_its_labels_is_left_alone() {
    let cluster = Cluster::start_own().await;
    let comb = cluster
        .settled(
            "nats",
            vec![
                deployment("nats", "nats:2"),
                config_map("nats-extra", json!({"a": "1"})),
            ],
        )
        .await;
    // Someone took it over: our labels are gone.
    cluster
        .ops
        .merge_patch(
            &resource("v1", "ConfigMap", "nats-extra"),
            &json!({"metadata": {"labels": {"comb.internal/comb": null, "comb.internal/comb-namespace": null}}}),
        )
        .await
        .unwrap();

    let mut comb = down_to_the_deployment(&cluster, &comb).await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        healthy_after_the_edit(
            "; left ConfigMap nats-extra alone: \
             it no longer carries comb.internal/comb=nats,comb.internal/comb-namespace=platform"
        )
    );
    assert!(
        cluster
            .peek("v1", "ConfigMap", "nats-extra")
            .await
            .is_some()
    );
    assert_eq!(managed(&status), ["Deployment/nats"]);
}

#[tokio::test]
async fn a_cluster_scoped_resource_is_left_in_place() {
    let mut cluster = Cluster::start_own().await;
    cluster.set_tenancy(allowing_cluster_scoped(&[GroupKind::new("", "Namespace")]));
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![deployment("nats", "nats:2"), namespace("nats-team")]),
        )
        .await;
    let settled = cluster.settle(&mut comb).await;
    let recorded = settled
        .managed()
        .iter()
        .find(|r| r.kind == "Namespace")
        .unwrap();
    assert_eq!(recorded.namespace, None);

    let mut comb = down_to_the_deployment(&cluster, &comb).await;
    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        healthy_after_the_edit(
            "; left Namespace nats-team in place: \
             cluster-scoped, never pruned automatically"
        )
    );
    assert!(cluster.peek("v1", "Namespace", "nats-team").await.is_some());
    assert_eq!(managed(&status), ["Deployment/nats"]);
    // Never looked up.
    let namespace_requests: Vec<_> = cluster
        .requests()
        .into_keys()
        .filter(|k| k.contains("namespaces"))
        .collect();
    assert!(namespace_requests.is_empty(), "{namespace_requests:?}");
}

/// A CRD of the cluster-scoped kind `ClusterWidget` (group `example.com`), installed and served,
/// and a tenancy that allows writing ClusterWidgets.
async fn install_cluster_widgets(cluster: &mut Cluster) {
    cluster.set_tenancy(allowing_cluster_scoped(&[GroupKind::new(
        "example.com",
        "ClusterWidget",
    )]));
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "clusterwidgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Cluster",
            "names": {"kind": "ClusterWidget", "plural": "clusterwidgets", "singular": "clusterwidget", "listKind": "ClusterWidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": true
            }}}]
        }
    });
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_json::from_value(crd).expect("a valid object");
    let api = kube::Api::all(cluster.client.clone());
    api.create(&Default::default(), &crd)
        .await
        .expect("created");
    cluster
        .wait_until("ClusterWidget served", async |c| {
            c.served("example.com/v1", "ClusterWidget").await
        })
        .await;
}

fn cluster_widget(name: &str) -> serde_json::Value {
    json!({"apiVersion": "example.com/v1", "kind": "ClusterWidget", "metadata": {"name": name}, "spec": {"size": 3}})
}

fn cluster_widget_identity(namespace: Option<&str>) -> comb_api::ManagedObject {
    comb_api::ManagedObject {
        api_version: "example.com/v1".into(),
        kind: "ClusterWidget".into(),
        namespace: namespace.map(str::to_string),
        name: "shared".into(),
    }
}

#[tokio::test]
async fn a_cluster_scoped_custom_resource_is_recorded_without_namespace_and_never_pruned() {
    let mut cluster = Cluster::start_own().await;
    install_cluster_widgets(&mut cluster).await;
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![deployment("nats", "nats:2"), cluster_widget("shared")]),
        )
        .await;
    let settled = cluster.settle(&mut comb).await;
    let recorded = settled
        .managed()
        .iter()
        .find(|r| r.kind == "ClusterWidget")
        .unwrap();
    assert_eq!(
        recorded.namespace, None,
        "discovery says ClusterWidget is cluster-scoped"
    );

    let mut comb = down_to_the_deployment(&cluster, &comb).await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        healthy_after_the_edit(
            "; left ClusterWidget shared in place: \
             cluster-scoped, never pruned automatically"
        )
    );
    assert!(
        cluster
            .peek("example.com/v1", "ClusterWidget", "shared")
            .await
            .is_some()
    );
    assert_eq!(managed(&status), ["Deployment/nats"]);
}

#[tokio::test]
async fn a_record_that_gives_a_cluster_scoped_object_a_namespace_still_never_deletes_it() {
    // What an older comb recorded: unknown kinds counted as namespaced.
    let mut cluster = Cluster::start_own().await;
    install_cluster_widgets(&mut cluster).await;
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![deployment("nats", "nats:2"), cluster_widget("shared")]),
        )
        .await;
    let mut settled = cluster.settle(&mut comb).await;
    for resource in settled.managed_resources.iter_mut().flatten() {
        if resource.kind == "ClusterWidget" {
            resource.namespace = Some(NS.into());
        }
    }

    let mut comb = down_to_the_deployment(&cluster, &comb).await;
    comb.keep_status(settled);
    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    let (_, _, message) = verdict(&status);
    assert!(
        message.ends_with(
            "left ClusterWidget shared in place: cluster-scoped, never pruned automatically"
        ),
        "{message}"
    );
    assert!(
        cluster
            .peek("example.com/v1", "ClusterWidget", "shared")
            .await
            .is_some()
    );
    assert_eq!(managed(&status), ["Deployment/nats"]);
    let deletes: Vec<_> = cluster
        .requests()
        .into_keys()
        .filter(|k| k.starts_with("delete"))
        .collect();
    assert!(deletes.is_empty(), "{deletes:?}");
}

#[tokio::test]
async fn kube_ops_refuses_to_delete_a_cluster_scoped_object_whatever_the_caller_says() {
    let mut cluster = Cluster::start_own().await;
    install_cluster_widgets(&mut cluster).await;
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        cluster.client.clone(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("example.com", "v1", "ClusterWidget"),
            "clusterwidgets",
        ),
    );
    api.create(
        &Default::default(),
        &serde_json::from_value(cluster_widget("shared")).unwrap(),
    )
    .await
    .unwrap();
    for namespace in [None, Some(NS)] {
        let error = cluster
            .ops
            .delete(&cluster_widget_identity(namespace))
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains(
                "ClusterWidget shared is cluster-scoped: comb never deletes cluster-scoped objects"
            ),
            "{error}"
        );
    }
    let namespace_error = cluster
        .ops
        .delete(&comb_api::ManagedObject {
            api_version: "v1".into(),
            kind: "Namespace".into(),
            namespace: None,
            name: NS.into(),
        })
        .await
        .unwrap_err();
    assert!(
        namespace_error.to_string().contains("cluster-scoped"),
        "{namespace_error}"
    );
    assert!(
        cluster
            .peek("example.com/v1", "ClusterWidget", "shared")
            .await
            .is_some()
    );
}
