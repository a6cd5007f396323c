//! How lists merge: by key (containers by name, ...), as sets, or atomically. Strategic merge
//! patch and managed-fields tracking share these rules; for custom resources they come from
//! the schema's `x-kubernetes-list-type` and `x-kubernetes-list-map-keys`.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum ListType {
    /// Replaced as a whole.
    Atomic,
    /// A set of scalars (finalizers).
    Set,
    /// Items identified by these keys; the first is the strategic-merge key.
    Map(Vec<String>),
}

fn keys(names: &[&str]) -> ListType {
    ListType::Map(names.iter().map(|n| n.to_string()).collect())
}

/// The list semantics of a built-in field, by its path of field names from the object root.
pub fn builtin_list_type(path: &[String]) -> ListType {
    let Some(last) = path.last() else {
        return ListType::Atomic;
    };
    let parent = path.len().checked_sub(2).map(|i| path[i].as_str());
    let in_container = path.iter().any(|p| {
        matches!(
            p.as_str(),
            "containers" | "initContainers" | "ephemeralContainers"
        )
    });
    match last.as_str() {
        "containers" | "initContainers" | "ephemeralContainers" => keys(&["name"]),
        "ports" if in_container => keys(&["containerPort", "protocol"]),
        "ports" if parent == Some("spec") && path.len() == 2 => keys(&["port", "protocol"]),
        "env" => keys(&["name"]),
        "volumeMounts" => keys(&["mountPath"]),
        "volumeDevices" => keys(&["devicePath"]),
        "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates" => keys(&["name"]),
        "hostAliases" => keys(&["ip"]),
        "topologySpreadConstraints" => keys(&["topologyKey", "whenUnsatisfiable"]),
        "conditions" => keys(&["type"]),
        "ownerReferences" => keys(&["uid"]),
        "finalizers" if parent == Some("metadata") => ListType::Set,
        _ => ListType::Atomic,
    }
}

/// The list semantics from a CRD schema node of a list.
pub fn schema_list_type(schema: &Value) -> ListType {
    match schema["x-kubernetes-list-type"].as_str() {
        Some("set") => ListType::Set,
        Some("map") => ListType::Map(
            schema["x-kubernetes-list-map-keys"]
                .as_array()
                .map(|k| {
                    k.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        _ => ListType::Atomic,
    }
}

/// The schema node at a path of field names (through arrays' `items`), if the schema says.
pub fn schema_at<'a>(schema: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut node = schema;
    for field in path {
        while node["type"] == "array" {
            node = &node["items"];
        }
        node = node["properties"]
            .get(field)
            .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))?;
    }
    Some(node)
}

/// List semantics for a path: the schema's for custom resources, the built-in table otherwise.
/// Object metadata is the same everywhere.
pub fn list_type(schema: Option<&Value>, path: &[String]) -> ListType {
    match schema {
        Some(schema) if path.first().is_none_or(|p| p != "metadata") => schema_at(schema, path)
            .map(schema_list_type)
            .unwrap_or(ListType::Atomic),
        _ => builtin_list_type(path),
    }
}

/// Whether two list items are the same item under a map list's keys.
pub fn same_item(keys: &[String], a: &Value, b: &Value) -> bool {
    keys.iter().all(|k| {
        let (x, y) = (a.get(k), b.get(k));
        // A missing protocol means TCP, so `80` and `80/TCP` are the same port.
        let default = |v: Option<&Value>| match (k.as_str(), v) {
            ("protocol", None) => Some(Value::String("TCP".into())),
            (_, v) => v.cloned(),
        };
        default(x) == default(y)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path(p: &str) -> Vec<String> {
        p.split('.').map(String::from).collect()
    }

    #[test]
    fn builtin_lists() {
        let cases = [
            ("spec.template.spec.containers", keys(&["name"])),
            (
                "spec.template.spec.containers.ports",
                keys(&["containerPort", "protocol"]),
            ),
            ("spec.ports", keys(&["port", "protocol"])),
            ("spec.template.spec.containers.env", keys(&["name"])),
            ("spec.template.spec.containers.args", ListType::Atomic),
            ("metadata.finalizers", ListType::Set),
            ("spec.tolerations", ListType::Atomic),
        ];
        for (p, expected) in cases {
            assert_eq!(builtin_list_type(&path(p)), expected, "{p}");
        }
    }

    #[test]
    fn schema_lists() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                      "items": {"type": "object", "properties": {"tags": {"type": "array", "x-kubernetes-list-type": "set"}}}}
        }}}});
        assert_eq!(list_type(Some(&schema), &path("spec.items")), keys(&["id"]));
        assert_eq!(
            list_type(Some(&schema), &path("spec.items.tags")),
            ListType::Set
        );
        assert_eq!(
            list_type(Some(&schema), &path("spec.other")),
            ListType::Atomic
        );
        assert_eq!(
            list_type(Some(&schema), &path("metadata.finalizers")),
            ListType::Set
        );
    }

    #[test]
    fn ports_default_to_tcp() {
        let k = vec!["containerPort".to_string(), "protocol".to_string()];
        assert!(same_item(
            &k,
            &json!({"containerPort": 80}),
            &json!({"containerPort": 80, "protocol": "TCP"})
        ));
        assert!(!same_item(
            &k,
            &json!({"containerPort": 80}),
            &json!({"containerPort": 80, "protocol": "UDP"})
        ));
    }
}
