//! The StatefulSet controller: Pods `<set>-0 .. <set>-(n-1)` with stable names, created in
//! order (each once the previous one is Running and Ready, unless `podManagementPolicy:
//! Parallel`), removed from the highest ordinal down, updated one at a time from the highest
//! ordinal, and a PersistentVolumeClaim `<template>-<set>-<ordinal>` per volumeClaimTemplate.

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::object::{self, insert_nonzero};
use super::{Action, Kind, Plan, hash, pod};

const REVISION_LABEL: &str = "controller-revision-hash";
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// The revision name of the set's current template: `<set>-<hash>`.
pub fn update_revision(set: &Value) -> String {
    format!(
        "{}-{}",
        object::name(set),
        hash::template_hash(&set["spec"]["template"])
    )
}

fn ordinal(set: &Value, pod: &Value) -> Option<i64> {
    object::name(pod)
        .strip_prefix(object::name(set))?
        .strip_prefix('-')?
        .parse()
        .ok()
}

fn claim_name(template: &Value, set: &Value, ordinal: i64) -> String {
    format!("{}-{}-{ordinal}", object::name(template), object::name(set))
}

/// What the StatefulSet controller does for `set`, given the Pods it controls and whether a
/// PersistentVolumeClaim of a given name exists in its namespace.
pub fn plan(
    set: &Value,
    pods: &[&Value],
    claim_exists: &dyn Fn(&str) -> bool,
    now: Timestamp,
) -> Plan {
    if object::is_deleting(set) {
        return Plan::default();
    }
    let replicas = object::replicas(set);
    let revision = update_revision(set);
    let parallel = set["spec"]["podManagementPolicy"] == "Parallel";
    let mut by_ordinal: Vec<(i64, &Value)> = pods
        .iter()
        .filter_map(|p| ordinal(set, p).map(|o| (o, *p)))
        .collect();
    by_ordinal.sort_by_key(|(o, _)| *o);
    let find = |o: i64| by_ordinal.iter().find(|(i, _)| *i == o).map(|(_, p)| *p);
    let healthy = |p: &Value| pod::is_active(p) && pod::is_ready(p);

    let mut plan = Plan::default();
    // Creation, in order.
    for o in 0..replicas {
        match find(o) {
            None => {
                for template in set["spec"]["volumeClaimTemplates"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    let name = claim_name(template, set, o);
                    if !claim_exists(&name) {
                        plan.actions.push(Action::Create(
                            Kind::PersistentVolumeClaim,
                            claim(set, template, &name),
                        ));
                    }
                }
                plan.actions
                    .push(Action::Create(Kind::Pod, new_pod(set, o, &revision)));
                if !parallel {
                    break;
                }
            }
            // A finished Pod is replaced: deleted now, created again once gone.
            Some(p) if !pod::is_active(p) && !object::is_deleting(p) => {
                plan.actions.push(Action::delete(Kind::Pod, p));
                if !parallel {
                    break;
                }
            }
            Some(p) if !parallel && !healthy(p) => break,
            Some(_) => {}
        }
    }
    let all_healthy = (0..replicas).all(|o| find(o).is_some_and(healthy));
    // Scale down from the highest ordinal, one at a time unless parallel.
    let mut surplus: Vec<&Value> = by_ordinal
        .iter()
        .filter(|(o, _)| *o >= replicas)
        .map(|(_, p)| *p)
        .collect();
    surplus.reverse();
    if parallel {
        plan.actions.extend(
            surplus
                .iter()
                .filter(|p| !object::is_deleting(p))
                .map(|p| Action::delete(Kind::Pod, p)),
        );
    } else if all_healthy
        && let Some(highest) = surplus.first()
        && !object::is_deleting(highest)
    {
        plan.actions.push(Action::delete(Kind::Pod, highest));
    }
    // Rolling update: the highest outdated Pod at or above the partition, when all are healthy.
    let rolling = set["spec"]["updateStrategy"]["type"]
        .as_str()
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    let partition = set["spec"]["updateStrategy"]["rollingUpdate"]["partition"]
        .as_i64()
        .unwrap_or(0);
    if rolling && all_healthy && surplus.is_empty() {
        let outdated = by_ordinal.iter().rev().find(|(o, p)| {
            *o >= partition
                && *o < replicas
                && object::label(p, REVISION_LABEL) != Some(revision.as_str())
        });
        if let Some((_, p)) = outdated {
            plan.actions.push(Action::delete(Kind::Pod, p));
        }
    }
    plan.push(Action::status_change(
        Kind::StatefulSet,
        set,
        status(set, &by_ordinal, &revision, now),
    ));
    plan
}

fn new_pod(set: &Value, ordinal: i64, revision: &str) -> Value {
    let template = &set["spec"]["template"];
    let name = format!("{}-{ordinal}", object::name(set));
    let mut metadata = object::child_metadata(set, Kind::StatefulSet, &template["metadata"]);
    metadata.insert("name".into(), json!(name));
    let labels = metadata.entry("labels").or_insert_with(|| json!({}));
    labels[REVISION_LABEL] = json!(revision);
    labels[POD_NAME_LABEL] = json!(name);
    labels[POD_INDEX_LABEL] = json!(ordinal.to_string());
    let mut spec = template["spec"].clone();
    spec["hostname"] = json!(name);
    if let Some(service) = set["spec"]["serviceName"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        spec["subdomain"] = json!(service);
    }
    let claims = set["spec"]["volumeClaimTemplates"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if !claims.is_empty() {
        let mut volumes: Vec<Value> = spec["volumes"].as_array().cloned().unwrap_or_default();
        for claim in claims {
            let volume_name = object::name(claim);
            volumes.retain(|v| v["name"] != volume_name);
            volumes.push(json!({"name": volume_name, "persistentVolumeClaim": {"claimName": claim_name(claim, set, ordinal)}}));
        }
        spec["volumes"] = Value::Array(volumes);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// A claim from a volumeClaimTemplate. The default retention policy keeps claims when Pods or
/// the set go, so the claim has no owner.
fn claim(set: &Value, template: &Value, name: &str) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name));
    metadata.insert("namespace".into(), json!(object::namespace(set)));
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    if let Some(selector) = set["spec"]["selector"]["matchLabels"].as_object() {
        labels.extend(selector.clone());
    }
    if !labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(labels));
    }
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": template["spec"]})
}

fn status(set: &Value, pods: &[(i64, &Value)], revision: &str, now: Timestamp) -> Value {
    let replicas = object::replicas(set);
    let current_revision = set["status"]["currentRevision"]
        .as_str()
        .unwrap_or(revision)
        .to_string();
    let live: Vec<&Value> = pods
        .iter()
        .map(|(_, p)| *p)
        .filter(|p| pod::is_active(p))
        .collect();
    let count = |f: &dyn Fn(&Value) -> bool| {
        i64::try_from(live.iter().filter(|p| f(p)).count()).unwrap_or(i64::MAX)
    };
    let min_ready = set["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    let ready = count(&|p| pod::is_ready(p));
    let available = count(&|p| pod::availability(p, min_ready, now).0);
    let updated = count(&|p| object::label(p, REVISION_LABEL) == Some(revision));
    let total = count(&|_| true);
    let rolled_out = updated == replicas && ready == replicas && total == replicas;
    let (current_revision, current) = if rolled_out || current_revision == revision {
        (revision.to_string(), updated)
    } else {
        (
            current_revision.clone(),
            count(&|p| object::label(p, REVISION_LABEL) == Some(current_revision.as_str())),
        )
    };
    let mut status = Map::new();
    status.insert("observedGeneration".into(), json!(object::generation(set)));
    status.insert("replicas".into(), json!(total));
    insert_nonzero(&mut status, "readyReplicas", ready);
    insert_nonzero(&mut status, "currentReplicas", current);
    insert_nonzero(&mut status, "updatedReplicas", updated);
    status.insert("currentRevision".into(), json!(current_revision));
    status.insert("updateRevision".into(), json!(revision));
    status.insert("collisionCount".into(), json!(0));
    status.insert("availableReplicas".into(), json!(available));
    Value::Object(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2024-01-01T00:00:00Z".parse().expect("valid")
    }

    fn set(replicas: i64, image: &str) -> Value {
        json!({
            "metadata": {"name": "db", "namespace": "data", "uid": "s-uid", "generation": 1},
            "spec": {
                "replicas": replicas,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": image}]}},
            },
        })
    }

    fn member(set: &Value, ordinal: i64, ready: bool) -> Value {
        json!({
            "metadata": {"name": format!("db-{ordinal}"), "labels": {REVISION_LABEL: update_revision(set)}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    /// ("create db-1" / "delete db-2" / "create claim data-db-0") for each action but the status.
    fn summary(plan: &Plan) -> Vec<String> {
        plan.actions
            .iter()
            .filter_map(|a| match a {
                Action::Create(Kind::Pod, p) => Some(format!("create {}", object::name(p))),
                Action::Create(Kind::PersistentVolumeClaim, c) => {
                    Some(format!("create claim {}", object::name(c)))
                }
                Action::Delete { name, .. } => Some(format!("delete {name}")),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn pods_come_and_go_in_order() {
        let s = set(3, "postgres");
        let ready = |o| member(&s, o, true);
        let unready = |o| member(&s, o, false);
        let cases: Vec<(i64, Vec<Value>, Vec<&str>)> = vec![
            (3, vec![], vec!["create db-0"]),
            (3, vec![unready(0)], vec![]),
            (3, vec![ready(0)], vec!["create db-1"]),
            (3, vec![ready(0), ready(1), ready(2)], vec![]),
            (1, vec![ready(0), ready(1), ready(2)], vec!["delete db-2"]),
            (1, vec![ready(0), ready(1)], vec!["delete db-1"]),
            (1, vec![unready(0), ready(1)], vec![]),
        ];
        for (replicas, pods, expected) in cases {
            let s = set(replicas, "postgres");
            let refs: Vec<&Value> = pods.iter().collect();
            assert_eq!(
                summary(&plan(&s, &refs, &|_| false, now())),
                expected,
                "x{replicas} {pods:?}"
            );
        }
    }

    #[test]
    fn parallel_sets_create_and_delete_at_once() {
        let mut s = set(3, "postgres");
        s["spec"]["podManagementPolicy"] = json!("Parallel");
        assert_eq!(
            summary(&plan(&s, &[], &|_| false, now())),
            ["create db-0", "create db-1", "create db-2"]
        );
    }

    #[test]
    fn pods_have_stable_identities_and_claims() {
        let mut s = set(1, "postgres");
        s["spec"]["volumeClaimTemplates"] = json!([{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
        let p = plan(&s, &[], &|_| false, now());
        assert_eq!(summary(&p), ["create claim data-db-0", "create db-0"]);
        let Some(Action::Create(Kind::Pod, pod)) = p.actions.get(1) else {
            panic!("expected the pod second: {:?}", p.actions);
        };
        assert_eq!(pod["metadata"]["labels"][POD_NAME_LABEL], "db-0");
        assert_eq!(pod["metadata"]["labels"][POD_INDEX_LABEL], "0");
        assert_eq!(
            pod["metadata"]["labels"][REVISION_LABEL],
            update_revision(&s)
        );
        assert_eq!(pod["spec"]["hostname"], "db-0");
        assert_eq!(pod["spec"]["subdomain"], "db");
        assert_eq!(
            pod["spec"]["volumes"],
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}])
        );
        assert_eq!(
            summary(&plan(&s, &[], &|name| name == "data-db-0", now())),
            ["create db-0"]
        );
    }

    #[test]
    fn a_template_change_replaces_pods_from_the_highest_ordinal() {
        let old = set(2, "postgres:15");
        let new = set(2, "postgres:16");
        let pods = [member(&old, 0, true), member(&old, 1, true)];
        let refs: Vec<&Value> = pods.iter().collect();
        let p = plan(&new, &refs, &|_| false, now());
        assert_eq!(summary(&p), ["delete db-1"]);

        let pods = [member(&old, 0, true), member(&new, 1, true)];
        let refs: Vec<&Value> = pods.iter().collect();
        let mut with_status = new.clone();
        with_status["status"] = json!({"currentRevision": update_revision(&old)});
        let p = plan(&with_status, &refs, &|_| false, now());
        assert_eq!(summary(&p), ["delete db-0"]);
        let Some(Action::UpdateStatus(_, updated)) = p.actions.last() else {
            panic!("expected a status: {:?}", p.actions);
        };
        assert_eq!(
            updated["status"],
            json!({
                "observedGeneration": 1, "replicas": 2, "readyReplicas": 2, "currentReplicas": 1, "updatedReplicas": 1,
                "currentRevision": update_revision(&old), "updateRevision": update_revision(&new),
                "collisionCount": 0, "availableReplicas": 2,
            })
        );
    }
}
