//! The scheduler and the kubelet of the one simulated node.
//!
//! A Pod's status is a pure function of its spec, its start time and the clock, so it can be
//! recomputed at any moment and is written only when it changes. What the containers do is
//! decided by their image names:
//!
//! - `...imagepull...`: the image cannot be pulled (`ImagePullBackOff`);
//! - `...crashloop...` or `...fail...`: the process exits with code 1 right after starting, so
//!   the container crash-loops (`CrashLoopBackOff`, restartCount growing on the kubelet's
//!   doubling back-off) or, when it is not restarted (`restartPolicy: Never`, and every Pod of a
//!   Job), terminates with `Error`;
//! - anything else runs (and Ready after [`SimConfig::pod_ready_delay`]); in a Job Pod it then
//!   exits 0 after running that long again.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::object::{self, add, carry_condition_times, format_time, parse_time};
use super::{Action, Kind, Plan, SimConfig, hash, quantity};
use crate::strategy::scheduling_gated;

/// The one node every Pod runs on.
pub const NODE_NAME: &str = "sandbox-node";
pub const NODE_IP: &str = "172.18.0.2";
/// Allocatable resources of the node. Each Pod is checked on its own (the node is elastic), so
/// only a request no real node could satisfy is refused.
const NODE_CPU_CORES: f64 = 64.0;
const NODE_MEMORY_BYTES: f64 = 256.0 * 1_073_741_824.0;
/// The kubelet caps its crash-loop back-off at 5m0s, 30 times the 10s it starts with.
const BACKOFF_CAP_FACTOR: u32 = 30;

/// The labels of the node, for nodeSelector and node affinity.
pub fn node_labels() -> Map<String, Value> {
    let mut labels = Map::new();
    for (key, value) in [
        ("kubernetes.io/hostname", NODE_NAME),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
    ] {
        labels.insert(key.into(), json!(value));
    }
    labels
}

/// The Node object of the one node, as its kubelet registers it: `kubectl get nodes` shows it
/// Ready, with the capacity the scheduler checks against.
pub fn node(now: Timestamp) -> (Value, Value) {
    let mut labels = node_labels();
    labels.insert("node-role.kubernetes.io/control-plane".into(), json!(""));
    let object = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE_NAME, "labels": labels},
        "spec": {"podCIDR": "10.244.0.0/16", "podCIDRs": ["10.244.0.0/16"]},
    });
    let capacity = json!({
        "cpu": "64",
        "memory": "256Gi",
        "pods": "110",
        "ephemeral-storage": "1Ti",
    });
    let at = format_time(now);
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": kind, "status": status, "lastHeartbeatTime": at, "lastTransitionTime": at,
            "reason": reason, "message": message,
        })
    };
    let status = json!({
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": [{"type": "InternalIP", "address": NODE_IP}, {"type": "Hostname", "address": NODE_NAME}],
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "osImage": "Debian GNU/Linux 12 (bookworm)",
            "kernelVersion": "6.1.0-sandbox",
            "containerRuntimeVersion": "containerd://1.7.18",
            "kubeletVersion": crate::discovery::GIT_VERSION,
            "kubeProxyVersion": crate::discovery::GIT_VERSION,
        },
    });
    (object, status)
}

/// What the kubelet and the scheduler do next with `pod`, and when to look at it again.
pub fn plan(pod: &Value, now: Timestamp, config: &SimConfig, pod_ip: &str) -> Plan {
    if object::is_deleting(pod) {
        return Plan::default();
    }
    match pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        Some(NODE_NAME) => {
            let (status, wake) = kubelet_status(pod, now, config, pod_ip);
            Plan::new(
                Action::status_change(Kind::Pod, pod, status)
                    .into_iter()
                    .collect(),
                wake,
            )
        }
        // Bound to a node that does not exist: no kubelet will ever run it.
        Some(_) => Plan::default(),
        // Held by its scheduling gates (the API server said so when it was created): the
        // scheduler waits until they are removed.
        None if scheduling_gated(&pod["spec"]) => Plan::default(),
        None => match unschedulable_message(&pod["spec"]) {
            Some(message) => {
                let wanted = vec![json!({
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": null,
                    "lastTransitionTime": format_time(now),
                    "reason": "Unschedulable",
                    "message": message,
                })];
                let mut status = json!({
                    "phase": "Pending",
                    "conditions": carry_condition_times(&pod["status"]["conditions"], wanted),
                });
                keep_qos_class(pod, &mut status);
                Plan::new(
                    Action::status_change(Kind::Pod, pod, status)
                        .into_iter()
                        .collect(),
                    None,
                )
            }
            None => {
                let bind = Action::Bind {
                    namespace: object::namespace(pod).to_string(),
                    name: object::name(pod).to_string(),
                };
                Plan::new(vec![bind], None)
            }
        },
    }
}

/// Not finished and not being deleted: a Pod a controller counts as one of its replicas.
pub fn is_active(pod: &Value) -> bool {
    !object::is_deleting(pod)
        && !matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        )
}

fn ready_condition(pod: &Value) -> Option<&Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
}

pub fn is_ready(pod: &Value) -> bool {
    ready_condition(pod).is_some()
}

/// Whether a Pod has been Ready for `min_ready_seconds` (what controllers call available),
/// and, when it is Ready but not yet long enough, when it will be.
pub fn availability(
    pod: &Value,
    min_ready_seconds: i64,
    now: Timestamp,
) -> (bool, Option<Timestamp>) {
    let Some(ready) = ready_condition(pod) else {
        return (false, None);
    };
    if min_ready_seconds <= 0 {
        return (true, None);
    }
    let since = parse_time(&ready["lastTransitionTime"]).unwrap_or(now);
    let available_at = add(since, Duration::from_secs(min_ready_seconds.unsigned_abs()));
    if available_at <= now {
        (true, None)
    } else {
        (false, Some(available_at))
    }
}

/// The API server classified the Pod when it was created; the kubelet reports it unchanged.
fn keep_qos_class(pod: &Value, status: &mut Value) {
    if let Some(class) = pod["status"].get("qosClass") {
        status["qosClass"] = class.clone();
    }
}

/// Why the scheduler cannot place a Pod with this spec on the node, worded as kube-scheduler
/// words its FailedScheduling message; `None` when it fits.
pub fn unschedulable_message(spec: &Value) -> Option<String> {
    if !matches_node(spec) {
        return Some(
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
                .to_string(),
        );
    }
    let mut insufficient = Vec::new();
    for (resource, capacity) in [("cpu", NODE_CPU_CORES), ("memory", NODE_MEMORY_BYTES)] {
        if pod_request(spec, resource) > capacity {
            insufficient.push(format!("1 Insufficient {resource}"));
        }
    }
    (!insufficient.is_empty())
        .then(|| format!("0/1 nodes are available: {}.", insufficient.join(", ")))
}

/// What a container asks for: its request, or its limit when only that is set (the API
/// server defaults requests to limits).
fn container_request(container: &Value, resource: &str) -> f64 {
    let resources = &container["resources"];
    [
        &resources["requests"][resource],
        &resources["limits"][resource],
    ]
    .into_iter()
    .find(|v| !v.is_null())
    .and_then(quantity::parse)
    .unwrap_or(0.0)
}

/// The scheduler's effective request: the larger of the regular containers' sum and the
/// largest init container (init containers run one at a time, before the others).
fn pod_request(spec: &Value, resource: &str) -> f64 {
    let containers = spec["containers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let inits = spec["initContainers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let sum: f64 = containers
        .iter()
        .map(|c| container_request(c, resource))
        .sum();
    inits
        .iter()
        .map(|c| container_request(c, resource))
        .fold(sum, f64::max)
}

pub fn matches_node(spec: &Value) -> bool {
    let labels = node_labels();
    let selector_ok = spec["nodeSelector"].as_object().is_none_or(|selector| {
        selector
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value))
    });
    let required =
        &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    let affinity_ok = match required["nodeSelectorTerms"].as_array() {
        None => true,
        Some(terms) => terms.iter().any(|term| term_matches(term, &labels)),
    };
    selector_ok && affinity_ok
}

/// One nodeSelectorTerm: all its expressions hold. A term with none matches no node.
fn term_matches(term: &Value, labels: &Map<String, Value>) -> bool {
    let expressions = term["matchExpressions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let fields = term["matchFields"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let node_name = json!(NODE_NAME);
    let label_ok = expressions
        .iter()
        .all(|e| requirement_holds(e, labels.get(e["key"].as_str().unwrap_or_default())));
    let field_ok = fields.iter().all(|e| {
        let value = (e["key"] == "metadata.name").then_some(&node_name);
        requirement_holds(e, value)
    });
    label_ok && field_ok
}

fn requirement_holds(expression: &Value, value: Option<&Value>) -> bool {
    let values = expression["values"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let number = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .and_then(|s| s.parse::<i64>().ok())
    };
    let bound = number(values.first());
    match expression["operator"].as_str().unwrap_or_default() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((number(value), bound), (Some(v), Some(b)) if v > b),
        "Lt" => matches!((number(value), bound), (Some(v), Some(b)) if v < b),
        _ => false,
    }
}

/// What an image does when run, decided by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    Runs,
    ExitsWithError,
    CannotBePulled,
}

fn behaviour(image: &str) -> Behaviour {
    if image.contains("imagepull") {
        Behaviour::CannotBePulled
    } else if image.contains("crashloop") || image.contains("fail") {
        Behaviour::ExitsWithError
    } else {
        Behaviour::Runs
    }
}

/// `docker.io/library/nginx:latest` for `nginx`: the image as the container runtime reports it.
pub fn qualified_image(image: &str) -> String {
    let (first, _) = image.split_once('/').unwrap_or(("", image));
    let has_registry = first.contains('.') || first.contains(':') || first == "localhost";
    let mut qualified = match (has_registry, image.contains('/')) {
        (true, _) => image.to_string(),
        (false, true) => format!("docker.io/{image}"),
        (false, false) => format!("docker.io/library/{image}"),
    };
    let last = qualified.rsplit('/').next().unwrap_or_default();
    if !last.contains(':') && !last.contains('@') {
        qualified.push_str(":latest");
    }
    qualified
}

fn image_id(image: &str) -> String {
    let qualified = qualified_image(image);
    let repository = qualified.split(['@']).next().unwrap_or_default();
    let repository = match repository.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => repository,
    };
    format!("{repository}@sha256:{}", hash::hex_id(&[&qualified]))
}

fn container_id(pod: &Value, container: &str, instance: u32) -> String {
    format!(
        "containerd://{}",
        hash::hex_id(&[object::uid(pod), container, &instance.to_string()])
    )
}

/// How Go prints a `time.Duration`: `10s`, `1m20s`, `5m0s`, `100ms`.
pub fn go_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis == 0 {
        return "0s".to_string();
    }
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let hours = millis / 3_600_000;
    let minutes = millis / 60_000 % 60;
    let seconds = millis % 60_000;
    let seconds = if seconds.is_multiple_of(1000) {
        (seconds / 1000).to_string()
    } else {
        format!("{}.{:03}", seconds / 1000, seconds % 1000)
            .trim_end_matches('0')
            .to_string()
    };
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// The crash loop of a container that first crashed at `first_crash`: how many restarts have
/// happened by `now`, when the latest one happened, the back-off the kubelet now waits, and
/// when the next restart is due.
struct CrashLoop {
    restarts: u32,
    last_start: Timestamp,
    backoff: Duration,
    next_restart: Timestamp,
}

fn crash_loop(first_crash: Timestamp, now: Timestamp, base: Duration) -> CrashLoop {
    let base = base.max(Duration::from_millis(1));
    let cap = base.saturating_mul(BACKOFF_CAP_FACTOR);
    let mut restarts = 0u32;
    let mut last_start = first_crash;
    let mut backoff = base;
    // Doubling phase: at most five steps before the cap.
    while backoff < cap && add(last_start, backoff) <= now {
        last_start = add(last_start, backoff);
        restarts += 1;
        backoff = backoff.saturating_mul(2).min(cap);
    }
    if backoff == cap && add(last_start, cap) <= now {
        let elapsed = now
            .duration_since(last_start)
            .as_millis()
            .max(0)
            .unsigned_abs();
        let steps = u32::try_from(elapsed / cap.as_millis()).unwrap_or(u32::MAX);
        last_start = add(last_start, cap * steps);
        restarts = restarts.saturating_add(steps);
    }
    CrashLoop {
        restarts,
        last_start,
        backoff,
        next_restart: add(last_start, backoff),
    }
}

/// One container's observed state at some moment.
struct ContainerView {
    name: String,
    status: Value,
    ready: bool,
    /// Terminated with exit code 0 (an init container that completed).
    completed: bool,
    /// When this view stops being true.
    wake: Option<Timestamp>,
}

/// The moments of a Pod's life that every container shares.
struct Timeline<'a> {
    pod: &'a Value,
    /// When the Pod was bound and the kubelet took it.
    start: Timestamp,
    /// When its containers start: start + pod_ready_delay.
    run: Timestamp,
    now: Timestamp,
    crash_backoff: Duration,
}

impl Timeline<'_> {
    fn waiting(&self, container: &Value, reason: &str, message: Option<String>) -> ContainerView {
        let mut waiting = Map::new();
        waiting.insert("reason".into(), json!(reason));
        if let Some(message) = message {
            waiting.insert("message".into(), json!(message));
        }
        let wake = (self.now < self.run).then_some(self.run);
        self.view(
            container,
            json!({"waiting": waiting}),
            json!({}),
            false,
            0,
            None,
            wake,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn view(
        &self,
        container: &Value,
        state: Value,
        last_state: Value,
        ready: bool,
        restarts: u32,
        id: Option<String>,
        wake: Option<Timestamp>,
    ) -> ContainerView {
        let name = container["name"].as_str().unwrap_or_default().to_string();
        let image = container["image"].as_str().unwrap_or_default();
        let pulled = id.is_some();
        let completed = state["terminated"]["exitCode"] == 0;
        let started = state.get("running").is_some();
        let mut status = Map::new();
        status.insert("name".into(), json!(name));
        status.insert("state".into(), state);
        status.insert("lastState".into(), last_state);
        status.insert("ready".into(), json!(ready));
        status.insert("restartCount".into(), json!(restarts));
        status.insert(
            "image".into(),
            json!(if pulled {
                qualified_image(image)
            } else {
                image.to_string()
            }),
        );
        status.insert(
            "imageID".into(),
            json!(if pulled {
                image_id(image)
            } else {
                String::new()
            }),
        );
        if let Some(id) = id {
            status.insert("containerID".into(), json!(id));
        }
        status.insert("started".into(), json!(started));
        ContainerView {
            name,
            status: Value::Object(status),
            ready,
            completed,
            wake,
        }
    }

    fn terminated(
        &self,
        exit_code: i32,
        started: Timestamp,
        finished: Timestamp,
        id: &str,
    ) -> Value {
        json!({
            "exitCode": exit_code,
            "reason": if exit_code == 0 { "Completed" } else { "Error" },
            "startedAt": format_time(started),
            "finishedAt": format_time(finished),
            "containerID": id,
        })
    }

    /// The state of a container that would start at `self.run`; `restartable` says whether the
    /// kubelet restarts it when it exits, `run_for` how long its process runs before it exits 0
    /// (`None`: a server that runs until stopped).
    fn container(
        &self,
        container: &Value,
        waiting_reason: &str,
        restartable: bool,
        run_for: Option<Duration>,
    ) -> ContainerView {
        if self.now < self.run {
            return self.waiting(container, waiting_reason, None);
        }
        let name = container["name"].as_str().unwrap_or_default();
        let image = container["image"].as_str().unwrap_or_default();
        match behaviour(image) {
            Behaviour::CannotBePulled => self.waiting(
                container,
                "ImagePullBackOff",
                Some(format!("Back-off pulling image {image:?}")),
            ),
            Behaviour::Runs => {
                let id = container_id(self.pod, name, 0);
                let finish = run_for.map(|d| add(self.run, d));
                if finish.is_none_or(|finish| self.now < finish) {
                    let state = json!({"running": {"startedAt": format_time(self.run)}});
                    self.view(container, state, json!({}), true, 0, Some(id), finish)
                } else {
                    let finish = finish.unwrap_or(self.now);
                    let state = json!({"terminated": self.terminated(0, self.run, finish, &id)});
                    self.view(container, state, json!({}), false, 0, Some(id), None)
                }
            }
            Behaviour::ExitsWithError if !restartable => {
                let id = container_id(self.pod, name, 0);
                let state = json!({"terminated": self.terminated(1, self.run, self.run, &id)});
                self.view(container, state, json!({}), false, 0, Some(id), None)
            }
            Behaviour::ExitsWithError => {
                let lp = crash_loop(self.run, self.now, self.crash_backoff);
                let id = container_id(self.pod, name, lp.restarts);
                let message = format!(
                    "back-off {} restarting failed container={name} pod={}_{}({})",
                    go_duration(lp.backoff),
                    object::name(self.pod),
                    object::namespace(self.pod),
                    object::uid(self.pod),
                );
                let state = json!({"waiting": {"reason": "CrashLoopBackOff", "message": message}});
                let last =
                    json!({"terminated": self.terminated(1, lp.last_start, lp.last_start, &id)});
                self.view(
                    container,
                    state,
                    last,
                    false,
                    lp.restarts,
                    Some(id),
                    Some(lp.next_restart),
                )
            }
        }
    }
}

/// The status the kubelet reports for `pod` (bound to this node) at `now`, and when it next
/// changes.
fn kubelet_status(
    pod: &Value,
    now: Timestamp,
    config: &SimConfig,
    pod_ip: &str,
) -> (Value, Option<Timestamp>) {
    let spec = &pod["spec"];
    let start = parse_time(&pod["status"]["startTime"]).unwrap_or(now);
    let runs_to_completion = object::controller_of(pod).is_some_and(|(kind, _, _)| kind == "Job");
    let restart_policy = spec["restartPolicy"].as_str().unwrap_or("Always");
    let restartable = !runs_to_completion && restart_policy != "Never";
    let timeline = Timeline {
        pod,
        start,
        run: add(start, config.pod_ready_delay),
        now,
        crash_backoff: config.crash_backoff,
    };
    let inits = spec["initContainers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let containers = spec["containers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();

    // Init containers run in order; the first that does not complete holds the rest back.
    let mut init_views = Vec::new();
    let mut blocked = false;
    for init in inits {
        let sidecar = init["restartPolicy"] == "Always";
        let view = if blocked {
            timeline.waiting(init, "PodInitializing", None)
        } else {
            let run_for = (!sidecar).then_some(Duration::ZERO);
            timeline.container(init, "PodInitializing", restartable || sidecar, run_for)
        };
        blocked = blocked || !(view.completed || (sidecar && view.ready));
        init_views.push(view);
    }
    let main_waiting = if inits.is_empty() {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let main_views: Vec<ContainerView> = containers
        .iter()
        .map(|c| {
            if blocked {
                timeline.waiting(c, main_waiting, None)
            } else {
                let run_for = runs_to_completion.then_some(config.pod_ready_delay);
                timeline.container(c, main_waiting, restartable, run_for)
            }
        })
        .collect();

    let phase = phase(&init_views, &main_views, restart_policy, runs_to_completion);
    let conditions = conditions(&timeline, &init_views, &main_views, phase);
    let wake = init_views
        .iter()
        .chain(&main_views)
        .filter_map(|v| v.wake)
        .min();

    let ip = if spec["hostNetwork"] == true {
        NODE_IP
    } else {
        pod_ip
    };
    let mut status = Map::new();
    status.insert("phase".into(), json!(phase));
    status.insert(
        "conditions".into(),
        carry_condition_times(&pod["status"]["conditions"], conditions),
    );
    status.insert("hostIP".into(), json!(NODE_IP));
    status.insert("hostIPs".into(), json!([{"ip": NODE_IP}]));
    status.insert("podIP".into(), json!(ip));
    status.insert("podIPs".into(), json!([{"ip": ip}]));
    status.insert("startTime".into(), json!(format_time(start)));
    if !init_views.is_empty() {
        let statuses: Vec<Value> = init_views.iter().map(|v| v.status.clone()).collect();
        status.insert("initContainerStatuses".into(), Value::Array(statuses));
    }
    let statuses: Vec<Value> = main_views.iter().map(|v| v.status.clone()).collect();
    status.insert("containerStatuses".into(), Value::Array(statuses));
    let mut status = Value::Object(status);
    keep_qos_class(pod, &mut status);
    (status, wake)
}

/// The Pod phase from its containers, as the kubelet's `getPhase` decides it.
fn phase(
    inits: &[ContainerView],
    mains: &[ContainerView],
    restart_policy: &str,
    runs_to_completion: bool,
) -> &'static str {
    let state = |v: &ContainerView, key: &str| v.status["state"].get(key).is_some();
    let crashed_before = |v: &ContainerView| v.status["lastState"].get("terminated").is_some();
    let exit_code = |v: &ContainerView| v.status["state"]["terminated"]["exitCode"].as_i64();
    let failed_init = inits.iter().any(|v| {
        exit_code(v).is_some_and(|c| c != 0) || (state(v, "waiting") && crashed_before(v))
    });
    let pending_init = inits
        .iter()
        .any(|v| state(v, "waiting") && !crashed_before(v));
    let running = mains.iter().filter(|v| state(v, "running")).count();
    let waiting = mains
        .iter()
        .filter(|v| state(v, "waiting") && !crashed_before(v))
        .count();
    let stopped = mains
        .iter()
        .filter(|v| exit_code(v).is_some() || (state(v, "waiting") && crashed_before(v)))
        .count();
    let succeeded = mains.iter().filter(|v| exit_code(v) == Some(0)).count();
    let never = runs_to_completion || restart_policy == "Never";
    if failed_init && never {
        return "Failed";
    }
    if pending_init || waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped == 0 {
        return "Pending";
    }
    if !never && restart_policy == "Always" {
        return "Running";
    }
    if stopped == succeeded {
        return "Succeeded";
    }
    if never { "Failed" } else { "Running" }
}

fn condition(
    kind: &str,
    ok: bool,
    at: Timestamp,
    reason: Option<&str>,
    message: Option<String>,
) -> Value {
    let mut condition = Map::new();
    condition.insert("type".into(), json!(kind));
    condition.insert("status".into(), json!(if ok { "True" } else { "False" }));
    condition.insert("lastProbeTime".into(), Value::Null);
    condition.insert("lastTransitionTime".into(), json!(format_time(at)));
    if let Some(reason) = reason {
        condition.insert("reason".into(), json!(reason));
    }
    if let Some(message) = message {
        condition.insert("message".into(), json!(message));
    }
    Value::Object(condition)
}

/// The Pod conditions in the order the kubelet reports them.
fn conditions(
    t: &Timeline,
    inits: &[ContainerView],
    mains: &[ContainerView],
    phase: &str,
) -> Vec<Value> {
    let terminal = matches!(phase, "Succeeded" | "Failed");
    let finished = mains
        .iter()
        .filter_map(|v| parse_time(&v.status["state"]["terminated"]["finishedAt"]))
        .max()
        .unwrap_or(t.now);
    let names = |views: Vec<&ContainerView>| {
        let names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
        format!("[{}]", names.join(" "))
    };

    let incomplete: Vec<&ContainerView> =
        inits.iter().filter(|v| !v.completed && !v.ready).collect();
    let initialized = if phase == "Succeeded" {
        condition("Initialized", true, t.start, Some("PodCompleted"), None)
    } else if incomplete.is_empty() {
        let at = if inits.is_empty() { t.start } else { t.run };
        condition("Initialized", true, at, None, None)
    } else {
        let message = format!("containers with incomplete status: {}", names(incomplete));
        condition(
            "Initialized",
            false,
            t.start,
            Some("ContainersNotInitialized"),
            Some(message),
        )
    };

    let unready: Vec<&ContainerView> = mains.iter().filter(|v| !v.ready).collect();
    let ready = |kind: &str| {
        if phase == "Succeeded" {
            condition(kind, false, finished, Some("PodCompleted"), None)
        } else if unready.is_empty() && !mains.is_empty() {
            condition(kind, true, t.run, None, None)
        } else {
            let at = if terminal { finished } else { t.start };
            let message = format!("containers with unready status: {}", names(unready.clone()));
            condition(kind, false, at, Some("ContainersNotReady"), Some(message))
        }
    };
    let sandbox_at = if terminal { finished } else { t.start };
    vec![
        condition(
            "PodReadyToStartContainers",
            !terminal,
            sandbox_at,
            None,
            None,
        ),
        initialized,
        ready("Ready"),
        ready("ContainersReady"),
        condition("PodScheduled", true, t.start, None, None),
    ]
}

#[cfg(test)]
mod tests;
