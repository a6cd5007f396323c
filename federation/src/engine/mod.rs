//! The Comb engine: everything one Comb does in one layer (reference §1-10).
//!
//! Pure planning (class contract, rendering and digest, live status derivation, prune planning,
//! status building, bridge planning) lives beside the client edge that executes it.

pub mod borrow;
pub mod bridge;
pub mod class;
pub mod context;
pub mod deploy;
pub mod digest;
pub mod endpoints;
pub mod kinds;
pub mod kube_ops;
pub mod live_status;
pub mod manifests_class;
pub mod observe;
pub mod operations;
pub mod prune;
pub mod reconcile;
pub mod render;
pub mod status;
pub mod tenancy;
pub mod values;
