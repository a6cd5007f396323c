//! Validation every kube-apiserver applies to object metadata, before kind-specific rules.

use serde_json::Value;

use crate::api_error::FieldError;
use crate::resources::ResourceType;
use crate::selectors::{is_dns_label, is_dns_subdomain, label_key_error, label_value_error};

const DNS_SUBDOMAIN_RULE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS_LABEL_RULE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SERVICE_NAME_RULE: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

/// How names of a kind are checked (kube-apiserver's ValidateNameFunc per kind).
fn name_error(rt: &ResourceType, name: &str) -> Option<String> {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Namespace") => {
            if name.len() > 63 {
                Some("must be no more than 63 characters".into())
            } else if !is_dns_label(name) {
                Some(DNS_LABEL_RULE.into())
            } else {
                None
            }
        }
        ("", "Service") => {
            let starts_alpha = name.chars().next().is_some_and(|c| c.is_ascii_lowercase());
            if name.len() > 63 {
                Some("must be no more than 63 characters".into())
            } else if !is_dns_label(name) || !starts_alpha {
                Some(SERVICE_NAME_RULE.into())
            } else {
                None
            }
        }
        // RBAC objects and events only need a valid path segment; custom resources are
        // DNS-1123 subdomains like most kinds (apiextensions' NameIsDNSSubdomain).
        ("rbac.authorization.k8s.io", _) | ("", "Event") | ("events.k8s.io", _) => {
            path_segment_error(name)
        }
        _ => {
            if name.len() > 253 {
                Some("must be no more than 253 characters".into())
            } else if !is_dns_subdomain(name) {
                Some(DNS_SUBDOMAIN_RULE.into())
            } else {
                None
            }
        }
    }
}

fn path_segment_error(name: &str) -> Option<String> {
    if name == "." || name == ".." {
        return Some(format!("may not be '{name}'"));
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            return Some(format!("may not contain '{bad}'"));
        }
    }
    None
}

/// Field errors of an object's metadata as it is about to be stored (name already resolved).
pub fn validate_metadata(rt: &ResourceType, object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let metadata = &object["metadata"];
    let name = metadata["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        errors.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else if let Some(rule) = name_error(rt, name) {
        errors.push(FieldError::invalid(
            "metadata.name",
            &metadata["name"],
            &rule,
        ));
    }
    if let Some(labels) = metadata.get("labels").filter(|l| !l.is_null()) {
        match labels.as_object() {
            Some(labels) => {
                for (key, value) in labels {
                    if let Some(e) = label_key_error(key) {
                        errors.push(FieldError::invalid(
                            "metadata.labels",
                            &Value::String(key.clone()),
                            &e,
                        ));
                    }
                    match value.as_str() {
                        Some(v) => {
                            if let Some(e) = label_value_error(v) {
                                errors.push(FieldError::invalid("metadata.labels", value, &e));
                            }
                        }
                        None => errors.push(FieldError::invalid(
                            format!("metadata.labels.{key}"),
                            value,
                            "must be a string",
                        )),
                    }
                }
            }
            None => errors.push(FieldError::invalid(
                "metadata.labels",
                labels,
                "must be a map of strings",
            )),
        }
    }
    if let Some(annotations) = metadata.get("annotations").filter(|a| !a.is_null()) {
        match annotations.as_object() {
            Some(annotations) => {
                let mut total = 0;
                for (key, value) in annotations {
                    total += key.len() + value.as_str().map_or(0, str::len);
                    if let Some(e) = label_key_error(key) {
                        errors.push(FieldError::invalid(
                            "metadata.annotations",
                            &Value::String(key.clone()),
                            &e,
                        ));
                    }
                    if !value.is_string() {
                        errors.push(FieldError::invalid(
                            format!("metadata.annotations.{key}"),
                            value,
                            "must be a string",
                        ));
                    }
                }
                if total > 256 * 1024 {
                    errors.push(FieldError {
                        reason: "FieldValueTooLong",
                        field: "metadata.annotations".into(),
                        message: "Too long: must have at most 262144 bytes".into(),
                    });
                }
            }
            None => errors.push(FieldError::invalid(
                "metadata.annotations",
                annotations,
                "must be a map of strings",
            )),
        }
    }
    if let Some(refs) = metadata["ownerReferences"].as_array() {
        for (i, owner) in refs.iter().enumerate() {
            for field in ["apiVersion", "kind", "name", "uid"] {
                if owner[field].as_str().is_none_or(str::is_empty) {
                    errors.push(FieldError::invalid(
                        format!("metadata.ownerReferences[{i}].{field}"),
                        &owner[field],
                        &format!("{field} must not be empty"),
                    ));
                }
            }
        }
        let controllers = refs
            .iter()
            .filter(|r| r["controller"].as_bool() == Some(true))
            .count();
        if controllers > 1 {
            errors.push(FieldError::invalid(
                "metadata.ownerReferences",
                &Value::Array(refs.clone()),
                "Only one reference can have Controller set to true",
            ));
        }
    }
    if let Some(finalizers) = metadata["finalizers"].as_array() {
        for (i, f) in finalizers.iter().enumerate() {
            let text = f.as_str().unwrap_or_default();
            if let Some(e) = label_key_error(text) {
                errors.push(FieldError::invalid(
                    format!("metadata.finalizers[{i}]"),
                    f,
                    &e,
                ));
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin;
    use serde_json::json;

    #[test]
    fn names_follow_each_kinds_rule() {
        let cm = builtin("", "ConfigMap").expect("cm");
        let ns = builtin("", "Namespace").expect("ns");
        let svc = builtin("", "Service").expect("svc");
        let cases = [
            (&cm, "web.config", true),
            (&cm, "Web", false),
            (&cm, "-web", false),
            (&ns, "team-a", true),
            (&ns, "team.a", false),
            (&svc, "web", true),
            (&svc, "1web", false),
        ];
        for (rt, name, valid) in cases {
            let errors = validate_metadata(rt, &json!({"metadata": {"name": name}}));
            assert_eq!(errors.is_empty(), valid, "{} {name}: {errors:?}", rt.kind);
        }
    }

    #[test]
    fn labels_and_owners_are_checked() {
        let cm = builtin("", "ConfigMap").expect("cm");
        let errors = validate_metadata(
            &cm,
            &json!({"metadata": {"name": "x", "labels": {"ok": "yes", "bad key": "v", "k": "-v"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": ""}]}}),
        );
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "metadata.labels",
                "metadata.labels",
                "metadata.ownerReferences[0].uid"
            ]
        );
    }
}
