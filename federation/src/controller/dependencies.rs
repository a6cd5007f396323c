//! How a Comb's dependencies stand, found by the layer before the Comb's step (reference §6.3:
//! a dependency's health is its live status), and handed to the engine as data.
//!
//! A dependency is built from its CR, rendered and observed once for all its dependents while
//! it stays as it was: what dependents judge it by ([`Judged`]) is kept per uid and generation,
//! and the verdict with the count of changes of its entry it was reached at
//! ([`LayerRuntime::touch`]: its CR, its objects, its upstream, its layer coming back). Kept
//! only where the watches report those changes, and only for classes whose answers depend on
//! nothing else ([`Judged`]'s rule); the others are looked at again by each dependent.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use comb_api::Comb;
use futures::FutureExt;
use futures::future::join_all;

use super::Shared;
use super::graph::describe_cycles;
use super::layer::{Judged, LayerRuntime, Origin};
use crate::engine::borrow::{self, UpstreamResolution};
use crate::engine::class::CombInstance;
use crate::engine::keys::{CombKey, dependency_key};
use crate::engine::observe::observe_local;
use crate::engine::reconcile::{Dependencies, DependencyVerdict};
use crate::engine::values::panic_message;
use crate::error::{Error, Result};

/// How the dependencies of `comb` (of `layer`) stand now.
pub(crate) async fn dependencies_of(
    shared: &Shared,
    layer: &LayerRuntime,
    comb: &CombInstance,
) -> Dependencies {
    let references = comb.depends_on();
    if references.is_empty() {
        return Dependencies::Found {
            cycle: None,
            verdicts: BTreeMap::new(),
        };
    }
    let key = CombKey::new(comb.namespace(), comb.name());
    if let Some(cycle) = layer.cycle_of(&key) {
        return Dependencies::Found {
            cycle: Some(describe_cycles(&[cycle])),
            verdicts: BTreeMap::new(),
        };
    }
    let looks = references
        .iter()
        .map(|reference| async move {
            let verdict = verdict_on(shared, layer, reference, comb.namespace()).await;
            (reference.clone(), verdict)
        })
        .collect::<Vec<_>>();
    // A class that panics while its dependency is rendered or observed fails the dependent's
    // look at it as a whole, as the step's own panics are recorded.
    match AssertUnwindSafe(join_all(looks)).catch_unwind().await {
        Ok(verdicts) => Dependencies::Found {
            cycle: None,
            verdicts: verdicts.into_iter().collect(),
        },
        Err(panic) => Dependencies::Failed(panic_message(panic.as_ref())),
    }
}

/// How the Comb `reference` names (from a Comb of `namespace`) stands.
async fn verdict_on(
    shared: &Shared,
    layer: &LayerRuntime,
    reference: &str,
    namespace: &str,
) -> DependencyVerdict {
    let Some(key) = dependency_key(reference, namespace) else {
        return DependencyVerdict::NotFound;
    };
    if !layer.layer.manages(&key.namespace) {
        return DependencyVerdict::NotFound;
    }
    // Read before it is judged: a change meanwhile makes the verdict one no later step takes.
    let (Some(origin), Some(changes)) = (layer.origin(&key), layer.changes_of(&key)) else {
        return DependencyVerdict::NotFound;
    };
    let judged = match layer.judged(&key, &origin) {
        Some(judged) => judged,
        None => match judge(shared, layer, &key).await {
            Some(Ok(judged)) => judged,
            Some(Err(error)) => return DependencyVerdict::NotHealthy(Some(error.to_string())),
            None => return DependencyVerdict::NotFound,
        },
    };
    let watched = layer.ops.cache().is_some();
    if watched && let Some(verdict) = judged.verdict_at(changes) {
        shared.metrics.dependency_verdict(layer.name(), true);
        return verdict;
    }
    shared.metrics.dependency_verdict(layer.name(), false);
    let verdict = match health(shared, layer, &key, &judged).await {
        Ok(true) => DependencyVerdict::Healthy,
        Ok(false) => DependencyVerdict::NotHealthy(None),
        Err(error) => DependencyVerdict::NotHealthy(Some(error.to_string())),
    };
    if watched {
        judged.keep_verdict(changes, verdict.clone());
    }
    verdict
}

/// The Comb of `key` as its CR is now (its unwritten Comb when that is of the same
/// generation, else built), kept for the next dependent when it may be; `None` when the CR is
/// gone, why it does not build when it does not (remembered, so that it is not built again
/// until its CR changes).
async fn judge(
    shared: &Shared,
    layer: &LayerRuntime,
    key: &CombKey,
) -> Option<Result<Arc<Judged>>> {
    let cr: Comb = layer.cr(key)?;
    if let Some(message) = layer.build_failure_of(key, &cr) {
        return Some(Err(Error::build(message)));
    }
    let comb = match layer.unwritten_of(key, &cr) {
        Some(comb) => comb,
        None => match layer.build(&shared.registry, &cr).await {
            Ok(comb) => comb,
            Err(error) => {
                layer.record_build_failure(key, Origin::of(&cr), error.to_string());
                return Some(Err(error));
            }
        },
    };
    let judged = Arc::new(Judged::new(comb, Origin::of(&cr)));
    layer.keep_judged(key, &judged);
    Some(Ok(judged))
}

/// Whether the dependency serves: its live status, local or borrowed as its layer resolves it
/// (a dependency on a fallback serves from there: judged where it borrows from now).
async fn health(
    shared: &Shared,
    layer: &LayerRuntime,
    key: &CombKey,
    judged: &Judged,
) -> Result<bool> {
    let comb = &judged.comb;
    let recorded = layer.recorded_status(key);
    let controlling = shared
        .fallbacks
        .upstream_choice(layer, key, recorded.as_ref())
        .0;
    let status = match borrow::resolution(comb, &controlling, &layer.borrow_env).await {
        UpstreamResolution::Local => {
            let items = judged.rendered(&layer.ops).await?;
            observe_local(&layer.ops, comb.context(), &items).await?.1
        }
        UpstreamResolution::Borrowed(borrowing) => {
            borrow::borrowed_status(
                &layer.ops,
                comb,
                borrowing.upstream.as_ref(),
                &borrowing.ctx,
            )
            .await?
        }
        UpstreamResolution::Failed(message) => {
            return Err(Error::build(format!(
                "resolving its upstream failed: {message}"
            )));
        }
        UpstreamResolution::Forbidden(message) => {
            return Err(Error::UpstreamForbidden(message));
        }
    };
    Ok(status.healthy)
}
