//! Pruning after a successful apply (reference §6.7): what a Comb no longer renders is deleted
//! when it still carries both labels, left alone when it lost them, and never touched when it
//! is cluster-scoped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod engine_support;

use engine_support::*;
use serde_json::json;

fn namespace(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

#[tokio::test]
async fn a_dropped_resource_is_pruned() {
    let cluster = Cluster::start().await;
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![
                deployment("nats", "nats:2"),
                config_map("nats-extra", json!({"a": "1"})),
            ]),
        )
        .await;
    cluster.settle(&mut comb).await;
    assert!(cluster.get("v1", "ConfigMap", "nats-extra").await.is_some());

    let mut comb = cluster
        .edit(&comb, manifests_spec(vec![deployment("nats", "nats:2")]))
        .await;
    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Running",
            "Healthy",
            "healthy; the record differed from the manifests: applied 1 resource(s)"
        )
    );
    assert_eq!(managed(&status), ["Deployment/nats"]);
    assert!(cluster.peek("", "ConfigMap", "nats-extra").is_none());
    // One list with both labels found it, and it was deleted.
    assert_eq!(cluster.requests().get("list configmaps"), Some(&1));
    assert_eq!(cluster.requests().get("delete configmaps"), Some(&1));
    assert_eq!(cluster.requests().get("get configmaps"), None);
}

#[tokio::test]
async fn a_resource_that_lost_its_labels_is_left_alone() {
    let cluster = Cluster::start().await;
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![
                deployment("nats", "nats:2"),
                config_map("nats-extra", json!({"a": "1"})),
            ]),
        )
        .await;
    cluster.settle(&mut comb).await;
    // Someone took it over: our labels are gone.
    cluster
        .ops
        .merge_patch(
            &resource("v1", "ConfigMap", "nats-extra"),
            &json!({"metadata": {"labels": {"comb.internal/comb": null, "comb.internal/comb-namespace": null}}}),
        )
        .await
        .unwrap();

    let mut comb = cluster
        .edit(&comb, manifests_spec(vec![deployment("nats", "nats:2")]))
        .await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Running",
            "Healthy",
            "healthy; the record differed from the manifests: applied 1 resource(s); left ConfigMap nats-extra alone: \
             it no longer carries comb.internal/comb=nats,comb.internal/comb-namespace=platform"
        )
    );
    assert!(cluster.peek("", "ConfigMap", "nats-extra").is_some());
    assert_eq!(managed(&status), ["Deployment/nats"]);
}

#[tokio::test]
async fn a_cluster_scoped_resource_is_left_in_place() {
    let cluster = Cluster::start().await;
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

    let mut comb = cluster
        .edit(&comb, manifests_spec(vec![deployment("nats", "nats:2")]))
        .await;
    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Running",
            "Healthy",
            "healthy; the record differed from the manifests: applied 1 resource(s); left Namespace nats-team in place: \
             cluster-scoped, never pruned automatically"
        )
    );
    assert!(cluster.peek("", "Namespace", "nats-team").is_some());
    assert_eq!(managed(&status), ["Deployment/nats"]);
    // Never looked up.
    let namespace_requests: Vec<_> = cluster
        .requests()
        .into_keys()
        .filter(|k| k.contains("namespaces"))
        .collect();
    assert!(namespace_requests.is_empty(), "{namespace_requests:?}");
}
