//! Just enough of Kubernetes' protobuf encoding to take the bodies kubectl's imperative
//! commands send (`kubectl create namespace|configmap|secret|deployment` always use
//! protobuf): the `k8s\0` envelope (`runtime.Unknown`) around a v1 Namespace, ConfigMap or
//! Secret, or an apps/v1 Deployment (decoded by the field tables below, from k8s.io/api's
//! `generated.proto`). A body with a set field these tables do not know is refused rather than
//! stored without it; other kinds answer 415 like a server without protobuf, and responses
//! are always JSON (kubectl accepts both).

use base64::Engine;
use serde_json::{Map, Value, json};

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";

/// One field of a protobuf message: its number and its varint or length-delimited value.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// The fields of a message in order, or `None` when it is not well-formed (or uses wire
/// types these messages never do).
fn fields(message: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < message.len() {
        let key = varint(message, &mut at)?;
        let field = match key & 7 {
            0 => Field::Varint(varint(message, &mut at)?),
            2 => {
                let length = usize::try_from(varint(message, &mut at)?).ok()?;
                let end = at.checked_add(length)?;
                let bytes = message.get(at..end)?;
                at = end;
                Field::Bytes(bytes)
            }
            _ => return None,
        };
        out.push((key >> 3, field));
    }
    Some(out)
}

fn text(bytes: &[u8]) -> Option<String> {
    String::from_utf8(bytes.to_vec()).ok()
}

/// A `map<string, string>` (or bytes, base64-encoded as JSON carries them) entry.
fn map_entry(entry: &[u8], values_are_bytes: bool) -> Option<(String, Value)> {
    let mut key = String::new();
    let mut value = Value::String(String::new());
    for (number, field) in fields(entry)? {
        match (number, field) {
            (1, Field::Bytes(b)) => key = text(b)?,
            (2, Field::Bytes(b)) if values_are_bytes => {
                value = json!(base64::engine::general_purpose::STANDARD.encode(b));
            }
            (2, Field::Bytes(b)) => value = json!(text(b)?),
            _ => {}
        }
    }
    Some((key, value))
}

fn insert_entry(target: &mut Map<String, Value>, name: &str, entry: (String, Value)) {
    let map = target.entry(name).or_insert_with(|| json!({}));
    if let Some(map) = map.as_object_mut() {
        map.insert(entry.0, entry.1);
    }
}

/// `ObjectMeta`: the fields a create sets (name, generateName, namespace, labels,
/// annotations, finalizers); empty strings are absent values in proto3.
fn object_meta(message: &[u8]) -> Option<Value> {
    let mut metadata = Map::new();
    for (number, field) in fields(message)? {
        match (number, field) {
            (1, Field::Bytes(b)) if !b.is_empty() => {
                metadata.insert("name".into(), json!(text(b)?));
            }
            (2, Field::Bytes(b)) if !b.is_empty() => {
                metadata.insert("generateName".into(), json!(text(b)?));
            }
            (3, Field::Bytes(b)) if !b.is_empty() => {
                metadata.insert("namespace".into(), json!(text(b)?));
            }
            (6, Field::Bytes(b)) if !b.is_empty() => {
                metadata.insert("resourceVersion".into(), json!(text(b)?));
            }
            (11, Field::Bytes(b)) => insert_entry(&mut metadata, "labels", map_entry(b, false)?),
            (12, Field::Bytes(b)) => {
                insert_entry(&mut metadata, "annotations", map_entry(b, false)?)
            }
            (14, Field::Bytes(b)) => {
                let list = metadata.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(list) = list.as_array_mut() {
                    list.push(json!(text(b)?));
                }
            }
            _ => {}
        }
    }
    Some(Value::Object(metadata))
}

/// The JSON form of a v1 Namespace, ConfigMap or Secret message.
fn object(kind: &str, message: &[u8]) -> Option<Value> {
    let mut object = Map::new();
    object.insert("apiVersion".into(), json!("v1"));
    object.insert("kind".into(), json!(kind));
    for (number, field) in fields(message)? {
        match (kind, number, field) {
            (_, 1, Field::Bytes(b)) => {
                object.insert("metadata".into(), object_meta(b)?);
            }
            ("Namespace", 2, Field::Bytes(b)) => {
                let mut finalizers = Vec::new();
                for (n, f) in fields(b)? {
                    if let (1, Field::Bytes(name)) = (n, f) {
                        finalizers.push(json!(text(name)?));
                    }
                }
                object.insert("spec".into(), json!({"finalizers": finalizers}));
            }
            ("ConfigMap", 2, Field::Bytes(b)) => {
                insert_entry(&mut object, "data", map_entry(b, false)?)
            }
            ("ConfigMap", 3, Field::Bytes(b)) => {
                insert_entry(&mut object, "binaryData", map_entry(b, true)?)
            }
            ("ConfigMap", 4, Field::Varint(v)) | ("Secret", 5, Field::Varint(v)) => {
                object.insert("immutable".into(), json!(v != 0));
            }
            ("Secret", 2, Field::Bytes(b)) => {
                insert_entry(&mut object, "data", map_entry(b, true)?)
            }
            ("Secret", 3, Field::Bytes(b)) if !b.is_empty() => {
                object.insert("type".into(), json!(text(b)?));
            }
            ("Secret", 4, Field::Bytes(b)) => {
                insert_entry(&mut object, "stringData", map_entry(b, false)?)
            }
            _ => {}
        }
    }
    Some(Value::Object(object))
}

/// How one field of a message becomes JSON.
#[derive(Clone, Copy)]
enum Shape {
    /// A string; empty is absent (Go's `omitempty`).
    Str,
    /// A non-pointer integer; zero is absent.
    Int,
    /// A pointer integer: present means set, zero included.
    OptInt,
    Bool,
    /// Repeated strings.
    Strs,
    /// `map<string, string>`.
    Map,
    /// `map<string, Quantity>` (resource lists).
    Quantities,
    /// `ObjectMeta`.
    Meta,
    /// `IntOrString`.
    IntOrString,
    /// A message, present even when empty (Go struct fields are).
    Msg(&'static [Field3]),
    /// Repeated messages.
    Msgs(&'static [Field3]),
    /// What the server owns (a create's status): dropped.
    Ignore,
}

/// A field of a message table: number, JSON name, shape.
type Field3 = (u64, &'static str, Shape);

const LABEL_SELECTOR_REQUIREMENT: &[Field3] = &[
    (1, "key", Shape::Str),
    (2, "operator", Shape::Str),
    (3, "values", Shape::Strs),
];
const LABEL_SELECTOR: &[Field3] = &[
    (1, "matchLabels", Shape::Map),
    (
        2,
        "matchExpressions",
        Shape::Msgs(LABEL_SELECTOR_REQUIREMENT),
    ),
];
const CONTAINER_PORT: &[Field3] = &[
    (1, "name", Shape::Str),
    (2, "hostPort", Shape::Int),
    (3, "containerPort", Shape::Int),
    (4, "protocol", Shape::Str),
    (5, "hostIP", Shape::Str),
];
const ENV_VAR: &[Field3] = &[(1, "name", Shape::Str), (2, "value", Shape::Str)];
const RESOURCES: &[Field3] = &[
    (1, "limits", Shape::Quantities),
    (2, "requests", Shape::Quantities),
];
const CONTAINER: &[Field3] = &[
    (1, "name", Shape::Str),
    (2, "image", Shape::Str),
    (3, "command", Shape::Strs),
    (4, "args", Shape::Strs),
    (5, "workingDir", Shape::Str),
    (6, "ports", Shape::Msgs(CONTAINER_PORT)),
    (7, "env", Shape::Msgs(ENV_VAR)),
    (8, "resources", Shape::Msg(RESOURCES)),
    (13, "terminationMessagePath", Shape::Str),
    (14, "imagePullPolicy", Shape::Str),
    (16, "stdin", Shape::Bool),
    (18, "tty", Shape::Bool),
    (20, "terminationMessagePolicy", Shape::Str),
];
const POD_SPEC: &[Field3] = &[
    (2, "containers", Shape::Msgs(CONTAINER)),
    (3, "restartPolicy", Shape::Str),
    (4, "terminationGracePeriodSeconds", Shape::OptInt),
    (6, "dnsPolicy", Shape::Str),
    (7, "nodeSelector", Shape::Map),
    (8, "serviceAccountName", Shape::Str),
    (9, "serviceAccount", Shape::Str),
    (10, "nodeName", Shape::Str),
    (19, "schedulerName", Shape::Str),
    (20, "initContainers", Shape::Msgs(CONTAINER)),
];
const POD_TEMPLATE_SPEC: &[Field3] = &[
    (1, "metadata", Shape::Meta),
    (2, "spec", Shape::Msg(POD_SPEC)),
];
const ROLLING_UPDATE: &[Field3] = &[
    (1, "maxUnavailable", Shape::IntOrString),
    (2, "maxSurge", Shape::IntOrString),
];
const DEPLOYMENT_STRATEGY: &[Field3] = &[
    (1, "type", Shape::Str),
    (2, "rollingUpdate", Shape::Msg(ROLLING_UPDATE)),
];
const DEPLOYMENT_SPEC: &[Field3] = &[
    (1, "replicas", Shape::OptInt),
    (2, "selector", Shape::Msg(LABEL_SELECTOR)),
    (3, "template", Shape::Msg(POD_TEMPLATE_SPEC)),
    (4, "strategy", Shape::Msg(DEPLOYMENT_STRATEGY)),
    (5, "minReadySeconds", Shape::Int),
    (6, "revisionHistoryLimit", Shape::OptInt),
    (7, "paused", Shape::Bool),
    (9, "progressDeadlineSeconds", Shape::OptInt),
];
/// A Deployment's status is the server's: ignored, like kube-apiserver's create strategy.
const DEPLOYMENT: &[Field3] = &[
    (1, "metadata", Shape::Meta),
    (2, "spec", Shape::Msg(DEPLOYMENT_SPEC)),
    (3, "status", Shape::Ignore),
];

/// An int32 as protobuf carries it (negative ones sign-extended to 64 bits).
fn int32(value: u64) -> i64 {
    i64::from(value as i32)
}

/// A message by its table; `None` when it is malformed or sets a field the table lacks.
fn message(table: &[Field3], bytes: &[u8]) -> Option<Map<String, Value>> {
    let mut out = Map::new();
    for (number, field) in fields(bytes)? {
        let Some((_, name, shape)) = table.iter().find(|(n, _, _)| *n == number) else {
            // gogo-protobuf writes every non-pointer field; only unset ones may be unknown.
            match field {
                Field::Varint(0) => continue,
                Field::Bytes([]) => continue,
                _ => return None,
            }
        };
        let name = (*name).to_string();
        match (*shape, field) {
            (Shape::Ignore, _) => {}
            (Shape::Str, Field::Bytes(b)) => {
                if !b.is_empty() {
                    out.insert(name, json!(text(b)?));
                }
            }
            (Shape::Int, Field::Varint(v)) => {
                if v != 0 {
                    out.insert(name, json!(int32(v)));
                }
            }
            (Shape::OptInt, Field::Varint(v)) => {
                out.insert(name, json!(int32(v)));
            }
            (Shape::Bool, Field::Varint(v)) => {
                if v != 0 {
                    out.insert(name, json!(true));
                }
            }
            (Shape::Strs, Field::Bytes(b)) => push(&mut out, name, json!(text(b)?)),
            (Shape::Map, Field::Bytes(b)) => insert_entry(&mut out, &name, map_entry(b, false)?),
            (Shape::Quantities, Field::Bytes(b)) => {
                let mut key = String::new();
                let mut quantity = String::new();
                for (n, f) in fields(b)? {
                    match (n, f) {
                        (1, Field::Bytes(k)) => key = text(k)?,
                        (2, Field::Bytes(q)) => {
                            for (qn, qf) in fields(q)? {
                                if let (1, Field::Bytes(t)) = (qn, qf) {
                                    quantity = text(t)?;
                                }
                            }
                        }
                        _ => {}
                    }
                }
                insert_entry(&mut out, &name, (key, json!(quantity)));
            }
            (Shape::Meta, Field::Bytes(b)) => {
                out.insert(name, object_meta(b)?);
            }
            (Shape::IntOrString, Field::Bytes(b)) => {
                let (mut kind, mut int, mut string) = (0, 0, String::new());
                for (n, f) in fields(b)? {
                    match (n, f) {
                        (1, Field::Varint(v)) => kind = v,
                        (2, Field::Varint(v)) => int = int32(v),
                        (3, Field::Bytes(t)) => string = text(t)?,
                        _ => {}
                    }
                }
                out.insert(name, if kind == 1 { json!(string) } else { json!(int) });
            }
            (Shape::Msg(inner), Field::Bytes(b)) => {
                out.insert(name, Value::Object(message(inner, b)?));
            }
            (Shape::Msgs(inner), Field::Bytes(b)) => {
                push(&mut out, name, Value::Object(message(inner, b)?));
            }
            _ => return None,
        }
    }
    Some(out)
}

fn push(target: &mut Map<String, Value>, name: String, item: Value) {
    let list = target.entry(name).or_insert_with(|| json!([]));
    if let Some(list) = list.as_array_mut() {
        list.push(item);
    }
}

/// Decodes a protobuf body: `Some(object)` for the kinds understood here, `None` otherwise.
pub fn decode(body: &[u8]) -> Option<Value> {
    let envelope = body.strip_prefix(MAGIC)?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (number, field) in fields(envelope)? {
        match (number, field) {
            (1, Field::Bytes(type_meta)) => {
                for (n, f) in fields(type_meta)? {
                    match (n, f) {
                        (1, Field::Bytes(b)) => api_version = text(b)?,
                        (2, Field::Bytes(b)) => kind = text(b)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace" | "ConfigMap" | "Secret") => object(&kind, raw),
        ("apps/v1", "Deployment") => {
            let mut object = message(DEPLOYMENT, raw)?;
            object.insert("apiVersion".into(), json!(api_version));
            object.insert("kind".into(), json!(kind));
            Some(Value::Object(object))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        text.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).expect("hex"))
            .collect()
    }

    #[test]
    fn kubectl_create_bodies() {
        // `kubectl create configmap x --from-literal=a=b`, as kubectl 1.32 sends it.
        let configmap = hex(
            "6b 38 73 00 0a 0f 0a 02 76 31 12 09 43 6f 6e 66 69 67 4d 61 70 12 1b 0a 11 0a 01 78 12 00 1a 00
             22 00 2a 00 32 00 38 00 42 00 12 06 0a 01 61 12 01 62 1a 00 22 00",
        );
        assert_eq!(
            decode(&configmap),
            Some(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}})
            )
        );
        // `kubectl create secret generic s --from-literal=k=v`.
        let secret = hex(
            "6b 38 73 00 0a 0c 0a 02 76 31 12 06 53 65 63 72 65 74 12 1d 0a 11 0a 01 73 12 00 1a 00 22 00 2a
             00 32 00 38 00 42 00 12 06 0a 01 6b 12 01 76 1a 00 1a 00 22 00",
        );
        assert_eq!(
            decode(&secret),
            Some(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dg=="}})
            )
        );
    }

    #[test]
    fn kubectl_create_deployment_body() {
        // `kubectl create deployment proto --image=nginx:1.27 --replicas=2 --port=8080 --
        // sleep 60`, as kubectl 1.32 sends it: every unset field written, an empty status.
        let body = hex(
            "6b 38 73 00 0a 15 0a 07 61 70 70 73 2f 76 31 12 0a 44 65 70 6c 6f 79 6d 65 6e 74 12 d1 01 0a 23 
             0a 05 70 72 6f 74 6f 12 00 1a 00 22 00 2a 00 32 00 38 00 42 00 5a 0c 0a 03 61 70 70 12 05 70 72 
             6f 74 6f 12 9b 01 08 02 12 0e 0a 0c 0a 03 61 70 70 12 05 70 72 6f 74 6f 1a 7f 0a 1e 0a 00 12 00 
             1a 00 22 00 2a 00 32 00 38 00 42 00 5a 0c 0a 03 61 70 70 12 05 70 72 6f 74 6f 12 5d 12 3f 0a 05 
             6e 67 69 6e 78 12 0a 6e 67 69 6e 78 3a 31 2e 32 37 1a 05 73 6c 65 65 70 1a 02 36 30 2a 00 32 0b 
             0a 00 10 00 18 90 3f 22 00 2a 00 42 00 6a 00 72 00 80 01 00 88 01 00 90 01 00 a2 01 00 1a 00 32 
             00 42 00 4a 00 52 00 58 00 60 00 68 00 82 01 00 8a 01 00 9a 01 00 c2 01 00 22 02 0a 00 28 00 38 
             00 1a 0c 08 00 10 00 18 00 20 00 28 00 38 00 1a 00 22 00",
        );
        let labels = json!({"app": "proto"});
        assert_eq!(
            decode(&body),
            Some(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "proto", "labels": labels},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": labels},
                    "strategy": {},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{
                            "name": "nginx", "image": "nginx:1.27", "command": ["sleep", "60"],
                            "ports": [{"containerPort": 8080}], "resources": {},
                        }]},
                    },
                },
            }))
        );
        // A set field the tables do not know is refused, not dropped.
        assert_eq!(
            message(CONTAINER_PORT, &[0x18, 0x50]),
            Some(Map::from_iter([("containerPort".to_string(), json!(80))]))
        );
        assert_eq!(message(CONTAINER_PORT, &[0x30, 0x01]), None);
        assert_eq!(message(CONTAINER_PORT, &[0x30, 0x00]), Some(Map::new()));
    }

    #[test]
    fn other_kinds_and_garbage_are_not_understood() {
        assert_eq!(decode(b"{\"kind\": \"ConfigMap\"}"), None);
        assert_eq!(decode(b"k8s\0\x0a\xff"), None);
        let statefulset = [
            b"k8s\0".as_slice(),
            &[0x0a, 0x14, 0x0a, 0x07],
            b"apps/v1",
            &[0x12, 0x0b],
            b"StatefulSet",
        ]
        .concat();
        assert_eq!(decode(&statefulset), None);
    }
}
