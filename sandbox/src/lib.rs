//! comb-sandbox: a Kubernetes API emulator faithful enough for `kube::Client` and `kubectl`.
//!
//! [`store::Store`] is one cluster's objects (resourceVersions, watch events, finalizers);
//! the HTTP layer serves it like kube-apiserver.

// ApiError mirrors metav1.Status (reason, message, details) and is built only on failed
// requests, so its size on the error path does not matter.
#![allow(clippy::result_large_err)]

pub mod api_error;
pub mod crd;
pub mod fieldset;
pub mod gc;
pub mod listtypes;
pub mod logs;
pub mod managed;
pub mod meta;
pub mod resources;
pub mod selectors;
pub mod sim;
pub mod store;
pub mod strategy;
pub mod validation;

pub use api_error::{ApiError, FieldError};
pub use resources::{PrinterColumn, ResourceType};
pub use store::{
    DeleteOptions, Deletion, EventType, ListOptions, ListPage, Propagation, Store, StoreEvent,
    StoreOptions, Subresource, WriteOptions,
};
