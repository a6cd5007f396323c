//! Reads from the watches the controller holds (issue 12): peer Combs from the layers' Comb
//! watches, and how each step's reads are counted for `/debug/queue`. The managed objects and
//! Pods are the engine's [`ObjectCache`](crate::engine::cache::ObjectCache), fed by
//! `watch::watch_managed`.

use std::sync::{Arc, OnceLock, Weak};

use comb_api::Comb;
use comb_upstreams::PeerCombs;

use super::layer::{LayerRuntime, LayerState};
use crate::engine::cache::ReadLog;
use crate::engine::keys::CombKey;

/// Peer Combs as the layers' Comb watches hold them: a layer of the peer's context that manages
/// its namespace, has listed and is not down answers (a down layer's CRs may be stale; the read
/// then goes to the server and fails as unreachable, as it would without the watch).
#[derive(Debug, Default)]
pub struct LayerPeers {
    /// Weak: the layers hold this (through their borrow environment).
    layers: OnceLock<Vec<Weak<LayerRuntime>>>,
}

impl LayerPeers {
    /// The layers to answer from, once they are built.
    pub fn set(&self, layers: &[Arc<LayerRuntime>]) {
        let _ = self.layers.set(layers.iter().map(Arc::downgrade).collect());
    }
}

impl std::fmt::Debug for LayerRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LayerRuntime")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

impl PeerCombs for LayerPeers {
    fn peer(&self, context: &str, namespace: &str, name: &str) -> Option<Comb> {
        let key = CombKey::new(namespace, name);
        self.layers
            .get()?
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|layer| {
                layer.layer.context == context
                    && layer.layer.manages(namespace)
                    && layer.is_listed()
                    && layer.state() != LayerState::Down
            })
            .find_map(|layer| layer.cr(&key))
    }
}

/// [`LayerPeers`] for one step: counts where each peer read went.
#[derive(Debug)]
pub struct StepPeers {
    pub peers: Arc<dyn PeerCombs>,
    pub log: Arc<ReadLog>,
}

impl PeerCombs for StepPeers {
    fn peer(&self, context: &str, namespace: &str, name: &str) -> Option<Comb> {
        let found = self.peers.peer(context, namespace, name);
        match found {
            Some(_) => self.log.cached(),
            None => self.log.api("get Comb (peer)"),
        }
        found
    }
}
