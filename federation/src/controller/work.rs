//! The work of one layer: its managed-resource watches and its workers, started for every
//! layer, or with sharding once this replica holds the layer's Lease, and stopped when it no
//! longer may step the layer. Under a [`Fence`] (sharding) no step starts after the soft
//! deadline, and a step still running at the hard one is dropped.

use std::sync::Arc;

use comb_api::Reason;
use futures::FutureExt;
use kube::api::ApiResource;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info_span, warn};

use super::gate::{Deadlines, Fence};
use super::layer::LayerRuntime;
use super::queue::{StepReport, StepState};
use super::{Shared, step, watch as watches};

/// The work of one layer: its managed-resource watches and its workers. Started for every
/// layer, or with sharding once this replica holds the layer's Lease; stopped when it no longer
/// may step the layer.
pub(super) struct LayerWork {
    layer: Arc<LayerRuntime>,
    /// Workers take no more jobs; watches end.
    stop: CancellationToken,
    /// Running steps are dropped (the Lease is lost).
    pub(super) abort: CancellationToken,
    tasks: JoinSet<()>,
}

impl LayerWork {
    /// Starts the work of `layer` under `fence`; `requeue`: step every Comb of the layer (a
    /// replica that takes a layer over does not know what happened while another held it).
    pub(super) fn start(
        shared: &Arc<Shared>,
        layer: &Arc<LayerRuntime>,
        fence: &Fence,
        requeue: bool,
    ) -> LayerWork {
        let stop = CancellationToken::new();
        let abort = CancellationToken::new();
        let mut tasks = JoinSet::new();
        layer.set_holding(true);
        let span = info_span!("layer", layer = layer.name());
        for scope in layer.scopes() {
            for (group, version, kind) in watches::WATCHED_KINDS {
                let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
                tasks.spawn(
                    watches::watch_managed(
                        shared.clone(),
                        layer.clone(),
                        ApiResource::from_gvk(&gvk),
                        scope.clone(),
                        stop.clone(),
                    )
                    .instrument(span.clone()),
                );
            }
        }
        if requeue {
            shared.fanout.layer_taken(layer);
        }
        for _ in 0..shared.options.workers_per_layer.max(1) {
            tasks.spawn(work(
                shared.clone(),
                layer.clone(),
                stop.clone(),
                abort.clone(),
                fence.subscribe(),
            ));
        }
        LayerWork {
            layer: layer.clone(),
            stop,
            abort,
            tasks,
        }
    }

    /// Takes no more jobs; running steps finish ([`LayerWork::join`] waits for them).
    pub(super) fn stop(&self) {
        self.stop.cancel();
    }

    /// Waits until every worker and watch of the layer ended.
    pub(super) async fn join(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
        self.layer.set_holding(false);
    }
}

/// One worker of a layer: steps Combs from its queue until the queue closes or the work stops.
/// Under a fence (sharding), no step starts after the soft deadline until a renewal moves it,
/// and a step still running at the hard deadline is dropped: past it another replica may hold
/// the layer.
async fn work(
    shared: Arc<Shared>,
    layer: Arc<LayerRuntime>,
    stop: CancellationToken,
    abort: CancellationToken,
    mut fence: watch::Receiver<Deadlines>,
) {
    loop {
        let deadlines = *fence.borrow_and_update();
        let soft = deadlines.map(|(soft, _)| soft);
        if soft.is_some_and(|soft| tokio::time::Instant::now() >= soft) {
            // The Lease is late: wait for its renewal (or the end).
            tokio::select! {
                () = stop.cancelled() => return,
                changed = fence.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            continue;
        }
        let job = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            job = layer.queue.next() => job,
            () = sleep_until(soft) => continue,
        };
        let Some(job) = job else { return };
        shared.metrics.queue_wait(layer.name(), job.waited);
        let span = info_span!(
            "comb",
            layer = layer.name(),
            namespace = %job.key.namespace,
            comb = %job.key.name,
            trigger = <&str>::from(job.trigger),
        );
        let started_at = jiff::Timestamp::now();
        let stepping = std::panic::AssertUnwindSafe(step::step(&shared, &layer, &job.key))
            .catch_unwind()
            .instrument(span.clone());
        let stepped = tokio::select! {
            stepped = stepping => Some(stepped),
            () = fence_expired(fence.clone(), abort.clone()) => None,
        };
        // A step that did not finish is retried with backoff.
        let report = match stepped {
            Some(Ok(report)) => report,
            Some(Err(_)) => {
                span.in_scope(|| error!("the step panicked; retrying with backoff"));
                StepReport {
                    started_at,
                    ..StepReport::new(StepState::Failed(Reason::ReconcileFailed), true)
                }
            }
            None => {
                span.in_scope(|| warn!("the layer's Lease is ending: the running step is dropped"));
                StepReport {
                    started_at,
                    ..StepReport::new(StepState::Dropped(Reason::ShardLost), true)
                }
            }
        };
        layer.queue.finish(&job.key, report);
        shared
            .metrics
            .set_queue_depth(layer.name(), layer.queue.depth());
    }
}

/// Sleeps until `at`; never without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Resolves once the hard deadline passes (as renewals move it) or `abort` is cancelled.
pub(super) async fn fence_expired(
    mut deadlines: watch::Receiver<Deadlines>,
    abort: CancellationToken,
) {
    loop {
        let hard = deadlines.borrow_and_update().map(|(_, hard)| hard);
        tokio::select! {
            () = abort.cancelled() => return,
            () = sleep_until(hard) => return,
            changed = deadlines.changed() => {
                if changed.is_err() {
                    // The fence is gone: nothing moves the deadline any more.
                    tokio::select! {
                        () = abort.cancelled() => {}
                        () = sleep_until(hard) => {}
                    }
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_fence_drops_a_step_at_its_hard_deadline_unless_a_renewal_moved_it() {
        let start = Instant::now();
        let seconds = Duration::from_secs;
        let fence = Fence::new(Some((start + seconds(2), start + seconds(3))));
        let expired = tokio::spawn(fence_expired(fence.subscribe(), CancellationToken::new()));
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        // A renewal before the hard deadline moves it.
        fence.send_replace(Some((start + seconds(4), start + seconds(5))));
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        tokio::task::yield_now().await;
        assert!(
            !expired.is_finished(),
            "past the old deadline, before the new"
        );
        tokio::time::sleep(Duration::from_millis(1_600)).await;
        tokio::task::yield_now().await;
        assert!(expired.is_finished(), "past the new deadline");

        // Without a limit only the abort ends it.
        let abort = CancellationToken::new();
        let unlimited = Fence::new(None);
        let expired = tokio::spawn(fence_expired(unlimited.subscribe(), abort.clone()));
        tokio::time::sleep(seconds(3_600)).await;
        tokio::task::yield_now().await;
        assert!(!expired.is_finished());
        abort.cancel();
        expired.await.unwrap();

        // A fence dropped keeps its last deadline.
        let fence = Fence::new(Some((start, Instant::now() + seconds(1))));
        let expired = tokio::spawn(fence_expired(fence.subscribe(), CancellationToken::new()));
        drop(fence);
        tokio::time::sleep(Duration::from_millis(500)).await;
        tokio::task::yield_now().await;
        assert!(!expired.is_finished());
        tokio::time::sleep(seconds(1)).await;
        tokio::task::yield_now().await;
        assert!(expired.is_finished());
    }
}
