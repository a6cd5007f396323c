//! Just enough of Kubernetes' protobuf encoding to take the bodies kubectl's imperative
//! commands send (`kubectl create namespace|configmap|secret` always use protobuf): the
//! `k8s\0` envelope (`runtime.Unknown`) around a v1 Namespace, ConfigMap or Secret. Other
//! kinds answer 415 like a server without protobuf, and responses are always JSON (kubectl
//! accepts both).

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
    fn other_kinds_and_garbage_are_not_understood() {
        assert_eq!(decode(b"{\"kind\": \"ConfigMap\"}"), None);
        assert_eq!(decode(b"k8s\0\x0a\xff"), None);
        let deployment = [
            b"k8s\0".as_slice(),
            &[0x0a, 0x12, 0x0a, 0x07],
            b"apps/v1",
            &[0x12, 0x07],
            b"Deploym",
        ]
        .concat();
        assert_eq!(decode(&deployment), None);
    }
}
