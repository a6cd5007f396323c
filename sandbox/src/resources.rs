//! The resource types a cluster serves: the built-in kinds and the ones CRDs add at run time.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

/// One served resource in one version (what discovery lists and a URL path names).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceType {
    /// `""` for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
    /// `"status"`, `"scale"`, `"log"`.
    pub subresources: Vec<String>,
    pub verbs: Vec<String>,
    /// Discovery categories, such as `all`.
    pub categories: Vec<String>,
    /// The version objects are stored in; other served versions are converted by apiVersion
    /// only, like a CRD with conversion strategy `None`.
    pub storage_version: String,
    /// The CRD's structural schema (`openAPIV3Schema`) for custom resources.
    pub schema: Option<Arc<Value>>,
    /// The CRD's `additionalPrinterColumns` for custom resources.
    pub printer_columns: Vec<PrinterColumn>,
}

/// One column of `kubectl get` beyond NAME and AGE.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    /// A simple JSONPath like `.spec.replicas`.
    pub json_path: String,
}

impl ResourceType {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn has_status(&self) -> bool {
        self.subresources.iter().any(|s| s == "status")
    }

    pub fn is_custom(&self) -> bool {
        self.schema.is_some()
    }

    /// The storage key shared by every version of this resource.
    pub fn storage_key(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }

    /// Whether `other` is stored under the same key (as [`ResourceType::storage_key`] says,
    /// without building it).
    pub fn same_storage(&self, other: &ResourceType) -> bool {
        self.group == other.group && self.plural == other.plural
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Whether kube-apiserver maintains `metadata.generation` for this kind.
    pub fn tracks_generation(&self) -> bool {
        self.is_custom()
            || matches!(
                (self.group.as_str(), self.kind.as_str()),
                ("", "Pod")
                    | ("apps", _)
                    | ("batch", _)
                    | ("networking.k8s.io", "Ingress")
                    | ("networking.k8s.io", "NetworkPolicy")
                    | ("discovery.k8s.io", "EndpointSlice")
                    | ("policy", _)
                    | ("autoscaling", _)
                    | ("apiextensions.k8s.io", _)
            )
    }

    /// Whether a PUT of a missing object creates it (kube-apiserver's AllowCreateOnUpdate).
    pub fn allows_create_on_update(&self) -> bool {
        matches!(
            (self.group.as_str(), self.kind.as_str()),
            ("", "Endpoints") | ("", "Event") | ("events.k8s.io", "Event")
        )
    }
}

const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// One row of the built-in table: group, version, kind, plural, short names, namespaced,
/// subresources, categories.
type BuiltinRow = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    bool,
    &'static [&'static str],
    &'static [&'static str],
);

const BUILTINS: &[BuiltinRow] = &[
    (
        "",
        "v1",
        "Namespace",
        "namespaces",
        &["ns"],
        false,
        &["status"],
        &[],
    ),
    ("", "v1", "Node", "nodes", &["no"], false, &["status"], &[]),
    (
        "",
        "v1",
        "Pod",
        "pods",
        &["po"],
        true,
        &["status", "log"],
        &["all"],
    ),
    (
        "",
        "v1",
        "Service",
        "services",
        &["svc"],
        true,
        &["status"],
        &["all"],
    ),
    ("", "v1", "Endpoints", "endpoints", &["ep"], true, &[], &[]),
    ("", "v1", "ConfigMap", "configmaps", &["cm"], true, &[], &[]),
    ("", "v1", "Secret", "secrets", &[], true, &[], &[]),
    (
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        &["sa"],
        true,
        &[],
        &[],
    ),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        &["pvc"],
        true,
        &["status"],
        &[],
    ),
    ("", "v1", "Event", "events", &["ev"], true, &[], &[]),
    (
        "apps",
        "v1",
        "Deployment",
        "deployments",
        &["deploy"],
        true,
        &["status", "scale"],
        &["all"],
    ),
    (
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        &["rs"],
        true,
        &["status", "scale"],
        &["all"],
    ),
    (
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        &["sts"],
        true,
        &["status", "scale"],
        &["all"],
    ),
    (
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        &["ds"],
        true,
        &["status"],
        &["all"],
    ),
    (
        "batch",
        "v1",
        "Job",
        "jobs",
        &[],
        true,
        &["status"],
        &["all"],
    ),
    (
        "batch",
        "v1",
        "CronJob",
        "cronjobs",
        &["cj"],
        true,
        &["status"],
        &["all"],
    ),
    (
        "networking.k8s.io",
        "v1",
        "Ingress",
        "ingresses",
        &["ing"],
        true,
        &["status"],
        &[],
    ),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        &["netpol"],
        true,
        &[],
        &[],
    ),
    (
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        &[],
        true,
        &[],
        &[],
    ),
    (
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        &[],
        true,
        &[],
        &[],
    ),
    (
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        &["ev"],
        true,
        &[],
        &[],
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        &["pdb"],
        true,
        &["status"],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        &[],
        true,
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        &[],
        true,
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        &[],
        false,
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        &[],
        false,
        &[],
        &[],
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        &["crd", "crds"],
        false,
        &["status"],
        &["api-extensions"],
    ),
];

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn builtin_row(row: &BuiltinRow) -> ResourceType {
    let (group, version, kind, plural, short, namespaced, subresources, categories) = *row;
    let verbs: Vec<String> = if kind == "Namespace" || kind == "Node" {
        ALL_VERBS
            .iter()
            .filter(|v| **v != "deletecollection" || kind == "Node")
            .map(|v| v.to_string())
            .collect()
    } else {
        strings(ALL_VERBS)
    };
    ResourceType {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        short_names: strings(short),
        namespaced,
        subresources: strings(subresources),
        verbs,
        categories: strings(categories),
        storage_version: version.into(),
        schema: None,
        printer_columns: Vec::new(),
    }
}

/// Every built-in resource type, in discovery order.
pub fn builtins() -> Vec<ResourceType> {
    BUILTINS.iter().map(builtin_row).collect()
}

/// The built-in resource type of a group and kind.
pub fn builtin(group: &str, kind: &str) -> Option<ResourceType> {
    BUILTINS
        .iter()
        .find(|row| row.0 == group && row.2 == kind)
        .map(builtin_row)
}

/// The served resource types of a cluster: built-ins plus those of established CRDs.
#[derive(Debug, Clone)]
pub struct Registry {
    builtin: Vec<ResourceType>,
    /// CRD name -> its served versions (storage version first).
    custom: BTreeMap<String, Vec<ResourceType>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            builtin: builtins(),
            custom: BTreeMap::new(),
        }
    }
}

impl Registry {
    pub fn all(&self) -> impl Iterator<Item = &ResourceType> {
        self.builtin
            .iter()
            .chain(self.custom.values().flat_map(|versions| versions.iter()))
    }

    /// By group and kind, preferring the storage version.
    pub fn by_kind(&self, group: &str, kind: &str) -> Option<ResourceType> {
        self.all()
            .find(|rt| rt.group == group && rt.kind == kind && rt.version == rt.storage_version)
            .or_else(|| self.all().find(|rt| rt.group == group && rt.kind == kind))
            .cloned()
    }

    pub fn by_plural(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.all()
            .find(|rt| rt.group == group && rt.version == version && rt.plural == plural)
            .cloned()
    }

    /// The storage version's type of a storage key (`group/plural`).
    pub fn by_storage_key(&self, key: &str) -> Option<ResourceType> {
        self.all()
            .find(|rt| rt.version == rt.storage_version && rt.storage_key() == key)
            .cloned()
    }

    /// The CRD-served versions of a group/plural, if any (used when a CRD goes away).
    pub fn custom_types(&self, crd_name: &str) -> Option<&[ResourceType]> {
        self.custom.get(crd_name).map(Vec::as_slice)
    }

    /// Why the names of a CRD clash with something already served, if they do.
    pub fn name_conflict(&self, crd_name: &str, types: &[ResourceType]) -> Option<String> {
        let first = types.first()?;
        for rt in self.all() {
            let same_crd = self
                .custom
                .get(crd_name)
                .is_some_and(|own| own.iter().any(|o| o == rt));
            if same_crd || rt.group != first.group {
                continue;
            }
            if rt.plural == first.plural {
                return Some(format!("{:?} is already in use", first.plural));
            }
            if rt.kind == first.kind {
                return Some(format!("{:?} is already in use", first.kind));
            }
        }
        None
    }

    pub fn register_crd(&mut self, crd_name: &str, types: Vec<ResourceType>) {
        self.custom.insert(crd_name.to_string(), types);
    }

    pub fn unregister_crd(&mut self, crd_name: &str) {
        self.custom.remove(crd_name);
    }

    /// Every group and its versions (preferred first), in discovery order.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for rt in self.all() {
            if rt.group.is_empty() {
                continue;
            }
            match groups.iter_mut().find(|(g, _)| *g == rt.group) {
                Some((_, versions)) => {
                    if !versions.contains(&rt.version) {
                        if rt.version == rt.storage_version {
                            versions.insert(0, rt.version.clone());
                        } else {
                            versions.push(rt.version.clone());
                        }
                    }
                }
                None => groups.push((rt.group.clone(), vec![rt.version.clone()])),
            }
        }
        groups
    }
}

fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cursor = value;
    for key in path {
        cursor = cursor.get(key)?;
    }
    cursor.as_str()
}

/// The resource types a CustomResourceDefinition serves (storage version first), or why it is
/// unusable. The CRD is assumed validated already.
pub fn crd_resource_types(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let group = str_at(spec, &["group"]).unwrap_or_default();
    let names = &spec["names"];
    let kind = str_at(names, &["kind"]).unwrap_or_default();
    let plural = str_at(names, &["plural"]).unwrap_or_default();
    let singular = str_at(names, &["singular"])
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let short_names: Vec<String> = names["shortNames"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let categories: Vec<String> = names["categories"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let namespaced = str_at(spec, &["scope"]) != Some("Cluster");
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or_default()
        .to_string();
    let mut types: Vec<ResourceType> = versions
        .iter()
        .filter(|v| v["served"].as_bool() != Some(false))
        .map(|v| {
            let mut subresources = Vec::new();
            if v["subresources"].get("status").is_some() {
                subresources.push("status".to_string());
            }
            if v["subresources"].get("scale").is_some() {
                subresources.push("scale".to_string());
            }
            let schema = v["schema"].get("openAPIV3Schema").cloned().unwrap_or_else(
                || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            );
            let printer_columns = v["additionalPrinterColumns"]
                .as_array()
                .map(|cols| cols.iter().map(printer_column).collect())
                .unwrap_or_default();
            ResourceType {
                group: group.into(),
                version: v["name"].as_str().unwrap_or_default().into(),
                kind: kind.into(),
                plural: plural.into(),
                singular: singular.clone(),
                short_names: short_names.clone(),
                namespaced,
                subresources,
                verbs: strings(ALL_VERBS),
                categories: categories.clone(),
                storage_version: storage_version.clone(),
                schema: Some(Arc::new(schema)),
                printer_columns,
            }
        })
        .collect();
    types.sort_by_key(|rt| rt.version != storage_version);
    types
}

fn printer_column(col: &Value) -> PrinterColumn {
    let text = |key: &str| col[key].as_str().unwrap_or_default().to_string();
    PrinterColumn {
        name: text("name"),
        type_: text("type"),
        format: text("format"),
        description: text("description"),
        priority: col["priority"].as_i64().unwrap_or(0),
        json_path: text("jsonPath"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_have_kubernetes_names() {
        let cases = [
            ("", "ConfigMap", "configmaps", "v1", true, vec!["cm"]),
            (
                "apps",
                "Deployment",
                "deployments",
                "apps/v1",
                true,
                vec!["deploy"],
            ),
            ("", "Namespace", "namespaces", "v1", false, vec!["ns"]),
            (
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                "customresourcedefinitions",
                "apiextensions.k8s.io/v1",
                false,
                vec!["crd", "crds"],
            ),
        ];
        for (group, kind, plural, api_version, namespaced, short) in cases {
            let rt = builtin(group, kind).expect("built in");
            assert_eq!(rt.plural, plural);
            assert_eq!(rt.api_version(), api_version);
            assert_eq!(rt.namespaced, namespaced);
            assert_eq!(rt.short_names, short);
        }
        assert!(
            builtin("", "Pod")
                .expect("pods")
                .subresources
                .contains(&"log".to_string())
        );
        assert!(
            !builtin("", "Namespace")
                .expect("ns")
                .verbs
                .contains(&"deletecollection".to_string())
        );
    }

    #[test]
    fn crd_serves_its_versions_storage_first() {
        let crd = json!({
            "metadata": {"name": "combs.comb.internal"},
            "spec": {
                "group": "comb.internal",
                "scope": "Namespaced",
                "names": {"kind": "Comb", "plural": "combs", "shortNames": ["cb"]},
                "versions": [
                    {"name": "v1alpha1", "served": true, "storage": false},
                    {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                     "additionalPrinterColumns": [{"name": "Phase", "type": "string", "jsonPath": ".status.phase"}]},
                    {"name": "v0", "served": false, "storage": false}
                ]
            }
        });
        let types = crd_resource_types(&crd);
        assert_eq!(types.len(), 2);
        assert_eq!(types[0].version, "v1");
        assert_eq!(types[0].singular, "comb");
        assert!(types[0].has_status());
        assert!(!types[1].has_status());
        assert_eq!(types[0].printer_columns[0].json_path, ".status.phase");
        let mut registry = Registry::default();
        registry.register_crd("combs.comb.internal", types);
        assert_eq!(
            registry
                .by_kind("comb.internal", "Comb")
                .expect("served")
                .version,
            "v1"
        );
        assert!(
            registry
                .by_plural("comb.internal", "v1alpha1", "combs")
                .is_some()
        );
    }
}
