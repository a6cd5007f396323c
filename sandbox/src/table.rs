//! `meta.k8s.io/v1` Table responses, which `kubectl get` asks for: the columns kube-apiserver
//! prints for the common built-in kinds, NAME and AGE for the others, and a CRD's
//! additionalPrinterColumns.

use serde_json::{Value, json};

use crate::resources::{PrinterColumn, ResourceType};

/// What each row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(raw: Option<&str>) -> IncludeObject {
        match raw {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// kubectl's `HumanDuration`: `45s`, `5m10s`, `3h`, `2d4h`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn age(timestamp: &Value, now: jiff::Timestamp) -> String {
    match timestamp
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    {
        Some(then) => human_duration(now.as_second() - then.as_second()),
        None => "<unknown>".into(),
    }
}

/// Evaluates the JSONPath subset printer columns use: `.a.b`, `.a[0]`, `.a[*].b`,
/// `.a[?(@.type=="Ready")].status`. Several results are joined with commas.
pub fn json_path(object: &Value, path: &str) -> Vec<Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut current = vec![object.clone()];
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let field = &after[..end];
            rest = &after[end..];
            if field.is_empty() {
                continue;
            }
            current = current
                .iter()
                .filter_map(|v| v.get(field).cloned())
                .collect();
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else { break };
            let selector = &after[..end];
            rest = &after[end + 1..];
            current = current.iter().flat_map(|v| select(v, selector)).collect();
        } else {
            break;
        }
    }
    current
}

fn select(value: &Value, selector: &str) -> Vec<Value> {
    let Some(items) = value.as_array() else {
        return Vec::new();
    };
    if selector == "*" {
        return items.clone();
    }
    if let Ok(index) = selector.parse::<i64>() {
        let i = if index < 0 {
            items.len() as i64 + index
        } else {
            index
        };
        return usize::try_from(i)
            .ok()
            .and_then(|i| items.get(i))
            .cloned()
            .into_iter()
            .collect();
    }
    if let Some(filter) = selector
        .strip_prefix("?(@.")
        .and_then(|f| f.strip_suffix(')'))
    {
        let Some((field, wanted)) = filter.split_once("==") else {
            return Vec::new();
        };
        let wanted = wanted.trim().trim_matches(|c| c == '"' || c == '\'');
        return items
            .iter()
            .filter(|item| {
                json_path(item, &format!(".{}", field.trim()))
                    .first()
                    .is_some_and(|v| v.as_str().map_or(v.to_string(), String::from) == wanted)
            })
            .cloned()
            .collect();
    }
    Vec::new()
}

/// A custom column's cell as kube-apiserver's tableconvertor makes it: only the path's first
/// result counts; a `string` column prints it as text (an array or map as compact JSON), other
/// types keep a value of their type and drop the rest.
fn cell(values: Vec<Value>, column: &PrinterColumn, now: jiff::Timestamp) -> Value {
    let Some(value) = values.into_iter().next() else {
        return Value::Null;
    };
    match (column.type_.as_str(), value) {
        (_, Value::Null) => Value::Null,
        ("string", Value::String(text)) => Value::String(text),
        ("string", other) => Value::String(other.to_string()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, |i| json!(i)),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        ("boolean", Value::Bool(b)) => Value::Bool(b),
        ("date", Value::String(text)) => match text.parse::<jiff::Timestamp>() {
            Ok(then) => json!(human_duration(now.as_second() - then.as_second())),
            Err(_) => json!("<invalid>"),
        },
        _ => Value::Null,
    }
}

fn column(name: &str, type_: &str, format: &str, description: &str, priority: i64) -> Value {
    json!({"name": name, "type": type_, "format": format, "description": description, "priority": priority})
}

fn count(value: &Value) -> i64 {
    value.as_object().map_or(0, |m| m.len() as i64)
}

fn int(value: &Value) -> i64 {
    value.as_i64().unwrap_or(0)
}

/// Built-in columns between NAME and AGE, and the cells of one object.
fn builtin_columns(rt: &ResourceType) -> Vec<(&'static str, &'static str)> {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => vec![
            ("Ready", "string"),
            ("Status", "string"),
            ("Restarts", "string"),
        ],
        ("apps", "Deployment") => vec![
            ("Ready", "string"),
            ("Up-to-date", "integer"),
            ("Available", "integer"),
        ],
        ("apps", "ReplicaSet") => vec![
            ("Desired", "integer"),
            ("Current", "integer"),
            ("Ready", "integer"),
        ],
        ("apps", "StatefulSet") => vec![("Ready", "string")],
        ("batch", "Job") => vec![("Status", "string"), ("Completions", "string")],
        ("", "Service") => vec![
            ("Type", "string"),
            ("Cluster-IP", "string"),
            ("External-IP", "string"),
            ("Port(s)", "string"),
        ],
        ("", "ConfigMap") => vec![("Data", "integer")],
        ("", "Secret") => vec![("Type", "string"), ("Data", "integer")],
        ("", "Namespace") => vec![("Status", "string")],
        ("", "PersistentVolumeClaim") => vec![("Status", "string")],
        ("", "Node") => vec![("Status", "string")],
        _ => Vec::new(),
    }
}

fn pod_cells(pod: &Value) -> Vec<Value> {
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let total = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = statuses.iter().filter(|s| s["ready"] == true).count();
    let restarts: i64 = statuses.iter().map(|s| int(&s["restartCount"])).sum();
    let waiting = statuses
        .iter()
        .find_map(|s| s["state"]["waiting"]["reason"].as_str().map(String::from));
    let terminating = pod["metadata"]["deletionTimestamp"].is_string();
    let status = if terminating {
        "Terminating".to_string()
    } else {
        waiting.unwrap_or_else(|| {
            let gated = pod["status"]["conditions"]
                .as_array()
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
                });
            if gated {
                return "SchedulingGated".to_string();
            }
            pod["status"]["reason"]
                .as_str()
                .or(pod["status"]["phase"].as_str())
                .unwrap_or("Pending")
                .to_string()
        })
    };
    vec![
        json!(format!("{ready}/{total}")),
        json!(status),
        json!(restarts.to_string()),
    ]
}

fn service_ports(service: &Value) -> String {
    let ports: Vec<String> = service["spec"]["ports"]
        .as_array()
        .map(|ports| {
            ports
                .iter()
                .map(|p| {
                    let protocol = p["protocol"].as_str().unwrap_or("TCP");
                    match p["nodePort"].as_i64() {
                        Some(node) => format!("{}:{node}/{protocol}", int(&p["port"])),
                        None => format!("{}/{protocol}", int(&p["port"])),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    }
}

fn builtin_cells(rt: &ResourceType, object: &Value) -> Vec<Value> {
    let spec = &object["spec"];
    let status = &object["status"];
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => pod_cells(object),
        ("apps", "Deployment") => vec![
            json!(format!(
                "{}/{}",
                int(&status["readyReplicas"]),
                spec["replicas"].as_i64().unwrap_or(1)
            )),
            json!(int(&status["updatedReplicas"])),
            json!(int(&status["availableReplicas"])),
        ],
        ("apps", "ReplicaSet") => vec![
            json!(spec["replicas"].as_i64().unwrap_or(1)),
            json!(int(&status["replicas"])),
            json!(int(&status["readyReplicas"])),
        ],
        ("apps", "StatefulSet") => vec![json!(format!(
            "{}/{}",
            int(&status["readyReplicas"]),
            spec["replicas"].as_i64().unwrap_or(1)
        ))],
        ("batch", "Job") => {
            let complete = status["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Complete" && c["status"] == "True")
            });
            let failed = status["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Failed" && c["status"] == "True")
            });
            let state = if complete {
                "Complete"
            } else if failed {
                "Failed"
            } else {
                "Running"
            };
            vec![
                json!(state),
                json!(format!(
                    "{}/{}",
                    int(&status["succeeded"]),
                    spec["completions"].as_i64().unwrap_or(1)
                )),
            ]
        }
        ("", "Service") => {
            let external: Vec<String> = status["loadBalancer"]["ingress"]
                .as_array()
                .map(|i| {
                    i.iter()
                        .filter_map(|x| {
                            x["ip"]
                                .as_str()
                                .or(x["hostname"].as_str())
                                .map(String::from)
                        })
                        .collect()
                })
                .unwrap_or_default();
            let external = if let Some(name) = spec["externalName"].as_str() {
                name.to_string()
            } else if external.is_empty() {
                if spec["type"] == "LoadBalancer" {
                    "<pending>".into()
                } else {
                    "<none>".into()
                }
            } else {
                external.join(",")
            };
            vec![
                json!(spec["type"].as_str().unwrap_or("ClusterIP")),
                json!(spec["clusterIP"].as_str().unwrap_or("<none>")),
                json!(external),
                json!(service_ports(object)),
            ]
        }
        ("", "ConfigMap") => vec![json!(count(&object["data"]) + count(&object["binaryData"]))],
        ("", "Secret") => vec![
            json!(object["type"].as_str().unwrap_or("Opaque")),
            json!(count(&object["data"])),
        ],
        ("", "Namespace" | "PersistentVolumeClaim") => {
            vec![json!(status["phase"].as_str().unwrap_or(""))]
        }
        ("", "Node") => {
            let ready = status["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            vec![json!(if ready { "Ready" } else { "NotReady" })]
        }
        _ => Vec::new(),
    }
}

/// The column definitions of a resource type's table.
pub fn columns(rt: &ResourceType) -> Vec<Value> {
    let mut columns = vec![column(
        "Name",
        "string",
        "name",
        "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
        0,
    )];
    if rt.is_custom() {
        for c in &rt.printer_columns {
            columns.push(column(
                &c.name,
                &c.type_,
                &c.format,
                &c.description,
                c.priority,
            ));
        }
        if !rt
            .printer_columns
            .iter()
            .any(|c| c.json_path == ".metadata.creationTimestamp")
        {
            columns.push(age_column());
        }
        return columns;
    }
    for (name, type_) in builtin_columns(rt) {
        columns.push(column(name, type_, "", "", 0));
    }
    columns.push(age_column());
    columns
}

fn age_column() -> Value {
    column(
        "Age",
        "string",
        "",
        "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
        0,
    )
}

/// The cells of one object's row.
pub fn cells(rt: &ResourceType, object: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let mut cells = vec![object["metadata"]["name"].clone()];
    if rt.is_custom() {
        for c in &rt.printer_columns {
            cells.push(cell(json_path(object, &c.json_path), c, now));
        }
        if !rt
            .printer_columns
            .iter()
            .any(|c| c.json_path == ".metadata.creationTimestamp")
        {
            cells.push(json!(age(&object["metadata"]["creationTimestamp"], now)));
        }
        return cells;
    }
    cells.extend(builtin_cells(rt, object));
    cells.push(json!(age(&object["metadata"]["creationTimestamp"], now)));
    cells
}

/// `PartialObjectMetadata` of an object.
pub fn partial_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object["metadata"].clone(),
    })
}

fn row(rt: &ResourceType, object: &Value, include: IncludeObject, now: jiff::Timestamp) -> Value {
    let mut row = json!({"cells": cells(rt, object, now)});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => row["object"] = partial_metadata(object),
        IncludeObject::Object => row["object"] = object.clone(),
    }
    row
}

/// A Table of objects (a list, a single get, or one watch event).
pub fn table(
    rt: &ResourceType,
    objects: &[Value],
    list_metadata: Value,
    include: IncludeObject,
    with_columns: bool,
) -> Value {
    let now = jiff::Timestamp::now();
    let rows: Vec<Value> = objects.iter().map(|o| row(rt, o, include, now)).collect();
    let mut table = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": [],
        "rows": rows,
    });
    if with_columns {
        table["columnDefinitions"] = Value::Array(columns(rt));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin;

    #[test]
    fn human_durations_like_kubectl() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (10 * 3600, "10h"),
            (3 * 86400 + 3600, "3d1h"),
            (30 * 86400, "30d"),
            (800 * 86400, "2y70d"),
        ];
        for (seconds, text) in cases {
            assert_eq!(human_duration(seconds), text, "{seconds}");
        }
    }

    #[test]
    fn custom_cells_like_the_tableconvertor() {
        let now: jiff::Timestamp = "2026-01-01T00:10:00Z".parse().expect("a timestamp");
        let column = |type_: &str| PrinterColumn {
            name: "c".into(),
            type_: type_.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: ".x".into(),
        };
        let cases = [
            (
                "string",
                vec![json!(["staging", "prod"])],
                json!(r#"["staging","prod"]"#),
            ),
            ("string", vec![json!({"a": 1})], json!(r#"{"a":1}"#)),
            ("string", vec![json!(80), json!(443)], json!("80")),
            ("string", vec![json!(true)], json!("true")),
            ("string", vec![], Value::Null),
            ("integer", vec![json!(2.7)], json!(2)),
            ("integer", vec![json!("2")], Value::Null),
            ("number", vec![json!(3)], json!(3.0)),
            ("boolean", vec![json!(false)], json!(false)),
            ("date", vec![json!("2026-01-01T00:00:00Z")], json!("10m")),
            ("date", vec![json!("yesterday")], json!("<invalid>")),
        ];
        for (type_, values, expected) in cases {
            assert_eq!(
                cell(values.clone(), &column(type_), now),
                expected,
                "{type_} {values:?}"
            );
        }
    }

    #[test]
    fn json_paths() {
        let object = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}
        ], "phase": "Ready"}, "spec": {"ports": [{"port": 80}, {"port": 443}]}});
        let cases = [
            (".status.phase", vec![json!("Ready")]),
            (
                ".status.conditions[?(@.type==\"Synced\")].status",
                vec![json!("False")],
            ),
            (".spec.ports[*].port", vec![json!(80), json!(443)]),
            (".spec.ports[-1].port", vec![json!(443)]),
            (".spec.missing", vec![]),
        ];
        for (path, expected) in cases {
            assert_eq!(json_path(&object, path), expected, "{path}");
        }
    }

    #[test]
    fn pod_and_configmap_rows() {
        let pods = builtin("", "Pod").expect("pods");
        let pod = json!({"metadata": {"name": "web-1", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}, {"ready": false, "restartCount": 1,
              "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        let now = jiff::Timestamp::now();
        let cells = cells(&pods, &pod, now);
        assert_eq!(
            cells[..4],
            [
                json!("web-1"),
                json!("1/2"),
                json!("CrashLoopBackOff"),
                json!("3")
            ]
        );
        let gated = json!({"metadata": {"name": "web-2", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
              "reason": "SchedulingGated"}]}});
        assert_eq!(
            super::cells(&pods, &gated, now)[2],
            json!("SchedulingGated")
        );
        let names: Vec<Value> = columns(&pods).iter().map(|c| c["name"].clone()).collect();
        assert_eq!(
            names,
            [
                json!("Name"),
                json!("Ready"),
                json!("Status"),
                json!("Restarts"),
                json!("Age")
            ]
        );
    }
}
