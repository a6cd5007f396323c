//! How the controller runs: workers, backoffs, the admin and webhook servers, leader election
//! and `--once` (the configuration file says what it runs on).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use comb_upstreams::UpstreamClasses;

use super::backoff::BackoffPolicy;
use super::gate::{Fence, LayerGate};
use super::hub::SharedWatches;
use super::leader::LeaderElection;
use super::shards::Sharding;
use crate::webhook::WebhookOptions;

/// `--once`: stop when every Comb is settled, or at the timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnceOptions {
    /// How long a Pending Comb's status must stay unchanged to count as settled.
    pub settle: Duration,
    /// The whole run's bound.
    pub timeout: Duration,
}

impl Default for OnceOptions {
    fn default() -> Self {
        OnceOptions {
            settle: Duration::from_secs(10),
            timeout: Duration::from_secs(300),
        }
    }
}

/// How the controller runs (the configuration file says what it runs on).
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Combs stepped at once per layer.
    pub workers_per_layer: usize,
    /// Retry delays after a failed step.
    pub backoff: BackoffPolicy,
    /// Delays of reruns in a row: a Comb woken again while its step ran reruns at once the
    /// first time, then waits longer each time in a row (its own writes may be what woke it).
    pub pacing: BackoffPolicy,
    /// Delays between attempts of a failing watch, and of the probe of a layer that is down.
    pub watch_backoff: BackoffPolicy,
    /// Where to serve `/metrics`, `/healthz`, `/readyz` and `/debug/*` (port 0: any free port,
    /// see [`ControllerHandle::admin_address`](super::ControllerHandle::admin_address)).
    pub admin_address: Option<SocketAddr>,
    /// Compete for a Lease and reconcile only while holding it.
    pub leader_election: Option<LeaderElection>,
    /// Share the layers with the other replicas by Leases; each steps the layers it holds.
    pub sharding: Option<Sharding>,
    /// Stop when every Comb is settled.
    pub once: Option<OnceOptions>,
    /// This replica's name in Events.
    pub identity: String,
    /// The upstream classes `spec.upstream` and the layers may name (default: K8s, Static).
    pub upstream_classes: UpstreamClasses,
    /// Serve the validating admission webhook (every replica serves it, leading or not).
    pub webhook: Option<WebhookOptions>,
    /// Answer the steps' reads of managed objects, Pods and peer Combs from the watches
    /// (default); off, every read goes to the API server, as `--once` always does.
    pub read_from_watches: bool,
    /// Step only these layers, and watch the Combs of only these and the layers they borrow
    /// from, directly, through others or as a fallback (`None`: every layer). A layer on
    /// demand runs so, beside the layers of the file, stepping none of theirs.
    pub steps_only: Option<Vec<String>>,
    /// Watches shared with the other controllers of the process that hold them (the layers on
    /// demand's): one watch per cluster, kind and scope for all of them, the layers made from
    /// a template watching every namespace of their cluster (`None`: watches of its own).
    pub shared_watches: Option<SharedWatches>,
    /// With sharding and layer templates: which CombLayers this replica may run, shared with
    /// the layers on demand (the coordinator holds their Leases).
    pub layer_gate: Option<LayerGate>,
    /// The fence the workers run under (`None`: none): a layer on demand's controller runs
    /// under its CombLayer's Lease, as the coordinator moves it.
    pub fence: Option<Arc<Fence>>,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            workers_per_layer: 8,
            backoff: BackoffPolicy::default(),
            pacing: BackoffPolicy {
                initial: Duration::from_millis(200),
                max: Duration::from_secs(10),
            },
            watch_backoff: BackoffPolicy {
                initial: Duration::from_millis(200),
                max: Duration::from_secs(10),
            },
            admin_address: None,
            leader_election: None,
            sharding: None,
            once: None,
            identity: default_identity(),
            upstream_classes: UpstreamClasses::default(),
            webhook: None,
            read_from_watches: true,
            steps_only: None,
            shared_watches: None,
            layer_gate: None,
            fence: None,
        }
    }
}

/// The pod name (`POD_NAME`, `HOSTNAME`), else `comb-<pid>`.
pub fn default_identity() -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("comb-{}", std::process::id()))
}
