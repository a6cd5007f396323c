//! Deploy (reference §4.3) and the execution of a prune plan (§6.7).

use comb_api::ManagedObject;
use serde_json::Value;

use crate::engine::context::CombContext;
use crate::engine::kinds::ScopeLookup;
use crate::engine::kube_ops::KubeOps;
use crate::engine::observe::{LiveObjects, fetch_live, object_name};
use crate::engine::prune::{OrphanFate, PruneOutcome, PrunePlan, plan_prune, union};
use crate::engine::render::RenderedItem;
use crate::error::{Error, Result};

/// Applies rendered items in manifest order and returns the stored objects.
///
/// Restarts are kept: the live `restartedAt` Pod template annotation of a Deployment,
/// StatefulSet or DaemonSet is carried into its rendered template (after the digest), so that an
/// update neither undoes a restart nor rolls the pods again. `live` is what the caller already
/// read for these items (reconcile has read all of them); without it the workloads are read here,
/// one list per resource type and namespace.
///
/// The first failure stops the deploy: later items are never tried, and the error
/// ([`Error::Deploy`]) holds what was stored before it.
pub async fn deploy(
    ops: &KubeOps,
    ctx: &CombContext,
    items: &[RenderedItem],
    live: Option<&LiveObjects>,
) -> Result<Vec<Value>> {
    let read_here;
    let live = match live {
        Some(live) => live,
        None => {
            read_here = fetch_live(ops, ctx, items, RenderedItem::keeps_restarts)
                .await
                .map_err(|error| Error::Deploy {
                    message: format!(
                        "reading the live workloads failed: {}",
                        error.to_string().trim_end()
                    ),
                    applied: Vec::new(),
                })?;
            &read_here
        }
    };
    let restart_annotation = ctx.settings.labels.restart_annotation();
    let mut applied = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let live_object = live.get(index).and_then(Option::as_ref);
        let mut item = item.clone();
        if let Some(live_object) = live_object {
            item.keep_restart(live_object, restart_annotation);
        }
        match ops.ensure(&item.manifest, live_object).await {
            Ok(stored) => applied.push(stored),
            Err(error) => {
                return Err(Error::Deploy {
                    message: format!(
                        "ensure {} {}: {}",
                        item.kind,
                        item.name,
                        error.to_string().trim_end()
                    ),
                    applied,
                });
            }
        }
    }
    Ok(applied)
}

/// Executes a prune plan (reference §6.7): per group one list with **both** labels; what the
/// list finds is deleted (Background), what it does not find is looked up to tell "lost our
/// labels" (left alone, noted) from "gone". Cluster-scoped orphans were settled by the plan and
/// are never looked up. Failures become notes and keep the orphan recorded for the next step.
///
/// The plan places custom Kinds by the record, which an older comb wrote with a namespace for
/// every Kind it did not know; so each group's scope is asked of discovery first, and a group
/// of a cluster-scoped Kind is left in place with the plan's note.
pub async fn prune(ops: &KubeOps, ctx: &CombContext, plan: &PrunePlan) -> PruneOutcome {
    let selector = ctx.label_selector();
    let mut outcome = PruneOutcome::new(plan);
    for group in &plan.groups {
        match ops.is_namespaced(&group.api_version, &group.kind).await {
            Ok(true) => {}
            Ok(false) => {
                for orphan in &group.orphans {
                    outcome.record(orphan, OrphanFate::ClusterScoped, &selector);
                }
                continue;
            }
            Err(error) => {
                for orphan in &group.orphans {
                    outcome.record(orphan, OrphanFate::Unchecked(error.to_string()), &selector);
                }
                continue;
            }
        }
        let listed = ops
            .list(
                &group.api_version,
                &group.kind,
                Some(&group.namespace),
                &selector,
            )
            .await;
        for orphan in &group.orphans {
            let fate = match &listed {
                Err(error) => OrphanFate::Unchecked(error.to_string()),
                Ok(objects) if objects.iter().any(|o| object_name(o) == Some(&orphan.name)) => {
                    match ops.delete(orphan).await {
                        Ok(()) => OrphanFate::Deleted,
                        Err(error) => OrphanFate::DeleteFailed(error.to_string()),
                    }
                }
                // Any failure of the get counts as "does not exist", as in the reference.
                Ok(_) => match ops.get(orphan).await {
                    Ok(_) => OrphanFate::LostLabels,
                    Err(_) => OrphanFate::Gone,
                },
            };
            outcome.record(orphan, fate, &selector);
        }
    }
    outcome
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
    },
}

/// Deploys `items` and, only when that succeeded, prunes `previous − desired` (reference §6.7,
/// `_apply_and_prune`). `previous` is the recorded `managedResources`; `replicas` are objects
/// the step wrote before (replicated from an upstream): desired and recorded like the items.
pub async fn apply_and_prune(
    ops: &KubeOps,
    ctx: &CombContext,
    items: &[RenderedItem],
    live: Option<&LiveObjects>,
    replicas: &[ManagedObject],
    previous: &[ManagedObject],
) -> Applied {
    let desired: Vec<ManagedObject> = items
        .iter()
        .map(RenderedItem::resource)
        .chain(replicas.iter().cloned())
        .collect();
    match deploy(ops, ctx, items, live).await {
        Ok(_) => {
            let plan = plan_prune(previous, &desired, &ctx.settings.tenancy, &ctx.namespace);
            let outcome = prune(ops, ctx, &plan).await;
            Applied::Done {
                managed: outcome.managed(&desired),
                notes: outcome.notes,
            }
        }
        Err(Error::Deploy { message, applied }) => {
            let stored: Vec<ManagedObject> = desired
                .iter()
                .take(applied.len())
                .chain(replicas)
                .cloned()
                .collect();
            Applied::Failed {
                managed: union(&stored, previous),
                message,
            }
        }
        // deploy fails with Error::Deploy only; anything else is reported the same way.
        Err(other) => Applied::Failed {
            managed: previous.to_vec(),
            message: other.to_string(),
        },
    }
}
