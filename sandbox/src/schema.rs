//! Structural schemas of custom resources, applied as kube-apiserver does on every write:
//! defaults filled in, `null`s of non-nullable fields and unknown fields pruned (unless
//! `x-kubernetes-preserve-unknown-fields`), then types, required fields, enums and bounds
//! validated. `unknown_fields` serves `fieldValidation=Strict`.

use serde_json::Value;

use crate::api_error::FieldError;
use crate::resources::ResourceType;

fn preserves_unknown(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"] == true
}

fn is_embedded(schema: &Value) -> bool {
    schema["x-kubernetes-embedded-resource"] == true
}

/// The schema of a map's child, if the schema knows it.
fn child_schema<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    schema["properties"]
        .get(key)
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

fn allows_any_child(schema: &Value) -> bool {
    preserves_unknown(schema) || schema["additionalProperties"] == true
}

/// Whether a key is object plumbing every resource (and embedded resource) may carry.
fn is_type_meta(key: &str, root: bool) -> bool {
    root && matches!(key, "apiVersion" | "kind" | "metadata")
}

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn walk_defaults_and_prune(schema: &Value, value: &mut Value, root: bool) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema["properties"].as_object() {
                for (key, property) in properties {
                    if !map.contains_key(key)
                        && let Some(default) = property.get("default")
                    {
                        map.insert(key.clone(), default.clone());
                    }
                }
            }
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                if is_type_meta(&key, root || is_embedded(schema)) {
                    continue;
                }
                match child_schema(schema, &key) {
                    Some(child) => {
                        let nullable = child["nullable"] == true;
                        if map.get(&key).is_some_and(Value::is_null) && !nullable {
                            map.remove(&key);
                        } else if let Some(v) = map.get_mut(&key) {
                            walk_defaults_and_prune(child, v, false);
                        }
                    }
                    None => {
                        if !allows_any_child(schema) {
                            map.remove(&key);
                        }
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|i| i.is_object()) {
                for item in items {
                    walk_defaults_and_prune(item_schema, item, false);
                }
            }
        }
        _ => {}
    }
}

/// Fills defaults and prunes what the schema does not declare.
pub fn default_and_prune(rt: &ResourceType, object: &mut Value) {
    if let Some(schema) = rt.schema.as_deref() {
        walk_defaults_and_prune(schema, object, true);
    }
}

fn collect_unknown(schema: &Value, value: &Value, path: &str, root: bool, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if is_type_meta(key, root || is_embedded(schema)) {
                    continue;
                }
                let child_path = join(path, key);
                match child_schema(schema, key) {
                    Some(child_schema) => {
                        collect_unknown(child_schema, child, &child_path, false, out)
                    }
                    None if allows_any_child(schema) => {}
                    None => out.push(child_path),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    collect_unknown(item_schema, item, &format!("{path}[{i}]"), false, out);
                }
            }
        }
        _ => {}
    }
}

/// Paths of fields the schema does not declare (`spec.foo`), for strict field validation.
pub fn unknown_fields(rt: &ResourceType, object: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(schema) = rt.schema.as_deref() {
        collect_unknown(schema, object, "", true, &mut out);
    }
    out
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_error(path: &str, value: &Value, wanted: &str) -> FieldError {
    let invalid = FieldError::invalid(
        path,
        &Value::String(type_name(value).into()),
        &format!(
            "{path} in body must be of type {wanted}: {:?}",
            type_name(value)
        ),
    );
    // Printed as any invalid value, but its own reason (field.TypeInvalid).
    FieldError {
        reason: "FieldValueTypeInvalid",
        ..invalid
    }
}

fn check(schema: &Value, value: &Value, path: &str, root: bool, errors: &mut Vec<FieldError>) {
    if value.is_null() {
        return;
    }
    let int_or_string = schema["x-kubernetes-int-or-string"] == true;
    if int_or_string {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            errors.push(type_error(path, value, "integer or string"));
        }
        return;
    }
    if let Some(wanted) = schema["type"].as_str() {
        let ok = match wanted {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            _ => true,
        };
        if !ok {
            errors.push(type_error(path, value, wanted));
            return;
        }
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        let shown: Vec<String> = allowed.iter().map(Value::to_string).collect();
        errors.push(FieldError {
            reason: "FieldValueNotSupported",
            field: path.to_string(),
            message: format!(
                "Unsupported value: {value}: supported values: {}",
                shown.join(", ")
            ),
        });
    }
    if let Some(number) = value.as_f64() {
        if let Some(min) = schema["minimum"].as_f64()
            && number < min
        {
            errors.push(FieldError::invalid(
                path,
                value,
                &format!("{path} in body should be greater than or equal to {min}"),
            ));
        }
        if let Some(max) = schema["maximum"].as_f64()
            && number > max
        {
            errors.push(FieldError::invalid(
                path,
                value,
                &format!("{path} in body should be less than or equal to {max}"),
            ));
        }
    }
    if let Some(text) = value.as_str() {
        let length = text.chars().count() as u64;
        if let Some(min) = schema["minLength"].as_u64()
            && length < min
        {
            errors.push(FieldError::invalid(
                path,
                value,
                &format!("{path} in body should be at least {min} chars long"),
            ));
        }
        if let Some(max) = schema["maxLength"].as_u64()
            && length > max
        {
            errors.push(FieldError {
                reason: "FieldValueTooLong",
                field: path.to_string(),
                message: format!("Too long: may not be more than {max} bytes"),
            });
        }
    }
    match value {
        Value::Object(map) => {
            if let Some(required) = schema["required"].as_array() {
                for key in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(key) {
                        errors.push(FieldError::required(join(path, key), ""));
                    }
                }
            }
            for (key, child) in map {
                if is_type_meta(key, root || is_embedded(schema)) {
                    continue;
                }
                if let Some(child_schema) = child_schema(schema, key) {
                    check(child_schema, child, &join(path, key), false, errors);
                }
            }
        }
        Value::Array(items) => {
            if let Some(min) = schema["minItems"].as_u64()
                && (items.len() as u64) < min
            {
                errors.push(FieldError::invalid(
                    path,
                    value,
                    &format!("{path} in body should have at least {min} items"),
                ));
            }
            if let Some(max) = schema["maxItems"].as_u64()
                && (items.len() as u64) > max
            {
                errors.push(FieldError {
                    reason: "FieldValueTooMany",
                    field: path.to_string(),
                    message: format!("Too many: {}: must have at most {max} items", items.len()),
                });
            }
            if let Some(item_schema) = schema.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}[{i}]"), false, errors);
                }
            }
        }
        _ => {}
    }
}

/// Schema violations of a custom resource (after defaulting and pruning), then its validation
/// rules' ([`crate::cel`]; `old` is the stored object on an update). Like kube-apiserver, the
/// rules run only when no error of the schema's blocks them (a missing, too long or mistyped
/// value, too many items, a value outside an enum), and it says so when one did.
pub fn validate(rt: &ResourceType, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(schema) = rt.schema.as_deref() {
        check(schema, object, "", true, &mut errors);
        if !has_cel_rules(schema) {
            return errors;
        }
        let blocked = errors.iter().any(|e| {
            matches!(
                e.reason,
                "FieldValueNotSupported"
                    | "FieldValueRequired"
                    | "FieldValueTooLong"
                    | "FieldValueTooMany"
                    | "FieldValueTypeInvalid"
            )
        });
        if blocked {
            errors.push(FieldError::invalid(
                "<nil>",
                &Value::Null,
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ));
        } else {
            errors.extend(crate::cel::validate(schema, object, old));
        }
    }
    errors
}

/// Whether a schema holds CEL rules anywhere.
pub(crate) fn has_cel_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.contains_key("x-kubernetes-validations") || map.values().any(has_cel_rules)
        }
        Value::Array(items) => items.iter().any(has_cel_rules),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::crd_resource_types;
    use serde_json::json;

    fn comb_type() -> ResourceType {
        let crd = json!({"spec": {"group": "comb.internal", "scope": "Namespaced",
        "names": {"kind": "Comb", "plural": "combs"},
        "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": {"type": "object", "required": ["class"], "properties": {
                    "class": {"type": "string", "minLength": 1},
                    "replicas": {"type": "integer", "default": 1, "minimum": 0},
                    "mode": {"type": "string", "enum": ["run", "stub"]},
                    "port": {"x-kubernetes-int-or-string": true},
                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}}
                }},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }}}}]}});
        crd_resource_types(&crd).remove(0)
    }

    #[test]
    fn defaults_and_pruning() {
        let rt = comb_type();
        let mut object = json!({"apiVersion": "comb.internal/v1", "kind": "Comb", "metadata": {"name": "a"},
            "spec": {"class": "web", "bogus": 1, "mode": null, "extra": {"anything": [1]}, "labels": {"a": "b"}},
            "unknownTop": true});
        assert_eq!(unknown_fields(&rt, &object), ["spec.bogus", "unknownTop"]);
        default_and_prune(&rt, &mut object);
        assert_eq!(
            object,
            json!({"apiVersion": "comb.internal/v1", "kind": "Comb", "metadata": {"name": "a"},
                "spec": {"class": "web", "extra": {"anything": [1]}, "labels": {"a": "b"}, "replicas": 1}})
        );
        assert!(validate(&rt, &object, None).is_empty());
    }

    #[test]
    fn violations() {
        let rt = comb_type();
        let object = json!({"metadata": {"name": "a"}, "spec": {"replicas": "two", "mode": "walk", "port": 1.5}});
        let errors = validate(&rt, &object, None);
        let fields: Vec<(&str, &str)> = errors
            .iter()
            .map(|e| (e.field.as_str(), e.reason))
            .collect();
        assert_eq!(
            fields,
            [
                ("spec.class", "FieldValueRequired"),
                ("spec.replicas", "FieldValueTypeInvalid"),
                ("spec.mode", "FieldValueNotSupported"),
                ("spec.port", "FieldValueTypeInvalid"),
            ]
        );
        assert_eq!(
            errors[1].message,
            r#"Invalid value: "string": spec.replicas in body must be of type integer: "string""#
        );
    }
}
