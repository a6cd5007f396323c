//! Built-in objects decoded as kube-apiserver decodes them: into the typed API structs
//! (k8s-openapi's, generated from the same OpenAPI as the Go types) and back. Unknown fields
//! are dropped, wrong types are refused, and formats (times, base64 data) are checked. Without
//! this a client could store fields a real cluster never keeps, and pass here only.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use k8s_openapi::api::{
    apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination, core::v1 as core,
    discovery::v1 as discovery, events::v1 as events, networking::v1 as networking,
    policy::v1 as policy, rbac::v1 as rbac,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;

use crate::resources::ResourceType;

fn round_trip<T: DeserializeOwned + Serialize>(object: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

/// The object after a typed decode and encode, or the decode error; `None` for kinds that
/// have no typed form here (custom resources).
pub fn decode(rt: &ResourceType, object: &Value) -> Option<Result<Value, String>> {
    let f = match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Namespace") => round_trip::<core::Namespace>,
        ("", "Node") => round_trip::<core::Node>,
        ("", "Pod") => round_trip::<core::Pod>,
        ("", "Service") => round_trip::<core::Service>,
        ("", "Endpoints") => round_trip::<core::Endpoints>,
        ("", "ConfigMap") => round_trip::<core::ConfigMap>,
        ("", "Secret") => round_trip::<core::Secret>,
        ("", "ServiceAccount") => round_trip::<core::ServiceAccount>,
        ("", "PersistentVolumeClaim") => round_trip::<core::PersistentVolumeClaim>,
        ("", "Event") => round_trip::<core::Event>,
        ("apps", "Deployment") => round_trip::<apps::Deployment>,
        ("apps", "ReplicaSet") => round_trip::<apps::ReplicaSet>,
        ("apps", "StatefulSet") => round_trip::<apps::StatefulSet>,
        ("apps", "DaemonSet") => round_trip::<apps::DaemonSet>,
        ("batch", "Job") => round_trip::<batch::Job>,
        ("batch", "CronJob") => round_trip::<batch::CronJob>,
        ("networking.k8s.io", "Ingress") => round_trip::<networking::Ingress>,
        ("networking.k8s.io", "NetworkPolicy") => round_trip::<networking::NetworkPolicy>,
        ("discovery.k8s.io", "EndpointSlice") => round_trip::<discovery::EndpointSlice>,
        ("coordination.k8s.io", "Lease") => round_trip::<coordination::Lease>,
        ("events.k8s.io", "Event") => round_trip::<events::Event>,
        ("policy", "PodDisruptionBudget") => round_trip::<policy::PodDisruptionBudget>,
        ("rbac.authorization.k8s.io", "Role") => round_trip::<rbac::Role>,
        ("rbac.authorization.k8s.io", "RoleBinding") => round_trip::<rbac::RoleBinding>,
        ("rbac.authorization.k8s.io", "ClusterRole") => round_trip::<rbac::ClusterRole>,
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            round_trip::<rbac::ClusterRoleBinding>
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            round_trip::<apiextensions::CustomResourceDefinition>
        }
        _ => return None,
    };
    Some(f(object))
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
    if let Some(Ok(decoded)) = decode(rt, object) {
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
