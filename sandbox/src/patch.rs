//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch
//! as kube-apiserver applies it to built-in kinds (lists merged by their keys, `$patch`
//! directives, `$setElementOrder`, `$deleteFromPrimitiveList`, `$retainKeys`). Server-side
//! apply is in `managed`.

use serde_json::{Map, Value};

use crate::api_error::ApiError;
use crate::listtypes::{ListType, list_type, same_item};

/// The patch content types kube-apiserver accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

pub const JSON_PATCH: &str = "application/json-patch+json";
pub const MERGE_PATCH: &str = "application/merge-patch+json";
pub const STRATEGIC_PATCH: &str = "application/strategic-merge-patch+json";
pub const APPLY_PATCH: &str = "application/apply-patch+yaml";

impl PatchKind {
    /// The kind of a request's Content-Type (parameters ignored).
    pub fn from_content_type(content_type: &str) -> Option<PatchKind> {
        let media = content_type.split(';').next().unwrap_or_default().trim();
        match media {
            MERGE_PATCH => Some(PatchKind::Merge),
            JSON_PATCH => Some(PatchKind::Json),
            STRATEGIC_PATCH => Some(PatchKind::Strategic),
            APPLY_PATCH | "application/apply-patch+cbor" => Some(PatchKind::Apply),
            _ => None,
        }
    }
}

/// Applies a merge, JSON or strategic merge patch to an object. `custom` objects refuse
/// strategic merge, like kube-apiserver (415).
pub fn apply_patch(
    kind: PatchKind,
    target: &Value,
    patch: &Value,
    schema: Option<&Value>,
    custom: bool,
) -> Result<Value, ApiError> {
    let mut result = target.clone();
    match kind {
        PatchKind::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "json: cannot unmarshal into Go value of type map[string]interface {}",
                ));
            }
            json_patch::merge(&mut result, patch);
        }
        PatchKind::Json => {
            let operations: json_patch::Patch =
                serde_json::from_value(patch.clone()).map_err(|e| {
                    ApiError::bad_request(format!(
                        "the server rejected our request due to an error in our request: {e}"
                    ))
                })?;
            json_patch_as_kube_apiserver(&mut result, operations)?;
        }
        PatchKind::Strategic => {
            if custom {
                return Err(ApiError::unsupported_media_type(&[
                    JSON_PATCH,
                    MERGE_PATCH,
                    APPLY_PATCH,
                ]));
            }
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "json: cannot unmarshal into Go value of type map[string]interface {}",
                ));
            }
            strategic_merge(&mut result, patch, &mut Vec::new(), schema)?;
        }
        PatchKind::Apply => {
            return Err(ApiError::internal("server-side apply is not a plain patch"));
        }
    }
    Ok(result)
}

/// Applies a JSON patch's operations in order as kube-apiserver does with evanphx/json-patch
/// (v4), which differs from RFC 6902 in one place clients rely on: a `test` of an absent
/// member against `null` passes (its parent must exist), so kube-runtime's `finalizer()` can
/// guard "no finalizers yet" with it. A refused patch is a 422 whose message names no
/// operation, as the real server's does.
fn json_patch_as_kube_apiserver(
    target: &mut Value,
    operations: json_patch::Patch,
) -> Result<(), ApiError> {
    for operation in operations.0 {
        if let json_patch::PatchOperation::Test(test) = &operation
            && test.value.is_null()
            && let Some((parent, member)) = test.path.split_back()
            && target.pointer(parent.as_str()).is_some_and(|parent| {
                parent
                    .as_object()
                    .is_some_and(|fields| !fields.contains_key(member.decoded().as_ref()))
            })
        {
            continue;
        }
        json_patch::patch(target, &[operation]).map_err(|_| {
            ApiError::new(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
            )
        })?;
    }
    Ok(())
}

fn directive_error(message: impl Into<String>) -> ApiError {
    ApiError::bad_request(message)
}

/// Merges `patch` into the map `target` (both objects) following strategic merge rules.
fn strategic_merge(
    target: &mut Value,
    patch: &Value,
    names: &mut Vec<String>,
    schema: Option<&Value>,
) -> Result<(), ApiError> {
    let Some(patch_map) = patch.as_object() else {
        *target = patch.clone();
        return Ok(());
    };
    match patch_map.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *target = Value::Object(without_directives(patch_map));
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => {
            return Err(directive_error(format!("Unknown patch type: {other}")));
        }
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let mut orders: Vec<(String, Vec<Value>)> = Vec::new();
    let mut retain: Option<Vec<String>> = None;
    for (key, value) in patch_map {
        if key == "$patch" {
            continue;
        }
        if key == "$retainKeys" {
            retain = value.as_array().map(|keys| {
                keys.iter()
                    .filter_map(|k| k.as_str().map(String::from))
                    .collect()
            });
            continue;
        }
        if let Some(field) = key.strip_prefix("$setElementOrder/") {
            orders.push((
                field.to_string(),
                value.as_array().cloned().unwrap_or_default(),
            ));
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = value.as_array().cloned().unwrap_or_default();
            if let Some(items) = target.get_mut(field).and_then(Value::as_array_mut) {
                items.retain(|item| !remove.contains(item));
            }
            continue;
        }
        let Some(target_map) = target.as_object_mut() else {
            break;
        };
        if value.is_null() {
            target_map.remove(key);
            continue;
        }
        names.push(key.clone());
        let result = match (target_map.get_mut(key), value) {
            (Some(existing @ Value::Object(_)), Value::Object(_)) => {
                let deleted = value.get("$patch").and_then(Value::as_str) == Some("delete");
                if deleted {
                    target_map.remove(key);
                    Ok(())
                } else {
                    strategic_merge(existing, value, names, schema)
                }
            }
            (Some(Value::Array(existing)), Value::Array(items)) => {
                merge_list(existing, items, names, schema)
            }
            (_, Value::Object(_)) => {
                let mut fresh = Value::Object(Map::new());
                let merged = strategic_merge(&mut fresh, value, names, schema);
                target_map.insert(key.clone(), fresh);
                merged
            }
            (_, Value::Array(items)) => {
                let mut fresh = Vec::new();
                let merged = merge_list(&mut fresh, items, names, schema);
                target_map.insert(key.clone(), Value::Array(fresh));
                merged
            }
            _ => {
                target_map.insert(key.clone(), value.clone());
                Ok(())
            }
        };
        names.pop();
        result?;
    }
    if let Some(target_map) = target.as_object_mut() {
        for (field, order) in orders {
            if let Some(Value::Array(items)) = target_map.get_mut(&field) {
                names.push(field.clone());
                reorder(items, &order, &list_type(schema, names));
                names.pop();
            }
        }
        if let Some(keep) = retain {
            target_map.retain(|k, _| keep.iter().any(|r| r == k));
        }
    }
    Ok(())
}

fn without_directives(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn merge_list(
    target: &mut Vec<Value>,
    patch: &[Value],
    names: &mut Vec<String>,
    schema: Option<&Value>,
) -> Result<(), ApiError> {
    let replace = patch
        .iter()
        .any(|item| item.get("$patch").and_then(Value::as_str) == Some("replace"));
    if replace {
        *target = patch
            .iter()
            .filter(|item| item.get("$patch").is_none())
            .cloned()
            .collect();
        return Ok(());
    }
    let list = list_type(schema, names);
    let matches = |a: &Value, b: &Value| match &list {
        ListType::Map(keys) => same_item(keys, a, b),
        _ => a == b,
    };
    let original = std::mem::take(target);
    // The items the patch names (merged with the live ones, in patch order), and the live
    // items it does not name, which kube's mergeSortedSlice then interleaves.
    let mut patched: Vec<Value> = Vec::new();
    let mut named = vec![false; original.len()];
    match &list {
        ListType::Map(keys) if !keys.is_empty() => {
            for item in patch {
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                let position = original.iter().position(|t| same_item(keys, t, item));
                if let Some(i) = position {
                    named[i] = true;
                }
                match (delete, position) {
                    (true, _) => {}
                    (false, Some(i)) => {
                        let mut merged = original[i].clone();
                        strategic_merge(&mut merged, item, names, schema)?;
                        patched.push(merged);
                    }
                    (false, None) => {
                        if !item.is_object() {
                            return Err(directive_error(format!(
                                "the list items of {} must be objects with the key {}",
                                names.join("."),
                                keys[0]
                            )));
                        }
                        let mut fresh = Value::Object(Map::new());
                        strategic_merge(&mut fresh, item, names, schema)?;
                        patched.push(fresh);
                    }
                }
            }
        }
        ListType::Set => {
            for item in patch {
                if let Some(i) = original.iter().position(|t| t == item) {
                    named[i] = true;
                }
                if !patched.contains(item) {
                    patched.push(item.clone());
                }
            }
        }
        ListType::Atomic | ListType::Map(_) => {
            *target = patch.to_vec();
            return Ok(());
        }
    }
    let server_only: Vec<Value> = original
        .iter()
        .zip(&named)
        .filter(|(_, named)| !**named)
        .map(|(item, _)| item.clone())
        .collect();
    // kube's mergeSortedSlice: a live-only item goes before a patched one only when both are
    // in the live list and it came first there; otherwise the patched one goes first.
    let live_index = |item: &Value| original.iter().position(|o| matches(o, item));
    let (mut left, mut right) = (
        server_only.into_iter().peekable(),
        patched.into_iter().peekable(),
    );
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                matches!((live_index(l), live_index(r)), (Some(a), Some(b)) if a < b)
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        target.extend(next);
    }
    Ok(())
}

/// Orders list items as `$setElementOrder` says; items it does not name keep their place
/// after the named ones.
fn reorder(items: &mut Vec<Value>, order: &[Value], list: &ListType) {
    let matches = |item: &Value, wanted: &Value| match list {
        ListType::Map(keys) => same_item(keys, item, wanted),
        _ => item == wanted,
    };
    let mut ordered = Vec::with_capacity(items.len());
    for wanted in order {
        if let Some(i) = items.iter().position(|item| matches(item, wanted)) {
            ordered.push(items.remove(i));
        }
    }
    ordered.append(items);
    *items = ordered;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({
            "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}, "finalizers": ["a"]},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "web", "image": "nginx:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                 "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                {"name": "sidecar", "image": "envoy"}
            ], "volumes": [{"name": "data", "emptyDir": {}}]}}}
        })
    }

    #[test]
    fn strategic_merge_table() {
        let cases = [
            (
                "merge a container by name",
                json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}}),
                "/spec/template/spec/containers",
                json!([
                    {"name": "web", "image": "nginx:2", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                     "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                    {"name": "sidecar", "image": "envoy"}
                ]),
            ),
            (
                "delete a container",
                json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}}),
                "/spec/template/spec/containers/1",
                Value::Null,
            ),
            (
                "merge env by name and add one",
                json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]}]}}}}),
                "/spec/template/spec/containers/0/env",
                json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]),
            ),
            (
                "ports merge by containerPort with default protocol",
                json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "ports": [{"containerPort": 80, "name": "http"}]}]}}}}),
                "/spec/template/spec/containers/0/ports",
                json!([{"containerPort": 80, "protocol": "TCP", "name": "http"}]),
            ),
            (
                "null deletes a label",
                json!({"metadata": {"labels": {"tier": null}}}),
                "/metadata/labels",
                json!({"app": "web"}),
            ),
            (
                "finalizers merge as a set, in the patch's order",
                json!({"metadata": {"finalizers": ["b", "a"]}}),
                "/metadata/finalizers",
                json!(["b", "a"]),
            ),
            (
                "delete from a primitive list",
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
                "/metadata/finalizers",
                json!([]),
            ),
            (
                "replace a list",
                json!({"spec": {"template": {"spec": {"volumes": [{"name": "cache", "emptyDir": {}}, {"$patch": "replace"}]}}}}),
                "/spec/template/spec/volumes",
                json!([{"name": "cache", "emptyDir": {}}]),
            ),
            (
                "set element order",
                json!({"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "sidecar"}, {"name": "web"}]}}}}),
                "/spec/template/spec/containers/0/name",
                json!("sidecar"),
            ),
            (
                "retain keys",
                json!({"spec": {"template": {"spec": {"volumes": [{"name": "data", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}}}}),
                "/spec/template/spec/volumes/0",
                json!({"name": "data", "hostPath": {"path": "/x"}}),
            ),
        ];
        for (what, patch, pointer, expected) in cases {
            let result = apply_patch(PatchKind::Strategic, &deployment(), &patch, None, false)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                result.pointer(pointer).cloned().unwrap_or(Value::Null),
                expected,
                "{what}"
            );
        }
    }

    #[test]
    fn merge_and_json_patches() {
        let merged = apply_patch(
            PatchKind::Merge,
            &deployment(),
            &json!({"spec": {"replicas": 3, "template": null}}),
            None,
            false,
        )
        .expect("merge");
        assert_eq!(merged["spec"], json!({"replicas": 3}));
        let patched = apply_patch(
            PatchKind::Json,
            &deployment(),
            &json!([{"op": "replace", "path": "/spec/replicas", "value": 4}, {"op": "test", "path": "/metadata/name", "value": "web"}]),
            None,
            false,
        )
        .expect("json patch");
        assert_eq!(patched["spec"]["replicas"], 4);
        let failed = apply_patch(
            PatchKind::Json,
            &deployment(),
            &json!([{"op": "test", "path": "/metadata/name", "value": "db"}]),
            None,
            false,
        );
        assert_eq!(failed.expect_err("test op fails").code, 422);
        let guarded = json!([{"op": "test", "path": "/metadata/annotations", "value": null},
                             {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}]);
        let added = apply_patch(PatchKind::Json, &deployment(), &guarded, None, false)
            .expect("an absent member tests as null");
        assert_eq!(added["metadata"]["annotations"], json!({"a": "b"}));
        let present = apply_patch(PatchKind::Json, &added, &guarded, None, false);
        assert_eq!(present.expect_err("a present member is not null").code, 422);
        let no_parent = apply_patch(
            PatchKind::Json,
            &deployment(),
            &json!([{"op": "test", "path": "/metadata/absent/member", "value": null}]),
            None,
            false,
        );
        assert_eq!(
            no_parent.expect_err("an absent parent is missing").code,
            422
        );
        let refused = apply_patch(PatchKind::Strategic, &deployment(), &json!({}), None, true);
        assert_eq!(refused.expect_err("custom").code, 415);
    }
}
