//! The Comb CustomResourceDefinition, for a configurable API group.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use crate::comb::{KIND, NO_RESOURCE_RECONCILIATION, PLURAL, VERSION};
use crate::{Error, Result};

/// The CRD of the Comb resource in `group`, as JSON in a readable key order (what `comb crd`
/// prints). Fails on a group the API server would refuse.
pub fn crd(group: &str) -> Result<Value> {
    check_group(group)?;
    let string = |description: &str| json!({"type": "string", "description": description});
    let time = |description: &str| json!({"type": "string", "format": "date-time", "description": description});
    let spec = json!({
        "type": "object",
        "description": "What the Comb is: its class, dependencies, configuration and upstream.",
        "required": ["class"],
        "properties": {
            "class": string("Class of the Comb, a name in the controller's class registry (e.g. Manifests); a stub is just another class"),
            "dependsOn": {
                "type": "array",
                "description": "Combs this one needs, each name or namespace/name.",
                "items": {"type": "string"}
            },
            "config": {
                "type": "object",
                "description": "Free-form configuration for the class. Never credentials.",
                "x-kubernetes-preserve-unknown-fields": true
            },
            "enabled": {
                "type": "boolean",
                "description": "Unset: automatic (off for optional classes); false: off; true: on."
            },
            "upstream": {
                "type": "object",
                "description": "Where the service is borrowed from: {class: ..., ...}. null means local.",
                "nullable": true,
                "x-kubernetes-preserve-unknown-fields": true
            },
            "maintenance": {
                "type": "string",
                "description": "NoResourceReconciliation stops applying, pruning and restoring the Comb's resources.",
                "enum": [NO_RESOURCE_RECONCILIATION]
            },
            "orphanResources": {
                "type": "array",
                "description": "Kinds deleted with the Comb when they carry its labels, e.g. {kind: Job, version: batch/v1}.",
                "items": {
                    "type": "object",
                    "required": ["kind", "version"],
                    "properties": {
                        "kind": {"type": "string"},
                        "version": string("group/version, or a bare version matching every group that serves it")
                    }
                }
            }
        }
    });
    let condition = json!({
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"}
        }
    });
    let endpoint = json!({
        "type": "object",
        "required": ["name", "port"],
        "properties": {
            "name": {"type": "string"},
            "protocol": {"type": "string"},
            "port": {"type": "integer", "format": "int32"},
            "cluster": string("host:port to use from inside the Comb's cluster"),
            "external": string("host:port to use from elsewhere")
        }
    });
    let resource = json!({
        "type": "object",
        "required": ["apiVersion", "kind", "name"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "namespace": {"type": "string"},
            "name": {"type": "string"}
        }
    });
    let upstream = json!({
        "type": "object",
        "properties": {
            "class": {"type": "string"},
            "context": {"type": "string"},
            "reachable": {"type": "boolean"},
            "phase": {"type": "string"},
            "via": {
                "type": "array",
                "description": "The layers the service comes through, nearest first.",
                "items": {"type": "string"}
            },
            "observedAt": time("When the upstream was last observed.")
        }
    });
    let status = json!({
        "type": "object",
        "description": "What the last reconcile step recorded.",
        "properties": {
            "conditions": {"type": "array", "items": condition},
            "endpoints": {"type": "array", "items": endpoint},
            "managedResources": {"type": "array", "items": resource},
            "observedGeneration": {"type": "integer", "format": "int64"},
            "phase": {"type": "string"},
            "upstream": upstream
        }
    });
    Ok(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{group}")},
        "spec": {
            "group": group,
            "names": {
                "kind": KIND,
                "listKind": format!("{KIND}List"),
                "plural": PLURAL,
                "singular": KIND.to_lowercase()
            },
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Reason", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason"},
                    {"name": "Via", "type": "string", "jsonPath": ".status.upstream.via"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "description": "A Comb: a named set of Kubernetes parts that deploys itself, reports its status and publishes its endpoints.",
                        "properties": {"spec": spec, "status": status}
                    }
                }
            }]
        }
    }))
}

/// [`crd`] as the typed k8s-openapi object, e.g. to create it with a client.
pub fn custom_resource_definition(group: &str) -> Result<CustomResourceDefinition> {
    Ok(serde_json::from_value(crd(group)?)?)
}

/// A CRD group must be a DNS subdomain with at least one dot.
fn check_group(group: &str) -> Result<()> {
    if group.is_empty() {
        return Err(Error::CrdArgument(
            "group must be a non-empty string".into(),
        ));
    }
    let labels_ok = group.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    });
    if !labels_ok || !group.contains('.') || group.len() > 253 {
        return Err(Error::CrdArgument(format!(
            "the group '{group}' is no DNS subdomain with a dot (e.g. comb.internal), as the API server requires of a CRD group"
        )));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn default_group() {
        let crd = crd("comb.internal").unwrap();
        assert_eq!(crd["metadata"]["name"], "combs.comb.internal");
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["subresources"], json!({"status": {}}));
        let schema = &version["schema"]["openAPIV3Schema"]["properties"];
        assert_eq!(schema["spec"]["required"], json!(["class"]));
        assert_eq!(schema["spec"]["properties"]["upstream"]["nullable"], true);
        assert_eq!(
            schema["spec"]["properties"]["upstream"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert_eq!(
            schema["spec"]["properties"]["config"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        let status_keys: Vec<&String> = schema["status"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(
            status_keys,
            [
                "conditions",
                "endpoints",
                "managedResources",
                "observedGeneration",
                "phase",
                "upstream"
            ]
        );
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["jsonPath"].as_str().unwrap())
            .collect();
        assert_eq!(
            columns,
            [
                ".status.phase",
                ".status.conditions[?(@.type==\"Ready\")].reason",
                ".status.upstream.via",
                ".metadata.creationTimestamp"
            ]
        );
    }

    #[test]
    fn other_group_and_typed_form() {
        let typed = custom_resource_definition("comb.example.com").unwrap();
        assert_eq!(
            typed.metadata.name.as_deref(),
            Some("combs.comb.example.com")
        );
        assert_eq!(typed.spec.group, "comb.example.com");
        assert_eq!(typed.spec.names.list_kind.as_deref(), Some("CombList"));
        assert_eq!(typed.spec.names.singular.as_deref(), Some("comb"));
    }

    #[test]
    fn refuses_bad_groups() {
        assert_eq!(
            crd("").unwrap_err().to_string(),
            "crd: group must be a non-empty string"
        );
        for bad in ["comb", "Comb.internal", "comb..internal", "-a.b"] {
            assert!(crd(bad).is_err(), "{bad}");
        }
    }
}
