//! Reading and building the parts of Kubernetes objects that every controller shares:
//! metadata, ownerReferences, conditions and timestamps.

use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};

use super::Kind;

pub use crate::meta::{is_deleting, name, uid};

/// The namespace, "" for cluster-scoped objects.
pub fn namespace(object: &Value) -> &str {
    crate::meta::namespace(object).unwrap_or_default()
}

pub fn generation(object: &Value) -> i64 {
    object["metadata"]["generation"].as_i64().unwrap_or(1)
}

pub fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["annotations"][key].as_str()
}

pub fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["labels"][key].as_str()
}

/// `spec.replicas`, which defaults to 1 like the API server's defaulting.
pub fn replicas(object: &Value) -> i64 {
    object["spec"]["replicas"].as_i64().unwrap_or(1).max(0)
}

/// The owner that manages `object` (the ownerReference with `controller: true`): kind, name, uid.
pub fn controller_of(object: &Value) -> Option<(&str, &str, &str)> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or_default(),
                r["name"].as_str().unwrap_or_default(),
                r["uid"].as_str().unwrap_or_default(),
            )
        })
}

/// Whether `owner` is the managing controller of `object`.
pub fn is_controlled_by(object: &Value, owner: &Value) -> bool {
    controller_of(object).is_some_and(|(_, _, owner_uid)| owner_uid == uid(owner))
}

/// The ownerReference a controller puts on what it creates.
pub fn controller_reference(owner: &Value, kind: Kind) -> Value {
    json!({
        "apiVersion": kind.api_version(),
        "kind": kind.name(),
        "name": name(owner),
        "uid": uid(owner),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Object metadata for something `owner` creates from its template metadata.
pub fn child_metadata(owner: &Value, kind: Kind, template_metadata: &Value) -> Map<String, Value> {
    let mut metadata = Map::new();
    metadata.insert("namespace".into(), json!(namespace(owner)));
    for field in ["labels", "annotations"] {
        if let Some(values) = template_metadata.get(field).filter(|v| v.is_object()) {
            metadata.insert(field.into(), values.clone());
        }
    }
    metadata.insert(
        "ownerReferences".into(),
        json!([controller_reference(owner, kind)]),
    );
    metadata
}

/// Kubernetes timestamps: RFC 3339, UTC, whole seconds.
pub fn format_time(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub fn parse_time(value: &Value) -> Option<Timestamp> {
    value.as_str()?.parse().ok()
}

pub fn add(at: Timestamp, by: std::time::Duration) -> Timestamp {
    let by = SignedDuration::try_from(by).unwrap_or(SignedDuration::MAX);
    at.checked_add(by).unwrap_or(Timestamp::MAX)
}

/// Replaces `conditions` with `wanted`, keeping each condition's lastTransitionTime (and, when
/// nothing else changed, the whole condition) while its status stays the same, as controllers
/// do: a condition's timestamps tell when it last changed, not when it was last computed.
pub fn carry_condition_times(previous: &Value, wanted: Vec<Value>) -> Value {
    let previous = previous.as_array().map(Vec::as_slice).unwrap_or_default();
    let merged = wanted
        .into_iter()
        .map(|mut condition| {
            let Some(old) = previous.iter().find(|c| c["type"] == condition["type"]) else {
                return condition;
            };
            if old["status"] != condition["status"] {
                return condition;
            }
            if old["reason"] == condition["reason"] && old["message"] == condition["message"] {
                return old.clone();
            }
            if let Some(time) = old.get("lastTransitionTime") {
                condition["lastTransitionTime"] = time.clone();
            }
            condition
        })
        .collect();
    Value::Array(merged)
}

/// Inserts a key only when the value is meaningful, mirroring Go's `omitempty` on integers.
pub fn insert_nonzero(map: &mut Map<String, Value>, key: &str, value: i64) {
    if value != 0 {
        map.insert(key.into(), json!(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condition_times_survive_recomputation() {
        let old = json!([
            {"type": "Ready", "status": "True", "reason": "A", "message": "m", "lastTransitionTime": "t1"},
            {"type": "Scheduled", "status": "True", "reason": "A", "lastTransitionTime": "t1"},
            {"type": "Gone", "status": "True", "lastTransitionTime": "t1"},
        ]);
        let cases = [
            // (wanted, expected)
            (
                json!({"type": "Ready", "status": "True", "reason": "A", "message": "m", "lastTransitionTime": "t2"}),
                json!({"type": "Ready", "status": "True", "reason": "A", "message": "m", "lastTransitionTime": "t1"}),
            ),
            (
                json!({"type": "Ready", "status": "True", "reason": "B", "message": "m", "lastTransitionTime": "t2"}),
                json!({"type": "Ready", "status": "True", "reason": "B", "message": "m", "lastTransitionTime": "t1"}),
            ),
            (
                json!({"type": "Ready", "status": "False", "reason": "A", "message": "m", "lastTransitionTime": "t2"}),
                json!({"type": "Ready", "status": "False", "reason": "A", "message": "m", "lastTransitionTime": "t2"}),
            ),
            (
                json!({"type": "New", "status": "True", "lastTransitionTime": "t2"}),
                json!({"type": "New", "status": "True", "lastTransitionTime": "t2"}),
            ),
        ];
        for (wanted, expected) in cases {
            assert_eq!(
                carry_condition_times(&old, vec![wanted.clone()]),
                json!([expected]),
                "{wanted}"
            );
        }
    }

    #[test]
    fn controller_is_the_owner_reference_marked_controller() {
        let owner = json!({"metadata": {"name": "web", "namespace": "ns", "uid": "u1"}});
        let child = json!({"metadata": {"ownerReferences": [
            {"kind": "Other", "name": "x", "uid": "u0"},
            controller_reference(&owner, Kind::ReplicaSet),
        ]}});
        assert_eq!(controller_of(&child), Some(("ReplicaSet", "web", "u1")));
        assert!(is_controlled_by(&child, &owner));
        let orphan =
            json!({"metadata": {"ownerReferences": [{"kind": "Other", "name": "x", "uid": "u1"}]}});
        assert!(!is_controlled_by(&orphan, &owner));
    }

    #[test]
    fn times_are_whole_seconds_in_utc() {
        let at: Timestamp = "2024-05-06T07:08:09.123Z".parse().expect("valid");
        assert_eq!(format_time(at), "2024-05-06T07:08:09Z");
        assert_eq!(
            parse_time(&json!("2024-05-06T07:08:09Z")).map(format_time),
            Some("2024-05-06T07:08:09Z".into())
        );
    }
}
