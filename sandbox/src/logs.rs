//! Container logs of the simulated node, as `GET .../pods/{name}/log` returns them.
//!
//! Nothing is stored: a container instance's log is a deterministic function of its start (and
//! end) in the Pod status, so it is the same on every read. An instance writes
//!
//! ```text
//! 2024-01-01T00:00:00Z web-7d9c-x2x4z/web started image nginx:1.27
//! 2024-01-01T00:00:10Z web-7d9c-x2x4z/web heartbeat 1
//! 2024-01-01T00:00:20Z web-7d9c-x2x4z/web heartbeat 2
//! ```
//!
//! and, when it ended, `completed` (exit code 0) or `fatal: exiting with code 1`. Which
//! instance is read, and the errors, follow kube-apiserver and the kubelet.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use crate::api_error::ApiError;
use crate::sim::object::{add, format_time, parse_time};
use crate::store::Store;

/// How often a running container writes a line.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// The most lines one read returns (the newest), like a kubelet's rotated log.
const MAX_LINES: u64 = 10_000;

/// The log of a container of a Pod: the current instance, or the previous (terminated) one.
/// `container` may be omitted for a Pod with one container; `tail_lines` keeps the last lines.
pub fn read(
    store: &Store,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    previous: bool,
    tail_lines: Option<usize>,
) -> Result<String, ApiError> {
    let pods = store
        .resource_type("", "Pod")
        .ok_or_else(|| ApiError::internal("pods are not served"))?;
    let object = store.get(&pods, Some(namespace), pod)?;
    render(&object, container, previous, tail_lines, Timestamp::now())
}

fn container_names(pod: &Value) -> Vec<&str> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|f| {
            pod["spec"][*f]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
        })
        .filter_map(|c| c["name"].as_str())
        .collect()
}

/// kube-apiserver's choice of container: the named one, else the only one.
fn choose_container<'a>(pod: &'a Value, container: Option<&'a str>) -> Result<&'a str, ApiError> {
    let pod_name = crate::meta::name(pod);
    let names = container_names(pod);
    match container.filter(|c| !c.is_empty()) {
        Some(name) if names.contains(&name) => Ok(name),
        Some(name) => Err(ApiError::bad_request(format!(
            "container {name} is not valid for pod {pod_name}"
        ))),
        None => {
            let regular = pod["spec"]["containers"]
                .as_array()
                .map(Vec::len)
                .unwrap_or(0);
            match (regular, pod["spec"]["containers"][0]["name"].as_str()) {
                (1, Some(only)) => Ok(only),
                (0, _) => Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {pod_name}"
                ))),
                _ => Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                    names.join(" ")
                ))),
            }
        }
    }
}

/// One run of a container: when it started, when (and how) it ended.
struct Instance<'a> {
    image: &'a str,
    started: Timestamp,
    ended: Option<(Timestamp, i64)>,
}

impl Instance<'_> {
    fn terminated<'a>(state: &Value, image: &'a str) -> Option<Instance<'a>> {
        let started = parse_time(&state["startedAt"])?;
        let finished = parse_time(&state["finishedAt"]).unwrap_or(started);
        Some(Instance {
            image,
            started,
            ended: Some((finished, state["exitCode"].as_i64().unwrap_or(0))),
        })
    }
}

/// The log text of `pod`'s container at `now`.
pub fn render(
    pod: &Value,
    container: Option<&str>,
    previous: bool,
    tail_lines: Option<usize>,
    now: Timestamp,
) -> Result<String, ApiError> {
    let name = choose_container(pod, container)?;
    let pod_name = crate::meta::name(pod);
    // Not on a node yet: there is no kubelet to ask, and the API server answers with nothing.
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        return Ok(String::new());
    }
    let status = [
        "initContainerStatuses",
        "containerStatuses",
        "ephemeralContainerStatuses",
    ]
    .iter()
    .flat_map(|f| {
        pod["status"][*f]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
    })
    .find(|s| s["name"] == name);
    let spec_image = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|f| {
            pod["spec"][*f]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
        })
        .find(|c| c["name"] == name)
        .and_then(|c| c["image"].as_str())
        .unwrap_or_default();
    let not_started = || {
        ApiError::bad_request(format!(
            "container {name:?} in pod {pod_name:?} is waiting to start - no logs yet"
        ))
    };
    let status = status.ok_or_else(not_started)?;
    let state = &status["state"];
    let last = &status["lastState"]["terminated"];
    let instance = if previous {
        Instance::terminated(last, spec_image).ok_or_else(|| {
            ApiError::bad_request(format!(
                "previous terminated container {name:?} in pod {pod_name:?} not found"
            ))
        })?
    } else if let Some(started) = parse_time(&state["running"]["startedAt"]) {
        Instance {
            image: spec_image,
            started,
            ended: None,
        }
    } else if let Some(instance) = Instance::terminated(&state["terminated"], spec_image) {
        instance
    } else if let Some(instance) = Instance::terminated(last, spec_image) {
        // A container waiting to restart shows its last run, as the kubelet does.
        instance
    } else {
        let reason = state["waiting"]["reason"].as_str().unwrap_or_default();
        return Err(ApiError::bad_request(match reason {
            "ErrImagePull" => format!(
                "container {name:?} in pod {pod_name:?} is waiting to start: image can't be pulled"
            ),
            "ImagePullBackOff" => format!(
                "container {name:?} in pod {pod_name:?} is waiting to start: trying and failing to pull image"
            ),
            "" => return Err(not_started()),
            other => format!("container {name:?} in pod {pod_name:?} is waiting to start: {other}"),
        }));
    };
    Ok(lines(pod_name, name, &instance, now, tail_lines))
}

fn lines(
    pod: &str,
    container: &str,
    instance: &Instance,
    now: Timestamp,
    tail: Option<usize>,
) -> String {
    let end = instance.ended.map_or(now, |(at, _)| at);
    let span = end
        .duration_since(instance.started)
        .as_secs()
        .max(0)
        .unsigned_abs();
    let heartbeats = span / HEARTBEAT.as_secs();
    let closing = instance.ended.map(|(at, code)| {
        let what = if code == 0 {
            "completed".to_string()
        } else {
            format!("fatal: exiting with code {code}")
        };
        format!("{} {pod}/{container} {what}\n", format_time(at))
    });
    let total = 1 + heartbeats + u64::from(closing.is_some());
    let wanted = tail
        .map_or(total, |t| u64::try_from(t).unwrap_or(u64::MAX))
        .min(total)
        .min(MAX_LINES);
    let first = total - wanted;
    let mut text = String::new();
    for index in first..total {
        if index == 0 {
            text.push_str(&format!(
                "{} {pod}/{container} started image {}\n",
                format_time(instance.started),
                instance.image
            ));
        } else if index <= heartbeats {
            let at = add(
                instance.started,
                HEARTBEAT * u32::try_from(index).unwrap_or(u32::MAX),
            );
            text.push_str(&format!(
                "{} {pod}/{container} heartbeat {index}\n",
                format_time(at)
            ));
        } else if let Some(closing) = &closing {
            text.push_str(closing);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("valid time")
    }

    fn pod(containers: Value, statuses: Value) -> Value {
        json!({
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"nodeName": "sandbox-node", "containers": containers},
            "status": {"containerStatuses": statuses},
        })
    }

    fn running(name: &str, since: &str) -> Value {
        json!({"name": name, "state": {"running": {"startedAt": since}}, "lastState": {}})
    }

    #[test]
    fn a_running_container_writes_a_line_every_heartbeat() {
        let p = pod(
            json!([{"name": "web", "image": "nginx:1.27"}]),
            json!([running("web", "2024-01-01T00:00:00Z")]),
        );
        let now = at("2024-01-01T00:00:25Z");
        assert_eq!(
            render(&p, None, false, None, now),
            Ok("2024-01-01T00:00:00Z web-1/web started image nginx:1.27\n\
                2024-01-01T00:00:10Z web-1/web heartbeat 1\n\
                2024-01-01T00:00:20Z web-1/web heartbeat 2\n"
                .to_string())
        );
        assert_eq!(
            render(&p, Some("web"), false, Some(1), now),
            Ok("2024-01-01T00:00:20Z web-1/web heartbeat 2\n".to_string())
        );
        assert_eq!(render(&p, None, false, Some(0), now), Ok(String::new()));
        let long = render(&p, None, false, None, at("2025-01-01T00:00:00Z")).unwrap_or_default();
        assert_eq!(long.lines().count(), 10_000);
    }

    #[test]
    fn crashed_and_finished_containers_log_their_end() {
        let crashed = json!({
            "name": "app",
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "startedAt": "2024-01-01T00:01:00Z", "finishedAt": "2024-01-01T00:01:00Z"}},
        });
        let p = pod(
            json!([{"name": "app", "image": "crashloop"}]),
            json!([crashed]),
        );
        let expected = "2024-01-01T00:01:00Z web-1/app started image crashloop\n\
                        2024-01-01T00:01:00Z web-1/app fatal: exiting with code 1\n";
        let now = at("2024-01-01T00:05:00Z");
        assert_eq!(render(&p, None, true, None, now), Ok(expected.to_string()));
        assert_eq!(render(&p, None, false, None, now), Ok(expected.to_string()));

        let done = json!({"name": "task", "state": {"terminated": {"exitCode": 0, "startedAt": "2024-01-01T00:00:00Z", "finishedAt": "2024-01-01T00:00:12Z"}}, "lastState": {}});
        let p = pod(json!([{"name": "task", "image": "busybox"}]), json!([done]));
        assert_eq!(
            render(&p, None, false, Some(2), now),
            Ok("2024-01-01T00:00:10Z web-1/task heartbeat 1\n2024-01-01T00:00:12Z web-1/task completed\n".to_string())
        );
    }

    #[test]
    fn errors_match_the_api_server() {
        let two = pod(
            json!([{"name": "web", "image": "nginx"}, {"name": "side", "image": "envoy"}]),
            json!([
                running("web", "2024-01-01T00:00:00Z"),
                running("side", "2024-01-01T00:00:00Z")
            ]),
        );
        let pulling = pod(
            json!([{"name": "web", "image": "imagepull"}]),
            json!([{"name": "web", "state": {"waiting": {"reason": "ImagePullBackOff"}}, "lastState": {}}]),
        );
        let creating = pod(
            json!([{"name": "web", "image": "nginx"}]),
            json!([{"name": "web", "state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {}}]),
        );
        let now = at("2024-01-01T00:00:05Z");
        let cases = [
            (
                &two,
                None,
                false,
                "a container name must be specified for pod web-1, choose one of: [web side]",
            ),
            (
                &two,
                Some("nope"),
                false,
                "container nope is not valid for pod web-1",
            ),
            (
                &two,
                Some("web"),
                true,
                "previous terminated container \"web\" in pod \"web-1\" not found",
            ),
            (
                &pulling,
                None,
                false,
                "container \"web\" in pod \"web-1\" is waiting to start: trying and failing to pull image",
            ),
            (
                &creating,
                None,
                false,
                "container \"web\" in pod \"web-1\" is waiting to start: ContainerCreating",
            ),
        ];
        for (p, container, previous, message) in cases {
            let error = render(p, container, previous, None, now).expect_err(message);
            assert_eq!(
                (error.code, error.reason.as_str(), error.message.as_str()),
                (400, "BadRequest", message)
            );
        }
        assert_eq!(
            render(&two, Some("side"), false, Some(1), now),
            Ok("2024-01-01T00:00:00Z web-1/side started image envoy\n".to_string())
        );
    }

    #[test]
    fn an_unscheduled_pod_has_an_empty_log_and_a_missing_one_is_not_found() {
        let mut p = pod(json!([{"name": "web", "image": "nginx"}]), json!([]));
        p["spec"]["nodeName"] = Value::Null;
        assert_eq!(
            render(&p, None, false, None, at("2024-01-01T00:00:00Z")),
            Ok(String::new())
        );

        let store = Store::default();
        let error = read(&store, "default", "ghost", None, false, None).expect_err("no such pod");
        assert_eq!(
            (error.code, error.message.as_str()),
            (404, "pods \"ghost\" not found")
        );
    }
}
