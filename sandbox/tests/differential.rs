//! Differential conformance: the same request sequences against one emulator cluster and one
//! real cluster (etcd + kube-apiserver + controllers + kwok), compared answer by answer. The
//! real kube-apiserver is the oracle: where the two differ, the emulator is wrong.
//!
//! Each probe is a named sequence of requests; its transcript (status, content type, warnings
//! and the normalised body of every answer) must be the same on both. Only what must differ
//! is normalised: uids, timestamps, IPs, resourceVersion values (renamed in order of first
//! appearance, so "unchanged" and "changed" still compare), generated names.
//!
//! Skips with a printed reason when the real binaries are not built (`tests/kube/build`).

use std::collections::BTreeMap;
use std::time::Duration;

use comb_sandbox::{Backend, Clusters, SandboxOptions};
use http::{Method, Request};
use http_body_util::BodyExt as _;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

const NS: &str = "diff";

/// Probes known to differ, with why; they are printed but do not fail the test (a known one
/// that starts to match fails it, so this list only shrinks). Everything else must match.
const KNOWN: &[(&str, &str)] = &[];

/// Which known difference a probe shows, by probe name.
fn known(probe: &str) -> Option<&'static str> {
    KNOWN.iter().find(|(k, _)| *k == probe).map(|(_, why)| *why)
}
const DEADLINE: Duration = Duration::from_secs(30);
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// What one request sends.
#[derive(Clone)]
enum Payload {
    None,
    Json(Value),
    Bytes(Vec<u8>),
}

/// `kubectl create deployment proto --image=nginx:1.27 --replicas=2 --port=8080 -- sleep 60`'s
/// protobuf body (kubectl 1.32).
const KUBECTL_CREATE_DEPLOYMENT: &str = "6b3873000a150a07617070732f7631120a4465706c6f796d656e7412d1010a230a0570726f746f12001a0022002a003200380042005a0c0a03617070120570726f746f129b010802120e0a0c0a03617070120570726f746f1a7f0a1e0a0012001a0022002a003200380042005a0c0a03617070120570726f746f125d123f0a056e67696e78120a6e67696e783a312e32371a05736c6565701a0236302a00320b0a00100018903f22002a0042006a007200800100880100900100a201001a00320042004a0052005800600068008201008a01009a0100c2010022020a00280038001a0c0800100018002000280038001a002200";

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digits"))
        .collect()
}

/// One request of a probe.
#[derive(Clone)]
struct Step {
    method: Method,
    /// With `{ns}` for the probe namespace and `{name}` for a captured value.
    path: String,
    payload: Payload,
    content_type: &'static str,
    accept: Option<&'static str>,
    /// Read a watch stream until this many events (or the deadline).
    watch_events: Option<usize>,
    /// Store the answer's `metadata.resourceVersion` under this name (and its uid under
    /// `<name>_uid`), for later paths and bodies.
    capture_rv: Option<&'static str>,
    /// What of the answer to compare (default: all of it, normalised).
    view: fn(Value) -> Value,
}

fn step(method: Method, path: &str) -> Step {
    Step {
        method,
        path: path.to_string(),
        payload: Payload::None,
        content_type: "application/json",
        accept: None,
        watch_events: None,
        capture_rv: None,
        view: |v| v,
    }
}

fn get(path: &str) -> Step {
    step(Method::GET, path)
}

fn delete(path: &str) -> Step {
    step(Method::DELETE, path)
}

/// A DELETE with a `DeleteOptions` body (`{name}` placeholders in it are filled in).
fn delete_with(path: &str, options: Value) -> Step {
    Step {
        payload: Payload::Json(options),
        ..step(Method::DELETE, path)
    }
}

fn post(path: &str, body: Value) -> Step {
    Step {
        payload: Payload::Json(body),
        ..step(Method::POST, path)
    }
}

fn put(path: &str, body: Value) -> Step {
    Step {
        payload: Payload::Json(body),
        ..step(Method::PUT, path)
    }
}

fn patch(path: &str, content_type: &'static str, body: Value) -> Step {
    Step {
        payload: Payload::Json(body),
        content_type,
        ..step(Method::PATCH, path)
    }
}

/// A workload of `kind` (apps/v1) named `annotated`, at zero replicas.
fn annotated_workload(kind: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "annotated"},
           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "annotated"}},
                    "template": {"metadata": {"labels": {"app": "annotated"}},
                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

/// A JSON patch (`application/json-patch+json`, RFC 6902).
fn json_patch(path: &str, operations: Value) -> Step {
    patch(path, "application/json-patch+json", operations)
}

/// A JSON merge patch (`application/merge-patch+json`), what most probes patch with.
fn merge_patch(path: &str, body: Value) -> Step {
    patch(path, "application/merge-patch+json", body)
}

fn apply(path: &str, manager: &str, body: Value) -> Step {
    let separator = if path.contains('?') { '&' } else { '?' };
    patch(
        &format!("{path}{separator}fieldManager={manager}"),
        "application/apply-patch+yaml",
        body,
    )
}

impl Step {
    fn view(mut self, view: fn(Value) -> Value) -> Step {
        self.view = view;
        self
    }
    fn capture(mut self, name: &'static str) -> Step {
        self.capture_rv = Some(name);
        self
    }
}

struct Probe {
    name: &'static str,
    steps: Vec<Step>,
}

fn probe(name: &'static str, steps: Vec<Step>) -> Probe {
    Probe { name, steps }
}

const CM: &str = "/api/v1/namespaces/{ns}/configmaps";
const COMBS: &str = "/apis/comb.internal/v1/namespaces/{ns}/combs";

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn comb(name: &str, class: &str) -> Value {
    json!({"apiVersion": "comb.internal/v1", "kind": "Comb", "metadata": {"name": name}, "spec": {"class": class}})
}

/// Only the metadata that tells generation and resourceVersion behaviour apart.
fn generations(v: Value) -> Value {
    json!({
        "generation": v["metadata"]["generation"],
        "resourceVersion": v["metadata"]["resourceVersion"],
        "code": v["code"],
        "message": v["message"],
    })
}

fn generation_and_annotations(v: Value) -> Value {
    json!({
        "generation": v["metadata"]["generation"],
        "annotations": v["metadata"]["annotations"],
        "code": v["code"],
    })
}

fn managed_fields(v: Value) -> Value {
    json!({"managedFields": v["metadata"]["managedFields"], "code": v["code"], "message": v["message"]})
}

/// A workload's replicas and which of comb's managers manage its fields (without their times
/// and field sets; the controllers' own entries come when they come).
fn replicas_and_managers(v: Value) -> Value {
    let managers: Vec<Value> = v["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| {
            entry["manager"]
                .as_str()
                .is_some_and(|m| m.starts_with("comb"))
        })
        .map(|entry| json!([entry["manager"], entry["operation"]]))
        .collect();
    json!({"code": v["code"], "replicas": v["spec"]["replicas"], "managers": managers})
}

/// A workload's Pod template metadata and generation.
fn template_and_generation(v: Value) -> Value {
    json!({"code": v["code"], "generation": v["metadata"]["generation"],
           "template": v["spec"]["template"]["metadata"],
           "image": v["spec"]["template"]["spec"]["containers"][0]["image"]})
}

/// A workload's generation, its `note` annotation and `tier` label (what the controllers
/// write besides changes nothing here).
fn generation_and_note(v: Value) -> Value {
    json!({"code": v["code"], "generation": v["metadata"]["generation"],
           "note": v["metadata"]["annotations"]["note"], "tier": v["metadata"]["labels"]["tier"]})
}

/// What kubectl reads of a CRD's OpenAPI v3 document: per path the operations, the patch
/// content types and GVK extension, and the top of the kind's schema.
fn openapi_view(v: Value) -> Value {
    let mut paths = Map::new();
    for (path, item) in v["paths"].as_object().into_iter().flatten() {
        let mut ops = Map::new();
        for (verb, op) in item.as_object().into_iter().flatten() {
            if op.get("operationId").is_none() {
                continue;
            }
            let content: Vec<&String> = op["requestBody"]["content"]
                .as_object()
                .map(|c| c.keys().collect())
                .unwrap_or_default();
            let mut content: Vec<&String> = content;
            content.sort();
            let field_validation = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["name"] == "fieldValidation");
            ops.insert(
                verb.clone(),
                json!({
                    "action": op["x-kubernetes-action"],
                    "gvk": op["x-kubernetes-group-version-kind"],
                    "requestBody": content,
                    "fieldValidation": field_validation,
                }),
            );
        }
        paths.insert(path.clone(), Value::Object(ops));
    }
    let schema = &v["components"]["schemas"]["internal.comb.v1.Comb"];
    let mut schema_keys: Vec<&String> = schema
        .as_object()
        .map(|s| s.keys().collect())
        .unwrap_or_default();
    schema_keys.sort();
    let mut properties: Vec<&String> = schema["properties"]
        .as_object()
        .map(|s| s.keys().collect())
        .unwrap_or_default();
    properties.sort();
    json!({
        "paths": paths,
        "combSchemaKeys": schema_keys,
        "combGvk": schema["x-kubernetes-group-version-kind"],
        "combProperties": properties,
        "metadataRef": schema["properties"]["metadata"],
    })
}

/// A refused patch: the code, reason and field, and what the message says after the
/// patched object it quotes (whose key order and times are each server's own).
fn patch_error(v: Value) -> Value {
    let message = v["message"].as_str().unwrap_or_default();
    json!({"code": v["code"], "reason": v["reason"],
           "fields": v["details"]["causes"].as_array().into_iter().flatten().map(|c| &c["field"]).collect::<Vec<_>>(),
           "prefix": message.split("Invalid value:").next(),
           "error": message.rsplit("\": ").next()})
}

/// As [`patch_error`] without the error text (Go's decoder words it its own way).
fn patch_error_code(v: Value) -> Value {
    let mut view = patch_error(v);
    view["error"] = Value::Null;
    view
}

/// The finalizers a patch left, or how it was refused.
fn finalizers(v: Value) -> Value {
    json!({"finalizers": v["metadata"]["finalizers"], "code": v["code"], "reason": v["reason"], "message": v["message"]})
}

fn code_only(v: Value) -> Value {
    json!({"code": v["code"], "reason": v["reason"]})
}

/// A Pod update's answer: its code, the image it stored, and of a refusal the reason, and the
/// message and each cause's up to the first line (kube-apiserver follows a refused Pod update
/// with a Go diff of the two specs, which the emulator writes its own way).
fn pod_update_answer(v: Value) -> Value {
    let first_line = |m: &Value| json!(m.as_str().and_then(|m| m.lines().next()));
    let causes: Vec<Value> = v["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| json!({"reason": c["reason"], "field": c["field"], "message": first_line(&c["message"])}))
        .collect();
    json!({"code": v["code"], "reason": v["reason"], "message": first_line(&v["message"]),
           "causes": causes, "image": v["spec"]["containers"][0]["image"],
           "activeDeadlineSeconds": v["spec"]["activeDeadlineSeconds"]})
}

/// A refused precondition, without the values it names in parentheses (a uid, a
/// resourceVersion), which differ between backends: `the UID in the precondition (<value>)
/// does not match the UID in record (<value>). ...`.
fn precondition_refusal(mut v: Value) -> Value {
    if let Some(message) = v["message"].as_str() {
        let mut without_values = String::new();
        let mut rest = message;
        while let Some((before, after)) = rest.split_once('(') {
            without_values.push_str(before);
            without_values.push_str("(<value>)");
            rest = after.split_once(')').map_or("", |(_, after)| after);
        }
        without_values.push_str(rest);
        v["message"] = json!(without_values);
    }
    v
}

fn list_shape(v: Value) -> Value {
    let names: Vec<&Value> = v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| &i["metadata"]["name"])
        .collect();
    json!({"kind": v["kind"], "apiVersion": v["apiVersion"], "metadata": v["metadata"], "names": names,
           "code": v["code"], "reason": v["reason"], "message": v["message"]})
}

fn probes() -> Vec<Probe> {
    vec![
        probe(
            "configmap create, get, conflict",
            vec![
                post(CM, configmap("cm-basic", json!({"a": "1"}))),
                get(&format!("{CM}/cm-basic")),
                post(CM, configmap("cm-basic", json!({"a": "1"}))),
            ],
        ),
        probe("get missing", vec![get(&format!("{CM}/absent"))]),
        probe(
            "configmap bad name",
            vec![post(CM, configmap("Bad_Name", json!({})))],
        ),
        probe("comb bad name", vec![post(COMBS, comb("Bad_Name", "Stub"))]),
        probe(
            "comb create defaults",
            vec![
                post(COMBS, comb("comb-defaults", "Stub")),
                get(&format!("{COMBS}/comb-defaults")),
            ],
        ),
        probe(
            "comb missing required field",
            vec![post(
                COMBS,
                json!({"apiVersion": "comb.internal/v1", "kind": "Comb", "metadata": {"name": "comb-nospec"}, "spec": {}}),
            )],
        ),
        probe(
            "comb generation",
            vec![
                post(COMBS, comb("comb-gen", "Stub")).view(generations),
                merge_patch(
                    &format!("{COMBS}/comb-gen"),
                    json!({"metadata": {"labels": {"a": "b"}}}),
                )
                .view(generations),
                merge_patch(
                    &format!("{COMBS}/comb-gen"),
                    json!({"spec": {"class": "Other"}}),
                )
                .view(generations),
                merge_patch(
                    &format!("{COMBS}/comb-gen/status"),
                    json!({"status": {"phase": "Ready"}}),
                )
                .view(generations),
                merge_patch(
                    &format!("{COMBS}/comb-gen"),
                    json!({"spec": {"class": "Other"}}),
                )
                .view(generations),
            ],
        ),
        probe(
            "comb strategic merge patch refused",
            vec![
                post(COMBS, comb("comb-smp", "Stub")).view(code_only),
                patch(
                    &format!("{COMBS}/comb-smp"),
                    "application/strategic-merge-patch+json",
                    json!({"spec": {"class": "Other"}}),
                ),
            ],
        ),
        probe(
            "comb server-side apply managedFields",
            vec![
                apply(&format!("{COMBS}/comb-ssa"), "alice", comb("comb-ssa", "Stub"))
                    .view(managed_fields),
                apply(
                    &format!("{COMBS}/comb-ssa"),
                    "bob",
                    json!({"apiVersion": "comb.internal/v1", "kind": "Comb", "metadata": {"name": "comb-ssa", "labels": {"x": "y"}}}),
                )
                .view(managed_fields),
                merge_patch(
                    &format!("{COMBS}/comb-ssa?fieldManager=carol"),
                    json!({"spec": {"dependsOn": ["a"]}}),
                )
                .view(managed_fields),
                apply(&format!("{COMBS}/comb-ssa"), "bob", comb("comb-ssa", "Other"))
                    .view(managed_fields),
            ],
        ),
        probe(
            "configmap server-side apply",
            vec![
                apply(
                    &format!("{CM}/cm-ssa"),
                    "alice",
                    configmap("cm-ssa", json!({"a": "1"})),
                ),
                apply(
                    &format!("{CM}/cm-ssa"),
                    "bob",
                    configmap("cm-ssa", json!({"a": "2"})),
                ),
                apply(
                    &format!("{CM}/cm-ssa?force=true"),
                    "bob",
                    configmap("cm-ssa", json!({"a": "2"})),
                )
                .view(managed_fields),
            ],
        ),
        probe(
            "configmap update with stale resourceVersion",
            vec![
                post(CM, configmap("cm-stale", json!({}))).view(code_only),
                put(
                    &format!("{CM}/cm-stale"),
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-stale", "resourceVersion": "1"}}),
                ),
                put(
                    &format!("{CM}/cm-stale"),
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}}),
                ),
            ],
        ),
        probe(
            "watch event types",
            vec![
                get(&format!("{CM}?fieldSelector=metadata.name%3Dcm-watch"))
                    .capture("start")
                    .view(list_shape),
                post(CM, configmap("cm-watch", json!({"a": "1"}))).view(code_only),
                put(&format!("{CM}/cm-watch"), configmap("cm-watch", json!({"a": "2"})))
                    .view(code_only),
                delete(&format!("{CM}/cm-watch")).view(code_only),
                Step {
                    watch_events: Some(3),
                    ..get(&format!(
                        "{CM}?watch=true&resourceVersion={{start}}&fieldSelector=metadata.name%3Dcm-watch&timeoutSeconds=10"
                    ))
                },
            ],
        ),
        probe(
            "delete answers",
            vec![
                post(CM, configmap("cm-delete", json!({}))).view(code_only),
                delete(&format!("{CM}/cm-delete")),
                delete(&format!("{CM}/cm-delete")),
            ],
        ),
        probe(
            "delete preconditions",
            vec![
                post(CM, configmap("cm-pre", json!({"a": "1"})))
                    .capture("created")
                    .view(code_only),
                merge_patch(&format!("{CM}/cm-pre"), json!({"data": {"a": "2"}})).view(code_only),
                // Decided on the version created, sent after the change: refused.
                delete_with(
                    &format!("{CM}/cm-pre"),
                    json!({"preconditions": {"resourceVersion": "{created}"}}),
                )
                .view(precondition_refusal),
                delete_with(
                    &format!("{CM}/cm-pre"),
                    json!({"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}),
                )
                .view(precondition_refusal),
                get(&format!("{CM}/cm-pre")).capture("current").view(code_only),
                // The object as it is now: deleted.
                delete_with(
                    &format!("{CM}/cm-pre"),
                    json!({"kind": "DeleteOptions", "apiVersion": "v1",
                           "propagationPolicy": "Background",
                           "preconditions": {"uid": "{created_uid}", "resourceVersion": "{current}"}}),
                ),
                get(&format!("{CM}/cm-pre")).view(code_only),
            ],
        ),
        probe(
            "list shape",
            vec![
                post(CM, configmap("cm-list", json!({}))).view(code_only),
                get(&format!("{CM}?labelSelector=absent%3Dx")).view(list_shape),
                get(&format!("{CM}?labelSelector=%21%21bad")).view(list_shape),
            ],
        ),
        probe(
            "generateName",
            vec![post(
                CM,
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}}),
            )],
        ),
        probe(
            "dry run create",
            vec![
                post(&format!("{CM}?dryRun=All"), configmap("cm-dry", json!({}))),
                get(&format!("{CM}/cm-dry")),
            ],
        ),
        probe(
            "strict field validation",
            vec![
                post(
                    &format!("{CM}?fieldValidation=Strict"),
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-strict"}, "bogus": 1}),
                ),
                post(
                    CM,
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-warn"}, "bogus": 1}),
                )
                .view(code_only),
            ],
        ),
        probe(
            "secret stringData",
            vec![post(
                "/api/v1/namespaces/{ns}/secrets",
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"}, "stringData": {"k": "v"}}),
            )],
        ),
        probe(
            "service defaults",
            vec![post(
                "/api/v1/namespaces/{ns}/services",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
                       "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}}),
            )],
        ),
        probe(
            "deployment defaults",
            vec![post(
                "/apis/apps/v1/namespaces/{ns}/deployments",
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dep"},
                       "spec": {"selector": {"matchLabels": {"app": "dep"}},
                                "template": {"metadata": {"labels": {"app": "dep"}},
                                             "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
            )],
        ),
        probe(
            "pod defaults",
            vec![post(
                "/api/v1/namespaces/{ns}/pods",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod"},
                       "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
            )],
        ),
        probe(
            // Whether or not the scheduler has bound the Pod yet, these patches keep its node.
            "pod updates change only what a pod may change",
            vec![
                post(
                    "/api/v1/namespaces/{ns}/pods",
                    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod-update"},
                           "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}),
                )
                .view(pod_update_answer),
                json_patch(
                    "/api/v1/namespaces/{ns}/pods/pod-update",
                    json!([{"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:2"}]),
                )
                .view(pod_update_answer),
                json_patch(
                    "/api/v1/namespaces/{ns}/pods/pod-update",
                    json!([{"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "A", "value": "1"}]}]),
                )
                .view(pod_update_answer),
                json_patch(
                    "/api/v1/namespaces/{ns}/pods/pod-update",
                    json!([{"op": "add", "path": "/spec/containers/-", "value": {"name": "d", "image": "busybox:1"}}]),
                )
                .view(pod_update_answer),
                merge_patch(
                    "/api/v1/namespaces/{ns}/pods/pod-update",
                    json!({"spec": {"activeDeadlineSeconds": 60}}),
                )
                .view(pod_update_answer),
                merge_patch(
                    "/api/v1/namespaces/{ns}/pods/pod-update",
                    json!({"spec": {"activeDeadlineSeconds": 90}}),
                )
                .view(pod_update_answer),
                merge_patch(
                    "/api/v1/namespaces/{ns}/pods/pod-update",
                    json!({"spec": {"activeDeadlineSeconds": null}}),
                )
                .view(pod_update_answer),
            ],
        ),
        probe(
            "empty lists as the typed round trip leaves them",
            vec![
                post(
                    "/api/v1/namespaces/{ns}/pods",
                    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod-empty"},
                           "spec": {"containers": [{"name": "c", "image": "nginx:1", "env": [], "args": [], "ports": []}],
                                    "volumes": [], "imagePullSecrets": []}}),
                )
                .view(|v| json!({"code": v["code"], "container": v["spec"]["containers"][0],
                                 "volumes": v["spec"].get("volumes"), "imagePullSecrets": v["spec"].get("imagePullSecrets")})),
                post(
                    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
                    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "role-empty"},
                           "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": []}]}),
                ),
                post(
                    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
                    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "role-none"},
                           "rules": []}),
                ),
                post(
                    "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
                    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "slice-empty"},
                           "addressType": "IPv4", "endpoints": [], "ports": []}),
                ),
            ],
        ),
        probe(
            "endpointslice generation",
            vec![
                post(
                    "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
                    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "slice-gen"},
                           "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}]}),
                )
                .view(generation_and_note),
                merge_patch(
                    "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/slice-gen",
                    json!({"metadata": {"annotations": {"note": "n"}}}),
                )
                .view(generation_and_note),
                merge_patch(
                    "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/slice-gen",
                    json!({"metadata": {"labels": {"tier": "t"}}}),
                )
                .view(generation_and_note),
                merge_patch(
                    "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/slice-gen",
                    json!({"endpoints": [{"addresses": ["10.0.0.2"]}]}),
                )
                .view(generation_and_note),
            ],
        ),
        probe(
            "statefulset fields that never change",
            vec![
                post(
                    "/apis/apps/v1/namespaces/{ns}/statefulsets",
                    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "sts-fixed"},
                           "spec": {"replicas": 0, "serviceName": "a", "selector": {"matchLabels": {"app": "sts-fixed"}},
                                    "template": {"metadata": {"labels": {"app": "sts-fixed"}},
                                                 "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}}}),
                )
                .view(code_only),
                merge_patch(
                    "/apis/apps/v1/namespaces/{ns}/statefulsets/sts-fixed",
                    json!({"spec": {"serviceName": "b", "podManagementPolicy": "Parallel"}}),
                ),
                merge_patch(
                    "/apis/apps/v1/namespaces/{ns}/statefulsets/sts-fixed",
                    json!({"spec": {"replicas": 1, "minReadySeconds": 5}}),
                )
                .view(|v| json!({"code": v["code"], "replicas": v["spec"]["replicas"]})),
            ],
        ),
        probe(
            "comb validation rules",
            vec![
                post(
                    COMBS,
                    json!({"apiVersion": "comb.internal/v1", "kind": "Comb",
                           "metadata": {"name": "x".repeat(64)}, "spec": {"class": "Manifests"}}),
                ),
                post(
                    COMBS,
                    json!({"apiVersion": "comb.internal/v1", "kind": "Comb", "metadata": {"name": "cel-deps"},
                           "spec": {"class": "Manifests", "dependsOn": ["db", "Bad Name"]}}),
                ),
                post(
                    COMBS,
                    json!({"apiVersion": "comb.internal/v1", "kind": "Comb", "metadata": {"name": "cel-up"},
                           "spec": {"class": "Manifests", "upstream": {"class": "Nope"}}}),
                ),
                post(
                    COMBS,
                    json!({"apiVersion": "comb.internal/v1", "kind": "Comb", "metadata": {"name": "cel-ep"},
                           "spec": {"class": "Manifests", "config": {"endpoints": [{"name": "Web_UI", "port": 80}]}}}),
                ),
                // A value of the wrong type blocks the rules, as a missing class does: the
                // answer says they were not checked.
                post(
                    COMBS,
                    json!({"apiVersion": "comb.internal/v1", "kind": "Comb", "metadata": {"name": "cel-typed"},
                           "spec": {"class": "Manifests", "enabled": "yes", "dependsOn": ["Bad Name"]}}),
                ),
                post(
                    COMBS,
                    json!({"apiVersion": "comb.internal/v1", "kind": "Comb", "metadata": {"name": "cel-blocked"},
                           "spec": {"dependsOn": ["Bad Name"]}}),
                ),
                post(
                    COMBS,
                    json!({"apiVersion": "comb.internal/v1", "kind": "Comb", "metadata": {"name": "cel-fine"},
                           "spec": {"class": "Manifests", "dependsOn": ["db", "infra/vault"], "upstream": null,
                                    "config": {"endpoints": [{"name": "web", "port": 80}]}}}),
                )
                .view(code_only),
            ],
        ),
        probe(
            "namespace create and delete",
            vec![
                post(
                    "/api/v1/namespaces",
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "diff-other"}}),
                ),
                delete("/api/v1/namespaces/diff-other"),
            ],
        ),
        probe(
            "openapi v3 of the comb CRD",
            vec![get("/openapi/v3/apis/comb.internal/v1").view(openapi_view)],
        ),
        probe(
            "openapi with the query parameters kubectl sends",
            vec![
                get("/openapi/v3/apis/comb.internal/v1?hash=0123456789ABCDEF")
                    .view(|v| json!({"code": v["code"], "openapi": v["openapi"]})),
                Step {
                    accept: Some("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
                    ..get("/openapi/v2?timeout=32s")
                }
                .view(|v| json!({"code": v["code"]})),
            ],
        ),
        probe(
            "update adds labels and data",
            vec![
                post(CM, configmap("cm-put", json!({"a": "1"}))).capture("rv"),
                put(
                    &format!("{CM}/cm-put"),
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "cm-put", "labels": {"x": "y"}},
                           "data": {"a": "1", "b": "2"}}),
                ),
                // kube-apiserver orders Update entries by their time in seconds, then by manager:
                // a manager that sorts after "unknown" (the PUT's) keeps one order whether or not
                // a second boundary falls between the two writes ("patcher" flaked in CI).
                merge_patch(
                    &format!("{CM}/cm-put?fieldManager=writer"),
                    json!({"metadata": {"annotations": {"n": "m"}}, "data": {"b": "3"}}),
                ),
            ],
        ),
        probe(
            "delete held by a finalizer",
            vec![
                post(
                    CM,
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "cm-fin", "finalizers": ["example.com/hold"]}}),
                ),
                delete(&format!("{CM}/cm-fin")),
                merge_patch(
                    &format!("{CM}/cm-fin"),
                    json!({"metadata": {"finalizers": null}}),
                ),
                get(&format!("{CM}/cm-fin")).view(code_only),
            ],
        ),
        probe(
            "unsupported content type",
            vec![Step {
                payload: Payload::Bytes(b"data: x".to_vec()),
                content_type: "text/plain",
                ..post(CM, json!({}))
            }],
        ),
        probe(
            "workload status on create",
            vec![
                post(
                    "/apis/apps/v1/namespaces/{ns}/replicasets",
                    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs"},
                           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "rs"}},
                                    "template": {"metadata": {"labels": {"app": "rs"}},
                                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
                )
                .view(|v| json!({"code": v["code"], "status": v["status"]})),
                post(
                    "/apis/batch/v1/namespaces/{ns}/jobs",
                    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "job"},
                           "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
                                    "containers": [{"name": "c", "image": "busybox"}]}}}}),
                )
                .view(|v| json!({"code": v["code"], "status": v["status"]})),
            ],
        ),
        probe(
            "strategic merge order of merged lists",
            vec![
                post(
                    "/apis/apps/v1/namespaces/{ns}/deployments",
                    json!({"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": "smp", "finalizers": ["example.com/a"]},
                           "spec": {"selector": {"matchLabels": {"app": "smp"}},
                                    "template": {"metadata": {"labels": {"app": "smp"}},
                                                 "spec": {"containers": [
                                                     {"name": "app", "image": "nginx", "env": [{"name": "A", "value": "1"}]},
                                                     {"name": "sidecar", "image": "busybox"}]}}}}),
                )
                .view(code_only),
                patch(
                    "/apis/apps/v1/namespaces/{ns}/deployments/smp",
                    "application/strategic-merge-patch+json",
                    json!({"metadata": {"finalizers": ["example.com/b"]},
                           "spec": {"template": {"spec": {"containers": [
                               {"name": "app", "env": [{"name": "B", "value": "2"}]},
                               {"name": "third", "image": "busybox"}]}}}}),
                )
                .view(|v| {
                    let containers = &v["spec"]["template"]["spec"]["containers"];
                    json!({
                        "finalizers": v["metadata"]["finalizers"],
                        "containers": containers.as_array().into_iter().flatten()
                            .map(|c| json!({"name": c["name"], "env": c["env"]})).collect::<Vec<_>>(),
                    })
                }),
                merge_patch(
                    "/apis/apps/v1/namespaces/{ns}/deployments/smp",
                    json!({"metadata": {"finalizers": null}}),
                )
                .view(code_only),
            ],
        ),
        probe(
            "strict and typed patch errors",
            vec![
                post(COMBS, comb("comb-strict", "Stub")).view(code_only),
                merge_patch(
                    &format!("{COMBS}/comb-strict?fieldValidation=Strict"),
                    json!({"spec": {"bogus": 1}}),
                )
                .view(patch_error),
                post(
                    "/apis/apps/v1/namespaces/{ns}/deployments",
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "typo"},
                           "spec": {"selector": {"matchLabels": {"app": "typo"}},
                                    "template": {"metadata": {"labels": {"app": "typo"}},
                                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
                )
                .view(code_only),
                merge_patch(
                    "/apis/apps/v1/namespaces/{ns}/deployments/typo?fieldValidation=Strict",
                    json!({"spec": {"replica": 3}}),
                )
                .view(patch_error),
                merge_patch(
                    "/apis/apps/v1/namespaces/{ns}/deployments/typo",
                    json!({"spec": {"replicas": "three"}}),
                )
                .view(patch_error_code),
            ],
        ),
        probe(
            "unknown groups and resources",
            vec![
                get("/apis/nope.example.com/v1/namespaces/{ns}/things"),
                get("/api/v1/namespaces/{ns}/nothings"),
                get("/apis/apps/v1/namespaces/{ns}/nothings"),
            ],
        ),
        probe(
            "unknown field selectors",
            vec![
                get(&format!("{CM}?fieldSelector=data.key%3Dvalue")),
                get("/api/v1/namespaces/{ns}/pods?fieldSelector=spec.bogus%3Dx"),
                get("/api/v1/namespaces/{ns}/services?fieldSelector=spec.bogus%3Dx"),
            ],
        ),
        probe(
            "server-side apply of a deployment",
            vec![
                apply(
                    "/apis/apps/v1/namespaces/{ns}/deployments/ssa-dep",
                    "alice",
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ssa-dep", "labels": {"a": "b"}},
                           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "ssa-dep"}},
                                    "template": {"metadata": {"labels": {"app": "ssa-dep"}},
                                                 "spec": {"containers": [{"name": "c", "image": "nginx",
                                                          "ports": [{"containerPort": 80}]}]}}}}),
                ),
                apply(
                    "/apis/apps/v1/namespaces/{ns}/deployments/ssa-dep",
                    "bob",
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ssa-dep"},
                           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}}),
                ),
            ],
        ),
        probe(
            "scale subresource",
            vec![
                post(
                    "/apis/apps/v1/namespaces/{ns}/deployments",
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "scaled"},
                           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "scaled"}},
                                    "template": {"metadata": {"labels": {"app": "scaled"}},
                                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
                )
                .view(code_only),
                // (Only kind and spec: the deployment controller writes the status meanwhile.)
                get("/apis/apps/v1/namespaces/{ns}/deployments/scaled/scale")
                    .view(|v| json!({"kind": v["kind"], "apiVersion": v["apiVersion"], "spec": v["spec"]})),
                merge_patch(
                    "/apis/apps/v1/namespaces/{ns}/deployments/scaled/scale",
                    json!({"spec": {"replicas": 2}}),
                )
                .view(|v| json!({"kind": v["kind"], "spec": v["spec"]})),
            ],
        ),
        probe(
            "service replaced without its cluster IP",
            vec![
                post(
                    "/api/v1/namespaces/{ns}/services",
                    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc-put"},
                           "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}}),
                )
                .view(code_only),
                put(
                    "/api/v1/namespaces/{ns}/services/svc-put",
                    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc-put"},
                           "spec": {"selector": {"app": "y"}, "ports": [{"port": 81}]}}),
                ),
            ],
        ),
        probe(
            "server-side apply that changes nothing",
            vec![
                apply(
                    &format!("{CM}/cm-noop"),
                    "comb",
                    configmap("cm-noop", json!({"a": "1"})),
                ),
                apply(
                    &format!("{CM}/cm-noop?force=true"),
                    "comb",
                    configmap("cm-noop", json!({"a": "1"})),
                ),
                get(&format!("{CM}/cm-noop")),
            ],
        ),
        probe(
            "server-side apply removes only what its manager stopped applying",
            vec![
                apply(
                    &format!("{CM}/cm-own"),
                    "comb",
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "cm-own", "labels": {"x": "y"}, "annotations": {"mine": "1"}},
                           "data": {"a": "1", "b": "2"}}),
                ),
                merge_patch(
                    &format!("{CM}/cm-own?fieldManager=comb-restart"),
                    json!({"metadata": {"annotations": {"restartedAt": "now"}}, "data": {"c": "3"}}),
                ),
                apply(
                    &format!("{CM}/cm-own?force=true"),
                    "comb",
                    configmap("cm-own", json!({"a": "1"})),
                ),
            ],
        ),
        probe(
            // What comb builds "create, never take over" and "only this very object" on: a
            // resourceVersion no object has is ignored by an apply that creates and refused
            // (409) by one that meets an object; a uid is refused by an apply that would create
            // (409) and, when it is not the object's, by one that meets it (422, immutable).
            "server-side apply preconditions",
            vec![
                apply(
                    &format!("{CM}/cm-once?force=true"),
                    "comb",
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "cm-once", "resourceVersion": "9223372036854775807"},
                           "data": {"a": "1"}}),
                )
                .capture("created")
                .view(managed_fields),
                apply(
                    &format!("{CM}/cm-once?force=true"),
                    "comb",
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "cm-once", "resourceVersion": "9223372036854775807"},
                           "data": {"a": "2"}}),
                ),
                apply(
                    &format!("{CM}/cm-once?force=true"),
                    "comb",
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "cm-once", "uid": "00000000-0000-4000-8000-000000000000"},
                           "data": {"a": "3"}}),
                )
                .view(precondition_refusal),
                apply(
                    &format!("{CM}/cm-once?force=true"),
                    "comb",
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "cm-once", "uid": "{created_uid}"},
                           "data": {"a": "4"}}),
                )
                .view(managed_fields),
                apply(
                    &format!("{CM}/cm-never?force=true"),
                    "comb",
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "cm-never", "uid": "00000000-0000-4000-8000-000000000000"},
                           "data": {"a": "1"}}),
                ),
                get(&format!("{CM}/cm-once")).view(managed_fields),
            ],
        ),
        probe(
            "server-side apply fills a map it applied empty",
            vec![
                apply(&format!("{CM}/cm-empty"), "comb", configmap("cm-empty", json!({}))),
                apply(
                    &format!("{CM}/cm-empty?force=true"),
                    "comb",
                    configmap("cm-empty", json!({"changed": "yes"})),
                ),
                apply(&format!("{CM}/cm-empty?force=true"), "comb", configmap("cm-empty", json!({}))),
            ],
        ),
        probe(
            "managedFields handed over by a patch, then applied",
            vec![
                post(CM, configmap("cm-legacy", json!({"a": "1", "b": "2"}))).view(managed_fields),
                merge_patch(
                    &format!("{CM}/cm-legacy"),
                    json!({"metadata": {"managedFields": [{
                        "manager": "comb", "operation": "Apply", "apiVersion": "v1",
                        "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}}}]}}),
                )
                .view(managed_fields),
                apply(
                    &format!("{CM}/cm-legacy?force=true"),
                    "comb",
                    configmap("cm-legacy", json!({"a": "1"})),
                ),
            ],
        ),
        probe(
            "an apply of nothing gives the manager's fields back to the defaults",
            vec![
                apply(
                    "/apis/apps/v1/namespaces/{ns}/deployments/stopped?force=true",
                    "comb",
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "stopped"},
                           "spec": {"selector": {"matchLabels": {"app": "stopped"}},
                                    "template": {"metadata": {"labels": {"app": "stopped"}},
                                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
                )
                .view(replicas_and_managers),
                apply(
                    "/apis/apps/v1/namespaces/{ns}/deployments/stopped?force=true",
                    "comb-stop",
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "stopped"},
                           "spec": {"replicas": 0}}),
                )
                .view(replicas_and_managers),
                apply(
                    "/apis/apps/v1/namespaces/{ns}/deployments/stopped?force=true",
                    "comb-stop",
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "stopped"}}),
                )
                .view(replicas_and_managers),
            ],
        ),
        probe(
            "server-side apply keeps a restart annotation another manager wrote",
            vec![
                apply(
                    "/apis/apps/v1/namespaces/{ns}/deployments/restarted?force=true",
                    "comb",
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "restarted"},
                           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "restarted"}},
                                    "template": {"metadata": {"labels": {"app": "restarted"}},
                                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
                )
                .view(template_and_generation),
                merge_patch(
                    "/apis/apps/v1/namespaces/{ns}/deployments/restarted?fieldManager=comb-restart",
                    json!({"spec": {"template": {"metadata": {"annotations": {"restartedAt": "now"}}}}}),
                )
                .view(template_and_generation),
                apply(
                    "/apis/apps/v1/namespaces/{ns}/deployments/restarted?force=true",
                    "comb",
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "restarted"},
                           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "restarted"}},
                                    "template": {"metadata": {"labels": {"app": "restarted"}},
                                                 "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}}),
                )
                .view(template_and_generation),
            ],
        ),
        probe(
            "server-side apply turns a service into an ExternalName",
            vec![
                apply(
                    "/api/v1/namespaces/{ns}/services/svc-bridge?force=true",
                    "comb",
                    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc-bridge"},
                           "spec": {"selector": {"app": "x"}, "ports": [{"name": "client", "port": 4222}]}}),
                )
                .view(|v| json!({"code": v["code"], "spec": v["spec"]})),
                apply(
                    "/api/v1/namespaces/{ns}/services/svc-bridge?force=true",
                    "comb",
                    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc-bridge"},
                           "spec": {"type": "ExternalName", "externalName": "db.example.com",
                                    "ports": [{"name": "client", "port": 4222}]}}),
                )
                .view(|v| json!({"code": v["code"], "spec": v["spec"]})),
            ],
        ),
        probe(
            "workload generation on annotation changes",
            vec![
                post(
                    "/apis/apps/v1/namespaces/{ns}/deployments",
                    annotated_workload("Deployment"),
                )
                .view(generation_and_note),
                merge_patch(
                    "/apis/apps/v1/namespaces/{ns}/deployments/annotated",
                    json!({"metadata": {"annotations": {"note": "1"}}}),
                )
                .view(generation_and_note),
                merge_patch(
                    "/apis/apps/v1/namespaces/{ns}/deployments/annotated",
                    json!({"metadata": {"labels": {"tier": "x"}}}),
                )
                .view(generation_and_note),
                merge_patch(
                    "/apis/apps/v1/namespaces/{ns}/deployments/annotated/status",
                    json!({"metadata": {"annotations": {"note": "2"}, "labels": {"tier": "y"}}}),
                )
                .view(generation_and_note),
                post(
                    "/apis/apps/v1/namespaces/{ns}/statefulsets",
                    annotated_workload("StatefulSet"),
                )
                .view(generation_and_note),
                merge_patch(
                    "/apis/apps/v1/namespaces/{ns}/statefulsets/annotated",
                    json!({"metadata": {"annotations": {"note": "1"}}}),
                )
                .view(generation_and_note),
            ],
        ),
        probe(
            "a pod created with scheduling gates",
            vec![
                post(
                    "/api/v1/namespaces/{ns}/pods",
                    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gated"},
                           "spec": {"schedulingGates": [{"name": "example.com/hold"}],
                                    "containers": [{"name": "c", "image": "nginx"}]}}),
                )
                .view(|v| json!({"code": v["code"], "status": v["status"]})),
                get("/api/v1/namespaces/{ns}/pods/gated")
                    .view(|v| json!({"nodeName": v["spec"]["nodeName"], "status": v["status"]})),
            ],
        ),
        probe(
            "daemonset template generation",
            vec![
                post(
                    "/apis/apps/v1/namespaces/{ns}/daemonsets",
                    json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
                           "spec": {"selector": {"matchLabels": {"app": "agent"}},
                                    "template": {"metadata": {"labels": {"app": "agent"}},
                                                 "spec": {"containers": [{"name": "c", "image": "agent:1"}]}}}}),
                )
                .view(generation_and_annotations),
                merge_patch(
                    "/apis/apps/v1/namespaces/{ns}/daemonsets/agent",
                    json!({"metadata": {"annotations": {"deprecated.daemonset.template.generation": "7"}},
                           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "agent:2"}]}}}}),
                )
                .view(generation_and_annotations),
                merge_patch(
                    "/apis/apps/v1/namespaces/{ns}/daemonsets/agent",
                    json!({"spec": {"minReadySeconds": 5}}),
                )
                .view(generation_and_annotations),
            ],
        ),
        probe(
            "openapi v2 as kubectl asks",
            vec![Step {
                accept: Some("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
                ..get("/openapi/v2")
            }
            .view(|_| json!({}))],
        ),
        probe(
            "json patch of finalizers, as kube-runtime's finalizer() sends it",
            vec![
                post(COMBS, comb("comb-json-patch", "Stub")).view(code_only),
                // `test` of an absent member against null passes (evanphx/json-patch, which
                // kube-apiserver applies with), then the list is added.
                json_patch(
                    &format!("{COMBS}/comb-json-patch"),
                    json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                           {"op": "add", "path": "/metadata/finalizers", "value": ["comb.internal/cleanup"]}]),
                )
                .view(finalizers),
                // The same patch again: the member is there now, so null no longer matches.
                json_patch(
                    &format!("{COMBS}/comb-json-patch"),
                    json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                           {"op": "add", "path": "/metadata/finalizers", "value": ["comb.internal/cleanup"]}]),
                )
                .view(finalizers),
                json_patch(
                    &format!("{COMBS}/comb-json-patch"),
                    json!([{"op": "test", "path": "/metadata/finalizers", "value": ["comb.internal/cleanup"]},
                           {"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/other"}]),
                )
                .view(finalizers),
                // A member under an absent parent is missing, not null.
                json_patch(
                    &format!("{COMBS}/comb-json-patch"),
                    json!([{"op": "test", "path": "/metadata/absent/member", "value": null}]),
                )
                .view(finalizers),
                json_patch(
                    &format!("{COMBS}/comb-json-patch"),
                    json!([{"op": "remove", "path": "/metadata/finalizers/5"}]),
                )
                .view(finalizers),
            ],
        ),
        probe(
            "protobuf create of a deployment, as kubectl create deployment sends it",
            vec![
                Step {
                    payload: Payload::Bytes(hex(KUBECTL_CREATE_DEPLOYMENT)),
                    content_type: PROTOBUF,
                    ..post("/apis/apps/v1/namespaces/{ns}/deployments", json!({}))
                }
                .view(|v| json!({"code": v["code"], "name": v["metadata"]["name"], "spec": v["spec"]})),
            ],
        ),
    ]
}

/// One backend and a client to it.
struct Side {
    label: &'static str,
    clusters: Clusters,
    client: kube::Client,
}

impl Side {
    async fn start(backend: Backend, label: &'static str) -> Side {
        let options = SandboxOptions {
            https: true,
            ..SandboxOptions::clusters([label])
        };
        let clusters = Clusters::start(backend, options, None)
            .await
            .unwrap_or_else(|e| panic!("the {label} cluster starts: {e}"));
        let pool =
            comb_kubeconfigs::ClientPool::from_kubeconfig(clusters.kubeconfig().build(), label);
        let client = pool.client(label).await.expect("client");
        Side {
            label,
            clusters,
            client,
        }
    }

    /// Sends one step; answers `(entry for the transcript, the raw body)`.
    async fn send(&self, step: &Step, vars: &BTreeMap<String, String>) -> (Value, Value) {
        let mut path = step.path.replace("{ns}", NS);
        for (name, value) in vars {
            path = path.replace(&format!("{{{name}}}"), value);
        }
        let body = match &step.payload {
            Payload::None => Vec::new(),
            Payload::Json(v) => {
                let mut text = serde_json::to_string(v).expect("serialises");
                for (name, value) in vars {
                    text = text.replace(&format!("{{{name}}}"), value);
                }
                text.into_bytes()
            }
            Payload::Bytes(b) => b.clone(),
        };
        let mut request = Request::builder()
            .method(step.method.clone())
            .uri(&path)
            .header("content-type", step.content_type);
        if let Some(accept) = step.accept {
            request = request.header("accept", accept);
        }
        let request = request
            .body(kube::client::Body::from(body))
            .expect("a request");
        let response = tokio::time::timeout(DEADLINE, self.client.send(request))
            .await
            .unwrap_or_else(|_| panic!("{}: {} {path} answers in time", self.label, step.method))
            .unwrap_or_else(|e| panic!("{}: {} {path}: {e}", self.label, step.method));
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        let deadline = Instant::now() + DEADLINE;
        let mut events = Vec::new();
        loop {
            if let Some(wanted) = step.watch_events {
                while let Some(at) = bytes.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = bytes.drain(..=at).collect();
                    if let Ok(event) = serde_json::from_slice::<Value>(&line) {
                        events.push(event);
                    }
                }
                if events.len() >= wanted {
                    break;
                }
            }
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        bytes.extend_from_slice(&data);
                    }
                }
                Ok(Some(Err(e))) => panic!("{}: reading {path}: {e}", self.label),
                Ok(None) => break,
                Err(_) => break,
            }
        }
        let raw = if step.watch_events.is_some() {
            json!(
                events
                    .iter()
                    .map(|e| json!({"type": e["type"], "object": e["object"]}))
                    .collect::<Vec<_>>()
            )
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| json!({"text": format!("{} bytes", bytes.len())}))
        };
        let header = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(|v| v.split(';').next().unwrap_or(v).trim().to_string())
                .collect()
        };
        let mut viewed = raw.clone();
        if status >= 400 && viewed.get("code").is_none() {
            viewed["code"] = json!(status);
        }
        let entry = json!({
            "request": format!("{} {}", step.method, step.path),
            "status": status,
            "contentType": header("content-type"),
            "warnings": header("warning"),
            "body": (step.view)(viewed),
        });
        (entry, raw)
    }

    async fn run(&self, probe: &Probe) -> Value {
        let mut vars = BTreeMap::new();
        let mut transcript = Vec::new();
        for step in &probe.steps {
            let (entry, raw) = self.send(step, &vars).await;
            if let (Some(name), Some(rv)) =
                (step.capture_rv, raw["metadata"]["resourceVersion"].as_str())
            {
                vars.insert(name.to_string(), rv.to_string());
                if let Some(uid) = raw["metadata"]["uid"].as_str() {
                    vars.insert(format!("{name}_uid"), uid.to_string());
                }
            }
            transcript.push(entry);
        }
        let mut transcript = Value::Array(transcript);
        Normaliser::default().value(&mut transcript, None);
        transcript
    }

    /// Waits until `path` answers 200.
    async fn until_ok(&self, path: &str) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let (entry, _) = self.send(&get(path), &BTreeMap::new()).await;
            if entry["status"] == 200 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: {path} never answered 200: {entry}",
                self.label
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Renames what must differ between backends, consistently within one transcript.
#[derive(Default)]
struct Normaliser {
    labels: BTreeMap<(String, String), String>,
}

impl Normaliser {
    fn label(&mut self, kind: &str, value: &str) -> Value {
        let next = self.labels.keys().filter(|(k, _)| k == kind).count() + 1;
        let label = self
            .labels
            .entry((kind.to_string(), value.to_string()))
            .or_insert_with(|| format!("<{kind}{next}>"));
        json!(label)
    }

    fn value(&mut self, value: &mut Value, key: Option<&str>) {
        match value {
            Value::Object(map) => {
                // A list's own resourceVersion moves with every write anywhere in the cluster.
                if (map.contains_key("items") || map.contains_key("names"))
                    && let Some(rv) = map
                        .get_mut("metadata")
                        .and_then(|m| m.get_mut("resourceVersion"))
                {
                    *rv = json!("<list-rv>");
                }
                if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut)
                    && let (Some(prefix), Some(name)) = (
                        meta.get("generateName")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                        meta.get("name").and_then(Value::as_str).map(str::to_string),
                    )
                    && name.starts_with(&prefix)
                {
                    meta.insert("name".into(), json!(format!("{prefix}<random>")));
                }
                for (k, v) in map.iter_mut() {
                    self.value(v, Some(k));
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.value(item, key);
                }
            }
            Value::String(s) => match key {
                Some("uid") => *value = self.label("uid", s),
                Some("resourceVersion") if s != "<list-rv>" => *value = self.label("rv", s),
                Some(
                    "creationTimestamp" | "time" | "deletionTimestamp" | "lastTransitionTime"
                    | "lastUpdateTime" | "startTime",
                ) => *value = json!("<time>"),
                Some("clusterIP" | "clusterIPs" | "podIP" | "hostIP" | "ip") => {
                    *value = json!("<ip>")
                }
                _ if s.starts_with("kube-api-access-") => {
                    *value = json!("kube-api-access-<random>")
                }
                _ => {}
            },
            _ => {}
        }
    }
}

/// The value with every object's keys in order, so that diffs show content, not key order.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let ordered: BTreeMap<&String, Value> =
                map.iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(ordered.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// A line diff of two pretty-printed values (`-` emulator, `+` real).
fn diff(emulator: &Value, real: &Value) -> String {
    let (emulator, real) = (&sorted(emulator), &sorted(real));
    let a: Vec<String> = serde_json::to_string_pretty(emulator)
        .expect("serialises")
        .lines()
        .map(str::to_string)
        .collect();
    let b: Vec<String> = serde_json::to_string_pretty(real)
        .expect("serialises")
        .lines()
        .map(str::to_string)
        .collect();
    // Longest common subsequence, then walk it.
    let mut table = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            table[i][j] = if a[i] == b[j] {
                table[i + 1][j + 1] + 1
            } else {
                table[i + 1][j].max(table[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = String::new();
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push_str(&format!("  {}\n", a[i]));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || table[i][j + 1] >= table[i + 1][j]) {
            out.push_str(&format!("+ {}\n", b[j]));
            j += 1;
        } else {
            out.push_str(&format!("- {}\n", a[i]));
            i += 1;
        }
    }
    out
}

async fn setup(side: &Side) {
    side.clusters
        .create_namespace(side.label, NS)
        .await
        .expect("the probe namespace");
    let crd = comb_api::crd(comb_api::DEFAULT_GROUP).expect("the Comb CRD");
    let (entry, _) = side
        .send(
            &post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                crd,
            ),
            &BTreeMap::new(),
        )
        .await;
    assert_eq!(
        entry["status"], 201,
        "{}: the CRD installs: {entry}",
        side.label
    );
    side.until_ok("/apis/comb.internal/v1/namespaces/diff/combs")
        .await;
    if side.clusters.backend() == Backend::Kube {
        // Pods need the namespace's default ServiceAccount, which a controller creates.
        side.until_ok("/api/v1/namespaces/diff/serviceaccounts/default")
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulator_answers_like_kube_apiserver() {
    if !comb_sandbox::real::available_or_skip("differential::emulator_answers_like_kube_apiserver")
    {
        return;
    }
    let (emulator, real) = tokio::join!(
        Side::start(Backend::Emulator, "emulator"),
        Side::start(Backend::Kube, "real"),
    );
    tokio::join!(setup(&emulator), setup(&real));
    let probes = probes();
    let mut failed = Vec::new();
    let mut differ_as_known = Vec::new();
    for probe in &probes {
        let (emulated, oracle) = tokio::join!(emulator.run(probe), real.run(probe));
        match (emulated == oracle, known(probe.name)) {
            (true, None) => eprintln!("probe ok: {}", probe.name),
            (true, Some(_)) => {
                eprintln!("probe now matches, drop it from KNOWN: {}", probe.name);
                failed.push(probe.name);
            }
            (false, known) => {
                eprintln!(
                    "probe DIFFERS{}: {} (- emulator, + real)\n{}",
                    known
                        .map(|why| format!(" (known: {why})"))
                        .unwrap_or_default(),
                    probe.name,
                    diff(&emulated, &oracle)
                );
                if known.is_some() {
                    differ_as_known.push(probe.name);
                } else {
                    failed.push(probe.name);
                }
            }
        }
    }
    eprintln!(
        "{} probes: {} differ as known {differ_as_known:?}, {} fail {failed:?}",
        probes.len(),
        differ_as_known.len(),
        failed.len()
    );
    emulator.clusters.shutdown().await;
    real.clusters.shutdown().await;
    assert!(failed.is_empty(), "probes that differ: {failed:?}");
}
