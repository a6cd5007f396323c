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

use crate::engine::projection::Projection;

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

#[cfg(test)]
mod tests {
    use super::*;

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
