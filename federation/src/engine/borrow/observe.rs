//! Observing the upstream a Comb borrows from (reference §6.6 `observe_upstream`): its status,
//! reachability, loops, its endpoints redirected to the Comb's declarations, and the bridge.
//!
//! Observation never fails: every problem is a [`Stop`] with the reference's phase, reason and
//! message, checked in the reference's order (status, reachability, loop, endpoints, addresses,
//! bridge).

use comb_api::{CombUpstreamStatus, Endpoint, Phase, Reason};
use comb_upstreams::{Upstream, UpstreamContext, UpstreamStatus};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::engine::borrow::redirect::{Redirect, redirect};
use crate::engine::class::CombInstance;
use crate::engine::kinds::ScopeLookup;
use crate::engine::render::RenderedItem;
use crate::engine::values::clean_message;
use crate::error::Error;

/// Where the upstream path stops, and as what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stop {
    pub phase: Phase,
    pub reason: Reason,
    pub message: String,
}

impl Stop {
    fn new(phase: Phase, reason: Reason, message: String) -> Stop {
        Stop {
            phase,
            reason,
            message,
        }
    }
}

/// What observing the upstream found (the reference's `o`).
#[derive(Clone, Debug, Default)]
pub struct UpstreamObservation {
    /// The upstream's class name.
    pub class: String,
    /// What the upstream said, with `via` cut to `maxUpstreamDepth`; `None` when asking failed.
    pub status: Option<UpstreamStatus>,
    /// The Comb's declared endpoints redirected to the upstream, when it offered an address for
    /// each.
    pub endpoints: Option<Vec<Endpoint>>,
    /// The rendered bridge.
    pub bridge: Vec<RenderedItem>,
    /// Set when the path cannot go on.
    pub stop: Option<Stop>,
}

impl UpstreamObservation {
    pub(crate) fn new(class: &str) -> UpstreamObservation {
        UpstreamObservation {
            class: class.to_string(),
            ..UpstreamObservation::default()
        }
    }

    fn stopped(mut self, phase: Phase, reason: Reason, message: String) -> Self {
        self.stop = Some(Stop::new(phase, reason, message));
        self
    }

    /// `upstream <Class>`, plus ` (context <ctx>)` when the status named one.
    pub fn label(&self) -> String {
        upstream_label(&self.class, self.status.as_ref())
    }

    /// `status.upstream` (reference `_upstream_record`): the class, and what the status said.
    pub fn record(&self, now: Timestamp) -> CombUpstreamStatus {
        let status = self.status.as_ref();
        CombUpstreamStatus {
            class: Some(self.class.clone()),
            context: status.and_then(|s| s.context.clone()),
            reachable: status.map(|s| s.reachable),
            phase: status.and_then(|s| s.phase.clone()),
            via: status.map(|s| s.via.clone().unwrap_or_default()),
            observed_at: Some(Time(now)),
        }
    }

    /// The verdict of a step whose bridge stands (reference `_borrowed_verdict`): Running /
    /// `Borrowed` while the upstream runs; Pending / `UpstreamRollingOut` while it rolls out
    /// (one message for the whole rollout, so that a borrower does not change with every step
    /// of the upstream's); else Pending / `UpstreamNotRunning`.
    pub fn verdict(&self) -> Stop {
        let label = self.label();
        let status = self.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_ref());
        match phase {
            Some(Phase::Running) => {
                let via = status.and_then(|s| s.via.as_deref()).unwrap_or_default();
                let through = if via.is_empty() {
                    String::new()
                } else {
                    format!(" via {}", via.join(", "))
                };
                Stop::new(
                    Phase::Running,
                    Reason::Borrowed,
                    format!("borrowed from {label}{through}"),
                )
            }
            Some(Phase::Pending) if status.is_some_and(rolls_out) => Stop::new(
                Phase::Pending,
                Reason::UpstreamRollingOut,
                format!("{label} is rolling out"),
            ),
            _ => Stop::new(
                Phase::Pending,
                Reason::UpstreamNotRunning,
                format!(
                    "{label} is {}{}",
                    phase.map_or("in no known phase", Phase::as_str),
                    says(status, ": ")
                ),
            ),
        }
    }
}

/// Whether a Pending upstream is rolling out: it deployed a change and waits for it
/// (`Deployed`), its workload controllers are carrying it out (`RolloutInProgress`), or it is
/// itself a borrower whose upstream rolls out.
fn rolls_out(status: &UpstreamStatus) -> bool {
    status.reason.as_ref().is_some_and(Reason::rolls_out)
}

/// `upstream <Class>`, plus ` (context <ctx>)` when the status named one.
fn upstream_label(class: &str, status: Option<&UpstreamStatus>) -> String {
    match status.and_then(|s| s.context.as_deref()) {
        Some(context) => format!("upstream {class} (context {context})"),
        None => format!("upstream {class}"),
    }
}

/// `glue` + the upstream's message when it has a non-empty one, else nothing.
fn says(status: Option<&UpstreamStatus>, glue: &str) -> String {
    status
        .and_then(|s| s.message.as_deref())
        .filter(|message| !message.trim().is_empty())
        .map(|message| format!("{glue}{}", clean_message(message)))
        .unwrap_or_default()
}

/// Observes `upstream` for `comb` (reference §6.6 `observe_upstream`), in the reference's order.
/// Never fails: problems are the observation's [`Stop`].
pub async fn observe_upstream(
    comb: &CombInstance,
    upstream: &dyn Upstream,
    ctx: &UpstreamContext,
    scopes: &dyn ScopeLookup,
) -> UpstreamObservation {
    let class = upstream.class_name().to_string();
    let mut observed = UpstreamObservation::new(&class);
    let mut status = match upstream.status(ctx).await {
        Ok(status) => status,
        Err(error) => {
            return observed.stopped(
                Phase::Error,
                Reason::UpstreamFailed,
                format!(
                    "reading the status of {class} failed: {}",
                    clean_message(&error.to_string())
                ),
            );
        }
    };
    let max = comb.settings().max_upstream_depth.get();
    let mut via = status.via.take().unwrap_or_default();
    let looped = via.len() > max;
    via.truncate(max);
    status.via = Some(via);
    observed.status = Some(status);
    let label = observed.label();
    let status = observed.status.as_ref();

    if !status.is_some_and(|s| s.reachable) {
        let message = format!("{label} is unreachable{}", says(status, ": "));
        return observed.stopped(Phase::Blocked, Reason::UpstreamUnreachable, message);
    }
    if looped {
        let via = status
            .and_then(|s| s.via.as_deref())
            .unwrap_or_default()
            .join(", ");
        let message = format!("{label} leads through more than {max} layers, a loop? via {via}");
        return observed.stopped(Phase::Blocked, Reason::UpstreamLoop, message);
    }
    let offered = match upstream.endpoints(ctx).await {
        Ok(offered) => offered,
        Err(error) => {
            let message = format!(
                "reading the endpoints of {label} failed: {}",
                clean_message(&error.to_string())
            );
            return observed.stopped(Phase::Error, Reason::UpstreamFailed, message);
        }
    };
    let redirected = comb
        .declared_endpoints()
        .await
        .map_err(Redirect::Failed)
        .and_then(|declared| redirect(comb.class_name(), &declared, &offered));
    let redirected = match redirected {
        Ok(redirected) => redirected,
        Err(Redirect::Missing(names)) => {
            let phase = status
                .and_then(|s| s.phase.as_ref())
                .filter(|phase| **phase != Phase::Running)
                .map(|phase| format!(" (it is {phase})"))
                .unwrap_or_default();
            let message = format!(
                "{label} offers no reachable address for endpoint(s) {}{phase}{}",
                names.join(", "),
                says(status, "; ")
            );
            return observed.stopped(Phase::Blocked, Reason::UpstreamEndpointsMissing, message);
        }
        Err(Redirect::Failed(error)) => {
            let message = format!(
                "borrowing from {class} failed: {}",
                clean_message(&error.to_string())
            );
            return observed.stopped(Phase::Error, Reason::UpstreamFailed, message);
        }
    };
    let bridge = comb.render_bridge(&redirected, scopes).await;
    observed.endpoints = Some(redirected);
    match bridge {
        Ok(items) => {
            observed.bridge = items;
            observed
        }
        Err(Error::Bridge(why)) => {
            let message = format!("the upstream cannot be bridged: {}", clean_message(&why));
            observed.stopped(Phase::Blocked, Reason::BridgeImpossible, message)
        }
        Err(error) => {
            let message = format!(
                "rendering the bridge failed: {}",
                clean_message(&error.to_string())
            );
            observed.stopped(Phase::Error, Reason::BridgeFailed, message)
        }
    }
}
