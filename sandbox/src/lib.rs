//! comb-sandbox: a Kubernetes API emulator faithful enough for `kube::Client` and `kubectl`.
//!
//! [`Sandbox::start`] runs N clusters, each an API server on its own 127.0.0.1 port (HTTP or
//! HTTPS with a generated CA) over its own [`Store`], and writes their kubeconfig.
//!
//! By concern: [`store`] (objects, resourceVersions, history, events), [`resources`] and
//! [`crd`] (served types), [`strategy`], [`defaults`], [`specs`], [`validation`], [`schema`]
//! and [`typed`] (what a write keeps and refuses), [`service_addresses`] (cluster IPs and
//! node ports allocated by the write), [`selectors`], [`patch`], [`managed`] and
//! [`fieldset`] (server-side apply), [`gc`] (garbage collector, namespace and CRD cleanup),
//! [`server`], [`watch`], [`discovery`], [`openapi`], [`table`] and [`proto`] (the HTTP
//! face), [`tls`], [`sandbox`]; the simulated cluster is [`sim`], the test controls
//! [`controls`], container logs [`logs`].

// ApiError mirrors metav1.Status (reason, message, details) and is built only on failed
// requests, so its size on the error path does not matter.
#![allow(clippy::result_large_err)]

pub mod api_error;
pub mod backend;
pub mod cel;
pub mod controls;
pub mod crd;
pub mod defaults;
pub mod discovery;
pub mod error;
pub mod fieldset;
pub mod gc;
pub mod listtypes;
pub mod load_balancer;
pub mod logs;
pub mod managed;
pub mod meta;
pub mod openapi;
pub mod patch;
pub mod pod_update;
pub mod proto;
pub mod real;
pub mod resources;
pub mod sandbox;
pub mod schema;
pub mod selectors;
pub mod server;
pub mod service_addresses;
pub mod sim;
pub mod specs;
pub mod store;
pub mod strategy;
pub mod table;
pub mod tls;
pub mod typed;
pub mod validation;
pub mod watch;

pub use api_error::{ApiError, FieldError};
pub use backend::{Backend, Clusters, SharedClusters, emulator_only, kubectl_or_skip};
pub use error::{Error, Result};
pub use resources::{PrinterColumn, ResourceType};
pub use sandbox::{ClusterExtension, ClusterHandle, ExtraContext, Sandbox, SandboxOptions};
pub use server::ServerOptions;
pub use store::{
    DeleteOptions, Deletion, EventType, ListOptions, ListPage, Propagation, Store, StoreEvent,
    StoreOptions, Subresource, WriteOptions,
};
