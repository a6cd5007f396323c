//! What the controller tells people: transitions in the log, as Events and to subscribers, and
//! dependency cycles.

use std::sync::Arc;

use comb_api::{Comb, CombStatus, Reason};
use tokio::sync::broadcast;
use tracing::{info, warn};

use super::events::{self, Announced, Announcement, EventType};
use super::graph::describe_cycles;
use super::layer::LayerRuntime;
use super::metrics::Metrics;
use super::transition::{StatusChange, Transition};
use super::triggers::comb_key;
use crate::engine::keys::CombKey;

/// The controller's reporting: what it says in the log, as Events (written as
/// `identity` in `group`'s name) and to the subscribers of its transitions.
pub(crate) struct Reports {
    group: String,
    identity: String,
    metrics: Arc<Metrics>,
    transitions: broadcast::Sender<Transition>,
}

impl Reports {
    pub(crate) fn new(group: &str, identity: &str, metrics: Arc<Metrics>) -> Reports {
        let (transitions, _) = broadcast::channel(1024);
        Reports {
            group: group.to_string(),
            identity: identity.to_string(),
            metrics,
            transitions,
        }
    }

    /// Every transition from now on (a lagging receiver loses the oldest).
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.transitions.subscribe()
    }

    pub(crate) fn spawn_cycle_report(
        self: &Arc<Self>,
        layer: &Arc<LayerRuntime>,
        cycles: Vec<Vec<CombKey>>,
    ) {
        if !layer.is_holding() {
            // Another replica steps the layer and reports its cycles.
            return;
        }
        let reports = self.clone();
        let layer = layer.clone();
        tokio::spawn(async move { reports.report_cycles(&layer, cycles).await });
    }

    /// Reports the dependency cycles of a layer (they changed): a log line, and an Event on
    /// every Comb in one. The Combs stay Blocked: each waits for another that is not healthy.
    pub(crate) async fn report_cycles(&self, layer: &LayerRuntime, cycles: Vec<Vec<CombKey>>) {
        if cycles.is_empty() {
            info!(layer = layer.name(), "no dependency cycles any more");
            return;
        }
        let message = format!(
            "dependency cycle: {} (these stay Blocked)",
            describe_cycles(&cycles)
        );
        warn!(layer = layer.name(), "{message}");
        let mut members: Vec<&CombKey> = cycles.iter().flatten().collect();
        members.sort();
        members.dedup();
        for key in members {
            if let Some(cr) = layer.cr(key) {
                self.event(
                    layer,
                    &cr,
                    EventType::Warning,
                    Reason::DependencyCycle,
                    &message,
                )
                .await;
            }
        }
    }

    /// After a step recorded `status` (previously `previous`; `written` when it wrote it): the
    /// write counted by what it changed, the transition, if any, in the log, as an Event and to
    /// subscribers.
    pub(crate) async fn after_status(
        &self,
        layer: &LayerRuntime,
        cr: &Comb,
        previous: Option<&CombStatus>,
        status: &CombStatus,
        written: bool,
    ) {
        if written {
            let change = StatusChange::between(previous, status);
            self.metrics.status_write(layer.name(), change.as_str());
        }
        let Some(key) = comb_key(cr) else {
            return;
        };
        let Some(transition) =
            Transition::between(layer.name(), &key.namespace, &key.name, previous, status)
        else {
            return;
        };
        let change = transition.change();
        info!("{change}");
        self.metrics.transition(
            layer.name(),
            transition.new.phase.as_str(),
            transition.new.reason.as_ref().map_or("", Reason::as_str),
        );
        let reason = transition
            .new
            .reason
            .clone()
            // A status without a Ready reason: the Event says its phase.
            .unwrap_or_else(|| Reason::from(transition.new.phase.as_str()));
        self.event(
            layer,
            cr,
            EventType::for_phase(&transition.new.phase),
            reason,
            &change,
        )
        .await;
        // Nobody listening is fine.
        let _ = self.transitions.send(transition);
    }

    /// Announces the prune notes of a step of `cr` that were not announced before, each as an
    /// Event; `previous` is the status recorded before the step.
    pub(crate) async fn announce_notes(
        &self,
        layer: &LayerRuntime,
        cr: &Comb,
        notes: &[String],
        previous: Option<&CombStatus>,
    ) {
        let Some(key) = comb_key(cr).filter(|_| !notes.is_empty()) else {
            return;
        };
        let previous_message = previous
            .and_then(CombStatus::ready)
            .and_then(|ready| ready.message.as_deref());
        let fresh = layer
            .with_announced(&key, |announced| {
                announced.new_notes(notes, previous_message)
            })
            .unwrap_or_default();
        for note in fresh {
            info!("{note}");
            self.announce(layer, cr, Announcement::of_note(&note)).await;
        }
    }

    /// Writes an Event about `cr`, unless it is the one written last about that Comb; a
    /// failure is logged and counted, and the Comb's next step tries it again.
    pub(crate) async fn event(
        &self,
        layer: &LayerRuntime,
        cr: &Comb,
        kind: EventType,
        reason: Reason,
        message: &str,
    ) {
        self.announce(layer, cr, Announcement::new(kind, reason, message))
            .await;
    }

    /// Tries again the Events about `cr` the API did not take before (see [`Reports::event`]).
    pub(crate) async fn retry_events(&self, layer: &LayerRuntime, cr: &Comb) {
        let Some(key) = comb_key(cr) else { return };
        let unsent = layer
            .with_announced(&key, Announced::take_unsent)
            .unwrap_or_default();
        for event in unsent {
            self.announce(layer, cr, event).await;
        }
    }

    /// Writes `event` about `cr` when it is news, and counts it as said once the API took it.
    async fn announce(&self, layer: &LayerRuntime, cr: &Comb, event: Announcement) {
        let key = comb_key(cr);
        let news = key
            .as_ref()
            .and_then(|key| layer.with_announced(key, |announced| announced.is_news(&event)))
            .unwrap_or(true);
        if !news {
            return;
        }
        let written = events::event_for(
            &self.group,
            cr,
            event.kind,
            event.reason.as_str(),
            &event.message,
            &self.identity,
        );
        match events::publish(layer.ops.client().clone(), &written).await {
            Ok(()) => {
                if let Some(key) = &key {
                    layer.with_announced(key, |announced| announced.accepted(&event));
                }
            }
            Err(error) => {
                self.metrics.api_error(layer.name(), "event");
                warn!("{error}; the next step of the Comb tries again");
                if let Some(key) = &key {
                    layer.with_announced(key, |announced| announced.refused(event));
                }
            }
        }
    }
}
