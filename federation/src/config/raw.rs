//! The configuration file as written: every key optional and loosely typed, so that validation
//! (not the YAML parser) reports bad values, each with the key it belongs to.

use serde::Deserialize;

/// A scalar that may be written as a number or a string (`resync: 60s`, `maxUpstreamDepth: 16`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Scalar {
    Integer(i64),
    Float(f64),
    Bool(bool),
    Text(String),
}

impl Scalar {
    /// The scalar as the user wrote it.
    pub fn text(&self) -> String {
        match self {
            Scalar::Integer(value) => value.to_string(),
            Scalar::Float(value) => value.to_string(),
            Scalar::Bool(value) => value.to_string(),
            Scalar::Text(value) => value.clone(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawConfig {
    pub kubeconfig: Option<String>,
    pub group: Option<String>,
    pub label_prefix: Option<String>,
    pub managed_by: Option<String>,
    pub max_upstream_depth: Option<Scalar>,
    pub cluster_domain: Option<String>,
    pub resync: Option<Scalar>,
    pub layers: Option<Vec<RawLayer>>,
    pub layer_context: Option<String>,
    pub layer_templates: Option<Vec<RawLayerTemplate>>,
}

/// `layerTemplates[]`: what a CombLayer made from it may be.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLayerTemplate {
    pub name: Option<String>,
    pub contexts: Option<Vec<String>>,
    pub kubeconfig_secrets: Option<Vec<String>>,
    pub namespaces: Option<Vec<String>>,
    pub borrow_from: Option<Vec<String>>,
    pub fallback: Option<Vec<String>>,
    pub replicate: Option<Vec<RawReplicate>>,
    pub allow_upstreams: Option<Vec<RawAllowUpstream>>,
    pub allow_namespaces: Option<Vec<String>>,
    pub allow_cluster_scoped: Option<Vec<String>>,
    pub service_account: Option<String>,
    pub source_service_account: Option<String>,
    #[serde(rename = "maxTTL")]
    pub max_ttl: Option<Scalar>,
    #[serde(rename = "defaultTTL")]
    pub default_ttl: Option<Scalar>,
    pub create_namespaces: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLayer {
    pub name: Option<String>,
    pub context: Option<String>,
    pub namespaces: Option<Vec<String>>,
    pub borrow: Option<RawBorrow>,
    pub stubs: Option<Vec<String>>,
    pub allow_namespaces: Option<Vec<String>>,
    pub allow_cluster_scoped: Option<Vec<String>>,
    pub service_account: Option<String>,
    pub source_service_account: Option<String>,
    pub allow_upstreams: Option<Vec<RawAllowUpstream>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawAllowUpstream {
    pub layer: Option<String>,
    pub context: Option<String>,
    pub namespaces: Option<Vec<String>>,
    pub replicate: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawBorrow {
    pub from: Option<String>,
    pub namespace: Option<String>,
    pub combs: Option<Vec<String>>,
    pub local: Option<Vec<String>>,
    pub replicate: Option<Vec<RawReplicate>>,
    pub fallback: Option<Vec<String>>,
    pub unhealthy_after: Option<Scalar>,
    pub healthy_after: Option<Scalar>,
    pub probe: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawReplicate {
    pub kind: Option<String>,
    pub name: Option<String>,
}
