//! The Comb engine: everything one Comb does in one layer (reference §1-10).
//!
//! Pure planning (class contract, rendering and digest, live status derivation, prune planning,
//! status building, bridge planning) lives beside the client edge that executes it. The modules
//! form a one-way chain along the data path (docs/architecture.md; `tests/architecture.rs`
//! fails on a cycle):
//!
//! `context` / `values` / `digest` <- `render` <- `class` (build) <- `borrow::resolve` <-
//! `observe` / `live_status` / `borrow::observe` <- `deploy` / `prune` <- `status` <- `reconcile`
//! (record).
//!
//! # The names of a Comb
//!
//! A Comb goes by a few type names, each for a different stage of knowing it:
//!
//! - [`comb_api::Comb`]: the custom resource as stored, spec and recorded status; nothing is
//!   checked.
//! - [`comb_api::CombRef`]: how a person names one (`[LAYER:][NAMESPACE/]NAME`), before it is
//!   found; `config::CombLocation` is where one was found (layer, context, namespace, name) and
//!   `config::LocatedComb` that location with the CR read there. The controller keys its queue by
//!   [`keys::CombKey`] (namespace and name within one layer).
//! - [`class::CombInstance`]: a Comb built from its CR (`ClassRegistry::build`): the class, the
//!   checked context and the CR; everything the engine does takes one.
//! - [`context::CombContext`]: what a class method reads about its Comb (name, namespace,
//!   config, spec, the layer's settings); a class never sees more.
//! - [`class::CombClass`]: the behaviour, one per class, shared by its Combs.
//! - [`live_status::LiveStatus`] and [`operations::Description`]: what the cluster shows of a
//!   Comb now, and everything about it, as `comb status` and `comb describe` print them.

pub mod borrow;
pub mod bridge;
pub mod cache;
pub mod class;
pub mod context;
pub mod deploy;
pub mod digest;
pub mod endpoints;
pub mod keys;
pub mod kinds;
pub mod kube_ops;
pub mod live_status;
pub mod manifests_class;
pub mod observe;
pub mod operations;
pub mod ownership;
pub mod projection;
pub mod prune;
pub mod reconcile;
pub mod render;
pub mod status;
pub mod tenancy;
pub mod values;
