//! What the cluster shows of a local Comb right now (reference §8.1): a pure derivation from the
//! rendered items, their live objects and the Comb's pods.
//!
//! The caller reads the live objects (name label only, one list per resource id and namespace)
//! and the pods (both labels, only when [`needs_pods`] says so), then calls
//! [`derive_local_status`].

use comb_api::{CombUpstreamStatus, Phase, Reason};
use serde::Serialize;

use crate::engine::projection::{
    ContainerState, DaemonSet, Job, Pod, Projection, Replicated, Said, State,
};
use crate::engine::render::RenderedItem;
pub(crate) use crate::engine::values::{number_or, truthy};

/// Waiting reasons that will not pass by waiting: the phase is `Error`.
pub const FAILURE_REASONS: [&str; 8] = [
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// How bad a problem is: `Error` problems make the phase Error, others Pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Pending,
    Error,
}

/// One thing keeping the Comb from Running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub severity: Severity,
    pub reason: Reason,
    pub message: String,
}

impl Problem {
    pub fn pending(reason: Reason, message: String) -> Problem {
        Problem {
            severity: Severity::Pending,
            reason,
            message,
        }
    }
    /// A rendered item that is not live: pending `ResourcesMissing`, `<Kind> <name> is missing`.
    pub fn missing(item: &RenderedItem) -> Problem {
        Problem::pending(
            Reason::ResourcesMissing,
            format!("{} {} is missing", item.kind, item.name),
        )
    }
    pub fn error(reason: Reason, message: String) -> Problem {
        Problem {
            severity: Severity::Error,
            reason,
            message,
        }
    }
}

/// One pod of the Comb as the status shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PodState {
    pub name: String,
    pub phase: String,
    pub ready: bool,
    pub restarts: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What the cluster shows of a Comb now (reference §8), local or borrowing, in the shape
/// `comb status -o json` prints: `{phase, healthy, reason?, message?, pods, upstream?}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LiveStatus {
    /// `Running`, `Pending`, `Error`, `Stopped`, `NotDeployed`, or while borrowing also
    /// `Blocked`.
    pub phase: Phase,
    /// `phase == Running`; a borrowing Comb serves once its bridge stands and the upstream runs.
    pub healthy: bool,
    /// The first error-severity problem's reason, else the first problem's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// Every problem's message, joined with `"; "`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Sorted by name; always empty while borrowing (the pods are the upstream's).
    pub pods: Vec<PodState>,
    /// `status.upstream` as this observation would record it; only while borrowing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<CombUpstreamStatus>,
    /// A workload controller is rolling out the current spec (a `RolloutInProgress` problem,
    /// and no error): the Pods it is starting may come first among the problems, so the reason
    /// alone does not tell.
    #[serde(skip)]
    pub rolling_out: bool,
}

impl LiveStatus {
    /// A status with `phase` and one reason and message.
    pub fn single(phase: Phase, reason: Reason, message: &str, pods: Vec<PodState>) -> LiveStatus {
        LiveStatus {
            healthy: phase == Phase::Running,
            phase,
            reason: Some(reason),
            message: Some(message.to_string()),
            pods,
            upstream: None,
            rolling_out: false,
        }
    }

    /// The verdict of `problems`: Error if any is error-severity, Pending if any, else Running.
    pub fn from_problems(problems: &[Problem], pods: Vec<PodState>) -> LiveStatus {
        let first_error = problems.iter().find(|p| p.severity == Severity::Error);
        let phase = match (first_error, problems.is_empty()) {
            (Some(_), _) => Phase::Error,
            (None, false) => Phase::Pending,
            (None, true) => Phase::Running,
        };
        LiveStatus {
            healthy: phase == Phase::Running,
            phase,
            reason: first_error.or(problems.first()).map(|p| p.reason.clone()),
            message: (!problems.is_empty()).then(|| {
                problems
                    .iter()
                    .map(|p| p.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            }),
            pods,
            upstream: None,
            rolling_out: first_error.is_none()
                && problems
                    .iter()
                    .any(|p| p.reason == Reason::RolloutInProgress),
        }
    }
}

/// Whether the pods must be read: some workload item is live.
pub fn needs_pods(items: &[RenderedItem], live: &[Option<Projection>]) -> bool {
    items
        .iter()
        .zip(live)
        .any(|(item, live)| item.workload && live.is_some())
}

/// Whether the ReplicaSets of the Comb must be read: a Deployment is rolling out and a Pod of
/// some ReplicaSet fails, so whether that Pod is one the rollout replaces (its failure is not
/// the verdict) or one it starts (it is) depends on which ReplicaSet is the Deployment's
/// current one. Everywhere else the verdict needs no ReplicaSet, and none is read.
pub fn needs_replica_sets(
    items: &[RenderedItem],
    live: &[Option<Projection>],
    pods: &[Projection],
) -> bool {
    let deployment_rolls_out = observe(items, live)
        .into_iter()
        .filter(|(item, _)| item.group == "apps" && item.kind == "Deployment")
        .any(|(item, live)| {
            live.is_some_and(|live| rolls_out(workload_problem(item, live).as_ref()))
        });
    deployment_rolls_out
        && pods.iter().any(|pod| {
            !pod.deleting
                && controller_of(pod).is_some_and(|(kind, _)| kind == "ReplicaSet")
                && pod_state(pod)
                    .1
                    .is_some_and(|p| p.severity == Severity::Error)
        })
}

/// The live status of a local Comb. `live[i]` is the live object of `items[i]` (`None`: missing
/// or without the Comb's name label); `pods` are the Comb's pods (empty unless [`needs_pods`]);
/// `replica_sets` the Comb's ReplicaSets (empty unless [`needs_replica_sets`]).
pub fn derive_local_status(
    items: &[RenderedItem],
    live: &[Option<Projection>],
    pods: &[Projection],
    replica_sets: &[Projection],
) -> LiveStatus {
    if items.is_empty() {
        return LiveStatus::from_problems(&[], Vec::new());
    }
    let observed = observe(items, live);

    // What keeps each live workload from ready; those rolling out say which Pods they replace.
    let mut workload_problems = Vec::new();
    let mut rollouts = Vec::new();
    for &(item, live) in &observed {
        let Some(live) = live else { continue };
        let problem = workload_problem(item, live);
        if rolls_out(problem.as_ref()) {
            rollouts.extend(Rollout::of(item, live, replica_sets));
        }
        workload_problems.extend(problem);
    }

    let mut pod_states: Vec<(PodState, Option<Problem>)> = pods
        .iter()
        .map(|pod| {
            let (state, problem) = pod_state(pod);
            // The failure of a Pod on its way out is not the Comb's verdict: a rollout replaces
            // it (the crash loop an image fix ends), or it is being deleted.
            let replaced = || pod.deleting || rollouts.iter().any(|r| r.replaces(pod));
            let problem = problem.filter(|p| p.severity != Severity::Error || !replaced());
            (state, problem)
        })
        .collect();
    pod_states.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    let (pods, pod_problems): (Vec<PodState>, Vec<Option<Problem>>) =
        pod_states.into_iter().unzip();

    if observed.iter().all(|(_, live)| live.is_none()) {
        return LiveStatus::single(
            Phase::NotDeployed,
            Reason::NotDeployed,
            "not deployed",
            pods,
        );
    }
    if stopped(&observed) {
        return LiveStatus::single(Phase::Stopped, Reason::Stopped, "stopped", pods);
    }

    let mut problems: Vec<Problem> = observed
        .iter()
        .filter(|(_, live)| live.is_none())
        .map(|(item, _)| Problem::missing(item))
        .collect();
    problems.extend(pod_problems.into_iter().flatten());
    problems.extend(workload_problems);
    LiveStatus::from_problems(&problems, pods)
}

/// Each item with its live object (`None` past the end of `live`).
fn observe<'a>(
    items: &'a [RenderedItem],
    live: &'a [Option<Projection>],
) -> Vec<(&'a RenderedItem, Option<&'a Projection>)> {
    items
        .iter()
        .zip(
            live.iter()
                .map(Option::as_ref)
                .chain(std::iter::repeat(None)),
        )
        .collect()
}

/// Whether a workload's problem is that its controller is rolling out its current spec.
fn rolls_out(problem: Option<&Problem>) -> bool {
    problem.is_some_and(|p| p.reason == Reason::RolloutInProgress)
}

/// Which Pods of a workload being rolled out are already of the revision it rolls out, told
/// as its controller tells them.
#[derive(Debug)]
enum CurrentRevision<'a> {
    /// A Deployment's Pods belong to the ReplicaSets it controls (`owned`); the current one is
    /// the one of the newest revision, once its controller has seen the Deployment's spec
    /// (`None` before: none of its Pods runs that spec for sure).
    ReplicaSet {
        owned: Vec<&'a str>,
        current: Option<&'a str>,
    },
    /// A StatefulSet's or DaemonSet's current Pods carry this value in the revision label that
    /// `label` reads of a Pod (`controller-revision-hash`, `pod-template-generation`).
    Label {
        label: fn(&Pod) -> Option<&str>,
        value: &'a str,
    },
    /// Its controller has not told yet (a StatefulSet whose controller has not seen its spec):
    /// none of its Pods runs the current revision for sure.
    Unknown,
}

/// A workload of the Comb whose controller is rolling out its current spec.
#[derive(Debug)]
struct Rollout<'a> {
    kind: &'a str,
    name: &'a str,
    current: CurrentRevision<'a>,
}

impl<'a> Rollout<'a> {
    /// The rollout of a live workload `item` (a Deployment, StatefulSet or DaemonSet).
    fn of(
        item: &'a RenderedItem,
        live: &'a Projection,
        replica_sets: &'a [Projection],
    ) -> Option<Self> {
        let (kind, name) = (item.kind.as_str(), item.name.as_str());
        let current = match (item.group.as_str(), kind, &live.state) {
            ("apps", "Deployment", _) => {
                let owned: Vec<&Projection> = replica_sets
                    .iter()
                    .filter(|rs| controller_of(rs) == Some(("Deployment", name)))
                    .collect();
                let newest = owned.iter().copied().max_by_key(|rs| match &rs.state {
                    State::Replicated(replicated) => replicated.revision.unwrap_or(0),
                    _ => 0,
                });
                CurrentRevision::ReplicaSet {
                    current: newest
                        .filter(|_| seen_by_controller(live))
                        .map(|rs| &*rs.name),
                    owned: owned.iter().map(|rs| &*rs.name).collect(),
                }
            }
            // `status.updateRevision` is the revision of the spec its controller last saw.
            ("apps", "StatefulSet", State::Replicated(replicated)) => {
                match replicated.update_revision.as_deref() {
                    Some(value) if seen_by_controller(live) => CurrentRevision::Label {
                        label: |pod| pod.revision_hash.as_deref(),
                        value,
                    },
                    _ => CurrentRevision::Unknown,
                }
            }
            ("apps", "DaemonSet", State::DaemonSet(daemon_set)) => {
                match daemon_set.template_generation.as_deref() {
                    Some(value) => CurrentRevision::Label {
                        label: |pod| pod.template_generation.as_deref(),
                        value,
                    },
                    None => CurrentRevision::Unknown,
                }
            }
            ("apps", "StatefulSet" | "DaemonSet", _) => CurrentRevision::Unknown,
            _ => return None,
        };
        Some(Rollout {
            kind,
            name,
            current,
        })
    }

    /// Whether `pod` runs a revision this rollout replaces.
    fn replaces(&self, pod: &Projection) -> bool {
        let Some((owner_kind, owner)) = controller_of(pod) else {
            return false;
        };
        match &self.current {
            CurrentRevision::ReplicaSet { owned, current } => {
                owner_kind == "ReplicaSet" && owned.contains(&owner) && *current != Some(owner)
            }
            _ if (owner_kind, owner) != (self.kind, self.name) => false,
            CurrentRevision::Label { label, value } => {
                let revision = match &pod.state {
                    State::Pod(pod) => label(pod),
                    _ => None,
                };
                revision != Some(value)
            }
            CurrentRevision::Unknown => true,
        }
    }
}

/// The `status.observedGeneration` a workload's controller reports.
fn observed_generation(live: &Projection) -> Option<i64> {
    match &live.state {
        State::Replicated(replicated) => replicated.observed_generation,
        State::DaemonSet(daemon_set) => daemon_set.observed_generation,
        _ => None,
    }
}

/// Whether a workload's controller has seen its current spec (`status.observedGeneration`).
fn seen_by_controller(live: &Projection) -> bool {
    match (live.generation, observed_generation(live)) {
        (Some(generation), Some(observed)) => observed >= generation,
        (None, _) => true,
        (Some(_), None) => false,
    }
}

/// The kind and name of an object's controller (the owner reference marked `controller`).
fn controller_of(object: &Projection) -> Option<(&str, &str)> {
    object
        .controller
        .as_ref()
        .map(|(kind, name)| (&**kind, &**name))
}

/// As `stop` leaves a Comb: every live Deployment and StatefulSet at 0 replicas, every live
/// CronJob suspended, and at least one of them against its manifest.
fn stopped(observed: &[(&RenderedItem, Option<&Projection>)]) -> bool {
    let mut against_manifest = false;
    for (item, live) in observed {
        let Some(live) = live else { continue };
        match (item.group.as_str(), item.kind.as_str(), &live.state) {
            ("apps", "Deployment" | "StatefulSet", state) => {
                let replicas = match state {
                    State::Replicated(replicated) => replicated.replicas,
                    _ => None,
                };
                if replicas.unwrap_or(1) != 0 {
                    return false;
                }
                if number_or(item.manifest.pointer("/spec/replicas"), 1) != 0 {
                    against_manifest = true;
                }
            }
            ("batch", "CronJob", state) => {
                if !matches!(state, State::CronJob { suspend: true }) {
                    return false;
                }
                if !truthy(item.manifest.pointer("/spec/suspend")) {
                    against_manifest = true;
                }
            }
            _ => {}
        }
    }
    against_manifest
}

/// What keeps a live workload from ready: a failed or unfinished Job, a rollout, missing
/// replicas.
///
/// A rollout is a workload whose controller has not seen its current spec yet, or has not
/// finished rolling it out (kstatus's rules, which Flux and kpt use): `RolloutInProgress`, with a
/// message such as `Deployment web: 1 of 2 updated, 1 ready`. Ready counts alone would call the
/// old Pods healthy before the new ones exist. Judged only where a controller reports
/// (`status.observedGeneration`); an object no controller wrote is judged by its ready counts.
fn workload_problem(item: &RenderedItem, live: &Projection) -> Option<Problem> {
    let (kind, name) = (item.kind.as_str(), &item.name);
    // Ready and desired replicas, how far it is scaled below its manifest, and, where a rollout
    // is judged, how many replicas are updated and whether the rollout goes on.
    let (ready, desired, scaled_below, rollout) = match (item.group.as_str(), kind, &live.state) {
        ("batch", "Job", State::Job(job)) => return job_problem(name, job),
        ("batch", "Job", _) => return job_problem(name, &Job::default()),
        ("apps", "DaemonSet", state) => {
            let daemon_set = match state {
                State::DaemonSet(daemon_set) => daemon_set.as_ref(),
                _ => &DaemonSet::default(),
            };
            let desired = daemon_set.desired.unwrap_or(0);
            let updated = daemon_set.updated.unwrap_or(0);
            let ready = daemon_set.ready.unwrap_or(0);
            (ready, desired, None, Some((updated, updated < desired)))
        }
        ("", "ReplicationController", state)
        | ("apps", "Deployment" | "StatefulSet" | "ReplicaSet", state) => {
            let replicated = match state {
                State::Replicated(replicated) => replicated.as_ref(),
                _ => &Replicated::default(),
            };
            let scaled = replicated.replicas.unwrap_or(1);
            let wanted = number_or(item.manifest.pointer("/spec/replicas"), 1);
            // Scaling down is measured against the manifest; scaling up (by hand, by an
            // autoscaler) counts as the new desired.
            let (desired, scaled_below) = if scaled < wanted {
                (wanted, Some(scaled))
            } else {
                (scaled, None)
            };
            let updated = replicated.updated.unwrap_or(0);
            let rolling = match kind {
                // Old replicas still there, or fewer new ones than wanted.
                "Deployment" => updated < desired || replicated.current.unwrap_or(0) > updated,
                "StatefulSet" => {
                    let revisions_differ = matches!(
                        (replicated.current_revision.as_deref(), replicated.update_revision.as_deref()),
                        (Some(current), Some(update)) if current != update
                    );
                    replicated.rolls_by_itself && (revisions_differ || updated < desired)
                }
                _ => false,
            };
            // A Comb scaled down by `stop` is not rolling out: it waits to be deployed again.
            let rollout = scaled_below.is_none().then_some((updated, rolling));
            (
                replicated.ready.unwrap_or(0),
                desired,
                scaled_below,
                rollout,
            )
        }
        _ => return None,
    };
    if rollout.is_some() && !seen_by_controller(live) {
        let generation = live.generation.unwrap_or(0);
        return Some(Problem::pending(
            Reason::RolloutInProgress,
            format!("{kind} {name}: its controller has not seen generation {generation} yet"),
        ));
    }
    if let Some((updated, true)) = rollout
        && observed_generation(live).is_some()
    {
        return Some(Problem::pending(
            Reason::RolloutInProgress,
            format!("{kind} {name}: {updated} of {desired} updated, {ready} ready"),
        ));
    }
    (ready < desired).then(|| {
        let scaled = scaled_below
            .map(|scaled| format!(" (scaled to {scaled})"))
            .unwrap_or_default();
        Problem::pending(
            Reason::ReplicasNotReady,
            format!("{kind} {name}: {ready} of {desired} ready{scaled}"),
        )
    })
}

fn job_problem(name: &str, job: &Job) -> Option<Problem> {
    if let Some(failed) = &job.failed {
        let reason = failed
            .reason
            .as_deref()
            .map_or(Reason::JobFailed, Reason::from);
        let detail = failed
            .message
            .as_deref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        return Some(Problem::error(reason, format!("Job {name} failed{detail}")));
    }
    let complete = job.complete || job.succeeded.unwrap_or(0) >= job.completions.unwrap_or(1);
    (!complete).then(|| {
        Problem::pending(
            Reason::JobNotComplete,
            format!("Job {name} has not completed"),
        )
    })
}

/// A pod's state and, unless it is fine (or failed under a controller), its problem.
fn pod_state(projection: &Projection) -> (PodState, Option<Problem>) {
    let unknown = Pod::default();
    let pod = match &projection.state {
        State::Pod(pod) => pod.as_ref(),
        _ => &unknown,
    };
    let phase = pod.phase.as_deref().unwrap_or("Unknown").to_string();
    let all = || pod.init_containers.iter().chain(pod.containers.iter());
    let restarts = all().map(|container| container.restarts).sum();
    let ready = phase == "Running"
        && !pod.containers.is_empty()
        && pod.containers.iter().all(|container| container.ready);
    let mut state = PodState {
        name: projection.name.to_string(),
        phase,
        ready,
        restarts,
        reason: None,
        message: None,
    };
    if state.phase == "Succeeded" || ready {
        return (state, None);
    }

    // The first container that waits, or ended with a non-zero exit (completed init
    // containers are fine).
    let container = all().find_map(|container| match &container.state {
        ContainerState::Fine => None,
        trouble => Some(trouble),
    });
    let terminated = match container {
        Some(ContainerState::Failed { exit_code, said }) => Some((*exit_code, said)),
        _ => None,
    };
    let text = |value: &Option<Box<str>>| value.as_deref().map(str::to_string);

    let (severity, reason, message) = if state.phase == "Failed" {
        let reason = pod
            .said
            .reason
            .as_deref()
            .or_else(|| terminated.and_then(|(_, said)| said.reason.as_deref()))
            .unwrap_or("Failed");
        let message = text(&pod.said.message)
            .or_else(|| terminated.map(|(code, said)| exit_message(code, said)));
        // A failed pod of a controller is left to it.
        (
            (!projection.owned).then_some(Severity::Error),
            reason,
            message,
        )
    } else if let Some(condition) = &pod.unscheduled {
        (
            Some(Severity::Pending),
            condition.reason.as_deref().unwrap_or("Unschedulable"),
            text(&condition.message),
        )
    } else if let Some(ContainerState::Waiting(waiting)) = container {
        let reason = waiting.reason.as_deref().unwrap_or("Waiting");
        let severity = if FAILURE_REASONS.contains(&reason) {
            Severity::Error
        } else {
            Severity::Pending
        };
        (Some(severity), reason, text(&waiting.message))
    } else if let Some((code, said)) = terminated {
        (
            Some(Severity::Error),
            said.reason.as_deref().unwrap_or("Error"),
            Some(exit_message(code, said)),
        )
    } else if state.phase == "Unknown" {
        (
            Some(Severity::Error),
            pod.said.reason.as_deref().unwrap_or("Unknown"),
            text(&pod.said.message),
        )
    } else {
        let reason = if state.phase == "Pending" {
            "Pending"
        } else {
            "ContainersNotReady"
        };
        (Some(Severity::Pending), reason, None)
    };

    state.reason = Some(reason.to_string());
    state.message = message;
    let problem = severity.map(|severity| {
        let mut text = format!("Pod {}: {reason}", state.name);
        if let Some(message) = state.message.as_deref().filter(|m| !m.is_empty()) {
            text.push_str(&format!(": {message}"));
        }
        if state.restarts > 0 {
            text.push_str(&format!(" ({} restarts)", state.restarts));
        }
        Problem {
            severity,
            reason: Reason::from(reason),
            message: text,
        }
    });
    (state, problem)
}

/// `exit code <exitCode>` + `: <message>` when the container left one.
fn exit_message(code: i64, said: &Said) -> String {
    match said.message.as_deref() {
        Some(message) => format!("exit code {code}: {message}"),
        None => format!("exit code {code}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::context::test_context;
    use crate::engine::kinds::Scopes;
    use crate::engine::render::render_manifest;
    use comb_api::LabelKeys;
    use serde_json::{Value, json};

    // The table tests below give whole objects, as the API server sends them, with the verdicts
    // the derivation gave when it read those objects themselves; every one is projected first,
    // as every read is now, and must still give the same verdict.

    fn projected(api_version: &str, kind: &str, object: &Value) -> Projection {
        Projection::of(api_version, kind, object, &LabelKeys::default()).unwrap()
    }

    fn projected_live(items: &[RenderedItem], live: &[Option<Value>]) -> Vec<Option<Projection>> {
        items
            .iter()
            .zip(live)
            .map(|(item, live)| {
                live.as_ref()
                    .map(|live| projected(&item.api_version, &item.kind, live))
            })
            .collect()
    }

    fn projected_all(api_version: &str, kind: &str, objects: &[Value]) -> Vec<Projection> {
        objects
            .iter()
            .map(|object| projected(api_version, kind, object))
            .collect()
    }

    fn derive_local_status(
        items: &[RenderedItem],
        live: &[Option<Value>],
        pods: &[Value],
        replica_sets: &[Value],
    ) -> LiveStatus {
        super::derive_local_status(
            items,
            &projected_live(items, live),
            &projected_all("v1", "Pod", pods),
            &projected_all("apps/v1", "ReplicaSet", replica_sets),
        )
    }

    fn needs_pods(items: &[RenderedItem], live: &[Option<Value>]) -> bool {
        super::needs_pods(items, &projected_live(items, live))
    }

    fn needs_replica_sets(items: &[RenderedItem], live: &[Option<Value>], pods: &[Value]) -> bool {
        super::needs_replica_sets(
            items,
            &projected_live(items, live),
            &projected_all("v1", "Pod", pods),
        )
    }

    fn item(manifest: Value) -> RenderedItem {
        render_manifest(
            "NATS",
            &manifest,
            &test_context("nats", "platform", json!({})),
            &Scopes::default(),
        )
        .unwrap()
    }
    fn deployment(replicas: Option<i64>) -> RenderedItem {
        let mut spec = json!({"template": {"spec": {}}});
        if let Some(replicas) = replicas {
            spec["replicas"] = json!(replicas);
        }
        item(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nats"}, "spec": spec}),
        )
    }
    fn service() -> RenderedItem {
        item(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nats"}}))
    }
    fn of_kind(api_version: &str, kind: &str, name: &str, spec: Value) -> RenderedItem {
        item(
            json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec}),
        )
    }
    fn live_deployment(replicas: i64, ready: i64) -> Option<Value> {
        Some(json!({"spec": {"replicas": replicas}, "status": {"readyReplicas": ready}}))
    }
    fn ready_pod(name: &str) -> Value {
        json!({"metadata": {"name": name}, "status": {"phase": "Running",
               "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "state": {"running": {}}}]}})
    }
    fn pod(name: &str, status: Value) -> Value {
        json!({"metadata": {"name": name}, "status": status})
    }
    fn waiting(reason: &str, message: &str, restarts: i64) -> Value {
        json!({"phase": "Pending", "containerStatuses": [{"name": "c", "ready": false, "restartCount": restarts,
               "state": {"waiting": {"reason": reason, "message": message}}}]})
    }

    /// (phase, reason, message) of a derivation.
    fn verdict(status: &LiveStatus) -> (Phase, Option<&str>, Option<&str>) {
        (
            status.phase.clone(),
            status.reason.as_ref().map(Reason::as_str),
            status.message.as_deref(),
        )
    }

    #[test]
    fn verdicts() {
        let ok_deploy = || {
            (
                vec![deployment(None), service()],
                vec![live_deployment(1, 1), Some(json!({}))],
            )
        };
        type Case = (
            &'static str,
            Vec<RenderedItem>,
            Vec<Option<Value>>,
            Vec<Value>,
            (Phase, Option<&'static str>, Option<&'static str>),
        );
        let cases: Vec<Case> = vec![
            (
                "no items",
                vec![],
                vec![],
                vec![],
                (Phase::Running, None, None),
            ),
            (
                "nothing live",
                vec![deployment(None), service()],
                vec![None, None],
                vec![],
                (
                    Phase::NotDeployed,
                    Some("NotDeployed"),
                    Some("not deployed"),
                ),
            ),
            {
                let (items, live) = ok_deploy();
                (
                    "healthy",
                    items,
                    live,
                    vec![ready_pod("nats-a")],
                    (Phase::Running, None, None),
                )
            },
            (
                "a resource missing",
                vec![deployment(None), service()],
                vec![live_deployment(1, 1), None],
                vec![ready_pod("nats-a")],
                (
                    Phase::Pending,
                    Some("ResourcesMissing"),
                    Some("Service nats is missing"),
                ),
            ),
            (
                "stopped",
                vec![deployment(None), service()],
                vec![live_deployment(0, 0), Some(json!({}))],
                vec![],
                (Phase::Stopped, Some("Stopped"), Some("stopped")),
            ),
            (
                "replicas 0 in the manifest is at rest",
                vec![deployment(Some(0))],
                vec![live_deployment(0, 0)],
                vec![],
                (Phase::Running, None, None),
            ),
            (
                "a suspended CronJob against its manifest",
                vec![of_kind(
                    "batch/v1",
                    "CronJob",
                    "backup",
                    json!({"suspend": false}),
                )],
                vec![Some(json!({"spec": {"suspend": true}}))],
                vec![],
                (Phase::Stopped, Some("Stopped"), Some("stopped")),
            ),
            (
                "a CronJob suspended as rendered",
                vec![of_kind(
                    "batch/v1",
                    "CronJob",
                    "backup",
                    json!({"suspend": true}),
                )],
                vec![Some(json!({"spec": {"suspend": true}}))],
                vec![],
                (Phase::Running, None, None),
            ),
            (
                "one workload still running is not stopped",
                vec![
                    deployment(None),
                    of_kind("apps/v1", "StatefulSet", "store", json!({"replicas": 2})),
                ],
                vec![
                    live_deployment(0, 0),
                    Some(json!({"spec": {"replicas": 2}, "status": {"readyReplicas": 2}})),
                ],
                vec![],
                (
                    Phase::Pending,
                    Some("ReplicasNotReady"),
                    Some("Deployment nats: 0 of 1 ready (scaled to 0)"),
                ),
            ),
            (
                "scaled down by hand",
                vec![deployment(Some(3))],
                vec![live_deployment(1, 1)],
                vec![],
                (
                    Phase::Pending,
                    Some("ReplicasNotReady"),
                    Some("Deployment nats: 1 of 3 ready (scaled to 1)"),
                ),
            ),
            (
                "scaled up counts as desired",
                vec![deployment(Some(3))],
                vec![live_deployment(4, 3)],
                vec![],
                (
                    Phase::Pending,
                    Some("ReplicasNotReady"),
                    Some("Deployment nats: 3 of 4 ready"),
                ),
            ),
            (
                "a DaemonSet",
                vec![of_kind("apps/v1", "DaemonSet", "agent", json!({}))],
                vec![Some(
                    json!({"status": {"numberReady": 2, "desiredNumberScheduled": 3}}),
                )],
                vec![],
                (
                    Phase::Pending,
                    Some("ReplicasNotReady"),
                    Some("DaemonSet agent: 2 of 3 ready"),
                ),
            ),
            (
                "a failed Job",
                vec![of_kind("batch/v1", "Job", "init", json!({}))],
                vec![Some(
                    json!({"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}}),
                )],
                vec![],
                (
                    Phase::Error,
                    Some("BackoffLimitExceeded"),
                    Some("Job init failed: Job has reached the specified backoff limit"),
                ),
            ),
            (
                "a failed Job without a reason",
                vec![of_kind("batch/v1", "Job", "init", json!({}))],
                vec![Some(
                    json!({"status": {"conditions": [{"type": "Failed", "status": "True"}]}}),
                )],
                vec![],
                (Phase::Error, Some("JobFailed"), Some("Job init failed")),
            ),
            (
                "a Job still running",
                vec![of_kind("batch/v1", "Job", "init", json!({}))],
                vec![Some(
                    json!({"spec": {"completions": 2}, "status": {"succeeded": 1, "active": 1}}),
                )],
                vec![],
                (
                    Phase::Pending,
                    Some("JobNotComplete"),
                    Some("Job init has not completed"),
                ),
            ),
            (
                "a completed Job",
                vec![of_kind("batch/v1", "Job", "init", json!({}))],
                vec![Some(json!({"status": {"succeeded": 1}}))],
                vec![],
                (Phase::Running, None, None),
            ),
            {
                let (items, live) = ok_deploy();
                (
                    "CrashLoopBackOff",
                    items,
                    live,
                    vec![pod(
                        "nats-a",
                        waiting(
                            "CrashLoopBackOff",
                            "back-off 5m0s restarting failed container",
                            7,
                        ),
                    )],
                    (
                        Phase::Error,
                        Some("CrashLoopBackOff"),
                        Some(
                            "Pod nats-a: CrashLoopBackOff: back-off 5m0s restarting failed container (7 restarts)",
                        ),
                    ),
                )
            },
            {
                let (items, live) = ok_deploy();
                (
                    "ImagePullBackOff",
                    items,
                    live,
                    vec![pod("nats-a", waiting("ImagePullBackOff", "", 0))],
                    (
                        Phase::Error,
                        Some("ImagePullBackOff"),
                        Some("Pod nats-a: ImagePullBackOff"),
                    ),
                )
            },
            {
                let (items, live) = ok_deploy();
                (
                    "a container being created",
                    items,
                    live,
                    vec![pod("nats-a", waiting("ContainerCreating", "", 0))],
                    (
                        Phase::Pending,
                        Some("ContainerCreating"),
                        Some("Pod nats-a: ContainerCreating"),
                    ),
                )
            },
            {
                let (items, live) = ok_deploy();
                (
                    "unschedulable",
                    items,
                    live,
                    vec![pod(
                        "nats-a",
                        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}]}),
                    )],
                    (
                        Phase::Pending,
                        Some("Unschedulable"),
                        Some(
                            "Pod nats-a: Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.",
                        ),
                    ),
                )
            },
            {
                let (items, live) = ok_deploy();
                (
                    "a container that exited",
                    items,
                    live,
                    vec![pod(
                        "nats-a",
                        json!({"phase": "Running", "containerStatuses": [{"ready": false, "restartCount": 1, "state": {"terminated": {"exitCode": 1, "message": "boom"}}}]}),
                    )],
                    (
                        Phase::Error,
                        Some("Error"),
                        Some("Pod nats-a: Error: exit code 1: boom (1 restarts)"),
                    ),
                )
            },
            {
                let (items, live) = ok_deploy();
                (
                    "a failed bare pod",
                    items,
                    live,
                    vec![pod(
                        "nats-a",
                        json!({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}),
                    )],
                    (
                        Phase::Error,
                        Some("Evicted"),
                        Some("Pod nats-a: Evicted: The node was low on resource: memory."),
                    ),
                )
            },
            {
                let (items, live) = ok_deploy();
                let mut owned = pod(
                    "nats-a",
                    json!({"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]}),
                );
                owned["metadata"]["ownerReferences"] =
                    json!([{"kind": "ReplicaSet", "name": "nats-1"}]);
                (
                    "a failed pod of a controller is left to it",
                    items,
                    live,
                    vec![owned],
                    (Phase::Running, None, None),
                )
            },
            {
                let (items, live) = ok_deploy();
                (
                    "a pod in phase Unknown",
                    items,
                    live,
                    vec![pod(
                        "nats-a",
                        json!({"phase": "Unknown", "reason": "NodeLost"}),
                    )],
                    (Phase::Error, Some("NodeLost"), Some("Pod nats-a: NodeLost")),
                )
            },
            {
                let (items, live) = ok_deploy();
                (
                    "running, not ready",
                    items,
                    live,
                    vec![pod(
                        "nats-a",
                        json!({"phase": "Running", "containerStatuses": [{"ready": false, "restartCount": 0, "state": {"running": {}}}]}),
                    )],
                    (
                        Phase::Pending,
                        Some("ContainersNotReady"),
                        Some("Pod nats-a: ContainersNotReady"),
                    ),
                )
            },
            {
                let (items, live) = ok_deploy();
                (
                    "a pending pod",
                    items,
                    live,
                    vec![pod("nats-a", json!({"phase": "Pending"}))],
                    (Phase::Pending, Some("Pending"), Some("Pod nats-a: Pending")),
                )
            },
            {
                let (items, live) = ok_deploy();
                (
                    "a completed pod never counts",
                    items,
                    live,
                    vec![pod("nats-a", json!({"phase": "Succeeded"}))],
                    (Phase::Running, None, None),
                )
            },
            (
                "errors decide the reason, messages keep their order",
                vec![deployment(Some(2)), service()],
                vec![live_deployment(2, 1), None],
                vec![
                    pod("nats-b", waiting("CrashLoopBackOff", "", 3)),
                    pod("nats-a", waiting("ContainerCreating", "", 0)),
                ],
                (
                    Phase::Error,
                    Some("CrashLoopBackOff"),
                    Some(
                        "Service nats is missing; Pod nats-a: ContainerCreating; Pod nats-b: CrashLoopBackOff (3 restarts); Deployment nats: 1 of 2 ready",
                    ),
                ),
            ),
        ];
        for (what, items, live, pods, want) in cases {
            let status = derive_local_status(&items, &live, &pods, &[]);
            assert_eq!(verdict(&status), want, "{what}");
            assert_eq!(status.healthy, want.0 == Phase::Running, "{what}");
        }
    }

    #[test]
    fn pod_entries() {
        let init_done_then_waiting = pod(
            "nats-b",
            json!({"phase": "Pending",
            "initContainerStatuses": [{"restartCount": 2, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
            "containerStatuses": [{"ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
        );
        let status = derive_local_status(
            &[deployment(None)],
            &[live_deployment(1, 1)],
            &[init_done_then_waiting, ready_pod("nats-a")],
            &[],
        );
        assert_eq!(
            serde_json::to_value(&status.pods).unwrap(),
            json!([
                {"name": "nats-a", "phase": "Running", "ready": true, "restarts": 0},
                {"name": "nats-b", "phase": "Pending", "ready": false, "restarts": 3, "reason": "CrashLoopBackOff"}
            ])
        );
        assert_eq!(
            status.message.as_deref(),
            Some("Pod nats-b: CrashLoopBackOff (3 restarts)")
        );
    }

    #[test]
    fn pods_are_needed_only_for_live_workloads() {
        assert!(!needs_pods(
            &[deployment(None), service()],
            &[None, Some(json!({}))]
        ));
        assert!(needs_pods(
            &[deployment(None), service()],
            &[Some(json!({})), None]
        ));
    }

    #[test]
    fn a_rollout_is_told_even_behind_the_pods_it_starts() {
        let starting = Problem::pending(Reason::from("Pending"), "Pod web-x: Pending".into());
        let rollout = Problem::pending(
            Reason::RolloutInProgress,
            "Deployment web: 1 of 2 updated, 3 ready".into(),
        );
        let crashing = Problem {
            severity: Severity::Error,
            reason: Reason::from("CrashLoopBackOff"),
            message: "Pod web-x: CrashLoopBackOff".into(),
        };
        let status = LiveStatus::from_problems(&[starting.clone(), rollout.clone()], Vec::new());
        assert_eq!(status.reason, Some(Reason::from("Pending")));
        assert!(status.rolling_out);
        assert!(!LiveStatus::from_problems(&[starting], Vec::new()).rolling_out);
        assert!(!LiveStatus::from_problems(&[crashing, rollout], Vec::new()).rolling_out);
    }

    #[test]
    fn workloads_count_as_ready_only_when_their_rollout_is_done() {
        let ready_pods = || vec![ready_pod("a"), ready_pod("b")];
        let derive = |item: RenderedItem, live: Value| {
            let status = derive_local_status(&[item], &[Some(live)], &ready_pods(), &[]);
            (
                status.phase.clone(),
                status
                    .reason
                    .as_ref()
                    .map(Reason::as_str)
                    .map(str::to_string),
                status.message.clone(),
            )
        };
        let rolling = |message: &str| {
            (
                Phase::Pending,
                Some("RolloutInProgress".to_string()),
                Some(message.to_string()),
            )
        };
        let web = || of_kind("apps/v1", "Deployment", "web", json!({"replicas": 2}));
        // The old Pods are still ready and counted; one new one is there.
        assert_eq!(
            derive(
                web(),
                json!({"metadata": {"generation": 2}, "spec": {"replicas": 2},
                       "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1,
                                  "readyReplicas": 2, "availableReplicas": 2}})
            ),
            rolling("Deployment web: 1 of 2 updated, 2 ready")
        );
        // The edit is not seen yet: the status is the old spec's.
        assert_eq!(
            derive(
                web(),
                json!({"metadata": {"generation": 3}, "spec": {"replicas": 2},
                       "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                                  "readyReplicas": 2, "availableReplicas": 2}})
            ),
            rolling("Deployment web: its controller has not seen generation 3 yet")
        );
        // Done: every replica new and ready.
        assert_eq!(
            derive(
                web(),
                json!({"metadata": {"generation": 3}, "spec": {"replicas": 2},
                       "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2,
                                  "readyReplicas": 2, "availableReplicas": 2}})
            ),
            (Phase::Running, None, None)
        );
        let db = |strategy: Value| {
            of_kind(
                "apps/v1",
                "StatefulSet",
                "db",
                json!({"replicas": 2, "updateStrategy": strategy}),
            )
        };
        let db_live = |strategy: Value| {
            json!({"metadata": {"generation": 2}, "spec": {"replicas": 2, "updateStrategy": strategy},
                   "status": {"observedGeneration": 2, "replicas": 2, "readyReplicas": 2,
                              "updatedReplicas": 1, "currentRevision": "db-1", "updateRevision": "db-2"}})
        };
        assert_eq!(
            derive(db(json!({})), db_live(json!({}))),
            rolling("StatefulSet db: 1 of 2 updated, 2 ready")
        );
        // OnDelete waits for someone to delete the Pods: not a rollout comb waits for.
        let on_delete = json!({"type": "OnDelete"});
        assert_eq!(
            derive(db(on_delete.clone()), db_live(on_delete)).0,
            Phase::Running
        );
        assert_eq!(
            derive(
                of_kind("apps/v1", "DaemonSet", "agent", json!({})),
                json!({"metadata": {"generation": 4},
                       "status": {"observedGeneration": 4, "desiredNumberScheduled": 2, "numberReady": 2,
                                  "updatedNumberScheduled": 1, "numberAvailable": 2}})
            ),
            rolling("DaemonSet agent: 1 of 2 updated, 2 ready")
        );
    }

    /// Deployment `web` (1 replica) at `generation`, as its controller last reported it, as a
    /// watch's copy holds it (no Pod template spec).
    fn live_web(generation: i64, status: Value) -> Option<Value> {
        Some(
            json!({"metadata": {"name": "web", "generation": generation},
                    "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "web"}}}},
                    "status": status}),
        )
    }
    /// ReplicaSet `web-<hash>` of Deployment `web`, of `revision`.
    fn web_replica_set(hash: &str, revision: &str) -> Value {
        json!({"metadata": {"name": format!("web-{hash}"),
                            "labels": {"app": "web", "pod-template-hash": hash},
                            "annotations": {"deployment.kubernetes.io/revision": revision},
                            "ownerReferences": [{"kind": "Deployment", "name": "web", "controller": true}]},
               "spec": {"replicas": 1}})
    }
    /// Pod `name` controlled by `owner` (`Kind/name`), with `labels` and `status`.
    fn owned_pod(name: &str, owner: &str, labels: Value, status: Value) -> Value {
        let (kind, owner) = owner.split_once('/').unwrap();
        json!({"metadata": {"name": name, "labels": labels,
                            "ownerReferences": [{"kind": kind, "name": owner, "controller": true}]},
               "status": status})
    }
    fn crashing() -> Value {
        waiting(
            "CrashLoopBackOff",
            "back-off 10s restarting failed container",
            2,
        )
    }
    fn gated() -> Value {
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
               "reason": "SchedulingGated", "message": "Scheduling is blocked due to non-empty scheduling gates"}]})
    }

    #[test]
    fn a_rollout_leaves_the_failures_of_the_pods_it_replaces_to_it() {
        let web = || of_kind("apps/v1", "Deployment", "web", json!({"replicas": 1}));
        // The image fix is rolling out: a new Pod is there, not ready; the old one still runs.
        let fixing = |generation: i64| {
            live_web(
                generation,
                json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1}),
            )
        };
        // Revisions count, not names nor order: the new one sorts first.
        let old_rs = web_replica_set("old", "9");
        let new_rs = web_replica_set("new", "10");
        let old_pod = |status: Value| {
            owned_pod(
                "web-old-a",
                "ReplicaSet/web-old",
                json!({"pod-template-hash": "old"}),
                status,
            )
        };
        let new_pod = |status: Value| {
            owned_pod(
                "web-new-b",
                "ReplicaSet/web-new",
                json!({"pod-template-hash": "new"}),
                status,
            )
        };
        let crash = |pod: &str| {
            format!(
                "Pod {pod}: CrashLoopBackOff: back-off 10s restarting failed container (2 restarts)"
            )
        };
        let gated_message = "Pod web-new-b: SchedulingGated: Scheduling is blocked due to non-empty scheduling gates";
        let rolling = "Deployment web: 1 of 1 updated, 0 ready";

        type Case = (
            &'static str,
            RenderedItem,
            Option<Value>,
            Vec<Value>,
            Vec<Value>,
            (Phase, Option<&'static str>, Option<String>),
        );
        let cases: Vec<Case> = vec![
            (
                "the old Pod crashes, the new one waits: the rollout is the verdict",
                web(),
                fixing(2),
                vec![old_pod(crashing()), new_pod(gated())],
                vec![old_rs.clone(), new_rs.clone()],
                (
                    Phase::Pending,
                    Some("SchedulingGated"),
                    Some(format!("{gated_message}; {rolling}")),
                ),
            ),
            (
                "the new Pod crashes: Error, naming it",
                web(),
                fixing(2),
                vec![old_pod(crashing()), new_pod(crashing())],
                vec![old_rs.clone(), new_rs.clone()],
                (
                    Phase::Error,
                    Some("CrashLoopBackOff"),
                    Some(format!("{}; {rolling}", crash("web-new-b"))),
                ),
            ),
            (
                "an edit its controller has not seen: no ReplicaSet has the new template yet",
                web(),
                fixing(3),
                vec![old_pod(crashing())],
                vec![old_rs.clone()],
                (
                    Phase::Pending,
                    Some("RolloutInProgress"),
                    Some(
                        "Deployment web: its controller has not seen generation 3 yet".to_string(),
                    ),
                ),
            ),
            (
                "its controller has not seen the edit: no Pod runs it for sure",
                web(),
                fixing(3),
                vec![old_pod(crashing()), new_pod(crashing())],
                vec![old_rs.clone(), new_rs.clone()],
                (
                    Phase::Pending,
                    Some("RolloutInProgress"),
                    Some(
                        "Deployment web: its controller has not seen generation 3 yet".to_string(),
                    ),
                ),
            ),
            (
                "the ReplicaSets were not read: every failure counts",
                web(),
                fixing(2),
                vec![old_pod(crashing()), new_pod(gated())],
                vec![],
                (
                    Phase::Error,
                    Some("CrashLoopBackOff"),
                    Some(format!(
                        "{gated_message}; {}; {rolling}",
                        crash("web-old-a")
                    )),
                ),
            ),
            (
                "a ReplicaSet of another Deployment is not this rollout's",
                web(),
                fixing(2),
                vec![owned_pod(
                    "api-x",
                    "ReplicaSet/api-old",
                    json!({}),
                    crashing(),
                )],
                vec![{
                    let mut other = web_replica_set("old", "1");
                    other["metadata"]["name"] = json!("api-old");
                    other["metadata"]["ownerReferences"][0]["name"] = json!("api");
                    other
                }],
                (
                    Phase::Error,
                    Some("CrashLoopBackOff"),
                    Some(format!("{}; {rolling}", crash("api-x"))),
                ),
            ),
            (
                "no rollout: the Pods crash as they are",
                web(),
                live_web(
                    1,
                    json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1}),
                ),
                vec![old_pod(crashing())],
                vec![old_rs.clone()],
                (
                    Phase::Error,
                    Some("CrashLoopBackOff"),
                    Some(format!(
                        "{}; Deployment web: 0 of 1 ready",
                        crash("web-old-a")
                    )),
                ),
            ),
            (
                "done, the old Pod still terminating",
                web(),
                live_web(
                    2,
                    json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
                           "readyReplicas": 1}),
                ),
                vec![
                    {
                        let mut pod = old_pod(crashing());
                        pod["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:02:00Z");
                        pod
                    },
                    new_pod(json!({"phase": "Running", "containerStatuses": [
                        {"ready": true, "restartCount": 0, "state": {"running": {}}}]})),
                ],
                vec![],
                (Phase::Running, None, None),
            ),
        ];
        for (what, item, live, pods, replica_sets, want) in cases {
            let status = derive_local_status(&[item], &[live], &pods, &replica_sets);
            assert_eq!(
                (
                    status.phase.clone(),
                    status.reason.as_ref().map(Reason::as_str),
                    status.message.clone()
                ),
                want,
                "{what}"
            );
            // The old Pod is still shown as it is.
            assert_eq!(status.pods.len(), pods.len(), "{what}");
        }
    }

    #[test]
    fn statefulsets_and_daemonsets_tell_their_pods_by_revision() {
        let db = || of_kind("apps/v1", "StatefulSet", "db", json!({"replicas": 2}));
        let live_db = |observed: i64| {
            Some(
                json!({"metadata": {"generation": 2}, "spec": {"replicas": 2},
                        "status": {"observedGeneration": observed, "replicas": 2, "readyReplicas": 0,
                                   "updatedReplicas": 1, "currentRevision": "db-1",
                                   "updateRevision": "db-2"}}),
            )
        };
        let db_pod = |name: &str, revision: &str, status: Value| {
            owned_pod(
                name,
                "StatefulSet/db",
                json!({"controller-revision-hash": revision}),
                status,
            )
        };
        let agent = || of_kind("apps/v1", "DaemonSet", "agent", json!({}));
        let live_agent = || {
            Some(json!({"metadata": {"generation": 4,
                                     "annotations": {"deprecated.daemonset.template.generation": "3"}},
                        "status": {"observedGeneration": 4, "desiredNumberScheduled": 2,
                                   "numberReady": 0, "updatedNumberScheduled": 1}}))
        };
        let agent_pod = |name: &str, generation: &str, status: Value| {
            owned_pod(
                name,
                "DaemonSet/agent",
                json!({"pod-template-generation": generation}),
                status,
            )
        };
        let cases = [
            (
                "a StatefulSet's old Pod crashes",
                db(),
                live_db(2),
                vec![
                    db_pod("db-0", "db-1", crashing()),
                    db_pod("db-1", "db-2", gated()),
                ],
                Phase::Pending,
            ),
            (
                "a StatefulSet's new Pod crashes",
                db(),
                live_db(2),
                vec![
                    db_pod("db-0", "db-2", crashing()),
                    db_pod("db-1", "db-1", gated()),
                ],
                Phase::Error,
            ),
            (
                "a StatefulSet whose controller has not seen its spec: its revision is not told yet",
                db(),
                live_db(1),
                vec![db_pod("db-0", "db-2", crashing())],
                Phase::Pending,
            ),
            (
                "a Pod of another StatefulSet",
                db(),
                live_db(2),
                vec![owned_pod(
                    "cache-0",
                    "StatefulSet/cache",
                    json!({"controller-revision-hash": "cache-1"}),
                    crashing(),
                )],
                Phase::Error,
            ),
            (
                "a DaemonSet's old Pod crashes",
                agent(),
                live_agent(),
                vec![agent_pod("agent-a", "2", crashing())],
                Phase::Pending,
            ),
            (
                "a DaemonSet's new Pod crashes",
                agent(),
                live_agent(),
                vec![agent_pod("agent-a", "3", crashing())],
                Phase::Error,
            ),
        ];
        for (what, item, live, pods, want) in cases {
            let status = derive_local_status(&[item], &[live], &pods, &[]);
            assert_eq!(status.phase, want, "{what}: {:?}", status.message);
        }
    }

    #[test]
    fn replica_sets_are_read_only_when_a_rollout_meets_a_failing_pod() {
        let web = || {
            vec![of_kind(
                "apps/v1",
                "Deployment",
                "web",
                json!({"replicas": 1}),
            )]
        };
        let rolling = || {
            vec![live_web(
                2,
                json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1}),
            )]
        };
        let settled = || {
            vec![live_web(
                2,
                json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1}),
            )]
        };
        let of_replica_set =
            |status: Value| owned_pod("web-a", "ReplicaSet/web-old", json!({}), status);
        let cases = [
            (
                "a rollout and a crashing Pod",
                rolling(),
                vec![of_replica_set(crashing())],
                true,
            ),
            (
                "no rollout",
                settled(),
                vec![of_replica_set(crashing())],
                false,
            ),
            (
                "only pending Pods",
                rolling(),
                vec![of_replica_set(gated())],
                false,
            ),
            (
                "the crashing Pod is being deleted anyway",
                rolling(),
                vec![{
                    let mut pod = of_replica_set(crashing());
                    pod["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
                    pod
                }],
                false,
            ),
            (
                "a bare crashing Pod",
                rolling(),
                vec![pod("web-a", crashing())],
                false,
            ),
        ];
        for (what, live, pods, want) in cases {
            assert_eq!(needs_replica_sets(&web(), &live, &pods), want, "{what}");
        }
    }
}
