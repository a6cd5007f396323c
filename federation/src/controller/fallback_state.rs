//! What the controller keeps about the upstreams of borrows with a fallback (issue 22), apart
//! from [`fallback`](super::fallback) that fills it: `Shared` holds it, and the checks that
//! fill it are methods of `Shared`, so the state cannot live beside them without a cycle.

use std::collections::HashMap;
use std::time::Instant;

use parking_lot::Mutex;

use crate::engine::borrow::{ApiHealth, FallbackChain};
use crate::engine::keys::CombKey;

/// What the controller knows about the upstreams of borrows with a fallback, and each such
/// borrower's chain.
#[derive(Debug, Default)]
pub(crate) struct Fallbacks {
    /// Per upstream kube context: what its checks found.
    pub(super) api: Mutex<HashMap<String, ApiHealth>>,
    /// Per address: when it was last probed, and what that found.
    pub(super) probes: Mutex<HashMap<String, Probed>>,
    /// Per borrower: its chain.
    pub(super) chains: Mutex<HashMap<(usize, CombKey), FallbackChain>>,
}

/// When an address was probed, and what that found.
type Probed = (Instant, Result<(), String>);
