//! The borrowing path of a Comb (reference §5.1, §6.6, §8.2), in the order a step walks it:
//!
//! - [`resolve`]: which upstream, if any (step 1);
//! - [`observe`]: what the upstream says, checked in the reference's order, and the bridge;
//! - [`redirect`](mod@redirect): the declared endpoints pointed at the upstream;
//! - [`live`]: what the cluster shows now, locally or while borrowing;
//! - [`fallback`]: which entry of a layer's chain a borrower uses while its preferred upstream
//!   is unhealthy.
//!
//! Reconcile (step 5b) then replicates, applies the bridge and prunes.

pub mod fallback;
pub mod live;
pub mod observe;
pub mod redirect;
pub mod resolve;

pub use fallback::{
    ApiHealth, Candidate, FallbackChain, FallbackState, HealthPolicy, Observation, Switch,
};
pub use live::{
    borrowed_endpoints, borrowed_status, derive_borrowed_status, live_status, resolved_endpoints,
};
pub use observe::{Stop, UpstreamObservation, observe_upstream};
pub use redirect::{Redirect, redirect, replication_note};
pub use resolve::{
    BorrowEnv, Borrowing, Controlling, SPEC_SOURCE, UpstreamResolution, resolution,
    resolve_upstream, spec_upstream,
};

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
