//! The operations on a Comb besides reconcile (reference §9): logs, restart, stop, describe,
//! endpoint.

use comb_api::ownership::Ownership;
use comb_api::{Comb, CombEndpoint, CombStatus, Endpoint, ManagedObject};
use serde::Serialize;
use serde_json::{Value, json};

use crate::engine::borrow::{Borrowing, live_status, resolved_endpoints};
use crate::engine::class::CombInstance;
use crate::engine::context::CombContext;
use crate::engine::kube_ops::{KubeOps, RESTART_MANAGER, STOP_MANAGER, same_object};
use crate::engine::live_status::LiveStatus;
use crate::engine::ownership::Claim;
use crate::engine::values::object_name;
use crate::error::{Error, Result};

/// The last `lines` lines of every container of the Comb's pods, formatted as the reference
/// says: one container is just its text; otherwise each stream gets a
/// `==> pod[/container][ (previous)] <==` header. A crash-looping container shows its previous
/// instance. A stream whose log cannot be read says so inline; only a failed pod list fails.
/// `container` reads only that container of each pod.
pub async fn logs(
    ops: &KubeOps,
    ctx: &CombContext,
    lines: i64,
    container: Option<&str>,
) -> Result<String> {
    let mut streams = Vec::new();
    for stream in chosen_streams(ops, ctx, container).await? {
        let text = match ops
            .pod_log(
                &ctx.namespace,
                &stream.pod,
                &stream.container,
                stream.previous,
                lines,
            )
            .await
        {
            Ok(text) => ended_with_newline(text),
            Err(error) => format!("(no log: {})\n", error.to_string().trim_end()),
        };
        streams.push((stream, text));
    }
    Ok(format_logs(&streams))
}

/// `logs -f`: the last `lines` lines of each chosen container, then every new line as it is
/// written, until every stream ends (its pod is gone) or the caller stops polling. With more
/// than one stream each line starts with `[pod/container]`. A stream that cannot be opened
/// says so in a line of its own; only a failed pod list fails.
pub async fn follow_logs(
    ops: &KubeOps,
    ctx: &CombContext,
    lines: i64,
    container: Option<&str>,
    mut line_out: impl FnMut(&str),
) -> Result<()> {
    use futures::{AsyncBufReadExt as _, StreamExt as _};

    let streams = chosen_streams(ops, ctx, container).await?;
    let prefixed = streams.len() > 1;
    let mut followed = Vec::new();
    for stream in streams {
        let prefix = if prefixed {
            format!("[{}/{}] ", stream.pod, stream.container)
        } else {
            String::new()
        };
        match ops
            .follow_pod_log(&ctx.namespace, &stream.pod, &stream.container, lines)
            .await
        {
            Ok(reader) => followed.push(
                reader
                    .lines()
                    .map(move |line| match line {
                        Ok(line) => format!("{prefix}{line}"),
                        Err(error) => format!("{prefix}(log ended: {error})"),
                    })
                    .boxed(),
            ),
            Err(error) => line_out(&format!(
                "{prefix}(no log: {})",
                error.to_string().trim_end()
            )),
        }
    }
    let mut merged = futures::stream::select_all(followed);
    while let Some(line) = merged.next().await {
        line_out(&line);
    }
    Ok(())
}

/// The streams of the Comb's pods to read (the pods whole, their containers are in their specs,
/// from the API server, sorted by name): all, or those of `container`, which must be in some pod.
async fn chosen_streams(
    ops: &KubeOps,
    ctx: &CombContext,
    container: Option<&str>,
) -> Result<Vec<LogStream>> {
    let mut pods = ops
        .list_whole("v1", "Pod", Some(&ctx.namespace), &ctx.label_selector())
        .await?;
    pods.sort_by(|a, b| object_name(a).cmp(&object_name(b)));
    let streams = log_streams(&pods);
    let Some(wanted) = container else {
        return Ok(streams);
    };
    let chosen: Vec<LogStream> = streams
        .iter()
        .filter(|stream| stream.container == wanted)
        .cloned()
        .collect();
    if chosen.is_empty() && !streams.is_empty() {
        let mut names: Vec<&str> = streams.iter().map(|s| s.container.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        return Err(Error::controller(format!(
            "no container {wanted} in the pods of {}/{} (containers: {})",
            ctx.namespace,
            ctx.name,
            names.join(", ")
        )));
    }
    Ok(chosen)
}

/// One container log to read.
#[derive(Clone, Debug, PartialEq)]
struct LogStream {
    pod: String,
    container: String,
    /// The container is in CrashLoopBackOff: read the instance that crashed.
    previous: bool,
    /// The pod has more than one container, so the header names the container.
    named_container: bool,
}

/// One stream per container in `spec.containers` of each pod, in pod order.
fn log_streams(pods: &[Value]) -> Vec<LogStream> {
    let mut streams = Vec::new();
    for pod in pods {
        let Some(pod_name) = object_name(pod) else {
            continue;
        };
        let containers: Vec<&str> = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|container| container.get("name").and_then(Value::as_str))
            .collect();
        for container in &containers {
            streams.push(LogStream {
                pod: pod_name.to_string(),
                container: container.to_string(),
                previous: crash_looping(pod, container),
                named_container: containers.len() > 1,
            });
        }
    }
    streams
}

fn crash_looping(pod: &Value, container: &str) -> bool {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|status| status.get("name").and_then(Value::as_str) == Some(container))
        .any(|status| {
            status
                .pointer("/state/waiting/reason")
                .and_then(Value::as_str)
                == Some("CrashLoopBackOff")
        })
}

fn ended_with_newline(mut text: String) -> String {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

fn format_logs(streams: &[(LogStream, String)]) -> String {
    let headers = streams.len() > 1 || streams.iter().any(|(stream, _)| stream.previous);
    streams
        .iter()
        .map(|(stream, text)| {
            if !headers {
                return text.clone();
            }
            let container = if stream.named_container {
                format!("/{}", stream.container)
            } else {
                String::new()
            };
            let previous = if stream.previous { " (previous)" } else { "" };
            format!("==> {}{container}{previous} <==\n{text}", stream.pod)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What restart and stop do to the objects of one kind.
enum Action {
    /// A merge patch as field manager [`RESTART_MANAGER`], who then owns what it wrote: comb's
    /// apply leaves it.
    Restart(Value),
    /// A forced apply of these fields as field manager [`STOP_MANAGER`]: the next deploy takes
    /// the fields back (or, those the manifest does not set, gives them back to the server's
    /// defaults).
    Stop(Value),
    /// Deleted with their pods (propagation Background).
    Delete,
}

/// Restarts the Comb's workloads: Deployments, StatefulSets and DaemonSets get the restart
/// annotation on their Pod template (their controllers roll the pods, and deploy leaves the
/// annotation, written by its own field manager), Jobs are deleted with their pods. Returns `Kind/name` of each, kinds in that
/// order, names sorted. CronJobs are left alone, and so is an object that carries the Comb's
/// labels but is not the Comb's by its `record` (its `managedResources`, the ownership rule).
pub async fn restart(
    ops: &KubeOps,
    ctx: &CombContext,
    record: &[ManagedObject],
) -> Result<Vec<String>> {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let restart = Action::Restart(json!({"spec": {"template": {"metadata": {"annotations": {
        ctx.settings.labels.restart_annotation(): now
    }}}}}));
    let plan = [
        ("apps/v1", "Deployment", &restart),
        ("apps/v1", "StatefulSet", &restart),
        ("apps/v1", "DaemonSet", &restart),
        ("batch/v1", "Job", &Action::Delete),
    ];
    act_on_kinds(ops, ctx, record, &plan).await
}

/// Stops the Comb: Deployments and StatefulSets scaled to 0, CronJobs suspended, Jobs deleted
/// with their pods. DaemonSets are left alone, and so is what is not the Comb's by its
/// `record`. The next reconcile deploys the manifests again.
pub async fn stop(
    ops: &KubeOps,
    ctx: &CombContext,
    record: &[ManagedObject],
) -> Result<Vec<String>> {
    let scale_to_zero = Action::Stop(json!({"spec": {"replicas": 0}}));
    let suspend = Action::Stop(json!({"spec": {"suspend": true}}));
    let plan = [
        ("apps/v1", "Deployment", &scale_to_zero),
        ("apps/v1", "StatefulSet", &scale_to_zero),
        ("batch/v1", "CronJob", &suspend),
        ("batch/v1", "Job", &Action::Delete),
    ];
    act_on_kinds(ops, ctx, record, &plan).await
}

/// One list per kind (the Comb's namespace, both labels), sorted by name, then the action on
/// each object that is the Comb's by `record` (labels alone are what anyone who may label can
/// put on an object: such an object is left alone, and the log says so). The first failure
/// fails the whole operation.
async fn act_on_kinds(
    ops: &KubeOps,
    ctx: &CombContext,
    record: &[ManagedObject],
    plan: &[(&str, &str, &Action)],
) -> Result<Vec<String>> {
    let selector = ctx.comb_selector();
    let mut touched = Vec::new();
    for (api_version, kind, action) in plan {
        let mut objects = ops
            .list(api_version, kind, Some(&ctx.namespace), &selector)
            .await?;
        objects.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        for object in &objects {
            let name = &*object.name;
            let resource = ManagedObject {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
                namespace: Some(ctx.namespace.clone()),
                name: name.to_string(),
                uid: None,
            };
            if let Ownership::NotOwned(why) =
                Claim::new(&ctx.namespace, &ctx.name, record, &resource).decide(object)
            {
                let why = why.why(&ctx.settings.labels, &[]);
                tracing::warn!(comb = %ctx.name, namespace = %ctx.namespace, %kind, %name, %why,
                    "left alone: not this Comb's");
                continue;
            }
            match action {
                Action::Restart(patch) => {
                    ops.merge_patch(&resource, patch, Some(RESTART_MANAGER))
                        .await?;
                }
                Action::Stop(fields) => {
                    let mut body = fields.clone();
                    body["apiVersion"] = json!(api_version);
                    body["kind"] = json!(kind);
                    body["metadata"] = json!({"name": name, "namespace": ctx.namespace});
                    ops.apply_as(&resource, &body, STOP_MANAGER).await?;
                }
                // The Job listed, whatever its status did since; not one created anew.
                Action::Delete => ops.delete(&resource, same_object(object)).await?,
            }
            touched.push(format!("{kind}/{name}"));
        }
    }
    Ok(touched)
}

/// Everything about one Comb (reference §9 `describe`): who it is, what it recorded, the
/// endpoints it resolves now and what the cluster shows now. `comb describe` prints it (beside
/// the layer it read it from).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Description {
    pub namespace: String,
    pub name: String,
    /// The class it is built as (the stub's, where its layer stubs it).
    pub class: String,
    /// The class of the original, for a stub.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stub_of: Option<String>,
    pub depends_on: Vec<String>,
    /// The upstream class it borrows from now; `None` when it runs its service itself.
    pub borrows_from: Option<String>,
    /// The status recorded in the CR, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<CombStatus>,
    /// The endpoints it resolves now (redirected to the upstream while borrowing).
    pub endpoints: Vec<CombEndpoint>,
    /// Why the endpoints could not be resolved (e.g. an unreachable upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoints_error: Option<String>,
    /// What the cluster shows now; `None` when the Comb cannot be built.
    pub status: Option<LiveStatus>,
    /// Why the Comb cannot be built (what its status records as BuildFailed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_error: Option<String>,
}

impl Description {
    /// What can be said of a Comb whose CR `cr` cannot be built (`error` says why): who it is and
    /// what it recorded.
    pub fn unbuilt(cr: &Comb, error: String) -> Description {
        Description {
            namespace: cr.metadata.namespace.clone().unwrap_or_default(),
            name: cr.metadata.name.clone().unwrap_or_default(),
            class: cr.spec.class.clone().unwrap_or_default(),
            stub_of: None,
            depends_on: cr.spec.dependencies().to_vec(),
            borrows_from: None,
            recorded: cr.status.clone(),
            endpoints: Vec::new(),
            endpoints_error: None,
            status: None,
            build_error: Some(error),
        }
    }
}

/// Describes a Comb: its identity, recorded status, resolved endpoints and live status; while
/// `borrowing`, the endpoints are the redirected ones and the status is the borrowed one
/// (reference §8.2). Endpoints that cannot be resolved are described as such; a live status
/// that cannot be read fails it.
pub async fn describe(
    ops: &KubeOps,
    comb: &CombInstance,
    borrowing: Option<&Borrowing>,
) -> Result<Description> {
    let (endpoints, endpoints_error) = match resolved_endpoints(comb, borrowing).await {
        Ok(endpoints) => (endpoints.iter().map(Endpoint::to_crd).collect(), None),
        Err(error) => (Vec::new(), Some(error.to_string())),
    };
    let status = live_status(ops, comb, borrowing).await?;
    Ok(Description {
        namespace: comb.namespace().to_string(),
        name: comb.name().to_string(),
        class: comb.class_name().to_string(),
        stub_of: comb.stub_of().map(str::to_string),
        depends_on: comb.depends_on(),
        borrows_from: borrowing.map(|b| b.upstream.class_name().to_string()),
        recorded: comb.recorded_status().cloned(),
        endpoints,
        endpoints_error,
        status: Some(status),
        build_error: None,
    })
}

/// The endpoint `name` of a Comb (redirected to the upstream while `borrowing`), or an error
/// naming the ones it has.
pub async fn endpoint(
    comb: &CombInstance,
    name: &str,
    borrowing: Option<&Borrowing>,
) -> Result<Endpoint> {
    let class = comb.class_name();
    if name.is_empty() {
        return Err(Error::endpoints(format!("{class}->endpoint needs a name")));
    }
    let endpoints = resolved_endpoints(comb, borrowing).await?;
    pick_endpoint(class, comb.name(), endpoints, name)
}

fn pick_endpoint(
    class: &str,
    comb_name: &str,
    endpoints: Vec<Endpoint>,
    name: &str,
) -> Result<Endpoint> {
    let names: Vec<String> = endpoints.iter().map(|e| e.name().to_string()).collect();
    endpoints
        .into_iter()
        .find(|endpoint| endpoint.name() == name)
        .ok_or_else(|| {
            let has = if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            };
            Error::endpoints(format!(
                "{class}->endpoint: {comb_name} has no endpoint {name} (it has: {has})"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, containers: &[&str], crash_looping: &[&str]) -> Value {
        let specs: Vec<Value> = containers.iter().map(|c| json!({"name": c})).collect();
        let statuses: Vec<Value> = containers
            .iter()
            .map(|c| {
                if crash_looping.contains(c) {
                    json!({"name": c, "state": {"waiting": {"reason": "CrashLoopBackOff"}}})
                } else {
                    json!({"name": c, "state": {"running": {}}})
                }
            })
            .collect();
        json!({"metadata": {"name": name}, "spec": {"containers": specs},
               "status": {"containerStatuses": statuses}})
    }

    fn format(pods: &[Value], texts: &[&str]) -> String {
        let streams: Vec<(LogStream, String)> = log_streams(pods)
            .into_iter()
            .zip(texts.iter().map(|t| ended_with_newline(t.to_string())))
            .collect();
        format_logs(&streams)
    }

    #[test]
    fn endpoints_are_picked_by_name_or_named_in_the_error() {
        let endpoints = || {
            vec![
                Endpoint::new("client", 4222).expect("endpoint"),
                Endpoint::new("monitor", 8222).expect("endpoint"),
            ]
        };
        let found = pick_endpoint("Manifests", "nats", endpoints(), "monitor").expect("found");
        assert_eq!(found.port(), 8222);
        let missing = pick_endpoint("Manifests", "nats", endpoints(), "web").expect_err("web");
        assert_eq!(
            missing.to_string(),
            "Manifests->endpoint: nats has no endpoint web (it has: client, monitor)"
        );
        let none = pick_endpoint("Manifests", "nats", Vec::new(), "web").expect_err("none");
        assert_eq!(
            none.to_string(),
            "Manifests->endpoint: nats has no endpoint web (it has: none)"
        );
    }

    #[test]
    fn one_container_is_just_its_text() {
        assert_eq!(
            format(&[pod("nats-a", &["nats"], &[])], &["hello"]),
            "hello\n"
        );
        assert_eq!(format(&[pod("nats-a", &["nats"], &[])], &[""]), "");
    }

    #[test]
    fn no_pods_no_text() {
        assert_eq!(format(&[], &[]), "");
    }

    #[test]
    fn several_streams_get_headers_naming_containers_of_multi_container_pods() {
        let pods = [
            pod("nats-a", &["nats"], &[]),
            pod("nats-b", &["nats", "sidecar"], &[]),
        ];
        assert_eq!(
            format(&pods, &["a\n", "b", "c"]),
            "==> nats-a <==\na\n\n==> nats-b/nats <==\nb\n\n==> nats-b/sidecar <==\nc\n"
        );
    }

    #[test]
    fn a_crash_looping_container_shows_its_previous_instance_with_a_header() {
        let pods = [pod("nats-a", &["nats"], &["nats"])];
        let streams = log_streams(&pods);
        assert!(streams[0].previous);
        assert_eq!(
            format(&pods, &["panic: boom"]),
            "==> nats-a (previous) <==\npanic: boom\n"
        );
    }

    #[test]
    fn a_failed_stream_is_reported_inline() {
        let pods = [pod("nats-a", &["nats", "sidecar"], &[])];
        assert_eq!(
            format(&pods, &["(no log: container not started)\n", "ok"]),
            "==> nats-a/nats <==\n(no log: container not started)\n\n==> nats-a/sidecar <==\nok\n"
        );
    }
}
