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
//! the Lease would expire and drops a running step just before it does (the layer work's
//! `Fence`), so that a taker, which waits a whole duration of silence, never steps beside it.
//! Every claim bumps `leaseTransitions`: the fencing token, shown in `/debug/shards`.
//!
//! Expiry is judged by how long a Lease stayed unchanged as this process observed it (like
//! client-go's leader election), never by comparing another process's clock with ours.
//!
//! The unit is the layer: hash buckets of a big layer's namespaces are not split between
//! replicas.
//!
//! This module is the protocol's settings and pure decisions (who should hold what, when a Lease
//! may be claimed) and what `/debug/shards` shows; `coordinator.rs` runs it against the API
//! server, and `work.rs` is the layer work it starts and stops.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use serde::Serialize;
use tokio::time::Instant;

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
    pub(super) fn duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs().max(2)).unwrap_or(i32::MAX)
    }

    pub(super) fn duration(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.duration_seconds()).unwrap_or(u64::MAX))
    }

    /// How often the Leases are listed and the assignment looked at again.
    pub(super) fn tick(&self) -> Duration {
        (self.duration() / 6).max(Duration::from_millis(100))
    }

    /// How often a held Lease is renewed.
    pub(super) fn renew_every(&self) -> Duration {
        self.duration() / 3
    }

    /// The longest one Lease request may take.
    pub(super) fn request_limit(&self) -> Duration {
        self.duration() / 2
    }

    /// How far before its expiry a Lease that could not be renewed holds its steps back.
    pub(super) fn soft_margin(&self) -> Duration {
        self.duration() / 3
    }

    /// How far before its expiry a running step is dropped.
    pub(super) fn hard_margin(&self) -> Duration {
        self.duration() / 10
    }

    pub(super) fn member_lease(&self) -> String {
        lease_name(&self.managed_by, "member", &self.identity)
    }

    pub(super) fn shard_lease(&self, layer: &str) -> String {
        lease_name(&self.managed_by, "shard", layer)
    }

    pub(super) fn role_label(&self) -> String {
        format!("{}shard-role", self.label_prefix)
    }

    pub(super) fn of_label(&self) -> String {
        format!("{}shard-of", self.label_prefix)
    }

    pub(super) fn layer_annotation(&self) -> String {
        format!("{}layer", self.label_prefix)
    }

    pub(super) fn selector(&self) -> String {
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

/// Which member holds CombLayer `layer`: the member with the best rendezvous score for it,
/// whoever holds the others. Not bounded like [`assign`]: a CombLayer made or removed moves no
/// other one, and a membership change moves only those whose best member came or went.
pub fn rendezvous(layer: &str, members: &[String]) -> Option<String> {
    members
        .iter()
        .max_by(|a, b| {
            let score = |member: &str| stable_hash(&format!("{member}\u{0}{layer}"));
            score(a).cmp(&score(b)).then(b.cmp(a))
        })
        .cloned()
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
pub(super) struct Observed {
    pub(super) lease: Lease,
    /// When its resourceVersion was first seen (by this process's clock).
    pub(super) since: Instant,
}

impl Observed {
    fn duration(&self, default: Duration) -> Duration {
        self.lease
            .spec
            .as_ref()
            .and_then(|spec| spec.lease_duration_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            .map_or(default, Duration::from_secs)
    }

    /// Unchanged for a whole duration, as observed here: its holder stopped renewing.
    pub(super) fn expired(&self, now: Instant, default: Duration) -> bool {
        now.saturating_duration_since(self.since) >= self.duration(default)
    }
}

/// How often the Lease changed hands (its fencing token).
pub(super) fn transitions_of(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|spec| spec.lease_transitions)
        .unwrap_or(0)
}

pub(super) fn holder_of(lease: &Lease) -> Option<&str> {
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
pub(super) fn claim(observed: Option<&Observed>, now: Instant, default: Duration) -> Claim {
    match observed {
        None => Claim::Create,
        Some(observed)
            if holder_of(&observed.lease).is_none() || observed.expired(now, default) =>
        {
            Claim::Take {
                transitions: transitions_of(&observed.lease) + 1,
            }
        }
        Some(_) => Claim::Wait,
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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use kube::api::ObjectMeta;

    use super::*;

    /// CombLayers by rendezvous: each goes to one member, the same from any view; a CombLayer
    /// made or removed moves none of the others, a member that leaves moves only its own.
    #[test]
    fn a_comblayer_made_removed_or_left_moves_no_other() {
        let members = |names: &[&str]| names.iter().map(ToString::to_string).collect::<Vec<_>>();
        let three = members(&["r0", "r1", "r2"]);
        let layers: Vec<String> = (0..60).map(|index| format!("l{index:03}")).collect();
        let placed = |members: &[String]| -> BTreeMap<String, String> {
            layers
                .iter()
                .map(|layer| (layer.clone(), rendezvous(layer, members).expect("a member")))
                .collect()
        };
        let before = placed(&three);
        let mut reversed = three.clone();
        reversed.reverse();
        assert_eq!(placed(&reversed), before, "the same from any order");
        for member in &three {
            let share = before.values().filter(|held| *held == member).count();
            assert!(share >= 10, "{member} holds {share} of 60");
        }
        // r1 leaves: only its CombLayers move.
        let after = placed(&members(&["r0", "r2"]));
        for (layer, held) in &before {
            if held != "r1" {
                assert_eq!(
                    &after[layer], held,
                    "{layer} moved though its holder stayed"
                );
            }
        }
        assert_eq!(rendezvous("l000", &[]), None);
    }

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
