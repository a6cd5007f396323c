//! Who is woken by what: a Comb CR as watched or as our own write returned it, a CR that is
//! gone, and the dependents and borrowers (in lower layers) of a Comb whose status changed.

use std::sync::Arc;

use comb_api::{Comb, Phase};
use parking_lot::Mutex;
use tracing::warn;

use super::graph::BorrowIndex;
use super::layer::{self, LayerRuntime, Layers};
use super::queue::Trigger;
use super::report::Reports;
use super::triggers::{self, Source};
use crate::config::Config;
use crate::engine::keys::CombKey;

/// The fan-out: every CR the layers see goes through here, and here it is decided whom it
/// wakes (the Comb itself, its dependents, the borrowers in lower layers), by the index of who
/// borrows from whom it keeps.
pub(crate) struct Fanout {
    config: Arc<Config>,
    layers: Arc<Layers>,
    borrowers: Mutex<BorrowIndex>,
    reports: Arc<Reports>,
}

impl Fanout {
    pub(crate) fn new(config: Arc<Config>, layers: Arc<Layers>, reports: Arc<Reports>) -> Fanout {
        Fanout {
            config,
            layers,
            borrowers: Mutex::new(BorrowIndex::default()),
            reports,
        }
    }

    /// A Comb CR as watched: store it, wake it, and wake whoever reacts to its status.
    pub(crate) fn cr_seen(&self, layer: &Arc<LayerRuntime>, cr: Comb, source: Source) {
        let Some(key) = triggers::comb_key(&cr) else {
            return;
        };
        if let Some(problem) = &cr.status_error {
            warn!(
                layer = layer.name(),
                namespace = %key.namespace,
                comb = %key.name,
                problem = %problem,
                "the recorded status does not decode; it counts as absent until the next status write"
            );
        }
        let peer = triggers::upstream_peer(&self.config, layer.index, &cr);
        let references = cr.spec.dependencies().to_vec();
        let change = layer.observe_cr(&key, cr, source);
        self.borrowers.lock().set(&(layer.index, key.clone()), peer);
        // Until it is built, `spec.dependsOn` stands for the class's dependencies; each step
        // records the class's own.
        if change.trigger == Some(Trigger::Created)
            && let Some(cycles) = layer.set_dependencies(&key, &references)
        {
            self.reports.spawn_cycle_report(layer, cycles);
        }
        self.react(layer, &key, &change);
    }

    /// A CR as our own write returned it: held at once (the watch brings it later), and whoever
    /// reacts to its status is woken now.
    pub(crate) fn own_write(&self, layer: &LayerRuntime, key: &CombKey, cr: Comb) {
        let change = layer.observe_cr(key, cr, Source::OwnWrite);
        self.react(layer, key, &change);
    }

    /// What a CR change calls for: a step of the Comb, and the steps of those that react to
    /// its status.
    pub(crate) fn react(&self, layer: &LayerRuntime, key: &CombKey, change: &layer::CrChange) {
        if let Some(trigger) = change.trigger {
            layer.queue.enqueue(key, trigger);
        }
        if change.status_changed {
            self.wake_watchers_of(layer, key);
        }
    }

    /// A Comb CR is gone: forget it and wake whoever depended on or borrowed from it.
    pub(crate) fn cr_gone(&self, layer: &Arc<LayerRuntime>, key: &CombKey) {
        if let Some(cycles) = layer.set_dependencies(key, &[]) {
            self.reports.spawn_cycle_report(layer, cycles);
        }
        if layer.remove_cr(key) {
            self.borrowers.lock().set(&(layer.index, key.clone()), None);
            self.wake_watchers_of(layer, key);
        }
    }

    /// One of the objects `key` manages changed: wake it, and, while its record does not follow
    /// its objects, its dependents, which judge it by its objects as they run now. Otherwise its
    /// own step records the change and that wakes them (a changed status); in maintenance,
    /// disabled or blocked, no step of it looks at its objects, so its record stays as it is
    /// while they come and go.
    pub(crate) fn object_changed(&self, layer: &LayerRuntime, key: &CombKey) {
        layer.touch(key);
        layer.queue.enqueue(key, Trigger::Resource);
        let dependents = layer.dependents_of(key);
        if dependents.is_empty() {
            return;
        }
        let follows =
            !layer.knows(key) || record_follows_objects(layer.recorded_phase(key).as_ref());
        if !follows {
            for dependent in dependents {
                layer.queue.enqueue(&dependent, Trigger::Dependency);
            }
        }
    }

    /// `layer` is back after its API server did not answer: every Comb of it is stepped, and
    /// the lower layers read its Combs, so whatever judged them while it was down (a borrower,
    /// a dependent of a borrower) looks again now (a 2 s partition of prod left dev's mailer
    /// Blocked until the resync without this).
    pub(crate) fn layer_recovered(&self, layer: &LayerRuntime) {
        for key in layer.keys() {
            layer.touch(&key);
            layer.queue.enqueue(&key, Trigger::LayerRecovered);
            self.wake_borrowers_of(layer, &key);
        }
    }

    /// This replica took `layer` over from another: every Comb of it is stepped.
    pub(crate) fn layer_taken(&self, layer: &LayerRuntime) {
        for key in layer.keys() {
            layer.queue.enqueue(&key, Trigger::Created);
        }
    }

    /// The fallback chain of borrower `key` moved: its step borrows from the new entry.
    pub(crate) fn chain_moved(&self, layer: &LayerRuntime, key: &CombKey) {
        layer.touch(key);
        layer.queue.enqueue(key, Trigger::Fallback);
    }

    /// Wakes the Combs of the layer that depend on `key`, and the Combs of lower layers that
    /// borrow from it.
    fn wake_watchers_of(&self, layer: &LayerRuntime, key: &CombKey) {
        for dependent in layer.dependents_of(key) {
            layer.queue.enqueue(&dependent, Trigger::Dependency);
        }
        self.wake_borrowers_of(layer, key);
    }

    /// Wakes the Combs of lower layers that borrow from `key`, and their dependents: a
    /// borrower's health, as its dependents judge it, is its live status, which reads this
    /// peer, so a dependent that judged while the peer could not be read must look again even
    /// when the borrower's own record never changed.
    fn wake_borrowers_of(&self, layer: &LayerRuntime, key: &CombKey) {
        let borrowers = self
            .borrowers
            .lock()
            .borrowers_of(&(layer.index, key.clone()));
        for (index, borrower) in borrowers {
            if let Some(lower) = self.layers.get(index) {
                // How the borrower stands reads this peer: a verdict on it is out of date.
                lower.touch(&borrower);
                lower.queue.enqueue(&borrower, Trigger::Upstream);
                for dependent in lower.dependents_of(&borrower) {
                    lower.queue.enqueue(&dependent, Trigger::Dependency);
                }
            }
        }
    }
}

/// Whether a Comb whose recorded phase is `phase` records its objects' changes: its steps look
/// at them only while it is Running or Pending.
fn record_follows_objects(phase: Option<&Phase>) -> bool {
    matches!(phase, Some(Phase::Running | Phase::Pending))
}

#[cfg(test)]
mod tests {
    use super::*;

    use comb_api::CombStatus;

    #[test]
    fn the_records_that_follow_their_objects() {
        let recorded = |phase: &str| CombStatus {
            phase: Some(phase.into()),
            ..CombStatus::default()
        };
        for (status, follows) in [
            (Some(recorded("Running")), true),
            (Some(recorded("Pending")), true),
            (Some(recorded("Maintenance")), false),
            (Some(recorded("Disabled")), false),
            (Some(recorded("Blocked")), false),
            (Some(recorded("NeedsConfig")), false),
            (Some(recorded("Error")), false),
            (Some(CombStatus::default()), false),
            (None, false),
        ] {
            let phase = status.as_ref().and_then(|status| status.phase.as_ref());
            assert_eq!(record_follows_objects(phase), follows, "{status:?}");
        }
    }
}
