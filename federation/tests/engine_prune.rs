//! Pruning after a successful apply (reference §6.7): what a Comb no longer renders is deleted
//! when it still carries both labels, left alone when it lost them or is marked keep, and never
//! touched when it is cluster-scoped. Deletes are conditional on the copy they were decided on,
//! so a change in between is decided again (prune and cleanup alike). The layer allows the
//! cluster-scoped Kinds these tests write.

use std::sync::Arc;

use comb_api::LabelKeys;
use comb_federation::controller::deletion::cleanup;
use comb_federation::engine::cache::ObjectCache;
use comb_federation::engine::class::CombInstance;
use comb_federation::engine::kube_ops::KubeOps;
use comb_federation::engine::reconcile::{Dependencies, StepEnv, UpstreamResolution, reconcile};
use comb_federation::engine::tenancy::{GroupKind, Tenancy};
use comb_testkit::engine::*;
use comb_testkit::fixtures::*;
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
            None,
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
        uid: None,
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
            .delete(&cluster_widget_identity(namespace), Default::default())
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
        .delete(
            &comb_api::ManagedObject {
                api_version: "v1".into(),
                kind: "Namespace".into(),
                namespace: None,
                name: NS.into(),
                uid: None,
            },
            Default::default(),
        )
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

/// nats settled with a Deployment and these ConfigMaps.
async fn settled_with_config_maps(cluster: &Cluster, names: [&str; 3]) -> CombInstance {
    let mut manifests = vec![deployment("nats", "nats:2")];
    manifests.extend(names.map(|name| config_map(name, json!({}))));
    cluster.settled("nats", manifests).await
}

/// Adds `annotations` to ConfigMap `name`.
async fn annotate(cluster: &Cluster, name: &str, annotations: serde_json::Value) {
    cluster
        .ops
        .merge_patch(
            &cluster.resource("v1", "ConfigMap", name),
            &json!({"metadata": {"annotations": annotations}}),
            None,
        )
        .await
        .expect("annotated");
}

/// nats settled with a Deployment and ConfigMaps nats-kept, nats-taken and nats-touched, and
/// its client reading ConfigMaps from copies a watch would hold, taken then (everything else
/// is read from the server). Since the copies (a watch that has not delivered it yet): nats-kept
/// was marked keep with `keep`, nats-taken lost a label of the Comb's to `labels`, and
/// nats-touched changed otherwise.
async fn changed_since_the_copies(
    cluster: &Cluster,
    keep: serde_json::Value,
    labels: serde_json::Value,
) -> (CombInstance, KubeOps) {
    let comb = settled_with_config_maps(cluster, ["nats-kept", "nats-taken", "nats-touched"]).await;
    let cache = ObjectCache::new(LabelKeys::default());
    let scope = Some(cluster.ns());
    cache.list_started("v1", "ConfigMap", scope);
    for object in cluster
        .peek_list("v1", "ConfigMap", "comb.internal/comb")
        .await
    {
        cache.listed("v1", "ConfigMap", scope, object);
    }
    cache.list_done("v1", "ConfigMap", scope);
    let ops = cluster.ops.clone().with_cache(Arc::new(cache));
    annotate(cluster, "nats-kept", keep).await;
    cluster
        .ops
        .merge_patch(
            &cluster.resource("v1", "ConfigMap", "nats-taken"),
            &json!({"metadata": {"labels": labels}}),
            None,
        )
        .await
        .expect("relabelled");
    annotate(cluster, "nats-touched", json!({"example.com/seen": "yes"})).await;
    (comb, ops)
}

/// Fails the test unless each ConfigMap named is there or gone as said.
async fn assert_config_maps(cluster: &Cluster, expected: &[(&str, bool)]) {
    for (name, there) in expected {
        let found = cluster.peek("v1", "ConfigMap", name).await.is_some();
        assert_eq!(found, *there, "ConfigMap {name} is there");
    }
}

/// After [`changed_since_the_copies`] and a delete of all three: nats-touched alone went.
async fn only_the_touched_one_went(cluster: &Cluster) {
    let expected = [
        ("nats-kept", true),
        ("nats-taken", true),
        ("nats-touched", false),
    ];
    assert_config_maps(cluster, &expected).await;
}

#[tokio::test]
async fn an_orphan_marked_keep_is_left_in_place_as_cleanup_leaves_it() {
    let cluster = Cluster::start().await;
    let comb = settled_with_config_maps(&cluster, ["nats-kept", "nats-helm", "nats-extra"]).await;
    annotate(&cluster, "nats-kept", json!({"comb.internal/keep": "true"})).await;
    annotate(
        &cluster,
        "nats-helm",
        json!({"helm.sh/resource-policy": "keep"}),
    )
    .await;

    let mut comb = down_to_the_deployment(&cluster, &comb).await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        healthy_after_the_edit(
            "; left ConfigMap nats-kept in place: annotated comb.internal/keep: \"true\"\
             ; left ConfigMap nats-helm in place: annotated helm.sh/resource-policy: keep"
        )
    );
    let expected = [
        ("nats-kept", true),
        ("nats-helm", true),
        ("nats-extra", false),
    ];
    assert_config_maps(&cluster, &expected).await;
    // Left to whoever keeps them, as Helm drops a kept object from its release.
    assert_eq!(managed(&status), ["Deployment/nats"]);
}

#[tokio::test]
async fn a_prune_decided_on_a_stale_copy_is_decided_again_on_the_server_s() {
    let cluster = Cluster::start().await;
    let (comb, ops) = changed_since_the_copies(
        &cluster,
        json!({"comb.internal/keep": "true"}),
        json!({"comb.internal/comb": null}),
    )
    .await;
    let comb = down_to_the_deployment(&cluster, &comb).await;
    cluster.reset_requests();
    let env = StepEnv {
        ops: &ops,
        dependencies: &Dependencies::Unknown,
        fallback: None,
        hold_progress_until: None,
    };
    let status = reconcile(&comb, env, UpstreamResolution::Local)
        .await
        .status;
    let selector = format!(
        "comb.internal/comb=nats,comb.internal/comb-namespace={}",
        cluster.ns()
    );
    assert_eq!(
        verdict(&status),
        healthy_after_the_edit(&format!(
            "; left ConfigMap nats-kept in place: annotated comb.internal/keep: \"true\"\
             ; left ConfigMap nats-taken alone: it no longer carries {selector}"
        ))
    );
    // Still the Comb's and not kept: deleted on the second decision.
    only_the_touched_one_went(&cluster).await;
    assert_eq!(managed(&status), ["Deployment/nats"]);
    // Each delete on the stale copy was refused (409), the object read again and decided
    // again: one more delete, for the one still to go.
    let requests = cluster.requests();
    assert_eq!(requests.get("delete configmaps"), Some(&4), "{requests:?}");
    assert_eq!(requests.get("get configmaps"), Some(&3), "{requests:?}");
}

#[tokio::test]
async fn cleanup_decides_again_on_what_the_server_has() {
    let cluster = Cluster::start().await;
    let (comb, ops) = changed_since_the_copies(
        &cluster,
        json!({"helm.sh/resource-policy": "keep"}),
        json!({"comb.internal/comb-namespace": "elsewhere"}),
    )
    .await;
    let report = cleanup(&ops, comb.cr(), &LabelKeys::default(), &Tenancy::default()).await;
    assert_eq!(report.failures, Vec::<String>::new());
    assert_eq!(
        report.deleted,
        ["Deployment nats", "ConfigMap nats-touched"]
    );
    assert_eq!(report.kept, ["ConfigMap nats-kept"]);
    assert_eq!(
        report.notes,
        [format!(
            "left ConfigMap nats-taken alone: it no longer carries \
             comb.internal/comb=nats,comb.internal/comb-namespace={}",
            cluster.ns()
        )]
    );
    only_the_touched_one_went(&cluster).await;
}

#[tokio::test]
async fn a_delete_that_keeps_conflicting_is_noted_and_decided_again_by_the_next_step() {
    let cluster = Cluster::start_own().await;
    let comb = cluster
        .settled(
            "nats",
            vec![
                deployment("nats", "nats:2"),
                config_map("nats-extra", json!({})),
            ],
        )
        .await;
    // Every delete meets a change (as if something wrote the object each time).
    cluster.fail(
        "DELETE",
        "/api/v1/namespaces/platform/configmaps/nats-extra",
        409,
        5,
        "the object has been modified",
    );
    let mut comb = down_to_the_deployment(&cluster, &comb).await;
    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        healthy_after_the_edit(
            "; deleting ConfigMap nats-extra failed: Kubernetes API error (delete ConfigMap): \
             ConfigMap nats-extra changed before each of 5 deletes could go out (409 Conflict); \
             the next step decides again"
        )
    );
    let requests = cluster.requests();
    assert_eq!(requests.get("delete configmaps"), Some(&5), "{requests:?}");
    assert_eq!(requests.get("get configmaps"), Some(&4), "{requests:?}");
    // Still recorded, so the next step decides again, and deletes it.
    assert_eq!(
        managed(&status),
        ["Deployment/nats", "ConfigMap/nats-extra"]
    );
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(managed(&status), ["Deployment/nats"]);
    assert_config_maps(&cluster, &[("nats-extra", false)]).await;
}
