//! The federation controller (`comb run`, DESIGN.md §6): one process, every layer.
//!
//! Per layer it watches the Comb CRs and the resources Combs manage, and steps each Comb
//! through a per-layer work queue: one step at a time per Comb, `workers_per_layer` Combs at
//! once, so that a slow or unreachable layer never holds up another. A Comb is stepped when its
//! CR changes, when one of its resources changes or disappears, when a Comb it depends on or
//! the peer it borrows from (in a higher layer) changes status, after a failed step (backoff)
//! and every `resync`.
//!
//! Library use:
//!
//! ```no_run
//! # async fn run() -> comb_federation::error::Result<()> {
//! use comb_federation::config::Config;
//! use comb_federation::controller::{Controller, ControllerOptions};
//! use comb_federation::engine::class::ClassRegistry;
//! use tokio_util::sync::CancellationToken;
//!
//! let config = Config::load(std::path::Path::new("comb.yaml"))?;
//! let controller = Controller::new(config, ClassRegistry::with_builtins(), ControllerOptions::default()).await?;
//! let mut transitions = controller.subscribe();
//! tokio::spawn(async move {
//!     while let Ok(transition) = transitions.recv().await {
//!         println!("{transition}");
//!     }
//! });
//! let outcome = controller.run(CancellationToken::new()).await?;
//! # let _ = outcome;
//! # Ok(()) }
//! ```

pub mod admin;
pub mod backoff;
mod coordinator;
pub mod deletion;
mod dependencies;
pub mod events;
mod fallback;
mod fanout;
mod gate;
pub mod graph;
mod handle;
mod health;
mod hub;
mod layer;
pub mod leader;
pub mod metrics;
mod on_demand;
pub mod once;
mod options;
pub mod queue;
mod reads;
mod report;
mod run;
pub mod shards;
mod step;
pub mod transition;
pub mod triggers;
mod watch;
mod work;

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use tokio_util::sync::CancellationToken;

pub use backoff::BackoffPolicy;
pub use gate::LayerGate;
pub use handle::{ControllerHandle, LayerQueue, Readiness};
pub use hub::SharedWatches;
pub use layer::{LayerState, LayerStatus};
pub use leader::LeaderElection;
pub use on_demand::LayersOnDemand;
pub use once::{CombOutcome, RunOutcome};
pub use options::{ControllerOptions, OnceOptions, default_identity};
pub use queue::{QueueEntryView, Trigger};
pub use run::Controller;
pub use shards::{ShardView, Sharding, ShardsView};
pub use transition::{PhaseReason, StatusChange, Transition};

use crate::config::Config;
use crate::engine::class::ClassRegistry;
use fallback::Fallbacks;
use fanout::Fanout;
use health::Health;
use layer::Layers;
use metrics::Metrics;
use report::Reports;

/// The controller's context, as data: what the watches, the workers and the admin server
/// share. Each part owns its state and its methods in a module of its own; a part that needs
/// another holds it (the fan-out reports cycles, health wakes borrowers through the fan-out,
/// fallback announces switches), so every dependency between them is one the module names.
pub(crate) struct Shared {
    pub(crate) config: Arc<Config>,
    pub(crate) registry: Arc<ClassRegistry>,
    pub(crate) layers: Arc<Layers>,
    pub(crate) metrics: Arc<Metrics>,
    /// Transitions, Events, cycles.
    pub(crate) reports: Arc<Reports>,
    /// Who a CR or an object change wakes.
    pub(crate) fanout: Arc<Fanout>,
    /// Whether each layer's API server answers.
    pub(crate) health: Arc<Health>,
    /// The upstreams of borrows with a fallback, and each borrower's chain.
    pub(crate) fallbacks: Arc<Fallbacks>,
    options: ControllerOptions,
    /// Cancelled when the controller stops: background probes end with it.
    stopping: CancellationToken,
    /// Reconciling (false while waiting for the Lease).
    active: AtomicBool,
    /// With sharding, who holds what, as the coordinator saw it last.
    shards: Mutex<Option<shards::ShardsView>>,
    admin_address: OnceLock<SocketAddr>,
    webhook_address: OnceLock<SocketAddr>,
}
