//! CustomResourceDefinition rules: defaulting, validation and the status a real apiserver's
//! CRD controllers write (NamesAccepted, Established, Terminating).

use serde_json::{Value, json};

use crate::api_error::FieldError;
use crate::meta;

/// The finalizer kube-apiserver puts on every CRD so its objects go first.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Defaulting of a CRD on create and update, as the apiextensions apiserver does it.
pub fn default_crd(crd: &mut Value) {
    let spec = &mut crd["spec"];
    if !spec.is_object() {
        return;
    }
    let kind = spec["names"]["kind"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if spec["names"]["singular"].as_str().is_none_or(str::is_empty) && spec["names"].is_object() {
        spec["names"]["singular"] = json!(kind.to_lowercase());
    }
    if spec["names"]["listKind"].as_str().is_none_or(str::is_empty) && spec["names"].is_object() {
        spec["names"]["listKind"] = json!(format!("{kind}List"));
    }
    if spec["conversion"].is_null() {
        spec["conversion"] = json!({"strategy": "None"});
    }
}

/// Adds the cleanup finalizer at creation.
pub fn add_cleanup_finalizer(crd: &mut Value) {
    let mut finalizers = meta::finalizers(crd);
    if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
        finalizers.push(CLEANUP_FINALIZER.to_string());
        meta::set_finalizers(crd, &finalizers);
    }
}

/// Field errors of a CRD (the checks that keep a CRD servable).
pub fn validate_crd(crd: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = spec["names"]["plural"].as_str().unwrap_or_default();
    let kind = spec["names"]["kind"].as_str().unwrap_or_default();
    if group.is_empty() {
        errors.push(FieldError::required("spec.group", ""));
    } else if !group.contains('.') {
        errors.push(FieldError::invalid(
            "spec.group",
            &spec["group"],
            "should be a domain with at least one dot",
        ));
    }
    if plural.is_empty() {
        errors.push(FieldError::required("spec.names.plural", ""));
    }
    if kind.is_empty() {
        errors.push(FieldError::required("spec.names.kind", ""));
    }
    let name = meta::name(crd);
    let expected = format!("{plural}.{group}");
    if !plural.is_empty() && !group.is_empty() && name != expected {
        errors.push(FieldError::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match spec["scope"].as_str() {
        Some("Namespaced" | "Cluster") => {}
        _ => errors.push(FieldError::unsupported(
            "spec.scope",
            &spec["scope"],
            &["Cluster", "Namespaced"],
        )),
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        errors.push(FieldError::invalid(
            "spec.versions",
            &spec["versions"],
            "must have exactly one version marked as storage version",
        ));
    } else {
        let storage = versions
            .iter()
            .filter(|v| v["storage"].as_bool() == Some(true))
            .count();
        if storage != 1 {
            errors.push(FieldError::invalid(
                "spec.versions",
                &spec["versions"],
                "must have exactly one version marked as storage version",
            ));
        }
        for (i, version) in versions.iter().enumerate() {
            if version["name"].as_str().is_none_or(str::is_empty) {
                errors.push(FieldError::required(format!("spec.versions[{i}].name"), ""));
            }
            if version["schema"]["openAPIV3Schema"].is_null() {
                errors.push(FieldError::required(
                    format!("spec.versions[{i}].schema.openAPIV3Schema"),
                    "schemas are required",
                ));
            }
        }
    }
    errors
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({
        "type": type_,
        "status": status,
        "lastTransitionTime": meta::now(),
        "reason": reason,
        "message": message,
    })
}

/// The status the CRD controllers give a CRD: names accepted (or the conflict) and established.
pub fn served_status(crd: &Value, name_conflict: Option<&str>) -> Value {
    let names = crd["spec"]["names"].clone();
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .map(|versions| {
            versions
                .iter()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    let mut previously_stored: Vec<Value> = crd["status"]["storedVersions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for version in stored {
        if !previously_stored.contains(&version) {
            previously_stored.push(version);
        }
    }
    let conditions = match name_conflict {
        None => vec![
            condition("NamesAccepted", "True", "NoConflicts", "no conflicts found"),
            condition(
                "Established",
                "True",
                "InitialNamesAccepted",
                "the initial names have been accepted",
            ),
        ],
        Some(why) => vec![
            condition("NamesAccepted", "False", "NameConflict", why),
            condition(
                "Established",
                "False",
                "NotAccepted",
                "not all names are accepted",
            ),
        ],
    };
    let accepted = if name_conflict.is_some() {
        json!({"plural": "", "kind": ""})
    } else {
        names
    };
    json!({
        "conditions": conditions,
        "acceptedNames": accepted,
        "storedVersions": previously_stored,
    })
}

/// Marks a CRD's status as terminating while its objects are removed.
pub fn set_terminating(crd: &mut Value) {
    let terminating = condition(
        "Terminating",
        "True",
        "InstanceDeletionInProgress",
        "CustomResource deletion is in progress",
    );
    let conditions = crd["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut kept: Vec<Value> = conditions
        .into_iter()
        .filter(|c| c["type"] != "Terminating")
        .collect();
    kept.push(terminating);
    if crd["status"].is_object() {
        crd["status"]["conditions"] = Value::Array(kept);
    } else {
        crd["status"] = json!({"conditions": kept});
    }
}

pub fn is_established(crd: &Value) -> bool {
    crd["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(name: &str) -> Value {
        json!({
            "metadata": {"name": name},
            "spec": {
                "group": "comb.internal",
                "scope": "Namespaced",
                "names": {"kind": "Comb", "plural": "combs"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": {"type": "object"}}}]
            }
        })
    }

    #[test]
    fn valid_crd_is_defaulted_and_established() {
        let mut object = crd("combs.comb.internal");
        assert!(validate_crd(&object).is_empty());
        default_crd(&mut object);
        assert_eq!(object["spec"]["names"]["singular"], "comb");
        assert_eq!(object["spec"]["names"]["listKind"], "CombList");
        let status = served_status(&object, None);
        assert_eq!(status["storedVersions"], json!(["v1"]));
        object["status"] = status;
        assert!(is_established(&object));
    }

    #[test]
    fn name_must_be_plural_dot_group() {
        let errors = validate_crd(&crd("combs"));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "metadata.name");
    }
}
