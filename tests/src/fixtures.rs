//! Comb specs and manifests the suites build on, and the parts of a status they compare.

use comb_api::CombStatus;
use serde_json::{Value, json};

/// `(phase, Ready reason, Ready message)` of a status.
pub fn verdict(status: &CombStatus) -> (String, String, String) {
    let ready = status.ready().expect("Ready condition");
    (
        status
            .phase
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        ready
            .reason
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        ready.message.clone().unwrap_or_default(),
    )
}

/// `(phase, reason, message)` as owned strings, to compare with [`verdict`].
pub fn expect(phase: &str, reason: &str, message: &str) -> (String, String, String) {
    (phase.into(), reason.into(), message.into())
}

/// `kind/name` of every recorded managed resource.
pub fn managed(status: &CombStatus) -> Vec<String> {
    status
        .managed()
        .iter()
        .map(|r| format!("{}/{}", r.kind, r.name))
        .collect()
}

/// A Deployment of one replica of `image`, named `name`, selecting `app: name`.
pub fn deployment(name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": image}]}
            }
        }
    })
}

/// A ClusterIP Service `name` on `port`, selecting `app: name`.
pub fn service(name: &str, port: i32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"name": "client", "port": port}]}
    })
}

/// A ConfigMap `name` holding `data`.
pub fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

/// The recorded endpoints as `(name, port, cluster)`.
pub fn endpoints(status: &CombStatus) -> Vec<(String, i32, Option<String>)> {
    status
        .endpoint_list()
        .iter()
        .map(|e| (e.name.clone(), e.port, e.cluster.clone()))
        .collect()
}

/// A Manifests Comb: Deployment and Service `name` running `image`, endpoint `http:80`.
pub fn web(name: &str, image: &str) -> Value {
    json!({
        "class": "Manifests",
        "config": {
            "manifests": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                          "template": {"metadata": {"labels": {"app": name}},
                                       "spec": {"containers": [{"name": "main", "image": image}]}}}},
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                 "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80}]}}
            ],
            "endpoints": [{"name": "http", "port": 80}]
        }
    })
}
