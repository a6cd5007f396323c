//! Sharding the layers between replicas (`comb run --sharded`): each layer is stepped by the one
//! replica that holds the layer's Lease.
//!
//! Every replica renews a member Lease (`<managedBy>-member-<identity>`) and lists the Leases of
//! its federation every tick. The live members (Leases renewed within their duration, as this
//! replica observed them) decide by rendezvous hashing with bounded loads ([`assign`]) which
//! replica should hold each layer; that replica claims the layer's Lease
//! (`<managedBy>-shard-<layer>`) once it is free (released, or not renewed for its duration as
//! observed here), and only then starts the layer's workers and managed-resource watches. A
//! holder whose layer is assigned elsewhere stops the layer's work, waits for the running steps,
//! then releases the Lease. A holder that cannot renew holds its steps back at a margin before
//! the Lease would expire and drops a running step just before it does (the [`Fence`]), so that
//! a taker, which waits a whole duration of silence, never steps beside it. Every claim bumps
//! `leaseTransitions`: the fencing token, shown in `/debug/shards`.
//!
//! Expiry is judged by how long a Lease stayed unchanged as this process observed it (like
//! client-go's leader election), never by comparing another process's clock with ours.
//!
//! The unit is the layer: hash buckets of a big layer's namespaces are not split between
//! replicas.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Shared;
use super::run::LayerWork;
use crate::error::{Error, Result};

/// Where the Leases live and who this replica is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sharding {
    /// The Leases' namespace (`POD_NAMESPACE`, else `default`), on the first layer's cluster
    /// (where leader election keeps its Lease too).
    pub namespace: String,
    /// The federation's `managedBy`: the prefix of every Lease name, and a label value.
    pub managed_by: String,
    /// The configuration's label prefix (`comb.internal/`).
    pub label_prefix: String,
    /// This replica's identity (the pod name, else host name and process id).
    pub identity: String,
    /// How long a Lease holds without renewal.
    pub lease_duration: Duration,
}

impl Sharding {
    /// Sharding in `namespace` as `identity`, with 15 s Leases.
    pub fn new(namespace: &str, managed_by: &str, label_prefix: &str, identity: &str) -> Sharding {
        Sharding {
            namespace: namespace.to_string(),
            managed_by: managed_by.to_string(),
            label_prefix: label_prefix.to_string(),
            identity: identity.to_string(),
            lease_duration: Duration::from_secs(15),
        }
    }

    /// The duration as the Lease records it: whole seconds, at least 2.
    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs().max(2)).unwrap_or(i32::MAX)
    }

    fn duration(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.duration_seconds()).unwrap_or(u64::MAX))
    }

    /// How often the Leases are listed and the assignment looked at again.
    fn tick(&self) -> Duration {
        (self.duration() / 6).max(Duration::from_millis(100))
    }

    /// How often a held Lease is renewed.
    fn renew_every(&self) -> Duration {
        self.duration() / 3
    }

    /// The longest one Lease request may take.
    fn request_limit(&self) -> Duration {
        self.duration() / 2
    }

    /// How far before its expiry a Lease that could not be renewed holds its steps back.
    fn soft_margin(&self) -> Duration {
        self.duration() / 3
    }

    /// How far before its expiry a running step is dropped.
    fn hard_margin(&self) -> Duration {
        self.duration() / 10
    }

    fn member_lease(&self) -> String {
        lease_name(&self.managed_by, "member", &self.identity)
    }

    fn shard_lease(&self, layer: &str) -> String {
        lease_name(&self.managed_by, "shard", layer)
    }

    fn role_label(&self) -> String {
        format!("{}shard-role", self.label_prefix)
    }

    fn of_label(&self) -> String {
        format!("{}shard-of", self.label_prefix)
    }

    fn layer_annotation(&self) -> String {
        format!("{}layer", self.label_prefix)
    }

    fn selector(&self) -> String {
        format!("{}={}", self.of_label(), self.managed_by)
    }
}

/// `<managed_by>-<kind>-<name>` as a Lease name may be: lower case, `[a-z0-9-]`, with a hash
/// of the original when anything had to change (so that two names never meet).
pub fn lease_name(managed_by: &str, kind: &str, name: &str) -> String {
    let wanted = format!("{managed_by}-{kind}-{name}");
    let clean: String = wanted
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-') => c,
            _ => '-',
        })
        .collect();
    let clean = clean.trim_matches('-').to_string();
    if clean == wanted && clean.len() <= 200 {
        return clean;
    }
    let mut short: String = clean.chars().take(200).collect();
    short.push_str(&format!("-{:08x}", stable_hash(&wanted) as u32));
    short
}

/// FNV-1a with a final mix: the same on every replica and every build, unlike std's hasher.
pub fn stable_hash(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // splitmix64's finaliser spreads FNV's weak low bits.
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// Which member holds each layer, given who holds them now (`holders`: layer -> member, from
/// the shard Leases). Each member's share is `layers / members` rounded down, or one more while
/// fewer members than the remainder have one more, so shares are within one of each other.
/// Layers first stay with their current holder while it has room (so a membership change moves
/// only what balance needs: a leaver's layers, a joiner's share); the rest go by rendezvous
/// hashing with bounded loads: every (member, layer) pair has a score, pairs are taken best
/// first while the member has room. Every replica computes the same from the same view.
pub fn assign(
    layers: &[String],
    members: &[String],
    holders: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut members: Vec<&String> = members.iter().collect();
    members.sort();
    members.dedup();
    let mut assignment = BTreeMap::new();
    if members.is_empty() {
        return assignment;
    }
    let score = |member: &str, layer: &str| stable_hash(&format!("{member}\u{0}{layer}"));
    // Best score first; ties (never in practice) by name.
    let by_score = |a: &(u64, &String, &String), b: &(u64, &String, &String)| {
        b.0.cmp(&a.0).then(a.1.cmp(b.1)).then(a.2.cmp(b.2))
    };
    let mut kept: Vec<(u64, &String, &String)> = layers
        .iter()
        .filter_map(|layer| {
            let holder = members.iter().find(|m| Some(**m) == holders.get(layer))?;
            Some((score(holder, layer), *holder, layer))
        })
        .collect();
    kept.sort_by(by_score);
    let mut pairs: Vec<(u64, &String, &String)> = members
        .iter()
        .flat_map(|member| {
            layers
                .iter()
                .map(move |layer| (score(member, layer), *member, layer))
        })
        .collect();
    pairs.sort_by(by_score);
    let floor = layers.len() / members.len();
    let mut extras = layers.len() % members.len();
    let mut load: HashMap<&String, usize> = HashMap::new();
    for (_, member, layer) in kept.into_iter().chain(pairs) {
        if assignment.contains_key(layer) {
            continue;
        }
        let held = load.entry(member).or_default();
        let room = *held < floor || (*held == floor && extras > 0);
        if !room {
            continue;
        }
        if *held == floor {
            extras -= 1;
        }
        *held += 1;
        assignment.insert(layer.clone(), member.clone());
    }
    assignment
}

/// A Lease as this replica last saw it, and since when it is unchanged.
#[derive(Clone, Debug)]
struct Observed {
    lease: Lease,
    /// When its resourceVersion was first seen (by this process's clock).
    since: Instant,
}

impl Observed {
    fn holder(&self) -> Option<&str> {
        holder_of(&self.lease)
    }

    fn transitions(&self) -> i32 {
        transitions_of(&self.lease)
    }

    fn duration(&self, default: Duration) -> Duration {
        self.lease
            .spec
            .as_ref()
            .and_then(|spec| spec.lease_duration_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            .map_or(default, Duration::from_secs)
    }

    /// Unchanged for a whole duration, as observed here: its holder stopped renewing.
    fn expired(&self, now: Instant, default: Duration) -> bool {
        now.saturating_duration_since(self.since) >= self.duration(default)
    }
}

/// How often the Lease changed hands (its fencing token).
fn transitions_of(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|spec| spec.lease_transitions)
        .unwrap_or(0)
}

fn holder_of(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|spec| spec.holder_identity.as_deref())
        .filter(|holder| !holder.is_empty())
}

/// What to do about the Lease of a layer assigned to this replica that it does not hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// No Lease yet: create it, held.
    Create,
    /// Free or expired: take it over with this transition count.
    Take { transitions: i32 },
    /// Someone holds it: wait.
    Wait,
}

/// Decides a [`Claim`] from the observed Lease (pure: the clock is a parameter).
fn claim(observed: Option<&Observed>, now: Instant, default: Duration) -> Claim {
    match observed {
        None => Claim::Create,
        Some(observed) if observed.holder().is_none() || observed.expired(now, default) => {
            Claim::Take {
                transitions: observed.transitions() + 1,
            }
        }
        Some(_) => Claim::Wait,
    }
}

/// The soft and hard deadlines of a layer's work: no step starts after the first, a running
/// step is dropped at the second. `None`: no limit (the layer is not sharded).
pub(super) type Deadlines = Option<(Instant, Instant)>;

/// The deadlines a layer's workers obey, moved on by every renewal.
pub(super) struct Fence {
    deadlines: watch::Sender<Deadlines>,
}

impl Fence {
    pub(super) fn unlimited() -> Arc<Fence> {
        Arc::new(Fence {
            deadlines: watch::Sender::new(None),
        })
    }

    fn until(deadlines: (Instant, Instant)) -> Arc<Fence> {
        Arc::new(Fence {
            deadlines: watch::Sender::new(Some(deadlines)),
        })
    }

    fn extend(&self, deadlines: (Instant, Instant)) {
        self.deadlines.send_replace(Some(deadlines));
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<Deadlines> {
        self.deadlines.subscribe()
    }
}

/// Resolves once the hard deadline passes (as renewals move it) or `abort` is cancelled.
pub(super) async fn fence_expired(
    mut deadlines: watch::Receiver<Deadlines>,
    abort: CancellationToken,
) {
    loop {
        let hard = deadlines.borrow_and_update().map(|(_, hard)| hard);
        let passed = async move {
            match hard {
                Some(hard) => tokio::time::sleep_until(hard).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = abort.cancelled() => return,
            () = passed => return,
            changed = deadlines.changed() => {
                if changed.is_err() {
                    // The fence is gone: nothing moves the deadline any more.
                    tokio::select! {
                        () = abort.cancelled() => {}
                        () = async move {
                            match hard {
                                Some(hard) => tokio::time::sleep_until(hard).await,
                                None => std::future::pending().await,
                            }
                        } => {}
                    }
                    return;
                }
            }
        }
    }
}

/// One layer, as `/debug/shards` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardView {
    pub layer: String,
    pub lease: String,
    /// The member the assignment names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assigned_to: Option<String>,
    /// The Lease's holder as last seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The Lease's transitions: the fencing token of the holder.
    pub transitions: i32,
    /// What this replica does with the layer: `stepping`, `holding-back` (renewal late),
    /// `draining` (stopping before release), `waiting` (assigned here, Lease held elsewhere),
    /// `elsewhere`.
    pub state: String,
}

/// This replica's view of the shards, as `/debug/shards` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardsView {
    pub identity: String,
    pub namespace: String,
    pub lease_duration_seconds: i32,
    /// The live members, this replica among them.
    pub members: Vec<String>,
    pub layers: Vec<ShardView>,
}

/// A layer this replica holds the Lease of.
struct Held {
    /// The Lease as our last write returned it.
    lease: Lease,
    /// When the last successful write of it was sent.
    renewed_at: Instant,
    fence: Arc<Fence>,
    work: Option<LayerWork>,
    /// Drops the running steps of the work, running or draining.
    abort: CancellationToken,
    /// The work stopping: the task that waits for its running steps.
    draining: Option<JoinHandle<()>>,
    /// The Lease is lost (taken, or expired unrenewed): stop and forget it, never release.
    lost: bool,
}

impl Held {
    fn transitions(&self) -> i32 {
        transitions_of(&self.lease)
    }

    fn drain(&mut self, abort: bool) {
        if abort {
            self.abort.cancel();
        }
        if let Some(work) = self.work.take() {
            work.stop();
            self.draining = Some(tokio::spawn(work.join()));
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
        let written = match &last {
            Some(_) => bounded(limit, api.replace(&name, &PostParams::default(), &lease)).await,
            None => bounded(limit, api.create(&PostParams::default(), &lease)).await,
        };
        match written {
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

    /// One tick: look at the Leases, hold what is assigned here.
    async fn step(&mut self) {
        self.observe().await;
        let members = self.live_members(Instant::now());
        let assignment = assign(&self.layer_names(), &members, &self.holders());
        for name in self.layer_names() {
            let mine = assignment.get(&name) == Some(&self.sharding.identity);
            self.tend(&name, mine).await;
        }
        self.publish(&members, &assignment);
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
        let names: Vec<String> = leases
            .iter()
            .filter_map(|lease| lease.metadata.name.clone())
            .collect();
        self.observed.retain(|name, _| names.contains(name));
        for lease in leases {
            self.remember(lease);
        }
    }

    fn remember(&mut self, lease: Lease) {
        let Some(name) = lease.metadata.name.clone() else {
            return;
        };
        let version = lease.metadata.resource_version.clone();
        match self.observed.get_mut(&name) {
            Some(observed) if observed.lease.metadata.resource_version == version => {}
            _ => {
                self.observed.insert(
                    name,
                    Observed {
                        lease,
                        since: Instant::now(),
                    },
                );
            }
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
                    None => self
                        .observed
                        .get(&self.sharding.shard_lease(&layer))?
                        .holder()?
                        .to_string(),
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
            .filter_map(|observed| observed.holder().map(str::to_string))
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
                let lost = held.lost;
                let lease = held.lease.clone();
                self.held.remove(layer);
                self.set_held_metric(layer, false);
                if !lost {
                    self.release(layer, lease).await;
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
        let previous = observed.map(|o| o.lease.clone());
        let lease = match decision {
            Claim::Wait => return,
            Claim::Create => self.lease_object(&lease_name, "shard", Some(layer), None, 0),
            Claim::Take { transitions } => self.lease_object(
                &lease_name,
                "shard",
                Some(layer),
                previous.as_ref(),
                transitions,
            ),
        };
        let sent = Instant::now();
        let written = match decision {
            Claim::Create => {
                bounded(
                    self.sharding.request_limit(),
                    self.api.create(&PostParams::default(), &lease),
                )
                .await
            }
            _ => {
                bounded(
                    self.sharding.request_limit(),
                    self.api
                        .replace(&lease_name, &PostParams::default(), &lease),
                )
                .await
            }
        };
        let written = match written {
            Ok(written) => written,
            Err(error) => {
                // Another replica was quicker (409), or the server did not answer: the next
                // tick looks again.
                info!(layer, %error, "claiming the layer's Lease failed");
                return;
            }
        };
        self.remember(written.clone());
        let fence = Fence::until(self.deadlines(sent));
        let Some(runtime) = self
            .shared
            .layers
            .iter()
            .find(|runtime| runtime.name() == layer)
            .cloned()
        else {
            return;
        };
        let transitions = written
            .spec
            .as_ref()
            .and_then(|spec| spec.lease_transitions)
            .unwrap_or(0);
        info!(
            layer,
            transitions, "holding the layer's Lease: stepping its Combs"
        );
        self.shared.metrics.shard_acquired(layer);
        let work = LayerWork::start(&self.shared, &runtime, fence.clone(), true);
        self.held.insert(
            layer.to_string(),
            Held {
                lease: written,
                renewed_at: sent,
                fence,
                abort: work.abort_token(),
                work: Some(work),
                draining: None,
                lost: false,
            },
        );
        self.set_held_metric(layer, true);
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
        let written = bounded(
            self.sharding.request_limit(),
            self.api.replace(&name, &PostParams::default(), &lease),
        )
        .await;
        match written {
            Ok(written) => {
                let deadlines = self.deadlines(sent);
                if let Some(held) = self.held.get_mut(layer) {
                    held.lease = written.clone();
                    held.renewed_at = sent;
                    held.fence.extend(deadlines);
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
                                    == Some(held.transitions())
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
                self.set_held_metric(layer, false);
            }
        }
    }

    /// Frees a Lease this replica holds and no longer steps under (best effort: otherwise it
    /// expires).
    async fn release(&mut self, layer: &str, mut lease: Lease) {
        let name = self.sharding.shard_lease(layer);
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        }
        match bounded(
            self.sharding.request_limit(),
            self.api.replace(&name, &PostParams::default(), &lease),
        )
        .await
        {
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
        let layers: Vec<String> = self.held.keys().cloned().collect();
        for layer in &layers {
            if let Some(held) = self.held.get_mut(layer) {
                held.drain(false);
            }
        }
        for layer in layers {
            let Some(mut held) = self.held.remove(&layer) else {
                continue;
            };
            if let Some(draining) = held.draining.take() {
                let _ = draining.await;
            }
            self.set_held_metric(&layer, false);
            if !held.lost {
                self.release(&layer, held.lease).await;
            }
        }
    }

    fn set_held_metric(&self, layer: &str, held: bool) {
        self.shared.metrics.set_shard_held(layer, held);
    }

    fn lease_object(
        &self,
        name: &str,
        role: &str,
        layer: Option<&str>,
        previous: Option<&Lease>,
        transitions: i32,
    ) -> Lease {
        lease_object(&self.sharding, name, role, layer, previous, transitions)
    }

    fn publish(&self, members: &[String], assignment: &BTreeMap<String, String>) {
        let layers = self
            .layer_names()
            .into_iter()
            .map(|layer| {
                let lease = self.sharding.shard_lease(&layer);
                let observed = self.observed.get(&lease);
                let (holder, transitions) = match self.held.get(&layer) {
                    Some(held) => (
                        holder_of(&held.lease).map(str::to_string),
                        held.transitions(),
                    ),
                    None => (
                        observed.and_then(|o| o.holder().map(str::to_string)),
                        observed.map_or(0, Observed::transitions),
                    ),
                };
                let assigned_to = assignment.get(&layer).cloned();
                let state = match self.held.get(&layer) {
                    Some(held) if held.draining.is_some() => "draining",
                    Some(held)
                        if held
                            .fence
                            .subscribe()
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
        self.shared.set_shards_view(ShardsView {
            identity: self.sharding.identity.clone(),
            namespace: self.sharding.namespace.clone(),
            lease_duration_seconds: self.sharding.duration_seconds(),
            members: members.to_vec(),
            layers,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, count: usize) -> Vec<String> {
        (0..count).map(|i| format!("{prefix}{i}")).collect()
    }

    fn loads(assignment: &BTreeMap<String, String>, members: &[String]) -> Vec<usize> {
        members
            .iter()
            .map(|member| assignment.values().filter(|m| *m == member).count())
            .collect()
    }

    fn moved(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> usize {
        before
            .iter()
            .filter(|(layer, member)| after.get(*layer) != Some(*member))
            .count()
    }

    #[test]
    fn every_layer_goes_to_one_member_and_shares_are_within_one() {
        for (layers, members) in [
            (1, 1),
            (1, 3),
            (3, 3),
            (3, 2),
            (4, 3),
            (12, 3),
            (50, 7),
            (5, 8),
        ] {
            let layers = names("layer-", layers);
            let members = names("comb-", members);
            let assignment = assign(&layers, &members, &BTreeMap::new());
            assert_eq!(assignment.len(), layers.len(), "{layers:?} on {members:?}");
            assert!(assignment.values().all(|member| members.contains(member)));
            let loads = loads(&assignment, &members);
            let (min, max) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
            assert!(max - min <= 1, "{loads:?} for {} layers", layers.len());
            // Every replica computes the same from the same members, in any order.
            let mut reversed = members.clone();
            reversed.reverse();
            assert_eq!(assign(&layers, &reversed, &BTreeMap::new()), assignment);
            // Once held as assigned, it stays.
            assert_eq!(assign(&layers, &members, &assignment), assignment);
        }
        assert!(assign(&names("layer-", 3), &[], &BTreeMap::new()).is_empty());
    }

    #[test]
    fn a_membership_change_moves_only_what_balance_needs() {
        // (layers, members before, members after, layers that must move)
        for (layer_count, before, after, needed) in [
            // One of three leaves: its share moves, nothing else.
            (3, 3, 2, 1),
            (12, 3, 2, 4),
            (30, 5, 4, 6),
            // One joins: it takes its share from the others, nothing else.
            (3, 2, 3, 1),
            (12, 3, 4, 3),
            (30, 4, 5, 6),
            (7, 1, 2, 3),
        ] {
            let layers = names("layer-", layer_count);
            let old = assign(&layers, &names("comb-", before), &BTreeMap::new());
            // The new view, while the old holders still hold (a leaver's Leases are gone).
            let members_after = names("comb-", after);
            let holders: BTreeMap<String, String> = old
                .iter()
                .filter(|(_, member)| members_after.contains(member))
                .map(|(layer, member)| (layer.clone(), member.clone()))
                .collect();
            let new = assign(&layers, &members_after, &holders);
            let loads = loads(&new, &members_after);
            let (min, max) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
            assert!(max - min <= 1, "{loads:?}");
            assert_eq!(
                moved(&old, &new),
                needed,
                "{layer_count} layers, {before} -> {after} members"
            );
        }
        // A holder that is not a member any more does not count.
        let layers = names("layer-", 2);
        let holders = BTreeMap::from([("layer-0".to_string(), "gone".to_string())]);
        let assignment = assign(&layers, &names("comb-", 2), &holders);
        assert!(
            assignment
                .values()
                .all(|member| member.starts_with("comb-"))
        );
    }

    fn lease(holder: Option<&str>, transitions: i32, seconds: i32) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("comb-shard-prod".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: Some(seconds),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_lease_is_claimed_only_when_free_or_silent_for_its_duration() {
        let start = Instant::now();
        let default = Duration::from_secs(15);
        let observed = |holder, transitions, seconds| Observed {
            lease: lease(holder, transitions, seconds),
            since: start,
        };
        let cases = [
            (None, 0, Claim::Create),
            (
                Some(observed(None, 2, 3)),
                0,
                Claim::Take { transitions: 3 },
            ),
            (
                Some(observed(Some(""), 2, 3)),
                0,
                Claim::Take { transitions: 3 },
            ),
            (Some(observed(Some("b"), 2, 3)), 0, Claim::Wait),
            (Some(observed(Some("b"), 2, 3)), 2_999, Claim::Wait),
            (
                Some(observed(Some("b"), 2, 3)),
                3_000,
                Claim::Take { transitions: 3 },
            ),
            // Its own duration counts, not ours.
            (Some(observed(Some("b"), 0, 10)), 5_000, Claim::Wait),
        ];
        for (observed, after_millis, expected) in cases {
            let now = start + Duration::from_millis(after_millis);
            assert_eq!(
                claim(observed.as_ref(), now, default),
                expected,
                "{observed:?} after {after_millis} ms"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_fence_drops_a_step_at_its_hard_deadline_unless_a_renewal_moved_it() {
        let start = Instant::now();
        let seconds = Duration::from_secs;
        let fence = Fence::until((start + seconds(2), start + seconds(3)));
        let expired = tokio::spawn(fence_expired(fence.subscribe(), CancellationToken::new()));
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        // A renewal before the hard deadline moves it.
        fence.extend((start + seconds(4), start + seconds(5)));
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        tokio::task::yield_now().await;
        assert!(
            !expired.is_finished(),
            "past the old deadline, before the new"
        );
        tokio::time::sleep(Duration::from_millis(1_600)).await;
        tokio::task::yield_now().await;
        assert!(expired.is_finished(), "past the new deadline");

        // Without a limit only the abort ends it.
        let abort = CancellationToken::new();
        let unlimited = Fence::unlimited();
        let expired = tokio::spawn(fence_expired(unlimited.subscribe(), abort.clone()));
        tokio::time::sleep(seconds(3_600)).await;
        tokio::task::yield_now().await;
        assert!(!expired.is_finished());
        abort.cancel();
        expired.await.unwrap();

        // A fence dropped keeps its last deadline.
        let fence = Fence::until((start, Instant::now() + seconds(1)));
        let expired = tokio::spawn(fence_expired(fence.subscribe(), CancellationToken::new()));
        drop(fence);
        tokio::time::sleep(Duration::from_millis(500)).await;
        tokio::task::yield_now().await;
        assert!(!expired.is_finished());
        tokio::time::sleep(seconds(1)).await;
        tokio::task::yield_now().await;
        assert!(expired.is_finished());
    }

    #[test]
    fn lease_names_are_valid_and_distinct() {
        assert_eq!(lease_name("comb", "shard", "prod"), "comb-shard-prod");
        let odd = lease_name("comb", "shard", "Prod_EU");
        assert!(odd.starts_with("comb-shard-prod-eu-"), "{odd}");
        assert_ne!(odd, lease_name("comb", "shard", "prod-eu"));
        assert!(lease_name("comb", "member", &"x".repeat(400)).len() <= 253);
    }

    #[test]
    fn timings_leave_room_before_expiry() {
        let sharding = Sharding {
            lease_duration: Duration::from_secs(3),
            ..Sharding::new("default", "comb", "comb.internal/", "a")
        };
        assert_eq!(sharding.renew_every(), Duration::from_secs(1));
        assert_eq!(sharding.tick(), Duration::from_millis(500));
        assert!(sharding.soft_margin() > sharding.hard_margin());
        assert!(sharding.renew_every() + sharding.soft_margin() < sharding.duration());
        // Below 2 s the Lease records 2 s.
        let short = Sharding {
            lease_duration: Duration::from_millis(500),
            ..sharding
        };
        assert_eq!(short.duration_seconds(), 2);
    }
}
