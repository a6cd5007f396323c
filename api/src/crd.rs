//! The Comb CustomResourceDefinition, for a configurable API group.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use crate::comb::{KIND, NO_RESOURCE_RECONCILIATION, PLURAL, VERSION};
use crate::{Error, Result};

/// The upstream classes a Comb may name (`spec.upstream.class`): the short names and the Perl
/// ones.
pub const UPSTREAM_CLASSES: [&str; 4] = [
    "K8s",
    "Static",
    "Kubernetes::Comb::Upstream::K8s",
    "Kubernetes::Comb::Upstream::Static",
];

/// `name` or `namespace/name`: a DNS label, then optionally `/` and a DNS subdomain.
const DEPENDENCY_RULE: &str =
    "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(/[a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$')";
/// A DNS-1123 label (its length is the schema's `maxLength`).
const ENDPOINT_NAME_RULE: &str = "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')";

fn upstream_rule() -> String {
    let names: Vec<String> = UPSTREAM_CLASSES
        .iter()
        .map(|name| format!("'{name}'"))
        .collect();
    format!("!has(self.class) || self.class in [{}]", names.join(", "))
}

/// The CRD of the Comb resource in `group`, as JSON in a readable key order (what `comb crd`
/// prints). Fails on a group the API server would refuse. CEL rules
/// (`x-kubernetes-validations`) refuse at the door what the schema can say: a name too long to
/// be a label value, malformed `dependsOn` entries, endpoint names that are not DNS labels,
/// an unknown upstream class.
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
                "maxItems": 64,
                "items": {
                    "type": "string",
                    // A namespace (63) and a name (253): the bounds keep the rule's cost estimate
                    // inside the API server's budget.
                    "maxLength": 317,
                    "x-kubernetes-validations": [{
                        "rule": DEPENDENCY_RULE,
                        "message": "each dependsOn entry is a Comb name or namespace/name"
                    }]
                }
            },
            "config": {
                "type": "object",
                "description": "Free-form configuration for the class. Never credentials. `endpoints`, when present, is the list of endpoint declarations.",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "endpoints": {
                        "type": "array",
                        "maxItems": 64,
                        "items": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                            "properties": {
                                "name": {
                                    "type": "string",
                                    "maxLength": 63,
                                    "x-kubernetes-validations": [{
                                        "rule": ENDPOINT_NAME_RULE,
                                        "message": "an endpoint name is a DNS-1123 label (lowercase letters, digits and -, alphanumeric at both ends), as the name of a Service port must be"
                                    }]
                                }
                            }
                        }
                    }
                }
            },
            "enabled": {
                "type": "boolean",
                "description": "Unset: automatic (off for optional classes); false: off; true: on."
            },
            "upstream": {
                "type": "object",
                "description": "Where the service is borrowed from: {class: ..., ...}. null means local.",
                "nullable": true,
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"class": {"type": "string", "maxLength": 128}},
                "x-kubernetes-validations": [{
                    "rule": upstream_rule(),
                    "message": format!("spec.upstream.class is one of {}", UPSTREAM_CLASSES.join(", "))
                }]
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
            "name": {"type": "string"},
            "uid": string("The uid of the object comb made or was handed for this Comb: the record that makes it the Comb's")
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
                "singular": KIND.to_lowercase(),
                // `kubectl get cmb`; `kubectl get comb` lists every kind of the category (only
                // Combs today). Not `all`: that category is for built-in workloads.
                "shortNames": ["cmb"],
                "categories": ["comb"]
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
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    // `-o wide` only.
                    {"name": "Class", "type": "string", "priority": 1, "jsonPath": ".spec.class"},
                    {"name": "Upstream", "type": "string", "priority": 1, "jsonPath": ".status.upstream.context"},
                    {"name": "Message", "type": "string", "priority": 1, "jsonPath": ".status.conditions[?(@.type==\"Ready\")].message"}
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "description": "A Comb: a named set of Kubernetes parts that deploys itself, reports its status and publishes its endpoints.",
                        "properties": {"spec": spec, "status": status},
                        // The API server checks the name is a DNS subdomain; a Comb's name is
                        // also a label value on everything it deploys.
                        "x-kubernetes-validations": [{
                            "rule": "size(self.metadata.name) <= 63",
                            "message": "a Comb name becomes a label value on everything it deploys, so it has at most 63 characters"
                        }]
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
            "the group '{group}' is not a DNS subdomain with a dot (e.g. comb.internal), as the API server requires of a CRD group"
        )));
    }
    Ok(())
}

#[cfg(test)]
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
                ".metadata.creationTimestamp",
                ".spec.class",
                ".status.upstream.context",
                ".status.conditions[?(@.type==\"Ready\")].message"
            ]
        );
        let wide_only: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"] == 1)
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(wide_only, ["Class", "Upstream", "Message"]);
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["cmb"]));
        assert_eq!(crd["spec"]["names"]["categories"], json!(["comb"]));
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
