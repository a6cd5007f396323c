use super::*;

fn now() -> Timestamp {
    "2024-01-01T01:00:00Z".parse().expect("valid")
}

fn deployment(replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "uid": "d-uid", "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": image}]}},
        },
    })
}

fn hash_of(deployment: &Value) -> String {
    hash::template_hash(&deployment["spec"]["template"])
}

/// A ReplicaSet of `deployment` for the template with `image`, at `revision`.
fn replica_set(image: &str, revision: i64, replicas: i64, available: i64, created: &str) -> Value {
    let hash = hash_of(&deployment(1, image));
    json!({
        "metadata": {
            "name": format!("web-{hash}"), "namespace": "default", "uid": format!("rs-{revision}"),
            "creationTimestamp": created,
            "labels": {"app": "web", "pod-template-hash": hash},
            "annotations": {REVISION: revision.to_string()},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d-uid", "controller": true}],
        },
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas, "readyReplicas": available, "availableReplicas": available},
    })
}

fn created(plan: &Plan) -> Vec<&Value> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Create(Kind::ReplicaSet, rs) => Some(rs),
            _ => None,
        })
        .collect()
}

/// (ReplicaSet name, replicas) of every scaling update.
fn scaled(plan: &Plan) -> Vec<(String, i64)> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Update(Kind::ReplicaSet, rs) => {
                Some((object::name(rs).to_string(), object::replicas(rs)))
            }
            _ => None,
        })
        .collect()
}

fn new_status(plan: &Plan) -> Value {
    plan.actions
        .iter()
        .find_map(|a| match a {
            Action::UpdateStatus(Kind::Deployment, d) => Some(d["status"].clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no status update in {:?}", plan.actions))
}

fn condition(status: &Value, kind: &str) -> (String, String, String) {
    let c = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or_else(|| panic!("no {kind} in {status}"));
    let text = |f: &str| c[f].as_str().unwrap_or_default().to_string();
    (text("status"), text("reason"), text("message"))
}

#[test]
fn a_new_deployment_gets_its_replica_set() {
    let d = deployment(3, "nginx:1");
    let hash = hash_of(&d);
    let plan = plan(&d, &[], now());
    let rs = created(&plan);
    assert_eq!(rs.len(), 1);
    let rs = rs[0];
    assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(
        rs["metadata"]["labels"],
        json!({"app": "web", "pod-template-hash": hash})
    );
    assert_eq!(rs["metadata"]["annotations"][REVISION], "1");
    assert_eq!(
        rs["metadata"]["ownerReferences"],
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d-uid", "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(rs["spec"]["replicas"], 3);
    assert_eq!(
        rs["spec"]["selector"],
        json!({"matchLabels": {"app": "web", "pod-template-hash": hash}})
    );
    assert_eq!(
        rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"],
        hash
    );

    // Written with the status, as the deployment controller does (no new generation).
    let annotated = plan.actions.iter().find_map(|a| match a {
        Action::UpdateStatus(Kind::Deployment, d) => Some(d),
        _ => None,
    });
    assert_eq!(
        annotated.map(|d| d["metadata"]["annotations"][REVISION].clone()),
        Some(json!("1"))
    );

    let status = new_status(&plan);
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["unavailableReplicas"], 3);
    assert_eq!(
        condition(&status, "Available"),
        (
            "False".into(),
            "MinimumReplicasUnavailable".into(),
            "Deployment does not have minimum availability.".into()
        )
    );
    assert_eq!(
        condition(&status, "Progressing"),
        (
            "True".into(),
            "NewReplicaSetCreated".into(),
            format!("Created new replica set \"web-{hash}\"")
        )
    );
}

#[test]
fn a_rolled_out_deployment_is_available_and_complete() {
    let mut d = deployment(3, "nginx:1");
    d["metadata"]["annotations"] = json!({REVISION: "1"});
    let rs = replica_set("nginx:1", 1, 3, 3, "2024-01-01T00:00:00Z");
    let plan = plan(&d, &[&rs], now());
    assert!(created(&plan).is_empty());
    assert!(scaled(&plan).iter().all(|(_, r)| *r == 3));
    let status = new_status(&plan);
    assert_eq!(status["replicas"], 3);
    assert_eq!(status["updatedReplicas"], 3);
    assert_eq!(status["readyReplicas"], 3);
    assert_eq!(status["availableReplicas"], 3);
    assert!(status.get("unavailableReplicas").is_none());
    assert_eq!(
        condition(&status, "Available").1,
        "MinimumReplicasAvailable"
    );
    assert_eq!(
        condition(&status, "Progressing"),
        (
            "True".into(),
            "NewReplicaSetAvailable".into(),
            format!(
                "ReplicaSet \"{}\" has successfully progressed.",
                object::name(&rs)
            )
        )
    );
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["type"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(types, ["Available", "Progressing"]);
}

#[test]
fn scaling_and_rolling_updates_move_replicas_between_replica_sets() {
    let old = |replicas, available| {
        replica_set("nginx:1", 1, replicas, available, "2024-01-01T00:00:00Z")
    };
    let new = |replicas, available| {
        replica_set("nginx:2", 2, replicas, available, "2024-01-01T00:30:00Z")
    };
    let old_name = object::name(&old(0, 0)).to_string();
    let new_name = object::name(&new(0, 0)).to_string();
    // (deployment image, replicas, replica sets, created with replicas, scaled)
    type Case<'a> = (&'a str, i64, Vec<Value>, Option<i64>, Vec<(String, i64)>);
    let cases: Vec<Case> = vec![
        // Scale up in place.
        (
            "nginx:1",
            5,
            vec![old(3, 3)],
            None,
            vec![(old_name.clone(), 5)],
        ),
        // Scale down in place.
        (
            "nginx:1",
            1,
            vec![old(3, 3)],
            None,
            vec![(old_name.clone(), 1)],
        ),
        // A template change creates the new ReplicaSet within maxSurge (ceil(25% of 3) = 1).
        ("nginx:2", 3, vec![old(3, 3)], Some(1), vec![]),
        // The new Pod is available: one old Pod may go (maxUnavailable floor(25% of 3) = 0).
        (
            "nginx:2",
            3,
            vec![old(3, 3), new(1, 1)],
            None,
            vec![(old_name.clone(), 2)],
        ),
        // Room again under maxSurge: the new ReplicaSet grows.
        (
            "nginx:2",
            3,
            vec![old(2, 2), new(1, 1)],
            None,
            vec![(new_name.clone(), 2)],
        ),
        // The new Pods are not available yet: nothing more moves.
        ("nginx:2", 3, vec![old(2, 2), new(2, 1)], None, vec![]),
        // The end of the rollout.
        (
            "nginx:2",
            3,
            vec![old(1, 1), new(3, 3)],
            None,
            vec![(old_name.clone(), 0)],
        ),
        // Old Pods that are not available go first, without waiting.
        ("nginx:2", 3, vec![old(3, 0), new(1, 0)], None, vec![]),
        (
            "nginx:2",
            3,
            vec![old(3, 0), new(4, 0)],
            None,
            vec![(new_name.clone(), 3)],
        ),
        // Nothing is available on either side: with maxUnavailable 0 the rollout waits.
        ("nginx:2", 3, vec![old(3, 0), new(3, 0)], None, vec![]),
        (
            "nginx:2",
            3,
            vec![old(3, 0), new(3, 3)],
            None,
            vec![(old_name.clone(), 0)],
        ),
    ];
    for (image, replicas, sets, created_replicas, expected) in cases {
        let mut d = deployment(replicas, image);
        d["metadata"]["annotations"] =
            json!({REVISION: if image == "nginx:1" { "1" } else { "2" }});
        let refs: Vec<&Value> = sets.iter().collect();
        let plan = plan(&d, &refs, now());
        let label = format!(
            "{image} x{replicas} over {:?}",
            sets.iter()
                .map(|s| (object::name(s), object::replicas(s)))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            created(&plan).first().map(|rs| object::replicas(rs)),
            created_replicas,
            "{label}"
        );
        let changed: Vec<(String, i64)> = scaled(&plan)
            .into_iter()
            .filter(|(name, r)| {
                sets.iter()
                    .any(|s| object::name(s) == name && object::replicas(s) != *r)
            })
            .collect();
        assert_eq!(changed, expected, "{label}");
    }
}

#[test]
fn a_template_change_bumps_the_revision() {
    let mut d = deployment(3, "nginx:2");
    d["metadata"]["annotations"] = json!({REVISION: "1"});
    let old = replica_set("nginx:1", 1, 3, 3, "2024-01-01T00:00:00Z");
    let plan = plan(&d, &[&old], now());
    assert_eq!(created(&plan)[0]["metadata"]["annotations"][REVISION], "2");
    let status = new_status(&plan);
    assert_eq!(condition(&status, "Progressing").1, "NewReplicaSetCreated");
    assert_eq!(
        condition(&status, "Available").1,
        "MinimumReplicasAvailable"
    );

    // Rolling back to the first template reuses its ReplicaSet under a new revision.
    let mut back = deployment(3, "nginx:1");
    back["metadata"]["annotations"] = json!({REVISION: "2"});
    let newer = replica_set("nginx:2", 2, 3, 3, "2024-01-01T00:30:00Z");
    let old = replica_set("nginx:1", 1, 0, 0, "2024-01-01T00:00:00Z");
    let plan = super::plan(&back, &[&old, &newer], now());
    let revived = plan.actions.iter().find_map(|a| match a {
        Action::Update(Kind::ReplicaSet, rs) if object::name(rs) == object::name(&old) => Some(rs),
        _ => None,
    });
    assert_eq!(
        revived.map(|rs| rs["metadata"]["annotations"][REVISION].clone()),
        Some(json!("3"))
    );
}

#[test]
fn recreate_stops_old_pods_before_starting_new_ones() {
    let mut d = deployment(2, "nginx:2");
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    let old = replica_set("nginx:1", 1, 2, 2, "2024-01-01T00:00:00Z");
    let plan = plan(&d, &[&old], now());
    assert!(created(&plan).is_empty());
    assert_eq!(
        scaled(&plan)
            .iter()
            .find(|(n, _)| n == object::name(&old))
            .map(|s| s.1),
        Some(0)
    );

    let mut gone = replica_set("nginx:1", 1, 0, 0, "2024-01-01T00:00:00Z");
    gone["status"]["replicas"] = json!(0);
    let plan = super::plan(&d, &[&gone], now());
    assert_eq!(
        created(&plan).first().map(|rs| object::replicas(rs)),
        Some(2)
    );
}

#[test]
fn a_paused_deployment_starts_no_rollout() {
    let mut d = deployment(3, "nginx:2");
    d["spec"]["paused"] = json!(true);
    let old = replica_set("nginx:1", 1, 3, 3, "2024-01-01T00:00:00Z");
    let plan = plan(&d, &[&old], now());
    assert!(created(&plan).is_empty());
    assert_eq!(
        condition(&new_status(&plan), "Progressing"),
        (
            "Unknown".into(),
            "DeploymentPaused".into(),
            "Deployment is paused".into()
        )
    );
}

#[test]
fn old_replica_sets_beyond_the_history_limit_are_deleted() {
    let mut d = deployment(1, "nginx:new");
    d["spec"]["revisionHistoryLimit"] = json!(2);
    let mut sets: Vec<Value> = (1..=4)
        .map(|r| {
            let mut rs = replica_set(
                &format!("nginx:{r}"),
                r,
                0,
                0,
                &format!("2024-01-01T00:0{r}:00Z"),
            );
            rs["status"]["replicas"] = json!(0);
            rs
        })
        .collect();
    sets.push(replica_set("nginx:new", 5, 1, 1, "2024-01-01T00:09:00Z"));
    let refs: Vec<&Value> = sets.iter().collect();
    let plan = plan(&d, &refs, now());
    let deleted: Vec<&str> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Delete { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, [object::name(&sets[0]), object::name(&sets[1])]);
}

#[test]
fn a_stalled_rollout_exceeds_its_progress_deadline() {
    let mut d = deployment(1, "nginx:2");
    d["metadata"]["annotations"] = json!({REVISION: "1"});
    let rs = replica_set("nginx:2", 1, 1, 0, "2024-01-01T00:00:00Z");
    let stalled_since = |minutes_ago: i64| {
        let at = now()
            .checked_sub(jiff::SignedDuration::from_mins(minutes_ago))
            .expect("in range");
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1, "conditions": [
            {"type": "Available", "status": "False", "lastUpdateTime": format_time(at), "lastTransitionTime": format_time(at), "reason": "MinimumReplicasUnavailable", "message": "Deployment does not have minimum availability."},
            {"type": "Progressing", "status": "True", "lastUpdateTime": format_time(at), "lastTransitionTime": format_time(at), "reason": "ReplicaSetUpdated", "message": "x"},
        ]})
    };
    d["status"] = stalled_since(11);
    let plan = plan(&d, &[&rs], now());
    assert_eq!(
        condition(&new_status(&plan), "Progressing"),
        (
            "False".into(),
            "ProgressDeadlineExceeded".into(),
            format!(
                "ReplicaSet \"{}\" has timed out progressing.",
                object::name(&rs)
            )
        )
    );

    d["status"] = stalled_since(4);
    let plan = super::plan(&d, &[&rs], now());
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::UpdateStatus(..))),
        "{:?}",
        plan.actions
    );
    assert_eq!(
        plan.wake,
        now().checked_add(jiff::SignedDuration::from_mins(6)).ok()
    );
}

#[test]
fn fenceposts_resolve_like_the_controller() {
    let cases = [
        (json!({}), 1, (1, 0)),
        (json!({}), 4, (1, 1)),
        (json!({}), 10, (3, 2)),
        (
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}),
            3,
            (0, 1),
        ),
        (
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 2}}),
            3,
            (2, 2),
        ),
        (json!({"type": "Recreate"}), 3, (0, 0)),
    ];
    for (strategy, replicas, expected) in cases {
        let mut d = deployment(replicas, "nginx");
        d["spec"]["strategy"] = strategy.clone();
        assert_eq!(fenceposts(&d, replicas), expected, "{strategy} x{replicas}");
    }
}
