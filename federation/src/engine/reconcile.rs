//! One reconcile step of a Comb (reference §6): resolve -> enabled -> dependencies -> check ->
//! the local or the upstream path -> publish endpoints -> record the status. Each path holds
//! what it rendered to the layer's tenancy before its first write.
//!
//! A step never fails and never panics: every problem becomes a phase with the reference's
//! reason and message, and the status is always recorded (written into the CR, or kept in the
//! in-memory CR when writing failed twice).

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::panic::AssertUnwindSafe;
use std::time::Instant;

use comb_api::ownership::Ownership;
use comb_api::{
    CONFIG_READY, Comb, CombStatus, ConditionStatus, DEPENDENCIES_READY, ManagedObject,
    NO_RESOURCE_RECONCILIATION, Phase, Reason,
};
use futures::FutureExt;
use jiff::Timestamp;

// Step 1's answer is an input of `reconcile`: callers name it from here too.
pub use crate::engine::borrow::UpstreamResolution;
use crate::engine::borrow::{Borrowing, FallbackState, observe_upstream, replication_note};
use crate::engine::class::CombInstance;
use crate::engine::context::CombContext;
use crate::engine::deploy::{Applied, apply_and_prune, made_anew};
use crate::engine::kube_ops::KubeOps;
use crate::engine::live_status::LiveStatus;
use crate::engine::observe::{LiveObjects, fetch_live, observe_local};
use crate::engine::ownership::Claim;
use crate::engine::prune::{changed_items, record_differs};
use crate::engine::render::{RenderedItem, identified};
use crate::engine::status::{
    Established, ResourceKey, StepRecord, Verdict, build_status, rebuild_status, refreshed,
};
use crate::engine::tenancy::endpoint_refusals;
use crate::engine::values::{clean_message, panic_message};

/// What the caller found of a Comb's dependencies before its step (reference §6.3): the step
/// judges them by this, and asks nobody. The controller computes it from what its layer keeps
/// (the dependency's CR, its objects as the watches hold them), once for every dependent while
/// the dependency stays as it was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Dependencies {
    /// Nobody looked for them: a Comb that has some is Blocked (`NoResolver`).
    #[default]
    Unknown,
    /// Looking at them failed as a whole (a class panicked): the step is an Error
    /// (`DependenciesFailed`) with this message.
    Failed(String),
    /// Each `dependsOn` entry as written, and how it stands; and the dependency cycle the Comb
    /// is in (as `ns/a -> ns/b -> ns/a`), when it is in one: then none of it can ever run.
    Found {
        cycle: Option<String>,
        verdicts: BTreeMap<String, DependencyVerdict>,
    },
}

/// How one dependency stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DependencyVerdict {
    /// It serves now (its live status is healthy).
    Healthy,
    /// No Comb of that name in the layer.
    NotFound,
    /// It does not serve; why, when looking at it failed (its upstream did not resolve, it does
    /// not build).
    NotHealthy(Option<String>),
    /// Finding it failed.
    LookupFailed(String),
}

/// What one step works with, besides the Comb.
#[derive(Clone, Copy)]
pub struct StepEnv<'a> {
    /// The client of the Comb's kube context.
    pub ops: &'a KubeOps,
    /// What the caller found of the Comb's dependencies.
    pub dependencies: &'a Dependencies,
    /// Where a borrower whose layer's borrow has a fallback stands on the chain: the step
    /// records it (the `UpstreamFallback` condition, the Ready message); the upstream it
    /// borrows from is step 1's answer, the entry in use.
    pub fallback: Option<&'a FallbackState>,
    /// Until when a change of progress alone (a rollout's newer Ready message) is held back:
    /// the caller's throttle of such writes. The step then says when it is due
    /// ([`StepOutcome::progress_due`]).
    pub hold_progress_until: Option<Instant>,
}

/// What one reconcile step produced, handed back to the caller to keep, announce and schedule.
/// The step changes nothing else: the Comb it ran is the caller's, and what the next step of
/// the same instance starts from is [`StepOutcome::carry_into`].
#[derive(Clone, Debug)]
pub struct StepOutcome {
    /// The recorded status (reference §6: what the step resolves to): as the API server stored
    /// it, or, when writing it failed, with `StatusWritten=False` and held in memory only.
    pub status: CombStatus,
    /// The CR the step ends with: as the API server stored it, or as it was last read when
    /// the write failed (then without the status memory alone holds).
    pub stored: Comb,
    /// Writing the status failed (reference §6.8, 4): `status` lives only in memory, and the
    /// next step of this Comb must start from it, or it would prune against an older record.
    pub write_failed: bool,
    /// What pruning noted (left in place, failed to delete), also in the Ready message: the
    /// controller makes each an Event the first time it comes.
    pub notes: Vec<String>,
    /// When the progress this step held back is due: step the Comb again then, so that it is
    /// written.
    pub progress_due: Option<Instant>,
    /// This step wrote the status (the server stored a new version of the CR).
    pub status_written: bool,
}

impl StepOutcome {
    /// Makes `comb` what the next step of the same instance starts from: the CR the step ended
    /// with, carrying the status memory alone holds when writing it failed (reference §6.8, 4).
    pub fn carry_into(&self, comb: &mut CombInstance) {
        comb.adopt_cr(self.stored.clone());
        if self.write_failed {
            comb.keep_status(self.status.clone());
        }
    }
}

/// Runs one reconcile step of `comb` and says what it produced.
pub async fn reconcile(
    comb: &CombInstance,
    env: StepEnv<'_>,
    upstream: UpstreamResolution,
) -> StepOutcome {
    let previous = comb.recorded_status().cloned();
    let resolved_local = matches!(upstream, UpstreamResolution::Local);
    let record = decide(comb, env, upstream, previous.as_ref()).await;
    let notes = record.notes.clone();
    let group = &comb.settings().group;
    let recorded = AssertUnwindSafe(async {
        let mut record = record;
        publish_endpoints(&mut record, comb, previous.is_none(), resolved_local).await;
        // Written over the version the write-ahead stored, if the step wrote one.
        let cr = match record.written_ahead.take() {
            Some(cr) => *cr,
            None => comb.cr().clone(),
        };
        record_status(env, group, cr, &record).await
    })
    .catch_unwind()
    .await;
    let outcome = match recorded {
        Ok(outcome) => outcome,
        // Publishing or recording panicked: the panic is what the step records, written as any
        // status is (the previous managed resources carried forward). Should that panic too,
        // nothing is written and nothing changes: the step failed, and is tried again.
        Err(panic) => {
            let record = StepRecord::finished(
                Phase::Error,
                Reason::ReconcileFailed,
                clean_message(&panic_message(panic.as_ref())),
            );
            AssertUnwindSafe(record_status(env, group, comb.cr().clone(), &record))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| StepOutcome {
                    status: previous.clone().unwrap_or_default(),
                    stored: comb.cr().clone(),
                    write_failed: true,
                    notes: Vec::new(),
                    progress_due: None,
                    status_written: false,
                })
        }
    };
    StepOutcome { notes, ..outcome }
}

/// Steps 1-5 (a panic among them is an Error the record says), and where the borrower stands
/// on its fallback chain.
async fn decide(
    comb: &CombInstance,
    env: StepEnv<'_>,
    upstream: UpstreamResolution,
    previous: Option<&CombStatus>,
) -> StepRecord {
    let step = Step {
        comb,
        env,
        previous,
    };
    let mut record = StepRecord::finished(
        Phase::Error,
        Reason::ReconcileFailed,
        "the step ended without a verdict",
    );
    let mut record = match AssertUnwindSafe(step.steps(&mut record, upstream))
        .catch_unwind()
        .await
    {
        Ok(_) => record,
        Err(panic) => StepRecord::finished(
            Phase::Error,
            Reason::ReconcileFailed,
            clean_message(&panic_message(panic.as_ref())),
        ),
    };
    if let Some(fallback) = env.fallback {
        fallback.mark(&mut record);
    }
    record
}

/// The step of a Comb whose CR does not build: `Error / BuildFailed` with the construction
/// error, recorded by the same writer as every step's status (so written only when it differs
/// from what `cr` records). Nothing runs without a Comb to run; `cr` is the CR as read.
pub async fn record_build_failure(
    env: StepEnv<'_>,
    group: &str,
    cr: Comb,
    message: String,
) -> StepOutcome {
    let record = StepRecord::finished(Phase::Error, Reason::BuildFailed, message);
    record_status(env, group, cr, &record).await
}

/// The steps 1-5 of one Comb; each either lets the step go on or finishes the record.
struct Step<'a> {
    comb: &'a CombInstance,
    env: StepEnv<'a>,
    previous: Option<&'a CombStatus>,
}

impl Step<'_> {
    async fn steps(&self, r: &mut StepRecord, upstream: UpstreamResolution) -> ControlFlow<()> {
        self.maintenance(r)?;
        let upstream = Self::resolution(r, upstream)?;
        self.enabled(r)?;
        self.dependencies(r)?;
        self.check(r).await?;
        match upstream {
            Some(borrowing) => self.upstream_path(r, &borrowing).await,
            None => self.local_path(r).await,
        }
    }

    /// `spec.maintenance: NoResourceReconciliation`: nothing is applied, pruned or looked at.
    fn maintenance(&self, r: &mut StepRecord) -> ControlFlow<()> {
        if !self.comb.context().spec.in_maintenance() {
            return ControlFlow::Continue(());
        }
        let message = format!(
            "resources are not reconciled while in maintenance (spec.maintenance: {NO_RESOURCE_RECONCILIATION}); \
             remove spec.maintenance to resume"
        );
        r.finish(Phase::Maintenance, Reason::Maintenance, message);
        ControlFlow::Break(())
    }

    /// Step 1: the upstream to borrow from, if any.
    fn resolution(
        r: &mut StepRecord,
        upstream: UpstreamResolution,
    ) -> ControlFlow<(), Option<Box<Borrowing>>> {
        let (reason, message) = match upstream {
            UpstreamResolution::Local => return ControlFlow::Continue(None),
            UpstreamResolution::Borrowed(borrowing) => {
                return ControlFlow::Continue(Some(borrowing));
            }
            UpstreamResolution::Failed(message) => (
                Reason::UpstreamFailed,
                format!("resolving the upstream failed: {}", clean_message(&message)),
            ),
            UpstreamResolution::Forbidden(message) => {
                (Reason::UpstreamForbidden, clean_message(&message))
            }
        };
        r.finish(Phase::Error, reason, message);
        ControlFlow::Break(())
    }

    /// Step 2: a disabled Comb makes no request at all; what runs keeps running.
    fn enabled(&self, r: &mut StepRecord) -> ControlFlow<()> {
        let message = match self.comb.context().spec.enabled {
            Some(true) => return ControlFlow::Continue(()),
            Some(false) => "spec.enabled is false".to_string(),
            None if self.comb.optional() => format!(
                "{} is optional and spec.enabled is not set",
                self.comb.class_name()
            ),
            None => return ControlFlow::Continue(()),
        };
        r.finish(Phase::Disabled, Reason::Disabled, message);
        ControlFlow::Break(())
    }

    /// Step 3: every dependency found and healthy, else Blocked with all problems.
    fn dependencies(&self, r: &mut StepRecord) -> ControlFlow<()> {
        let problems = match self.dependency_problems() {
            Ok(problems) => problems,
            Err(message) => {
                r.finish(
                    Phase::Error,
                    Reason::DependenciesFailed,
                    format!(
                        "reading the dependencies failed: {}",
                        clean_message(message)
                    ),
                );
                return ControlFlow::Break(());
            }
        };
        let verdict = match problems.first() {
            None => Verdict::new(
                ConditionStatus::True,
                Reason::Healthy,
                "all dependencies are healthy",
            ),
            Some((reason, _)) => {
                let messages: Vec<&str> = problems.iter().map(|(_, m)| m.as_str()).collect();
                Verdict::new(ConditionStatus::False, reason.clone(), messages.join("; "))
            }
        };
        r.set_condition(DEPENDENCIES_READY, verdict.clone());
        if verdict.status == ConditionStatus::True {
            return ControlFlow::Continue(());
        }
        r.finish(Phase::Blocked, verdict.reason, verdict.message);
        ControlFlow::Break(())
    }

    /// The problems of the dependencies, in `dependsOn` order; `Err` when looking at them
    /// failed as a whole.
    fn dependency_problems(&self) -> Result<Vec<(Reason, String)>, &str> {
        let references = self.comb.depends_on();
        if references.is_empty() {
            return Ok(Vec::new());
        }
        let (cycle, verdicts) = match self.env.dependencies {
            Dependencies::Unknown => {
                return Ok(vec![(
                    Reason::NoResolver,
                    format!(
                        "depends on {}, but there is no resolver to find them",
                        references.join(", ")
                    ),
                )]);
            }
            Dependencies::Failed(message) => return Err(message),
            Dependencies::Found { cycle, verdicts } => (cycle, verdicts),
        };
        if let Some(cycle) = cycle {
            return Ok(vec![(
                Reason::DependencyNotReady,
                format!("dependency cycle: {cycle}"),
            )]);
        }
        Ok(references
            .iter()
            .filter_map(|reference| {
                let verdict = verdicts
                    .get(reference)
                    .unwrap_or(&DependencyVerdict::NotFound);
                dependency_problem(reference, verdict)
            })
            .collect())
    }

    /// Step 4: the class's prerequisites.
    async fn check(&self, r: &mut StepRecord) -> ControlFlow<()> {
        let (status, phase, reason, message) = match self.comb.check(self.env.ops).await {
            Ok(missing) if missing.is_empty() => (
                ConditionStatus::True,
                None,
                Reason::Complete,
                "nothing missing".to_string(),
            ),
            Ok(missing) => (
                ConditionStatus::False,
                Some(Phase::NeedsConfig),
                Reason::MissingPrerequisites,
                format!("missing: {}", missing.join("; ")),
            ),
            Err(error) => (
                ConditionStatus::Unknown,
                Some(Phase::Error),
                Reason::CheckFailed,
                format!("check failed: {}", clean_message(&error.to_string())),
            ),
        };
        r.set_condition(
            CONFIG_READY,
            Verdict::new(status, reason.clone(), message.clone()),
        );
        let Some(phase) = phase else {
            return ControlFlow::Continue(());
        };
        r.finish(phase, reason, message);
        ControlFlow::Break(())
    }

    /// Step 5a: render, observe, then deploy what is unhealthy or changed, settle a record
    /// that differs, or find the Comb healthy.
    async fn local_path(&self, r: &mut StepRecord) -> ControlFlow<()> {
        let ctx = self.comb.context();
        // A bridge may stand here: the first local step deploys in its place.
        let borrowed = self.previous.is_some_and(|p| p.upstream.is_some());
        let items = match self.comb.render(self.env.ops).await {
            Ok(items) => items,
            Err(error) => {
                let message = format!(
                    "rendering the manifests failed: {}",
                    clean_message(&error.to_string())
                );
                r.finish(Phase::Error, Reason::ManifestsFailed, message);
                return ControlFlow::Break(());
            }
        };
        self.permitted(r, &items)?;
        let (live, status) = match observe_local(self.env.ops, ctx, &items).await {
            Ok(observed) => observed,
            Err(error) => {
                let message = format!(
                    "reading the live status failed: {}",
                    clean_message(&error.to_string())
                );
                r.finish(Phase::Error, Reason::StatusFailed, message);
                return ControlFlow::Break(());
            }
        };
        let applied = format!("applied {} resource(s)", items.len());
        let record_differs = record_differs(self.previous_managed(), &items);
        let changed = changed_items(&items, &live, ctx);
        // Whether applying would change nothing: every resource stands, as rendered now, and no
        // bridge is to be replaced.
        let settled = !borrowed && live.iter().all(Option::is_some) && changed.is_empty();
        let deployed = |message| (Phase::Pending, Reason::Deployed, message);
        // Whether the verdict goes with a deploy, and the verdict.
        let (deploy, verdict) = if status.rolling_out && settled && !record_differs {
            // A rollout the workload controllers are still carrying out: every item stands as
            // rendered, so there is nothing to apply (deploy would skip each one anyway), and the
            // verdict says the controllers are at it rather than "not healthy yet". The Pods it
            // starts may be the first problems; the rollout is still what the Comb waits for.
            // After comb's own deploy the verdict stays that deploy's, `Pending (Deployed)` with
            // the progress in its message, as the steps after it that find the Pods not ready yet
            // say too: one transition in, one out, not Deployed, RolloutInProgress, Deployed with
            // a status write and an Event each.
            let after_deploy = self.previous.is_some_and(|previous| {
                previous.phase == Some(Phase::Pending)
                    && previous
                        .ready()
                        .is_some_and(|ready| ready.reason == Some(Reason::Deployed))
            });
            let verdict = if after_deploy {
                deployed(not_healthy_yet(&applied, &status))
            } else {
                let message = status.message.clone().unwrap_or_default();
                (Phase::Pending, Reason::RolloutInProgress, message)
            };
            (false, verdict)
        } else if status.phase == Phase::Error && settled {
            // An Error the cluster shows (a crash loop, an image that does not pull, a failed Job
            // or Pod) that applying again cannot change, because every resource stands as
            // rendered now: the step records it as it is, instead of one more `Pending
            // (Deployed)` that hides it.
            let reason = status.reason.clone();
            let message = status.message.clone().unwrap_or_default();
            let verdict = (
                Phase::Error,
                reason.unwrap_or(Reason::Other("Error".into())),
                message,
            );
            (record_differs, verdict)
        } else if !status.healthy {
            (true, deployed(not_healthy_yet(&applied, &status)))
        } else if borrowed {
            (true, deployed(format!("{applied}, in place of the bridge")))
        } else if !changed.is_empty() {
            (true, deployed(format!("{applied}, {}", changed.describe())))
        } else if record_differs {
            let message = format!("healthy; the record differed from the manifests: {applied}");
            (true, (Phase::Running, Reason::Healthy, message))
        } else {
            (
                false,
                (Phase::Running, Reason::Healthy, "healthy".to_string()),
            )
        };
        if deploy {
            return self
                .apply(r, &items, Some(&live), &[], Established::Local, verdict)
                .await;
        }
        // What an older comb recorded without uids is recorded with them once it is found the
        // Comb's (the upgrade, docs/adr/0004-ownership.md): from then on the record alone says.
        r.managed = with_found_uids(self.previous_managed(), &items, &live, ctx);
        r.established = Some(Established::Local);
        r.finish(verdict.0, verdict.1, verdict.2);
        ControlFlow::Break(())
    }

    /// Step 5b: observe the upstream, record it, replicate, then apply the bridge (in place of
    /// the local resources, which are pruned) and finish with the borrowed verdict.
    async fn upstream_path(&self, r: &mut StepRecord, borrowing: &Borrowing) -> ControlFlow<()> {
        let (upstream, ctx) = (borrowing.upstream.as_ref(), &borrowing.ctx);
        let observed = observe_upstream(self.comb, upstream, ctx, self.env.ops).await;
        r.established = Some(Established::Upstream);
        r.upstream = Some(observed.record(Timestamp::now()));
        // Redirected endpoints only when the upstream offered an address for each; else none.
        r.endpoints = Some(
            observed
                .endpoints
                .iter()
                .flatten()
                .map(|endpoint| endpoint.to_crd())
                .collect(),
        );
        self.permitted(r, &observed.bridge)?;
        if let Some(stop) = &observed.stop {
            r.finish(
                stop.phase.clone(),
                stop.reason.clone(),
                stop.message.clone(),
            );
            return ControlFlow::Break(());
        }
        let replicas = match upstream.replicate_into(ctx).await {
            Ok(replicas) => replicas,
            Err(error) => {
                // Copies written before the failure are the Comb's: recorded, with their
                // uids, beside what was recorded before, as a deploy that stopped half-way
                // records what it stored.
                let (made, error) = error.split_made();
                if !made.is_empty() {
                    r.managed = Some(refreshed(self.previous_managed(), &made));
                }
                let (reason, message) = match error {
                    // An object of a copy's name that is someone else's: left untouched, named.
                    comb_upstreams::Error::NotOwned(message) => {
                        (Reason::ResourceNotOwned, clean_message(&message))
                    }
                    error => (
                        Reason::ReplicationFailed,
                        format!(
                            "replicating from {} failed: {}",
                            observed.label(),
                            clean_message(&error.to_string())
                        ),
                    ),
                };
                r.finish(Phase::Error, reason, message);
                return ControlFlow::Break(());
            }
        };
        let verdict = observed.verdict();
        // The message names what was copied (never the values).
        let message = match replication_note(&replicas) {
            Some(note) => format!("{}; {note}", verdict.message),
            None => verdict.message,
        };
        let verdict = (verdict.phase, verdict.reason, message);
        self.apply(
            r,
            &observed.bridge,
            None,
            &replicas,
            Established::Upstream,
            verdict,
        )
        .await
    }

    /// Tenancy: every item lands where the layer allows it, or the step ends here, before it
    /// has written anything, as Error / `ManifestForbidden` naming each refused item.
    fn permitted(&self, r: &mut StepRecord, items: &[RenderedItem]) -> ControlFlow<()> {
        let tenancy = &self.comb.settings().tenancy;
        let mut refusals = tenancy.refusals(
            items.iter().map(RenderedItem::resource),
            self.comb.namespace(),
        );
        refusals.extend(endpoint_refusals(&identified(items)));
        if refusals.is_empty() {
            return ControlFlow::Continue(());
        }
        r.finish(Phase::Error, Reason::ManifestForbidden, refusals.join("; "));
        ControlFlow::Break(())
    }

    /// Applies and prunes, then finishes with `verdict` (prune notes appended), or as
    /// DeployFailed with nothing pruned. `replicas` were written before the items and are
    /// recorded with them.
    async fn apply(
        &self,
        r: &mut StepRecord,
        items: &[RenderedItem],
        live: Option<&LiveObjects>,
        replicas: &[ManagedObject],
        established: Established,
        verdict: (Phase, Reason, String),
    ) -> ControlFlow<()> {
        let ctx = self.comb.context();
        let previous = self.previous_managed();
        // What the deploy will make is recorded before it is made (made_anew says why); the
        // live objects read for that serve the deploy too.
        let fetched = match live {
            Some(_) => None,
            // A failed read is the deploy's to report: it reads again, and fails as it says.
            None => fetch_live(self.env.ops, ctx, items).await.ok(),
        };
        let live = live.or(fetched.as_ref());
        let ahead = match live {
            Some(live) => {
                let seen = self.seen_after_a_refusal(items, live).await;
                made_anew(items, seen.as_ref().unwrap_or(live), previous, ctx)
            }
            None => Vec::new(),
        };
        if !ahead.is_empty() {
            match self.write_ahead(&ahead).await {
                Ok(cr) => r.written_ahead = Some(Box::new(cr)),
                // As with any status that cannot be written (reference §6.8, 4), the step goes
                // on and memory holds its record; only a restart before a status is written
                // again would find what it makes unrecorded.
                Err(error) => tracing::warn!(
                    namespace = %ctx.namespace, comb = %ctx.name, %error,
                    "recording what the deploy makes before making it failed; deploying with the record in memory"
                ),
            }
        }
        match apply_and_prune(self.env.ops, ctx, items, live, replicas, previous).await {
            Applied::Done { managed, notes } => {
                let (phase, reason, message) = verdict;
                r.managed = Some(managed);
                r.established = Some(established);
                // Each prune note follows the verdict's message.
                let message = [&[message], notes.as_slice()].concat().join("; ");
                r.finish(phase, reason, message);
                r.notes = notes;
            }
            Applied::NotOwned { managed, message } => {
                // The refused object's identity is someone else's object now.
                r.managed = Some(without_the_refused(items, managed));
                // As a failed deploy: the upstream path has established, the local one not.
                r.established = (established == Established::Upstream).then_some(established);
                r.finish(Phase::Error, Reason::ResourceNotOwned, message);
            }
            Applied::Failed {
                managed,
                message,
                refused,
            } => {
                // What it was about to make stays recorded: a create whose answer was lost
                // may have made it, and the next attempt does not write it ahead again. An
                // object the server refused was not made: its entry goes, so that the record
                // never names an object comb did not make (someone may make one of that name).
                let untried: Vec<ManagedObject> = ahead
                    .into_iter()
                    .filter(|intent| {
                        let key = ResourceKey::of(intent);
                        !managed.iter().any(|entry| ResourceKey::of(entry) == key)
                    })
                    .collect();
                let managed = refreshed(&managed, &untried);
                r.managed = Some(if refused {
                    without_the_refused(items, managed)
                } else {
                    managed
                });
                // The upstream path has established even when its bridge failed; the local
                // path has not, so what served before is carried forward.
                r.established = (established == Established::Upstream).then_some(established);
                r.finish(
                    Phase::Error,
                    Reason::DeployFailed,
                    format!("deploy failed: {}", clean_message(&message)),
                );
            }
        }
        ControlFlow::Break(())
    }

    /// Writes the status the step started from with `ahead` recorded (without uids) beside
    /// what it held, and returns the CR as stored. On a conflict the CR is read again and
    /// `ahead` recorded into its status.
    async fn write_ahead(&self, ahead: &[ManagedObject]) -> crate::error::Result<Comb> {
        let with_ahead = |status: Option<&CombStatus>| {
            let mut status = status.cloned().unwrap_or_default();
            status.managed_resources = Some(refreshed(status.managed(), ahead));
            status
        };
        let mut cr = self.comb.cr().clone();
        let status = with_ahead(self.previous);
        self.env
            .ops
            .write_comb_status(&self.comb.settings().group, &mut cr, &status, |current| {
                Some(with_ahead(current.status.as_ref()))
            })
            .await
    }

    /// After a step refused an object that is not the Comb's, `live` with each item it does not
    /// hold read by name: such an object carries no label of this Comb's, so `live` cannot
    /// show it, and [`made_anew`] would write its identity ahead again at every retry (a status
    /// write, and a record naming another's object until the deploy drops it). A read per item
    /// not yet made costs less, and only a Comb whose last step was that refusal pays it. The
    /// reads stop at the first object that is not the Comb's: [`made_anew`] writes nothing past
    /// it. `None` when the last step was not a refusal; an item that
    /// cannot be read stays as `live` has it.
    async fn seen_after_a_refusal(
        &self,
        items: &[RenderedItem],
        live: &LiveObjects,
    ) -> Option<LiveObjects> {
        let refused = self
            .previous
            .and_then(CombStatus::ready)
            .is_some_and(|ready| ready.reason == Some(Reason::ResourceNotOwned));
        if !refused {
            return None;
        }
        let (ops, ctx, previous) = (self.env.ops, self.comb.context(), self.previous_managed());
        let mut seen = live.clone();
        for (item, object) in items.iter().zip(seen.iter_mut()) {
            if object.is_some() {
                continue;
            }
            let whole = ops.get_whole(&item.resource()).await.ok().flatten();
            *object =
                whole.and_then(|whole| ops.project(&item.api_version, &item.kind, &whole).ok());
            let claim = Claim::new(&ctx.namespace, &ctx.name, previous, &item.resource());
            if object
                .as_ref()
                .is_some_and(|found| !claim.decide(found).is_owned())
            {
                break;
            }
        }
        Some(seen)
    }

    fn previous_managed(&self) -> &[ManagedObject] {
        self.previous.map(CombStatus::managed).unwrap_or_default()
    }
}

/// `record` with the uid of each entry an older comb recorded without one, where the live
/// object of that identity is the Comb's by that record ([`Ownership::RecordedBefore`]: both of
/// its labels); `None` when no entry gains one (the record stays as it is, and nothing is
/// written for it).
fn with_found_uids(
    record: &[ManagedObject],
    items: &[RenderedItem],
    live: &LiveObjects,
    ctx: &CombContext,
) -> Option<Vec<ManagedObject>> {
    let mut found = false;
    let updated = record
        .iter()
        .map(|entry| {
            if entry.uid.is_some() {
                return entry.clone();
            }
            let key = ResourceKey::of(entry);
            let owned = items
                .iter()
                .zip(live)
                .find(|(item, _)| ResourceKey::of(&item.resource()) == key)
                .and_then(|(item, object)| {
                    let object = object.as_ref()?;
                    let claim = Claim::new(&ctx.namespace, &ctx.name, record, &item.resource());
                    (claim.decide(object) == Ownership::RecordedBefore).then_some(object)
                });
            match owned.and_then(|object| object.uid.as_deref()) {
                Some(uid) => {
                    found = true;
                    entry.clone().with_uid(Some(uid))
                }
                None => entry.clone(),
            }
        })
        .collect();
    found.then_some(updated)
}

/// The problem of one dependency, if it has one.
fn dependency_problem(reference: &str, verdict: &DependencyVerdict) -> Option<(Reason, String)> {
    match verdict {
        DependencyVerdict::Healthy => None,
        DependencyVerdict::NotFound => Some((
            Reason::DependencyNotFound,
            format!("dependency {reference} not found"),
        )),
        DependencyVerdict::LookupFailed(why) => Some((
            Reason::ResolverFailed,
            format!("looking up {reference} failed: {}", clean_message(why)),
        )),
        DependencyVerdict::NotHealthy(why) => {
            let why = why
                .as_deref()
                .map(|why| format!(": {}", clean_message(why)))
                .unwrap_or_default();
            Some((
                Reason::DependencyNotReady,
                format!("dependency {reference} is not healthy{why}"),
            ))
        }
    }
}

/// `applied N resource(s), not healthy yet`, with what the live status says in parentheses
/// once there is something live to speak of.
fn not_healthy_yet(applied: &str, status: &LiveStatus) -> String {
    match &status.message {
        Some(message) if status.phase != Phase::NotDeployed => {
            format!("{applied}, not healthy yet ({message})")
        }
        _ => format!("{applied}, not healthy yet"),
    }
}

/// Step 6a: a Comb that serves locally publishes its own endpoints, and so does the very first
/// step of a local Comb that stopped early.
async fn publish_endpoints(
    r: &mut StepRecord,
    comb: &CombInstance,
    first_step: bool,
    resolved_local: bool,
) {
    let local = r.established == Some(Established::Local)
        || (r.established.is_none() && first_step && resolved_local);
    if r.endpoints.is_some() || !local {
        return;
    }
    match comb.local_endpoints().await {
        Ok(endpoints) => r.endpoints = Some(endpoints.iter().map(|e| e.to_crd()).collect()),
        Err(_) if r.phase == Phase::Error => {}
        Err(error) => r.finish(
            Phase::Error,
            Reason::EndpointsFailed,
            format!(
                "resolving the endpoints failed: {}",
                clean_message(&error.to_string())
            ),
        ),
    }
}

/// Step 6b: builds the status of `record` over what `cr` records and writes it into the CR;
/// on failure reads the CR once and writes again (built anew on the fresh copy); when that
/// fails too, the outcome's status says so (`StatusWritten=False`) and is the caller's to keep.
/// The one place a Comb's status is written.
async fn record_status(
    env: StepEnv<'_>,
    group: &str,
    mut cr: Comb,
    record: &StepRecord,
) -> StepOutcome {
    let previous = cr.status.clone();
    let generation = cr.metadata.generation;
    let now = Timestamp::now();
    let status = build_status(record, previous.as_ref(), generation, None, now);
    let mut outcome = StepOutcome {
        status: status.clone(),
        stored: cr.clone(),
        write_failed: false,
        notes: Vec::new(),
        progress_due: None,
        status_written: false,
    };
    if let Some(previous) = &previous
        && only_progress(previous, &status)
        && let Some(due) = env.hold_progress_until.filter(|due| *due > Instant::now())
    {
        // A rollout's progress alone (`1 of 3 ready`, then `2 of 3`): held back while the
        // caller says so, so a fast rollout costs its two transitions and no more; the caller
        // steps the Comb again when it is due, so the newest message is written then.
        outcome.status = previous.clone();
        outcome.progress_due = Some(due);
        return outcome;
    }
    let rebuild = |current: &Comb| {
        rebuild_status(
            record,
            previous.as_ref(),
            current.status.as_ref(),
            generation,
            Timestamp::now(),
        )
    };
    let written = env
        .ops
        .write_comb_status(group, &mut cr, &status, rebuild)
        .await;
    match written {
        Ok(stored) => {
            // What the server stored is a later version than the CR it was written over.
            outcome.status_written =
                stored.metadata.resource_version != cr.metadata.resource_version;
            outcome.status = stored.status.clone().unwrap_or(status);
            outcome.stored = stored;
        }
        Err(failure) => {
            let failure = failure.to_string();
            tracing::warn!(
                namespace = cr.metadata.namespace.as_deref(),
                comb = cr.metadata.name.as_deref(),
                error = %failure,
                "writing the status failed twice"
            );
            outcome.status =
                build_status(record, previous.as_ref(), generation, Some(&failure), now);
            outcome.stored = cr;
            outcome.write_failed = true;
        }
    }
    outcome
}

/// Whether `status` differs from `previous` in progress only, both Pending or both Blocked:
/// condition messages (a rollout's `1 of 3 ready`, a wait for dependencies with one fewer not
/// healthy) and the phase of the upstream it waits on (with its `observedAt`: staging going
/// from Blocked to Pending while dev waits for its endpoints), while a transition (phase, a
/// reason, a condition's status) or any other field differs in more. Such a change is the
/// Comb's wait going on, not a transition of its own. `via` is not progress: a loop is found
/// by each Comb of it writing the chain one layer longer, until `maxUpstreamDepth` cuts it, so
/// a longer chain is written at once.
fn only_progress(previous: &CombStatus, status: &CombStatus) -> bool {
    let waiting =
        |status: &CombStatus| matches!(status.phase, Some(Phase::Pending | Phase::Blocked));
    let without_progress = |status: &CombStatus| {
        let mut status = status.clone();
        for condition in status.conditions.iter_mut().flatten() {
            condition.message = None;
        }
        if let Some(upstream) = status.upstream.as_mut() {
            upstream.phase = None;
            upstream.observed_at = None;
        }
        status
    };
    waiting(previous)
        && previous.phase == status.phase
        && previous != status
        && without_progress(previous) == without_progress(status)
}

/// `managed` without a uid-less entry for the object a deploy of `items` stopped at (the first
/// item `managed` holds no uid for): written ahead by this step or an earlier one, it names an
/// object comb did not make.
fn without_the_refused(
    items: &[RenderedItem],
    mut managed: Vec<ManagedObject>,
) -> Vec<ManagedObject> {
    let stored = |item: &RenderedItem| {
        let key = ResourceKey::of(&item.resource());
        managed
            .iter()
            .any(|entry| entry.uid.is_some() && ResourceKey::of(entry) == key)
    };
    if let Some(refused) = items.iter().find(|item| !stored(item)) {
        let key = ResourceKey::of(&refused.resource());
        managed.retain(|entry| entry.uid.is_some() || ResourceKey::of(entry) != key);
    }
    managed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(phase: &str, reason: &str, message: &str, deps: &str) -> CombStatus {
        serde_json::from_value(json!({
            "phase": phase,
            "conditions": [
                {"type": "Ready", "status": "False", "reason": reason, "message": message,
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "DependenciesReady", "status": "False", "reason": "DependencyNotReady",
                 "message": deps, "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ]
        }))
        .unwrap()
    }

    /// What [`record_build_failure`] records over an equal record is what the CR has: the
    /// writer sends nothing.
    #[test]
    fn a_build_failure_already_recorded_is_built_the_same_and_not_written_again() {
        let record =
            |message: &str| StepRecord::finished(Phase::Error, Reason::BuildFailed, message);
        let first = build_status(
            &record("unknown class Nope"),
            None,
            Some(1),
            None,
            Timestamp::UNIX_EPOCH,
        );
        let later = Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(60);
        let again = build_status(
            &record("unknown class Nope"),
            Some(&first),
            Some(1),
            None,
            later,
        );
        assert_eq!(
            again, first,
            "the same failure: the same status, times included"
        );
        let other = build_status(
            &record("unknown class Nop"),
            Some(&first),
            Some(1),
            None,
            later,
        );
        assert_ne!(other, first, "another message is written");
        let edited = build_status(
            &record("unknown class Nope"),
            Some(&first),
            Some(2),
            None,
            later,
        );
        assert_ne!(edited, first, "a new generation is written");
    }

    #[test]
    fn progress_is_a_change_of_messages_alone_while_pending_or_blocked() {
        let rolling = status("Pending", "Deployed", "1 of 3 ready", "");
        let cases = [
            (status("Pending", "Deployed", "2 of 3 ready", ""), true),
            (status("Pending", "Deployed", "1 of 3 ready", ""), false),
            (
                status("Pending", "RolloutInProgress", "2 of 3 ready", ""),
                false,
            ),
            (status("Running", "Deployed", "2 of 3 ready", ""), false),
        ];
        for (next, progress) in cases {
            assert_eq!(only_progress(&rolling, &next), progress, "{next:?}");
        }
        let blocked = status("Blocked", "DependencyNotReady", "a; b", "a; b");
        assert!(only_progress(
            &blocked,
            &status("Blocked", "DependencyNotReady", "b", "b")
        ));
        let mut published = status("Pending", "Deployed", "2 of 3 ready", "");
        published.endpoints = Some(Vec::new());
        assert!(!only_progress(&rolling, &published));
        // The upstream it waits on moves on: progress; its chain (how loops are found) or its
        // reachability: more.
        let upstream = |phase: &str, at: &str, via: &[&str], reachable: bool| {
            let mut waiting = status(
                "Blocked",
                "UpstreamEndpointsMissing",
                &format!(
                    "upstream K8s offers no reachable address for endpoint(s) http (it is {phase})"
                ),
                "",
            );
            waiting.upstream = Some(
                serde_json::from_value(json!({
                    "class": "K8s", "context": "staging", "reachable": reachable,
                    "phase": phase, "observedAt": at, "via": via,
                }))
                .unwrap(),
            );
            waiting
        };
        let blocked_upstream = upstream("Blocked", "2026-01-01T00:00:00Z", &["staging"], true);
        for (next, progress) in [
            (
                upstream("Pending", "2026-01-01T00:00:01Z", &["staging"], true),
                true,
            ),
            (
                upstream(
                    "Pending",
                    "2026-01-01T00:00:01Z",
                    &["staging", "prod"],
                    true,
                ),
                false,
            ),
            (
                upstream("Blocked", "2026-01-01T00:00:01Z", &["staging"], false),
                false,
            ),
        ] {
            assert_eq!(
                only_progress(&blocked_upstream, &next),
                progress,
                "{next:?}"
            );
        }
        let errored = status("Error", "CrashLoopBackOff", "restarted 3 times", "");
        let again = status("Error", "CrashLoopBackOff", "restarted 4 times", "");
        assert!(!only_progress(&errored, &again));
    }
}
