//! A cheap view of a running controller: layers, queues, readiness, metrics, outcomes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use comb_api::Comb;
use serde::Serialize;
use tokio::sync::broadcast;

use super::layer::{LayerRuntime, LayerState, LayerStatus, Origin};
use super::once::CombOutcome;
use super::queue::QueueEntryView;
use super::{Shared, Transition};
use crate::engine::keys::CombKey;
use crate::error::Result;
use crate::picture::LayerCombs;

/// A cheap view of a controller, for the admin server, tests and the demo.
#[derive(Clone)]
pub struct ControllerHandle {
    pub(super) shared: Arc<Shared>,
}

/// The work queue of one layer, as `/debug/queue` shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LayerQueue {
    pub layer: String,
    pub paused: bool,
    pub depth: usize,
    pub combs: Vec<QueueEntryView>,
}

/// Whether the controller is ready (`/readyz`), or why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    NotReady(String),
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        *self == Readiness::Ready
    }
}

impl ControllerHandle {
    /// The federation as the controller knows it now (each Comb with the status it recorded
    /// last), for the admin page: a layer that is down is drawn with why.
    pub fn picture(&self) -> crate::picture::Picture {
        // The runtimes are the configuration's layers, in its order.
        let listed: Vec<LayerCombs> = self
            .shared
            .layers
            .iter()
            .map(|runtime| {
                let status = runtime.status();
                if status.state == LayerState::Down {
                    return LayerCombs::Unread(format!(
                        "layer {} is down: {}",
                        status.name,
                        status.error.unwrap_or_default()
                    ));
                }
                LayerCombs::Read(runtime.recorded_combs())
            })
            .collect();
        crate::picture::Picture::build(&self.shared.config, &listed)
    }

    /// The health of every layer.
    pub fn layers(&self) -> Vec<LayerStatus> {
        self.shared
            .layers
            .iter()
            .map(|layer| layer.status())
            .collect()
    }

    /// The health of layer `name`.
    pub fn layer(&self, name: &str) -> Option<LayerStatus> {
        self.layers().into_iter().find(|layer| layer.name == name)
    }

    /// The uid and generation of every Comb CR of layer `name`, once its watches listed them
    /// all (`None` before, or when this controller has no such layer): cheap to compare, to
    /// tell whether [`ControllerHandle::listed_combs`] changed.
    pub fn listed_origins(&self, name: &str) -> Option<BTreeMap<CombKey, Origin>> {
        let layer = self.listed_layer(name)?;
        Some(layer.origins())
    }

    /// The Comb CRs of layer `name` as its watches show them, once they listed them all.
    pub fn listed_combs(&self, name: &str) -> Option<Vec<Comb>> {
        let layer = self.listed_layer(name)?;
        Some(
            layer
                .keys()
                .iter()
                .filter_map(|key| layer.cr(key))
                .collect(),
        )
    }

    fn listed_layer(&self, name: &str) -> Option<&Arc<LayerRuntime>> {
        self.shared
            .layers
            .iter()
            .find(|layer| layer.name() == name)
            .filter(|layer| layer.status().listed)
    }

    /// Every layer's queue.
    pub fn queue(&self) -> Vec<LayerQueue> {
        self.shared
            .layers
            .iter()
            .map(|layer| LayerQueue {
                layer: layer.name().to_string(),
                paused: layer.queue.is_paused(),
                depth: layer.queue.depth(),
                combs: layer.queue.snapshot(),
            })
            .collect()
    }

    /// Whether the controller reconciles now: running, and with leader election holding the
    /// Lease.
    pub fn is_reconciling(&self) -> bool {
        self.shared.active.load(Ordering::SeqCst)
    }

    /// Ready when waiting for the Lease, or when every layer has listed its Combs once (a layer
    /// that is down does not count: the others serve).
    pub fn readiness(&self) -> Readiness {
        if !self.shared.active.load(Ordering::SeqCst) {
            return if self.shared.options.leader_election.is_some() {
                Readiness::Ready
            } else {
                Readiness::NotReady("the controller is not running".to_string())
            };
        }
        let waiting: Vec<&str> = self
            .shared
            .layers
            .iter()
            .filter(|layer| !layer.is_listed() && layer.state() != LayerState::Down)
            .map(|layer| layer.name())
            .collect();
        if waiting.is_empty() {
            Readiness::Ready
        } else {
            Readiness::NotReady(format!(
                "waiting for the first list of layer(s) {}",
                waiting.join(", ")
            ))
        }
    }

    /// The Prometheus text of the metrics.
    pub fn metrics_text(&self) -> Result<String> {
        for layer in self.shared.layers.iter() {
            self.shared
                .metrics
                .set_queue_depth(layer.name(), layer.queue.depth());
        }
        self.shared.metrics.encode()
    }

    /// Where the admin server listens, once it does.
    pub fn admin_address(&self) -> Option<SocketAddr> {
        self.shared.admin_address.get().copied()
    }

    /// Where the admission webhook listens, once it does.
    pub fn webhook_address(&self) -> Option<SocketAddr> {
        self.shared.webhook_address.get().copied()
    }

    /// The last recorded state of every Comb.
    pub fn combs(&self) -> Vec<CombOutcome> {
        super::once::outcomes(&self.shared.layers)
    }

    /// With sharding, who holds which layer as this replica saw it last (`/debug/shards`).
    pub fn shards(&self) -> Option<super::ShardsView> {
        self.shared.shards.lock().clone()
    }

    /// Every transition from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.shared.reports.subscribe()
    }
}
