//! The shard coordinator (`comb run --sharded`, the protocol in `shards.rs`): renews this
//! replica's member Lease, claims, renews and releases the layers' Leases as [`assign`] and
//! [`claim`] decide, and starts and stops each held layer's work under its [`Fence`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Shared;
use super::gate::{Fence, LayerGate};
use super::shards::{
    Claim, Observed, ShardView, Sharding, ShardsView, assign, claim, holder_of, rendezvous,
    transitions_of,
};
use super::work::LayerWork;
use crate::error::{Error, Result};

/// A layer this replica holds the Lease of.
struct Held {
    /// The Lease as our last write returned it.
    lease: Lease,
    /// When the last successful write of it was sent.
    renewed_at: Instant,
    fence: Arc<Fence>,
    work: Option<Work>,
    /// Drops the running steps of the work, running or draining.
    abort: CancellationToken,
    /// The work stopping: the task that waits for its running steps.
    draining: Option<JoinHandle<()>>,
    /// The Lease is lost (taken, or expired unrenewed): stop and forget it, never release.
    lost: bool,
}

/// What runs under a held Lease: the work of a layer of the file, or a CombLayer's layer,
/// which the layers on demand run while the gate grants it.
enum Work {
    Layer(LayerWork),
    OnDemand { gate: LayerGate, name: String },
}

impl Held {
    fn drain(&mut self, abort: bool) {
        if abort {
            self.abort.cancel();
        }
        match self.work.take() {
            Some(Work::Layer(work)) => {
                work.stop();
                self.draining = Some(tokio::spawn(work.join()));
            }
            Some(Work::OnDemand { gate, name }) => {
                gate.revoke(&name);
                if abort {
                    // The layer's running steps are dropped now: its fence's deadlines passed.
                    let now = Instant::now();
                    self.fence.send_replace(Some((now, now)));
                }
                self.draining = Some(tokio::spawn(async move { gate.stopped(&name).await }));
            }
            None => {}
        }
    }
}

/// One Lease request, bounded by `limit` (half the Lease duration): a request that hangs must
/// not hold up the renewals of the other Leases, which the same loop makes.
async fn bounded<T>(
    limit: Duration,
    request: impl std::future::Future<Output = kube::Result<T>>,
) -> kube::Result<T> {
    match tokio::time::timeout(limit, request).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {limit:?}"),
        )))),
    }
}

/// Writes `lease` named `name`, bounded by the request limit: created when `create`, else
/// replaced (conditional on the resourceVersion it carries).
async fn write_lease(
    api: &Api<Lease>,
    sharding: &Sharding,
    name: &str,
    lease: &Lease,
    create: bool,
) -> kube::Result<Lease> {
    let params = PostParams::default();
    let limit = sharding.request_limit();
    if create {
        bounded(limit, api.create(&params, lease)).await
    } else {
        bounded(limit, api.replace(name, &params, lease)).await
    }
}

/// A Lease of this replica's: held by it, renewed now; `previous` (if any) gives the
/// resourceVersion the write is conditional on.
fn lease_object(
    sharding: &Sharding,
    name: &str,
    role: &str,
    layer: Option<&str>,
    previous: Option<&Lease>,
    transitions: i32,
) -> Lease {
    let now = MicroTime(jiff::Timestamp::now());
    let mut labels = BTreeMap::new();
    labels.insert(sharding.role_label(), role.to_string());
    labels.insert(sharding.of_label(), sharding.managed_by.clone());
    let annotations =
        layer.map(|layer| BTreeMap::from([(sharding.layer_annotation(), layer.to_string())]));
    let acquire_time = match (role, previous) {
        ("member", Some(previous)) => previous
            .spec
            .as_ref()
            .and_then(|spec| spec.acquire_time.clone()),
        _ => None,
    };
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(sharding.namespace.clone()),
            labels: Some(labels),
            annotations,
            resource_version: previous.and_then(|p| p.metadata.resource_version.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(sharding.identity.clone()),
            lease_duration_seconds: Some(sharding.duration_seconds()),
            acquire_time: acquire_time.or_else(|| Some(now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }),
    }
}

/// The coordinator's state between ticks.
struct Coordinator {
    shared: Arc<Shared>,
    sharding: Sharding,
    api: Api<Lease>,
    observed: HashMap<String, Observed>,
    held: BTreeMap<String, Held>,
}

/// Holds the layers the assignment gives this replica until `shutdown`, then stops their work,
/// releases their Leases and leaves the membership.
pub(super) async fn coordinate(
    shared: Arc<Shared>,
    sharding: Sharding,
    shutdown: CancellationToken,
) -> Result<()> {
    let client = shared
        .layers
        .first()
        .map(|layer| layer.ops.client().clone())
        .ok_or_else(|| Error::Config("no layers".to_string()))?;
    let api: Api<Lease> = Api::namespaced(client, &sharding.namespace);
    info!(
        identity = %sharding.identity,
        namespace = %sharding.namespace,
        lease_duration = ?sharding.duration(),
        "sharding the layers by Leases"
    );
    let mut coordinator = Coordinator {
        shared,
        sharding,
        api,
        observed: HashMap::new(),
        held: BTreeMap::new(),
    };
    let leaving = CancellationToken::new();
    let membership = tokio::spawn(keep_membership(
        coordinator.api.clone(),
        coordinator.sharding.clone(),
        leaving.clone(),
    ));
    let mut tick = tokio::time::interval(coordinator.sharding.tick());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = tick.tick() => coordinator.step().await,
        }
    }
    // Out of the membership first, so that the others are assigned this replica's layers and
    // take each the moment it is released.
    leaving.cancel();
    let _ = membership.await;
    coordinator.leave().await;
    Ok(())
}

/// Renews this replica's member Lease every renewal interval, in a task of its own so that slow
/// work on the shard Leases never makes the others count it gone; at `leaving`, removes it.
async fn keep_membership(api: Api<Lease>, sharding: Sharding, leaving: CancellationToken) {
    let name = sharding.member_lease();
    let limit = sharding.request_limit();
    let mut last: Option<Lease> = None;
    let mut tick = tokio::time::interval(sharding.renew_every());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = leaving.cancelled() => break,
            _ = tick.tick() => {}
        }
        let lease = lease_object(&sharding, &name, "member", None, last.as_ref(), 0);
        match write_lease(&api, &sharding, &name, &lease, last.is_none()).await {
            Ok(written) => last = Some(written),
            // There already (a restart under the same name) or changed since: go on from the
            // current one.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                last = bounded(limit, api.get_opt(&name)).await.ok().flatten();
            }
            Err(kube::Error::Api(status)) if status.code == 404 => last = None,
            Err(error) => warn!(lease = %name, %error, "renewing the member Lease failed"),
        }
    }
    if let Err(error) = bounded(limit, api.delete(&name, &DeleteParams::default())).await {
        warn!(lease = %name, %error, "removing the member Lease failed");
    }
}

impl Coordinator {
    fn layer_names(&self) -> Vec<String> {
        self.shared
            .layers
            .iter()
            .map(|layer| layer.name().to_string())
            .collect()
    }

    /// The CombLayers there are, and those this replica still holds the Lease of (a deleted
    /// one is drained, then its Lease goes).
    fn comb_layer_names(&self) -> (BTreeSet<String>, Vec<String>) {
        let Some(gate) = &self.shared.options.layer_gate else {
            return (BTreeSet::new(), Vec::new());
        };
        let wanted = gate.wanted();
        let file = self.layer_names();
        let names = wanted
            .iter()
            .chain(self.held.keys())
            .filter(|name| !file.contains(name))
            .cloned()
            .collect::<BTreeSet<String>>()
            .into_iter()
            .collect();
        (wanted, names)
    }

    /// One tick: look at the Leases, hold what is assigned here: the file's layers by
    /// [`assign`], the CombLayers by [`rendezvous`].
    async fn step(&mut self) {
        self.observe().await;
        let members = self.live_members(Instant::now());
        let mut assignment = assign(&self.layer_names(), &members, &self.holders());
        for name in self.layer_names() {
            let mine = assignment.get(&name) == Some(&self.sharding.identity);
            self.tend(&name, mine).await;
        }
        let (wanted, comb_layers) = self.comb_layer_names();
        for name in &comb_layers {
            let holder = wanted
                .contains(name)
                .then(|| rendezvous(name, &members))
                .flatten();
            let mine = holder.as_ref() == Some(&self.sharding.identity);
            if let Some(holder) = holder {
                assignment.insert(name.clone(), holder);
            }
            self.tend(name, mine).await;
        }
        let mut names = self.layer_names();
        names.extend(comb_layers);
        self.publish(&names, &members, &assignment);
    }

    /// Lists the federation's Leases and records which changed.
    async fn observe(&mut self) {
        let listed = bounded(
            self.sharding.request_limit(),
            self.api
                .list(&ListParams::default().labels(&self.sharding.selector())),
        )
        .await;
        let leases = match listed {
            Ok(list) => list.items,
            Err(error) => {
                warn!(%error, "listing the shard Leases failed");
                return;
            }
        };
        self.observed.retain(|name, _| {
            leases
                .iter()
                .any(|lease| lease.metadata.name.as_ref() == Some(name))
        });
        for lease in leases {
            self.remember(lease);
        }
    }

    fn remember(&mut self, lease: Lease) {
        let Some(name) = lease.metadata.name.clone() else {
            return;
        };
        let version = &lease.metadata.resource_version;
        if self
            .observed
            .get(&name)
            .is_none_or(|observed| observed.lease.metadata.resource_version != *version)
        {
            let since = Instant::now();
            self.observed.insert(name, Observed { lease, since });
        }
    }

    /// Who holds each layer's Lease now: this replica's own, else as observed.
    fn holders(&self) -> BTreeMap<String, String> {
        self.layer_names()
            .into_iter()
            .filter_map(|layer| {
                let holder = match self.held.get(&layer) {
                    Some(held) if held.draining.is_some() || held.lost => return None,
                    Some(_) => self.sharding.identity.clone(),
                    None => {
                        holder_of(&self.observed.get(&self.sharding.shard_lease(&layer))?.lease)?
                            .to_string()
                    }
                };
                Some((layer, holder))
            })
            .collect()
    }

    /// The members whose Lease changed within its duration (this replica always counts).
    fn live_members(&self, now: Instant) -> Vec<String> {
        let role = self.sharding.role_label();
        let wall = jiff::Timestamp::now();
        let mut members: Vec<String> = self
            .observed
            .values()
            .filter(|observed| {
                observed
                    .lease
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|labels| labels.get(&role))
                    .is_some_and(|value| value == "member")
            })
            .filter(|observed| !observed.expired(now, self.sharding.duration()))
            // A Lease left by a replica long gone (its renewal far behind any clock skew)
            // does not count either, so that a fresh start need not wait a duration for it.
            .filter(|observed| {
                let renewed = observed
                    .lease
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.renew_time.as_ref())
                    .map(|time| time.0);
                let stale = self.sharding.duration() * 4;
                renewed.is_none_or(|renewed| {
                    wall.duration_since(renewed)
                        .try_into()
                        .is_ok_and(|behind: Duration| behind < stale)
                        || renewed > wall
                })
            })
            .filter_map(|observed| holder_of(&observed.lease).map(str::to_string))
            .collect();
        members.push(self.sharding.identity.clone());
        members.sort();
        members.dedup();
        members
    }

    /// Moves one layer towards what the assignment says.
    async fn tend(&mut self, layer: &str, mine: bool) {
        let lease_name = self.sharding.shard_lease(layer);
        if let Some(held) = self.held.get_mut(layer) {
            if let Some(draining) = &held.draining {
                if !draining.is_finished() {
                    if !held.lost {
                        // Steps still run: keep the Lease until they end.
                        self.renew(layer).await;
                    }
                    return;
                }
                self.shared.metrics.set_shard_held(layer, false);
                if let Some(held) = self.held.remove(layer).filter(|held| !held.lost) {
                    self.release(layer, held.lease, !self.is_unit(layer)).await;
                }
                return;
            }
            if !mine && !held.lost {
                info!(
                    layer,
                    "the layer is assigned to another replica: stopping its work, then releasing its Lease"
                );
                held.drain(false);
                return;
            }
            self.renew(layer).await;
            return;
        }
        if !mine {
            return;
        }
        let now = Instant::now();
        let observed = self.observed.get(&lease_name);
        let decision = claim(observed, now, self.sharding.duration());
        let (previous, transitions) = match decision {
            Claim::Wait => return,
            Claim::Create => (None, 0),
            Claim::Take { transitions } => (observed.map(|o| &o.lease), transitions),
        };
        let lease = lease_object(
            &self.sharding,
            &lease_name,
            "shard",
            Some(layer),
            previous,
            transitions,
        );
        let sent = Instant::now();
        let create = decision == Claim::Create;
        let written =
            match write_lease(&self.api, &self.sharding, &lease_name, &lease, create).await {
                Ok(written) => written,
                Err(error) => {
                    // Another replica was quicker (409), or the server did not answer: the next
                    // tick looks again.
                    info!(layer, %error, "claiming the layer's Lease failed");
                    return;
                }
            };
        self.remember(written.clone());
        let fence = Arc::new(Fence::new(Some(self.deadlines(sent))));
        let runtime = self
            .shared
            .layers
            .iter()
            .find(|runtime| runtime.name() == layer)
            .cloned();
        let (work, abort) = match (runtime, &self.shared.options.layer_gate) {
            (Some(runtime), _) => {
                let work = LayerWork::start(&self.shared, &runtime, &fence, true);
                let abort = work.abort.clone();
                (Work::Layer(work), abort)
            }
            (None, Some(gate)) => {
                gate.grant(layer, fence.clone());
                let work = Work::OnDemand {
                    gate: gate.clone(),
                    name: layer.to_string(),
                };
                (work, CancellationToken::new())
            }
            (None, None) => return,
        };
        let transitions = transitions_of(&written);
        info!(
            layer,
            transitions, "holding the layer's Lease: stepping its Combs"
        );
        self.shared.metrics.shard_acquired(layer);
        self.held.insert(
            layer.to_string(),
            Held {
                lease: written,
                renewed_at: sent,
                fence,
                abort,
                work: Some(work),
                draining: None,
                lost: false,
            },
        );
        self.shared.metrics.set_shard_held(layer, true);
    }

    fn deadlines(&self, renewed_at: Instant) -> (Instant, Instant) {
        let expiry = renewed_at + self.sharding.duration();
        (
            expiry - self.sharding.soft_margin(),
            expiry - self.sharding.hard_margin(),
        )
    }

    /// Renews a held Lease when due; a Lease taken by another is lost at once, one that cannot
    /// be renewed is lost once its hard deadline passed (the fence has stopped its steps).
    async fn renew(&mut self, layer: &str) {
        let renew_every = self.sharding.renew_every();
        let duration = self.sharding.duration();
        let Some(held) = self.held.get(layer) else {
            return;
        };
        let now = Instant::now();
        if now.saturating_duration_since(held.renewed_at) < renew_every {
            return;
        }
        let name = self.sharding.shard_lease(layer);
        let mut lease = held.lease.clone();
        if let Some(spec) = lease.spec.as_mut() {
            spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
            spec.lease_duration_seconds = Some(self.sharding.duration_seconds());
        }
        let sent = Instant::now();
        match write_lease(&self.api, &self.sharding, &name, &lease, false).await {
            Ok(written) => {
                let deadlines = self.deadlines(sent);
                if let Some(held) = self.held.get_mut(layer) {
                    held.lease = written.clone();
                    held.renewed_at = sent;
                    held.fence.send_replace(Some(deadlines));
                }
                self.remember(written);
            }
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
                // A renewal whose answer was lost (it timed out here) may have landed: then the
                // Lease is still ours, same holder and transitions, at a newer version. Taking
                // it would have bumped the transitions.
                let current = bounded(self.sharding.request_limit(), self.api.get_opt(&name))
                    .await
                    .ok()
                    .flatten();
                let ours =
                    self.held
                        .get(layer)
                        .zip(current.as_ref())
                        .is_some_and(|(held, current)| {
                            holder_of(current) == Some(self.sharding.identity.as_str())
                                && current
                                    .spec
                                    .as_ref()
                                    .and_then(|spec| spec.lease_transitions)
                                    == Some(transitions_of(&held.lease))
                        });
                match current {
                    Some(current) if ours => {
                        // Renewed by then, but not known when: the fence stays where it is
                        // until the next renewal.
                        if let Some(held) = self.held.get_mut(layer) {
                            held.lease = current;
                        }
                    }
                    _ => {
                        warn!(
                            layer,
                            "the layer's Lease was taken or removed by another: dropping its running steps"
                        );
                        self.lose(layer);
                    }
                }
            }
            Err(error) => {
                let expired = self
                    .held
                    .get(layer)
                    .is_some_and(|held| now.saturating_duration_since(held.renewed_at) >= duration);
                warn!(layer, %error, expired, "renewing the layer's Lease failed");
                if expired {
                    self.lose(layer);
                }
            }
        }
    }

    fn lose(&mut self, layer: &str) {
        if let Some(held) = self.held.get_mut(layer) {
            held.lost = true;
            held.drain(true);
            if held.draining.is_none() {
                // Nothing was running: forget it now.
                self.held.remove(layer);
                self.shared.metrics.set_shard_held(layer, false);
            }
        }
    }

    /// Whether `layer` is one the federation has now: a layer of the file, or a CombLayer.
    fn is_unit(&self, layer: &str) -> bool {
        self.layer_names().iter().any(|name| name == layer)
            || self
                .shared
                .options
                .layer_gate
                .as_ref()
                .is_some_and(|gate| gate.wanted().contains(layer))
    }

    /// Frees a Lease this replica holds and no longer steps under (best effort: otherwise it
    /// expires); the Lease of a CombLayer that is gone is deleted (unless changed meanwhile).
    async fn release(&mut self, layer: &str, mut lease: Lease, gone: bool) {
        let name = self.sharding.shard_lease(layer);
        if gone {
            let params = DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: lease.metadata.uid.clone(),
                    resource_version: lease.metadata.resource_version.clone(),
                }),
                ..DeleteParams::default()
            };
            match bounded(
                self.sharding.request_limit(),
                self.api.delete(&name, &params),
            )
            .await
            {
                Ok(_) => info!(layer, "the CombLayer is gone: deleted its Lease"),
                Err(error) => {
                    warn!(layer, %error, "deleting the Lease of a CombLayer that is gone failed")
                }
            }
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        }
        match write_lease(&self.api, &self.sharding, &name, &lease, false).await {
            Ok(written) => {
                info!(layer, "released the layer's Lease");
                self.remember(written);
            }
            Err(error) => warn!(layer, %error, "releasing the layer's Lease failed"),
        }
    }

    /// Stops every layer's work, waits for the running steps and releases the Leases, so that
    /// the others take over at once.
    async fn leave(&mut self) {
        for held in self.held.values_mut() {
            held.drain(false);
        }
        for (layer, mut held) in std::mem::take(&mut self.held) {
            if let Some(draining) = held.draining.take() {
                let _ = draining.await;
            }
            self.shared.metrics.set_shard_held(&layer, false);
            if !held.lost {
                let gone = !self.is_unit(&layer);
                self.release(&layer, held.lease, gone).await;
            }
        }
    }

    fn publish(&self, names: &[String], members: &[String], assignment: &BTreeMap<String, String>) {
        let layers = names
            .iter()
            .cloned()
            .map(|layer| {
                let lease = self.sharding.shard_lease(&layer);
                let observed = self.observed.get(&lease);
                let (holder, transitions) = match self.held.get(&layer) {
                    Some(held) => (
                        holder_of(&held.lease).map(str::to_string),
                        transitions_of(&held.lease),
                    ),
                    None => (
                        observed
                            .and_then(|o| holder_of(&o.lease))
                            .map(str::to_string),
                        observed.map_or(0, |o| transitions_of(&o.lease)),
                    ),
                };
                let assigned_to = assignment.get(&layer).cloned();
                let state = match self.held.get(&layer) {
                    Some(held) if held.draining.is_some() => "draining",
                    Some(held)
                        if held
                            .fence
                            .borrow()
                            .is_some_and(|(soft, _)| Instant::now() >= soft) =>
                    {
                        "holding-back"
                    }
                    Some(_) => "stepping",
                    None if assigned_to.as_deref() == Some(self.sharding.identity.as_str()) => {
                        "waiting"
                    }
                    None => "elsewhere",
                };
                ShardView {
                    layer,
                    lease,
                    assigned_to,
                    holder,
                    transitions,
                    state: state.to_string(),
                }
            })
            .collect();
        self.shared.metrics.set_shard_members(members.len());
        *self.shared.shards.lock() = Some(ShardsView {
            identity: self.sharding.identity.clone(),
            namespace: self.sharding.namespace.clone(),
            lease_duration_seconds: self.sharding.duration_seconds(),
            members: members.to_vec(),
            layers,
        });
    }
}
