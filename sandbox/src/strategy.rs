//! Per-kind write rules (kube-apiserver's "strategies"): what create and update reset, keep,
//! default and validate before an object is stored.

use serde_json::{Value, json};

use crate::api_error::FieldError;
use crate::crd;
use crate::defaults;
use crate::resources::ResourceType;
use crate::schema;
use crate::service_addresses;
use crate::specs;
use crate::validation::validate_metadata;

fn is(rt: &ResourceType, group: &str, kind: &str) -> bool {
    rt.group == group && rt.kind == kind
}

/// Pod QoS class from its containers' requests and limits, as the apiserver derives it.
fn qos_class(pod: &Value) -> &'static str {
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for container in &containers {
        let requests = container["resources"]["requests"].as_object();
        let limits = container["resources"]["limits"].as_object();
        if requests.is_some_and(|r| !r.is_empty()) || limits.is_some_and(|l| !l.is_empty()) {
            any = true;
        }
        for resource in ["cpu", "memory"] {
            let limit = limits.and_then(|l| l.get(resource));
            let request = requests.and_then(|r| r.get(resource)).or(limit);
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// What decoding a body does before the field manager sees it, on create and update: the
/// scheme defaults, a CRD's own defaults, a custom resource's structural defaults and pruning.
/// The writer's field manager owns what these set.
pub fn decode_defaults(rt: &ResourceType, object: &mut Value) {
    defaults::apply(rt, object);
    if is(rt, "apiextensions.k8s.io", "CustomResourceDefinition") {
        crd::default_crd(object);
    }
    schema::default_and_prune(rt, object);
}

/// What create resets and sets after the field manager (admission, the strategy), beyond the
/// system metadata the store fills in: no manager owns these.
pub fn prepare_for_create(rt: &ResourceType, object: &mut Value) {
    if rt.has_status()
        && let Some(map) = object.as_object_mut()
    {
        // The status is reset to the zero one, which a typed kind still encodes.
        match defaults::zero_object(rt).get("status") {
            Some(status) => map.insert("status".into(), status.clone()),
            None => map.remove("status"),
        };
    }
    if is(rt, "", "Namespace") {
        object["spec"] = json!({"finalizers": ["kubernetes"]});
        object["status"] = json!({"phase": "Active"});
    }
    if is(rt, "batch", "Job") {
        defaults::generate_job_selector(object);
    }
    if is(rt, "", "Pod") {
        defaults::admit_pod(object, true);
        object["status"] = json!({"phase": "Pending", "qosClass": qos_class(object)});
        gate_scheduling(object);
    }
    if is(rt, "apps", "DaemonSet") {
        let given = template_generation(object).filter(|generation| *generation >= 1);
        set_template_generation(object, given.unwrap_or(1));
    }
    if is(rt, "apiextensions.k8s.io", "CustomResourceDefinition") {
        crd::add_cleanup_finalizer(object);
    }
}

/// What an update of the main resource keeps from the stored object, after the field manager.
pub fn prepare_for_update(rt: &ResourceType, old: &Value, new: &mut Value) {
    if rt.has_status() {
        match old.get("status") {
            Some(status) => new["status"] = status.clone(),
            None => {
                if let Some(map) = new.as_object_mut() {
                    map.remove("status");
                }
            }
        }
    }
    if is(rt, "", "Pod") {
        defaults::admit_pod(new, false);
    }
    if is(rt, "", "Service") {
        service_addresses::keep_allocated(old, new);
        service_addresses::drop_type_dependent_fields(old, new);
    }
    // Namespace finalizers change only through the namespace controller's /finalize.
    if is(rt, "", "Namespace") {
        new["spec"] = old["spec"].clone();
    }
}

/// kube-apiserver's Pod strategy: a Pod created with scheduling gates says so in its status
/// (`kubectl get pods` shows `SchedulingGated`); the scheduler leaves it until they are removed.
fn gate_scheduling(pod: &mut Value) {
    if scheduling_gated(&pod["spec"]) {
        pod["status"]["conditions"] = json!([{
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": null,
            "lastTransitionTime": crate::meta::now(),
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
        }]);
    }
}

/// Whether a Pod spec still has scheduling gates.
pub fn scheduling_gated(spec: &Value) -> bool {
    spec["schedulingGates"]
        .as_array()
        .is_some_and(|gates| !gates.is_empty())
}

/// The annotation through which apps/v1 shows a DaemonSet's template generation (the internal
/// `spec.templateGeneration`), which the DaemonSet controller stamps on its Pods as
/// `pod-template-generation`.
pub const DAEMONSET_TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

fn template_generation(daemon_set: &Value) -> Option<i64> {
    daemon_set["metadata"]["annotations"][DAEMONSET_TEMPLATE_GENERATION]
        .as_str()?
        .parse()
        .ok()
}

fn set_template_generation(daemon_set: &mut Value, generation: i64) {
    let metadata = &mut daemon_set["metadata"];
    if !metadata["annotations"].is_object() {
        metadata["annotations"] = json!({});
    }
    metadata["annotations"][DAEMONSET_TEMPLATE_GENERATION] = json!(generation.to_string());
}

/// What an update of the main resource sets once it is decoded as stored (`old` and `next`
/// compare field for field): a DaemonSet's template generation, which is not the writer's to
/// set, is one more on every template change.
pub fn count_template_changes(rt: &ResourceType, old: &Value, next: &mut Value) {
    if is(rt, "apps", "DaemonSet") {
        let old_generation = template_generation(old).unwrap_or(1);
        let changed = old["spec"].get("template") != next["spec"].get("template");
        set_template_generation(next, old_generation + i64::from(changed));
    }
}

/// Whether an update changes what `metadata.generation` counts.
pub fn generation_changed(rt: &ResourceType, old: &Value, new: &Value) -> bool {
    // kube-apiserver's endpointslice strategy: any change but of the metadata, or of its labels.
    if is(rt, "discovery.k8s.io", "EndpointSlice")
        && old["metadata"].get("labels") != new["metadata"].get("labels")
    {
        return true;
    }
    if rt.is_custom() || is(rt, "discovery.k8s.io", "EndpointSlice") {
        let skip_status = rt.has_status();
        let keys = |v: &Value| -> Vec<(String, Value)> {
            v.as_object()
                .map(|m| {
                    m.iter()
                        .filter(|(k, _)| {
                            !(matches!(k.as_str(), "metadata" | "apiVersion" | "kind")
                                || (skip_status && k.as_str() == "status"))
                        })
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut a = keys(old);
        let mut b = keys(new);
        a.sort_by(|x, y| x.0.cmp(&y.0));
        b.sort_by(|x, y| x.0.cmp(&y.0));
        return a != b;
    }
    // kube-apiserver's deployment strategy: annotations count too, because the deployment
    // controller copies them onto the ReplicaSets (it writes its own revision annotation
    // through the status, see `status_keeps_metadata`).
    if is(rt, "apps", "Deployment")
        && old["metadata"].get("annotations") != new["metadata"].get("annotations")
    {
        return true;
    }
    old.get("spec") != new.get("spec")
}

/// What of the metadata a status update writes, besides the status: kube-apiserver's status
/// strategy of Deployments keeps only the spec and the labels of the stored object, so the
/// annotations are the request's (how the deployment controller writes its revision without a
/// new generation).
pub fn status_keeps_metadata(rt: &ResourceType, request: &Value, next: &mut Value) {
    if is(rt, "apps", "Deployment") {
        crate::meta::set_metadata_field(
            next,
            "annotations",
            request["metadata"].get("annotations").cloned(),
        );
    }
}

/// Field errors of an object about to be stored (`old` on update).
pub fn validate(rt: &ResourceType, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = validate_metadata(rt, object);
    errors.extend(schema::validate(rt, object, old));
    errors.extend(specs::validate(rt, object));
    if is(rt, "apiextensions.k8s.io", "CustomResourceDefinition") {
        errors.extend(crd::validate_crd(object));
        if let Some(old) = old
            && old["spec"]["group"] != object["spec"]["group"]
        {
            errors.push(FieldError::invalid(
                "spec.group",
                &object["spec"]["group"],
                "field is immutable",
            ));
        }
    }
    if let Some(old) = old {
        errors.extend(immutable_fields(rt, old, object));
        if is(rt, "", "Pod") {
            errors.extend(crate::pod_update::errors(old, object));
        }
    }
    errors
}

/// Fields a kind forbids changing after creation.
fn immutable_fields(rt: &ResourceType, old: &Value, new: &Value) -> Vec<FieldError> {
    let pointers: &[(&str, &str)] = match (rt.group.as_str(), rt.kind.as_str()) {
        ("apps", "Deployment" | "ReplicaSet" | "DaemonSet") => {
            &[("/spec/selector", "spec.selector")]
        }
        ("apps", "StatefulSet") => &[
            ("/spec/selector", "spec.selector"),
            ("/spec/volumeClaimTemplates", "spec.volumeClaimTemplates"),
            ("/spec/serviceName", "spec.serviceName"),
            ("/spec/podManagementPolicy", "spec.podManagementPolicy"),
        ],
        ("batch", "Job") => &[
            ("/spec/selector", "spec.selector"),
            ("/spec/template", "spec.template"),
        ],
        ("", "Secret" | "ConfigMap") if old["immutable"] == json!(true) => {
            &[("/data", "data"), ("/binaryData", "binaryData")]
        }
        _ => &[],
    };
    pointers
        .iter()
        .filter(|(pointer, _)| old.pointer(pointer) != new.pointer(pointer))
        .map(|(pointer, field)| {
            FieldError::invalid(
                *field,
                new.pointer(pointer).unwrap_or(&Value::Null),
                "field is immutable",
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin;

    #[test]
    fn qos_classes() {
        let cases = [
            (
                json!({"spec": {"containers": [{"name": "a"}]}}),
                "BestEffort",
            ),
            (
                json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}),
                "Guaranteed",
            ),
            (
                json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}}),
                "Burstable",
            ),
        ];
        for (pod, class) in cases {
            assert_eq!(qos_class(&pod), class);
        }
    }

    #[test]
    fn generation_counts_spec_for_builtins() {
        let deploy = builtin("apps", "Deployment").expect("deployments");
        let old = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 1}});
        let relabelled = json!({"metadata": {"labels": {"a": "2"}}, "spec": {"replicas": 1}});
        let scaled = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 2}});
        assert!(!generation_changed(&deploy, &old, &relabelled));
        assert!(generation_changed(&deploy, &old, &scaled));
    }

    #[test]
    fn services_keep_their_allocated_addresses() {
        let svc = builtin("", "Service").expect("services");
        let old = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.0.12", "clusterIPs": ["10.96.0.12"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "pg", "port": 5432, "nodePort": 30001}]}});
        let mut new =
            json!({"spec": {"type": "NodePort", "ports": [{"name": "pg", "port": 5433}]}});
        prepare_for_update(&svc, &old, &mut new);
        assert_eq!(new["spec"]["clusterIP"], "10.96.0.12");
        assert_eq!(new["spec"]["ipFamilyPolicy"], "SingleStack");
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30001);
        let mut external =
            json!({"spec": {"type": "ExternalName", "externalName": "db.example.com"}});
        prepare_for_update(&svc, &old, &mut external);
        assert!(
            external["spec"].get("clusterIP").is_none(),
            "ExternalName services have no cluster IP"
        );
    }

    #[test]
    fn a_pod_with_scheduling_gates_is_created_gated() {
        let pods = builtin("", "Pod").expect("pods");
        let mut gated = json!({"spec": {"schedulingGates": [{"name": "example.com/hold"}],
                                        "containers": [{"name": "a", "image": "nginx"}]}});
        prepare_for_create(&pods, &mut gated);
        let condition = &mut gated["status"]["conditions"][0];
        assert!(condition["lastTransitionTime"].is_string(), "{condition}");
        condition["lastTransitionTime"] = json!("<now>");
        assert_eq!(
            gated["status"]["conditions"],
            json!([{"type": "PodScheduled", "status": "False", "lastProbeTime": null,
                    "lastTransitionTime": "<now>", "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates"}])
        );
        let mut plain = json!({"spec": {"containers": [{"name": "a", "image": "nginx"}]}});
        prepare_for_create(&pods, &mut plain);
        assert!(plain["status"].get("conditions").is_none(), "{plain}");
    }

    #[test]
    fn a_daemon_sets_template_generation_counts_template_changes() {
        let daemon_sets = builtin("apps", "DaemonSet").expect("daemonsets");
        let generation =
            |ds: &Value| ds["metadata"]["annotations"][DAEMONSET_TEMPLATE_GENERATION].clone();
        let template =
            |image: &str| json!({"spec": {"containers": [{"name": "a", "image": image}]}});
        let mut created =
            json!({"metadata": {"name": "agent"}, "spec": {"template": template("a:1")}});
        prepare_for_create(&daemon_sets, &mut created);
        assert_eq!(generation(&created), "1");

        // Not the writer's to set; one more per template change, none for other changes.
        let mut retemplated = json!({"metadata": {"name": "agent", "annotations": {DAEMONSET_TEMPLATE_GENERATION: "9"}},
                                     "spec": {"template": template("a:2")}});
        count_template_changes(&daemon_sets, &created, &mut retemplated);
        assert_eq!(generation(&retemplated), "2");
        let mut restrategied = json!({"metadata": {"name": "agent"},
                                      "spec": {"template": template("a:2"), "minReadySeconds": 5}});
        count_template_changes(&daemon_sets, &retemplated, &mut restrategied);
        assert_eq!(generation(&restrategied), "2");
    }

    #[test]
    fn selector_is_immutable() {
        let deploy = builtin("apps", "Deployment").expect("deployments");
        let old = json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "a"}}}});
        let new = json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "b"}}}});
        let errors = immutable_fields(&deploy, &old, &new);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.selector");
    }
}
