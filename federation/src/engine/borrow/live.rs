//! What the cluster shows of a Comb now (reference §8): the local live status, or, while it
//! borrows, the status of its bridge and upstream (§8.2); and the endpoints it resolves now.

use comb_api::{Endpoint, Phase};
use comb_upstreams::{Upstream, UpstreamContext};
use jiff::Timestamp;

use crate::engine::borrow::observe::{UpstreamObservation, observe_upstream};
use crate::engine::borrow::resolve::Borrowing;
use crate::engine::class::CombInstance;
use crate::engine::kinds::Scopes;
use crate::engine::kube_ops::KubeOps;
use crate::engine::live_status::{LiveStatus, Problem};
use crate::engine::observe::{fetch_live, observe_local};
use crate::engine::projection::Projection;
use crate::error::{Error, Result};

/// The status of a borrowing Comb from its observation and the live objects of its bridge
/// (`live[i]` belongs to `observed.bridge[i]`). A stop is the status; otherwise each missing
/// bridge object is a pending `ResourcesMissing`, and an upstream that does not run a pending
/// `UpstreamNotRunning`. Without problems it is Running; with no bridge object live NotDeployed;
/// else Pending.
pub fn derive_borrowed_status(
    observed: &UpstreamObservation,
    live: &[Option<Projection>],
    now: Timestamp,
) -> LiveStatus {
    let upstream = Some(observed.record(now));
    if let Some(stop) = &observed.stop {
        return LiveStatus {
            upstream,
            ..LiveStatus::single(
                stop.phase.clone(),
                stop.reason.clone(),
                &stop.message,
                Vec::new(),
            )
        };
    }
    let mut problems: Vec<Problem> = observed
        .bridge
        .iter()
        .enumerate()
        .filter(|(index, _)| !live.get(*index).is_some_and(Option::is_some))
        .map(|(_, item)| Problem::missing(item))
        .collect();
    let nothing_live = !observed.bridge.is_empty() && problems.len() == observed.bridge.len();
    let verdict = observed.verdict();
    if verdict.phase != Phase::Running {
        problems.push(Problem::pending(verdict.reason, verdict.message));
    }
    let summary = LiveStatus::from_problems(&problems, Vec::new());
    let phase = match (problems.is_empty(), nothing_live) {
        (true, _) => Phase::Running,
        (false, true) => Phase::NotDeployed,
        (false, false) => Phase::Pending,
    };
    LiveStatus {
        healthy: phase == Phase::Running,
        phase,
        upstream,
        ..summary
    }
}

/// The status of `comb` while it borrows from `upstream` (reference §8.2): observe the upstream,
/// then read the bridge's live objects (name label, as the local status reads them).
pub async fn borrowed_status(
    ops: &KubeOps,
    comb: &CombInstance,
    upstream: &dyn Upstream,
    ctx: &UpstreamContext,
) -> Result<LiveStatus> {
    let observed = observe_upstream(comb, upstream, ctx, ops).await;
    let live = if observed.stop.is_some() {
        Vec::new()
    } else {
        fetch_live(ops, comb.context(), &observed.bridge).await?
    };
    Ok(derive_borrowed_status(&observed, &live, Timestamp::now()))
}

/// The live status of `comb` (the reference's `status()`): borrowed when `borrowing` names its
/// upstream, else local: render (rendering errors fail it), then observe.
pub async fn live_status(
    ops: &KubeOps,
    comb: &CombInstance,
    borrowing: Option<&Borrowing>,
) -> Result<LiveStatus> {
    match borrowing {
        Some(b) => borrowed_status(ops, comb, b.upstream.as_ref(), &b.ctx).await,
        None => {
            let items = comb.render(ops).await?;
            Ok(observe_local(ops, comb.context(), &items).await?.1)
        }
    }
}

/// The resolved endpoints of `comb`: redirected when `borrowing` names its upstream, else local.
pub async fn resolved_endpoints(
    comb: &CombInstance,
    borrowing: Option<&Borrowing>,
) -> Result<Vec<Endpoint>> {
    match borrowing {
        Some(b) => borrowed_endpoints(comb, b.upstream.as_ref(), &b.ctx).await,
        None => comb.local_endpoints().await,
    }
}

/// The endpoints of `comb` while it borrows from `upstream`: the redirected ones. Fails with the
/// stop message when the upstream offers none (`... is unreachable: vendor down`).
pub async fn borrowed_endpoints(
    comb: &CombInstance,
    upstream: &dyn Upstream,
    ctx: &UpstreamContext,
) -> Result<Vec<Endpoint>> {
    // Only the endpoints are used: where the bridge's objects would land does not matter.
    let observed = observe_upstream(comb, upstream, ctx, &Scopes::default()).await;
    match (observed.endpoints, observed.stop) {
        (Some(endpoints), _) => Ok(endpoints),
        (None, Some(stop)) => Err(Error::endpoints(stop.message)),
        (None, None) => Ok(Vec::new()),
    }
}
