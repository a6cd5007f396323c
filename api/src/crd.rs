//! The Comb CustomResourceDefinition, for a configurable API group.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use crate::comb::{KIND, NO_RESOURCE_RECONCILIATION, PLURAL, VERSION};
use crate::layer::{LAYER_KIND, LAYER_PLURAL, LAYER_SHORT_NAME};
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

/// The CRD of the CombLayer resource in `group` (docs/adr/0005-layers-on-demand.md):
/// cluster-scoped, with the status subresource the controller alone writes, short name `cmbl`,
/// and the columns a developer looks at (template, phase, expiry, Combs ready of total, age).
/// CEL rules refuse at the door a spec that names both or neither of `context` and
/// `kubeconfigSecret`, or both `ttl` and `expiresAt`.
pub fn layer_crd(group: &str) -> Result<Value> {
    check_group(group)?;
    let string = |description: &str| json!({"type": "string", "description": description});
    let strings = |description: &str| json!({"type": "array", "description": description, "items": {"type": "string"}});
    let borrow = json!({
        "type": "object",
        "description": "Which Combs of which layer the layer gets, as a configuration layer's borrow; its template bounds every key.",
        "required": ["from"],
        "properties": {
            "from": string("The layer borrowed from; the template's borrowFrom lists those allowed."),
            "namespace": string("The peers' namespace; default: each Comb's own."),
            "combs": strings("Patterns of the Combs of `from` the layer gets (default all)."),
            "local": strings("Patterns of the Combs that run in the layer instead of borrowing."),
            "replicate": {
                "type": "array",
                "description": "Secrets and ConfigMaps copied from the peer's namespace; the template's replicate lists those allowed.",
                "items": {
                    "type": "object",
                    "required": ["kind", "name"],
                    "properties": {
                        "kind": {"type": "string", "enum": ["Secret", "ConfigMap"]},
                        "name": {"type": "string"}
                    }
                }
            },
            "fallback": strings("Where the borrowers go while `from` is unhealthy; the template's fallback lists those allowed.")
        }
    });
    let spec = json!({
        "type": "object",
        "description": "What the layer is: a template of the controller's configuration, narrowed.",
        "required": ["template"],
        "properties": {
            "template": string("A layerTemplates entry of the controller's configuration."),
            "context": string("A kube context of the controller's kubeconfig (one of the template's contexts)."),
            "kubeconfigSecret": {
                "type": "object",
                "description": "A Secret holding a kubeconfig for the layer's cluster (one of the template's kubeconfigSecrets).",
                "required": ["namespace", "name"],
                "properties": {
                    "namespace": {"type": "string"},
                    "name": {"type": "string"},
                    "key": string("The key of the Secret's data holding the kubeconfig (default kubeconfig).")
                }
            },
            "namespaces": strings("The namespaces the layer manages; each matches a pattern of the template's namespaces."),
            "borrow": borrow,
            "stubs": strings("Patterns of the Combs built as their stub."),
            "ttl": string("How long the layer lives from its creation, e.g. 8h (at most the template's maxTTL)."),
            "expiresAt": {"type": "string", "format": "date-time", "description": "When the layer goes (at most the template's maxTTL after its creation)."}
        },
        "x-kubernetes-validations": [
            {
                "rule": "has(self.context) != has(self.kubeconfigSecret)",
                "message": "name the layer's cluster once: context or kubeconfigSecret"
            },
            {
                "rule": "!(has(self.ttl) && has(self.expiresAt))",
                "message": "give ttl or expiresAt, not both"
            }
        ]
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
    let count = |description: &str| json!({"type": "integer", "format": "int32", "description": description});
    let status = json!({
        "type": "object",
        "description": "What the controller recorded of the layer.",
        "properties": {
            "phase": {"type": "string"},
            "conditions": {"type": "array", "items": condition},
            "observedGeneration": {"type": "integer", "format": "int64"},
            "expiresAt": {"type": "string", "format": "date-time"},
            "combs": {
                "type": "object",
                "description": "The layer's Combs by phase.",
                "properties": {
                    "total": count("Every Comb of the layer."),
                    "ready": count("Running."),
                    "pending": count("Pending."),
                    "failed": count("Error, Blocked or NeedsConfig.")
                }
            },
            "managedResources": {
                "type": "array",
                "description": "What comb made for the layer (its Combs, the namespaces it created), each with its uid: all that removing the layer deletes.",
                "items": {
                    "type": "object",
                    "required": ["apiVersion", "kind", "name"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "namespace": {"type": "string"},
                        "name": {"type": "string"},
                        "uid": {"type": "string"}
                    }
                }
            }
        }
    });
    Ok(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{LAYER_PLURAL}.{group}")},
        "spec": {
            "group": group,
            "names": {
                "kind": LAYER_KIND,
                "listKind": format!("{LAYER_KIND}List"),
                "plural": LAYER_PLURAL,
                "singular": LAYER_KIND.to_lowercase(),
                "shortNames": [LAYER_SHORT_NAME],
                "categories": ["comb"]
            },
            "scope": "Cluster",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Template", "type": "string", "jsonPath": ".spec.template"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Expires", "type": "date", "jsonPath": ".status.expiresAt"},
                    {"name": "Ready", "type": "integer", "jsonPath": ".status.combs.ready"},
                    {"name": "Combs", "type": "integer", "jsonPath": ".status.combs.total"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    // `-o wide` only.
                    {"name": "Context", "type": "string", "priority": 1, "jsonPath": ".spec.context"},
                    {"name": "From", "type": "string", "priority": 1, "jsonPath": ".spec.borrow.from"},
                    {"name": "Message", "type": "string", "priority": 1, "jsonPath": ".status.conditions[?(@.type==\"Ready\")].message"}
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "description": "A layer made on demand from a template of the comb controller's configuration.",
                        "required": ["spec"],
                        "properties": {"spec": spec, "status": status},
                        // The layer's name is a label value on the Combs made for it.
                        "x-kubernetes-validations": [{
                            "rule": "size(self.metadata.name) <= 63",
                            "message": "a layer's name is a label value on the Combs made for it, so it has at most 63 characters"
                        }]
                    }
                }
            }]
        }
    }))
}

/// Every CRD comb serves in `group`, in the order `comb crd` prints them: the Comb's, then the
/// CombLayer's.
pub fn crds(group: &str) -> Result<Vec<Value>> {
    Ok(vec![crd(group)?, layer_crd(group)?])
}

/// [`layer_crd`] as the typed k8s-openapi object.
pub fn layer_custom_resource_definition(group: &str) -> Result<CustomResourceDefinition> {
    Ok(serde_json::from_value(layer_crd(group)?)?)
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
    fn the_layer_crd_is_cluster_scoped_with_the_columns_a_developer_reads() {
        let crd = layer_crd("comb.internal").unwrap();
        assert_eq!(crd["metadata"]["name"], "comblayers.comb.internal");
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["cmbl"]));
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["subresources"], json!({"status": {}}));
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"].is_null())
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            columns,
            ["Template", "Phase", "Expires", "Ready", "Combs", "Age"]
        );
        let typed = layer_custom_resource_definition("comb.example.com").unwrap();
        assert_eq!(typed.spec.names.kind, "CombLayer");
        assert_eq!(crds("comb.internal").unwrap().len(), 2);
        assert!(layer_crd("Comb").is_err());
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
