//! Whether each layer's API server answers: failed watches mark a layer down (its queue
//! pauses), a probe watches for it to come back, and anything the server sends marks it up.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::backoff::{BackoffPolicy, Retries};
use super::fanout::Fanout;
use super::layer::{LayerRuntime, LayerState};
use super::metrics::Metrics;

/// The layers' health: what marks a layer down and up, and the probes of the down ones.
pub(crate) struct Health {
    metrics: Arc<Metrics>,
    /// A layer that comes back wakes its Combs and their borrowers.
    fanout: Arc<Fanout>,
    /// How a failed watch or a probe waits before it tries again.
    backoff: BackoffPolicy,
    /// Cancelled when the controller stops: the probes end with it.
    stopping: CancellationToken,
}

/// How a watch failure counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The API server does not answer (refused, timed out, 5xx): the layer is down.
    Unavailable,
    /// The resource is not served (404): this watch ends.
    NotServed,
    /// The watch fell behind the server's history (410 Gone): it lists again, as it should.
    Expired,
    /// Comb may not list or watch it there (403): RBAC says no, which a retry will not change
    /// until someone grants it.
    Forbidden,
    /// Anything else (a bad object): retried.
    Other,
}

/// Classifies a watcher error.
pub fn classify(error: &watcher::Error) -> Failure {
    let client_error = match error {
        watcher::Error::InitialListFailed(error)
        | watcher::Error::WatchStartFailed(error)
        | watcher::Error::WatchFailed(error) => error,
        watcher::Error::WatchError(status) => {
            return match status.code {
                410 => Failure::Expired,
                403 => Failure::Forbidden,
                code if code >= 500 || code == 429 => Failure::Unavailable,
                _ => Failure::Other,
            };
        }
        watcher::Error::NoResourceVersion => return Failure::Other,
    };
    match client_error {
        kube::Error::Api(status) if status.code == 404 => Failure::NotServed,
        kube::Error::Api(status) if status.code == 410 => Failure::Expired,
        kube::Error::Api(status) if status.code == 403 => Failure::Forbidden,
        kube::Error::Api(status) if status.code >= 500 || status.code == 429 => {
            Failure::Unavailable
        }
        kube::Error::Api(_) | kube::Error::SerdeError(_) => Failure::Other,
        _ => Failure::Unavailable,
    }
}

impl Health {
    pub(crate) fn new(
        metrics: Arc<Metrics>,
        fanout: Arc<Fanout>,
        backoff: BackoffPolicy,
        stopping: CancellationToken,
    ) -> Health {
        Health {
            metrics,
            fanout,
            backoff,
            stopping,
        }
    }

    /// How a failed watch waits before it tries again.
    pub(crate) fn retries(&self) -> Retries {
        Retries::new(self.backoff)
    }
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
            self.fanout.layer_recovered(layer);
        } else if layer.state() == LayerState::Up {
            self.metrics.set_layer_up(layer.name(), true);
        }
    }

    /// Asks the down layer's API server for its version until it answers: a watch that resumes
    /// may stay silent, so its silence proves nothing.
    fn spawn_probe(self: &Arc<Self>, layer: &Arc<LayerRuntime>) {
        let health = self.clone();
        let layer = layer.clone();
        tokio::spawn(async move {
            let mut retries = health.retries();
            while layer.state() == LayerState::Down {
                if !health.pause(retries.next_delay(), &health.stopping).await {
                    return;
                }
                if layer.ops.client().apiserver_version().await.is_ok() {
                    health.layer_answered(&layer);
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

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure("x", "y").with_code(code)))
    }

    #[test]
    fn failures() {
        let cases = [
            (
                watcher::Error::InitialListFailed(api(503)),
                Failure::Unavailable,
            ),
            (
                watcher::Error::WatchStartFailed(api(404)),
                Failure::NotServed,
            ),
            (watcher::Error::WatchFailed(api(403)), Failure::Forbidden),
            (
                watcher::Error::InitialListFailed(api(403)),
                Failure::Forbidden,
            ),
            (watcher::Error::WatchFailed(api(422)), Failure::Other),
            (
                watcher::Error::InitialListFailed(api(429)),
                Failure::Unavailable,
            ),
            (
                watcher::Error::WatchError(Box::new(
                    Status::failure("gone", "Expired").with_code(410),
                )),
                Failure::Expired,
            ),
            (
                watcher::Error::InitialListFailed(api(410)),
                Failure::Expired,
            ),
            (watcher::Error::NoResourceVersion, Failure::Other),
            (
                watcher::Error::InitialListFailed(kube::Error::LinesCodecMaxLineLengthExceeded),
                Failure::Unavailable,
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(classify(&error), expected, "{error}");
        }
    }
}
