//! A Comb cannot escape its layer (DESIGN.md §6, tenancy): a manifest for another namespace or
//! a cluster-scoped one is refused before the step writes anything, unless the layer allows it.

use std::sync::Arc;

use async_trait::async_trait;
use comb_api::Endpoint;
use comb_federation::engine::class::{CombClass, CombContext};
use comb_federation::engine::endpoints::EndpointDecl;
use comb_federation::engine::tenancy::{GroupKind, PolicyOrigin, Tenancy};
use comb_federation::error::Result;
use comb_testkit::engine::*;
use comb_testkit::fixtures::*;
use serde_json::{Value, json};

/// The tenancy of layer `dev`, `layers[1]` of its configuration.
fn dev(namespaces: &[&str], kinds: &[GroupKind]) -> Tenancy {
    Tenancy {
        origin: PolicyOrigin::Layer {
            name: "dev".into(),
            index: 1,
        },
        allow_namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        allow_cluster_scoped: kinds.to_vec(),
        ..Tenancy::default()
    }
}

fn in_namespace(mut manifest: Value, namespace: &str) -> Value {
    manifest["metadata"]["namespace"] = json!(namespace);
    manifest
}

fn cluster_role(name: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": {"name": name},
           "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})
}

/// The verdict on a Comb of layer `dev` whose manifests put `what` in namespace `other`.
fn refused_in_other(what: &str) -> (String, String, String) {
    expect(
        "Error",
        "ManifestForbidden",
        &format!(
            "{what} is in namespace other, not platform; layer dev does not allow it \
             (add other to layers[1].allowNamespaces)"
        ),
    )
}

#[tokio::test]
async fn a_manifest_for_another_namespace_is_refused_before_anything_is_written() {
    let mut cluster = Cluster::start_own().await;
    cluster.namespace("other").await;
    cluster.set_tenancy(dev(&[], &[]));
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![
                deployment("nats", "nats:2"),
                in_namespace(config_map("cfg", json!({"a": "1"})), "other"),
            ]),
        )
        .await;
    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(verdict(&status), refused_in_other("ConfigMap other/cfg"));
    cluster.assert_only_status_written();
    assert!(
        cluster
            .peek("apps/v1", "Deployment", "nats")
            .await
            .is_none(),
        "not even what may be written"
    );
    assert!(
        cluster
            .peek_in("v1", "ConfigMap", "other", "cfg")
            .await
            .is_none()
    );
    assert!(managed(&status).is_empty());
}

#[tokio::test]
async fn another_namespace_is_written_when_the_layer_allows_it() {
    let mut cluster = Cluster::start_own().await;
    cluster.namespace("other").await;
    cluster.set_tenancy(dev(&["other"], &[]));
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![
                deployment("nats", "nats:2"),
                in_namespace(config_map("cfg", json!({"a": "1"})), "other"),
            ]),
        )
        .await;
    let status = cluster.settle(&mut comb).await;
    assert!(
        cluster
            .peek_in("v1", "ConfigMap", "other", "cfg")
            .await
            .is_some()
    );
    let recorded = status
        .managed()
        .iter()
        .find(|resource| resource.kind == "ConfigMap")
        .unwrap();
    assert_eq!(recorded.namespace.as_deref(), Some("other"));
}

#[tokio::test]
async fn a_cluster_role_is_refused_until_the_layer_allows_cluster_roles() {
    let mut cluster = Cluster::start_own().await;
    cluster.set_tenancy(dev(&["other"], &[GroupKind::new("", "Namespace")]));
    let spec = manifests_spec(vec![
        deployment("nats", "nats:2"),
        cluster_role("admin-all"),
    ]);
    let mut comb = cluster.comb("nats", spec.clone()).await;
    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Error",
            "ManifestForbidden",
            "ClusterRole admin-all is cluster-scoped; layer dev allows only Namespace \
             (add ClusterRole to layers[1].allowClusterScoped)"
        )
    );
    cluster.assert_only_status_written();
    assert!(
        cluster
            .peek("rbac.authorization.k8s.io/v1", "ClusterRole", "admin-all")
            .await
            .is_none()
    );

    cluster.set_tenancy(dev(
        &[],
        &[GroupKind::new("rbac.authorization.k8s.io", "ClusterRole")],
    ));
    let mut comb = cluster.edit(&comb, spec).await;
    let status = cluster.settle(&mut comb).await;
    assert!(
        cluster
            .peek("rbac.authorization.k8s.io/v1", "ClusterRole", "admin-all")
            .await
            .is_some()
    );
    assert!(managed(&status).contains(&"ClusterRole/admin-all".to_string()));
}

#[tokio::test]
async fn a_namespace_is_refused_by_default_with_every_refusal_named() {
    let cluster = Cluster::start_own().await;
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
                in_namespace(service("nats", 4222), "kube-system"),
            ]),
        )
        .await;
    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Error",
            "ManifestForbidden",
            "Namespace team is cluster-scoped; the engine's default tenancy allows no cluster-scoped \
             kinds (add Namespace to Settings.tenancy.allow_cluster_scoped); Service kube-system/nats is in \
             namespace kube-system, not platform; the engine's default tenancy does not allow it \
             (add kube-system to Settings.tenancy.allow_namespaces)"
        )
    );
    cluster.assert_only_status_written();
    assert!(cluster.peek("v1", "Namespace", "team").await.is_none());
}

/// A class whose bridge puts a ConfigMap into namespace `other`.
struct ForeignBridge;

#[async_trait]
impl CombClass for ForeignBridge {
    fn name(&self) -> &str {
        "ForeignBridge"
    }

    async fn endpoints(&self, _ctx: &CombContext) -> Result<Vec<EndpointDecl>> {
        Ok(vec![EndpointDecl::new("client", 4222)])
    }

    async fn bridge_manifests(
        &self,
        _ctx: &CombContext,
        _endpoints: &[Endpoint],
    ) -> Result<Vec<Value>> {
        Ok(vec![in_namespace(
            config_map("bridge", json!({"to": "elsewhere"})),
            "other",
        )])
    }
}

#[tokio::test]
async fn a_bridge_manifest_is_held_to_the_same_rule() {
    let mut cluster = Cluster::start_own().await;
    cluster.namespace("other").await;
    cluster.register(Arc::new(ForeignBridge));
    cluster.set_tenancy(dev(&[], &[]));
    let mut comb = cluster
        .comb(
            "nats",
            json!({"class": "ForeignBridge", "upstream": {"class": "Static",
                   "endpoints": [{"name": "client", "port": 4222, "cluster": "nats.elsewhere:4222"}]}}),
        )
        .await;
    cluster.reset_requests();
    let status = cluster.reconcile_resolved(&mut comb).await;
    assert_eq!(verdict(&status), refused_in_other("ConfigMap other/bridge"));
    cluster.assert_only_status_written();
    assert!(
        cluster
            .peek_in("v1", "ConfigMap", "other", "bridge")
            .await
            .is_none()
    );
}
