//! The DaemonSet controller on a one-node cluster: one Pod on `sandbox-node` when the template's
//! node selector and affinity admit the node, none otherwise; a template change replaces it.

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::object::{self, insert_nonzero};
use super::replicaset::pod_from_template;
use super::{Action, Kind, Plan, hash, pod};
use crate::strategy::DAEMONSET_TEMPLATE_GENERATION;

const REVISION_LABEL: &str = "controller-revision-hash";
const GENERATION_LABEL: &str = "pod-template-generation";

fn revision(ds: &Value) -> String {
    hash::template_hash(&ds["spec"]["template"])
}

/// What the DaemonSet controller does for `ds`, given the Pods it controls.
pub fn plan(ds: &Value, pods: &[&Value], now: Timestamp) -> Plan {
    if object::is_deleting(ds) {
        return Plan::default();
    }
    let wanted = pod::matches_node(&ds["spec"]["template"]["spec"]);
    let revision = revision(ds);
    let active: Vec<&Value> = pods.iter().copied().filter(|p| pod::is_active(p)).collect();
    let mut plan = Plan::default();
    // Finished daemon Pods are replaced.
    for p in pods
        .iter()
        .filter(|p| !pod::is_active(p) && !object::is_deleting(p))
    {
        plan.actions.push(Action::delete(Kind::Pod, p));
    }
    let keep = usize::from(wanted);
    let on_delete = ds["spec"]["updateStrategy"]["type"] == "OnDelete";
    for (i, p) in active.iter().enumerate() {
        let outdated = object::label(p, REVISION_LABEL) != Some(revision.as_str());
        if i >= keep || (outdated && !on_delete) {
            plan.actions.push(Action::delete(Kind::Pod, p));
        }
    }
    if wanted && active.is_empty() {
        plan.actions
            .push(Action::Create(Kind::Pod, daemon_pod(ds, &revision)));
    }
    plan.push(Action::status_change(
        Kind::DaemonSet,
        ds,
        status(ds, &active, wanted, &revision, now),
    ));
    plan
}

fn daemon_pod(ds: &Value, revision: &str) -> Value {
    let mut pod = pod_from_template(ds, Kind::DaemonSet);
    pod["metadata"]["labels"][REVISION_LABEL] = json!(revision);
    // The template generation the API server keeps, as the controller's `GetTemplateGeneration`.
    let generation = object::annotation(ds, DAEMONSET_TEMPLATE_GENERATION)
        .map_or_else(|| object::generation(ds).to_string(), str::to_string);
    pod["metadata"]["labels"][GENERATION_LABEL] = json!(generation);
    // The controller pins each daemon Pod to its node through required node affinity.
    pod["spec"]["affinity"]["nodeAffinity"] = json!({
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pod::NODE_NAME]}]}
        ]}
    });
    pod
}

fn status(ds: &Value, active: &[&Value], wanted: bool, revision: &str, now: Timestamp) -> Value {
    let count = |f: &dyn Fn(&Value) -> bool| {
        i64::try_from(active.iter().filter(|p| f(p)).count()).unwrap_or(i64::MAX)
    };
    let min_ready = ds["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    let scheduled = count(&|_| true).min(1);
    let desired = i64::from(wanted);
    let (scheduled, misscheduled) = if wanted {
        (scheduled, 0)
    } else {
        (0, scheduled)
    };
    let available = count(&|p| pod::availability(p, min_ready, now).0).min(desired);
    let mut status = Map::new();
    status.insert("currentNumberScheduled".into(), json!(scheduled));
    status.insert("numberMisscheduled".into(), json!(misscheduled));
    status.insert("desiredNumberScheduled".into(), json!(desired));
    status.insert(
        "numberReady".into(),
        json!(count(&|p| pod::is_ready(p)).min(desired)),
    );
    status.insert("observedGeneration".into(), json!(object::generation(ds)));
    insert_nonzero(
        &mut status,
        "updatedNumberScheduled",
        count(&|p| object::label(p, REVISION_LABEL) == Some(revision)).min(desired),
    );
    insert_nonzero(&mut status, "numberAvailable", available);
    insert_nonzero(&mut status, "numberUnavailable", desired - available);
    Value::Object(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2024-01-01T00:00:00Z".parse().expect("valid")
    }

    fn ds(node_selector: Value, image: &str) -> Value {
        json!({
            "metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds-uid", "generation": 3},
            "spec": {"template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"nodeSelector": node_selector, "containers": [{"name": "a", "image": image}]}}},
        })
    }

    fn daemon(ds: &Value, ready: bool) -> Value {
        json!({
            "metadata": {"name": "agent-x1", "labels": {REVISION_LABEL: revision(ds)}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    fn summary(plan: &Plan) -> Vec<String> {
        plan.actions
            .iter()
            .filter_map(|a| match a {
                Action::Create(Kind::Pod, p) => Some(format!(
                    "create {}",
                    p["metadata"]["generateName"].as_str().unwrap_or_default()
                )),
                Action::Delete { name, .. } => Some(format!("delete {name}")),
                _ => None,
            })
            .collect()
    }

    fn status_of(plan: &Plan) -> Value {
        match plan.actions.last() {
            Some(Action::UpdateStatus(Kind::DaemonSet, d)) => d["status"].clone(),
            other => panic!("expected a status, got {other:?}"),
        }
    }

    #[test]
    fn one_pod_on_the_one_node() {
        let linux = ds(json!({"kubernetes.io/os": "linux"}), "agent:1");
        let gpu = ds(json!({"gpu": "true"}), "agent:1");
        let upgraded = ds(json!({}), "agent:2");
        let old_pod = daemon(&linux, true);
        let cases: Vec<(&Value, Vec<&Value>, Vec<&str>)> = vec![
            (&linux, vec![], vec!["create agent-"]),
            (&linux, vec![&old_pod], vec![]),
            (&gpu, vec![], vec![]),
            (&gpu, vec![&old_pod], vec!["delete agent-x1"]),
            (&upgraded, vec![&old_pod], vec!["delete agent-x1"]),
        ];
        for (ds, pods, expected) in cases {
            assert_eq!(summary(&plan(ds, &pods, now())), expected, "{ds} {pods:?}");
        }
    }

    #[test]
    fn daemon_pods_are_pinned_and_labelled() {
        let d = ds(json!({}), "agent:1");
        let p = plan(&d, &[], now());
        let Some(Action::Create(Kind::Pod, pod)) = p.actions.first() else {
            panic!("expected a pod: {:?}", p.actions);
        };
        assert_eq!(pod["metadata"]["labels"][GENERATION_LABEL], "3");
        assert_eq!(pod["metadata"]["labels"][REVISION_LABEL], revision(&d));
        assert!(super::pod::matches_node(&pod["spec"]));
        assert_eq!(
            status_of(&p),
            json!({"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 1, "numberReady": 0, "observedGeneration": 3, "numberUnavailable": 1})
        );
        let ready = daemon(&d, true);
        assert_eq!(
            status_of(&plan(&d, &[&ready], now())),
            json!({"currentNumberScheduled": 1, "numberMisscheduled": 0, "desiredNumberScheduled": 1, "numberReady": 1, "observedGeneration": 3, "updatedNumberScheduled": 1, "numberAvailable": 1})
        );
    }
}
