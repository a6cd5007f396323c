//! The controller's Prometheus metrics, served on `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

use crate::engine::cache::CountUnprojectable;
use crate::error::{Error, Result};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LayerLabels {
    layer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    layer: String,
    phase: String,
}

/// The state a transition reached: its phase and Ready reason (both few and fixed).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    layer: String,
    phase: String,
    reason: String,
}

/// What a status write changed ([`crate::controller::StatusChange`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusWriteLabels {
    layer: String,
    change: String,
}

/// How a dependency's verdict was reached: `judged` (built, rendered, observed) or `kept` (the
/// one reached before, nothing having changed since).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    layer: String,
    how: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabels {
    context: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiErrorLabels {
    layer: String,
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CopyLabels {
    context: String,
    kind: String,
}

type HistogramFamily = Family<LayerLabels, Histogram, fn() -> Histogram>;

fn step_histogram() -> Histogram {
    // 1 ms to ~33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every metric of the controller, registered under the prefix `comb`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Family<PhaseLabels, Counter>,
    transitions: Family<TransitionLabels, Counter>,
    status_writes: Family<StatusWriteLabels, Counter>,
    step_duration: HistogramFamily,
    queue_wait: HistogramFamily,
    queue_depth: Family<LayerLabels, Gauge>,
    api_errors: Family<ApiErrorLabels, Counter>,
    layer_up: Family<LayerLabels, Gauge>,
    shard_held: Family<LayerLabels, Gauge>,
    shard_acquisitions: Family<LayerLabels, Counter>,
    shard_members: Gauge,
    borrowers_on_fallback: Family<LayerLabels, Gauge>,
    upstream_checks: Family<CheckLabels, Counter>,
    dependency_verdicts: Family<VerdictLabels, Counter>,
    undecodable: Family<CopyLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// `metric`, registered in `registry` as `name` with `help`.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// The labels of a metric by layer.
fn of_layer(layer: &str) -> LayerLabels {
    LayerLabels {
        layer: layer.to_string(),
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("comb");
        Metrics {
            reconciles: registered(
                &mut registry,
                "reconciles",
                "Reconcile steps by layer and the phase they recorded",
                Family::default(),
            ),
            transitions: registered(
                &mut registry,
                "transitions",
                "Transitions recorded (a Comb's phase or Ready reason changed: one status write and \
                 one Event each), by layer and the phase and reason reached",
                Family::default(),
            ),
            status_writes: registered(
                &mut registry,
                "status_writes",
                "Status writes of Combs, by layer and what each changed first: transition (the \
                 phase or Ready reason), else via, endpoints, managedResources, observedGeneration, \
                 conditions (messages), upstream, other",
                Family::default(),
            ),
            step_duration: registered(
                &mut registry,
                "step_duration_seconds",
                "How long one reconcile or cleanup step took",
                HistogramFamily::new_with_constructor(step_histogram),
            ),
            queue_wait: registered(
                &mut registry,
                "queue_wait_seconds",
                "How long a Comb waited for a worker between being queued and its step starting",
                HistogramFamily::new_with_constructor(step_histogram),
            ),
            queue_depth: registered(
                &mut registry,
                "queue_depth",
                "Combs waiting for a worker, by layer",
                Family::default(),
            ),
            api_errors: registered(
                &mut registry,
                "api_errors",
                "Failed requests to a layer's API server, by operation",
                Family::default(),
            ),
            layer_up: registered(
                &mut registry,
                "layer_up",
                "1 while the layer's API server answers, else 0",
                Family::default(),
            ),
            shard_held: registered(
                &mut registry,
                "shard_held",
                "1 while this replica holds the layer's shard Lease and steps its Combs (sharded runs)",
                Family::default(),
            ),
            shard_acquisitions: registered(
                &mut registry,
                "shard_acquisitions",
                "Times this replica took a layer's shard Lease",
                Family::default(),
            ),
            shard_members: registered(
                &mut registry,
                "shard_members",
                "Live replicas sharing the layers, as this replica sees them",
                Gauge::default(),
            ),
            borrowers_on_fallback: registered(
                &mut registry,
                "borrowers_on_fallback",
                "Borrowers of the layer that borrow from a fallback (or run locally) because their \
                 preferred upstream is unhealthy",
                Family::default(),
            ),
            upstream_checks: registered(
                &mut registry,
                "upstream_checks",
                "Checks (GET /readyz) of the API servers that borrows with a fallback depend on, by \
                 kube context and result (ok or failed)",
                Family::default(),
            ),
            dependency_verdicts: registered(
                &mut registry,
                "dependency_verdicts",
                "Verdicts on the dependencies of the Combs stepped, by layer and how each was \
                 reached: judged (the dependency built, rendered and observed) or kept (the one \
                 reached for an earlier dependent, the dependency unchanged since)",
                Family::default(),
            ),
            undecodable: registered(
                &mut registry,
                "undecodable_copies",
                "Watched objects that comb cannot read (a field it reads holds what no reading gives \
                 a value to), by kube context and kind, counted at each delivery; reads of them go \
                 to the API server, and each object is also logged once",
                Family::default(),
            ),
            registry,
        }
    }

    /// What counts the kept copies that do not decode, for the caches and the layers.
    pub fn unprojectable_counter(&self) -> Arc<dyn CountUnprojectable> {
        Arc::new(self.undecodable.clone())
    }

    pub fn set_shard_held(&self, layer: &str, held: bool) {
        self.shard_held
            .get_or_create(&of_layer(layer))
            .set(i64::from(held));
    }

    pub fn shard_acquired(&self, layer: &str) {
        self.shard_acquisitions
            .get_or_create(&of_layer(layer))
            .inc();
    }

    pub fn set_shard_members(&self, members: usize) {
        self.shard_members
            .set(i64::try_from(members).unwrap_or(i64::MAX));
    }

    /// Counts a step of `layer` that recorded `phase`, and how long it took.
    pub fn step(&self, layer: &str, phase: &str, duration: Duration) {
        self.reconciles
            .get_or_create(&PhaseLabels {
                layer: layer.to_string(),
                phase: phase.to_string(),
            })
            .inc();
        self.step_duration
            .get_or_create(&of_layer(layer))
            .observe(duration.as_secs_f64());
    }

    /// How long a step of `layer` waited for a worker.
    pub fn queue_wait(&self, layer: &str, waited: Duration) {
        self.queue_wait
            .get_or_create(&of_layer(layer))
            .observe(waited.as_secs_f64());
    }

    /// Counts a transition of a Comb of `layer` to `phase` with Ready reason `reason` (empty
    /// without one).
    pub fn transition(&self, layer: &str, phase: &str, reason: &str) {
        self.transitions
            .get_or_create(&TransitionLabels {
                layer: layer.to_string(),
                phase: phase.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts a status write of a Comb of `layer` that changed `change` first.
    pub fn status_write(&self, layer: &str, change: &str) {
        self.status_writes
            .get_or_create(&StatusWriteLabels {
                layer: layer.to_string(),
                change: change.to_string(),
            })
            .inc();
    }

    /// Counts a failed request to `layer` (`watch`, `status`, `cleanup`, `event`, ...).
    pub fn api_error(&self, layer: &str, operation: &str) {
        self.api_errors
            .get_or_create(&ApiErrorLabels {
                layer: layer.to_string(),
                operation: operation.to_string(),
            })
            .inc();
    }

    pub fn set_layer_up(&self, layer: &str, up: bool) {
        self.layer_up
            .get_or_create(&of_layer(layer))
            .set(i64::from(up));
    }

    pub fn set_borrowers_on_fallback(&self, layer: &str, count: i64) {
        self.borrowers_on_fallback
            .get_or_create(&of_layer(layer))
            .set(count);
    }

    /// Counts a check of an upstream context's API server.
    pub fn upstream_check(&self, context: &str, ok: bool) {
        self.upstream_checks
            .get_or_create(&CheckLabels {
                context: context.to_string(),
                result: if ok { "ok" } else { "failed" }.to_string(),
            })
            .inc();
    }

    /// A verdict on a dependency in `layer`: `kept` from an earlier dependent, or judged anew.
    pub fn dependency_verdict(&self, layer: &str, kept: bool) {
        self.dependency_verdicts
            .get_or_create(&VerdictLabels {
                layer: layer.to_string(),
                how: if kept { "kept" } else { "judged" }.to_string(),
            })
            .inc();
    }

    pub fn set_queue_depth(&self, layer: &str, depth: usize) {
        self.queue_depth
            .get_or_create(&of_layer(layer))
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// The text exposition format.
    pub fn encode(&self) -> Result<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .map_err(|error| Error::controller_from("encoding the metrics failed", error))?;
        Ok(text)
    }
}

/// [`Metrics`]'s count of kept copies that do not decode.
impl CountUnprojectable for Family<CopyLabels, Counter> {
    fn unprojectable(&self, context: &str, kind: &str) {
        self.get_or_create(&CopyLabels {
            context: context.to_string(),
            kind: kind.to_string(),
        })
        .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_every_metric() {
        let metrics = Metrics::new();
        metrics.step("prod", "Running", Duration::from_millis(3));
        metrics.step("prod", "Running", Duration::from_millis(3));
        metrics.queue_wait("prod", Duration::from_millis(2));
        metrics.api_error("dev", "watch");
        metrics.transition("dev", "Running", "Borrowed");
        metrics.status_write("dev", "via");
        metrics.set_layer_up("dev", false);
        metrics.set_layer_up("prod", true);
        metrics.set_queue_depth("prod", 4);
        metrics.set_shard_held("prod", true);
        metrics.shard_acquired("prod");
        metrics.set_shard_members(3);
        metrics.set_borrowers_on_fallback("dev", 2);
        metrics.upstream_check("staging", false);
        metrics
            .unprojectable_counter()
            .unprojectable("prod", "Deployment");
        let text = metrics.encode().unwrap();
        for line in [
            r#"comb_reconciles_total{layer="prod",phase="Running"} 2"#,
            r#"comb_step_duration_seconds_count{layer="prod"} 2"#,
            r#"comb_queue_wait_seconds_count{layer="prod"} 1"#,
            r#"comb_queue_depth{layer="prod"} 4"#,
            r#"comb_api_errors_total{layer="dev",operation="watch"} 1"#,
            r#"comb_transitions_total{layer="dev",phase="Running",reason="Borrowed"} 1"#,
            r#"comb_status_writes_total{layer="dev",change="via"} 1"#,
            r#"comb_layer_up{layer="dev"} 0"#,
            r#"comb_layer_up{layer="prod"} 1"#,
            r#"comb_shard_held{layer="prod"} 1"#,
            r#"comb_shard_acquisitions_total{layer="prod"} 1"#,
            "comb_shard_members 3",
            r#"comb_borrowers_on_fallback{layer="dev"} 2"#,
            r#"comb_upstream_checks_total{context="staging",result="failed"} 1"#,
            r#"comb_undecodable_copies_total{context="prod",kind="Deployment"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
