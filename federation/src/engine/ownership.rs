//! The ownership rule ([`comb_api::ownership`]) as the engine asks it: which Comb would write
//! or delete an object, what its record holds of it, and the refusal that names whose the
//! object looks like. Every write of an existing object (deploy's apply, a Job created anew)
//! and every delete (prune, cleanup, `orphanResources`) asks [`Claim::decide`] on the copy it
//! acts on.

use comb_api::ManagedObject;
pub use comb_api::ownership::recorded_in;
use comb_api::ownership::{
    Claimant, NotOwned, Ownership, Recorded, managers_of, not_owned_message, ownership,
};
use serde_json::Value;

use crate::engine::projection::{HELM_KEEP, Projection};

/// A Comb's claim on one object: who the Comb is and what its `status.managedResources` holds
/// of the object's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim<'a> {
    pub claimant: Claimant<'a>,
    pub recorded: Recorded<'a>,
}

impl<'a> Claim<'a> {
    /// The claim of the Comb `namespace/name`, whose record is `record`, on `identity`.
    pub fn new(
        namespace: &'a str,
        name: &'a str,
        record: &'a [ManagedObject],
        identity: &ManagedObject,
    ) -> Claim<'a> {
        Claim {
            claimant: Claimant { namespace, name },
            recorded: recorded_in(record, identity),
        }
    }

    /// Whether `live`, a copy of the object, is the Comb's.
    pub fn decide(&self, live: &Projection) -> Ownership {
        ownership(&live.holder(), self.recorded, &self.claimant)
    }
}

/// `Kind namespace/name` (`Kind name` when cluster-scoped), as refusals name an object.
pub fn object_place(identity: &ManagedObject) -> String {
    match &identity.namespace {
        Some(namespace) => format!("{} {namespace}/{}", identity.kind, identity.name),
        None => format!("{} {}", identity.kind, identity.name),
    }
}

/// The refusal of a write or delete of `identity`, not the Comb's for `why`; `whole`, when
/// read, names who wrote it.
pub fn refusal(
    identity: &ManagedObject,
    why: &NotOwned,
    whole: Option<&Value>,
    keys: &comb_api::LabelKeys,
    claim: &Claim,
) -> String {
    let managers = whole.map(managers_of).unwrap_or_default();
    not_owned_message(
        &object_place(identity),
        why,
        &managers,
        keys,
        &claim.claimant,
    )
}

/// `manifest` with the keep marks `live` (the object it is applied to) carries in place of
/// other values the manifest sets for the same annotations; `None` when nothing differs. A keep
/// mark on the object (put there by a person, or another tool) wins over the manifest's own
/// (DESIGN.md §11): an apply never takes away what keeps the object from being deleted. A
/// manifest that sets no such annotation leaves the mark to whoever wrote it.
pub fn with_live_keep_marks(
    manifest: &Value,
    live: &Projection,
    keys: &comb_api::LabelKeys,
) -> Option<Value> {
    let marks = [
        (live.keeps.comb, keys.keep_annotation(), "true"),
        (live.keeps.helm, HELM_KEEP.0, HELM_KEEP.1),
    ];
    let mut kept = None;
    for (carried, key, value) in marks {
        let differs = manifest
            .pointer("/metadata/annotations")
            .and_then(|annotations| annotations.get(key))
            .is_some_and(|wanted| wanted != value);
        if carried && differs {
            let manifest = kept.get_or_insert_with(|| manifest.clone());
            manifest["metadata"]["annotations"][key] = Value::from(value);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_marks_on_the_object_win_over_the_manifests() {
        let keys = comb_api::LabelKeys::default();
        let live = |annotations: Value| {
            Projection::of(
                "v1",
                "ConfigMap",
                &serde_json::json!({"metadata": {"name": "c", "annotations": annotations}}),
                &keys,
            )
            .unwrap()
        };
        let manifest = |annotations: Value| {
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "c", "annotations": annotations}})
        };
        let kept = live(serde_json::json!({"comb.internal/keep": "true",
                                           "helm.sh/resource-policy": "keep"}));
        let won = with_live_keep_marks(
            &manifest(serde_json::json!({"comb.internal/keep": "false",
                                         "helm.sh/resource-policy": "delete", "team": "a"})),
            &kept,
            &keys,
        )
        .expect("both marks win");
        assert_eq!(
            won["metadata"]["annotations"],
            serde_json::json!({"comb.internal/keep": "true", "helm.sh/resource-policy": "keep",
                               "team": "a"})
        );
        for (what, manifest, live) in [
            (
                "the same marks",
                manifest(serde_json::json!({"comb.internal/keep": "true"})),
                &kept,
            ),
            (
                "no marks in the manifest",
                manifest(serde_json::json!({})),
                &kept,
            ),
            (
                "no marks on the object",
                manifest(serde_json::json!({"comb.internal/keep": "false"})),
                &live(serde_json::json!({})),
            ),
        ] {
            assert_eq!(with_live_keep_marks(&manifest, live, &keys), None, "{what}");
        }
    }

    #[test]
    fn objects_are_named_with_their_namespace() {
        assert_eq!(
            object_place(&ManagedObject::new("v1", "Namespace", None, "team")),
            "Namespace team"
        );
        assert_eq!(
            object_place(&ManagedObject::new("v1", "Secret", Some("a"), "s")),
            "Secret a/s"
        );
    }
}
