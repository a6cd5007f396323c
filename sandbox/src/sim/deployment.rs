//! The Deployment controller: one ReplicaSet per pod template (`<deployment>-<pod-template-hash>`),
//! rolling from the old ones to the new one within maxSurge/maxUnavailable (or all at once for
//! `Recreate`), with the status fields and the Available/Progressing conditions of
//! kube-controller-manager.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::object::{self, add, format_time, insert_nonzero, parse_time};
use super::{Action, Kind, Plan, hash};

pub const TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
const DEFAULT_PROGRESS_DEADLINE_SECONDS: u64 = 600;
const DEFAULT_REVISION_HISTORY_LIMIT: usize = 10;

/// One ReplicaSet as the planner sees it: the object, and its `spec.replicas` after the scaling
/// decided so far.
struct Set<'a> {
    object: &'a Value,
    replicas: i64,
}

impl Set<'_> {
    fn status(&self, field: &str) -> i64 {
        self.object["status"][field].as_i64().unwrap_or(0)
    }

    fn revision(&self) -> i64 {
        revision(self.object)
    }
}

fn revision(rs: &Value) -> i64 {
    object::annotation(rs, REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// What the Deployment controller does for `deployment`, given the ReplicaSets it controls.
pub fn plan(deployment: &Value, replica_sets: &[&Value], now: Timestamp) -> Plan {
    if object::is_deleting(deployment) {
        return Plan::default();
    }
    let template_hash = hash::template_hash(&deployment["spec"]["template"]);
    let desired = object::replicas(deployment);
    let (max_surge, max_unavailable) = fenceposts(deployment, desired);
    let paused = deployment["spec"]["paused"] == true;
    let recreate = deployment["spec"]["strategy"]["type"] == "Recreate";

    let mut olds: Vec<Set> = Vec::new();
    let mut current: Option<Set> = None;
    for rs in replica_sets
        .iter()
        .copied()
        .filter(|rs| !object::is_deleting(rs))
    {
        let set = Set {
            object: rs,
            replicas: object::replicas(rs),
        };
        if object::label(rs, TEMPLATE_HASH_LABEL) == Some(template_hash.as_str()) {
            current = Some(set);
        } else {
            olds.push(set);
        }
    }
    olds.sort_by(|a, b| {
        let key = |s: &Set| {
            (
                s.object["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                object::name(s.object).to_string(),
            )
        };
        key(a).cmp(&key(b))
    });
    let max_old_revision = olds.iter().map(Set::revision).max().unwrap_or(0);

    let mut plan = Plan::default();
    let mut created: Option<Value> = None;
    if paused {
        // A paused Deployment only scales; it starts no rollout.
        if let Some(new) = current
            .as_mut()
            .filter(|_| olds.iter().all(|o| o.replicas == 0))
        {
            new.replicas = desired;
        }
    } else if recreate {
        for old in &mut olds {
            old.replicas = 0;
        }
        let old_pods_running = olds.iter().any(|o| o.status("replicas") > 0);
        if !old_pods_running {
            match current.as_mut() {
                Some(new) => new.replicas = desired,
                None => {
                    created = Some(new_replica_set(
                        deployment,
                        &template_hash,
                        desired,
                        max_old_revision + 1,
                        desired + max_surge,
                    ))
                }
            }
        }
    } else {
        match current.as_mut() {
            None => {
                let others: i64 = olds.iter().map(|o| o.replicas).sum();
                let replicas = (desired + max_surge - others).clamp(0, desired);
                created = Some(new_replica_set(
                    deployment,
                    &template_hash,
                    replicas,
                    max_old_revision + 1,
                    desired + max_surge,
                ));
            }
            Some(new) => {
                let scaled = new_replica_count(
                    new.replicas,
                    olds.iter().map(|o| o.replicas).sum(),
                    desired,
                    max_surge,
                );
                if scaled != new.replicas {
                    new.replicas = scaled;
                } else {
                    scale_down_olds(&mut olds, new, desired - max_unavailable);
                }
            }
        }
    }

    // The writes: a created ReplicaSet, or the scaling of existing ones.
    if let Some(rs) = &created {
        plan.actions
            .push(Action::Create(Kind::ReplicaSet, rs.clone()));
    }
    let max_replicas = desired + max_surge;
    for set in olds.iter().chain(current.iter()) {
        let is_new = current
            .as_ref()
            .is_some_and(|c| std::ptr::eq(c.object, set.object));
        let wanted_revision = if is_new {
            revision(set.object).max(max_old_revision + 1)
        } else {
            revision(set.object)
        };
        if let Some(action) = scale(set, desired, max_replicas, wanted_revision) {
            plan.actions.push(action);
        }
    }
    plan.actions.extend(prune_history(deployment, &olds));

    // The Deployment's own revision annotation follows its newest ReplicaSet; like the
    // deployment controller, it is written with the status (no new generation).
    let new_revision = created.as_ref().map(revision).or_else(|| {
        current
            .as_ref()
            .map(|c| revision(c.object).max(max_old_revision + 1))
    });
    let annotated = new_revision
        .filter(|r| object::annotation(deployment, REVISION) != Some(r.to_string().as_str()))
        .map(|new_revision| {
            let mut annotated = deployment.clone();
            annotated["metadata"]["annotations"][REVISION] = json!(new_revision.to_string());
            annotated
        });

    let new_name = created
        .as_ref()
        .map(|rs| object::name(rs).to_string())
        .or_else(|| current.as_ref().map(|c| object::name(c.object).to_string()));
    let (status, wake) = status(StatusInput {
        deployment,
        olds: &olds,
        current: current.as_ref(),
        new_name: new_name.as_deref(),
        created: created.as_ref().map(object::replicas),
        paused,
        desired,
        max_unavailable,
        now,
    });
    match annotated {
        Some(mut annotated) => {
            annotated["status"] = status;
            plan.actions
                .push(Action::UpdateStatus(Kind::Deployment, annotated));
        }
        None => plan.push(Action::status_change(Kind::Deployment, deployment, status)),
    }
    plan.wake_at(wake);
    plan
}

/// maxSurge and maxUnavailable resolved against `replicas` (surge rounds up, unavailable
/// down; both zero would deadlock, so unavailable becomes 1). Recreate allows neither.
fn fenceposts(deployment: &Value, replicas: i64) -> (i64, i64) {
    let strategy = &deployment["spec"]["strategy"];
    if strategy["type"] == "Recreate" {
        return (0, 0);
    }
    let rolling = &strategy["rollingUpdate"];
    let resolve = |value: &Value, round_up: bool| -> i64 {
        match value {
            Value::Number(n) => n.as_i64().unwrap_or(0),
            Value::String(s) => {
                let percent: i64 = s.trim_end_matches('%').parse().unwrap_or(25);
                let scaled = percent * replicas;
                if round_up {
                    (scaled + 99) / 100
                } else {
                    scaled / 100
                }
            }
            _ => {
                let scaled = 25 * replicas;
                if round_up {
                    (scaled + 99) / 100
                } else {
                    scaled / 100
                }
            }
        }
    };
    let surge = resolve(&rolling["maxSurge"], true);
    let unavailable = resolve(&rolling["maxUnavailable"], false);
    if surge == 0 && unavailable == 0 {
        return (0, 1);
    }
    (surge, unavailable.min(replicas))
}

/// How far the new ReplicaSet may grow now: up to `desired`, keeping every ReplicaSet's replicas
/// within desired + maxSurge.
fn new_replica_count(current: i64, others: i64, desired: i64, max_surge: i64) -> i64 {
    if current >= desired {
        return desired;
    }
    let room = desired + max_surge - (current + others);
    if room <= 0 {
        return current;
    }
    current + room.min(desired - current)
}

/// Scales old ReplicaSets down, oldest first, as far as availability allows: first their
/// unavailable Pods, then available ones while `min_available` Pods stay available.
fn scale_down_olds(olds: &mut [Set], new: &Set, min_available: i64) {
    let all: i64 = olds.iter().map(|o| o.replicas).sum::<i64>() + new.replicas;
    let new_unavailable = new.replicas - new.status("availableReplicas");
    let max_scaled_down = all - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return;
    }
    let mut cleaned = 0;
    for old in olds.iter_mut() {
        let unhealthy = old.replicas - old.status("availableReplicas").min(old.replicas);
        let by = unhealthy.min(max_scaled_down - cleaned);
        if by <= 0 {
            continue;
        }
        old.replicas -= by;
        cleaned += by;
    }
    let available: i64 = olds
        .iter()
        .map(|o| o.status("availableReplicas").min(o.replicas))
        .sum::<i64>()
        + new.status("availableReplicas");
    let mut budget = available - min_available;
    for old in olds.iter_mut() {
        if budget <= 0 {
            break;
        }
        let by = old.replicas.min(budget);
        old.replicas -= by;
        budget -= by;
    }
}

/// The update that sets a ReplicaSet's replicas and the annotations the controller keeps on it,
/// or nothing when they are already so.
fn scale(set: &Set, desired: i64, max_replicas: i64, revision: i64) -> Option<Action> {
    let rs = set.object;
    let unchanged = object::replicas(rs) == set.replicas
        && object::annotation(rs, REVISION) == Some(revision.to_string().as_str())
        && object::annotation(rs, DESIRED_REPLICAS) == Some(desired.to_string().as_str())
        && object::annotation(rs, MAX_REPLICAS) == Some(max_replicas.to_string().as_str());
    if unchanged {
        return None;
    }
    let mut updated = rs.clone();
    updated["spec"]["replicas"] = json!(set.replicas);
    let annotations = &mut updated["metadata"]["annotations"];
    annotations[REVISION] = json!(revision.to_string());
    annotations[DESIRED_REPLICAS] = json!(desired.to_string());
    annotations[MAX_REPLICAS] = json!(max_replicas.to_string());
    Some(Action::Update(Kind::ReplicaSet, updated))
}

/// The ReplicaSet for the Deployment's current template.
fn new_replica_set(
    deployment: &Value,
    template_hash: &str,
    replicas: i64,
    revision: i64,
    max_replicas: i64,
) -> Value {
    let spec = &deployment["spec"];
    let mut template = spec["template"].clone();
    template["metadata"]["labels"][TEMPLATE_HASH_LABEL] = json!(template_hash);
    let mut selector = spec["selector"].clone();
    selector["matchLabels"][TEMPLATE_HASH_LABEL] = json!(template_hash);
    let mut metadata = object::child_metadata(deployment, Kind::Deployment, &json!({}));
    metadata.insert(
        "name".into(),
        json!(format!("{}-{template_hash}", object::name(deployment))),
    );
    metadata.insert("labels".into(), template["metadata"]["labels"].clone());
    metadata.insert(
        "annotations".into(),
        json!({
            DESIRED_REPLICAS: object::replicas(deployment).to_string(),
            MAX_REPLICAS: max_replicas.to_string(),
            REVISION: revision.to_string(),
        }),
    );
    let mut rs_spec = Map::new();
    rs_spec.insert("replicas".into(), json!(replicas));
    if let Some(min_ready) = spec.get("minReadySeconds") {
        rs_spec.insert("minReadySeconds".into(), min_ready.clone());
    }
    rs_spec.insert("selector".into(), selector);
    rs_spec.insert("template".into(), template);
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": metadata, "spec": rs_spec})
}

/// Deletes the oldest fully scaled-down ReplicaSets beyond `revisionHistoryLimit`.
fn prune_history(deployment: &Value, olds: &[Set]) -> Vec<Action> {
    let limit = deployment["spec"]["revisionHistoryLimit"]
        .as_u64()
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT);
    let mut idle: Vec<&Set> = olds
        .iter()
        .filter(|o| o.replicas == 0 && object::replicas(o.object) == 0 && o.status("replicas") == 0)
        .collect();
    idle.sort_by_key(|o| o.revision());
    let surplus = idle.len().saturating_sub(limit);
    idle.into_iter()
        .take(surplus)
        .map(|o| Action::delete(Kind::ReplicaSet, o.object))
        .collect()
}

struct StatusInput<'a> {
    deployment: &'a Value,
    olds: &'a [Set<'a>],
    current: Option<&'a Set<'a>>,
    new_name: Option<&'a str>,
    /// The replicas of the ReplicaSet created by this plan, if any.
    created: Option<i64>,
    paused: bool,
    desired: i64,
    max_unavailable: i64,
    now: Timestamp,
}

fn status(input: StatusInput) -> (Value, Option<Timestamp>) {
    let StatusInput {
        deployment,
        olds,
        current,
        new_name,
        created,
        paused,
        desired,
        max_unavailable,
        now,
    } = input;
    let all = || olds.iter().chain(current);
    let sum = |field: &str| all().map(|s| s.status(field)).sum::<i64>();
    let replicas = sum("replicas");
    let updated = current.map(|c| c.status("replicas")).unwrap_or(0);
    let ready = sum("readyReplicas");
    let available = sum("availableReplicas");
    let spec_total: i64 = all().map(|s| s.replicas).sum::<i64>() + created.unwrap_or(0);
    let unavailable = (spec_total - available).max(0);

    let previous = &deployment["status"];
    let mut conditions: Vec<Value> = previous["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let stamp = format_time(now);
    let condition = |kind: &str, status: &str, reason: &str, message: String| json!({"type": kind, "status": status, "lastUpdateTime": stamp, "lastTransitionTime": stamp, "reason": reason, "message": message});
    if available >= desired - max_unavailable {
        set_condition(
            &mut conditions,
            condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
            ),
        );
    } else {
        set_condition(
            &mut conditions,
            condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
            ),
        );
    }

    let subject = match new_name {
        Some(name) => format!("ReplicaSet {name:?}"),
        None => format!("Deployment {:?}", object::name(deployment)),
    };
    let deadline = deployment["spec"]["progressDeadlineSeconds"]
        .as_u64()
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
    let progressing = conditions
        .iter()
        .find(|c| c["type"] == "Progressing")
        .cloned();
    let reason_of = |c: &Option<Value>| {
        c.as_ref()
            .and_then(|c| c["reason"].as_str().map(str::to_string))
    };
    let mut wake = None;
    if paused {
        if reason_of(&progressing).as_deref() != Some("DeploymentPaused") {
            set_condition(
                &mut conditions,
                condition(
                    "Progressing",
                    "Unknown",
                    "DeploymentPaused",
                    "Deployment is paused".into(),
                ),
            );
        }
    } else if created.is_some() {
        set_condition(
            &mut conditions,
            condition(
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                format!("Created new replica set {:?}", new_name.unwrap_or_default()),
            ),
        );
    } else {
        let settled = replicas == updated
            && reason_of(&progressing).as_deref() == Some("NewReplicaSetAvailable");
        let complete = updated == desired && replicas == desired && available == desired;
        let field = |name: &str| previous[name].as_i64().unwrap_or(0);
        let advanced = updated > field("updatedReplicas")
            || ready > field("readyReplicas")
            || replicas < field("replicas")
            || available > field("availableReplicas");
        if !settled {
            if complete {
                set_condition(
                    &mut conditions,
                    condition(
                        "Progressing",
                        "True",
                        "NewReplicaSetAvailable",
                        format!("{subject} has successfully progressed."),
                    ),
                );
            } else if advanced {
                let mut moved = condition(
                    "Progressing",
                    "True",
                    "ReplicaSetUpdated",
                    format!("{subject} is progressing."),
                );
                if let Some(old) = progressing.as_ref().filter(|c| c["status"] == "True") {
                    moved["lastTransitionTime"] = old["lastTransitionTime"].clone();
                }
                conditions.retain(|c| c["type"] != "Progressing");
                conditions.push(moved);
            } else if let Some(old) = progressing.as_ref().filter(|c| c["status"] == "True") {
                let last_update = parse_time(&old["lastUpdateTime"]).unwrap_or(now);
                let due = add(last_update, Duration::from_secs(deadline));
                if due <= now {
                    set_condition(
                        &mut conditions,
                        condition(
                            "Progressing",
                            "False",
                            "ProgressDeadlineExceeded",
                            format!("{subject} has timed out progressing."),
                        ),
                    );
                } else {
                    wake = Some(due);
                }
            }
        }
    }

    let mut status = Map::new();
    status.insert(
        "observedGeneration".into(),
        json!(object::generation(deployment)),
    );
    insert_nonzero(&mut status, "replicas", replicas);
    insert_nonzero(&mut status, "updatedReplicas", updated);
    insert_nonzero(&mut status, "readyReplicas", ready);
    insert_nonzero(&mut status, "availableReplicas", available);
    insert_nonzero(&mut status, "unavailableReplicas", unavailable);
    status.insert("conditions".into(), Value::Array(conditions));
    (Value::Object(status), wake)
}

/// `SetDeploymentCondition`: an unchanged status and reason keep the condition as it is;
/// otherwise it moves to the end, keeping lastTransitionTime while the status holds.
fn set_condition(conditions: &mut Vec<Value>, mut wanted: Value) {
    if let Some(current) = conditions.iter().find(|c| c["type"] == wanted["type"]) {
        if current["status"] == wanted["status"] && current["reason"] == wanted["reason"] {
            return;
        }
        if current["status"] == wanted["status"] {
            wanted["lastTransitionTime"] = current["lastTransitionTime"].clone();
        }
    }
    conditions.retain(|c| c["type"] != wanted["type"]);
    conditions.push(wanted);
}

#[cfg(test)]
mod tests;
