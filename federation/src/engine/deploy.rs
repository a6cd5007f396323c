//! Deploy (reference §4.3) and the execution of a prune plan (§6.7).

use std::borrow::Cow;

use comb_api::ownership::{Ownership, Recorded};
use comb_api::{LabelKeys, ManagedObject};
use serde_json::Value;

use crate::engine::cache::AsApplied;
use crate::engine::context::CombContext;
use crate::engine::kinds::{ExistingTreatment, ScopeLookup, existing_treatment};
use crate::engine::kube_ops::{CONFLICT_ATTEMPTS, KubeOps, is_conflict, unchanged_since};
use crate::engine::observe::{LiveObjects, fetch_live};
use crate::engine::ownership::{Claim, refusal, with_live_keep_marks};
use crate::engine::projection::{Fingerprint, Projection, State};
use crate::engine::prune::{
    DeleteVerdict, OrphanFate, PruneOutcome, PrunePlan, delete_verdict, plan_prune, union,
};
use crate::engine::render::{RenderedItem, TRIGGER_TIME_ANNOTATION};
use crate::error::{Error, Result};

/// Applies rendered items in manifest order and returns the stored objects.
///
/// Writes only what is the Comb's and only what changes. Each item's object, where it exists,
/// is the Comb's by its `record` (the Comb's `managedResources`) or an adoption
/// ([`comb_api::ownership`]), or the deploy stops there with [`Error::NotOwned`] as its source,
/// the object untouched. An item whose live object stands as its apply would leave it
/// ([`unchanged`]) is not written at all; every other one is applied server-side
/// ([`KubeOps::ensure`], which makes a new object so that it cannot take over one made
/// meanwhile), leaving what other managers own alone: a restart's annotation (written by
/// [`RESTART_MANAGER`](crate::engine::kube_ops::RESTART_MANAGER), so an update neither undoes
/// a restart nor rolls the pods again), the deployment controller's revision, and a keep mark
/// someone put on the object ([`with_live_keep_marks`]). `live` is what the caller already read
/// for these items (reconcile has read all of them); without it they are read here, one list
/// per resource type and namespace.
///
/// The first failure stops the deploy: later items are never tried, and the error
/// ([`Error::Deploy`]) holds what was stored before it.
pub async fn deploy(
    ops: &KubeOps,
    ctx: &CombContext,
    items: &[RenderedItem],
    live: Option<&LiveObjects>,
    record: &[ManagedObject],
) -> Result<Vec<Projection>> {
    let live = match live {
        Some(live) => Cow::Borrowed(live),
        None => Cow::Owned(
            fetch_live(ops, ctx, items)
                .await
                .map_err(|error| Error::Deploy {
                    message: format!(
                        "reading the live objects failed: {}",
                        error.to_string().trim_end()
                    ),
                    applied: Vec::new(),
                    source: None,
                })?,
        ),
    };
    let kept = [restart_path(ctx.settings.labels.restart_annotation())];
    let mut applied: Vec<Projection> = Vec::with_capacity(items.len());
    let mut unselected = Vec::new();
    for (index, rendered) in items.iter().enumerate() {
        let failed = |applied: &[Projection], what: &str, error: Error| Error::Deploy {
            message: format!(
                "{what} {} {}: {}",
                rendered.kind,
                rendered.name,
                error.to_string().trim_end()
            ),
            applied: stored_identities(&items[..applied.len()], applied),
            source: Some(Box::new(error)),
        };
        let resource = rendered.resource();
        let claim = Claim::new(&ctx.namespace, &ctx.name, record, &resource);
        let mut live_object = live.get(index).and_then(Option::clone);
        if let Some(object) = &live_object
            && let Ownership::NotOwned(why) = claim.decide(object)
        {
            // Who wrote it is in the whole object only; the refusal is worth the read.
            let whole = ops.get_whole(&resource).await.ok().flatten();
            let keys = &ctx.settings.labels;
            let refused = Error::NotOwned(refusal(&resource, &why, whole.as_ref(), keys, &claim));
            return Err(failed(&applied, "ensure", refused));
        }
        // The keep marks on the object win over the manifest's own (ensure holds to that too,
        // for an object it meets).
        let kept_marks = live_object
            .as_ref()
            .and_then(|object| {
                with_live_keep_marks(&rendered.manifest, object, &ctx.settings.labels)
            })
            .map(|manifest| RenderedItem {
                manifest,
                ..rendered.clone()
            });
        let item = kept_marks.as_ref().unwrap_or(rendered);
        if let Some(before) = &live_object
            && loses_its_selector(item, before)
        {
            unselected.push(rendered);
        }
        if let Some(object) = &live_object
            && unchanged_since_apply(item, object, ops.as_applied(&resource).as_ref())
        {
            applied.push(object.clone());
            continue;
        }
        // Another digest, a stop's fields, a Job to create anew, or not comb's yet: no field of
        // the whole object would make it stand, so it is applied without reading it (an edit's
        // apply goes out at once). A copy the watch has not brought up to date costs at worst an
        // apply that changes nothing, as the read would have cost a request.
        if let Some(object) = &live_object
            && stands_applied(item, object)
        {
            // What comb knows of it cannot tell every field: the whole object, read once; then
            // comb's fields are remembered as standing.
            let whole = ops
                .get_whole(&resource)
                .await
                .map_err(|error| failed(&applied, "get", error))?;
            live_object = None;
            if let Some(whole) = whole {
                let object = ops
                    .project(&item.api_version, &item.kind, &whole)
                    .map_err(|error| failed(&applied, "get", error))?;
                if unchanged(item, &whole, &object) && claim.decide(&object).is_owned() {
                    ops.stands_as_applied(&resource, &object, &item.digest);
                    applied.push(object);
                    continue;
                }
                live_object = Some(object);
            }
        }
        let kept: &[Vec<String>] = if item.keeps_restarts() { &kept } else { &[] };
        let stored = ops
            .ensure(&item.manifest, live_object.as_ref(), kept, &claim)
            .await
            .map_err(|error| failed(&applied, "ensure", error))?;
        ops.stands_as_applied(&resource, &stored, &item.digest);
        applied.push(stored);
    }
    // Once the bridge's own EndpointSlices are written too.
    for service in unselected {
        if let Err(error) = forget_selected_endpoints(ops, service).await {
            tracing::warn!(
                comb = %ctx.name, namespace = %ctx.namespace, service = %service.name, %error,
                "the endpoints of the Service's old selector stay: part of its traffic still goes to the Pods it selected"
            );
        }
    }
    Ok(applied)
}

/// The identities of `items` recorded with the uids of their stored objects (`stored[i]` is
/// `items[i]`'s): what a Comb's `managedResources` holds of what it wrote.
pub fn stored_identities(items: &[RenderedItem], stored: &[Projection]) -> Vec<ManagedObject> {
    items
        .iter()
        .zip(stored)
        .map(|(item, object)| item.resource().with_uid(object.uid.as_deref()))
        .collect()
}

/// What a deploy of `items` would make anew, written into the Comb's record (as entries
/// without a uid) before it is made: the write-ahead that keeps a controller killed between
/// making an object and recording its uid from losing it (docs/adr/0004-ownership.md). After
/// such a kill the object carries both of the Comb's labels and its identity is in the record,
/// so it is the Comb's by that record ([`Ownership::RecordedBefore`]) and the next step records
/// its uid; without the write-ahead it would be `ResourceNotOwned` until a person handed it back.
///
/// An item is made anew when it has no live object, or its Job is deleted and created again.
/// Items from the first one the deploy would refuse (an object that is not the Comb's) on are
/// left out: the deploy stops there and makes none of them. So is an identity the record
/// already holds without a uid: written ahead before, or by an older comb.
pub fn made_anew(
    items: &[RenderedItem],
    live: &LiveObjects,
    record: &[ManagedObject],
    ctx: &CombContext,
) -> Vec<ManagedObject> {
    let mut ahead = Vec::new();
    for (item, object) in items.iter().zip(live) {
        let resource = item.resource();
        let recreated = match object {
            None => true,
            Some(object) => {
                let claim = Claim::new(&ctx.namespace, &ctx.name, record, &resource);
                if !claim.decide(object).is_owned() {
                    break;
                }
                existing_treatment(&item.api_version, &item.kind, object)
                    == ExistingTreatment::Recreate
            }
        };
        if recreated && comb_api::ownership::recorded_in(record, &resource) != Recorded::WithoutUid
        {
            ahead.push(resource.with_uid(None));
        }
    }
    ahead
}

/// The controllers that keep a Service's endpoints for its selector, by the label they put on
/// their EndpointSlices: kube-controller-manager's EndpointSlice controller, and its mirroring
/// controller, which copies the Endpoints object of a Service without a selector.
const SELECTOR_SLICE_MANAGERS: [&str; 2] = [
    "endpointslice-controller.k8s.io",
    "endpointslicemirroring-controller.k8s.io",
];

/// Whether applying `item` takes the selector away from the live Service `before`: a local
/// Service replaced in place by a bridge (a selector-less Service and EndpointSlices of comb's).
fn loses_its_selector(item: &RenderedItem, before: &Projection) -> bool {
    let selects = item.manifest["spec"]["selector"]
        .as_object()
        .is_some_and(|selector| !selector.is_empty());
    item.kind == "Service"
        && item.group.is_empty()
        && matches!(before.state, State::Service { selects: true })
        && !selects
}

/// Deletes what kube-controller-manager kept for the selector `service` no longer has. Its
/// controllers leave a Service's endpoints as they are when the selector is removed (by design,
/// kubernetes#91072), and the mirroring controller even copies the stale Endpoints object into
/// a new EndpointSlice: kube-proxy would go on sending part of the bridge's connections to the
/// Pods the Service selected (gone once comb prunes them). The network proved it: calls to a
/// bridge that replaced a local Service failed, or reached whichever Pod got the old IP next.
/// These objects are the Service's own (owned by it, named after it), so comb's; they carry
/// none of comb's labels, so they are read from the API server.
async fn forget_selected_endpoints(ops: &KubeOps, service: &RenderedItem) -> Result<()> {
    let namespace = service.namespace.clone();
    let object = |api_version: &str, kind: &str, name: &str| ManagedObject {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: namespace.clone(),
        name: name.into(),
        uid: None,
    };
    // The Endpoints object first: the mirroring controller would mirror it again.
    let endpoints = object("v1", "Endpoints", &service.name);
    if let Some(copy) = ops.get_fresh(&endpoints).await?
        && !copy.applied_by_comb()
    {
        // The Service's own: deleted whatever it carries.
        delete_if(ops, &endpoints, Cow::Owned(copy), |_| DeleteVerdict::Delete).await?;
    }
    for manager in SELECTOR_SLICE_MANAGERS {
        let selector = format!(
            "kubernetes.io/service-name={},endpointslice.kubernetes.io/managed-by={manager}",
            service.name
        );
        for slice in ops
            .list_whole(
                "discovery.k8s.io/v1",
                "EndpointSlice",
                namespace.as_deref(),
                &selector,
            )
            .await?
        {
            let copy = ops.project("discovery.k8s.io/v1", "EndpointSlice", &slice)?;
            let stale = object("discovery.k8s.io/v1", "EndpointSlice", &copy.name);
            delete_if(ops, &stale, Cow::Owned(copy), |_| DeleteVerdict::Delete).await?;
        }
    }
    Ok(())
}

/// The Pod template annotation a restart writes, as a path of field names: a migration of an
/// object an older comb replaced leaves it with whoever wrote it ([`KubeOps::ensure`]).
fn restart_path(restart_annotation: &str) -> Vec<String> {
    [
        "spec",
        "template",
        "metadata",
        "annotations",
        restart_annotation,
    ]
    .iter()
    .map(|name| name.to_string())
    .collect()
}

/// Whether `live`, what comb knows of `item`'s object, stands as comb last knew it as
/// rendered (`as_applied`, by applying it or finding it so): the conditions of [`unchanged`]
/// that the projection can tell, and comb's applied fields the very set they were then. A
/// field another manager changed since is that manager's now, so comb's set is smaller.
pub fn unchanged_since_apply(
    item: &RenderedItem,
    live: &Projection,
    as_applied: Option<&AsApplied>,
) -> bool {
    as_applied.is_some_and(|as_applied| {
        as_applied.digest == Fingerprint::of(&item.digest)
            && stands_applied(item, live)
            && live.managed.comb == Some(as_applied.fields)
    })
}

/// What [`unchanged`] asks besides the fields: the rendered digest, not a Job to create anew,
/// applied by comb, no stop's fields.
fn stands_applied(item: &RenderedItem, live: &Projection) -> bool {
    live.carries_digest(&item.digest)
        && existing_treatment(&item.api_version, &item.kind, live) != ExistingTreatment::Recreate
        && live.applied_by_comb()
        && !live.managed.stopped
}

/// Whether the object stands as applying `item` would leave it, so that deploy writes
/// nothing (`whole` is the object as the API server has it, `live` its projection): it
/// carries the rendered digest, it is not a Job to create anew, comb applied it (an object an
/// older comb replaced is applied once, to take its fields over), no stop holds fields of it,
/// and every field the manifest sets has the manifest's value live (a workload scaled or
/// edited by hand is applied again). What the server adds (defaults, other managers' fields)
/// does not count; a value the server normalises differently (a quantity `1000m` stored as
/// `1`) only costs an apply that changes nothing.
pub fn unchanged(item: &RenderedItem, whole: &Value, live: &Projection) -> bool {
    let Some(manifest) = item.manifest.as_object() else {
        return false;
    };
    // A Job that failed (or never started) is created anew whatever it holds.
    stands_applied(item, live)
        && manifest
            .iter()
            // A listed object has no apiVersion and kind of its own: the list's are its.
            .filter(|(key, _)| !matches!(key.as_str(), "status" | "apiVersion" | "kind"))
            .all(|(key, wanted)| match (key.as_str(), wanted) {
                // The time of the render, not of the change: the digest says whether it changed.
                ("metadata", Value::Object(metadata))
                    if metadata
                        .get("annotations")
                        .is_some_and(|a| a.get(TRIGGER_TIME_ANNOTATION).is_some()) =>
                {
                    let mut metadata = metadata.clone();
                    if let Some(Value::Object(annotations)) = metadata.get_mut("annotations") {
                        annotations.remove(TRIGGER_TIME_ANNOTATION);
                    }
                    holds(whole.get(key), &Value::Object(metadata))
                }
                _ => holds(whole.get(key), wanted),
            })
}

/// Whether the live value `live` has every field `wanted` sets, with its value. Lists match
/// item by item (same length); an empty map, list or null matches a missing field, which the
/// server leaves out.
fn holds(live: Option<&Value>, wanted: &Value) -> bool {
    match (live, wanted) {
        (None, wanted) => is_empty(wanted),
        (Some(Value::Object(live)), Value::Object(wanted)) => wanted
            .iter()
            .all(|(key, value)| holds(live.get(key), value)),
        (Some(Value::Array(live)), Value::Array(wanted)) => {
            live.len() == wanted.len()
                && live
                    .iter()
                    .zip(wanted)
                    .all(|(live, wanted)| holds(Some(live), wanted))
        }
        (Some(Value::Number(live)), Value::Number(wanted)) => live.as_f64() == wanted.as_f64(),
        (Some(live), wanted) => live == wanted || (live.is_null() && is_empty(wanted)),
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// How a delete decided on a copy ended ([`delete_as_decided`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deletion {
    Deleted,
    /// Not there any more.
    Gone,
    /// Not deleted: the verdict on the copy decided last (never [`DeleteVerdict::Delete`]).
    Spared(DeleteVerdict),
}

/// Deletes `resource` if [`delete_verdict`] on `copy` (the watch's copy, a list's, a get's)
/// says so for the Comb `namespace/name`, whose record says `recorded` of it, conditional on
/// that copy ([`unchanged_since`]). When
/// the API server finds the object changed since (409 Conflict: relabelled, marked keep,
/// replaced, or only its status moved), it is read again from the server and decided again,
/// at most [`CONFLICT_ATTEMPTS`] times; an object that changes under every attempt fails with
/// a message saying so, and the caller's next step decides again. A 404 is [`Deletion::Gone`].
pub async fn delete_as_decided(
    ops: &KubeOps,
    resource: &ManagedObject,
    copy: Cow<'_, Projection>,
    keys: &LabelKeys,
    namespace: &str,
    name: &str,
    recorded: Recorded<'_>,
) -> Result<Deletion> {
    delete_if(ops, resource, copy, |copy| {
        delete_verdict(copy, keys, namespace, name, recorded)
    })
    .await
}

/// Deletes `resource` if `decide` on `copy` says so, as [`delete_as_decided`] does.
async fn delete_if(
    ops: &KubeOps,
    resource: &ManagedObject,
    copy: Cow<'_, Projection>,
    decide: impl Fn(&Projection) -> DeleteVerdict,
) -> Result<Deletion> {
    let mut copy = copy;
    let mut attempts = 1;
    loop {
        match decide(&copy) {
            DeleteVerdict::Delete => {}
            spared => return Ok(Deletion::Spared(spared)),
        }
        match ops.delete(resource, unchanged_since(&copy)).await {
            Ok(()) => return Ok(Deletion::Deleted),
            Err(error) if error.status_code() == Some(404) => return Ok(Deletion::Gone),
            Err(error) if is_conflict(&error) => {
                if attempts == CONFLICT_ATTEMPTS {
                    return Err(conflicted_throughout(error, resource));
                }
                attempts += 1;
                // The watch may not have brought the change that conflicted yet.
                match ops.get_fresh(resource).await? {
                    Some(fresh) => copy = Cow::Owned(fresh),
                    None => return Ok(Deletion::Gone),
                }
            }
            Err(error) => return Err(error),
        }
    }
}

/// The last 409 of [`delete_as_decided`], saying that every attempt met a change: still the
/// API server's answer (its source kept), in words that say what the next step does.
fn conflicted_throughout(error: Error, resource: &ManagedObject) -> Error {
    match error {
        Error::Kube {
            request, source, ..
        } => Error::Kube {
            request,
            message: format!(
                "{} {} changed before each of {CONFLICT_ATTEMPTS} deletes could go out (409 \
                 Conflict); the next step decides again",
                resource.kind, resource.name
            ),
            source,
        },
        other => other,
    }
}

/// Executes a prune plan (reference §6.7): per group one list with **both** labels; what the
/// list finds is deleted (Background) as [`delete_as_decided`] decides on the listed copy (so
/// an orphan marked keep stays, and one changed since is decided again), what it does not find
/// is looked up to tell "lost our labels" (left alone, noted) from "gone"; one that is not the
/// Comb's by the ownership rule is left alone with a note saying whose it looks like. Cluster-scoped
/// orphans were settled by the plan and are never looked up. Failures become notes and keep
/// the orphan recorded for the next step.
///
/// The plan places custom Kinds by the record, which an older comb wrote with a namespace for
/// every Kind it did not know; so each group's scope is asked of discovery first, and a group
/// of a cluster-scoped Kind is left in place with the plan's note.
pub async fn prune(ops: &KubeOps, ctx: &CombContext, plan: &PrunePlan) -> PruneOutcome {
    let selector = ctx.label_selector();
    let selected = ctx.comb_selector();
    let mut outcome = PruneOutcome::new(plan);
    for group in &plan.groups {
        match ops.is_namespaced(&group.api_version, &group.kind).await {
            Ok(true) => {}
            Ok(false) => {
                for orphan in &group.orphans {
                    outcome.record(orphan, OrphanFate::ClusterScoped);
                }
                continue;
            }
            Err(error) => {
                for orphan in &group.orphans {
                    outcome.record(orphan, OrphanFate::Unchecked(error.to_string()));
                }
                continue;
            }
        }
        let listed = ops
            .list(
                &group.api_version,
                &group.kind,
                Some(&group.namespace),
                &selected,
            )
            .await;
        for orphan in &group.orphans {
            let found = match &listed {
                Err(error) => {
                    outcome.record(orphan, OrphanFate::Unchecked(error.to_string()));
                    continue;
                }
                Ok(objects) => objects.iter().find(|object| *object.name == orphan.name),
            };
            let fate = match found {
                Some(copy) => orphan_fate(
                    delete_as_decided(
                        ops,
                        orphan,
                        Cow::Borrowed(copy),
                        &ctx.settings.labels,
                        &ctx.namespace,
                        &ctx.name,
                        Recorded::of_entry(orphan),
                    )
                    .await,
                ),
                // Any failure of the get counts as "does not exist", as in the reference.
                None => match ops.get_opt(orphan).await {
                    Ok(Some(_)) => {
                        OrphanFate::LeftAlone(format!("it no longer carries {selector}"))
                    }
                    Ok(None) | Err(_) => OrphanFate::Gone,
                },
            };
            outcome.record(orphan, fate);
        }
    }
    outcome
}

/// What a delete decided on an orphan's copy means for the orphan.
fn orphan_fate(deletion: Result<Deletion>) -> OrphanFate {
    match deletion {
        Ok(Deletion::Deleted) => OrphanFate::Deleted,
        Ok(Deletion::Gone | Deletion::Spared(DeleteVerdict::Deleting | DeleteVerdict::Delete)) => {
            OrphanFate::Gone
        }
        Ok(Deletion::Spared(DeleteVerdict::Keep(mark))) => OrphanFate::Kept(mark),
        Ok(Deletion::Spared(DeleteVerdict::NotOurs(why))) => OrphanFate::LeftAlone(why),
        Err(error) => OrphanFate::DeleteFailed(error.to_string()),
    }
}

/// The result of applying a set of items and pruning what they no longer name.
#[derive(Clone, Debug, PartialEq)]
pub enum Applied {
    /// Everything applied; orphans pruned. `managed` is the new record, `notes` what pruning
    /// has to say.
    Done {
        managed: Vec<ManagedObject>,
        notes: Vec<String>,
    },
    /// The deploy stopped half-way with `message`; nothing was pruned. `managed` records what
    /// was applied plus everything recorded before.
    Failed {
        managed: Vec<ManagedObject>,
        message: String,
        /// The API server answered the request for the object it stopped at with a refusal
        /// (400, 403, 404, 422): that object was not made. Otherwise (no answer, 5xx, a
        /// conflict) it may have been.
        refused: bool,
    },
    /// The deploy stopped at an object that is not the Comb's (`message` names it), which it
    /// left untouched; nothing was pruned. `managed` as for [`Applied::Failed`].
    NotOwned {
        managed: Vec<ManagedObject>,
        message: String,
    },
}

/// Whether an API server's answer `code` to a write says it did not make the object: the
/// request was malformed, not allowed, aimed at what is not there, or invalid.
fn is_refusal(code: u16) -> bool {
    matches!(code, 400 | 403 | 404 | 422)
}

/// Deploys `items` and, only when that succeeded, prunes `previous − desired` (reference §6.7,
/// `_apply_and_prune`). `previous` is the recorded `managedResources`, the record that also
/// says what is the Comb's; `replicas` are objects the step wrote before (replicated from an
/// upstream): desired and recorded like the items. The new record holds each object's uid.
pub async fn apply_and_prune(
    ops: &KubeOps,
    ctx: &CombContext,
    items: &[RenderedItem],
    live: Option<&LiveObjects>,
    replicas: &[ManagedObject],
    previous: &[ManagedObject],
) -> Applied {
    match deploy(ops, ctx, items, live, previous).await {
        Ok(stored) => {
            let desired: Vec<ManagedObject> = stored_identities(items, &stored)
                .into_iter()
                .chain(replicas.iter().cloned())
                .collect();
            let plan = plan_prune(previous, &desired, &ctx.settings.tenancy, &ctx.namespace);
            let outcome = prune(ops, ctx, &plan).await;
            Applied::Done {
                managed: outcome.managed(&desired),
                notes: outcome.notes,
            }
        }
        Err(Error::Deploy {
            message,
            applied,
            source,
        }) => {
            let stored: Vec<ManagedObject> = applied
                .into_iter()
                .chain(replicas.iter().cloned())
                .collect();
            let managed = union(&stored, previous);
            match source.map(|source| *source) {
                Some(Error::NotOwned(message)) => Applied::NotOwned { managed, message },
                source => Applied::Failed {
                    managed,
                    message,
                    refused: source
                        .and_then(|source| source.status_code())
                        .is_some_and(is_refusal),
                },
            }
        }
        // deploy fails with Error::Deploy only; anything else is reported the same way.
        Err(other) => Applied::Failed {
            managed: previous.to_vec(),
            refused: other.status_code().is_some_and(is_refusal),
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::context::test_context;
    use crate::engine::kinds::Scopes;
    use crate::engine::render::render_manifest;
    use serde_json::json;

    const DIGEST: &str = "comb.internal/applied-digest";

    /// What comb reads of `live`, the object of `item`.
    fn projected(item: &RenderedItem, live: &Value) -> Projection {
        Projection::of(&item.api_version, &item.kind, live, &LabelKeys::default()).unwrap()
    }

    fn item() -> RenderedItem {
        let ctx = test_context("nats", "platform", json!({}));
        let manifest = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nats"},
            "spec": {"replicas": 1, "template": {"metadata": {"annotations": {}},
                     "spec": {"containers": [{"name": "nats", "image": "nats:2", "args": ["-js"]}]}}}});
        render_manifest("NATS", &manifest, &ctx, &Scopes::default()).expect("renders")
    }

    fn managed(managers: &[(&str, &str)]) -> Value {
        json!(
            managers
                .iter()
                .map(|(manager, operation)| json!({"manager": manager, "operation": operation, "fieldsV1": {"f:spec": {}}}))
                .collect::<Vec<_>>()
        )
    }

    /// The live object as comb's apply leaves it: the manifest, what the server and the
    /// controllers add, and comb's entry in managedFields.
    fn live(item: &RenderedItem) -> Value {
        let mut live = item.manifest.clone();
        // As a list answers it: without apiVersion and kind.
        live.as_object_mut().map(|o| o.remove("apiVersion"));
        live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = json!("3");
        live["metadata"]["managedFields"] =
            managed(&[("comb", "Apply"), ("kube-controller-manager", "Update")]);
        live["metadata"]["resourceVersion"] = json!("42");
        live["spec"]["strategy"] = json!({"type": "RollingUpdate"});
        live["spec"]["template"]["metadata"]["annotations"] =
            json!({"comb.internal/restartedAt": "2026-01-01T00:00:00Z"});
        live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] =
            json!("IfNotPresent");
        live["status"] = json!({"replicas": 1});
        live
    }

    #[test]
    fn what_a_deploy_makes_anew_is_written_ahead_up_to_the_first_refusal() {
        let ctx = test_context("web", "platform", json!({}));
        let render = |kind: &str, name: &str| {
            let (api_version, spec) = match kind {
                "Job" => (
                    "batch/v1",
                    json!({"template": {"spec": {"containers": []}}}),
                ),
                _ => ("v1", json!(null)),
            };
            let manifest = json!({"apiVersion": api_version, "kind": kind,
                                  "metadata": {"name": name}, "spec": spec});
            render_manifest("Manifests", &manifest, &ctx, &Scopes::default()).expect("renders")
        };
        let items = [
            render("ConfigMap", "made"),
            render("ConfigMap", "stands"),
            render("Job", "migrate"),
            render("ConfigMap", "someone-elses"),
            render("ConfigMap", "after"),
        ];
        // The live object of `item` with `uid`, as comb made it (its labels), or stripped of
        // them (someone else's).
        let object = |item: &RenderedItem, uid: &str, combs: bool, status: Value| {
            let mut live = item.manifest.clone();
            live["metadata"]["uid"] = json!(uid);
            live["status"] = status;
            if !combs {
                live["metadata"]["labels"] = json!({});
            }
            Some(projected(item, &live))
        };
        let failed = json!({"failed": 1});
        let live: LiveObjects = vec![
            None,
            object(&items[1], "u-stands", true, json!(null)),
            object(&items[2], "u-job", true, failed.clone()),
            object(&items[3], "u-other", false, json!(null)),
            None,
        ];
        let entry = |item: &RenderedItem, uid: Option<&str>| item.resource().with_uid(uid);
        let names = |list: Vec<ManagedObject>| -> Vec<String> {
            list.into_iter().map(|entry| entry.name).collect()
        };
        let recorded = vec![
            entry(&items[1], Some("u-stands")),
            entry(&items[2], Some("u-job")),
        ];
        // (what, record, what is written ahead)
        let cases: [(&str, Vec<ManagedObject>, Vec<&str>); 3] = [
            (
                "the absent object and the Job made anew; nothing from the refused object on",
                recorded.clone(),
                vec!["made", "migrate"],
            ),
            (
                "an identity written ahead before is not written again",
                [recorded.clone(), vec![entry(&items[0], None)]].concat(),
                vec!["migrate"],
            ),
            (
                "nothing but the refusal when the first object is someone else's",
                recorded.clone(),
                vec![],
            ),
        ];
        for (index, (what, record, expected)) in cases.into_iter().enumerate() {
            let (items, live) = if index == 2 {
                (&items[3..], &live[3..])
            } else {
                (&items[..], &live[..])
            };
            let ahead = made_anew(items, &live.to_vec(), &record, &ctx);
            assert!(ahead.iter().all(|entry| entry.uid.is_none()), "{what}");
            assert_eq!(names(ahead), expected, "{what}");
        }
    }

    #[test]
    fn only_a_service_whose_selector_goes_away_loses_its_endpoints() {
        let ctx = test_context("db", "platform", json!({}));
        let service = |spec: Value| {
            let manifest = json!({"apiVersion": "v1", "kind": "Service",
                                  "metadata": {"name": "db"}, "spec": spec});
            render_manifest("Manifests", &manifest, &ctx, &Scopes::default()).expect("renders")
        };
        let local = service(json!({"selector": {"app": "db"}, "ports": [{"port": 5432}]}));
        let bridge = service(json!({"ports": [{"port": 5432}]}));
        let cases = [
            (
                "a local Service replaced by a bridge",
                &bridge,
                &local,
                true,
            ),
            ("a bridge staying a bridge", &bridge, &bridge, false),
            (
                "a bridge replaced by a local Service",
                &local,
                &bridge,
                false,
            ),
            ("a local Service staying local", &local, &local, false),
        ];
        for (what, applying, before, loses) in cases {
            let before = projected(before, &before.manifest);
            assert_eq!(loses_its_selector(applying, &before), loses, "{what}");
        }
        // Another kind with a selector of the same name is not a Service.
        let deployment = item();
        let mut selecting = deployment.manifest.clone();
        selecting["spec"]["selector"] = json!({"matchLabels": {"app": "nats"}});
        assert!(!loses_its_selector(
            &deployment,
            &projected(&deployment, &selecting)
        ));
    }

    #[test]
    fn a_bridge_slice_is_stamped_with_its_trigger_time_and_not_rewritten_for_it() {
        let ctx = test_context("db", "platform", json!({}));
        let slice = |address: &str| {
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": "db-1", "labels": {"kubernetes.io/service-name": "db"}},
                   "addressType": "IPv4", "ports": [{"name": "postgres", "port": 5432}],
                   "endpoints": [{"addresses": [address]}]})
        };
        let render = |address: &str| {
            render_manifest("Manifests", &slice(address), &ctx, &Scopes::default())
                .expect("renders")
        };
        let first = render("192.0.2.10");
        let stamped = first.manifest["metadata"]["annotations"][TRIGGER_TIME_ANNOTATION]
            .as_str()
            .expect("a trigger time");
        assert!(stamped.parse::<jiff::Timestamp>().is_ok(), "{stamped}");
        // Rendered again later: another time, the same digest; the live slice stands.
        let mut live = first.manifest.clone();
        live["metadata"]["annotations"][TRIGGER_TIME_ANNOTATION] = json!("2020-01-01T00:00:00Z");
        live["metadata"]["managedFields"] = managed(&[("comb", "Apply")]);
        let again = render("192.0.2.10");
        assert_eq!(again.digest, first.digest);
        assert!(unchanged(&again, &live, &projected(&again, &live)));
        // Another address: another digest, written with a fresh stamp.
        let other = render("192.0.2.11");
        assert!(!unchanged(&other, &live, &projected(&other, &live)));
    }

    #[test]
    fn only_what_changed_is_applied() {
        let item = item();
        let edit = |change: fn(&mut Value)| {
            let mut object = live(&item);
            change(&mut object);
            object
        };
        let cases = [
            ("as applied, with what others added", live(&item), true),
            (
                "another digest",
                edit(|o| o["metadata"]["annotations"][DIGEST] = json!("sha256:other")),
                false,
            ),
            (
                "no digest",
                edit(|o| {
                    o["metadata"]["annotations"]
                        .as_object_mut()
                        .map(|a| a.remove(DIGEST));
                }),
                false,
            ),
            (
                "replaced by an older comb, never applied",
                edit(|o| o["metadata"]["managedFields"] = managed(&[("unknown", "Update")])),
                false,
            ),
            (
                "stopped",
                edit(|o| {
                    o["metadata"]["managedFields"] =
                        managed(&[("comb", "Apply"), ("comb-stop", "Apply")])
                }),
                false,
            ),
            (
                "scaled by hand",
                edit(|o| o["spec"]["replicas"] = json!(0)),
                false,
            ),
            (
                "image edited by hand",
                edit(|o| o["spec"]["template"]["spec"]["containers"][0]["image"] = json!("x")),
                false,
            ),
            (
                "a container injected",
                edit(|o| {
                    if let Some(containers) =
                        o["spec"]["template"]["spec"]["containers"].as_array_mut()
                    {
                        containers.push(json!({"name": "sidecar"}));
                    }
                }),
                false,
            ),
            (
                "an argument added",
                edit(|o| {
                    o["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["-js", "-D"])
                }),
                false,
            ),
            (
                "an empty map left out",
                edit(|o| {
                    o["spec"]["template"]["metadata"]
                        .as_object_mut()
                        .map(|m| m.remove("annotations"));
                }),
                true,
            ),
            (
                "the same number as a float",
                edit(|o| o["spec"]["replicas"] = json!(1.0)),
                true,
            ),
        ];
        for (what, live, unchanged_now) in cases {
            assert_eq!(
                unchanged(&item, &live, &projected(&item, &live)),
                unchanged_now,
                "{what}"
            );
        }
    }

    #[test]
    fn a_projection_is_unchanged_only_while_combs_applied_fields_stand() {
        let item = item();
        let whole = live(&item);
        let watched = projected(&item, &whole);
        let as_applied = AsApplied {
            digest: Fingerprint::of(&item.digest),
            fields: watched.managed.comb.expect("comb applied it"),
        };
        let edited_by_hand = {
            let mut whole = whole.clone();
            whole["metadata"]["managedFields"][0]["fieldsV1"] = json!({"f:metadata": {}});
            projected(&item, &whole)
        };
        let stopped = {
            let mut whole = whole.clone();
            whole["metadata"]["managedFields"] =
                managed(&[("comb", "Apply"), ("comb-stop", "Apply")]);
            projected(&item, &whole)
        };
        let other_digest = AsApplied {
            digest: Fingerprint::of("sha256:older"),
            ..as_applied
        };
        let cases = [
            ("as comb applied it", &watched, Some(&as_applied), true),
            ("nothing remembered (a restart)", &watched, None, false),
            (
                "remembered for another digest",
                &watched,
                Some(&other_digest),
                false,
            ),
            (
                "a field comb applied changed hands",
                &edited_by_hand,
                Some(&as_applied),
                false,
            ),
            ("a stop holds fields", &stopped, Some(&as_applied), false),
        ];
        for (what, live, remembered, unchanged_now) in cases {
            assert_eq!(
                unchanged_since_apply(&item, live, remembered),
                unchanged_now,
                "{what}"
            );
        }
    }

    #[test]
    fn a_failed_job_is_never_unchanged() {
        let ctx = test_context("nats", "platform", json!({}));
        let manifest = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "init"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "init", "image": "init:1"}]}}}});
        let item = render_manifest("NATS", &manifest, &ctx, &Scopes::default()).expect("renders");
        let mut live = item.manifest.clone();
        live["metadata"]["managedFields"] = managed(&[("comb", "Apply")]);
        live["status"] = json!({"succeeded": 1});
        assert!(
            unchanged(&item, &live, &projected(&item, &live)),
            "a Job that succeeded stays"
        );
        live["status"] = json!({"failed": 1});
        assert!(
            !unchanged(&item, &live, &projected(&item, &live)),
            "a failed Job is created anew"
        );
    }
}
