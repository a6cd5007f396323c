//! kube-apiserver's defaulting of built-in kinds (the `SetDefaults_*` functions and the
//! admission plugins every cluster runs), applied on every write so that stored objects
//! look like a real cluster's: clients that compare desired and live objects see the same
//! differences here as there.

use serde_json::{Value, json};

use crate::resources::ResourceType;

/// Sets `object[key]` to `value` when it is absent or null.
fn default_field(object: &mut Value, key: &str, value: Value) {
    if let Some(map) = object.as_object_mut()
        && map.get(key).is_none_or(Value::is_null)
    {
        map.insert(key.to_string(), value);
    }
}

/// The image pull policy the kubelet contract defaults: `Always` for `:latest` or no tag.
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn default_probe(probe: &mut Value) {
    if !probe.is_object() {
        return;
    }
    default_field(probe, "timeoutSeconds", json!(1));
    default_field(probe, "periodSeconds", json!(10));
    default_field(probe, "successThreshold", json!(1));
    default_field(probe, "failureThreshold", json!(3));
    if probe["httpGet"].is_object() {
        default_field(&mut probe["httpGet"], "path", json!("/"));
        default_field(&mut probe["httpGet"], "scheme", json!("HTTP"));
    }
}

fn default_container(container: &mut Value) {
    if !container.is_object() {
        return;
    }
    let image = container["image"].as_str().unwrap_or_default().to_string();
    default_field(
        container,
        "terminationMessagePath",
        json!("/dev/termination-log"),
    );
    default_field(container, "terminationMessagePolicy", json!("File"));
    if !image.is_empty() {
        default_field(container, "imagePullPolicy", json!(pull_policy(&image)));
    }
    default_field(container, "resources", json!({}));
    if let Some(ports) = container["ports"].as_array_mut() {
        for port in ports {
            default_field(port, "protocol", json!("TCP"));
        }
    }
    if let Some(env) = container["env"].as_array_mut() {
        for var in env {
            if var["valueFrom"]["fieldRef"].is_object() {
                default_field(&mut var["valueFrom"]["fieldRef"], "apiVersion", json!("v1"));
            }
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        default_probe(&mut container[probe]);
    }
}

fn default_volume(volume: &mut Value) {
    for source in ["configMap", "secret", "projected", "downwardAPI"] {
        if volume[source].is_object() {
            default_field(&mut volume[source], "defaultMode", json!(420));
        }
    }
    if volume["hostPath"].is_object() {
        default_field(&mut volume["hostPath"], "type", json!(""));
    }
}

/// Defaults of a pod spec, wherever it appears (Pods and every pod template).
pub fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "securityContext", json!({}));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec[list].as_array_mut() {
            for container in containers {
                default_container(container);
            }
        }
    }
    if let Some(volumes) = spec["volumes"].as_array_mut() {
        for volume in volumes {
            default_volume(volume);
        }
    }
}

/// A Pod's scheme defaults beyond its spec's.
fn default_pod(pod: &mut Value) {
    let spec = &mut pod["spec"];
    default_pod_spec(spec);
    default_field(spec, "enableServiceLinks", json!(true));
}

/// Where the ServiceAccount admission plugin mounts the token.
const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What the admission plugins every cluster runs add to a Pod after the field manager saw it
/// (so no manager owns these): the service account (ServiceAccount), priority (Priority) and
/// default tolerations (DefaultTolerationSeconds). `create` also mounts the service account
/// token, as the ServiceAccount plugin does on create only.
pub fn admit_pod(pod: &mut Value, create: bool) {
    if !pod["spec"].is_object() {
        return;
    }
    let automount = pod["spec"]["automountServiceAccountToken"] != false;
    let mirror = pod["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string();
    let spec = &mut pod["spec"];
    default_field(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    default_field(spec, "priority", json!(0));
    if spec["serviceAccountName"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        spec["serviceAccountName"] = json!("default");
    }
    default_field(spec, "serviceAccount", spec["serviceAccountName"].clone());
    let mut tolerations = spec["tolerations"].as_array().cloned().unwrap_or_default();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        if !tolerations.iter().any(|t| t["key"] == key) {
            tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
    spec["tolerations"] = Value::Array(tolerations);
    if create && automount && !mirror {
        mount_service_account_token(spec);
    }
}

/// The ServiceAccount plugin's projected `kube-api-access-<random>` volume (token, cluster
/// CA, namespace), mounted read-only in every container that does not mount that path yet.
fn mount_service_account_token(spec: &mut Value) {
    let mounted = |c: &Value| {
        c["volumeMounts"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["mountPath"] == TOKEN_MOUNT_PATH))
    };
    let lists = ["initContainers", "containers"];
    let wanting = lists
        .iter()
        .flat_map(|l| spec[*l].as_array().into_iter().flatten())
        .any(|c| !mounted(c));
    if !wanting {
        return;
    }
    let name = crate::store::generated_name("kube-api-access-");
    for list in lists {
        for container in spec[list].as_array_mut().into_iter().flatten() {
            if mounted(container) || !container.is_object() {
                continue;
            }
            let mut mounts = container["volumeMounts"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            mounts.push(json!({"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH}));
            container["volumeMounts"] = Value::Array(mounts);
        }
    }
    let mut volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
    volumes.push(json!({"name": name, "projected": {"sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
    ], "defaultMode": 420}}));
    spec["volumes"] = Value::Array(volumes);
}

/// The kind's Go zero object as it encodes: the structs that are not pointers (and slices
/// without `omitempty`) are there even when empty. SMD compares a create with it, so these
/// are never "added" by the creator; their `status` is what a created object shows.
pub fn zero_object(rt: &ResourceType) -> Value {
    if rt.is_custom() {
        return json!({});
    }
    let pod_template = json!({"metadata": {}, "spec": {"containers": null}});
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => json!({"spec": {"containers": null}, "status": {}}),
        ("", "Service") => json!({"spec": {}, "status": {"loadBalancer": {}}}),
        ("", "Namespace") => json!({"spec": {}, "status": {}}),
        ("", "PersistentVolumeClaim") => json!({"spec": {"resources": {}}, "status": {}}),
        ("apps", "Deployment") => json!({"spec": {"selector": null, "template": pod_template,
            "strategy": {}}, "status": {}}),
        ("apps", "ReplicaSet") => json!({"spec": {"selector": null, "template": pod_template},
            "status": {"replicas": 0}}),
        ("apps", "StatefulSet") => json!({"spec": {"selector": null, "template": pod_template,
            "serviceName": null, "updateStrategy": {}}, "status": {"replicas": 0, "availableReplicas": 0}}),
        ("apps", "DaemonSet") => json!({"spec": {"selector": null, "template": pod_template,
            "updateStrategy": {}}, "status": {"currentNumberScheduled": 0, "numberMisscheduled": 0,
            "desiredNumberScheduled": 0, "numberReady": 0}}),
        ("batch", "Job") => json!({"spec": {"template": pod_template}, "status": {}}),
        ("batch", "CronJob") => json!({"spec": {"jobTemplate": {"metadata": {},
            "spec": {"template": pod_template}}}, "status": {}}),
        ("policy", "PodDisruptionBudget") => json!({"spec": {}, "status": {"disruptionsAllowed": 0,
            "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}}),
        _ => json!({}),
    }
}

fn default_template(template: &mut Value) {
    if template.is_object() && template["spec"].is_object() {
        default_pod_spec(&mut template["spec"]);
    }
}

fn default_job_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    if spec["completions"].is_null() && spec["parallelism"].is_null() {
        spec["completions"] = json!(1);
    }
    default_field(spec, "parallelism", json!(1));
    default_field(spec, "backoffLimit", json!(6));
    default_field(spec, "completionMode", json!("NonIndexed"));
    default_field(spec, "suspend", json!(false));
    default_field(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
    default_field(spec, "manualSelector", json!(false));
    default_template(&mut spec["template"]);
}

/// Applies the scheme defaults of a built-in kind (kube-apiserver's `SetDefaults_*`, run as
/// the body decodes, so the writer's field manager owns them).
pub fn apply(rt: &ResourceType, object: &mut Value) {
    if rt.group.is_empty() && rt.kind == "Namespace" {
        default_namespace(object);
        return;
    }
    if rt.is_custom() || !object["spec"].is_object() && rt.kind != "Secret" {
        return;
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => default_pod(object),
        ("", "Secret") => {
            default_field(object, "type", json!("Opaque"));
            fold_string_data(object);
        }
        ("", "Service") => default_service(&mut object["spec"]),
        ("", "PersistentVolumeClaim") => {
            default_field(&mut object["spec"], "volumeMode", json!("Filesystem"))
        }
        ("apps", "Deployment") => {
            let spec = &mut object["spec"];
            default_field(spec, "replicas", json!(1));
            default_field(spec, "revisionHistoryLimit", json!(10));
            default_field(spec, "progressDeadlineSeconds", json!(600));
            default_field(spec, "strategy", json!({}));
            if spec["strategy"]["type"].is_null() {
                spec["strategy"]["type"] = json!("RollingUpdate");
            }
            if spec["strategy"]["type"] == "RollingUpdate" {
                default_field(&mut spec["strategy"], "rollingUpdate", json!({}));
                default_field(
                    &mut spec["strategy"]["rollingUpdate"],
                    "maxSurge",
                    json!("25%"),
                );
                default_field(
                    &mut spec["strategy"]["rollingUpdate"],
                    "maxUnavailable",
                    json!("25%"),
                );
            }
            default_template(&mut spec["template"]);
        }
        ("apps", "ReplicaSet") => {
            default_field(&mut object["spec"], "replicas", json!(1));
            default_template(&mut object["spec"]["template"]);
        }
        ("apps", "StatefulSet") => {
            let spec = &mut object["spec"];
            default_field(spec, "replicas", json!(1));
            default_field(spec, "podManagementPolicy", json!("OrderedReady"));
            default_field(spec, "revisionHistoryLimit", json!(10));
            default_field(spec, "updateStrategy", json!({"type": "RollingUpdate"}));
            if spec["updateStrategy"]["type"] == "RollingUpdate" {
                default_field(
                    &mut spec["updateStrategy"],
                    "rollingUpdate",
                    json!({"partition": 0}),
                );
            }
            default_field(
                spec,
                "persistentVolumeClaimRetentionPolicy",
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
            default_template(&mut spec["template"]);
        }
        ("apps", "DaemonSet") => {
            let spec = &mut object["spec"];
            default_field(spec, "revisionHistoryLimit", json!(10));
            default_field(spec, "updateStrategy", json!({"type": "RollingUpdate"}));
            if spec["updateStrategy"]["type"] == "RollingUpdate" {
                default_field(
                    &mut spec["updateStrategy"],
                    "rollingUpdate",
                    json!({"maxUnavailable": 1, "maxSurge": 0}),
                );
            }
            default_template(&mut spec["template"]);
        }
        ("batch", "Job") => default_job_spec(&mut object["spec"]),
        ("batch", "CronJob") => {
            let spec = &mut object["spec"];
            default_field(spec, "concurrencyPolicy", json!("Allow"));
            default_field(spec, "suspend", json!(false));
            default_field(spec, "successfulJobsHistoryLimit", json!(3));
            default_field(spec, "failedJobsHistoryLimit", json!(1));
            if spec["jobTemplate"]["spec"].is_object() {
                default_template(&mut spec["jobTemplate"]["spec"]["template"]);
            }
        }
        _ => {}
    }
}

/// `SetDefaults_Namespace`: the `kubernetes.io/metadata.name` label, always the name.
fn default_namespace(namespace: &mut Value) {
    let Some(name) = namespace["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
    else {
        return;
    };
    if !namespace["metadata"]["labels"].is_object() {
        namespace["metadata"]["labels"] = json!({});
    }
    namespace["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
}

/// kube-apiserver merges a Secret's write-only `stringData` into `data` (base64, `stringData`
/// winning on equal keys) when it converts the object, so `stringData` is never stored or read.
fn fold_string_data(secret: &mut Value) {
    use base64::Engine as _;
    let Some(map) = secret.as_object_mut() else {
        return;
    };
    let Some(Value::Object(strings)) = map.remove("stringData") else {
        return;
    };
    let data = map.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (key, value) in strings {
            let text = value.as_str().unwrap_or_default();
            let encoded = base64::engine::general_purpose::STANDARD.encode(text);
            data.insert(key, Value::String(encoded));
        }
    }
}

fn default_service(spec: &mut Value) {
    default_field(spec, "type", json!("ClusterIP"));
    let kind = spec["type"].as_str().unwrap_or("ClusterIP").to_string();
    if kind != "ExternalName" {
        default_field(spec, "sessionAffinity", json!("None"));
        default_field(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if kind == "NodePort" || kind == "LoadBalancer" {
        default_field(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        default_field(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if let Some(ports) = spec["ports"].as_array_mut() {
        for port in ports {
            default_field(port, "protocol", json!("TCP"));
            let number = port["port"].clone();
            default_field(port, "targetPort", number);
        }
    }
}

/// The Job controller's generated selector and labels (`manualSelector` unset), from the
/// Job's UID, as kube-apiserver's Job strategy adds them on create.
pub fn generate_job_selector(job: &mut Value) {
    if job["spec"]["manualSelector"] == true || !job["spec"].is_object() {
        return;
    }
    let uid = job["metadata"]["uid"].clone();
    let name = job["metadata"]["name"].clone();
    if job["spec"]["selector"].is_null() {
        job["spec"]["selector"] =
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
    }
    let template = &mut job["spec"]["template"];
    if !template.is_object() {
        return;
    }
    default_field(template, "metadata", json!({}));
    default_field(&mut template["metadata"], "labels", json!({}));
    let labels = &mut template["metadata"]["labels"];
    for (key, value) in [
        ("batch.kubernetes.io/controller-uid", &uid),
        ("batch.kubernetes.io/job-name", &name),
        ("controller-uid", &uid),
        ("job-name", &name),
    ] {
        default_field(labels, key, value.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin;

    #[test]
    fn secret_string_data_is_folded_into_data() {
        let rt = builtin("", "Secret").expect("secrets");
        let mut object = json!({"metadata": {"name": "relay"},
            "data": {"user": "b2xk", "host": "eA=="}, "stringData": {"user": "new"}});
        apply(&rt, &mut object);
        assert_eq!(object["stringData"], Value::Null);
        assert_eq!(object["data"], json!({"user": "bmV3", "host": "eA=="}));
        assert_eq!(object["type"], "Opaque");
    }

    #[test]
    fn deployments_get_kube_apiserver_defaults() {
        let rt = builtin("apps", "Deployment").expect("deployments");
        let mut object = json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
            {"name": "web", "image": "nginx", "ports": [{"containerPort": 80}]},
            {"name": "side", "image": "envoy:1.2"}
        ]}}}});
        apply(&rt, &mut object);
        let spec = &object["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(
            spec["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        );
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Always");
        assert_eq!(pod["dnsPolicy"], "ClusterFirst");
        assert_eq!(pod["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(pod["containers"][1]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(pod["containers"][0]["ports"][0]["protocol"], "TCP");
        assert!(
            pod.get("enableServiceLinks").is_none(),
            "pod-only defaults stay off templates"
        );
        let before = object.clone();
        apply(&rt, &mut object);
        assert_eq!(object, before, "defaulting is idempotent");
    }

    #[test]
    fn services_pods_and_jobs() {
        let svc = builtin("", "Service").expect("services");
        let mut service = json!({"spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}});
        apply(&svc, &mut service);
        assert_eq!(
            service["spec"]["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        assert_eq!(service["spec"]["type"], "ClusterIP");

        let pods = builtin("", "Pod").expect("pods");
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "busybox:1"}]}});
        apply(&pods, &mut pod);
        assert_eq!(pod["spec"]["enableServiceLinks"], true);
        assert!(
            pod["spec"].get("serviceAccountName").is_none(),
            "admission's"
        );
        admit_pod(&mut pod, true);
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        assert_eq!(pod["spec"]["tolerations"].as_array().map(Vec::len), Some(2));
        let volume = &pod["spec"]["volumes"][0];
        let name = volume["name"].as_str().unwrap_or_default();
        assert!(name.starts_with("kube-api-access-"), "{volume}");
        assert_eq!(
            pod["spec"]["containers"][0]["volumeMounts"],
            json!([{"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH}])
        );

        let jobs = builtin("batch", "Job").expect("jobs");
        let mut job = json!({"metadata": {"name": "j", "uid": "u-1"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "a", "image": "x"}]}}}});
        apply(&jobs, &mut job);
        generate_job_selector(&mut job);
        assert_eq!(job["spec"]["completions"], 1);
        assert_eq!(job["spec"]["backoffLimit"], 6);
        assert_eq!(
            job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
            "u-1"
        );
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"]["job-name"],
            "j"
        );
    }
}
