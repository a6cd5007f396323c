//! Fetching the live state of a local Comb (reference §8.1 steps 3-4) for the pure derivation.
//!
//! Live objects are read with the **name label only** (a same-named Comb of another namespace
//! that applied a shared resource last still counts it as live), one list per resource type and
//! namespace, sorted by resource id then namespace. Pods are read with both labels, and only when
//! some workload is live; ReplicaSets (both labels, which a Deployment's Pod template carries)
//! only when a Deployment rolls out while a Pod of a ReplicaSet fails.

use std::collections::BTreeMap;

use crate::engine::context::CombContext;
use crate::engine::kube_ops::KubeOps;
use crate::engine::live_status::{LiveStatus, derive_local_status, needs_pods, needs_replica_sets};
use crate::engine::projection::Projection;
use crate::engine::render::RenderedItem;
use crate::error::Result;

/// What comb knows of the live object of each rendered item (same order as the items), `None`
/// where the object does not exist or does not carry the Comb's name label.
pub type LiveObjects = Vec<Option<Projection>>;

/// Reads the live objects of the items: one list per (resource id, namespace) among them, in
/// sorted order. A failed list fails the read.
pub async fn fetch_live(
    ops: &KubeOps,
    ctx: &CombContext,
    items: &[RenderedItem],
) -> Result<LiveObjects> {
    let mut groups: BTreeMap<(String, Option<&str>), Vec<usize>> = BTreeMap::new();
    for (index, item) in items.iter().enumerate() {
        groups
            .entry((item.resource_id(), item.namespace.as_deref()))
            .or_default()
            .push(index);
    }
    let selector = ctx.name_selector();
    let mut live: LiveObjects = vec![None; items.len()];
    for ((_, namespace), members) in groups {
        // Every member shares apiVersion and Kind: they are in the resource id.
        let Some(first) = members.first().map(|&index| &items[index]) else {
            continue;
        };
        let objects = ops
            .list(&first.api_version, &first.kind, namespace, &selector)
            .await?;
        for index in members {
            live[index] = objects
                .iter()
                .find(|object| *object.name == items[index].name)
                .cloned();
        }
    }
    Ok(live)
}

/// Reads what the cluster shows of rendered items and derives the local live status (§8.1):
/// no items means Running without a single request; pods are read only when a workload is live,
/// ReplicaSets only when the verdict depends on them.
pub async fn observe_local(
    ops: &KubeOps,
    ctx: &CombContext,
    items: &[RenderedItem],
) -> Result<(LiveObjects, LiveStatus)> {
    let live = fetch_live(ops, ctx, items).await?;
    let pods = if needs_pods(items, &live) {
        ops.list("v1", "Pod", Some(&ctx.namespace), &ctx.comb_selector())
            .await?
    } else {
        Vec::new()
    };
    let replica_sets = if needs_replica_sets(items, &live, &pods) {
        ops.list(
            "apps/v1",
            "ReplicaSet",
            Some(&ctx.namespace),
            &ctx.comb_selector(),
        )
        .await?
    } else {
        Vec::new()
    };
    let status = derive_local_status(items, &live, &pods, &replica_sets);
    Ok((live, status))
}
