//! One step of one Comb: cleanup when its CR is being deleted; else the finalizer, building the
//! Comb (kept while its spec stays), the engine's reconcile step, and what follows from the
//! recorded status (transition, Event, retry).

use std::sync::Arc;

use comb_api::{Comb, CombStatus, Phase, Reason};
use tokio::time::Instant;
use tracing::{info, warn};

use super::Shared;
use super::deletion::{cleanup, orphans_everything};
use super::dependencies::dependencies_of;
use super::events::EventType;
use super::layer::{Built, LayerRuntime, Origin};
use super::queue::{StepReport, StepState};
use super::reads::StepPeers;
use crate::engine::borrow::{self, BorrowEnv};
use crate::engine::class::CombInstance;
use crate::engine::keys::CombKey;
use crate::engine::kube_ops::KubeOps;
use crate::engine::reconcile::{Dependencies, StepEnv, reconcile, record_build_failure};
use crate::error::{Error, Result};

/// The report of a step that recorded `status`; `failed`: retry with backoff.
fn recorded(status: &CombStatus, failed: bool) -> StepReport {
    let state = match &status.phase {
        Some(phase) => StepState::Recorded {
            phase: phase.clone(),
            reason: status.ready().and_then(|ready| ready.reason.clone()),
        },
        // A status without a phase is none comb records; say what failed.
        None => StepState::Failed(Reason::StatusFailed),
    };
    StepReport::new(state, failed)
}

fn deleting(reason: Reason, failed: bool) -> StepReport {
    StepReport::new(StepState::Deleting(reason), failed)
}

/// Runs one step of `key` and says how it went.
pub async fn step(shared: &Arc<Shared>, layer: &Arc<LayerRuntime>, key: &CombKey) -> StepReport {
    let started = Instant::now();
    let started_at = jiff::Timestamp::now();
    let cr = layer.cr(key);
    if let Some(cr) = &cr {
        // Events the API did not take before come first, in their order.
        shared.reports.retry_events(layer, cr).await;
    }
    let report = match cr {
        None => StepReport::new(StepState::Gone, false),
        Some(cr) if cr.metadata.deletion_timestamp.is_some() => {
            delete(shared, layer, key, cr).await
        }
        Some(cr) => reconcile_comb(shared, layer, key, cr).await,
    };
    let duration = started.elapsed();
    if let Some(phase) = report.state.phase_word() {
        shared.metrics.step(layer.name(), phase, duration);
    }
    StepReport {
        started_at,
        duration,
        ..report
    }
}

/// `<group>/cleanup`.
pub fn finalizer(group: &str) -> String {
    format!("{group}/cleanup")
}

fn has_finalizer(cr: &Comb, finalizer: &str) -> bool {
    cr.metadata
        .finalizers
        .as_ref()
        .is_some_and(|list| list.iter().any(|f| f == finalizer))
}

/// The CR's finalizers with `ours` added after the others, or `None` when it has ours already.
fn finalizers_with(cr: &Comb, ours: &str) -> Option<Vec<String>> {
    if has_finalizer(cr, ours) {
        return None;
    }
    let mut finalizers = cr.metadata.finalizers.clone().unwrap_or_default();
    finalizers.push(ours.to_string());
    Some(finalizers)
}

/// The CR's finalizers but `ours`, in their order.
fn finalizers_without(cr: &Comb, ours: &str) -> Vec<String> {
    cr.metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|finalizer| *finalizer != ours)
        .cloned()
        .collect()
}

async fn reconcile_comb(
    shared: &Arc<Shared>,
    layer: &Arc<LayerRuntime>,
    key: &CombKey,
    cr: Comb,
) -> StepReport {
    let group = &shared.config.group;
    let finalizer = finalizer(group);
    let cr = match finalizers_with(&cr, &finalizer) {
        None => cr,
        Some(finalizers) => match layer.ops.set_comb_finalizers(group, &cr, &finalizers).await {
            Ok(stored) => {
                shared.fanout.own_write(layer, key, stored.clone());
                stored
            }
            Err(error) => {
                shared.metrics.api_error(layer.name(), "finalizer");
                warn!(%error, "adding the finalizer {finalizer} failed; retrying");
                return StepReport::new(StepState::Failed(Reason::FinalizerFailed), true);
            }
        },
    };
    let comb = match instance_for(shared, layer, key, &cr).await {
        Ok(comb) => comb,
        Err(error) => return build_failed(shared, layer, key, &cr, &error, Retry::OnChange).await,
    };
    let origin = Origin::of(&cr);
    if let Some(cycles) = layer.set_dependencies(key, &comb.depends_on()) {
        shared.reports.report_cycles(layer, cycles).await;
    }
    let previous = comb.recorded_status().cloned();
    let (controlling, fallback) = shared
        .fallbacks
        .upstream_choice(layer, key, previous.as_ref());
    let ops = match layer.comb_ops(&key.namespace).await {
        Ok(ops) => ops.logging_reads(),
        // The Comb builds; what failed is its writer's client (a credential file being
        // rotated, a kubeconfig Secret not yet there): nothing in the CR will change that.
        Err(error) => return build_failed(shared, layer, key, &cr, &error, Retry::Backoff).await,
    };
    let borrow_env = step_borrow_env(&layer.borrow_env, &ops);
    let resolution = borrow::resolution(&comb, &controlling, &borrow_env).await;
    let dependencies = dependencies_of(shared, layer, &comb).await;
    let env = StepEnv {
        ops: &ops,
        dependencies: &dependencies,
        fallback: fallback.as_ref(),
        hold_progress_until: layer.hold_progress_until(key),
    };
    let outcome = reconcile(&comb, env, resolution).await;
    let change = layer.record_step(key, Built { comb, origin }, &outcome);
    shared.fanout.react(layer, key, &change);
    let (status, stored) = (&outcome.status, &outcome.stored);
    shared
        .reports
        .after_status(
            layer,
            stored,
            previous.as_ref(),
            status,
            outcome.status_written,
        )
        .await;
    shared
        .fallbacks
        .announce_switch(layer, stored, previous.as_ref(), status)
        .await;
    shared
        .reports
        .announce_notes(layer, stored, &outcome.notes, previous.as_ref())
        .await;
    if outcome.write_failed {
        shared.metrics.api_error(layer.name(), "status");
    }
    let failed = outcome.write_failed || status.phase == Some(Phase::Error);
    StepReport {
        reads: ops.read_summary(),
        again_after: outcome
            .progress_due
            .map(|due| due.saturating_duration_since(std::time::Instant::now())),
        ..recorded(status, failed)
    }
}

/// The layer's borrow environment, counting the step's peer reads in the step's read log.
fn step_borrow_env(env: &BorrowEnv, ops: &KubeOps) -> BorrowEnv {
    let mut env = env.clone();
    if let (Some(peers), Some(log)) = (env.peers.clone(), ops.read_log()) {
        env.peers = Some(Arc::new(StepPeers {
            peers,
            log: log.clone(),
        }));
    }
    env
}

/// What a step of a Comb starts from, by what the layer kept of it.
enum Start {
    /// The Comb whose status could not be written, of the CR's uid and generation: its
    /// in-memory status survives a newer CR.
    Unwritten(Box<Built>),
    /// Its build failed for the CR's uid and generation: not tried again until the CR changes.
    Unbuildable(String),
    /// Built anew, starting from `kept_record` when there is one (the unwritten status of an
    /// older generation of the same object).
    Build {
        kept_record: Option<Box<CombStatus>>,
    },
}

/// What a step of `cr` starts from, given the layer's `unwritten` Comb and `failure` (pure).
fn start_from(
    unwritten: Option<Box<Built>>,
    failure: Option<(Origin, String)>,
    cr: &Comb,
) -> Start {
    // A record only memory holds (its write failed) outlives a spec edit: the Comb rebuilt for
    // the new generation starts from it, so its next step prunes what that record owns
    // (reference S154). A new uid is another Comb and starts from its own CR.
    let kept_record = unwritten
        .as_ref()
        .filter(|built| built.origin.uid == cr.metadata.uid)
        .and_then(|built| built.comb.recorded_status().cloned().map(Box::new));
    if let Some(mut built) = unwritten.filter(|built| built.is_of(cr)) {
        let comb = &mut built.comb;
        // The layer's CR is the latest known (the layer orders versions by its watch), so a
        // different resourceVersion is a later one.
        if cr.metadata.resource_version != comb.cr().metadata.resource_version {
            let kept = comb.recorded_status().cloned();
            comb.adopt_cr(cr.clone());
            if let Some(status) = kept {
                comb.keep_status(status);
            }
        }
        return Start::Unwritten(built);
    }
    match failure {
        Some((origin, message)) if origin == Origin::of(cr) => Start::Unbuildable(message),
        _ => Start::Build { kept_record },
    }
}

/// The Comb of `cr` ([`start_from`]), built anew when it must be; a build failure is kept
/// for the CR's uid and generation (its words are what the Comb records, and what a later
/// step of the same generation says again without building).
async fn instance_for(
    shared: &Shared,
    layer: &LayerRuntime,
    key: &CombKey,
    cr: &Comb,
) -> Result<CombInstance> {
    let (unwritten, failure) = layer.starting_point(key);
    let kept_record = match start_from(unwritten, failure, cr) {
        Start::Unwritten(built) => return Ok(built.comb),
        Start::Unbuildable(message) => return Err(Error::build(message)),
        Start::Build { kept_record } => kept_record,
    };
    let mut comb = layer
        .build(&shared.registry, cr)
        .await
        .inspect_err(|error| {
            layer.record_build_failure(key, Origin::of(cr), error.to_string());
        })?;
    if let Some(status) = kept_record {
        comb.keep_status(*status);
    }
    Ok(comb)
}

/// When a step that ends in BuildFailed runs again.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// The Comb itself does not build: the same CR fails the same way, so it waits for its CR
    /// to change.
    OnChange,
    /// Something outside the CR failed (its writer's client): retried with backoff.
    Backoff,
}

/// A Comb that cannot be built (or whose writer cannot be made): Error / BuildFailed with the
/// error's words, recorded by the engine's one status writer (written when it differs from
/// what is recorded). `retry` says whether it runs again before its CR changes; a failed write
/// is retried with backoff either way.
async fn build_failed(
    shared: &Arc<Shared>,
    layer: &Arc<LayerRuntime>,
    key: &CombKey,
    cr: &Comb,
    error: &Error,
    retry: Retry,
) -> StepReport {
    let message = error.to_string();
    let env = StepEnv {
        ops: &layer.ops,
        dependencies: &Dependencies::Unknown,
        fallback: None,
        hold_progress_until: None,
    };
    let outcome = record_build_failure(env, &shared.config.group, cr.clone(), message).await;
    let change = layer.record_unbuildable_step(key, &outcome);
    if outcome.write_failed {
        shared.metrics.api_error(layer.name(), "status");
        warn!("the BuildFailed status is not written; retrying");
        return recorded(&outcome.status, true);
    }
    shared.fanout.react(layer, key, &change);
    shared
        .reports
        .after_status(
            layer,
            &outcome.stored,
            cr.status.as_ref(),
            &outcome.status,
            outcome.status_written,
        )
        .await;
    recorded(&outcome.status, retry == Retry::Backoff)
}

/// The CR is being deleted: clean up (unless the Orphan policy says otherwise), then let it go.
async fn delete(
    shared: &Arc<Shared>,
    layer: &Arc<LayerRuntime>,
    key: &CombKey,
    cr: Comb,
) -> StepReport {
    let group = &shared.config.group;
    let finalizer = finalizer(group);
    if !has_finalizer(&cr, &finalizer) {
        // Other finalizers hold it; nothing of ours is left to do.
        return deleting(Reason::OtherFinalizers, false);
    }
    if orphans_everything(&cr, group) {
        info!("orphan: {group}/deletion-policy is Orphan, leaving every resource in place");
    } else {
        // What the Comb recorded last, even when that could not be written.
        let mut recorded = cr.clone();
        if let Some(status) = layer.recorded_status(key) {
            recorded.status = Some(status);
        }
        let ops = match layer.comb_ops(&key.namespace).await {
            Ok(ops) => ops,
            Err(error) => {
                warn!(%error, "orphan: cleanup cannot start, retrying");
                return deleting(Reason::CleanupFailed, true);
            }
        };
        let report = cleanup(
            &ops,
            &recorded,
            &shared.config.label_keys(),
            &layer.settings.tenancy,
        )
        .await;
        shared
            .reports
            .announce_notes(layer, &cr, &report.notes, None)
            .await;
        let summary = report.summary();
        if !report.failures.is_empty() {
            shared.metrics.api_error(layer.name(), "cleanup");
            warn!("orphan: cleanup incomplete, retrying: {summary}");
            shared
                .reports
                .event(
                    layer,
                    &cr,
                    EventType::Warning,
                    Reason::CleanupFailed,
                    &summary,
                )
                .await;
            return deleting(Reason::CleanupFailed, true);
        }
        info!("orphan: cleanup done: {summary}");
        shared
            .reports
            .event(layer, &cr, EventType::Normal, Reason::CleanedUp, &summary)
            .await;
    }
    match layer
        .ops
        .set_comb_finalizers(group, &cr, &finalizers_without(&cr, &finalizer))
        .await
    {
        Ok(_) => StepReport::new(StepState::Deleted, false),
        Err(error) if error.status_code() == Some(404) => {
            StepReport::new(StepState::Deleted, false)
        }
        Err(error) => {
            shared.metrics.api_error(layer.name(), "finalizer");
            warn!(%error, "removing the finalizer {finalizer} failed; retrying");
            deleting(Reason::FinalizerFailed, true)
        }
    }
}

#[cfg(test)]
mod tests;
