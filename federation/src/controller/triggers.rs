//! Which watch events call for which steps: pure decisions over the objects seen.

use std::collections::BTreeMap;

use comb_api::{Comb, CombEndpoint, CombStatus, CombUpstreamStatus, LabelKeys, UpstreamSpec};

use super::queue::{CombKey, Trigger};
use crate::config::{BorrowDecision, Config};

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

/// Whether `candidate` is a later version of a CR than `held`. resourceVersions are opaque, but
/// every API server we know counts them up; where they do not parse, a different one counts as
/// later.
pub fn is_newer(candidate: &Comb, held: &Comb) -> bool {
    let (a, b) = (
        candidate.metadata.resource_version.as_deref(),
        held.metadata.resource_version.as_deref(),
    );
    match (
        a.and_then(|a| a.parse::<u64>().ok()),
        b.and_then(|b| b.parse::<u64>().ok()),
    ) {
        (Some(a), Some(b)) => a > b,
        _ => a != b,
    }
}

/// What others react to in a Comb's status: phase, Ready verdict, endpoints and upstream
/// (without the times, which change on every borrowing step).
#[derive(Clone, Debug, PartialEq)]
pub struct StatusSignature {
    phase: Option<String>,
    ready: Option<(String, Option<String>, Option<String>)>,
    endpoints: Vec<CombEndpoint>,
    /// Without `observedAt`.
    upstream: Option<CombUpstreamStatus>,
}

/// The [`StatusSignature`] of a recorded status.
pub fn status_signature(status: Option<&CombStatus>) -> StatusSignature {
    StatusSignature {
        phase: status.and_then(|s| s.phase.clone()),
        ready: status.and_then(CombStatus::ready).map(|ready| {
            (
                ready.status.to_string(),
                ready.reason.clone(),
                ready.message.clone(),
            )
        }),
        endpoints: status
            .map(|s| s.endpoint_list().to_vec())
            .unwrap_or_default(),
        upstream: status
            .and_then(|s| s.upstream.clone())
            .map(|upstream| CombUpstreamStatus {
                observed_at: None,
                ..upstream
            }),
    }
}

/// The Comb a managed resource belongs to, by its name and namespace labels.
pub fn owner_of(labels: Option<&BTreeMap<String, String>>, keys: &LabelKeys) -> Option<CombKey> {
    let labels = labels?;
    Some(CombKey::new(
        labels.get(keys.namespace_label())?,
        labels.get(keys.name_label())?,
    ))
}

/// Upstream class names that read a peer Comb in another layer.
const K8S_UPSTREAMS: [&str; 2] = ["K8s", "Kubernetes::Comb::Upstream::K8s"];

/// The peer a Comb of layer `layer` borrows from, as (layer index, key), when the layer's
/// configuration or the CR's `spec.upstream` names a K8s upstream in a layer of this
/// configuration. Upstreams a class decides at run time are not known here; resync covers them.
pub fn upstream_peer(config: &Config, layer: usize, comb: &Comb) -> Option<(usize, CombKey)> {
    let key = comb_key(comb)?;
    let this = config.layers.get(layer)?;
    let index_of = |name: &str| config.layers.iter().position(|l| l.name == name);
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
    fn later_versions() {
        let at = |version: Option<&str>| {
            let mut cr = comb("ns", "a");
            cr.metadata.resource_version = version.map(str::to_string);
            cr
        };
        let cases = [
            (Some("12"), Some("9"), true),
            (Some("9"), Some("12"), false),
            (Some("9"), Some("9"), false),
            (Some("b"), Some("a"), true),
            (Some("a"), Some("a"), false),
            (Some("1"), None, true),
        ];
        for (candidate, held, expected) in cases {
            assert_eq!(
                is_newer(&at(candidate), &at(held)),
                expected,
                "{candidate:?} {held:?}"
            );
        }
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
        assert_eq!(
            owner_of(Some(&labels), &keys),
            Some(CombKey::new("platform", "nats"))
        );
        let mut partial = labels.clone();
        partial.remove("comb.internal/comb-namespace");
        assert_eq!(owner_of(Some(&partial), &keys), None);
        assert_eq!(owner_of(None, &keys), None);
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
