//! What comb reads of a live object: a small typed projection of exactly the fields the steps
//! read, made once where the object arrives (a watch event, an answer of the API server) and
//! read as it is from then on. As kube's reflector keeps what `.modify()` left of an object,
//! and linkerd keeps `Service { cluster_ip, type_ }` of a Service, the rest (specs, Secret
//! data, the `managedFields` sets, other labels and annotations) is never kept.
//!
//! Who reads what:
//!
//! - the live status (`live_status`, reference §8.1): a workload's replicas and rollout counts,
//!   a Job's conditions, a CronJob's `suspend`, a Pod's phase, containers and scheduling, the
//!   owners and revisions that tell a rollout's old Pods;
//! - deploy's "unchanged" check and the digest comparison (`deploy`, `prune::changed_items`):
//!   the applied digest annotation, and per field manager whether it applied fields (comb's as
//!   a [`Fingerprint`] of its set, to tell the set still stands);
//! - prune and cleanup (`prune::delete_verdict`): the Comb's labels, the keep marks, whether it
//!   is being deleted, and the uid and resourceVersion a delete is conditional on;
//! - the ownership rule (`comb_api::ownership`), before any write or delete of an object that
//!   exists: its uid, the Comb's labels and the adoption annotation.
//!
//! Values are read as the reference (Perl) reads them (`replicas: "2"` is 2; `0`, `""` and
//! `"0"` are false). A field the steps read that is present with a shape no such reading
//! gives a value to (an object where a number belongs, a string where a list belongs) makes
//! the object [`Unprojectable`]: it is never read as if the field were missing.

use std::hash::{Hash as _, Hasher as _};

use comb_api::LabelKeys;
use comb_api::ownership::Holder;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize as _;
use serde_json::Value;

use crate::engine::values::{number_or, truthy};
pub use comb_api::managed_fields::FIELD_MANAGER;

/// The field manager of `comb stop` (replicas 0, suspend): the next deploy gives it back.
pub const STOP_MANAGER: &str = "comb-stop";
/// `helm.sh/resource-policy: keep`, Helm's mark of an object its release leaves in place.
pub const HELM_KEEP: (&str, &str) = ("helm.sh/resource-policy", "keep");

/// The annotation the deployment controller numbers a Deployment's ReplicaSets with.
pub const DEPLOYMENT_REVISION: &str = "deployment.kubernetes.io/revision";
/// The label a StatefulSet's Pods carry: the ControllerRevision they were made from.
pub const CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";
/// The label a DaemonSet's Pods carry: the template generation they were made from.
pub const POD_TEMPLATE_GENERATION: &str = "pod-template-generation";
/// The annotation the API server keeps on a DaemonSet: its template generation.
pub const DAEMONSET_TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

/// A value told from another by a hash, for comparisons within this process only: an applied
/// digest, a field manager's set of fields. Two different values hashing alike (odds of about
/// one in 2^64 per pair) would make a changed object look unchanged until its next change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint(u64);

impl Fingerprint {
    pub fn of(text: &str) -> Fingerprint {
        let mut hasher = std::hash::DefaultHasher::new();
        text.hash(&mut hasher);
        Fingerprint(hasher.finish())
    }
}

/// What comb knows of a live object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Projection {
    pub name: Box<str>,
    pub uid: Option<Box<str>>,
    pub resource_version: Option<Box<str>>,
    pub generation: Option<i64>,
    /// The values of the Comb name and namespace labels.
    pub comb: Option<Box<str>>,
    pub comb_namespace: Option<Box<str>>,
    /// The applied digest annotation.
    pub digest: Option<Fingerprint>,
    /// The keep marks it carries.
    pub keeps: Keeps,
    /// The value of `<labelPrefix>adopt`: the Comb (`NAMESPACE/NAME`) its writer handed it to.
    pub adopted_by: Option<Box<str>>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The owner reference marked `controller`: its kind and name.
    pub controller: Option<(Box<str>, Box<str>)>,
    /// It has owner references at all.
    pub owned: bool,
    /// What comb's field managers applied of it.
    pub managed: Managed,
    pub state: State,
}

/// A mark that keeps an object from being pruned or cleaned up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// `<labelPrefix>keep: "true"`.
    Comb,
    /// `helm.sh/resource-policy: keep`.
    Helm,
}

/// The keep marks an object carries: `<labelPrefix>keep: "true"`, [`HELM_KEEP`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Keeps {
    pub comb: bool,
    pub helm: bool,
}

/// What comb's field managers applied of an object's main resource (not of a subresource).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Managed {
    /// [`FIELD_MANAGER`]'s applied set of fields, when it applied any.
    pub comb: Option<Fingerprint>,
    /// [`STOP_MANAGER`] holds fields (a `comb stop`).
    pub stopped: bool,
}

/// The state of an object of a kind whose state the live status reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum State {
    /// Nothing of it but its metadata is read (a ConfigMap, a custom resource, ...).
    #[default]
    Other,
    /// A Deployment, StatefulSet, ReplicaSet or ReplicationController.
    Replicated(Box<Replicated>),
    DaemonSet(Box<DaemonSet>),
    Job(Box<Job>),
    CronJob {
        suspend: bool,
    },
    Pod(Box<Pod>),
    /// A Service: whether its `spec.selector` selects anything (a bridge replacing it takes the
    /// selector away, and the endpoints its controllers kept for it go too).
    Service {
        selects: bool,
    },
}

/// A workload with `spec.replicas`, and what its controller reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replicated {
    /// `spec.replicas`.
    pub replicas: Option<i64>,
    pub observed_generation: Option<i64>,
    /// `status.readyReplicas`, `status.replicas`, `status.updatedReplicas`.
    pub ready: Option<i64>,
    pub current: Option<i64>,
    pub updated: Option<i64>,
    /// A StatefulSet's `spec.updateStrategy`: `OnDelete`, or a partition above 0 (its
    /// controller then does not roll every Pod out by itself).
    pub rolls_by_itself: bool,
    /// A StatefulSet's `status.currentRevision` and `status.updateRevision`.
    pub current_revision: Option<Box<str>>,
    pub update_revision: Option<Box<str>>,
    /// A ReplicaSet's [`DEPLOYMENT_REVISION`] annotation.
    pub revision: Option<i64>,
}

/// A DaemonSet's counts and template generation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DaemonSet {
    pub observed_generation: Option<i64>,
    /// `status.desiredNumberScheduled`, `status.numberReady`, `status.updatedNumberScheduled`.
    pub desired: Option<i64>,
    pub ready: Option<i64>,
    pub updated: Option<i64>,
    /// The [`DAEMONSET_TEMPLATE_GENERATION`] annotation.
    pub template_generation: Option<Box<str>>,
}

/// A Job's progress.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Job {
    /// `spec.completions`, `status.active`, `status.succeeded`.
    pub completions: Option<i64>,
    pub active: Option<i64>,
    pub succeeded: Option<i64>,
    /// The `Failed` condition, when it is `True`.
    pub failed: Option<Said>,
    /// The `Complete` condition is `True`.
    pub complete: bool,
}

/// A reason and a message, as a condition or a container state gives them (non-empty only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Said {
    pub reason: Option<Box<str>>,
    pub message: Option<Box<str>>,
}

/// A Pod's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pod {
    /// `status.phase`, `status.reason`, `status.message` (non-empty only).
    pub phase: Option<Box<str>>,
    pub said: Said,
    pub init_containers: Box<[Container]>,
    pub containers: Box<[Container]>,
    /// The `PodScheduled` condition, when it is `False`.
    pub unscheduled: Option<Said>,
    /// The [`CONTROLLER_REVISION_HASH`] and [`POD_TEMPLATE_GENERATION`] labels.
    pub revision_hash: Option<Box<str>>,
    pub template_generation: Option<Box<str>>,
}

/// One container's status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Container {
    pub ready: bool,
    pub restarts: i64,
    pub state: ContainerState,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ContainerState {
    /// Running, or ended with exit code 0.
    #[default]
    Fine,
    Waiting(Said),
    /// Ended with a non-zero exit code.
    Failed {
        exit_code: i64,
        said: Said,
    },
}

/// Why an object does not project: the field the steps read, and what it holds instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} is {found}, where {wanted} belongs")]
pub struct Unprojectable {
    pub field: String,
    pub found: &'static str,
    pub wanted: &'static str,
}

type Projected<T> = Result<T, Unprojectable>;

impl Projection {
    /// The projection of `object` (JSON, as the API server sent it) of `api_version`/`kind`
    /// (list items come without their own); `keys` name comb's labels and annotations.
    pub fn of(
        api_version: &str,
        kind: &str,
        object: &Value,
        keys: &LabelKeys,
    ) -> Projected<Projection> {
        let metadata = match object.get("metadata") {
            None | Some(Value::Null) => ObjectMeta::default(),
            Some(metadata) => ObjectMeta::deserialize(metadata).map_err(|error| Unprojectable {
                field: format!("metadata ({error})"),
                found: shape(metadata),
                wanted: "object metadata",
            })?,
        };
        let label = |key: &str| -> Option<Box<str>> {
            metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(key))
                .map(|value| Box::from(value.as_str()))
        };
        let annotation = |key: &str| {
            metadata
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(key))
                .map(String::as_str)
        };
        let keeps = Keeps {
            comb: annotation(keys.keep_annotation()) == Some("true"),
            helm: annotation(HELM_KEEP.0) == Some(HELM_KEEP.1),
        };
        let owners = metadata.owner_references.as_deref().unwrap_or_default();
        let controller = owners
            .iter()
            .find(|owner| owner.controller == Some(true))
            .filter(|owner| !owner.kind.is_empty() && !owner.name.is_empty())
            .map(|owner| {
                (
                    Box::from(owner.kind.as_str()),
                    Box::from(owner.name.as_str()),
                )
            });
        let reader = Reader(object);
        let state = match (comb_api::group_of(api_version), kind) {
            ("apps", "Deployment" | "StatefulSet" | "ReplicaSet")
            | ("", "ReplicationController") => State::Replicated(Box::new(Replicated {
                replicas: reader.number("/spec/replicas")?,
                observed_generation: reader.number("/status/observedGeneration")?,
                ready: reader.number("/status/readyReplicas")?,
                current: reader.number("/status/replicas")?,
                updated: reader.number("/status/updatedReplicas")?,
                rolls_by_itself: kind != "StatefulSet"
                    || (reader.text("/spec/updateStrategy/type")?.as_deref() != Some("OnDelete")
                        && reader
                            .number("/spec/updateStrategy/rollingUpdate/partition")?
                            .is_none_or(|partition| partition <= 0)),
                current_revision: reader.text("/status/currentRevision")?,
                update_revision: reader.text("/status/updateRevision")?,
                revision: annotation(DEPLOYMENT_REVISION)
                    .map(|revision| perl_number(&Value::from(revision)))
                    .transpose()
                    .map_err(|found| unprojectable(DEPLOYMENT_REVISION, found, "a number"))?,
            })),
            ("apps", "DaemonSet") => State::DaemonSet(Box::new(DaemonSet {
                observed_generation: reader.number("/status/observedGeneration")?,
                desired: reader.number("/status/desiredNumberScheduled")?,
                ready: reader.number("/status/numberReady")?,
                updated: reader.number("/status/updatedNumberScheduled")?,
                template_generation: annotation(DAEMONSET_TEMPLATE_GENERATION)
                    .filter(|value| !value.is_empty())
                    .map(Box::from),
            })),
            ("batch", "Job") => State::Job(Box::new(job(&reader)?)),
            ("batch", "CronJob") => State::CronJob {
                suspend: reader.truth("/spec/suspend")?,
            },
            ("", "Service") => State::Service {
                selects: match reader.at("/spec/selector") {
                    None => false,
                    Some(Value::Object(selector)) => !selector.is_empty(),
                    Some(other) => {
                        return Err(unprojectable("spec.selector", shape(other), "a map"));
                    }
                },
            },
            ("", "Pod") => State::Pod(Box::new(Pod {
                revision_hash: label(CONTROLLER_REVISION_HASH).filter(|value| !value.is_empty()),
                template_generation: label(POD_TEMPLATE_GENERATION)
                    .filter(|value| !value.is_empty()),
                ..pod(&reader)?
            })),
            _ => State::Other,
        };
        Ok(Projection {
            name: Box::from(metadata.name.as_deref().unwrap_or_default()),
            uid: metadata.uid.as_deref().map(Box::from),
            resource_version: metadata.resource_version.as_deref().map(Box::from),
            generation: metadata.generation,
            comb: label(keys.name_label()),
            comb_namespace: label(keys.namespace_label()),
            digest: annotation(keys.digest_annotation()).map(Fingerprint::of),
            keeps,
            adopted_by: annotation(keys.adopt_annotation()).map(Box::from),
            deleting: metadata.deletion_timestamp.is_some(),
            controller,
            owned: !owners.is_empty(),
            managed: managed(&metadata),
            state,
        })
    }

    /// The first keep mark it carries, in the order prune honours them.
    pub fn keep(&self) -> Option<Keep> {
        if self.keeps.comb {
            Some(Keep::Comb)
        } else if self.keeps.helm {
            Some(Keep::Helm)
        } else {
            None
        }
    }

    /// What the ownership rule reads of it ([`comb_api::ownership`]).
    pub fn holder(&self) -> Holder<'_> {
        Holder {
            uid: self.uid.as_deref(),
            comb: self.comb.as_deref(),
            comb_namespace: self.comb_namespace.as_deref(),
            adopted_by: self.adopted_by.as_deref(),
        }
    }

    /// Whether comb's field manager applied fields of it.
    pub fn applied_by_comb(&self) -> bool {
        self.managed.comb.is_some()
    }

    /// Whether it carries the applied digest `digest`.
    pub fn carries_digest(&self, digest: &str) -> bool {
        self.digest == Some(Fingerprint::of(digest))
    }
}

/// What comb's field managers applied, by the `Apply` entries of the main resource.
fn managed(metadata: &ObjectMeta) -> Managed {
    let entries = metadata.managed_fields.as_deref().unwrap_or_default();
    let applied = |manager: &str| {
        entries.iter().find(|entry| {
            entry.manager.as_deref().unwrap_or_default() == manager
                && entry.operation.as_deref() == Some("Apply")
                && entry.subresource.as_deref().unwrap_or_default().is_empty()
        })
    };
    Managed {
        comb: applied(FIELD_MANAGER).map(|entry| {
            let fields = entry.fields_v1.as_ref().map(|fields| fields.0.to_string());
            Fingerprint::of(fields.as_deref().unwrap_or("null"))
        }),
        stopped: applied(STOP_MANAGER).is_some(),
    }
}

fn job(reader: &Reader<'_>) -> Projected<Job> {
    Ok(Job {
        completions: reader.number("/spec/completions")?,
        active: reader.number("/status/active")?,
        succeeded: reader.number("/status/succeeded")?,
        failed: condition(reader, "Failed", "True")?,
        complete: condition(reader, "Complete", "True")?.is_some(),
    })
}

fn pod(reader: &Reader<'_>) -> Projected<Pod> {
    let containers = |key: &str| -> Projected<Box<[Container]>> {
        reader
            .list(&format!("/status/{key}"))?
            .iter()
            .enumerate()
            .map(|(index, status)| {
                container(&Reader(status)).map_err(|e| e.at(&format!("status.{key}[{index}]")))
            })
            .collect()
    };
    Ok(Pod {
        phase: reader.text("/status/phase")?,
        said: Said {
            reason: reader.text("/status/reason")?,
            message: reader.text("/status/message")?,
        },
        init_containers: containers("initContainerStatuses")?,
        containers: containers("containerStatuses")?,
        unscheduled: condition(reader, "PodScheduled", "False")?,
        revision_hash: None,
        template_generation: None,
    })
}

/// What the first condition of `status.conditions` of type `wanted` with status `status` says.
fn condition(reader: &Reader<'_>, wanted: &str, status: &str) -> Projected<Option<Said>> {
    for (index, condition) in reader.list("/status/conditions")?.iter().enumerate() {
        let at = Reader(condition);
        let within = |error: Unprojectable| error.at(&format!("status.conditions[{index}]"));
        let found = at.text("/type").and_then(|kind| {
            Ok(kind.as_deref() == Some(wanted) && at.text("/status")?.as_deref() == Some(status))
        });
        if found.map_err(within)? {
            return Ok(Some(said(&at, "").map_err(within)?));
        }
    }
    Ok(None)
}

fn container(reader: &Reader<'_>) -> Projected<Container> {
    let state = if reader.at("/state/waiting").is_some() {
        ContainerState::Waiting(said(reader, "/state/waiting")?)
    } else if reader.at("/state/terminated").is_some() {
        match reader.number("/state/terminated/exitCode")? {
            None | Some(0) => ContainerState::Fine,
            Some(exit_code) => ContainerState::Failed {
                exit_code,
                said: said(reader, "/state/terminated")?,
            },
        }
    } else {
        ContainerState::Fine
    };
    Ok(Container {
        ready: reader.truth("/ready")?,
        restarts: reader.number("/restartCount")?.unwrap_or(0),
        state,
    })
}

/// The reason and message under `base` (a pointer; empty for the reader's own object).
fn said(reader: &Reader<'_>, base: &str) -> Projected<Said> {
    Ok(Said {
        reason: reader.text(&format!("{base}/reason"))?,
        message: reader.text(&format!("{base}/message"))?,
    })
}

/// Reads the fields of one JSON object the Perl way, refusing shapes that have no such value.
struct Reader<'a>(&'a Value);

impl Reader<'_> {
    fn at(&self, pointer: &str) -> Option<&Value> {
        self.0.pointer(pointer).filter(|value| !value.is_null())
    }

    /// A number (or numeric string, or boolean); `None` when missing or null.
    fn number(&self, pointer: &str) -> Projected<Option<i64>> {
        self.at(pointer)
            .map(perl_number)
            .transpose()
            .map_err(|found| unprojectable(&field_name(pointer), found, "a number"))
    }

    /// Perl truth of a scalar; missing and null are false.
    fn truth(&self, pointer: &str) -> Projected<bool> {
        match self.at(pointer) {
            Some(value @ (Value::Array(_) | Value::Object(_))) => Err(unprojectable(
                &field_name(pointer),
                shape(value),
                "a scalar",
            )),
            value => Ok(truthy(value)),
        }
    }

    /// A non-empty string; `None` when missing, null or empty.
    fn text(&self, pointer: &str) -> Projected<Option<Box<str>>> {
        match self.at(pointer) {
            None => Ok(None),
            Some(Value::String(text)) => Ok((!text.is_empty()).then(|| Box::from(text.as_str()))),
            Some(other) => Err(unprojectable(
                &field_name(pointer),
                shape(other),
                "a string",
            )),
        }
    }

    /// The items of a list; none when missing or null.
    fn list(&self, pointer: &str) -> Projected<&[Value]> {
        match self.at(pointer) {
            None => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(unprojectable(&field_name(pointer), shape(other), "a list")),
        }
    }
}

/// A scalar's number as [`number_or`] reads it; a list, an
/// object or a string that is no number has none.
fn perl_number(value: &Value) -> Result<i64, &'static str> {
    match value {
        Value::String(text) if text.trim().parse::<f64>().is_err() => Err("a string"),
        Value::Array(_) | Value::Object(_) => Err(shape(value)),
        scalar => Ok(number_or(Some(scalar), 0)),
    }
}

impl Unprojectable {
    /// The same, with the field named under `parent`.
    fn at(self, parent: &str) -> Unprojectable {
        let field = if self.field.is_empty() {
            parent.to_string()
        } else {
            format!("{parent}.{}", self.field)
        };
        Unprojectable { field, ..self }
    }
}

fn unprojectable(field: &str, found: &'static str, wanted: &'static str) -> Unprojectable {
    Unprojectable {
        field: field.to_string(),
        found,
        wanted,
    }
}

/// `/status/readyReplicas` as `status.readyReplicas`.
fn field_name(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

fn shape(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Which objects of a Comb a step reads: those carrying its name label, and its namespace
/// label too when `namespace` is given (the labels' keys are the layer's [`LabelKeys`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CombSelector {
    pub name: String,
    pub namespace: Option<String>,
}

impl CombSelector {
    /// The label selector the API server is asked with.
    pub fn label_selector(&self, keys: &LabelKeys) -> String {
        match &self.namespace {
            Some(namespace) => keys.label_selector(&self.name, namespace),
            None => keys.name_selector(&self.name),
        }
    }

    /// Whether `object` carries the labels selected.
    pub fn selects(&self, object: &Projection) -> bool {
        object.comb.as_deref() == Some(self.name.as_str())
            && self
                .namespace
                .as_deref()
                .is_none_or(|namespace| object.comb_namespace.as_deref() == Some(namespace))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn project(api_version: &str, kind: &str, object: Value) -> Projected<Projection> {
        Projection::of(api_version, kind, &object, &LabelKeys::default())
    }

    /// A Deployment as kube-apiserver returns it, comb's and the controller's fields in it.
    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "apps", "resourceVersion": "1017", "generation": 2,
                "uid": "a9c445c0-afb4-437f-93a0-000000001017",
                "labels": {"comb.internal/comb": "web", "comb.internal/comb-namespace": "apps",
                           "app.kubernetes.io/managed-by": "comb"},
                "annotations": {"comb.internal/applied-digest": "sha256:abc",
                                "deployment.kubernetes.io/revision": "2",
                                "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "managedFields": [
                    {"manager": "comb", "operation": "Apply", "apiVersion": "apps/v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                    {"manager": "kube-controller-manager", "operation": "Update",
                     "subresource": "status", "fieldsV1": {"f:status": {}}}]
            },
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "main"}]}}},
            "status": {"observedGeneration": 1, "replicas": 3, "readyReplicas": 2,
                       "updatedReplicas": 1, "conditions": []}
        })
    }

    #[test]
    fn a_deployment_projects_to_what_the_steps_read() {
        let projection = project("apps/v1", "Deployment", deployment()).unwrap();
        assert_eq!(
            projection,
            Projection {
                name: "web".into(),
                uid: Some("a9c445c0-afb4-437f-93a0-000000001017".into()),
                resource_version: Some("1017".into()),
                generation: Some(2),
                comb: Some("web".into()),
                comb_namespace: Some("apps".into()),
                digest: Some(Fingerprint::of("sha256:abc")),
                keeps: Keeps::default(),
                adopted_by: None,
                deleting: false,
                controller: None,
                owned: false,
                managed: Managed {
                    comb: Some(Fingerprint::of(r#"{"f:spec":{"f:replicas":{}}}"#)),
                    stopped: false,
                },
                state: State::Replicated(Box::new(Replicated {
                    replicas: Some(2),
                    observed_generation: Some(1),
                    ready: Some(2),
                    current: Some(3),
                    updated: Some(1),
                    rolls_by_itself: true,
                    current_revision: None,
                    update_revision: None,
                    revision: Some(2),
                })),
            }
        );
        assert!(projection.carries_digest("sha256:abc"));
        assert!(!projection.carries_digest("sha256:other"));
    }

    #[test]
    fn what_each_kind_keeps() {
        let keys = LabelKeys::default();
        let state = |api_version: &str, kind: &str, object: Value| {
            Projection::of(api_version, kind, &object, &keys)
                .unwrap()
                .state
        };
        let crash_looping = json!({
            "metadata": {"name": "web-1", "labels": {"pod-template-generation": "3"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "web-f6c8", "uid": "u", "controller": true}]},
            "spec": {"containers": [{"name": "main", "image": "web:1"}]},
            "status": {"phase": "Running",
                "initContainerStatuses": [{"name": "init", "ready": true, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
                "containerStatuses": [{"name": "main", "ready": false, "restartCount": "4",
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": ""}}}]}
        });
        let cases = [
            (
                "a Pod: its containers' states, its revision labels",
                state("v1", "Pod", crash_looping.clone()),
                State::Pod(Box::new(Pod {
                    phase: Some("Running".into()),
                    said: Said::default(),
                    init_containers: Box::new([Container {
                        ready: true,
                        restarts: 0,
                        state: ContainerState::Fine,
                    }]),
                    containers: Box::new([Container {
                        ready: false,
                        restarts: 4,
                        state: ContainerState::Waiting(Said {
                            reason: Some("CrashLoopBackOff".into()),
                            message: None,
                        }),
                    }]),
                    unscheduled: None,
                    revision_hash: None,
                    template_generation: Some("3".into()),
                })),
            ),
            (
                "a failed Job",
                state(
                    "batch/v1",
                    "Job",
                    json!({"spec": {"completions": 2}, "status": {"failed": 1, "conditions": [
                        {"type": "Complete", "status": "False"},
                        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                         "message": "too many"}]}}),
                ),
                State::Job(Box::new(Job {
                    completions: Some(2),
                    active: None,
                    succeeded: None,
                    failed: Some(Said {
                        reason: Some("BackoffLimitExceeded".into()),
                        message: Some("too many".into()),
                    }),
                    complete: false,
                })),
            ),
            (
                "a suspended CronJob (Perl truth)",
                state(
                    "batch/v1",
                    "CronJob",
                    json!({"spec": {"suspend": "1", "jobTemplate": {}}}),
                ),
                State::CronJob { suspend: true },
            ),
            (
                "a StatefulSet updated on delete",
                state(
                    "apps/v1",
                    "StatefulSet",
                    json!({"spec": {"replicas": 1, "updateStrategy": {"type": "OnDelete"}},
                           "status": {"currentRevision": "a", "updateRevision": "b"}}),
                ),
                State::Replicated(Box::new(Replicated {
                    replicas: Some(1),
                    rolls_by_itself: false,
                    current_revision: Some("a".into()),
                    update_revision: Some("b".into()),
                    ..Replicated::default()
                })),
            ),
            (
                "a Service that selects Pods",
                state(
                    "v1",
                    "Service",
                    json!({"spec": {"selector": {"app": "db"}, "ports": [{"port": 5432}]}}),
                ),
                State::Service { selects: true },
            ),
            (
                "a bridge: a Service without a selector",
                state(
                    "v1",
                    "Service",
                    json!({"spec": {"ports": [{"port": 5432}]}}),
                ),
                State::Service { selects: false },
            ),
            (
                "an empty selector selects nothing",
                state("v1", "Service", json!({"spec": {"selector": {}}})),
                State::Service { selects: false },
            ),
            (
                "a Secret: its data is never kept",
                state(
                    "v1",
                    "Secret",
                    json!({"metadata": {"name": "s"}, "data": {"password": "c2VjcmV0"}}),
                ),
                State::Other,
            ),
            (
                "a Deployment of another group is nothing comb reads",
                state(
                    "extensions/v1beta1",
                    "Deployment",
                    json!({"spec": {"replicas": 1}}),
                ),
                State::Other,
            ),
        ];
        for (what, projected, expected) in cases {
            assert_eq!(projected, expected, "{what}");
        }
        let pod = Projection::of("v1", "Pod", &crash_looping, &keys).unwrap();
        assert_eq!(
            pod.controller,
            Some(("ReplicaSet".into(), "web-f6c8".into()))
        );
        assert!(pod.owned);
    }

    #[test]
    fn marks_and_managers() {
        let keys = LabelKeys::default();
        let meta = |metadata: Value| {
            Projection::of("v1", "Service", &json!({"metadata": metadata}), &keys).unwrap()
        };
        let kept = meta(json!({"annotations": {"comb.internal/keep": "true",
                                               "helm.sh/resource-policy": "keep"}}));
        assert_eq!(kept.keep(), Some(Keep::Comb));
        assert_eq!(
            kept.keeps,
            Keeps {
                comb: true,
                helm: true
            }
        );
        let helm = meta(json!({"annotations": {"comb.internal/keep": "false",
                                               "helm.sh/resource-policy": "keep"}}));
        assert_eq!(helm.keep(), Some(Keep::Helm));
        let going = meta(json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}));
        assert!(going.deleting && going.keep().is_none() && going.digest.is_none());
        let handed = meta(json!({"annotations": {"comb.internal/adopt": "apps/web"}}));
        assert_eq!(handed.adopted_by.as_deref(), Some("apps/web"));
        let stopped = meta(json!({"managedFields": [
            {"manager": "comb", "operation": "Apply", "fieldsV1": {"f:spec": {}}},
            {"manager": "comb-stop", "operation": "Apply", "fieldsV1": {"f:spec": {}}},
            {"manager": "comb", "operation": "Apply", "subresource": "status"}]}));
        assert!(stopped.applied_by_comb() && stopped.managed.stopped);
        let updated_only = meta(json!({"managedFields": [
            {"manager": "comb", "operation": "Update", "fieldsV1": {"f:spec": {}}}]}));
        assert!(!updated_only.applied_by_comb());
    }

    #[test]
    fn a_field_read_with_a_shape_no_reading_gives_a_value_to_does_not_project() {
        let cases = [
            (
                "apps/v1",
                "Deployment",
                json!({"status": {"readyReplicas": {"n": 1}}}),
                "status.readyReplicas is an object, where a number belongs",
            ),
            (
                "apps/v1",
                "Deployment",
                json!({"spec": {"replicas": "two"}}),
                "spec.replicas is a string, where a number belongs",
            ),
            (
                "v1",
                "Pod",
                json!({"status": {"containerStatuses": {"main": {}}}}),
                "status.containerStatuses is an object, where a list belongs",
            ),
            (
                "v1",
                "Pod",
                json!({"status": {"containerStatuses": [{"restartCount": [1]}]}}),
                "status.containerStatuses[0].restartCount is a list, where a number belongs",
            ),
            (
                "batch/v1",
                "Job",
                json!({"status": {"conditions": [{"type": 5}]}}),
                "status.conditions[0].type is a number, where a string belongs",
            ),
            (
                "batch/v1",
                "CronJob",
                json!({"spec": {"suspend": {}}}),
                "spec.suspend is an object, where a scalar belongs",
            ),
            (
                "v1",
                "Service",
                json!({"spec": {"selector": ["app=db"]}}),
                "spec.selector is a list, where a map belongs",
            ),
        ];
        for (api_version, kind, object, message) in cases {
            assert_eq!(
                project(api_version, kind, object).unwrap_err().to_string(),
                message
            );
        }
        // What the steps do not read may hold anything.
        assert!(project("v1", "Service", json!({"status": {"readyReplicas": {}}})).is_ok());
        assert!(
            project(
                "apps/v1",
                "Deployment",
                json!({"status": {"replicas": "3"}})
            )
            .is_ok()
        );
        let labels = project("v1", "Service", json!({"metadata": {"labels": {"a": 1}}}));
        assert!(
            labels.unwrap_err().field.starts_with("metadata"),
            "labels are strings"
        );
    }

    #[test]
    fn selectors() {
        let keys = LabelKeys::default();
        let object = |labels: Value| {
            Projection::of(
                "v1",
                "Service",
                &json!({"metadata": {"labels": labels}}),
                &keys,
            )
            .unwrap()
        };
        let ours = object(json!({"comb.internal/comb": "db", "comb.internal/comb-namespace": "a"}));
        let by_name = CombSelector {
            name: "db".into(),
            namespace: None,
        };
        let by_both = CombSelector {
            namespace: Some("a".into()),
            ..by_name.clone()
        };
        assert!(by_name.selects(&ours) && by_both.selects(&ours));
        let elsewhere = object(json!({"comb.internal/comb": "db"}));
        assert!(by_name.selects(&elsewhere) && !by_both.selects(&elsewhere));
        assert_eq!(
            by_both.label_selector(&keys),
            "comb.internal/comb=db,comb.internal/comb-namespace=a"
        );
        assert_eq!(by_name.label_selector(&keys), "comb.internal/comb=db");
    }
}
