//! Whose an existing object is: the one rule by which comb writes or deletes only what is a
//! Comb's (DESIGN.md §11, docs/adr/0004-ownership.md). Every path that would touch an object
//! that already exists asks it first: the apply of a manifest or a bridge, a copy made by
//! replication, a Job created anew, prune, the cleanup of a deleted Comb and its
//! `orphanResources`.
//!
//! An object is a Comb's when
//!
//! 1. it is annotated `<labelPrefix>adopt: NAMESPACE/NAME` naming that Comb: handed to it
//!    explicitly by whoever may write the object, as Helm's `meta.helm.sh/release-name` and
//!    `-namespace` hand an object to a release; or
//! 2. its uid is the one the Comb's `status.managedResources` records for it: comb made it (or
//!    took it, by 1) for this Comb. Only the controller writes a Comb's status, so whoever may
//!    only label an object cannot forge this record, as they could forge labels, annotations
//!    other than 1, `managedFields` or an ownerReference; or
//! 3. an older comb recorded it by identity only (an entry without a uid) and it carries both of
//!    the Comb's labels: what an upgrade finds, taken as the Comb's once and recorded with its
//!    uid from then on. The identity was in the Comb's record, which only the controller
//!    writes, so this too needs more than a label.
//!
//! Anything else is not the Comb's, and [`NotOwned`] says whose it looks like: another Comb's,
//! handed to another Comb, made anew since comb recorded its own, or nobody's comb knows. An
//! adoption naming another Comb wins over the record: the object's writer moved it.
//!
//! Pure: the callers read the object and the record, and act on the answer. Writes carry the
//! decision to the API server as preconditions: a new object is made by an apply that cannot
//! take over one made meanwhile ([`create_only`]), an existing one is written as that very
//! object ([`same_object_only`]).

use serde_json::{Value, json};

use crate::labels::LabelKeys;
use crate::status::ManagedObject;

/// The Comb that would write or delete the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claimant<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
}

/// What the Comb's `status.managedResources` says of the object's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded<'a> {
    /// The identity is not in the record.
    No,
    /// Recorded by identity only, without a uid (by an older comb).
    WithoutUid,
    /// Recorded with the uid of the object comb made or took.
    Uid(&'a str),
}

impl<'a> Recorded<'a> {
    /// What a record says of its own entry `entry`.
    pub fn of_entry(entry: &'a ManagedObject) -> Recorded<'a> {
        match entry.uid.as_deref() {
            Some(uid) => Recorded::Uid(uid),
            None => Recorded::WithoutUid,
        }
    }
}

/// What `record` (a Comb's `managedResources`) holds of `identity`, compared as prune compares
/// (group, kind, namespace, name): a new apiVersion of a Kind is the same object.
pub fn recorded_in<'a>(record: &'a [ManagedObject], identity: &ManagedObject) -> Recorded<'a> {
    record
        .iter()
        .find(|entry| {
            entry.group() == identity.group()
                && entry.kind == identity.kind
                && entry.namespace == identity.namespace
                && entry.name == identity.name
        })
        .map_or(Recorded::No, Recorded::of_entry)
}

/// What comb knows of the existing object: its uid, the values of the Comb labels and the
/// adoption annotation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Holder<'a> {
    pub uid: Option<&'a str>,
    /// The Comb name label.
    pub comb: Option<&'a str>,
    /// The Comb namespace label.
    pub comb_namespace: Option<&'a str>,
    /// The value of `<labelPrefix>adopt`.
    pub adopted_by: Option<&'a str>,
}

impl<'a> Holder<'a> {
    /// What an object (JSON, as the API server sent it) says of itself; `keys` name comb's
    /// labels and the adoption annotation.
    pub fn of_object(object: &'a Value, keys: &LabelKeys) -> Holder<'a> {
        let metadata = |kind: &str, key: &str| {
            object
                .pointer(&format!("/metadata/{kind}"))
                .and_then(|map| map.get(key))
                .and_then(Value::as_str)
        };
        Holder {
            uid: object.pointer("/metadata/uid").and_then(Value::as_str),
            comb: metadata("labels", keys.name_label()),
            comb_namespace: metadata("labels", keys.namespace_label()),
            adopted_by: metadata("annotations", keys.adopt_annotation()),
        }
    }
}

/// Whether an existing object is the Comb's, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Its uid is the one the Comb's record holds.
    Recorded,
    /// Recorded by an older comb without a uid, and it carries both of the Comb's labels.
    RecordedBefore,
    /// Its adoption annotation names the Comb.
    Adopted,
    /// Not the Comb's.
    NotOwned(NotOwned),
}

impl Ownership {
    /// Whether comb may write or delete the object for the Comb.
    pub fn is_owned(&self) -> bool {
        !matches!(self, Ownership::NotOwned(_))
    }
}

/// Why an existing object is not a Comb's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotOwned {
    /// Its adoption annotation names another Comb (`namespace/name` as written).
    HandedTo(String),
    /// It carries Comb labels that are another Comb's (a label may be missing).
    OtherComb {
        name: String,
        namespace: Option<String>,
    },
    /// It carries the Comb's labels, but the record does not say comb made it for the Comb.
    Unrecorded,
    /// The record holds another uid: what comb made is gone and this one was made since.
    Replaced,
    /// It carries no Comb's labels.
    Foreign,
}

/// The adoption value naming `claimant`: `NAMESPACE/NAME`.
pub fn adoption_value(claimant: &Claimant) -> String {
    format!("{}/{}", claimant.namespace, claimant.name)
}

/// Whose the object `holder` describes is, for the Comb `claimant` whose record says
/// `recorded` of it (see the module's rules).
pub fn ownership(holder: &Holder, recorded: Recorded, claimant: &Claimant) -> Ownership {
    if let Some(adopted_by) = holder.adopted_by.map(str::trim) {
        if adopted_by == adoption_value(claimant) {
            return Ownership::Adopted;
        }
        if !adopted_by.is_empty() {
            return Ownership::NotOwned(NotOwned::HandedTo(adopted_by.to_string()));
        }
    }
    let labelled_ours =
        holder.comb == Some(claimant.name) && holder.comb_namespace == Some(claimant.namespace);
    match recorded {
        Recorded::Uid(uid) if holder.uid == Some(uid) => return Ownership::Recorded,
        Recorded::WithoutUid if labelled_ours => return Ownership::RecordedBefore,
        Recorded::Uid(_) => return Ownership::NotOwned(NotOwned::Replaced),
        Recorded::No | Recorded::WithoutUid => {}
    }
    Ownership::NotOwned(match holder.comb {
        None => NotOwned::Foreign,
        Some(_) if labelled_ours => NotOwned::Unrecorded,
        Some(name) => NotOwned::OtherComb {
            name: name.to_string(),
            namespace: holder.comb_namespace.map(str::to_string),
        },
    })
}

impl NotOwned {
    /// Why, as a clause: `it carries no Comb's labels (written by kubectl-create)`. `managers`
    /// are the field managers that wrote it, when the caller read them.
    pub fn why(&self, keys: &LabelKeys, managers: &[String]) -> String {
        let written_by = if managers.is_empty() {
            String::new()
        } else {
            format!(" (written by {})", managers.join(", "))
        };
        match self {
            NotOwned::HandedTo(other) => format!(
                "it is annotated {}={other}, handed to that Comb{written_by}",
                keys.adopt_annotation()
            ),
            NotOwned::OtherComb { name, namespace } => {
                let mut labels = vec![format!("{}={name}", keys.name_label())];
                if let Some(namespace) = namespace {
                    labels.push(format!("{}={namespace}", keys.namespace_label()));
                }
                format!(
                    "it is labelled as another Comb's ({}){written_by}",
                    labels.join(", ")
                )
            }
            NotOwned::Unrecorded => format!(
                "it carries this Comb's labels, but comb has no record of making it for this \
                 Comb, and labels alone do not make it so{written_by}"
            ),
            NotOwned::Replaced => format!(
                "the object comb made for this Comb is gone and this one was made since, by \
                 someone else{written_by}"
            ),
            NotOwned::Foreign => format!("it carries no Comb's labels{written_by}"),
        }
    }
}

/// The message of a refusal (reason `ResourceNotOwned`): the object (`Secret team-a/tls-cert`),
/// whose it looks like, that comb leaves it untouched, and how its owner hands it over.
pub fn not_owned_message(
    object: &str,
    not_owned: &NotOwned,
    managers: &[String],
    keys: &LabelKeys,
    claimant: &Claimant,
) -> String {
    format!(
        "{object} exists and is not this Comb's: {}; comb leaves it untouched (to hand it to this \
         Comb, annotate it {}={})",
        not_owned.why(keys, managers),
        keys.adopt_annotation(),
        adoption_value(claimant)
    )
}

/// The field managers that wrote `object`'s main resource (as the API server has it), each
/// once, in the order of its `managedFields`: who a refusal says wrote an object that is not the
/// Comb's. A controller that writes only its status (`subresource: status`) made nothing of it.
pub fn managers_of(object: &Value) -> Vec<String> {
    let mut managers: Vec<String> = Vec::new();
    let entries = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for entry in entries {
        let main = entry
            .get("subresource")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if let Some(manager) = entry.get("manager").and_then(Value::as_str)
            && main
            && !manager.is_empty()
            && !managers.iter().any(|known| known == manager)
        {
            managers.push(manager.to_string());
        }
    }
    managers
}

/// The resourceVersion of [`create_only`]: higher than any etcd revision can be (they are
/// int64), so no object has it.
const NO_OBJECT_HAS_IT: &str = "9223372036854775807";

/// An applied configuration `body` as an apply that creates the object or fails: its
/// resourceVersion, one no object has, is a precondition the API server checks against an
/// object the apply meets (409 Conflict) and ignores when the apply creates. One request, as
/// an apply that upserts, and the object holds comb's applied fields from the start (a POST
/// would record them as an update). kube-apiserver's answers are held by the sandbox's
/// differential test (`server-side apply preconditions`).
pub fn create_only(body: &Value) -> Value {
    with_metadata(body, "resourceVersion", Some(NO_OBJECT_HAS_IT))
}

/// An applied configuration `body` as an apply to the object of `uid` only: an object deleted
/// and made anew under the name since `uid` was read is refused (422, the uid is immutable),
/// not taken over. Without a uid, `body` as it is.
pub fn same_object_only(body: &Value, uid: Option<&str>) -> Value {
    with_metadata(body, "uid", uid)
}

fn with_metadata(body: &Value, key: &str, value: Option<&str>) -> Value {
    let mut body = body.clone();
    if let (Some(value), Some(metadata)) = (
        value,
        body.get_mut("metadata").and_then(Value::as_object_mut),
    ) {
        metadata.insert(key.to_string(), json!(value));
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Claimant = Claimant {
        namespace: "team-a",
        name: "web",
    };

    fn holder<'a>(
        uid: &'a str,
        labels: Option<(&'a str, &'a str)>,
        adopted_by: Option<&'a str>,
    ) -> Holder<'a> {
        Holder {
            uid: Some(uid),
            comb: labels.map(|(name, _)| name),
            comb_namespace: labels
                .map(|(_, namespace)| namespace)
                .filter(|n| !n.is_empty()),
            adopted_by,
        }
    }

    /// The ownership decision, every rule and the attacks of issue 31: labels and
    /// `managedFields` are forgeable, the record and an explicit adoption are not.
    #[test]
    fn whose_an_object_is() {
        let ours = Some(("web", "team-a"));
        let other = Some(("db", "team-b"));
        let same_name_elsewhere = Some(("web", "team-b"));
        let cases: Vec<(&str, Holder, Recorded, Ownership)> = vec![
            (
                "made by comb for this Comb",
                holder("u1", ours, None),
                Recorded::Uid("u1"),
                Ownership::Recorded,
            ),
            (
                "made by comb, its labels removed since: still recorded (a delete asks for labels too)",
                holder("u1", None, None),
                Recorded::Uid("u1"),
                Ownership::Recorded,
            ),
            (
                "deleted and made anew by someone else, labels copied",
                holder("u2", ours, None),
                Recorded::Uid("u1"),
                Ownership::NotOwned(NotOwned::Replaced),
            ),
            (
                "an older comb's record and both labels: the upgrade",
                holder("u1", ours, None),
                Recorded::WithoutUid,
                Ownership::RecordedBefore,
            ),
            (
                "an older comb's record, but the labels are gone",
                holder("u1", None, None),
                Recorded::WithoutUid,
                Ownership::NotOwned(NotOwned::Foreign),
            ),
            (
                "an older comb's record, labelled for the same name of another namespace",
                holder("u1", same_name_elsewhere, None),
                Recorded::WithoutUid,
                Ownership::NotOwned(NotOwned::OtherComb {
                    name: "web".into(),
                    namespace: Some("team-b".into()),
                }),
            ),
            (
                "a person's Secret (attack 1: tls-cert)",
                holder("u3", None, None),
                Recorded::No,
                Ownership::NotOwned(NotOwned::Foreign),
            ),
            (
                "another Comb's copy (attack 1: db-password)",
                holder("u4", other, None),
                Recorded::No,
                Ownership::NotOwned(NotOwned::OtherComb {
                    name: "db".into(),
                    namespace: Some("team-b".into()),
                }),
            ),
            (
                "labelled with this Comb's labels by someone who may label (attack 5: orphanResources)",
                holder("u5", ours, None),
                Recorded::No,
                Ownership::NotOwned(NotOwned::Unrecorded),
            ),
            (
                "only the name label",
                holder("u5", Some(("web", "")), None),
                Recorded::No,
                Ownership::NotOwned(NotOwned::OtherComb {
                    name: "web".into(),
                    namespace: None,
                }),
            ),
            (
                "handed to this Comb by its owner",
                holder("u6", None, Some("team-a/web")),
                Recorded::No,
                Ownership::Adopted,
            ),
            (
                "handed over, written with spaces",
                holder("u6", other, Some(" team-a/web ")),
                Recorded::No,
                Ownership::Adopted,
            ),
            (
                "handed to this Comb after it was replaced",
                holder("u7", None, Some("team-a/web")),
                Recorded::Uid("u1"),
                Ownership::Adopted,
            ),
            (
                "handed to another Comb: the record does not hold it back",
                holder("u1", ours, Some("team-b/db")),
                Recorded::Uid("u1"),
                Ownership::NotOwned(NotOwned::HandedTo("team-b/db".into())),
            ),
            (
                "handed to the same name in another namespace",
                holder("u8", None, Some("team-b/web")),
                Recorded::No,
                Ownership::NotOwned(NotOwned::HandedTo("team-b/web".into())),
            ),
            (
                "an empty adoption is no adoption",
                holder("u1", ours, Some("")),
                Recorded::Uid("u1"),
                Ownership::Recorded,
            ),
            (
                "the name alone does not adopt",
                holder("u9", None, Some("web")),
                Recorded::No,
                Ownership::NotOwned(NotOwned::HandedTo("web".into())),
            ),
        ];
        for (what, holder, recorded, expected) in cases {
            assert_eq!(ownership(&holder, recorded, &ME), expected, "{what}");
        }
        assert!(Ownership::Adopted.is_owned());
        assert!(!Ownership::NotOwned(NotOwned::Foreign).is_owned());
    }

    #[test]
    fn what_an_object_says_of_itself() {
        let keys = LabelKeys::default();
        let object = json!({"metadata": {"uid": "u1",
            "labels": {"comb.internal/comb": "web", "comb.internal/comb-namespace": "team-a"},
            "annotations": {"comb.internal/adopt": "team-a/web"},
            "managedFields": [
                {"manager": "kubectl-create", "operation": "Update"},
                {"manager": "", "operation": "Update"},
                {"manager": "comb", "operation": "Apply"},
                {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status"},
                {"manager": "kubectl-create", "operation": "Update"}]}});
        assert_eq!(
            Holder::of_object(&object, &keys),
            Holder {
                uid: Some("u1"),
                comb: Some("web"),
                comb_namespace: Some("team-a"),
                adopted_by: Some("team-a/web"),
            }
        );
        assert_eq!(Holder::of_object(&json!({}), &keys), Holder::default());
        assert_eq!(managers_of(&object), ["kubectl-create", "comb"]);
        assert!(managers_of(&json!({"metadata": {}})).is_empty());
    }

    #[test]
    fn the_record_is_read_by_identity_across_api_versions() {
        let record = [
            ManagedObject::new("apps/v1", "Deployment", Some("apps"), "web").with_uid(Some("u1")),
            ManagedObject::new("v1", "Service", Some("apps"), "web"),
        ];
        let cases = [
            (
                ManagedObject::new("apps/v1beta1", "Deployment", Some("apps"), "web"),
                Recorded::Uid("u1"),
            ),
            (
                ManagedObject::new("v1", "Service", Some("apps"), "web"),
                Recorded::WithoutUid,
            ),
            (
                ManagedObject::new("v1", "Service", Some("other"), "web"),
                Recorded::No,
            ),
            (
                ManagedObject::new("example.com/v1", "Service", Some("apps"), "web"),
                Recorded::No,
            ),
        ];
        for (identity, expected) in cases {
            assert_eq!(recorded_in(&record, &identity), expected, "{identity:?}");
        }
    }

    #[test]
    fn preconditions_of_the_writes() {
        let body = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        assert_eq!(
            create_only(&body)["metadata"]["resourceVersion"],
            json!("9223372036854775807"),
            "a precondition no object meets"
        );
        assert_eq!(
            same_object_only(&body, Some("u-1"))["metadata"]["uid"],
            json!("u-1")
        );
        assert_eq!(
            same_object_only(&body, None),
            body,
            "no uid read, no precondition"
        );
    }

    #[test]
    fn a_refusal_says_whose_it_looks_like_and_how_to_hand_it_over() {
        let keys = LabelKeys::default();
        let message = |not_owned: NotOwned, managers: &[&str]| {
            let managers: Vec<String> = managers.iter().map(|m| m.to_string()).collect();
            not_owned_message("Secret team-a/tls-cert", &not_owned, &managers, &keys, &ME)
        };
        assert_eq!(
            message(NotOwned::Foreign, &["kubectl-create"]),
            "Secret team-a/tls-cert exists and is not this Comb's: it carries no Comb's labels \
             (written by kubectl-create); comb leaves it untouched (to hand it to this Comb, \
             annotate it comb.internal/adopt=team-a/web)"
        );
        assert_eq!(
            message(
                NotOwned::OtherComb {
                    name: "db".into(),
                    namespace: Some("team-b".into())
                },
                &["comb"]
            ),
            "Secret team-a/tls-cert exists and is not this Comb's: it is labelled as another \
             Comb's (comb.internal/comb=db, comb.internal/comb-namespace=team-b) (written by \
             comb); comb leaves it untouched (to hand it to this Comb, annotate it \
             comb.internal/adopt=team-a/web)"
        );
        let handed = NotOwned::HandedTo("team-b/db".into()).why(&keys, &[]);
        assert_eq!(
            handed,
            "it is annotated comb.internal/adopt=team-b/db, handed to that Comb"
        );
        for not_owned in [NotOwned::Unrecorded, NotOwned::Replaced] {
            assert!(!not_owned.why(&keys, &[]).is_empty());
        }
        // The prefix is the controller's.
        let custom = LabelKeys::new("example.com/");
        assert!(
            NotOwned::Foreign
                .why(&custom, &[])
                .starts_with("it carries no Comb's labels")
        );
        assert!(
            not_owned_message("ConfigMap a/b", &NotOwned::Foreign, &[], &custom, &ME)
                .ends_with("annotate it example.com/adopt=team-a/web)")
        );
    }
}
