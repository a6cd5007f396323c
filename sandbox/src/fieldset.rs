//! Field sets in the `FieldsV1` format of `metadata.managedFields`: `f:<field>` for map
//! fields, `k:<json>` for items of keyed lists, `v:<json>` for set members and `.` for an item
//! itself. A set is handled as its leaf paths.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::listtypes::{ListType, list_type, same_item};

/// One path of a field set: elements such as `f:spec`, `k:{"name":"web"}`, `.`.
pub type FieldPath = Vec<String>;

/// Options of walking an object into a field set.
pub struct Walk<'a> {
    /// The CRD schema for custom resources (list semantics).
    pub schema: Option<&'a Value>,
    /// Leave `status` out (types with a status subresource).
    pub skip_status: bool,
    /// Also the `.` of every non-empty, non-atomic map and list (what an update may add).
    pub containers: bool,
}

/// Metadata the field manager never tracks (kube-apiserver's stripMetaManager).
const UNTRACKED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "creationTimestamp",
    "selfLink",
    "uid",
    "generation",
    "managedFields",
    "resourceVersion",
];

/// Whether a map is atomic (owned and replaced as a whole): `x-kubernetes-map-type: atomic`
/// in a CRD schema; for built-ins, label selectors (`+structType=atomic`) and a Service's
/// selector (`+mapType=atomic`).
pub fn atomic_map(schema: Option<&Value>, names: &[String]) -> bool {
    match schema {
        Some(schema) if names.first().is_none_or(|p| p != "metadata") => {
            crate::listtypes::schema_at(schema, names)
                .is_some_and(|s| s["x-kubernetes-map-type"] == "atomic")
        }
        _ => names.last().is_some_and(|last| {
            matches!(
                last.as_str(),
                "selector" | "podSelector" | "namespaceSelector" | "labelSelector"
            )
        }),
    }
}

/// The leaf paths of an object's fields that a manager can own.
pub fn of_object(object: &Value, walk: &Walk<'_>) -> BTreeSet<FieldPath> {
    let mut leaves = BTreeSet::new();
    let Some(map) = object.as_object() else {
        return leaves;
    };
    for (key, value) in map {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "status" if walk.skip_status => {}
            "metadata" => {
                if let Some(metadata) = value.as_object() {
                    for (field, v) in metadata {
                        if UNTRACKED_METADATA.contains(&field.as_str()) || v.is_null() {
                            continue;
                        }
                        let mut names = vec!["metadata".to_string(), field.to_string()];
                        let mut path = vec!["f:metadata".to_string(), format!("f:{field}")];
                        walk_value(v, &mut names, &mut path, walk, &mut leaves);
                    }
                }
            }
            _ => {
                let mut names = vec![key.clone()];
                let mut path = vec![format!("f:{key}")];
                walk_value(value, &mut names, &mut path, walk, &mut leaves);
            }
        }
    }
    leaves
}

/// The `k:` element of a keyed list item.
fn item_key(keys: &[String], item: &Value) -> String {
    let mut key = Map::new();
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    for k in sorted {
        match (item.get(k), k.as_str()) {
            (Some(v), _) => {
                key.insert(k.clone(), v.clone());
            }
            // A key field's default counts (SMD defaults list-map keys from the schema):
            // a port without a protocol is the TCP one.
            (None, "protocol") => {
                key.insert(k.clone(), Value::String("TCP".into()));
            }
            (None, _) => {}
        }
    }
    format!("k:{}", Value::Object(key))
}

fn walk_value(
    value: &Value,
    names: &mut Vec<String>,
    path: &mut FieldPath,
    walk: &Walk<'_>,
    leaves: &mut BTreeSet<FieldPath>,
) {
    let container = |path: &FieldPath, leaves: &mut BTreeSet<FieldPath>| {
        if walk.containers {
            let mut own = path.clone();
            own.push(".".into());
            leaves.insert(own);
        }
    };
    match value {
        Value::Object(map) if !map.is_empty() && !atomic_map(walk.schema, names) => {
            container(path, leaves);
            for (key, child) in map {
                names.push(key.clone());
                path.push(format!("f:{key}"));
                walk_value(child, names, path, walk, leaves);
                path.pop();
                names.pop();
            }
        }
        Value::Array(items) => match list_type(walk.schema, names) {
            ListType::Map(keys) if !keys.is_empty() && !items.is_empty() => {
                container(path, leaves);
                for item in items {
                    path.push(item_key(&keys, item));
                    let mut own = path.clone();
                    own.push(".".into());
                    leaves.insert(own);
                    if let Some(fields) = item.as_object() {
                        for (key, child) in fields {
                            names.push(key.clone());
                            path.push(format!("f:{key}"));
                            walk_value(child, names, path, walk, leaves);
                            path.pop();
                            names.pop();
                        }
                    }
                    path.pop();
                }
            }
            ListType::Set if !items.is_empty() => {
                container(path, leaves);
                for item in items {
                    let mut member = path.clone();
                    member.push(format!("v:{item}"));
                    leaves.insert(member);
                }
            }
            _ => {
                leaves.insert(path.clone());
            }
        },
        _ => {
            leaves.insert(path.clone());
        }
    }
}

/// Parses `fieldsV1` into leaf paths.
pub fn from_fields_v1(fields: &Value) -> BTreeSet<FieldPath> {
    fn collect(node: &Value, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        match node.as_object() {
            Some(map) if !map.is_empty() => {
                for (key, child) in map {
                    path.push(key.clone());
                    collect(child, path, out);
                    path.pop();
                }
            }
            _ => {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    collect(fields, &mut Vec::new(), &mut out);
    out
}

/// Renders leaf paths as `fieldsV1`.
pub fn to_fields_v1(leaves: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for path in leaves {
        let mut node = &mut root;
        for element in path {
            let entry = node
                .entry(element.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            let Value::Object(next) = entry else { break };
            node = next;
        }
    }
    Value::Object(root)
}

fn find_item(items: &[Value], element: &str) -> Option<usize> {
    if let Some(key) = element.strip_prefix("k:") {
        let key: Value = serde_json::from_str(key).ok()?;
        let keys: Vec<String> = key.as_object()?.keys().cloned().collect();
        return items.iter().position(|item| same_item(&keys, item, &key));
    }
    if let Some(member) = element.strip_prefix("v:") {
        let member: Value = serde_json::from_str(member).ok()?;
        return items.iter().position(|item| *item == member);
    }
    None
}

/// The value a leaf path names in an object (`.` names the item itself).
pub fn value_at<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut node = object;
    for element in path {
        if element == "." {
            continue;
        }
        node = match element.strip_prefix("f:") {
            Some(field) => node.get(field)?,
            None => {
                let items = node.as_array()?;
                &items[find_item(items, element)?]
            }
        };
    }
    Some(node)
}

/// Removes what a leaf path names from an object; a missing path is no change.
pub fn remove_at(object: &mut Value, path: &[String]) {
    let path: Vec<&String> = match path.last() {
        Some(last) if last == "." => path[..path.len() - 1].iter().collect(),
        _ => path.iter().collect(),
    };
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = object;
    for element in parents {
        let next = match element.strip_prefix("f:") {
            Some(field) => node.get_mut(field),
            None => match node.as_array_mut() {
                Some(items) => match find_item(items, element) {
                    Some(i) => items.get_mut(i),
                    None => None,
                },
                None => None,
            },
        };
        match next {
            Some(n) => node = n,
            None => return,
        }
    }
    match last.strip_prefix("f:") {
        Some(field) => {
            if let Some(map) = node.as_object_mut() {
                map.remove(field);
            }
        }
        None => {
            if let Some(items) = node.as_array_mut()
                && let Some(i) = find_item(items, last)
            {
                items.remove(i);
            }
        }
    }
}

/// `.spec.containers[name="web"].image`: a leaf path as kube-apiserver prints it in conflicts.
pub fn display(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        if let Some(field) = element.strip_prefix("f:") {
            out.push('.');
            out.push_str(field);
        } else if let Some(key) = element.strip_prefix("k:") {
            let parsed: Value = serde_json::from_str(key).unwrap_or(Value::Null);
            let parts: Vec<String> = parsed
                .as_object()
                .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(member) = element.strip_prefix("v:") {
            out.push_str(&format!("[={member}]"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn walk() -> Walk<'static> {
        Walk {
            schema: None,
            skip_status: true,
            containers: false,
        }
    }

    #[test]
    fn object_leaves_follow_list_keys() {
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "web", "image": "nginx", "args": ["a", "b"]}
            ]}}},
            "status": {"replicas": 2}
        });
        let leaves = of_object(&deployment, &walk());
        let shown: Vec<String> = leaves.iter().map(|p| p.join(" ")).collect();
        assert_eq!(
            shown,
            [
                "f:metadata f:labels f:app",
                "f:spec f:replicas",
                r#"f:spec f:template f:spec f:containers k:{"name":"web"} ."#,
                r#"f:spec f:template f:spec f:containers k:{"name":"web"} f:args"#,
                r#"f:spec f:template f:spec f:containers k:{"name":"web"} f:image"#,
                r#"f:spec f:template f:spec f:containers k:{"name":"web"} f:name"#,
            ]
        );
        assert_eq!(from_fields_v1(&to_fields_v1(&leaves)), leaves);
        let image: Vec<String> =
            r#"f:spec f:template f:spec f:containers k:{"name":"web"} f:image"#
                .split(' ')
                .map(String::from)
                .collect();
        assert_eq!(value_at(&deployment, &image), Some(&json!("nginx")));
        assert_eq!(
            display(&image),
            r#".spec.template.spec.containers[name="web"].image"#
        );
        let mut copy = deployment.clone();
        let mut item = image.clone();
        item.pop();
        item.push(".".into());
        remove_at(&mut copy, &item);
        assert_eq!(copy["spec"]["template"]["spec"]["containers"], json!([]));
    }
}
