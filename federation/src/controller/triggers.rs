//! Which watch events call for which steps: pure decisions over the objects seen.

use std::collections::VecDeque;

use comb_api::{Comb, CombStatus, CombUpstreamStatus, LabelKeys, Reason, UpstreamSpec};

use super::queue::Trigger;
use crate::config::{BorrowDecision, Config, Layer};
use crate::engine::borrow::Candidate;
use crate::engine::keys::CombKey;

/// The key of a Comb CR, if it has a namespace and a name.
pub fn comb_key(comb: &Comb) -> Option<CombKey> {
    Some(CombKey::new(
        comb.metadata.namespace.as_deref()?,
        comb.metadata.name.as_deref()?,
    ))
}

/// Whether a change of a Comb's CR (`old` as last seen, if at all) needs a step of that Comb.
/// Status changes alone need none: the controller writes them itself. Neither does a version
/// the controller wrote itself (`own_write`: finalizers, status), unless the generation moved:
/// a status write after re-reading the CR carries a spec change nobody has seen yet.
pub fn cr_trigger(old: Option<&Comb>, new: &Comb, own_write: bool) -> Option<Trigger> {
    let Some(old) = old else {
        return Some(Trigger::Created);
    };
    if own_write
        && old.metadata.generation == new.metadata.generation
        && old.metadata.uid == new.metadata.uid
    {
        return None;
    }
    let (was, is) = (&old.metadata, &new.metadata);
    if was.uid != is.uid {
        return Some(Trigger::Created);
    }
    if is.deletion_timestamp.is_some() && was.deletion_timestamp.is_none() {
        return Some(Trigger::Deleting);
    }
    let changed = was.generation != is.generation
        || was.annotations != is.annotations
        || was.labels != is.labels
        || was.finalizers != is.finalizers
        // Without a generation (a server that keeps none) the spec itself tells.
        || (is.generation.is_none() && old.spec != new.spec);
    changed.then_some(Trigger::Changed)
}

/// Where a version of a CR comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A list (the watch's first, or after it fell behind): the server's state when listed.
    Listed,
    /// A watch event: events come in the server's order.
    Watched,
    /// What one of our own writes returned.
    OwnWrite,
}

/// How many versions the watch delivered are remembered per CR: enough to tell an own write
/// that returns after the watch already passed it. Also how many versions the watch may bring
/// before it reaches our write: each of our writes is conditional on the version we held, so
/// only our own earlier writes can stand between, and more than this many means the watch
/// passed it unseen (nothing must wait for it for good).
const WATCHED_KEPT: usize = 8;

/// The resourceVersions of one CR as the controller met them. A resourceVersion is opaque: two
/// are only equal or not (the API promises no order), so "later" comes from the order of the
/// watch, which delivers every version of an object in the server's order, ours included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Versions {
    /// Our latest write, until the watch delivers it: what the watch delivers before it is an
    /// older version.
    awaiting: Option<String>,
    /// How many versions the watch delivered while awaiting it.
    behind: usize,
    /// The versions the watch delivered lately, newest last.
    watched: VecDeque<String>,
}

impl Versions {
    /// Whether `version` (from `source`) is later than `held`, the version kept, and records it.
    pub fn is_later(&mut self, held: Option<&str>, version: Option<&str>, source: Source) -> bool {
        let differs = version != held;
        let Some(version) = version else {
            return differs;
        };
        match source {
            Source::Listed | Source::Watched => {
                if self.watched.len() == WATCHED_KEPT {
                    self.watched.pop_front();
                }
                self.watched.push_back(version.to_string());
                match self.awaiting.as_deref() {
                    // A list is the server's state: whatever we wrote is in it or behind it.
                    _ if source == Source::Listed => self.awaiting = None,
                    Some(ours) if ours == version => self.awaiting = None,
                    // The watch has not reached our write yet: this version is older.
                    Some(_) if self.behind + 1 < WATCHED_KEPT => {
                        self.behind += 1;
                        return false;
                    }
                    Some(_) => self.awaiting = None,
                    None => {}
                }
                self.behind = 0;
                differs
            }
            Source::OwnWrite => {
                // The watch already passed it: what is held is as new or newer.
                if !differs || self.watched.iter().any(|seen| seen == version) {
                    return false;
                }
                self.awaiting = Some(version.to_string());
                self.behind = 0;
                true
            }
        }
    }
}

/// What others react to in a Comb's status: phase, Ready verdict, endpoints and upstream
/// (without the times, which change on every borrowing step). Kept for every Comb, so as a hash
/// (their copies took ~250 bytes a Comb).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusSignature(u64);

/// The [`StatusSignature`] of a recorded status.
pub fn status_signature(status: Option<&CombStatus>) -> StatusSignature {
    let ready = status.and_then(CombStatus::ready).map(|ready| {
        (
            ready.status.to_string(),
            ready.reason.as_ref().map(Reason::to_string),
            ready.message.as_deref(),
        )
    });
    let endpoints = status.map(CombStatus::endpoint_list).unwrap_or_default();
    let upstream = status
        .and_then(|s| s.upstream.clone())
        .map(|upstream| CombUpstreamStatus {
            observed_at: None,
            ..upstream
        });
    // The same values give the same text, so the same hash, within this process.
    let phase = status.and_then(|s| s.phase.as_ref());
    let text = serde_json::to_string(&(phase, ready, endpoints, upstream)).unwrap_or_default();
    let mut hasher = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(&text, &mut hasher);
    StatusSignature(std::hash::Hasher::finish(&hasher))
}

/// The Comb a managed resource belongs to, by its name and namespace labels (`label` reads
/// one).
pub fn owner_of<'a>(label: impl Fn(&str) -> Option<&'a str>, keys: &LabelKeys) -> Option<CombKey> {
    Some(CombKey::new(
        label(keys.namespace_label())?,
        label(keys.name_label())?,
    ))
}

/// The peer of Comb `key` of `layer` on entry `candidate` of its fallback chain, as (layer index,
/// key); `None` for `local`.
pub fn chain_peer(
    config: &Config,
    layer: &Layer,
    key: &CombKey,
    candidate: &Candidate,
) -> Option<(usize, CombKey)> {
    let Candidate::Layer(target) = candidate else {
        return None;
    };
    let (upstream, namespace) = config.peer_up_the_chain(layer, &key.namespace, target)?;
    let index = config.layers.iter().position(|l| l.name == upstream.name)?;
    Some((index, CombKey::new(namespace, &key.name)))
}

/// Upstream class names that read a peer Comb in another layer.
const K8S_UPSTREAMS: [&str; 2] = ["K8s", "Kubernetes::Comb::Upstream::K8s"];

/// The peer a Comb of layer `layer` borrows from, as (layer index, key), when the layer's
/// configuration or the CR's `spec.upstream` names a K8s upstream in a layer of this
/// configuration; on a fallback, the entry its recorded status shows in use (`None` while it
/// runs locally). Upstreams a class decides at run time are not known here; resync covers them.
pub fn upstream_peer(config: &Config, layer: usize, comb: &Comb) -> Option<(usize, CombKey)> {
    let key = comb_key(comb)?;
    let this = config.layers.get(layer)?;
    let index_of = |name: &str| config.layers.iter().position(|l| l.name == name);
    if let Some((candidates, _)) = config.fallback_of(this, &key.namespace, &key.name) {
        let entry = config.recorded_entry(&candidates, comb.status.as_ref());
        return chain_peer(config, this, &key, candidates.get(entry)?);
    }
    match this.borrow_decision(config, &key.namespace, &key.name) {
        BorrowDecision::Borrow {
            from,
            namespace,
            name,
            ..
        } => return Some((index_of(&from.name)?, CombKey::new(namespace, name))),
        BorrowDecision::Local => return None,
        BorrowDecision::NoSay => {}
    }
    let UpstreamSpec::Declared(spec) = &comb.spec.upstream else {
        return None;
    };
    let text = |field: &str| spec.get(field).and_then(|value| value.as_str());
    if !K8S_UPSTREAMS.contains(&text("class")?) {
        return None;
    }
    let peer = CombKey::new(
        text("namespace").unwrap_or(&key.namespace),
        text("name").unwrap_or(&key.name),
    );
    let index = match (text("layer"), text("context")) {
        (Some(layer), _) => index_of(layer)?,
        (None, Some(context)) => config
            .layers
            .iter()
            .position(|l| l.context == context && l.manages(&peer.namespace))?,
        (None, None) => return None,
    };
    Some((index, peer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use comb_api::{CombCondition, CombSpec, ConditionStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn comb(namespace: &str, name: &str) -> Comb {
        let mut comb = Comb::new(
            "comb.internal",
            namespace,
            name,
            CombSpec::of_class("Manifests"),
        );
        comb.metadata.uid = Some("u1".into());
        comb.metadata.generation = Some(1);
        comb
    }

    #[test]
    fn cr_changes() {
        let old = comb("ns", "a");
        let same = old.clone();
        assert_eq!(cr_trigger(None, &old, false), Some(Trigger::Created));
        assert_eq!(cr_trigger(Some(&old), &same, false), None);

        let mut status_only = old.clone();
        status_only.status = Some(CombStatus::default());
        status_only.metadata.resource_version = Some("9".into());
        assert_eq!(cr_trigger(Some(&old), &status_only, false), None);

        let mut edited = old.clone();
        edited.metadata.generation = Some(2);
        assert_eq!(
            cr_trigger(Some(&old), &edited, false),
            Some(Trigger::Changed)
        );

        let mut annotated = old.clone();
        annotated.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
        assert_eq!(
            cr_trigger(Some(&old), &annotated, false),
            Some(Trigger::Changed)
        );

        let mut finalized = old.clone();
        finalized.metadata.finalizers = Some(vec!["comb.internal/cleanup".into()]);
        assert_eq!(
            cr_trigger(Some(&old), &finalized, false),
            Some(Trigger::Changed)
        );

        let mut deleting = old.clone();
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(
            cr_trigger(Some(&old), &deleting, false),
            Some(Trigger::Deleting)
        );

        let mut recreated = old.clone();
        recreated.metadata.uid = Some("u2".into());
        assert_eq!(
            cr_trigger(Some(&old), &recreated, false),
            Some(Trigger::Created)
        );

        // Our own finalizer write wakes nobody; one that carries a new generation does.
        assert_eq!(cr_trigger(Some(&old), &finalized, true), None);
        let mut edited_behind_our_write = finalized.clone();
        edited_behind_our_write.metadata.generation = Some(2);
        assert_eq!(
            cr_trigger(Some(&old), &edited_behind_our_write, true),
            Some(Trigger::Changed)
        );

        let mut no_generation = old.clone();
        no_generation.metadata.generation = None;
        let mut respecced = no_generation.clone();
        respecced.spec.enabled = Some(false);
        assert_eq!(
            cr_trigger(Some(&no_generation), &respecced, false),
            Some(Trigger::Changed)
        );
    }

    #[test]
    fn later_versions_follow_the_watch_not_the_digits() {
        use Source::{Listed, OwnWrite, Watched};
        // (held, version, source, later): one CR's life, step by step. The versions do not
        // count up on purpose: only equality means anything.
        let steps = [
            (None, "k", Listed, true),
            (Some("k"), "k", Watched, false),
            // Our finalizer write, then our status write; the watch then brings the first.
            (Some("k"), "c", OwnWrite, true),
            (Some("c"), "q", OwnWrite, true),
            (Some("q"), "c", Watched, false),
            (Some("q"), "q", Watched, false),
            // Someone else's edit after ours is later, whatever its digits.
            (Some("q"), "b", Watched, true),
            // Our next write's event comes before the write returns, then a later edit: the
            // write, returned late, is older than what is held.
            (Some("b"), "w", Watched, true),
            (Some("w"), "y", Watched, true),
            (Some("y"), "w", OwnWrite, false),
            // A list taken after our write (and its event lost) is the server's state.
            (Some("y"), "9", OwnWrite, true),
            (Some("9"), "12", Listed, true),
            (Some("12"), "7", Watched, true),
        ];
        let mut versions = Versions::default();
        for (held, version, source, later) in steps {
            assert_eq!(
                versions.is_later(held, Some(version), source),
                later,
                "{held:?} -> {version} ({source:?})"
            );
        }
        assert!(versions.is_later(None, Some("1"), Watched));
        assert!(!versions.is_later(None, None, OwnWrite));
        // A write whose event never comes (the watch passed it unseen) is not awaited for good.
        let mut versions = Versions::default();
        assert!(versions.is_later(Some("a"), Some("ours"), OwnWrite));
        let skipped = (1..WATCHED_KEPT)
            .filter(|i| !versions.is_later(Some("ours"), Some(&format!("v{i}")), Watched))
            .count();
        assert_eq!(skipped, WATCHED_KEPT - 1);
        assert!(versions.is_later(Some("ours"), Some("next"), Watched));
    }

    #[test]
    fn signatures_ignore_times() {
        let condition = |time: i64| CombCondition {
            type_: "Ready".into(),
            status: ConditionStatus::True,
            reason: Some("Borrowed".into()),
            message: Some("borrowed".into()),
            last_transition_time: Some(Time(jiff::Timestamp::from_second(time).unwrap())),
        };
        let status = |time: i64, phase: &str| CombStatus {
            phase: Some(phase.into()),
            conditions: Some(vec![condition(time)]),
            upstream: Some(CombUpstreamStatus {
                via: Some(vec!["prod".into()]),
                observed_at: Some(Time(jiff::Timestamp::from_second(time).unwrap())),
                ..CombUpstreamStatus::default()
            }),
            ..CombStatus::default()
        };
        assert_eq!(
            status_signature(Some(&status(1, "Running"))),
            status_signature(Some(&status(2, "Running")))
        );
        assert_ne!(
            status_signature(Some(&status(1, "Running"))),
            status_signature(Some(&status(1, "Pending")))
        );
        assert_ne!(
            status_signature(None),
            status_signature(Some(&status(1, "Running")))
        );
    }

    #[test]
    fn owners_by_labels() {
        let keys = LabelKeys::default();
        let labels: BTreeMap<String, String> = [
            ("comb.internal/comb".to_string(), "nats".to_string()),
            (
                "comb.internal/comb-namespace".to_string(),
                "platform".to_string(),
            ),
        ]
        .into();
        let of = |labels: &BTreeMap<String, String>| {
            owner_of(|key| labels.get(key).map(String::as_str), &keys)
        };
        assert_eq!(of(&labels), Some(CombKey::new("platform", "nats")));
        let mut partial = labels.clone();
        partial.remove("comb.internal/comb-namespace");
        assert_eq!(of(&partial), None);
        assert_eq!(owner_of(|_| None, &keys), None);
    }

    #[test]
    fn upstream_peers() {
        let config = Config::from_yaml(
            r#"
layers:
  - {name: prod, context: prod, namespaces: [platform]}
  - {name: staging, context: prod, namespaces: [staging], borrow: {from: prod, namespace: platform, local: [api]}}
  - {name: dev, context: dev}
"#,
            "comb.yaml",
            None,
        )
        .unwrap();
        let peer = |layer: usize, comb: &Comb| {
            upstream_peer(&config, layer, comb)
                .map(|(i, key)| (config.layers[i].name.clone(), key.to_string()))
        };
        assert_eq!(
            peer(1, &comb("staging", "db")),
            Some(("prod".into(), "platform/db".into()))
        );
        assert_eq!(peer(1, &comb("staging", "api")), None);
        assert_eq!(peer(0, &comb("platform", "db")), None);
        let with_upstream = |upstream: serde_json::Value| {
            let mut comb = comb("team", "db");
            comb.spec.upstream = match upstream {
                serde_json::Value::Null => UpstreamSpec::Local,
                other => UpstreamSpec::Declared(other.as_object().unwrap().clone()),
            };
            comb
        };
        assert_eq!(
            peer(
                2,
                &with_upstream(json!({"class": "K8s", "layer": "staging"}))
            ),
            Some(("staging".into(), "team/db".into()))
        );
        assert_eq!(
            peer(
                2,
                &with_upstream(
                    json!({"class": "Kubernetes::Comb::Upstream::K8s", "context": "prod", "namespace": "staging", "name": "pg"})
                )
            ),
            Some(("staging".into(), "staging/pg".into()))
        );
        assert_eq!(
            peer(
                2,
                &with_upstream(json!({"class": "K8s", "context": "prod"}))
            ),
            None,
            "no layer of context prod manages namespace team"
        );
        assert_eq!(
            peer(
                2,
                &with_upstream(json!({"class": "Static", "endpoints": []}))
            ),
            None
        );
        assert_eq!(peer(2, &with_upstream(serde_json::Value::Null)), None);
    }
}
