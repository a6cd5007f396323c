//! The `CombLayer` custom resource: a layer made on demand from a template of the
//! configuration (docs/adr/0005-layers-on-demand.md).
//!
//! Cluster-scoped, in the cluster of the controller's `layerContext`: a layer's name is one
//! name of the federation, as a layer of the configuration file is. Its spec names a template
//! and may only narrow it; the controller turns it into a layer like one of the file, and
//! records in its status what it made for it (the Combs of the layer and the namespaces it
//! created), by uid, so that removing the layer removes exactly that.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_core::{ApiResource, ClusterResourceScope, ObjectMeta, Resource, TypeMeta};
use serde::{Deserialize, Serialize};

use crate::comb::VERSION;
use crate::status::{CombCondition, ManagedObject};

/// The kind of the layer custom resource.
pub const LAYER_KIND: &str = "CombLayer";
/// Its plural (resource) name.
pub const LAYER_PLURAL: &str = "comblayers";
/// Its short name: `kubectl get cmbl`.
pub const LAYER_SHORT_NAME: &str = "cmbl";
/// Condition type: True while the layer's TTL has run out (the layer is being removed).
pub const EXPIRED: &str = "Expired";

/// The [`ApiResource`] of the CombLayer CRD in `group`, the dynamic type of [`CombLayer`].
pub fn layer_api_resource(group: &str) -> ApiResource {
    ApiResource {
        group: group.to_string(),
        version: VERSION.to_string(),
        api_version: format!("{group}/{VERSION}"),
        kind: LAYER_KIND.to_string(),
        plural: LAYER_PLURAL.to_string(),
    }
}

/// A layer made on demand.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CombLayer {
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub types: Option<TypeMeta>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: CombLayerSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CombLayerStatus>,
}

/// What the layer is: its template, where it runs, what it borrows, and until when.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CombLayerSpec {
    /// The name of a `layerTemplates` entry of the controller's configuration.
    pub template: String,
    /// A kube context of the controller's kubeconfig; or `kubeconfigSecret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// A Secret holding a kubeconfig for the layer's cluster; or `context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret: Option<SecretRef>,
    /// The namespaces of the layer's cluster it manages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Which Combs borrow from which layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow: Option<LayerBorrowSpec>,
    /// Patterns of the Combs built as their stub.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stubs: Vec<String>,
    /// How long the layer lives from its creation (`8h`); or `expiresAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    /// When the layer goes; or `ttl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
}

/// A Secret, and the key of its data that holds a kubeconfig (default `kubeconfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl std::fmt::Display for SecretRef {
    /// `NAMESPACE/NAME`, as a template's `kubeconfigSecrets` lists it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// `spec.borrow`, as a configuration layer's `borrow` is written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LayerBorrowSpec {
    pub from: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Patterns of the Combs of `from` the layer gets (default all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub combs: Vec<String>,
    /// Patterns of the Combs that run in the layer instead of borrowing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub local: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicate: Vec<ReplicateSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback: Vec<String>,
}

/// One object copied from the peer's namespace: `{kind: Secret|ConfigMap, name}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicateSpec {
    pub kind: String,
    pub name: String,
}

/// What the controller recorded of the layer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CombLayerStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<LayerPhase>,
    /// `Ready`, then `Expired`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<CombCondition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the layer goes: `spec.expiresAt`, else creation plus the TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
    /// Its Combs by phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combs: Option<CombCounts>,
    /// What comb made for the layer (its Combs, the namespaces it created), each with its uid:
    /// the record that makes them the layer's, and all that removing it deletes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_resources: Vec<ManagedObject>,
}

impl CombLayerStatus {
    /// The condition of type `kind`, if recorded.
    pub fn condition(&self, kind: &str) -> Option<&CombCondition> {
        self.conditions.iter().find(|c| c.type_ == kind)
    }
}

/// The layer's Combs counted by phase.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CombCounts {
    pub total: u32,
    /// Running.
    pub ready: u32,
    pub pending: u32,
    /// Error, Blocked or NeedsConfig.
    pub failed: u32,
}

/// The phase of a CombLayer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LayerPhase {
    /// Admitted; its Combs are being made or settle.
    Pending,
    /// Every Comb of the layer is Running.
    Ready,
    /// Not added: its template refuses it, its credential does not work, or its name is taken.
    Error,
    /// Its TTL ran out; what comb made for it is being removed.
    Expired,
}

impl LayerPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            LayerPhase::Pending => "Pending",
            LayerPhase::Ready => "Ready",
            LayerPhase::Error => "Error",
            LayerPhase::Expired => "Expired",
        }
    }
}

impl CombLayer {
    /// A new CombLayer of `group` named `name`.
    pub fn new(group: &str, name: &str, spec: CombLayerSpec) -> CombLayer {
        CombLayer {
            types: Some(TypeMeta {
                api_version: format!("{group}/{VERSION}"),
                kind: LAYER_KIND.to_string(),
            }),
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        }
    }

    /// The layer's name.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}

impl Resource for CombLayer {
    type DynamicType = ApiResource;
    type Scope = ClusterResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_layer_round_trips_in_the_words_kubectl_shows() {
        let written = json!({
            "apiVersion": "comb.internal/v1",
            "kind": "CombLayer",
            "metadata": {"name": "alice"},
            "spec": {
                "template": "dev",
                "context": "dev",
                "namespaces": ["dev-alice"],
                "borrow": {"from": "staging", "local": ["api"]},
                "ttl": "8h"
            },
            "status": {
                "phase": "Ready",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Admitted"}],
                "expiresAt": "2026-12-05T18:00:00Z",
                "combs": {"total": 3, "ready": 3, "pending": 0, "failed": 0},
                "managedResources": [{"apiVersion": "v1", "kind": "Namespace", "name": "dev-alice", "uid": "u1"}]
            }
        });
        let layer: CombLayer = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(layer.name(), "alice");
        assert_eq!(layer.spec.borrow.as_ref().unwrap().local, ["api"]);
        assert_eq!(
            layer.status.as_ref().unwrap().phase,
            Some(LayerPhase::Ready)
        );
        assert_eq!(serde_json::to_value(&layer).unwrap(), written);
    }
}
