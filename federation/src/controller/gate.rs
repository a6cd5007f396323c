//! The fence a sharded layer's work runs under, and which CombLayers a sharded replica may
//! run ([`LayerGate`]).
//!
//! Under `--sharded`, a CombLayer is a unit of the shard protocol like a layer of the file: its
//! Lease (`<managedBy>-shard-<name>`) is claimed by the replica rendezvous hashing picks among
//! the live members (plain, not bounded: a CombLayer made or removed moves no other one), and
//! only that replica runs it. The coordinator grants it here once it holds the Lease, with the
//! Lease's fence; the layers on demand say which CombLayers there are, run only those granted
//! (the layer's controller under that fence), and say which they run; the coordinator takes a
//! grant back before it lets the Lease go, and lets it go only once the layer stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

/// The soft and hard deadlines of a layer's work: no step starts after the first, a running
/// step is dropped at the second. `None`: no limit (the layer is not sharded).
pub type Deadlines = Option<(Instant, Instant)>;

/// The deadlines a layer's workers obey, moved on by every renewal (`send_replace`).
pub type Fence = watch::Sender<Deadlines>;

/// Which CombLayers this replica may run, shared by the shard coordinator and the layers on
/// demand. Cloning shares it.
#[derive(Clone)]
pub struct LayerGate {
    state: Arc<Mutex<GateState>>,
    /// The CombLayers whose layer runs now, as the layers on demand last said.
    running: Arc<watch::Sender<BTreeSet<String>>>,
}

#[derive(Default)]
struct GateState {
    /// The CombLayers there are (but those named like a layer of the file).
    wanted: BTreeSet<String>,
    /// Those this replica holds the Lease of, with its fence.
    granted: BTreeMap<String, Arc<Fence>>,
}

impl Default for LayerGate {
    fn default() -> Self {
        LayerGate {
            state: Arc::default(),
            running: Arc::new(watch::Sender::new(BTreeSet::new())),
        }
    }
}

impl fmt::Debug for LayerGate {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        formatter
            .debug_struct("LayerGate")
            .field("wanted", &state.wanted)
            .field("granted", &state.granted.keys().collect::<Vec<_>>())
            .field("running", &*self.running.borrow())
            .finish()
    }
}

impl LayerGate {
    /// The layers on demand: these are the CombLayers there are.
    pub(crate) fn want(&self, names: BTreeSet<String>) {
        self.state.lock().wanted = names;
    }

    /// The coordinator: the CombLayers there are.
    pub(crate) fn wanted(&self) -> BTreeSet<String> {
        self.state.lock().wanted.clone()
    }

    /// The coordinator: this replica holds `name`'s Lease; its layer runs under `fence`.
    pub(crate) fn grant(&self, name: &str, fence: Arc<Fence>) {
        self.state.lock().granted.insert(name.to_string(), fence);
    }

    /// The coordinator: `name`'s layer may no longer run here.
    pub(crate) fn revoke(&self, name: &str) {
        self.state.lock().granted.remove(name);
    }

    /// The layers on demand: whether `name` may run here, and under which fence.
    pub(crate) fn granted(&self, name: &str) -> Option<Arc<Fence>> {
        self.state.lock().granted.get(name).cloned()
    }

    /// The layers on demand: these CombLayers' layers run now.
    pub(crate) fn set_running(&self, names: BTreeSet<String>) {
        self.running.send_if_modified(|running| {
            let changed = *running != names;
            *running = names;
            changed
        });
    }

    /// The coordinator: resolves once `name`'s layer no longer runs here.
    pub(crate) async fn stopped(&self, name: &str) {
        let mut running = self.running.subscribe();
        // The sender lives as long as the gate, which this borrow holds.
        let _ = running.wait_for(|running| !running.contains(name)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_revoked_layer_is_waited_for_until_it_no_longer_runs() {
        let gate = LayerGate::default();
        gate.want(BTreeSet::from(["alice".to_string(), "bob".to_string()]));
        assert_eq!(gate.wanted().len(), 2);
        gate.grant("alice", Arc::new(Fence::new(None)));
        assert!(gate.granted("alice").is_some());
        assert!(gate.granted("bob").is_none());
        gate.set_running(BTreeSet::from(["alice".to_string()]));
        gate.revoke("alice");
        assert!(gate.granted("alice").is_none());
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.stopped("alice").await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "alice still runs");
        gate.set_running(BTreeSet::new());
        waiting.await.expect("the wait ends once alice stopped");
    }
}
