//! Prune planning and the digest comparison of the local path (reference §6.5, §6.7), pure.
//!
//! Identity is (group, kind, namespace, name): a new API version of a Kind is no orphan. The
//! client edge executes a [`PrunePlan`] (one list per group with both labels; delete Background
//! what is found, get what is not) and reports each orphan's [`OrphanFate`] to a
//! [`PruneOutcome`], which keeps the notes and what stays recorded.
//!
//! Whether an object may be deleted at all is [`delete_verdict`]'s to say, for prune and for
//! the cleanup of a deleted Comb alike: one rule, so that both honour the same keep marks.

use std::collections::{BTreeMap, HashSet};

use comb_api::ownership::{Claimant, Ownership, Recorded, ownership};
use comb_api::{LabelKeys, ManagedObject};

use crate::engine::context::CombContext;
use crate::engine::kinds::{ExistingTreatment, existing_treatment, is_namespaced};
use crate::engine::projection::{Keep, Projection};
use crate::engine::render::RenderedItem;
use crate::engine::tenancy::Tenancy;
use crate::engine::values::clean_message;

pub use crate::engine::status::{ResourceKey, union};

pub use crate::engine::projection::HELM_KEEP;

/// What may become of an object a Comb would delete (prune, cleanup), decided on one copy of
/// it. The delete then goes out conditional on that very copy (its uid and resourceVersion),
/// so that a change in between (relabelled, marked keep, replaced) is decided again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeleteVerdict {
    /// It carries both of the Comb's labels, is the Comb's, is not marked keep and is not going
    /// yet.
    Delete,
    /// Marked keep: left in place. Names the mark (`comb.internal/keep: "true"`).
    Keep(String),
    /// Not the Comb's (any more): says why (`it no longer carries <selector>`, or whose it
    /// looks like by the ownership rule).
    NotOurs(String),
    /// Being deleted already (a deletionTimestamp, finalizers pending).
    Deleting,
}

/// The verdict on `object` for the Comb `namespace/name`, whose record says `recorded` of it:
/// ours only with both labels (a same-named Comb of another namespace may have applied it
/// last, and a person may take an object from its Comb by removing them) and by the ownership
/// rule ([`comb_api::ownership`]: recorded with its uid, recorded by an older comb, or handed
/// to the Comb; labels alone are what anyone who may label can put on an object); then the
/// keep marks, `<labelPrefix>keep: "true"` and `helm.sh/resource-policy: keep`; then whether
/// it is going already.
pub fn delete_verdict(
    object: &Projection,
    keys: &LabelKeys,
    namespace: &str,
    name: &str,
    recorded: Recorded,
) -> DeleteVerdict {
    if object.comb.as_deref() != Some(name) || object.comb_namespace.as_deref() != Some(namespace) {
        return DeleteVerdict::NotOurs(format!(
            "it no longer carries {}",
            keys.label_selector(name, namespace)
        ));
    }
    let claimant = Claimant { namespace, name };
    if let Ownership::NotOwned(why) = ownership(&object.holder(), recorded, &claimant) {
        return DeleteVerdict::NotOurs(why.why(keys, &[]));
    }
    match object.keep() {
        Some(Keep::Comb) => {
            return DeleteVerdict::Keep(format!("{}: \"true\"", keys.keep_annotation()));
        }
        Some(Keep::Helm) => {
            return DeleteVerdict::Keep(format!("{}: {}", HELM_KEEP.0, HELM_KEEP.1));
        }
        None => {}
    }
    if object.deleting {
        return DeleteVerdict::Deleting;
    }
    DeleteVerdict::Delete
}

/// Whether the recorded `managedResources` name other resources than the rendered items: the
/// counts differ, or a rendered item is not recorded.
pub fn record_differs(recorded: &[ManagedObject], items: &[RenderedItem]) -> bool {
    let recorded_keys: HashSet<ResourceKey> = recorded.iter().map(ResourceKey::of).collect();
    recorded.len() != items.len()
        || items
            .iter()
            .any(|item| !recorded_keys.contains(&ResourceKey::of(&item.resource())))
}

/// Live resources applied from another manifest than the one rendered now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChangedItems<'a> {
    /// The live digest annotation differs from the rendered digest.
    pub rendered_differently: Vec<&'a RenderedItem>,
    /// The live object carries no digest annotation (applied before there was one).
    pub without_digest: Vec<&'a RenderedItem>,
}

impl ChangedItems<'_> {
    pub fn is_empty(&self) -> bool {
        self.rendered_differently.is_empty() && self.without_digest.is_empty()
    }

    /// `rendered differently now: Deployment nats, ...; applied without a digest: Service nats, ...`
    /// (each part only when it names something).
    pub fn describe(&self) -> String {
        let names = |items: &[&RenderedItem]| {
            items
                .iter()
                .map(|item| format!("{} {}", item.kind, item.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        if !self.rendered_differently.is_empty() {
            parts.push(format!(
                "rendered differently now: {}",
                names(&self.rendered_differently)
            ));
        }
        if !self.without_digest.is_empty() {
            parts.push(format!(
                "applied without a digest: {}",
                names(&self.without_digest)
            ));
        }
        parts.join("; ")
    }
}

/// The live items whose digest counts and differs from the rendered one. `live[i]` belongs to
/// `items[i]`. The digest does not count for what a deploy would not replace (a `v1`
/// PersistentVolumeClaim, a `batch/v1` Job that runs or succeeded) and for what a same-named
/// Comb of another namespace applied last.
pub fn changed_items<'a>(
    items: &'a [RenderedItem],
    live: &[Option<Projection>],
    ctx: &CombContext,
) -> ChangedItems<'a> {
    let mut changed = ChangedItems::default();
    for (item, live) in items.iter().zip(live) {
        let Some(live) = live else { continue };
        let other_namespace = live
            .comb_namespace
            .as_deref()
            .is_some_and(|namespace| namespace != ctx.namespace);
        if other_namespace
            || existing_treatment(&item.api_version, &item.kind, live) == ExistingTreatment::Keep
        {
            continue;
        }
        match live.digest {
            None => changed.without_digest.push(item),
            Some(_) if !live.carries_digest(&item.digest) => {
                changed.rendered_differently.push(item)
            }
            Some(_) => {}
        }
    }
    changed
}

/// Namespaced orphans of one resource type in one namespace: one list finds them all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneGroup {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub orphans: Vec<ManagedObject>,
}

/// What to prune after a successful apply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrunePlan {
    /// Notes for the cluster-scoped orphans and those outside the tenancy: never deleted, never
    /// looked up, dropped from the record.
    pub notes: Vec<String>,
    /// The namespaced orphans by (`apiVersion/Kind`, namespace), sorted.
    pub groups: Vec<PruneGroup>,
}

/// The orphans are `previous − desired` by identity. Cluster-scoped ones (recorded without a
/// namespace, or of a Kind that is not namespaced) only get a note, and so do those in a
/// namespace `tenancy` does not allow the Comb of `comb_namespace` (any more): comb deletes
/// only where it may write.
pub fn plan_prune(
    previous: &[ManagedObject],
    desired: &[ManagedObject],
    tenancy: &Tenancy,
    comb_namespace: &str,
) -> PrunePlan {
    let desired_keys: HashSet<ResourceKey> = desired.iter().map(ResourceKey::of).collect();
    let mut plan = PrunePlan::default();
    // By apiVersion, Kind and namespace: sorted as `apiVersion/Kind` is.
    let mut groups: BTreeMap<(String, String, String), Vec<ManagedObject>> = BTreeMap::new();
    let mut seen = HashSet::new();
    for orphan in previous {
        let key = ResourceKey::of(orphan);
        if desired_keys.contains(&key) || !seen.insert(key.clone()) {
            continue;
        }
        match &orphan.namespace {
            Some(namespace) if !tenancy.allows_namespace(comb_namespace, namespace) => {
                plan.notes.push(format!(
                    "left {} {namespace}/{} in place: {}",
                    orphan.kind,
                    orphan.name,
                    tenancy.disallowed_namespace(namespace)
                ));
            }
            Some(namespace) if is_namespaced(&key.group, &orphan.kind) => {
                let group = (
                    orphan.api_version.clone(),
                    orphan.kind.clone(),
                    namespace.clone(),
                );
                groups.entry(group).or_default().push(orphan.clone());
            }
            _ => plan.notes.push(note_cluster_scoped(orphan)),
        }
    }
    plan.groups = groups
        .into_iter()
        .map(|((api_version, kind, namespace), orphans)| PruneGroup {
            api_version,
            kind,
            namespace,
            orphans,
        })
        .collect();
    plan
}

/// What happened to one namespaced orphan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrphanFate {
    /// Found with both labels and deleted.
    Deleted,
    /// Found with both labels but marked keep (the mark named): left in place, dropped from the
    /// record, as Helm drops a kept object from its release.
    Kept(String),
    /// Found with both labels; the delete failed with this message: kept for the next step.
    DeleteFailed(String),
    /// Not in the list, but it exists, or read again after its delete met a change: it lost
    /// our labels (or another namespace's Comb applied it last), or it is not the Comb's by the
    /// ownership rule; the clause says why. Left alone, dropped from the record.
    LeftAlone(String),
    /// Not in the list and gone (or already being deleted).
    Gone,
    /// Recorded with a namespace, but discovery says its Kind is cluster-scoped: left in place,
    /// dropped from the record.
    ClusterScoped,
    /// The list of its group failed with this message: kept for the next step.
    Unchecked(String),
}

/// The result of executing a [`PrunePlan`]: what stays recorded, and the notes for the Ready
/// message (cluster-scoped notes first, then groups in order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneOutcome {
    pub kept: Vec<ManagedObject>,
    pub notes: Vec<String>,
}

impl PruneOutcome {
    /// Starts with the plan's cluster-scoped notes.
    pub fn new(plan: &PrunePlan) -> PruneOutcome {
        PruneOutcome {
            kept: Vec::new(),
            notes: plan.notes.clone(),
        }
    }

    /// Records what happened to `orphan`.
    pub fn record(&mut self, orphan: &ManagedObject, fate: OrphanFate) {
        let (kind, name) = (&orphan.kind, &orphan.name);
        match fate {
            OrphanFate::Deleted | OrphanFate::Gone => {}
            OrphanFate::ClusterScoped => self.notes.push(note_cluster_scoped(orphan)),
            OrphanFate::Kept(mark) => self
                .notes
                .push(format!("left {kind} {name} in place: annotated {mark}")),
            OrphanFate::LeftAlone(why) => {
                self.notes.push(format!("left {kind} {name} alone: {why}"))
            }
            OrphanFate::DeleteFailed(message) => {
                self.kept.push(orphan.clone());
                self.notes.push(format!(
                    "deleting {kind} {name} failed: {}",
                    clean_message(&message)
                ));
            }
            OrphanFate::Unchecked(message) => {
                self.kept.push(orphan.clone());
                self.notes.push(format!(
                    "could not check {kind} {name} for pruning: {}",
                    clean_message(&message)
                ));
            }
        }
    }

    /// `managedResources` after the apply: `union(desired, kept)`.
    pub fn managed(&self, desired: &[ManagedObject]) -> Vec<ManagedObject> {
        union(desired, &self.kept)
    }
}

/// The note for a cluster-scoped orphan.
pub fn note_cluster_scoped(orphan: &ManagedObject) -> String {
    format!(
        "left {} {} in place: cluster-scoped, never pruned automatically",
        orphan.kind, orphan.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::context::test_context;
    use crate::engine::kinds::Scopes;
    use crate::engine::render::render_manifest;
    use serde_json::{Value, json};

    fn res(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> ManagedObject {
        ManagedObject::new(api_version, kind, namespace, name)
    }

    fn item(api_version: &str, kind: &str, name: &str) -> RenderedItem {
        render_manifest(
            "NATS",
            &json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}),
            &test_context("nats", "platform", json!({})),
            &Scopes::default(),
        )
        .unwrap()
    }

    #[test]
    fn delete_verdicts() {
        let keys = LabelKeys::default();
        let object = |labels: Value, annotations: Value, deleting: bool| {
            let mut object =
                json!({"metadata": {"name": "x", "labels": labels, "annotations": annotations}});
            if deleting {
                object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            object
        };
        let ours = json!({"comb.internal/comb": "db", "comb.internal/comb-namespace": "platform"});
        let not_ours = DeleteVerdict::NotOurs(
            "it no longer carries comb.internal/comb=db,comb.internal/comb-namespace=platform"
                .into(),
        );
        let cases = [
            (
                object(ours.clone(), json!({}), false),
                DeleteVerdict::Delete,
            ),
            (
                object(ours.clone(), json!({"comb.internal/keep": "true"}), false),
                DeleteVerdict::Keep("comb.internal/keep: \"true\"".into()),
            ),
            (
                object(ours.clone(), json!({"comb.internal/keep": "false"}), false),
                DeleteVerdict::Delete,
            ),
            (
                object(
                    ours.clone(),
                    json!({"helm.sh/resource-policy": "keep"}),
                    false,
                ),
                DeleteVerdict::Keep("helm.sh/resource-policy: keep".into()),
            ),
            (
                object(
                    ours.clone(),
                    json!({"helm.sh/resource-policy": "delete"}),
                    false,
                ),
                DeleteVerdict::Delete,
            ),
            // Kept even while going: a finalizer holds it, and the mark still says keep.
            (
                object(ours.clone(), json!({"comb.internal/keep": "true"}), true),
                DeleteVerdict::Keep("comb.internal/keep: \"true\"".into()),
            ),
            (
                object(ours.clone(), json!({}), true),
                DeleteVerdict::Deleting,
            ),
            (
                object(
                    json!({"comb.internal/comb": "db", "comb.internal/comb-namespace": "other"}),
                    json!({"comb.internal/keep": "true"}),
                    false,
                ),
                not_ours.clone(),
            ),
            (
                object(json!({"comb.internal/comb": "db"}), json!({}), false),
                not_ours.clone(),
            ),
            (object(json!(null), json!(null), false), not_ours),
        ];
        for (object, expected) in cases {
            assert_eq!(
                delete_verdict(
                    &Projection::of("v1", "Service", &object, &keys).unwrap(),
                    &keys,
                    "platform",
                    "db",
                    Recorded::WithoutUid,
                ),
                expected,
                "{object}"
            );
        }
        // Labels alone do not make it the Comb's: the record, or an adoption, does.
        let mut labelled = object(ours.clone(), json!({}), false);
        labelled["metadata"]["uid"] = json!("u-1");
        let verdict = |object: &Value, recorded: Recorded| {
            delete_verdict(
                &Projection::of("v1", "ConfigMap", object, &keys).unwrap(),
                &keys,
                "platform",
                "db",
                recorded,
            )
        };
        assert_eq!(
            verdict(&labelled, Recorded::Uid("u-1")),
            DeleteVerdict::Delete
        );
        assert_eq!(
            verdict(&labelled, Recorded::No),
            DeleteVerdict::NotOurs(
                "it carries this Comb's labels, but comb has no record of making it for this \
                 Comb, and labels alone do not make it so"
                    .into()
            ),
            "labelled by someone who may label (spec.orphanResources)"
        );
        assert!(matches!(
            verdict(&labelled, Recorded::Uid("u-0")),
            DeleteVerdict::NotOurs(_)
        ));
        let mut handed = labelled.clone();
        handed["metadata"]["annotations"] = json!({"comb.internal/adopt": "platform/db"});
        assert_eq!(verdict(&handed, Recorded::No), DeleteVerdict::Delete);
    }

    #[test]
    fn identity_ignores_the_version() {
        let items = [
            item("apps/v1", "Deployment", "nats"),
            item("v1", "Service", "nats"),
        ];
        let recorded = [
            res("apps/v1beta1", "Deployment", Some("platform"), "nats"),
            res("v1", "Service", Some("platform"), "nats"),
        ];
        assert!(!record_differs(&recorded, &items));
        assert!(
            record_differs(&recorded[..1], &items),
            "an item not recorded"
        );
        let extra = [
            recorded[0].clone(),
            recorded[1].clone(),
            res("v1", "ConfigMap", Some("platform"), "x"),
        ];
        assert!(record_differs(&extra, &items), "counts differ");
        let other_ns = [
            recorded[0].clone(),
            res("v1", "Service", Some("other"), "nats"),
        ];
        assert!(record_differs(&other_ns, &items));
        assert_eq!(
            plan_prune(
                &recorded,
                &items.iter().map(RenderedItem::resource).collect::<Vec<_>>(),
                &Tenancy::default(),
                "platform"
            ),
            PrunePlan::default()
        );
    }

    #[test]
    fn changed_items_and_when_the_digest_does_not_count() {
        let ctx = test_context("nats", "platform", json!({}));
        let items = vec![
            item("apps/v1", "Deployment", "same"),
            item("apps/v1", "Deployment", "changed"),
            item("v1", "Service", "undigested"),
            item("v1", "PersistentVolumeClaim", "data"),
            item("batch/v1", "Job", "running"),
            item("batch/v1", "Job", "failed"),
            item("v1", "ConfigMap", "shared"),
            item("v1", "ConfigMap", "missing"),
        ];
        let with_digest = |digest: &str, extra: Value| {
            let mut live = json!({"metadata": {"annotations": {"comb.internal/applied-digest": digest},
                                               "labels": {"comb.internal/comb-namespace": "platform"}}});
            if let Value::Object(extra) = extra {
                live.as_object_mut().unwrap().extend(extra);
            }
            Some(live)
        };
        let live = vec![
            with_digest(&items[0].digest, json!({})),
            with_digest("sha256:old", json!({})),
            Some(json!({"metadata": {}})),
            with_digest("sha256:old", json!({})),
            with_digest("sha256:old", json!({"status": {"active": 1}})),
            with_digest("sha256:old", json!({"status": {"failed": 1}})),
            Some(
                json!({"metadata": {"labels": {"comb.internal/comb-namespace": "staging"},
                                     "annotations": {"comb.internal/applied-digest": "sha256:theirs"}}}),
            ),
            None,
        ];
        let live: Vec<Option<Projection>> = items
            .iter()
            .zip(&live)
            .map(|(item, live)| {
                live.as_ref().map(|live| {
                    Projection::of(&item.api_version, &item.kind, live, &LabelKeys::default())
                        .unwrap()
                })
            })
            .collect();
        let changed = changed_items(&items, &live, &ctx);
        let names =
            |list: &[&RenderedItem]| list.iter().map(|i| i.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&changed.rendered_differently), ["changed", "failed"]);
        assert_eq!(names(&changed.without_digest), ["undigested"]);
        assert_eq!(
            changed.describe(),
            "rendered differently now: Deployment changed, Job failed; applied without a digest: Service undigested"
        );
        assert!(changed_items(&items[..1], &live[..1], &ctx).is_empty());
        let only_new = ChangedItems {
            without_digest: vec![&items[2]],
            ..Default::default()
        };
        assert_eq!(
            only_new.describe(),
            "applied without a digest: Service undigested"
        );
    }

    #[test]
    fn planning_groups_and_notes() {
        let desired = [res("apps/v1", "Deployment", Some("platform"), "nats")];
        let previous = [
            res("apps/v1", "Deployment", Some("platform"), "nats"),
            res("v1", "Service", Some("platform"), "b"),
            res(
                "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding",
                Some("platform"),
                "crb",
            ),
            res("apps/v1", "Deployment", Some("platform"), "old"),
            res("v1", "Service", Some("platform"), "a"),
            res("v1", "Namespace", None, "team"),
            res("v1", "Service", Some("other"), "c"),
            res("example.com/v1", "Widget", None, "w"),
            res("v1", "Service", Some("kube-system"), "d"),
        ];
        let tenancy = Tenancy {
            allow_namespaces: vec!["other".into()],
            ..Tenancy::default()
        };
        let plan = plan_prune(&previous, &desired, &tenancy, "platform");
        assert_eq!(
            plan.notes,
            [
                "left ClusterRoleBinding crb in place: cluster-scoped, never pruned automatically",
                "left Namespace team in place: cluster-scoped, never pruned automatically",
                "left Widget w in place: cluster-scoped, never pruned automatically",
                "left Service kube-system/d in place: the engine's default tenancy does not allow namespace kube-system",
            ]
        );
        let groups: Vec<(String, String, Vec<String>)> = plan
            .groups
            .iter()
            .map(|g| {
                (
                    format!("{}/{}", g.api_version, g.kind),
                    g.namespace.clone(),
                    g.orphans.iter().map(|o| o.name.clone()).collect(),
                )
            })
            .collect();
        assert_eq!(
            groups,
            [
                (
                    "apps/v1/Deployment".to_string(),
                    "platform".to_string(),
                    vec!["old".to_string()]
                ),
                (
                    "v1/Service".to_string(),
                    "other".to_string(),
                    vec!["c".to_string()]
                ),
                (
                    "v1/Service".to_string(),
                    "platform".to_string(),
                    vec!["b".to_string(), "a".to_string()]
                ),
            ]
        );
    }

    #[test]
    fn outcomes_keep_and_note() {
        let plan = plan_prune(
            &[
                res("v1", "Namespace", None, "team"),
                res("v1", "Service", Some("platform"), "deleted"),
                res("v1", "Service", Some("platform"), "stuck"),
                res("v1", "Service", Some("platform"), "relabelled"),
                res("v1", "Service", Some("platform"), "gone"),
                res("v1", "Service", Some("platform"), "kept"),
                res("v1", "ConfigMap", Some("platform"), "unlisted"),
            ],
            &[],
            &Tenancy::default(),
            "platform",
        );
        let mut outcome = PruneOutcome::new(&plan);
        let fates = [
            ("deleted", OrphanFate::Deleted),
            (
                "stuck",
                OrphanFate::DeleteFailed(
                    "Kubernetes API error (delete Service): 500 boom\n".into(),
                ),
            ),
            (
                "relabelled",
                OrphanFate::LeftAlone(
                    "it no longer carries comb.internal/comb=nats,comb.internal/comb-namespace=platform"
                        .into(),
                ),
            ),
            ("gone", OrphanFate::Gone),
            (
                "kept",
                OrphanFate::Kept("helm.sh/resource-policy: keep".into()),
            ),
            (
                "unlisted",
                OrphanFate::Unchecked("Kubernetes API error (list ConfigMap): 503".into()),
            ),
        ];
        for group in &plan.groups {
            for orphan in &group.orphans {
                let fate = fates
                    .iter()
                    .find(|(name, _)| *name == orphan.name)
                    .unwrap()
                    .1
                    .clone();
                outcome.record(orphan, fate);
            }
        }
        assert_eq!(
            outcome.notes,
            [
                "left Namespace team in place: cluster-scoped, never pruned automatically",
                "could not check ConfigMap unlisted for pruning: Kubernetes API error (list ConfigMap): 503",
                "deleting Service stuck failed: Kubernetes API error (delete Service): 500 boom",
                "left Service relabelled alone: it no longer carries comb.internal/comb=nats,comb.internal/comb-namespace=platform",
                "left Service kept in place: annotated helm.sh/resource-policy: keep",
            ]
        );
        let desired = [
            res("v1", "Service", Some("platform"), "nats"),
            res("v1", "Service", Some("platform"), "nats"),
        ];
        let managed: Vec<String> = outcome
            .managed(&desired)
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(managed, ["nats", "unlisted", "stuck"]);
    }

    #[test]
    fn union_keeps_the_first_per_identity() {
        let a = [
            res("apps/v1", "Deployment", Some("p"), "x"),
            res("v1", "Service", Some("p"), "x"),
        ];
        let b = [
            res("apps/v1beta1", "Deployment", Some("p"), "x"),
            res("v1", "ConfigMap", Some("p"), "y"),
        ];
        let merged = union(&a, &b);
        assert_eq!(merged.len(), 3);
        assert_eq!(merged[0].api_version, "apps/v1");
        assert_eq!(merged[2].name, "y");
    }
}
