//! Small helpers over object metadata shared by the store, the collector and the server.

use serde_json::{Value, json};

/// Current time as a `metav1.Time` (RFC 3339, second precision, UTC).
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

pub fn namespace(object: &Value) -> Option<&str> {
    object["metadata"]["namespace"].as_str()
}

pub fn uid(object: &Value) -> &str {
    object["metadata"]["uid"].as_str().unwrap_or_default()
}

pub fn resource_version(object: &Value) -> &str {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
}

pub fn is_deleting(object: &Value) -> bool {
    object["metadata"]["deletionTimestamp"].is_string()
}

pub fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub fn set_finalizers(object: &mut Value, finalizers: &[String]) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if finalizers.is_empty() {
            metadata.remove("finalizers");
        } else {
            metadata.insert("finalizers".into(), json!(finalizers));
        }
    }
}

/// Sets or (with `None`) removes one metadata field of an object whose metadata is a map.
pub fn set_metadata_field(object: &mut Value, field: &str, value: Option<Value>) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        match value {
            Some(v) => {
                metadata.insert(field.into(), v);
            }
            None => {
                metadata.remove(field);
            }
        }
    }
}

/// The ownerReferences' UIDs of an object.
pub fn owner_uids(object: &Value) -> Vec<String> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r["uid"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}
