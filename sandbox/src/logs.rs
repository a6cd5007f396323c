//! Container logs of the simulated node, as `GET .../pods/{name}/log` returns them.
//!
//! Nothing is stored: a container instance's log is a deterministic function of its start (and
//! end) in the Pod status and of the clock, so it is the same on every read and costs nothing
//! until it is read. A running instance writes a line every [`ServerOptions::log_interval`]
//! (`crate::server::ServerOptions`):
//!
//! ```text
//! 2024-01-01T00:00:00Z web-7d9c-x2x4z/web started image nginx:1.27
//! 2024-01-01T00:00:02Z web-7d9c-x2x4z/web heartbeat 1
//! 2024-01-01T00:00:04Z web-7d9c-x2x4z/web heartbeat 2
//! ```
//!
//! and, when it ended, `completed` (exit code 0) or `fatal: exiting with code 1`. Which
//! instance is read, and the errors, follow kube-apiserver and the kubelet; so does `follow`:
//! the stream stays open while the instance runs, gets each line as it is written, and ends
//! when the instance ends (with its last lines), or its Pod is deleted.

use std::time::Duration;

use bytes::Bytes;
use futures::SinkExt as _;
use futures::channel::mpsc;
use jiff::Timestamp;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::api_error::ApiError;
use crate::resources::ResourceType;
use crate::sim::object::{add, format_time, parse_time};
use crate::store::Store;

/// The most lines one read returns (the newest), like a kubelet's rotated log.
const MAX_LINES: u64 = 10_000;
/// The shortest interval between two lines (a zero one would be a line on every look).
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// What a log request asks for (the query of `GET .../pods/{name}/log`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogRequest {
    /// May be omitted for a Pod with one container.
    pub container: Option<String>,
    /// The previous (terminated) instance instead of the current one.
    pub previous: bool,
    /// Only the last lines.
    pub tail_lines: Option<usize>,
}

/// The log of a container of a Pod at `now`: the current instance, or the previous one.
pub fn read(
    store: &Store,
    namespace: &str,
    pod: &str,
    request: &LogRequest,
    interval: Duration,
) -> Result<String, ApiError> {
    let object = store.get(&pods(store)?, Some(namespace), pod)?;
    render(&object, request, interval, Timestamp::now())
}

fn pods(store: &Store) -> Result<ResourceType, ApiError> {
    store
        .resource_type("", "Pod")
        .ok_or_else(|| ApiError::internal("pods are not served"))
}

/// A followed log: what [`read`] answers, then every line as the container writes it, until
/// the instance ends (its last lines included), its Pod is deleted or replaced, the reader
/// hangs up or `shutdown` is cancelled. Errors (no such Pod or container, nothing to read yet)
/// come before the stream, as the kubelet's do.
pub fn follow(
    store: &Store,
    namespace: &str,
    pod: &str,
    request: &LogRequest,
    interval: Duration,
    shutdown: CancellationToken,
) -> Result<mpsc::Receiver<Result<Bytes, std::io::Error>>, ApiError> {
    let pods = pods(store)?;
    let interval = interval.max(MIN_INTERVAL);
    // Subscribed before the read, so that no change after it is missed.
    let mut events = store.subscribe();
    let object = store.get(&pods, Some(namespace), pod)?;
    let now = Timestamp::now();
    let (mut sender, receiver) = mpsc::channel(16);
    let Some(mut instance) = Instance::chosen(&object, request)? else {
        // Not on a node yet: nothing to read and nothing to wait for, as kube-apiserver.
        return Ok(receiver);
    };
    let mut written = instance.written(now, interval);
    let first = first_line(written, request.tail_lines);
    let text = instance.lines(first..written, interval);
    let (store, namespace, name) = (store.clone(), namespace.to_string(), pod.to_string());
    let uid = crate::meta::uid(&object).to_string();
    tokio::spawn(async move {
        if !text.is_empty() && sender.send(Ok(Bytes::from(text))).await.is_err() {
            return;
        }
        // A finished instance has written all it will.
        while instance.ended.is_none() {
            let next_line = add(
                instance.started,
                interval.saturating_mul(line_number(written)),
            );
            let wait = Timestamp::now()
                .duration_until(next_line)
                .try_into()
                .unwrap_or(Duration::ZERO);
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
                event = events.recv() => match event {
                    Ok(event) if event.resource.storage_key() == pods.storage_key()
                        && crate::meta::namespace(&event.object) == Some(namespace.as_str())
                        && crate::meta::name(&event.object) == name => {}
                    Ok(_) => continue,
                    // Too far behind to know: look at the Pod again.
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                },
            }
            // Gone, replaced or being deleted: its containers are stopped with it.
            let current = store
                .get(&pods, Some(&namespace), &name)
                .ok()
                .filter(|pod| crate::meta::uid(pod) == uid && !deleting(pod));
            let Some(seen) = current.and_then(|pod| instance.as_seen_in(&pod)) else {
                return;
            };
            instance = seen;
            let now_written = instance.written(Timestamp::now(), interval);
            let text = instance.lines(written..now_written, interval);
            written = now_written;
            if !text.is_empty() && sender.send(Ok(Bytes::from(text))).await.is_err() {
                return;
            }
        }
    });
    Ok(receiver)
}

fn deleting(pod: &Value) -> bool {
    !pod["metadata"]["deletionTimestamp"].is_null()
}

/// The entries of the lists `fields` of `section`, in that order.
fn entries<'a>(section: &'a Value, fields: [&'static str; 3]) -> impl Iterator<Item = &'a Value> {
    fields.into_iter().flat_map(move |field| {
        section[field]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
    })
}

/// Every container of `pod`: init, regular, ephemeral.
fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    entries(
        &pod["spec"],
        ["initContainers", "containers", "ephemeralContainers"],
    )
}

fn container_names(pod: &Value) -> Vec<&str> {
    containers(pod).filter_map(|c| c["name"].as_str()).collect()
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

/// The status of container `name` of `pod`.
fn container_status<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    entries(
        &pod["status"],
        [
            "initContainerStatuses",
            "containerStatuses",
            "ephemeralContainerStatuses",
        ],
    )
    .find(|s| s["name"] == name)
}

/// One run of a container: whose, when it started, when (and how) it ended.
#[derive(Debug, Clone, PartialEq)]
struct Instance {
    pod: String,
    container: String,
    image: String,
    started: Timestamp,
    ended: Option<(Timestamp, i64)>,
}

impl Instance {
    /// The instance `request` reads, as the kubelet chooses it; `None` for a Pod on no node
    /// yet (an empty log).
    fn chosen(pod: &Value, request: &LogRequest) -> Result<Option<Instance>, ApiError> {
        let name = choose_container(pod, request.container.as_deref())?;
        let pod_name = crate::meta::name(pod);
        // Not on a node yet: there is no kubelet to ask, and the API server answers with nothing.
        if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
            return Ok(None);
        }
        let not_started = || {
            ApiError::bad_request(format!(
                "container {name:?} in pod {pod_name:?} is waiting to start - no logs yet"
            ))
        };
        let status = container_status(pod, name).ok_or_else(not_started)?;
        let state = &status["state"];
        let last = &status["lastState"]["terminated"];
        let of = |started, ended| Instance {
            pod: pod_name.to_string(),
            container: name.to_string(),
            image: image(pod, name).to_string(),
            started,
            ended,
        };
        let terminated = |state: &Value| {
            let started = parse_time(&state["startedAt"])?;
            Some(of(started, Some(ending(state, started))))
        };
        if request.previous {
            return terminated(last).map(Some).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "previous terminated container {name:?} in pod {pod_name:?} not found"
                ))
            });
        }
        if let Some(started) = parse_time(&state["running"]["startedAt"]) {
            return Ok(Some(of(started, None)));
        }
        // A container waiting to restart shows its last run, as the kubelet does.
        if let Some(instance) = terminated(&state["terminated"]).or_else(|| terminated(last)) {
            return Ok(Some(instance));
        }
        let reason = state["waiting"]["reason"].as_str().unwrap_or_default();
        Err(ApiError::bad_request(match reason {
            "ErrImagePull" => format!(
                "container {name:?} in pod {pod_name:?} is waiting to start: image can't be pulled"
            ),
            "ImagePullBackOff" => format!(
                "container {name:?} in pod {pod_name:?} is waiting to start: trying and failing to pull image"
            ),
            "" => return Err(not_started()),
            other => format!("container {name:?} in pod {pod_name:?} is waiting to start: {other}"),
        }))
    }

    /// This instance as `pod`'s status shows it now (ended since, maybe), or `None` when the
    /// status shows another instance of the container.
    fn as_seen_in(&self, pod: &Value) -> Option<Instance> {
        let status = container_status(pod, &self.container)?;
        let started = |state: &Value| parse_time(&state["startedAt"]) == Some(self.started);
        if started(&status["state"]["running"]) {
            return Some(self.clone());
        }
        [
            &status["state"]["terminated"],
            &status["lastState"]["terminated"],
        ]
        .into_iter()
        .find(|state| started(state))
        .map(|state| Instance {
            ended: Some(ending(state, self.started)),
            ..self.clone()
        })
    }

    /// How many heartbeats it wrote by `at` (or its end).
    fn heartbeats(&self, at: Timestamp, interval: Duration) -> u64 {
        let end = self.ended.map_or(at, |(ended, _)| ended.min(at));
        let span = end
            .duration_since(self.started)
            .as_millis()
            .max(0)
            .unsigned_abs();
        u64::try_from(span / interval.as_millis().max(1)).unwrap_or(u64::MAX)
    }

    /// How many lines it wrote by `now`: its start, its heartbeats, and its end if it ended.
    fn written(&self, now: Timestamp, interval: Duration) -> u64 {
        1 + self.heartbeats(now, interval) + u64::from(self.ended.is_some())
    }

    /// Lines `range` of its log.
    fn lines(&self, range: std::ops::Range<u64>, interval: Duration) -> String {
        let (pod, container) = (&self.pod, &self.container);
        let heartbeats = self.heartbeats(Timestamp::MAX, interval);
        let mut text = String::new();
        for index in range {
            let line = if index == 0 {
                format!(
                    "{} {pod}/{container} started image {}",
                    format_time(self.started),
                    self.image
                )
            } else if index <= heartbeats {
                let at = add(self.started, interval.saturating_mul(line_number(index)));
                format!("{} {pod}/{container} heartbeat {index}", format_time(at))
            } else if let Some((at, code)) = self.ended {
                let what = if code == 0 {
                    "completed".to_string()
                } else {
                    format!("fatal: exiting with code {code}")
                };
                format!("{} {pod}/{container} {what}", format_time(at))
            } else {
                break;
            };
            text.push_str(&line);
            text.push('\n');
        }
        text
    }
}

/// When and how a run that `started` ended, by its `terminated` state: `finishedAt` (else its
/// start) and its exit code.
fn ending(terminated: &Value, started: Timestamp) -> (Timestamp, i64) {
    (
        parse_time(&terminated["finishedAt"]).unwrap_or(started),
        terminated["exitCode"].as_i64().unwrap_or(0),
    )
}

/// The spec's image of container `name`.
fn image<'a>(pod: &'a Value, name: &str) -> &'a str {
    containers(pod)
        .find(|c| c["name"] == name)
        .and_then(|c| c["image"].as_str())
        .unwrap_or_default()
}

/// A line index as a multiplier of the interval.
fn line_number(index: u64) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}

/// The first of `written` lines a read returns: the last `tail` (all without), at most
/// [`MAX_LINES`].
fn first_line(written: u64, tail: Option<usize>) -> u64 {
    let wanted = tail
        .map_or(written, |t| u64::try_from(t).unwrap_or(u64::MAX))
        .min(written)
        .min(MAX_LINES);
    written - wanted
}

/// The log text `request` reads of `pod` at `now`.
pub fn render(
    pod: &Value,
    request: &LogRequest,
    interval: Duration,
    now: Timestamp,
) -> Result<String, ApiError> {
    let Some(instance) = Instance::chosen(pod, request)? else {
        return Ok(String::new());
    };
    let interval = interval.max(MIN_INTERVAL);
    let written = instance.written(now, interval);
    Ok(instance.lines(first_line(written, request.tail_lines)..written, interval))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const TEN_SECONDS: Duration = Duration::from_secs(10);

    fn request(container: Option<&str>, previous: bool, tail_lines: Option<usize>) -> LogRequest {
        LogRequest {
            container: container.map(str::to_string),
            previous,
            tail_lines,
        }
    }

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
            render(&p, &request(None, false, None), TEN_SECONDS, now),
            Ok("2024-01-01T00:00:00Z web-1/web started image nginx:1.27\n\
                2024-01-01T00:00:10Z web-1/web heartbeat 1\n\
                2024-01-01T00:00:20Z web-1/web heartbeat 2\n"
                .to_string())
        );
        assert_eq!(
            render(&p, &request(Some("web"), false, Some(1)), TEN_SECONDS, now),
            Ok("2024-01-01T00:00:20Z web-1/web heartbeat 2\n".to_string())
        );
        assert_eq!(
            render(&p, &request(None, false, Some(0)), TEN_SECONDS, now),
            Ok(String::new())
        );
        let long = render(
            &p,
            &request(None, false, None),
            TEN_SECONDS,
            at("2025-01-01T00:00:00Z"),
        )
        .unwrap_or_default();
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
        assert_eq!(
            render(&p, &request(None, true, None), TEN_SECONDS, now),
            Ok(expected.to_string())
        );
        assert_eq!(
            render(&p, &request(None, false, None), TEN_SECONDS, now),
            Ok(expected.to_string())
        );

        let done = json!({"name": "task", "state": {"terminated": {"exitCode": 0, "startedAt": "2024-01-01T00:00:00Z", "finishedAt": "2024-01-01T00:00:12Z"}}, "lastState": {}});
        let p = pod(json!([{"name": "task", "image": "busybox"}]), json!([done]));
        assert_eq!(
            render(&p, &request(None, false, Some(2)), TEN_SECONDS, now),
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
            let error = render(p, &request(container, previous, None), TEN_SECONDS, now)
                .expect_err(message);
            assert_eq!(
                (error.code, error.reason.as_str(), error.message.as_str()),
                (400, "BadRequest", message)
            );
        }
        assert_eq!(
            render(
                &two,
                &request(Some("side"), false, Some(1)),
                TEN_SECONDS,
                now
            ),
            Ok("2024-01-01T00:00:00Z web-1/side started image envoy\n".to_string())
        );
    }

    #[test]
    fn an_unscheduled_pod_has_an_empty_log_and_a_missing_one_is_not_found() {
        let mut p = pod(json!([{"name": "web", "image": "nginx"}]), json!([]));
        p["spec"]["nodeName"] = Value::Null;
        assert_eq!(
            render(
                &p,
                &request(None, false, None),
                TEN_SECONDS,
                at("2024-01-01T00:00:00Z")
            ),
            Ok(String::new())
        );

        let store = Store::default();
        let error = read(
            &store,
            "default",
            "ghost",
            &LogRequest::default(),
            TEN_SECONDS,
        )
        .expect_err("no such pod");
        assert_eq!(
            (error.code, error.message.as_str()),
            (404, "pods \"ghost\" not found")
        );
    }

    #[test]
    fn a_followed_instance_is_recognised_until_another_one_runs() {
        let started = "2024-01-01T00:00:00Z";
        let running_pod = pod(
            json!([{"name": "app", "image": "worker"}]),
            json!([running("app", started)]),
        );
        let instance = Instance::chosen(&running_pod, &LogRequest::default())
            .expect("a log")
            .expect("on a node");
        assert_eq!(instance.as_seen_in(&running_pod), Some(instance.clone()));

        // It ended: the lines after the last one read are its last heartbeat and its end.
        let ended = pod(
            json!([{"name": "app", "image": "worker"}]),
            json!([{"name": "app", "state": {"terminated": {"exitCode": 1,
                    "startedAt": started, "finishedAt": "2024-01-01T00:00:25Z"}}, "lastState": {}}]),
        );
        let seen = instance.as_seen_in(&ended).expect("the same instance");
        let now = at("2024-01-01T00:01:00Z");
        assert_eq!(seen.written(now, TEN_SECONDS), 4);
        assert_eq!(
            seen.lines(2..4, TEN_SECONDS),
            "2024-01-01T00:00:20Z web-1/app heartbeat 2\n\
             2024-01-01T00:00:25Z web-1/app fatal: exiting with code 1\n"
        );
        // Restarted since: the followed instance is over, and no status says how.
        let restarted = pod(
            json!([{"name": "app", "image": "worker"}]),
            json!([running("app", "2024-01-01T00:00:40Z")]),
        );
        assert_eq!(instance.as_seen_in(&restarted), None);
    }

    #[tokio::test]
    async fn a_followed_log_grows_while_the_container_runs_and_ends_with_its_pod() {
        use futures::StreamExt as _;

        let store = Store::default();
        let pods = pods(&store).expect("pods are served");
        let created = store
            .create(
                &pods,
                Some("default"),
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1"},
                       "spec": {"nodeName": "sandbox-node",
                                "containers": [{"name": "web", "image": "nginx:1.27"}]}}),
            )
            .expect("created");
        let mut running_pod = created.clone();
        running_pod["status"]["containerStatuses"] =
            json!([running("web", &format_time(Timestamp::now()))]);
        store
            .update_status(&pods, Some("default"), running_pod)
            .expect("running");

        let interval = Duration::from_millis(50);
        let shutdown = CancellationToken::new();
        let mut chunks = follow(
            &store,
            "default",
            "web-1",
            &LogRequest::default(),
            interval,
            shutdown.clone(),
        )
        .expect("a followed log");
        let mut text = String::new();
        while text.lines().count() < 3 {
            let chunk = tokio::time::timeout(Duration::from_secs(20), chunks.next())
                .await
                .expect("a line within the deadline")
                .expect("the stream stays open while the container runs")
                .expect("a chunk");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].ends_with(" web-1/web started image nginx:1.27"),
            "{text}"
        );
        assert!(lines[1].ends_with(" web-1/web heartbeat 1"), "{text}");
        assert!(lines[2].ends_with(" web-1/web heartbeat 2"), "{text}");

        store
            .delete(
                &pods,
                Some("default"),
                "web-1",
                crate::store::Propagation::Background,
            )
            .expect("deleted");
        tokio::time::timeout(Duration::from_secs(20), chunks.count())
            .await
            .expect("the stream ends with its pod");
        shutdown.cancel();
    }
}
