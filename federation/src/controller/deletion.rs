//! Cleanup when a Comb CR is deleted (DESIGN.md §6, Deckhouse semantics): delete what the Comb
//! recorded in `managedResources` and the objects of its `spec.orphanResources` kinds, but only
//! namespaced objects that still carry its labels, are the Comb's by the ownership rule
//! ([`comb_api::ownership`]: recorded with their uid, or handed to it with the adopt
//! annotation; labels alone are what anyone who may label can put on an object) and are not
//! marked keep, in the namespaces the layer's tenancy allows the Comb. Which objects may go is
//! the rule prune follows too ([`delete_verdict`](crate::engine::prune::delete_verdict)), and
//! each delete is conditional on the copy it was decided on. Everything deleted, kept or skipped is logged with the word
//! `orphan`, so that `grep orphan` finds it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use comb_api::names::{is_dns1123_label, is_dns1123_subdomain};
use comb_api::ownership::Recorded;
use comb_api::{Comb, LabelKeys, ManagedObject, OrphanResource};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use tracing::{info, warn};

use crate::engine::deploy::{Deletion, delete_as_decided};
use crate::engine::kube_ops::KubeOps;
use crate::engine::ownership::recorded_in;
use crate::engine::projection::{CombSelector, Projection};
use crate::engine::prune::DeleteVerdict;
use crate::engine::tenancy::Tenancy;
use crate::error::Error;

/// `<group>/deletion-policy`: with `Orphan`, deleting the Comb leaves everything in place.
pub fn deletion_policy_annotation(group: &str) -> String {
    format!("{group}/deletion-policy")
}

/// Whether the CR asks to leave its resources in place.
pub fn orphans_everything(comb: &Comb, group: &str) -> bool {
    comb.metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(&deletion_policy_annotation(group)))
        .is_some_and(|policy| policy == "Orphan")
}

/// What a cleanup did, object by object (`Kind name`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanupReport {
    pub deleted: Vec<String>,
    pub kept: Vec<String>,
    /// Requests that failed; the cleanup is retried while there are any.
    pub failures: Vec<String>,
    /// What was left in place and why (`left Namespace team in place: cluster-scoped, never
    /// deleted`): each becomes an Event on the Comb.
    pub notes: Vec<String>,
}

impl CleanupReport {
    /// Logs `note` and keeps it for the Events.
    fn note(&mut self, object: &str, note: String) {
        info!(object = %object, "orphan: {note}");
        self.notes.push(note);
    }

    /// `deleted N object(s), kept M (...)`, for the Event and the log.
    pub fn summary(&self) -> String {
        let mut text = format!("deleted {} object(s)", self.deleted.len());
        if !self.kept.is_empty() {
            text.push_str(&format!(", kept {}", self.kept.join(", ")));
        }
        if !self.failures.is_empty() {
            text.push_str(&format!("; failed: {}", self.failures.join("; ")));
        }
        text
    }
}

/// Deletes what Comb `comb` leaves behind, in the namespaces `tenancy` allows it (its own,
/// unless the layer allows more). Never fails: failures are in the report, and the caller
/// retries until there are none.
pub async fn cleanup(
    ops: &KubeOps,
    comb: &Comb,
    keys: &LabelKeys,
    tenancy: &Tenancy,
) -> CleanupReport {
    let mut report = CleanupReport::default();
    let (Some(namespace), Some(name)) = (
        comb.metadata.namespace.as_deref(),
        comb.metadata.name.as_deref(),
    ) else {
        return report;
    };
    let recorded = comb
        .status
        .as_ref()
        .map(|status| status.managed().to_vec())
        .unwrap_or_default();
    for resource in &recorded {
        if let Some(object_namespace) = resource.namespace.as_deref()
            && !tenancy.allows_namespace(namespace, object_namespace)
        {
            let what = format!("{} {object_namespace}/{}", resource.kind, resource.name);
            let why = tenancy.disallowed_namespace(object_namespace);
            report.note(&what, format!("left {what} in place: {why}"));
            continue;
        }
        cleanup_recorded(ops, resource, keys, namespace, name, &mut report).await;
    }
    for orphan in comb.spec.orphan_resources.as_deref().unwrap_or_default() {
        cleanup_kind(ops, orphan, keys, (namespace, name), &recorded, &mut report).await;
    }
    report
}

async fn cleanup_recorded(
    ops: &KubeOps,
    resource: &ManagedObject,
    keys: &LabelKeys,
    namespace: &str,
    name: &str,
    report: &mut CleanupReport,
) {
    let what = format!("{} {}", resource.kind, resource.name);
    let Some(object_namespace) = resource.namespace.as_deref() else {
        report.note(
            &what,
            format!("left {what} in place: cluster-scoped, never deleted"),
        );
        return;
    };
    match ops
        .resource_type(&resource.api_version, &resource.kind)
        .await
    {
        Ok(kind) if !kind.namespaced => {
            report.note(
                &what,
                format!("left {what} in place: cluster-scoped, never deleted"),
            );
            return;
        }
        Ok(_) => {}
        Err(error) => {
            report.failures.push(format!("looking up {what}: {error}"));
            return;
        }
    }
    let live = match ops.get_opt(resource).await {
        Ok(Some(live)) => live,
        Ok(None) => return,
        Err(error) => {
            report.failures.push(format!("reading {what}: {error}"));
            return;
        }
    };
    let target = ManagedObject {
        namespace: Some(object_namespace.to_string()),
        ..resource.clone()
    };
    let recorded = Recorded::of_entry(resource);
    act_on(
        ops,
        &target,
        &live,
        keys,
        (namespace, name),
        recorded,
        report,
    )
    .await;
}

/// Deletes `target` as [`delete_as_decided`] decides on `live` (the copy read or listed) for
/// the Comb `namespace/name` whose record says `recorded` of it, so that what is marked keep,
/// not ours or changed since is decided on what the server has.
async fn act_on(
    ops: &KubeOps,
    target: &ManagedObject,
    live: &Projection,
    keys: &LabelKeys,
    (namespace, name): (&str, &str),
    recorded: Recorded<'_>,
    report: &mut CleanupReport,
) {
    let what = format!("{} {}", target.kind, target.name);
    let copy = Cow::Borrowed(live);
    match delete_as_decided(ops, target, copy, keys, namespace, name, recorded).await {
        Ok(Deletion::Deleted) => {
            info!(object = %what, "orphan: deleted {what}");
            report.deleted.push(what);
        }
        Ok(Deletion::Gone) => {}
        Ok(Deletion::Spared(DeleteVerdict::Keep(mark))) => {
            info!(object = %what, "orphan: kept {what}: annotated {mark}");
            report.kept.push(what);
        }
        Ok(Deletion::Spared(DeleteVerdict::NotOurs(why))) => {
            report.note(&what, format!("left {what} alone: {why}"));
        }
        Ok(Deletion::Spared(DeleteVerdict::Deleting | DeleteVerdict::Delete)) => report.note(
            &what,
            format!("left {what} alone: it is being deleted already"),
        ),
        Err(error) => report.failures.push(format!("deleting {what}: {error}")),
    }
}

/// The objects of one `spec.orphanResources` kind that carry the Comb's labels and are the
/// Comb's (`record` is its `managedResources`): one that only carries the labels is left alone
/// with a note, for labels are what anyone who may label an object can put on it.
async fn cleanup_kind(
    ops: &KubeOps,
    orphan: &OrphanResource,
    keys: &LabelKeys,
    (namespace, name): (&str, &str),
    record: &[ManagedObject],
    report: &mut CleanupReport,
) {
    let skipped = |why: &str| {
        warn!(
            kind = %orphan.kind,
            version = %orphan.version,
            "orphan: skipped kind {} {}: {why}",
            orphan.version,
            orphan.kind
        );
    };
    // The kind and version go into discovery's request paths.
    if let Some(problem) = orphan_kind_problem(orphan) {
        skipped(&problem);
        return;
    }
    let served = match served_versions(ops, orphan).await {
        Ok(served) => served,
        Err(error) => {
            report.failures.push(error.to_string());
            return;
        }
    };
    if served.is_empty() {
        skipped("the cluster serves no such kind");
    }
    for (api_version, namespaced) in served {
        if !namespaced {
            warn!(
                kind = %orphan.kind,
                "orphan: skipped kind {api_version} {}: cluster-scoped, never deleted",
                orphan.kind
            );
            continue;
        }
        let selector = CombSelector {
            name: name.to_string(),
            namespace: Some(namespace.to_string()),
        };
        let objects = match ops
            .list(&api_version, &orphan.kind, Some(namespace), &selector)
            .await
        {
            Ok(objects) => objects,
            Err(error) => {
                report
                    .failures
                    .push(format!("listing {api_version} {}: {error}", orphan.kind));
                continue;
            }
        };
        for object in objects {
            let target = ManagedObject {
                api_version: api_version.clone(),
                kind: orphan.kind.clone(),
                namespace: Some(namespace.to_string()),
                name: object.name.to_string(),
                uid: None,
            };
            let recorded = recorded_in(record, &target);
            act_on(
                ops,
                &target,
                &object,
                keys,
                (namespace, name),
                recorded,
                report,
            )
            .await;
        }
    }
}

/// Why `orphan` names no kind a cluster could serve: a version is `group/version` (a DNS
/// subdomain, a DNS label) or a bare DNS label, a Kind letters and digits. `None` when it could.
fn orphan_kind_problem(orphan: &OrphanResource) -> Option<String> {
    let version_ok = match orphan.version.split_once('/') {
        Some((group, version)) => is_dns1123_subdomain(group) && is_dns1123_label(version),
        None => is_dns1123_label(&orphan.version),
    };
    let kind_ok = !orphan.kind.is_empty() && orphan.kind.bytes().all(|b| b.is_ascii_alphanumeric());
    match (version_ok, kind_ok) {
        (true, true) => None,
        (false, _) => Some(format!(
            "'{}' is not an API version (group/version or version)",
            orphan.version
        )),
        (true, false) => Some(format!(
            "'{}' is not a Kind (letters and digits)",
            orphan.kind
        )),
    }
}

/// The apiVersions serving `orphan.kind` and whether it is namespaced there. `group/version`
/// names one group; a bare version means every group serving the kind in that version.
async fn served_versions(
    ops: &KubeOps,
    orphan: &OrphanResource,
) -> Result<Vec<(String, bool)>, Error> {
    let client = ops.client();
    let failed = |what: &str, error: kube::Error| Error::kube(format!("discovering {what}"), error);
    let mut lists: BTreeMap<String, APIResourceList> = BTreeMap::new();
    if orphan.version.contains('/') {
        match client.list_api_group_resources(&orphan.version).await {
            Ok(list) => {
                lists.insert(orphan.version.clone(), list);
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(failed(&orphan.version, error)),
        }
    } else {
        let core = client
            .list_core_api_versions()
            .await
            .map_err(|error| failed("/api", error))?;
        if core.versions.contains(&orphan.version) {
            let list = client
                .list_core_api_resources(&orphan.version)
                .await
                .map_err(|error| failed(&format!("/api/{}", orphan.version), error))?;
            lists.insert(orphan.version.clone(), list);
        }
        let groups = client
            .list_api_groups()
            .await
            .map_err(|error| failed("/apis", error))?;
        for group in groups.groups {
            if !group.versions.iter().any(|v| v.version == orphan.version) {
                continue;
            }
            let api_version = format!("{}/{}", group.name, orphan.version);
            let list = client
                .list_api_group_resources(&api_version)
                .await
                .map_err(|error| failed(&api_version, error))?;
            lists.insert(api_version, list);
        }
    }
    Ok(lists
        .into_iter()
        .filter_map(|(api_version, list)| {
            list.resources
                .iter()
                .find(|resource| resource.kind == orphan.kind && !resource.name.contains('/'))
                .map(|resource| (api_version, resource.namespaced))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use comb_api::CombSpec;

    #[test]
    fn the_orphan_policy() {
        let mut comb = Comb::new(
            "comb.internal",
            "platform",
            "db",
            CombSpec::of_class("Manifests"),
        );
        assert!(!orphans_everything(&comb, "comb.internal"));
        comb.metadata.annotations = Some(
            [(
                "comb.internal/deletion-policy".to_string(),
                "Orphan".to_string(),
            )]
            .into(),
        );
        assert!(orphans_everything(&comb, "comb.internal"));
        assert!(!orphans_everything(&comb, "example.com"));
    }

    #[test]
    fn orphan_kinds_are_checked_before_they_reach_a_path() {
        let orphan = |kind: &str, version: &str| OrphanResource {
            kind: kind.into(),
            version: version.into(),
        };
        assert_eq!(orphan_kind_problem(&orphan("ConfigMap", "v1")), None);
        assert_eq!(orphan_kind_problem(&orphan("Job", "batch/v1")), None);
        assert_eq!(
            orphan_kind_problem(&orphan("Job", "batch/v1?x=1")).as_deref(),
            Some("'batch/v1?x=1' is not an API version (group/version or version)")
        );
        assert_eq!(
            orphan_kind_problem(&orphan("Job/x", "v1")).as_deref(),
            Some("'Job/x' is not a Kind (letters and digits)")
        );
    }

    #[test]
    fn summaries() {
        let report = CleanupReport {
            deleted: vec!["Deployment db".into(), "Service db".into()],
            kept: vec!["PersistentVolumeClaim data-db-0".into()],
            failures: vec![],
            notes: vec![],
        };
        assert_eq!(
            report.summary(),
            "deleted 2 object(s), kept PersistentVolumeClaim data-db-0"
        );
    }
}
