//! The simulated cluster: a kubelet, a scheduler and the controller-manager loops that a real
//! cluster runs, reduced to what a client can observe.
//!
//! Each controller is a pure function from the objects it watches to the writes it would make
//! (`plan`), so its behaviour is tested with tables; [`runtime`] feeds them from store events and
//! timers and applies their [`Action`]s through the store, so every change is visible to watchers
//! exactly as if a real controller had made it.

pub mod cron;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod endpoints;
pub mod hash;
pub mod job;
pub mod namespace;
pub mod object;
pub mod pod;
pub mod quantity;
pub mod replicaset;
mod runtime;
pub mod service;
pub mod statefulset;
pub mod volume;

use std::time::Duration;

use jiff::Timestamp;
pub use runtime::spawn;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::real::addresses::{ClusterAddresses, MAX_CLUSTERS};
use crate::sandbox::{ClusterExtension, ClusterHandle, SandboxOptions};
use std::net::Ipv4Addr;

/// How the simulated cluster behaves in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimConfig {
    /// From a Pod's start (binding) until its containers run and it is Ready; Job Pods then run
    /// as long again before they finish. Zero in tests: everything happens at once.
    pub pod_ready_delay: Duration,
    /// The first crash-loop back-off; it doubles per restart up to 30 times this (10s -> 5m0s,
    /// as the kubelet does).
    pub crash_backoff: Duration,
    /// Where LoadBalancer Services get their ingress IP (first, last): the pool of the real
    /// backend's cluster in the same place of `--clusters` ([`crate::real::addresses`]).
    pub load_balancer_pool: (Ipv4Addr, Ipv4Addr),
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            pod_ready_delay: Duration::from_secs(1),
            crash_backoff: Duration::from_secs(10),
            load_balancer_pool: load_balancer_pool(0),
        }
    }
}

/// The LoadBalancer pool of the cluster at `index` of `--clusters`; the real backend places
/// [`MAX_CLUSTERS`] clusters, the emulator starts over after them (it has no data path).
fn load_balancer_pool(index: usize) -> (Ipv4Addr, Ipv4Addr) {
    ClusterAddresses::of(index % MAX_CLUSTERS)
        .map(|addresses| addresses.load_balancer_pool)
        .unwrap_or((Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 62)))
}

/// The simulated cluster as a sandbox extension: each cluster gets its own simulation, with
/// the sandbox's `pod_ready_delay`, publishing the sandbox's CA in every namespace (a CA of
/// its own for HTTP clusters, which have none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Simulation {
    /// See [`SimConfig::crash_backoff`].
    pub crash_backoff: Duration,
}

impl Default for Simulation {
    fn default() -> Self {
        Simulation {
            crash_backoff: SimConfig::default().crash_backoff,
        }
    }
}

impl ClusterExtension for Simulation {
    fn spawn(
        &self,
        cluster: &ClusterHandle,
        options: &SandboxOptions,
        shutdown: CancellationToken,
    ) -> Vec<JoinHandle<()>> {
        let index = options
            .clusters
            .iter()
            .position(|name| name == cluster.name())
            .unwrap_or(0);
        let config = SimConfig {
            pod_ready_delay: options.pod_ready_delay,
            crash_backoff: self.crash_backoff,
            load_balancer_pool: load_balancer_pool(index),
        };
        let ca_pem = match cluster.ca_pem() {
            Some(pem) => pem.to_string(),
            None => match crate::tls::ca_pem() {
                Ok(pem) => pem,
                Err(error) => {
                    tracing::warn!(%error, "no CA bundle for the namespaces of {}", cluster.name());
                    String::new()
                }
            },
        };
        vec![spawn(cluster.store().clone(), config, ca_pem, shutdown)]
    }
}

/// The kinds the simulation reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Pod,
    Service,
    /// Also the work item of the endpoints controllers, named after its Service.
    Endpoints,
    EndpointSlice,
    PersistentVolumeClaim,
    ReplicaSet,
    Deployment,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
    /// The work item of the controllers that fill a new namespace.
    Namespace,
    ServiceAccount,
    ConfigMap,
}

impl Kind {
    pub const ALL: [Kind; 14] = [
        Kind::Pod,
        Kind::Service,
        Kind::Endpoints,
        Kind::EndpointSlice,
        Kind::PersistentVolumeClaim,
        Kind::ReplicaSet,
        Kind::Deployment,
        Kind::StatefulSet,
        Kind::DaemonSet,
        Kind::Job,
        Kind::CronJob,
        Kind::Namespace,
        Kind::ServiceAccount,
        Kind::ConfigMap,
    ];

    pub fn group(self) -> &'static str {
        match self {
            Kind::Pod
            | Kind::Service
            | Kind::Endpoints
            | Kind::PersistentVolumeClaim
            | Kind::Namespace
            | Kind::ServiceAccount
            | Kind::ConfigMap => "",
            Kind::EndpointSlice => "discovery.k8s.io",
            Kind::ReplicaSet | Kind::Deployment | Kind::StatefulSet | Kind::DaemonSet => "apps",
            Kind::Job | Kind::CronJob => "batch",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Pod => "Pod",
            Kind::Service => "Service",
            Kind::Endpoints => "Endpoints",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::PersistentVolumeClaim => "PersistentVolumeClaim",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::Deployment => "Deployment",
            Kind::StatefulSet => "StatefulSet",
            Kind::DaemonSet => "DaemonSet",
            Kind::Job => "Job",
            Kind::CronJob => "CronJob",
            Kind::Namespace => "Namespace",
            Kind::ServiceAccount => "ServiceAccount",
            Kind::ConfigMap => "ConfigMap",
        }
    }

    pub fn api_version(self) -> &'static str {
        match self.group() {
            "" => "v1",
            "apps" => "apps/v1",
            "batch" => "batch/v1",
            _ => "discovery.k8s.io/v1",
        }
    }

    pub fn from_group_kind(group: &str, kind: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.group() == group && k.name() == kind)
    }
}

/// What a controller decided: the writes to make, and when to look again even if nothing
/// changes (a Pod due to become Ready, a crash-loop restart, a cron schedule).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub wake: Option<Timestamp>,
}

impl Plan {
    pub fn new(actions: Vec<Action>, wake: Option<Timestamp>) -> Plan {
        Plan { actions, wake }
    }

    fn push(&mut self, action: Option<Action>) {
        self.actions.extend(action);
    }

    /// Keeps the earlier of the current and the given wake-up.
    fn wake_at(&mut self, at: Option<Timestamp>) {
        self.wake = match (self.wake, at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// The names of the objects the plan deletes, in order (what controllers' tests check).
    #[cfg(test)]
    fn deleted_names(&self) -> Vec<String> {
        self.actions
            .iter()
            .filter_map(|action| match action {
                Action::Delete { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }
}

/// One write a controller wants made. Objects carry their own namespace and name.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Create(Kind, Value),
    /// A whole-object update (spec or metadata), guarded by the object's resourceVersion.
    Update(Kind, Value),
    /// A status subresource update, guarded by the object's resourceVersion.
    UpdateStatus(Kind, Value),
    /// The scheduler's binding of a Pod to the node (no update of a Pod may set its node).
    Bind {
        namespace: String,
        name: String,
    },
    /// A delete with background propagation.
    Delete {
        kind: Kind,
        namespace: String,
        name: String,
    },
}

impl Action {
    pub fn kind(&self) -> Kind {
        match self {
            Action::Create(kind, _) | Action::Update(kind, _) | Action::UpdateStatus(kind, _) => {
                *kind
            }
            Action::Delete { kind, .. } => *kind,
            Action::Bind { .. } => Kind::Pod,
        }
    }

    /// The status update of `object` with `status`, or nothing when the status is unchanged.
    fn status_change(kind: Kind, object: &Value, status: Value) -> Option<Action> {
        let unchanged = match object.get("status") {
            Some(current) => *current == status,
            // The API server stores no status until something writes one.
            None => status.as_object().is_some_and(serde_json::Map::is_empty),
        };
        if unchanged {
            return None;
        }
        let mut updated = object.clone();
        updated["status"] = status;
        Some(Action::UpdateStatus(kind, updated))
    }

    fn delete(kind: Kind, object: &Value) -> Action {
        Action::Delete {
            kind,
            namespace: object::namespace(object).to_string(),
            name: object::name(object).to_string(),
        }
    }
}
