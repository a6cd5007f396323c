//! Whether each layer's API server answers: failed watches mark a layer down (its queue
//! pauses), a probe watches for it to come back, and anything the server sends marks it up.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Shared;
use super::backoff::Retries;
use super::layer::{LayerRuntime, LayerState};
use super::queue::Trigger;
use super::watch::Failure;

impl Shared {
    /// A watch of `layer` failed: count it, and mark the layer down when its API server does
    /// not answer (a probe then watches for it to come back).
    pub(crate) fn watch_failed(
        self: &Arc<Self>,
        layer: &Arc<LayerRuntime>,
        what: &str,
        failure: Failure,
        message: &str,
    ) {
        match failure {
            Failure::Expired => {
                info!(
                    layer = layer.name(),
                    watch = what,
                    "watch expired, listing again: {message}"
                );
                return;
            }
            Failure::NotServed | Failure::Forbidden | Failure::Other => {
                self.metrics.api_error(layer.name(), "watch");
                warn!(
                    layer = layer.name(),
                    watch = what,
                    "watch failed, retrying: {message}"
                );
                return;
            }
            Failure::Unavailable => self.metrics.api_error(layer.name(), "watch"),
        }
        if layer.mark_down(message) {
            warn!(
                layer = layer.name(),
                context = %layer.layer.context,
                "layer {} is down (its steps wait; other layers go on): {message}",
                layer.name()
            );
            self.metrics.set_layer_up(layer.name(), false);
            self.spawn_probe(layer);
        }
    }

    /// Something from `layer`'s API server arrived: if the layer was down it is up again.
    pub(crate) fn layer_answered(&self, layer: &LayerRuntime) {
        if layer.mark_up() {
            info!(
                layer = layer.name(),
                "layer {} is back; stepping its Combs",
                layer.name()
            );
            self.metrics.set_layer_up(layer.name(), true);
            for key in layer.keys() {
                layer.queue.enqueue(&key, Trigger::LayerRecovered);
                // Lower layers read this one's Combs: whatever judged them while the layer was
                // down (a borrower, a dependent of a borrower) looks again now (a 2 s partition
                // of prod left dev's mailer Blocked until the resync without this).
                self.wake_borrowers_of(layer, &key);
            }
        } else if layer.state() == LayerState::Up {
            self.metrics.set_layer_up(layer.name(), true);
        }
    }

    /// Asks the down layer's API server for its version until it answers: a watch that resumes
    /// may stay silent, so its silence proves nothing.
    fn spawn_probe(self: &Arc<Self>, layer: &Arc<LayerRuntime>) {
        let shared = self.clone();
        let layer = layer.clone();
        tokio::spawn(async move {
            let mut retries = Retries::new(shared.options.watch_backoff);
            while layer.state() == LayerState::Down {
                if !shared.pause(retries.next_delay(), &shared.stopping).await {
                    return;
                }
                if layer.ops.client().apiserver_version().await.is_ok() {
                    shared.layer_answered(&layer);
                }
            }
        });
    }

    /// Waits `delay` before the next attempt; false when stopping.
    pub(crate) async fn pause(&self, delay: Duration, cancel: &CancellationToken) -> bool {
        tokio::select! {
            () = cancel.cancelled() => false,
            () = self.stopping.cancelled() => false,
            () = tokio::time::sleep(delay) => true,
        }
    }
}
