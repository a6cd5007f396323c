use super::*;

const START: &str = "2024-01-01T00:00:00Z";

fn at(seconds: i64) -> Timestamp {
    let start: Timestamp = START.parse().expect("valid time");
    add(start, Duration::from_secs(seconds.unsigned_abs()))
}

fn config(ready_delay_secs: u64) -> SimConfig {
    SimConfig {
        pod_ready_delay: Duration::from_secs(ready_delay_secs),
        crash_backoff: Duration::from_secs(10),
        ..SimConfig::default()
    }
}

fn pod(containers: Value) -> Value {
    json!({
        "metadata": {"name": "web-abcde", "namespace": "default", "uid": "uid-1"},
        "spec": {"nodeName": NODE_NAME, "containers": containers},
        "status": {"phase": "Pending", "qosClass": "BestEffort", "startTime": START},
    })
}

fn job_pod(image: &str) -> Value {
    let mut pod = pod(json!([{"name": "task", "image": image}]));
    pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j1", "controller": true}]);
    pod["spec"]["restartPolicy"] = json!("Never");
    pod
}

/// The status written for `pod` at `now`, and the next wake-up.
fn status(pod: &Value, now: Timestamp, config: &SimConfig) -> (Value, Option<Timestamp>) {
    let Plan { actions, wake } = plan(pod, now, config, "10.244.0.7");
    match actions.as_slice() {
        [Action::UpdateStatus(Kind::Pod, updated)] => (updated["status"].clone(), wake),
        other => panic!("expected one status update, got {other:?}"),
    }
}

fn condition_of<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or_else(|| panic!("no {kind} condition in {status}"))
}

#[test]
fn scheduling() {
    let fits = json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]});
    let too_much_cpu =
        json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "100"}}}]});
    let limit_only = json!({"containers": [{"name": "a", "resources": {"limits": {"cpu": "65"}}}]});
    let both = json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1000", "memory": "1Pi"}}}]});
    let giant = json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "99999999999999999999999"}}}]});
    let split = json!({"containers": [
        {"name": "a", "resources": {"requests": {"cpu": "40"}}},
        {"name": "b", "resources": {"requests": {"cpu": "40"}}},
    ]});
    let init_big = json!({"initContainers": [{"name": "i", "resources": {"requests": {"cpu": "70"}}}], "containers": [{"name": "a"}]});
    let selector_ok =
        json!({"nodeSelector": {"kubernetes.io/os": "linux"}, "containers": [{"name": "a"}]});
    let selector_bad = json!({"nodeSelector": {"disktype": "ssd"}, "containers": [{"name": "a"}]});
    let affinity_ok = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE_NAME]}]}
    ]}}}, "containers": [{"name": "a"}]});
    let affinity_bad = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}
    ]}}}, "containers": [{"name": "a"}]});
    let cpu = Some("0/1 nodes are available: 1 Insufficient cpu.".to_string());
    let affinity = Some(
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.".to_string(),
    );
    let cases = [
        (fits, None),
        (too_much_cpu, cpu.clone()),
        (limit_only, cpu.clone()),
        (
            both,
            Some("0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.".to_string()),
        ),
        (giant, cpu.clone()),
        (split, cpu.clone()),
        (init_big, cpu),
        (selector_ok, None),
        (selector_bad, affinity.clone()),
        (affinity_ok, None),
        (affinity_bad, affinity),
    ];
    for (spec, expected) in cases {
        assert_eq!(unschedulable_message(&spec), expected, "{spec}");
    }
}

#[test]
fn a_gated_pod_waits_for_its_gates_to_go() {
    let mut gated = pod(json!([{"name": "a", "image": "nginx"}]));
    gated["spec"].as_object_mut().map(|s| s.remove("nodeName"));
    gated["spec"]["schedulingGates"] = json!([{"name": "example.com/hold"}]);
    // Not even marked unschedulable: the API server said why it waits when it was created.
    gated["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "128"}});
    let plan_now = |pod: &Value| plan(pod, at(0), &config(0), "10.244.0.7");
    assert_eq!(plan_now(&gated).actions.len(), 0);

    gated["spec"]["containers"][0]["resources"] = json!({});
    gated["spec"]["schedulingGates"] = json!([]);
    match plan_now(&gated).actions.as_slice() {
        [Action::Bind { namespace, name }] => assert_eq!(
            (namespace.as_str(), name.as_str()),
            ("default", "web-abcde")
        ),
        other => panic!("expected a bind once the gates are gone, got {other:?}"),
    }
}

#[test]
fn an_unbound_pod_is_bound_or_marked_unschedulable() {
    let mut unbound = pod(json!([{"name": "a", "image": "nginx"}]));
    unbound["spec"]
        .as_object_mut()
        .map(|s| s.remove("nodeName"));
    unbound["status"] = json!({"phase": "Pending", "qosClass": "Burstable"});
    let actions = plan(&unbound, at(0), &config(0), "10.244.0.7").actions;
    match actions.as_slice() {
        [Action::Bind { namespace, name }] => assert_eq!(
            (namespace.as_str(), name.as_str()),
            ("default", "web-abcde")
        ),
        other => panic!("expected a bind, got {other:?}"),
    }

    unbound["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "128"}});
    let (status, wake) = status(&unbound, at(0), &config(0));
    assert_eq!(wake, None);
    assert_eq!(status["phase"], "Pending");
    assert_eq!(
        status["conditions"],
        json!([{
            "type": "PodScheduled", "status": "False", "lastProbeTime": null,
            "lastTransitionTime": START, "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 Insufficient cpu.",
        }])
    );
    assert_eq!(status["qosClass"], "Burstable");
    assert!(status.get("containerStatuses").is_none());

    let mut elsewhere = unbound.clone();
    elsewhere["spec"]["nodeName"] = json!("another-node");
    assert_eq!(
        plan(&elsewhere, at(0), &config(0), "10.244.0.7"),
        Plan::default()
    );
}

#[test]
fn a_running_pod_is_ready_with_every_field_a_kubelet_reports() {
    let (status, wake) = status(
        &pod(json!([{"name": "web", "image": "nginx:1.27"}])),
        at(0),
        &config(0),
    );
    assert_eq!(wake, None);
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["podIP"], "10.244.0.7");
    assert_eq!(status["podIPs"], json!([{"ip": "10.244.0.7"}]));
    assert_eq!(status["hostIP"], NODE_IP);
    assert_eq!(status["startTime"], START);
    assert_eq!(status["qosClass"], "BestEffort");
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["type"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        types,
        [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled"
        ]
    );
    assert!(
        status["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().all(|c| c["status"] == "True"))
    );
    let container = &status["containerStatuses"][0];
    assert_eq!(container["name"], "web");
    assert_eq!(container["ready"], true);
    assert_eq!(container["started"], true);
    assert_eq!(container["restartCount"], 0);
    assert_eq!(container["state"], json!({"running": {"startedAt": START}}));
    assert_eq!(container["image"], "docker.io/library/nginx:1.27");
    assert!(
        container["imageID"]
            .as_str()
            .is_some_and(|id| id.starts_with("docker.io/library/nginx@sha256:"))
    );
    assert!(
        container["containerID"]
            .as_str()
            .is_some_and(|id| id.starts_with("containerd://"))
    );
}

#[test]
fn a_pod_is_pending_until_the_ready_delay_has_passed() {
    let p = pod(json!([{"name": "web", "image": "nginx"}]));
    let (status, wake) = status(&p, at(1), &config(5));
    assert_eq!(wake, Some(at(5)));
    assert_eq!(status["phase"], "Pending");
    assert_eq!(
        status["containerStatuses"][0]["state"],
        json!({"waiting": {"reason": "ContainerCreating"}})
    );
    assert_eq!(status["containerStatuses"][0]["imageID"], "");
    let ready = condition_of(&status, "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "ContainersNotReady");
    assert_eq!(ready["message"], "containers with unready status: [web]");

    let (later, wake) = super::kubelet_status(&p, at(6), &config(5), "10.244.0.7");
    assert_eq!(wake, None);
    assert_eq!(later["phase"], "Running");
    assert_eq!(
        condition_of(&later, "Ready")["lastTransitionTime"],
        format_time(at(5))
    );
}

#[test]
fn a_crashing_container_loops_with_a_doubling_back_off() {
    let p = pod(json!([{"name": "app", "image": "example/crashloop:1"}]));
    // (seconds since start, restarts, back-off shown, next restart)
    let cases = [
        (0, 0, "10s", 10),
        (9, 0, "10s", 10),
        (10, 1, "20s", 30),
        (30, 2, "40s", 70),
        (70, 3, "1m20s", 150),
        (150, 4, "2m40s", 310),
        (310, 5, "5m0s", 610),
        (310 + 3 * 300 + 1, 8, "5m0s", 310 + 4 * 300),
    ];
    for (seconds, restarts, backoff, next) in cases {
        let (status, wake) = status(&p, at(seconds), &config(0));
        let container = &status["containerStatuses"][0];
        assert_eq!(status["phase"], "Running", "at {seconds}s");
        assert_eq!(container["restartCount"], restarts, "at {seconds}s");
        assert_eq!(
            container["state"]["waiting"],
            json!({
                "reason": "CrashLoopBackOff",
                "message": format!("back-off {backoff} restarting failed container=app pod=web-abcde_default(uid-1)"),
            }),
            "at {seconds}s"
        );
        assert_eq!(container["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(container["lastState"]["terminated"]["reason"], "Error");
        assert_eq!(container["ready"], false);
        assert_eq!(wake, Some(at(next)), "at {seconds}s");
    }
}

#[test]
fn an_image_that_cannot_be_pulled_backs_off() {
    let (status, wake) = status(
        &pod(json!([{"name": "app", "image": "registry.example/imagepull:2"}])),
        at(3),
        &config(0),
    );
    assert_eq!(wake, None);
    assert_eq!(status["phase"], "Pending");
    assert_eq!(
        status["containerStatuses"][0]["state"],
        json!({"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"registry.example/imagepull:2\""}})
    );
    assert_eq!(
        status["containerStatuses"][0]["image"],
        "registry.example/imagepull:2"
    );
}

#[test]
fn job_pods_run_to_completion_or_fail() {
    let (running, wake) = status(&job_pod("busybox"), at(3), &config(2));
    assert_eq!(running["phase"], "Running");
    assert_eq!(wake, Some(at(4)));

    let (done, wake) = status(&job_pod("busybox"), at(4), &config(2));
    assert_eq!(wake, None);
    assert_eq!(done["phase"], "Succeeded");
    let terminated = &done["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 0);
    assert_eq!(terminated["reason"], "Completed");
    assert_eq!(terminated["finishedAt"], format_time(at(4)));
    assert_eq!(condition_of(&done, "Ready")["reason"], "PodCompleted");
    assert_eq!(
        condition_of(&done, "PodReadyToStartContainers")["status"],
        "False"
    );

    for image in ["busybox-fail", "crashloop"] {
        let (failed, _) = status(&job_pod(image), at(0), &config(0));
        assert_eq!(failed["phase"], "Failed", "{image}");
        let terminated = &failed["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(terminated["exitCode"], 1);
        assert_eq!(terminated["reason"], "Error");
    }
}

#[test]
fn restart_policy_never_leaves_a_failed_bare_pod() {
    let mut p = pod(json!([{"name": "a", "image": "crashloop"}]));
    p["spec"]["restartPolicy"] = json!("Never");
    let (status, wake) = status(&p, at(0), &config(0));
    assert_eq!(status["phase"], "Failed");
    assert_eq!(wake, None);
}

#[test]
fn a_failing_init_container_holds_the_pod_back() {
    let mut p = pod(json!([{"name": "app", "image": "nginx"}]));
    p["spec"]["initContainers"] = json!([
        {"name": "migrate", "image": "tools"},
        {"name": "seed", "image": "crashloop"},
    ]);
    let (status, _) = status(&p, at(0), &config(0));
    assert_eq!(status["phase"], "Pending");
    assert_eq!(
        status["initContainerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    assert_eq!(
        status["initContainerStatuses"][1]["state"]["waiting"]["reason"],
        "CrashLoopBackOff"
    );
    assert_eq!(
        status["containerStatuses"][0]["state"],
        json!({"waiting": {"reason": "PodInitializing"}})
    );
    let initialized = condition_of(&status, "Initialized");
    assert_eq!(initialized["status"], "False");
    assert_eq!(
        initialized["message"],
        "containers with incomplete status: [seed]"
    );

    p["spec"]["initContainers"][1]["image"] = json!("tools");
    let (status, _) = super::kubelet_status(&p, at(0), &config(0), "10.244.0.7");
    assert_eq!(status["phase"], "Running");
    assert_eq!(condition_of(&status, "Initialized")["status"], "True");
}

#[test]
fn one_crashing_container_of_two_keeps_the_pod_running_but_unready() {
    let p = pod(json!([{"name": "web", "image": "nginx"}, {"name": "side", "image": "crashloop"}]));
    let (status, _) = status(&p, at(0), &config(0));
    assert_eq!(status["phase"], "Running");
    assert_eq!(
        condition_of(&status, "Ready")["message"],
        "containers with unready status: [side]"
    );
    assert_eq!(condition_of(&status, "ContainersReady")["status"], "False");
}

#[test]
fn a_settled_pod_needs_no_write_and_a_deleting_one_is_left_alone() {
    let p = pod(json!([{"name": "web", "image": "nginx"}]));
    let (status, _) = status(&p, at(0), &config(0));
    let mut settled = p.clone();
    settled["status"] = status;
    assert_eq!(
        plan(&settled, at(100), &config(0), "10.244.0.7"),
        Plan::default()
    );

    let mut deleting = p;
    deleting["metadata"]["deletionTimestamp"] = json!(START);
    assert_eq!(
        plan(&deleting, at(0), &config(0), "10.244.0.7"),
        Plan::default()
    );
}

#[test]
fn host_network_pods_take_the_node_ip() {
    let mut p = pod(json!([{"name": "web", "image": "nginx"}]));
    p["spec"]["hostNetwork"] = json!(true);
    let (status, _) = status(&p, at(0), &config(0));
    assert_eq!(status["podIP"], NODE_IP);
}

#[test]
fn images_are_reported_fully_qualified() {
    let cases = [
        ("nginx", "docker.io/library/nginx:latest"),
        ("nginx:1.27", "docker.io/library/nginx:1.27"),
        ("bitnami/redis", "docker.io/bitnami/redis:latest"),
        ("ghcr.io/org/app:v1", "ghcr.io/org/app:v1"),
        ("localhost:5000/app", "localhost:5000/app:latest"),
        ("nginx@sha256:abc", "docker.io/library/nginx@sha256:abc"),
    ];
    for (image, expected) in cases {
        assert_eq!(qualified_image(image), expected, "{image}");
    }
    assert!(image_id("nginx:1.27").starts_with("docker.io/library/nginx@sha256:"));
    assert!(image_id("localhost:5000/app").starts_with("localhost:5000/app@sha256:"));
}

#[test]
fn durations_print_like_go() {
    let cases = [
        (Duration::from_secs(10), "10s"),
        (Duration::from_secs(80), "1m20s"),
        (Duration::from_secs(300), "5m0s"),
        (Duration::from_secs(3700), "1h1m40s"),
        (Duration::from_millis(100), "100ms"),
        (Duration::from_millis(1500), "1.5s"),
        (Duration::ZERO, "0s"),
    ];
    for (duration, expected) in cases {
        assert_eq!(go_duration(duration), expected);
    }
}
