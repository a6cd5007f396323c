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
    drop_omitted_empties::<T>(&mut value);
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

/// What an empty `{}` or `[]` of an object may be.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Empty {
    /// `{}`: a map (omitted when empty) or a struct (kept).
    Object,
    /// `[]`: an optional list (omitted when empty) or a required one (kept).
    List,
}

fn empties(value: &Value, path: &mut Vec<Step>, out: &mut Vec<(Vec<Step>, Empty)>) {
    match value {
        Value::Object(map) if map.is_empty() => out.push((path.clone(), Empty::Object)),
        Value::Array(items) if items.is_empty() => out.push((path.clone(), Empty::List)),
        Value::Object(map) => {
            for (key, child) in map {
                path.push(Step::Key(key.clone()));
                empties(child, path, out);
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                path.push(Step::Index(i));
                empties(child, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// What Go makes of an empty `{}` or `[]` of a typed object.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Dropped by `omitempty`: an empty map or optional list.
    Omitted,
    /// Kept as it is: an empty struct (`resources: {}`), free-form JSON (a CRD schema's
    /// `default: []`).
    Kept,
    /// A list without `omitempty`: `[]` in the request, but storage's protobuf gives back a nil
    /// slice, which Go encodes as `null` (an EndpointSlice's `endpoints`, a Role's `rules`).
    NullWhenStored,
}

/// Go's `omitempty` drops an empty map or an empty optional list, where k8s-openapi keeps
/// `{}` and `[]` (`data: {}`, `env: []`); what else is empty stays, until it is stored.
fn drop_omitted_empties<T: DeserializeOwned + Serialize + 'static>(value: &mut Value) {
    remove_or_null::<T>(value, Fate::Omitted);
}

/// Removes the empties whose fate is `fate` (`Omitted`), or sets them to null
/// (`NullWhenStored`).
fn remove_or_null<T: DeserializeOwned + Serialize + 'static>(value: &mut Value, fate: Fate) {
    let mut found = Vec::new();
    empties(value, &mut Vec::new(), &mut found);
    // Removing keys never moves array items, so every path stays valid.
    for (path, empty) in found.iter().rev() {
        let Some((Step::Key(key), parent)) = path.split_last() else {
            continue;
        };
        if fate_at::<T>(value, path, *empty) != fate {
            continue;
        }
        if let Some(Value::Object(map)) = at_mut(value, parent) {
            if fate == Fate::Omitted {
                map.remove(key);
            } else {
                map.insert(key.clone(), Value::Null);
            }
        }
    }
}

/// Where in a type a path leads, array items alike, and what is empty there: its fate is the
/// type's, not the object's.
type Shape = (TypeId, Empty, Vec<Option<String>>);

/// Each shape's fate, found once per process: finding it encodes the whole object up to three
/// times, and doing that for every `{}` of every write (a Pod has several) was most of the
/// emulator's time under a rollout.
static FATES: LazyLock<RwLock<HashMap<Shape, Fate>>> = LazyLock::new(Default::default);

fn fate_at<T: DeserializeOwned + Serialize + 'static>(
    value: &Value,
    path: &[Step],
    empty: Empty,
) -> Fate {
    let shape: Shape = (
        TypeId::of::<T>(),
        empty,
        path.iter()
            .map(|step| match step {
                Step::Key(key) => Some(key.clone()),
                Step::Index(_) => None,
            })
            .collect(),
    );
    let known = FATES
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(&shape)
        .copied();
    known.unwrap_or_else(|| {
        let fate = match empty {
            Empty::Object if probe_is_map::<T>(value, path) => Fate::Omitted,
            Empty::Object => Fate::Kept,
            Empty::List => probe_list::<T>(value, path, &shape.2),
        };
        FATES
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(shape, fate);
        fate
    })
}

/// An optional list (an `Option` in k8s-openapi) is `omitempty` in Go, found by the typed round
/// trip of the object without it not bringing it back; a required one is not. Free-form JSON
/// takes a string as well, and Go keeps it as it came.
fn probe_list<T: DeserializeOwned + Serialize + 'static>(
    value: &Value,
    path: &[Step],
    keys: &[Option<String>],
) -> Fate {
    let Some((Step::Key(key), parent)) = path.split_last() else {
        return Fate::Kept;
    };
    let mut free_form = value.clone();
    if let Some(node) = at_mut(&mut free_form, path) {
        *node = json!("comb.sandbox/probe");
    }
    if encode::<T>(&free_form).is_ok_and(|mut encoded| at_mut(&mut encoded, path).is_some()) {
        return Fate::Kept;
    }
    let mut without = value.clone();
    if let Some(Value::Object(map)) = at_mut(&mut without, parent) {
        map.remove(key);
    }
    let optional =
        encode::<T>(&without).is_ok_and(|mut encoded| at_mut(&mut encoded, path).is_none());
    if optional && !optional_without_omitempty::<T>(keys) {
        Fate::Omitted
    } else {
        Fate::NullWhenStored
    }
}

/// The lists OpenAPI calls optional (`+optional`) that Go encodes without `omitempty`, in the
/// kinds served here. Found in k8s.io/api v0.37's types.go: the slice fields whose json tag
/// lacks `omitempty` (`grep -E '\[\][A-Za-z*.]+ +`json:"[a-zA-Z]+"'`) and whose comment says
/// `+optional` (the others are required, which k8s-openapi says itself), less the lists'
/// `items` and the kinds not stored.
fn optional_without_omitempty<T: 'static>(keys: &[Option<String>]) -> bool {
    let kind = TypeId::of::<T>();
    let keys: Vec<Option<&str>> = keys.iter().map(Option::as_deref).collect();
    match keys.as_slice() {
        [Some("endpoints" | "ports")] => kind == TypeId::of::<discovery::EndpointSlice>(),
        [Some("rules")] => {
            kind == TypeId::of::<rbac::Role>() || kind == TypeId::of::<rbac::ClusterRole>()
        }
        [Some("status"), Some("images"), None, Some("names")] => kind == TypeId::of::<core::Node>(),
        // A projected volume's, wherever a Pod spec is.
        [.., Some("projected"), Some("sources")] => true,
        _ => false,
    }
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
    codec(rt).map(|codec| {
        (codec.round_trip)(object).map(|mut decoded| {
            keep_zero_times(rt, &mut decoded);
            decoded
        })
    })
}

/// A decoded built-in object as kube-apiserver stores and answers it: its empty lists without
/// `omitempty` come back from storage's protobuf as `null` (what the field manager saw is
/// the request's `[]`).
pub fn as_stored(rt: &ResourceType, object: &mut Value) {
    if let Some(codec) = codec(rt) {
        (codec.null_empty_required)(object);
    }
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

/// A kind's typed functions.
struct Codec {
    /// The typed round trip, as a request is decoded.
    round_trip: fn(&Value) -> Result<Value, String>,
    /// The plain encode (empty maps kept, for finding unknown fields by what the decode
    /// dropped).
    encode: fn(&Value) -> Result<Value, String>,
    /// Empty lists without `omitempty` set to `null`, as stored.
    null_empty_required: fn(&mut Value),
}

fn codec(rt: &ResourceType) -> Option<Codec> {
    fn pair<T: DeserializeOwned + Serialize + 'static>() -> Codec {
        Codec {
            round_trip: round_trip::<T>,
            encode: encode::<T>,
            null_empty_required: |object| remove_or_null::<T>(object, Fate::NullWhenStored),
        }
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
    if let Some(Ok(decoded)) = codec(rt).map(|codec| (codec.encode)(object)) {
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

#[cfg(test)]
mod empty_lists {
    use super::*;
    use crate::resources::builtin;

    /// `object` as a create stores it: decoded, then as storage gives it back.
    fn stored(group: &str, kind: &str, object: Value) -> Value {
        let rt = builtin(group, kind).expect("served");
        let mut decoded = decode(&rt, &object).expect("typed").expect("decodes");
        as_stored(&rt, &mut decoded);
        decoded
    }

    #[test]
    fn an_empty_list_is_dropped_kept_or_null_as_go_has_it() {
        let pod = stored(
            "",
            "Pod",
            json!({"metadata": {"name": "p"}, "spec": {
                "containers": [{"name": "c", "image": "i", "env": [], "resources": {}}],
                "volumes": [{"name": "v", "projected": {"sources": []}}],
                "tolerations": []}}),
        );
        let slice = stored(
            "discovery.k8s.io",
            "EndpointSlice",
            json!({"metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": [], "ports": []}),
        );
        let role = stored(
            "rbac.authorization.k8s.io",
            "Role",
            json!({"metadata": {"name": "r"}, "rules": [{"verbs": [], "apiGroups": []}]}),
        );
        let no_rules = stored(
            "rbac.authorization.k8s.io",
            "Role",
            json!({"metadata": {"name": "r"}, "rules": []}),
        );
        let crd_schema = stored(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            json!({"metadata": {"name": "things.example.com"}, "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "things", "kind": "Thing"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object", "required": [], "default": {"list": []}}}}]}}),
        );
        let schema = &crd_schema["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let cases: Vec<(&str, Option<&Value>, Option<Value>)> = vec![
            // omitempty: gone.
            ("an env", pod["spec"]["containers"][0].get("env"), None),
            ("tolerations", pod["spec"].get("tolerations"), None),
            (
                "a rule's apiGroups",
                role["rules"][0].get("apiGroups"),
                None,
            ),
            ("a schema's required", schema.get("required"), None),
            // An empty struct stays.
            (
                "resources",
                pod["spec"]["containers"][0].get("resources"),
                Some(json!({})),
            ),
            // Free-form JSON stays as it came.
            (
                "a schema's default",
                schema.get("default"),
                Some(json!({"list": []})),
            ),
            // Without omitempty, required or not: null once stored.
            (
                "a rule's verbs",
                role["rules"][0].get("verbs"),
                Some(Value::Null),
            ),
            ("a Role's rules", no_rules.get("rules"), Some(Value::Null)),
            (
                "a slice's endpoints",
                slice.get("endpoints"),
                Some(Value::Null),
            ),
            ("a slice's ports", slice.get("ports"), Some(Value::Null)),
            (
                "a projected volume's sources",
                pod["spec"]["volumes"][0]["projected"].get("sources"),
                Some(Value::Null),
            ),
        ];
        for (name, found, expected) in cases {
            assert_eq!(found, expected.as_ref(), "{name}");
        }
    }
}
