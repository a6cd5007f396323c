//! Built-in objects decoded as kube-apiserver decodes them: into the typed API structs
//! (k8s-openapi's, generated from the same OpenAPI as the Go types) and back. Unknown fields
//! are dropped, wrong types are refused, and formats (times, base64 data) are checked. Without
//! this a client could store fields a real cluster never keeps, and pass here only.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use k8s_openapi::api::{
    apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination, core::v1 as core,
    discovery::v1 as discovery, events::v1 as events, networking::v1 as networking,
    policy::v1 as policy, rbac::v1 as rbac,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;

use crate::resources::ResourceType;

fn encode<T: DeserializeOwned + Serialize>(object: &Value) -> Result<Value, String> {
    // Decoding from the borrowed value spares a deep copy of the whole object per write.
    let typed = T::deserialize(object).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

fn round_trip<T: DeserializeOwned + Serialize + 'static>(object: &Value) -> Result<Value, String> {
    let mut value = encode::<T>(object)?;
    drop_empty_maps::<T>(&mut value);
    Ok(value)
}

/// One step of a path into a JSON value.
#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

fn at_mut<'a>(value: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(value, |node, step| match step {
        Step::Key(key) => node.get_mut(key.as_str()),
        Step::Index(i) => node.get_mut(*i),
    })
}

fn empty_objects(value: &Value, path: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match value {
        Value::Object(map) if map.is_empty() => out.push(path.clone()),
        Value::Object(map) => {
            for (key, child) in map {
                path.push(Step::Key(key.clone()));
                empty_objects(child, path, out);
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                path.push(Step::Index(i));
                empty_objects(child, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// Go's `omitempty` drops an empty map where k8s-openapi keeps `{}` (`data: {}`), while an
/// empty struct stays `{}` in both (`resources: {}`).
fn drop_empty_maps<T: DeserializeOwned + Serialize + 'static>(value: &mut Value) {
    let mut paths = Vec::new();
    empty_objects(value, &mut Vec::new(), &mut paths);
    // Removing keys never moves array items, so every path stays valid.
    for path in paths.iter().rev() {
        let Some((last, parent)) = path.split_last() else {
            continue;
        };
        if !is_map_at::<T>(value, path) {
            continue;
        }
        if let (Step::Key(key), Some(Value::Object(map))) = (last, at_mut(value, parent)) {
            map.remove(key);
        }
    }
}

/// Where in a type a path leads, array items alike: whether a `{}` there is a map or a
/// struct is the type's, not the object's.
type Shape = (TypeId, Vec<Option<String>>);

/// Each shape's answer, found once per process: finding it encodes the whole object three
/// times, and doing that for every `{}` of every write (a Pod has several) was most of the
/// emulator's time under a rollout.
static MAP_SHAPES: LazyLock<RwLock<HashMap<Shape, bool>>> = LazyLock::new(Default::default);

fn is_map_at<T: DeserializeOwned + Serialize + 'static>(value: &Value, path: &[Step]) -> bool {
    let shape: Shape = (
        TypeId::of::<T>(),
        path.iter()
            .map(|step| match step {
                Step::Key(key) => Some(key.clone()),
                Step::Index(_) => None,
            })
            .collect(),
    );
    let known = MAP_SHAPES
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(&shape)
        .copied();
    known.unwrap_or_else(|| {
        let is_map = probe_is_map::<T>(value, path);
        MAP_SHAPES
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(shape, is_map);
        is_map
    })
}

/// The two look alike in JSON, so a `{}` is told apart by whether a key put into it survives
/// the typed round trip: a struct drops unknown keys, a map keeps them.
fn probe_is_map<T: DeserializeOwned + Serialize>(value: &Value, path: &[Step]) -> bool {
    const PROBE: &str = "comb.sandbox/probe";
    let kept: Vec<bool> = [json!(""), json!("0"), json!({})]
        .into_iter()
        .map(|sample| {
            let mut probe = value.clone();
            let Some(node) = at_mut(&mut probe, path) else {
                return false;
            };
            *node = json!({PROBE: sample});
            encode::<T>(&probe).is_ok_and(|mut encoded| {
                at_mut(&mut encoded, path).is_some_and(|n| n.get(PROBE).is_some())
            })
        })
        .collect();
    // A map keeps a key whose value has its type; free-form JSON (a CRD's
    // `subresources.status: {}`) keeps every key, and Go keeps it as it came.
    kept.iter().any(|k| *k) && !kept.iter().all(|k| *k)
}

/// The object after a typed decode and encode, or the decode error; `None` for kinds that
/// have no typed form here (custom resources).
pub fn decode(rt: &ResourceType, object: &Value) -> Option<Result<Value, String>> {
    codec(rt).map(|(round_trip, _)| {
        round_trip(object).map(|mut decoded| {
            keep_zero_times(rt, &mut decoded);
            decoded
        })
    })
}

/// Go encodes a zero `metav1.Time` as `null` even under `omitempty` (a struct is never
/// empty): a Pod condition's `lastProbeTime`, which nothing sets, is always there.
fn keep_zero_times(rt: &ResourceType, object: &mut Value) {
    if (rt.group.as_str(), rt.kind.as_str()) != ("", "Pod") {
        return;
    }
    let conditions = object
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut);
    for condition in conditions.into_iter().flatten() {
        if let Some(condition) = condition.as_object_mut() {
            for key in ["lastProbeTime", "lastTransitionTime"] {
                condition.entry(key).or_insert(Value::Null);
            }
        }
    }
}

type Codec = fn(&Value) -> Result<Value, String>;

/// The kind's typed round trip and its plain encode (empty maps kept, for finding unknown
/// fields by what the decode dropped).
fn codec(rt: &ResourceType) -> Option<(Codec, Codec)> {
    fn pair<T: DeserializeOwned + Serialize + 'static>() -> (Codec, Codec) {
        (round_trip::<T>, encode::<T>)
    }
    let f = match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Namespace") => pair::<core::Namespace>(),
        ("", "Node") => pair::<core::Node>(),
        ("", "Pod") => pair::<core::Pod>(),
        ("", "Service") => pair::<core::Service>(),
        ("", "Endpoints") => pair::<core::Endpoints>(),
        ("", "ConfigMap") => pair::<core::ConfigMap>(),
        ("", "Secret") => pair::<core::Secret>(),
        ("", "ServiceAccount") => pair::<core::ServiceAccount>(),
        ("", "PersistentVolumeClaim") => pair::<core::PersistentVolumeClaim>(),
        ("", "Event") => pair::<core::Event>(),
        ("apps", "Deployment") => pair::<apps::Deployment>(),
        ("apps", "ReplicaSet") => pair::<apps::ReplicaSet>(),
        ("apps", "StatefulSet") => pair::<apps::StatefulSet>(),
        ("apps", "DaemonSet") => pair::<apps::DaemonSet>(),
        ("batch", "Job") => pair::<batch::Job>(),
        ("batch", "CronJob") => pair::<batch::CronJob>(),
        ("networking.k8s.io", "Ingress") => pair::<networking::Ingress>(),
        ("networking.k8s.io", "NetworkPolicy") => pair::<networking::NetworkPolicy>(),
        ("discovery.k8s.io", "EndpointSlice") => pair::<discovery::EndpointSlice>(),
        ("coordination.k8s.io", "Lease") => pair::<coordination::Lease>(),
        ("events.k8s.io", "Event") => pair::<events::Event>(),
        ("policy", "PodDisruptionBudget") => pair::<policy::PodDisruptionBudget>(),
        ("rbac.authorization.k8s.io", "Role") => pair::<rbac::Role>(),
        ("rbac.authorization.k8s.io", "RoleBinding") => pair::<rbac::RoleBinding>(),
        ("rbac.authorization.k8s.io", "ClusterRole") => pair::<rbac::ClusterRole>(),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => pair::<rbac::ClusterRoleBinding>(),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            pair::<apiextensions::CustomResourceDefinition>()
        }
        _ => return None,
    };
    Some(f)
}

fn collect_unknown(input: &Value, decoded: &Value, path: &str, out: &mut Vec<String>) {
    match (input, decoded) {
        (Value::Object(given), Value::Object(kept)) => {
            for (key, value) in given {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match kept.get(key) {
                    Some(kept_value) => collect_unknown(value, kept_value, &child, out),
                    None if value.is_null() => {}
                    None => out.push(child),
                }
            }
        }
        (Value::Array(given), Value::Array(kept)) => {
            for (i, (value, kept_value)) in given.iter().zip(kept).enumerate() {
                collect_unknown(value, kept_value, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Paths of the fields a typed decode drops (`spec.replica`), for strict field validation.
pub fn unknown_fields(rt: &ResourceType, object: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(Ok(decoded)) = codec(rt).map(|(_, encode)| encode(object)) {
        collect_unknown(object, &decoded, "", &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_dropped_and_reported() {
        let rt = builtin("apps", "Deployment").expect("deployments");
        let object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"replica": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"spec": {"containers": [{"name": "a", "image": "x", "imagePullPolcy": "Always"}]}}},
            "extra": null});
        assert_eq!(
            unknown_fields(&rt, &object),
            [
                "spec.replica",
                "spec.template.spec.containers[0].imagePullPolcy"
            ]
        );
        let decoded = decode(&rt, &object).expect("typed").expect("decodes");
        assert!(decoded["spec"].get("replica").is_none());
        assert_eq!(
            decoded["metadata"]["creationTimestamp"],
            "2024-01-01T00:00:00Z"
        );
    }

    #[test]
    fn wrong_types_and_bad_data_are_refused() {
        let deploy = builtin("apps", "Deployment").expect("deployments");
        let wrong = json!({"metadata": {"name": "web"}, "spec": {"replicas": "three", "selector": {},
            "template": {}}});
        assert!(decode(&deploy, &wrong).expect("typed").is_err());
        let secret = builtin("", "Secret").expect("secrets");
        let bad = json!({"metadata": {"name": "s"}, "data": {"k": "not base64!"}});
        assert!(decode(&secret, &bad).expect("typed").is_err());
        let good = json!({"metadata": {"name": "s"}, "data": {"k": "dmFsdWU="}});
        assert_eq!(
            decode(&secret, &good).expect("typed").expect("decodes")["data"]["k"],
            "dmFsdWU="
        );
    }
}
