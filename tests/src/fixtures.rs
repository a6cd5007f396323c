//! Comb specs and manifests the suites build on, and the parts of a status they compare.

use comb_api::{Comb, CombStatus};
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

/// The message of the CR's `Ready` condition, empty when it has none.
pub fn ready_message(comb: &Comb) -> String {
    comb.status
        .as_ref()
        .and_then(|status| status.ready())
        .and_then(|ready| ready.message.clone())
        .unwrap_or_default()
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

/// The scheduling gate [`held_web`] puts on its Pods, until [`release_held_pods`] removes it.
pub const HOLD_GATE: &str = "comb.internal/held-by-test";

/// [`web`] whose Pods stay Pending, unscheduled (`SchedulingGated`), until the test releases
/// them: a rollout held in the middle, the same on the emulator and a real cluster.
pub fn held_web(name: &str, image: &str) -> Value {
    let mut spec = web(name, image);
    spec["config"]["manifests"][0]["spec"]["template"]["spec"]["schedulingGates"] =
        json!([{"name": HOLD_GATE}]);
    spec
}

/// Removes the scheduling gates of the Pods of `namespace` that match `selector` and still have
/// some (what a scheduling-gate controller does), so that the scheduler places them: their names.
pub async fn release_held_pods(
    client: &kube::Client,
    namespace: &str,
    selector: &str,
) -> Vec<String> {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, ListParams, Patch, PatchParams};

    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = pods
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap_or_else(|error| panic!("listing the pods {selector}: {error}"));
    let mut released = Vec::new();
    for pod in listed.items {
        let gated = pod
            .spec
            .as_ref()
            .and_then(|spec| spec.scheduling_gates.as_ref())
            .is_some_and(|gates| !gates.is_empty());
        let Some(name) = pod.metadata.name.filter(|_| gated) else {
            continue;
        };
        let remove = json!({"spec": {"schedulingGates": null}});
        pods.patch(&name, &PatchParams::default(), &Patch::Merge(remove))
            .await
            .unwrap_or_else(|error| panic!("releasing pod {name}: {error}"));
        released.push(name);
    }
    released
}

/// The image of the first container of a workload's pod template (a Deployment's).
pub fn first_image(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]["containers"][0]["image"]
}

/// The spec of a `Manifests` Comb with these manifests and a `client` endpoint on 4222.
pub fn manifests_spec(manifests: Vec<Value>) -> Value {
    json!({"class": "Manifests", "config": {
        "manifests": manifests,
        "endpoints": [{"name": "client", "port": 4222}]
    }})
}

/// The addresses of each endpoint of an EndpointSlice (a real API server also defaults each
/// endpoint's `conditions` to `{}`).
pub fn slice_addresses(slice: &Value) -> Vec<Value> {
    slice["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .map(|endpoint| endpoint["addresses"].clone())
        .collect()
}

/// A `Manifests` spec: Deployment and Service `db` (type `service_type`) on port 5432, and the
/// endpoint `postgres` (with `external` when given).
pub fn db_spec(service_type: &str, external: Option<&str>) -> Value {
    let mut endpoint = json!({"name": "postgres", "port": 5432});
    if let Some(external) = external {
        endpoint["external"] = json!(external);
    }
    json!({"class": "Manifests", "config": {
        "endpoints": [endpoint],
        "manifests": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "db"},
             "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "db"}},
                      "template": {"metadata": {"labels": {"app": "db"}},
                                   "spec": {"containers": [{"name": "postgres", "image": "postgres:17"}]}}}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
             "spec": {"type": service_type, "selector": {"app": "db"},
                      "ports": [{"name": "postgres", "port": 5432}]}}
        ]
    }})
}

/// The image of a Deployment's first container, if the Deployment is there.
pub fn deployment_image(
    deployment: Option<&k8s_openapi::api::apps::v1::Deployment>,
) -> Option<String> {
    deployment?
        .spec
        .template
        .spec
        .as_ref()?
        .containers
        .first()?
        .image
        .clone()
}
