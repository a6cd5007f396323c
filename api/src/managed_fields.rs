//! Field managers and `managedFields`: who comb writes as, and the one-time takeover of what
//! older combs wrote by create and replace (pure functions over JSON, no client).
//!
//! Shared by every crate that applies a Comb's objects (the engine's resources, the upstreams'
//! replicated copies), so that all of comb's writes are one field manager's and are taken over
//! the same way.

use serde_json::{Map, Value, json};

/// The field manager of comb's applies of a Comb's resources.
pub const FIELD_MANAGER: &str = "comb";

/// The managers older combs' writes were recorded under: they created and replaced without a
/// field manager, so the API server named them after the user agent, which kube-rs does not
/// send (kube-apiserver then records no manager at all; the emulator used to say `unknown`).
pub const LEGACY_MANAGERS: &[&str] = &["", "unknown"];

/// The `managedFields` entries of `object`.
fn managed_entries(object: &Value) -> &[Value] {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Whether `entry` is `manager`'s, by `operation`, of the main resource (not a subresource).
fn entry_is(entry: &Value, manager: &str, operation: &str) -> bool {
    entry
        .get("manager")
        .and_then(Value::as_str)
        .unwrap_or_default()
        == manager
        && entry.get("operation").and_then(Value::as_str) == Some(operation)
        && entry
            .get("subresource")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .is_empty()
}

/// Whether `manager` has applied fields of `object`'s main resource (an entry without fields
/// is not kept by the server).
pub fn applied_by(object: &Value, manager: &str) -> bool {
    managed_entries(object)
        .iter()
        .any(|entry| entry_is(entry, manager, "Apply"))
}

/// The `managedFields` that hand what older combs wrote ([`LEGACY_MANAGERS`], by update) to
/// [`FIELD_MANAGER`] as applied, like kubectl's migration from client-side apply
/// (`csaupgrade`): then comb's next apply removes what it no longer writes, instead of leaving
/// it owned by the older writes forever. The `kept` paths (field names) stay with their owner.
/// `None` when there is nothing to hand over, or comb has applied it already.
pub fn migrated_managed_fields(live: &Value, kept: &[Vec<String>], now: &str) -> Option<Value> {
    if applied_by(live, FIELD_MANAGER) {
        return None;
    }
    let legacy = |entry: &Value| {
        LEGACY_MANAGERS
            .iter()
            .any(|manager| entry_is(entry, manager, "Update"))
    };
    let mut moved = Value::Object(Map::new());
    let mut out = Vec::new();
    for entry in managed_entries(live) {
        if !legacy(entry) {
            out.push(entry.clone());
            continue;
        }
        let mut fields = entry.get("fieldsV1").cloned().unwrap_or(json!({}));
        let mut remainder = Value::Object(Map::new());
        for path in kept {
            let keys: Vec<String> = path.iter().map(|name| format!("f:{name}")).collect();
            if let Some(subtree) = take_path(&mut fields, &keys) {
                put_path(&mut remainder, &keys, subtree);
            }
        }
        strip_map_markers(&mut fields);
        union_fields(&mut moved, &fields);
        if remainder.as_object().is_some_and(|map| !map.is_empty()) {
            let mut rest = entry.clone();
            rest["fieldsV1"] = remainder;
            out.push(rest);
        }
    }
    if moved.as_object().is_none_or(Map::is_empty) {
        return None;
    }
    out.push(json!({
        "manager": FIELD_MANAGER,
        "operation": "Apply",
        "apiVersion": live.get("apiVersion").cloned().unwrap_or(Value::Null),
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": moved,
    }));
    Some(Value::Array(out))
}

/// The merge patch that writes [`migrated_managed_fields`] onto `live`, conditional on the
/// resourceVersion read (a concurrent writer makes it a 409, not a lost ownership).
pub fn takeover_patch(live: &Value, kept: &[Vec<String>], now: &str) -> Option<Value> {
    let fields = migrated_managed_fields(live, kept, now)?;
    Some(json!({"metadata": {
        "resourceVersion": live.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null),
        "managedFields": fields,
    }}))
}

/// Removes the subtree at `keys` from a `fieldsV1` tree (and the maps it leaves empty), and
/// returns it.
fn take_path(tree: &mut Value, keys: &[String]) -> Option<Value> {
    let (first, rest) = keys.split_first()?;
    let map = tree.as_object_mut()?;
    if rest.is_empty() {
        return map.remove(first);
    }
    let child = map.get_mut(first)?;
    let taken = take_path(child, rest)?;
    if child.as_object().is_some_and(|child| child.is_empty()) {
        map.remove(first);
    }
    Some(taken)
}

fn put_path(tree: &mut Value, keys: &[String], subtree: Value) {
    let Some((first, rest)) = keys.split_first() else {
        return;
    };
    let Some(map) = tree.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        map.insert(first.clone(), subtree);
        return;
    }
    let child = map.entry(first.clone()).or_insert_with(|| json!({}));
    put_path(child, rest, subtree);
}

/// Removes the `.` of maps and lists (an update owns the map it created; an apply never does)
/// from a `fieldsV1` tree, and the fields only that made up; the `.` of list items (their
/// existence) stays. Owning a map as applied would give the whole of it, others' keys too,
/// to the next apply that leaves it out.
fn strip_map_markers(tree: &mut Value) {
    let Some(map) = tree.as_object_mut() else {
        return;
    };
    let mut emptied = Vec::new();
    for (key, child) in map.iter_mut() {
        // An empty map is a field owned whole: only one that was empty before stays.
        let had_fields = child.as_object().is_some_and(|fields| !fields.is_empty());
        strip_map_markers(child);
        if let Some(fields) = child.as_object_mut() {
            if key.starts_with("f:") {
                fields.remove(".");
            }
            if had_fields && fields.is_empty() {
                emptied.push(key.clone());
            }
        }
    }
    for key in emptied {
        map.remove(&key);
    }
}

/// `into ∪= from` for `fieldsV1` trees (maps merged key by key).
fn union_fields(into: &mut Value, from: &Value) {
    let (Some(into), Some(from)) = (into.as_object_mut(), from.as_object()) else {
        return;
    };
    for (key, value) in from {
        match into.get_mut(key) {
            Some(existing) => union_fields(existing, value),
            None => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Now as `managedFields` times are written (seconds, UTC).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(manager: &str, operation: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": operation, "apiVersion": "v1",
               "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    #[test]
    fn an_older_copy_is_handed_to_comb_as_applied_conditionally() {
        let created = json!({
            "f:data": {".": {}, "f:password": {}},
            "f:metadata": {"f:labels": {".": {}, "f:comb.internal/comb": {}}},
            "f:type": {},
        });
        let live = json!({"apiVersion": "v1", "metadata": {"resourceVersion": "42",
            "managedFields": [entry("", "Update", created)]}});
        assert_eq!(
            takeover_patch(&live, &[], "2026-02-02T00:00:00Z"),
            Some(
                json!({"metadata": {"resourceVersion": "42", "managedFields": [
                    {"manager": "comb", "operation": "Apply", "apiVersion": "v1",
                     "time": "2026-02-02T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {
                         "f:data": {"f:password": {}},
                         "f:metadata": {"f:labels": {"f:comb.internal/comb": {}}},
                         "f:type": {},
                     }},
                ]}})
            )
        );
        let applied = json!({"metadata": {"managedFields": [
            entry("comb", "Apply", json!({"f:data": {}})),
            entry("unknown", "Update", json!({"f:data": {"f:a": {}}})),
        ]}});
        assert_eq!(takeover_patch(&applied, &[], "now"), None);
        assert_eq!(takeover_patch(&json!({"metadata": {}}), &[], "now"), None);
    }
}
