//! What every part of the engine reads about a Comb: its [`CombContext`] (name, namespace,
//! configuration, spec) and the layer's [`Settings`] (labels, group, bounds, tenancy).
//!
//! It sits at the bottom of the engine so that the class contract, rendering, bridging and
//! observing can all read a Comb without knowing each other.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;

use comb_api::{CombSpec, DEFAULT_GROUP, LabelKeys};
use serde_json::{Map, Value};

use crate::engine::projection::CombSelector;
use crate::engine::tenancy::Tenancy;

/// How the engine labels, names and bounds what Combs do; one per layer (only the tenancy
/// differs between layers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// API group of the Comb CRD.
    pub group: String,
    /// Keys from the label prefix (default `comb.internal/`).
    pub labels: LabelKeys,
    /// Value of `app.kubernetes.io/managed-by` on every resource.
    pub managed_by: String,
    /// The most layers an upstream chain may have before it counts as a loop.
    pub max_upstream_depth: NonZeroUsize,
    /// Appended to `.svc` hosts of ExternalName bridges.
    pub cluster_domain: String,
    /// Where a Comb may write and as whom. The default is the safe one (own namespace, nothing
    /// cluster-scoped, the controller's identity).
    pub tenancy: Tenancy,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            group: DEFAULT_GROUP.to_string(),
            labels: LabelKeys::default(),
            managed_by: "comb".to_string(),
            max_upstream_depth: NonZeroUsize::MIN.saturating_add(15),
            cluster_domain: "cluster.local".to_string(),
            tenancy: Tenancy::default(),
        }
    }
}

/// What every class method gets to know about its Comb.
#[derive(Clone, Debug, PartialEq)]
pub struct CombContext {
    /// `metadata.name` of the CR, valid as a label value.
    pub name: String,
    /// `metadata.namespace` of the CR.
    pub namespace: String,
    /// A copy of `spec.config`, `{}` without one; changing it changes nothing in the CR.
    pub config: Map<String, Value>,
    /// The CR's spec as it was when the Comb was built.
    pub spec: CombSpec,
    pub settings: Settings,
    /// The class name of the original when this Comb was built as its stub.
    pub stub_of: Option<String>,
}

impl CombContext {
    /// The labels every resource and Pod template of this Comb gets.
    pub fn comb_labels(&self) -> BTreeMap<String, String> {
        self.settings
            .labels
            .comb_labels(&self.name, &self.namespace, &self.settings.managed_by)
    }

    /// `P+comb=<name>,P+comb-namespace=<namespace>`: everything of this Comb (pods, prune).
    pub fn label_selector(&self) -> String {
        self.settings
            .labels
            .label_selector(&self.name, &self.namespace)
    }

    /// Everything of this Comb (pods, prune): both labels.
    pub fn comb_selector(&self) -> CombSelector {
        CombSelector {
            name: self.name.clone(),
            namespace: Some(self.namespace.clone()),
        }
    }

    /// How status and deploy read live objects: the name label only (a same-named Comb of
    /// another namespace that applied a shared resource last still counts it as live).
    pub fn name_selector(&self) -> CombSelector {
        CombSelector {
            name: self.name.clone(),
            namespace: None,
        }
    }
}

/// A context for tests: Comb `name` in `namespace`, default settings, the given config.
#[cfg(test)]
pub(crate) fn test_context(name: &str, namespace: &str, config: Value) -> CombContext {
    CombContext {
        name: name.to_string(),
        namespace: namespace.to_string(),
        config: config.as_object().cloned().unwrap_or_default(),
        spec: CombSpec::default(),
        settings: Settings::default(),
        stub_of: None,
    }
}
