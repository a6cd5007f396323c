//! The ReplicaSet controller: keeps `spec.replicas` Pods from the template, named
//! `<replicaset>-<5 random characters>` by the API server's generateName.

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::object::{self, insert_nonzero};
use super::{Action, Kind, Plan, pod};

/// What the ReplicaSet controller does for `rs`, given the Pods it controls.
pub fn plan(rs: &Value, pods: &[&Value], now: Timestamp) -> Plan {
    if object::is_deleting(rs) {
        return Plan::default();
    }
    let mut plan = Plan::default();
    let active: Vec<&Value> = pods.iter().copied().filter(|p| pod::is_active(p)).collect();
    let wanted = usize::try_from(object::replicas(rs)).unwrap_or(0);
    if active.len() < wanted {
        for _ in active.len()..wanted {
            plan.actions.push(Action::Create(
                Kind::Pod,
                pod_from_template(rs, Kind::ReplicaSet),
            ));
        }
    } else if active.len() > wanted {
        let mut doomed = active.clone();
        doomed.sort_by_key(|p| deletion_rank(p));
        for p in doomed.into_iter().take(active.len() - wanted) {
            plan.actions.push(Action::delete(Kind::Pod, p));
        }
    }
    let (status, wake) = status(rs, &active, now);
    plan.push(Action::status_change(Kind::ReplicaSet, rs, status));
    plan.wake_at(wake);
    plan
}

/// A Pod from `owner`'s `spec.template`, controlled by `owner`, named by the API server.
pub fn pod_from_template(owner: &Value, kind: Kind) -> Value {
    let template = &owner["spec"]["template"];
    let mut metadata = object::child_metadata(owner, kind, &template["metadata"]);
    metadata.insert(
        "generateName".into(),
        json!(format!("{}-", object::name(owner))),
    );
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": template["spec"],
    })
}

/// The order in which surplus Pods go, as the controller ranks them: unscheduled before
/// scheduled, pending before running, unready before ready, more restarts first, newest first.
fn deletion_rank(
    pod: &Value,
) -> (
    bool,
    u8,
    bool,
    std::cmp::Reverse<u64>,
    std::cmp::Reverse<String>,
) {
    let scheduled = pod["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let phase = match pod["status"]["phase"].as_str() {
        Some("Pending") => 0,
        Some("Running") => 2,
        _ => 1,
    };
    let restarts = pod["status"]["containerStatuses"]
        .as_array()
        .map(|s| s.iter().filter_map(|c| c["restartCount"].as_u64()).sum())
        .unwrap_or(0);
    let created = pod["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (
        scheduled,
        phase,
        pod::is_ready(pod),
        std::cmp::Reverse(restarts),
        std::cmp::Reverse(created),
    )
}

/// The ReplicaSet status from its active Pods, and when a Pod becomes available.
fn status(rs: &Value, active: &[&Value], now: Timestamp) -> (Value, Option<Timestamp>) {
    let min_ready = rs["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    let ready = active.iter().filter(|p| pod::is_ready(p)).count();
    let mut available = 0;
    let mut wake: Option<Timestamp> = None;
    for p in active {
        let (is_available, at) = pod::availability(p, min_ready, now);
        available += usize::from(is_available);
        wake = wake.into_iter().chain(at).min();
    }
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let mut status = Map::new();
    status.insert("replicas".into(), json!(active.len()));
    insert_nonzero(&mut status, "fullyLabeledReplicas", count(active.len()));
    insert_nonzero(&mut status, "readyReplicas", count(ready));
    insert_nonzero(&mut status, "availableReplicas", count(available));
    status.insert("observedGeneration".into(), json!(object::generation(rs)));
    (Value::Object(status), wake)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(replicas: i64) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-5d8f9", "namespace": "default", "uid": "rs-uid", "generation": 2},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "5d8f9"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}},
            },
        })
    }

    fn pod(name: &str, phase: &str, ready: bool, created: &str) -> Value {
        json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeName": "sandbox-node"},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }, "lastTransitionTime": "2024-01-01T00:00:00Z"}]},
        })
    }

    fn now() -> Timestamp {
        "2024-01-01T00:01:00Z".parse().expect("valid")
    }

    fn creates(plan: &Plan) -> usize {
        plan.actions
            .iter()
            .filter(|a| matches!(a, Action::Create(Kind::Pod, _)))
            .count()
    }

    #[test]
    fn scales_pods_to_replicas() {
        let ready_old = pod("a", "Running", true, "2024-01-01T00:00:00Z");
        let ready_new = pod("b", "Running", true, "2024-01-01T00:00:30Z");
        let pending = pod("c", "Pending", false, "2024-01-01T00:00:00Z");
        let done = pod("d", "Succeeded", false, "2024-01-01T00:00:00Z");
        // (replicas, pods, creates, deletes)
        let cases: Vec<(i64, Vec<&Value>, usize, Vec<&str>)> = vec![
            (3, vec![], 3, vec![]),
            (2, vec![&ready_old], 1, vec![]),
            (2, vec![&ready_old, &done], 1, vec![]),
            (1, vec![&ready_old, &pending], 0, vec!["c"]),
            (1, vec![&ready_old, &ready_new], 0, vec!["b"]),
            (
                0,
                vec![&ready_old, &ready_new, &pending],
                0,
                vec!["c", "b", "a"],
            ),
            (2, vec![&ready_old, &ready_new], 0, vec![]),
        ];
        for (replicas, pods, create, delete) in cases {
            let plan = plan(&rs(replicas), &pods, now());
            assert_eq!(creates(&plan), create, "replicas {replicas}");
            assert_eq!(plan.deleted_names(), delete, "replicas {replicas}");
        }
    }

    #[test]
    fn created_pods_come_from_the_template_and_are_owned() {
        let plan = plan(&rs(1), &[], now());
        let Some(Action::Create(Kind::Pod, pod)) = plan.actions.first() else {
            panic!("expected a pod, got {:?}", plan.actions);
        };
        assert_eq!(pod["metadata"]["generateName"], "web-5d8f9-");
        assert_eq!(pod["metadata"]["namespace"], "default");
        assert_eq!(
            pod["metadata"]["labels"],
            json!({"app": "web", "pod-template-hash": "5d8f9"})
        );
        assert_eq!(
            pod["metadata"]["ownerReferences"],
            json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f9", "uid": "rs-uid", "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(pod["spec"]["containers"][0]["image"], "nginx");
    }

    #[test]
    fn status_counts_ready_and_available_pods() {
        let ready = pod("a", "Running", true, "2024-01-01T00:00:00Z");
        let unready = pod("b", "Running", false, "2024-01-01T00:00:00Z");
        let plan = plan(&rs(2), &[&ready, &unready], now());
        let Some(Action::UpdateStatus(Kind::ReplicaSet, updated)) = plan.actions.last() else {
            panic!("expected a status update, got {:?}", plan.actions);
        };
        assert_eq!(
            updated["status"],
            json!({"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 1, "availableReplicas": 1, "observedGeneration": 2})
        );

        let mut slow = rs(2);
        slow["spec"]["minReadySeconds"] = json!(120);
        let plan = super::plan(&slow, &[&ready, &unready], now());
        let Some(Action::UpdateStatus(Kind::ReplicaSet, updated)) = plan.actions.last() else {
            panic!("expected a status update, got {:?}", plan.actions);
        };
        assert!(updated["status"].get("availableReplicas").is_none());
        assert_eq!(
            plan.wake,
            Some("2024-01-01T00:02:00Z".parse().expect("valid"))
        );
    }

    #[test]
    fn an_unchanged_status_is_not_written() {
        let mut settled = rs(0);
        settled["status"] = json!({"replicas": 0, "observedGeneration": 2});
        assert_eq!(plan(&settled, &[], now()), Plan::default());
    }
}
