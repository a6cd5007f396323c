//! What the engine knows about Kinds without asking an API server: the apiVersion of built-in
//! Kinds (to fill a manifest that names none), which Kinds are namespaced, and which are
//! workloads with Pod templates.
//!
//! The table is generated from k8s-openapi's types, so apiVersions and scopes are the API's own.
//! The scope of any other Kind (a custom resource) is the API server's to say: [`ScopeLookup`]
//! asks its discovery, and [`Scopes`] holds the answers one rendering needs. A Kind neither
//! knows counts as namespaced (reference §4.1 step 6), which is only ever used to place a
//! manifest: prune and cleanup ask discovery again before they delete anything.

use k8s_openapi::api::{
    admissionregistration::v1 as admissionregistration, apps::v1 as apps,
    autoscaling::v2 as autoscaling, batch::v1 as batch, certificates::v1 as certificates,
    coordination::v1 as coordination, core::v1 as core, discovery::v1 as discovery,
    flowcontrol::v1 as flowcontrol, networking::v1 as networking, node::v1 as node,
    policy::v1 as policy, rbac::v1 as rbac, resource::v1 as resource, scheduling::v1 as scheduling,
    storage::v1 as storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope, Resource};
use std::collections::HashMap;

use async_trait::async_trait;

use crate::engine::projection::{Projection, State};
use crate::error::Result;

/// One built-in Kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownKind {
    pub api_version: &'static str,
    pub group: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

/// Maps a k8s-openapi scope type to "namespaced" at compile time.
trait Scoped {
    const NAMESPACED: bool;
}
impl Scoped for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}
impl Scoped for ClusterResourceScope {
    const NAMESPACED: bool = false;
}

macro_rules! known_kinds {
    ($($t:ty),* $(,)?) => {
        &[$(KnownKind {
            api_version: <$t as Resource>::API_VERSION,
            group: <$t as Resource>::GROUP,
            kind: <$t as Resource>::KIND,
            namespaced: <<$t as Resource>::Scope as Scoped>::NAMESPACED,
        }),*]
    };
}

/// The stable built-in Kinds; the first entry of a Kind wins when filling an apiVersion (so
/// `Event` is `v1`, not `events.k8s.io/v1`).
pub static KNOWN_KINDS: &[KnownKind] = known_kinds![
    core::Binding,
    core::ComponentStatus,
    core::ConfigMap,
    core::Endpoints,
    core::Event,
    core::LimitRange,
    core::Namespace,
    core::Node,
    core::PersistentVolume,
    core::PersistentVolumeClaim,
    core::Pod,
    core::PodTemplate,
    core::ReplicationController,
    core::ResourceQuota,
    core::Secret,
    core::Service,
    core::ServiceAccount,
    apps::ControllerRevision,
    apps::DaemonSet,
    apps::Deployment,
    apps::ReplicaSet,
    apps::StatefulSet,
    batch::CronJob,
    batch::Job,
    autoscaling::HorizontalPodAutoscaler,
    admissionregistration::MutatingWebhookConfiguration,
    admissionregistration::ValidatingAdmissionPolicy,
    admissionregistration::ValidatingAdmissionPolicyBinding,
    admissionregistration::ValidatingWebhookConfiguration,
    certificates::CertificateSigningRequest,
    coordination::Lease,
    discovery::EndpointSlice,
    flowcontrol::FlowSchema,
    flowcontrol::PriorityLevelConfiguration,
    networking::Ingress,
    networking::IngressClass,
    networking::IPAddress,
    networking::NetworkPolicy,
    networking::ServiceCIDR,
    node::RuntimeClass,
    policy::PodDisruptionBudget,
    rbac::ClusterRole,
    rbac::ClusterRoleBinding,
    rbac::Role,
    rbac::RoleBinding,
    resource::DeviceClass,
    resource::ResourceClaim,
    resource::ResourceClaimTemplate,
    resource::ResourceSlice,
    scheduling::PriorityClass,
    storage::CSIDriver,
    storage::CSINode,
    storage::CSIStorageCapacity,
    storage::StorageClass,
    storage::VolumeAttachment,
    storage::VolumeAttributesClass,
    CustomResourceDefinition,
    APIService,
];

/// The apiVersion to fill in for a manifest of `kind` that names none; `comb_group` is the
/// configured group of the Comb CRD, which the engine knows as well.
pub fn default_api_version(kind: &str, comb_group: &str) -> Option<String> {
    if kind == comb_api::KIND {
        return Some(format!("{comb_group}/{}", comb_api::VERSION));
    }
    builtin_kind(kind).map(|known| known.api_version.to_string())
}

/// The built-in Kind a Kind name alone means: its first entry in [`KNOWN_KINDS`] (the one whose
/// apiVersion a manifest without one gets).
pub fn builtin_kind(kind: &str) -> Option<&'static KnownKind> {
    KNOWN_KINDS.iter().find(|known| known.kind == kind)
}

/// Whether objects of `kind` in `group` live in namespaces, for the built-in Kinds (any version
/// of a known group/Kind counts); `None` for a Kind only the API server knows.
pub fn known_scope(group: &str, kind: &str) -> Option<bool> {
    KNOWN_KINDS
        .iter()
        .find(|known| known.group == group && known.kind == kind)
        .map(|known| known.namespaced)
}

/// Whether objects of `kind` in `group` live in namespaces, as far as the static table says:
/// unknown Kinds (custom resources) count as namespaced. Placing a manifest needs more:
/// [`Scopes`].
pub fn is_namespaced(group: &str, kind: &str) -> bool {
    known_scope(group, kind).unwrap_or(true)
}

/// The API server's word on the scope of a Kind (its discovery, cached per client).
#[async_trait]
pub trait ScopeLookup: Send + Sync {
    /// Whether `apiVersion`/`kind` is namespaced on this server.
    async fn is_namespaced(&self, api_version: &str, kind: &str) -> Result<bool>;
}

/// The scopes one rendering uses: what discovery said of custom Kinds, by `apiVersion`/`kind`,
/// over the static table of built-in ones. Pure, so rendering stays a function over data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scopes {
    discovered: HashMap<(String, String), bool>,
}

impl Scopes {
    /// Whether `apiVersion`/`kind` (of `group`) is namespaced: discovery's answer, else the
    /// static table's, else namespaced.
    pub fn is_namespaced(&self, api_version: &str, group: &str, kind: &str) -> bool {
        self.discovered
            .get(&(api_version.to_string(), kind.to_string()))
            .copied()
            .unwrap_or_else(|| is_namespaced(group, kind))
    }

    /// Asks `lookup` for every `apiVersion`/`kind` of `types` that the static table does not
    /// know. A Kind discovery cannot tell (not served yet, server down) stays out: it counts as
    /// namespaced, and the write that follows fails with discovery's own words.
    pub async fn discover(lookup: &dyn ScopeLookup, types: Vec<(String, String)>) -> Scopes {
        let mut scopes = Scopes::default();
        for (api_version, kind) in types {
            let group = comb_api::group_of(&api_version);
            if known_scope(group, &kind).is_some()
                || scopes
                    .discovered
                    .contains_key(&(api_version.clone(), kind.clone()))
            {
                continue;
            }
            if let Ok(namespaced) = lookup.is_namespaced(&api_version, &kind).await {
                scopes.discovered.insert((api_version, kind), namespaced);
            }
        }
        scopes
    }
}

/// What a set of scopes says without asking a server (the static table for an empty one): for
/// callers that need a rendering's endpoints, not where its objects land.
#[async_trait]
impl ScopeLookup for Scopes {
    async fn is_namespaced(&self, api_version: &str, kind: &str) -> Result<bool> {
        Ok(Scopes::is_namespaced(
            self,
            api_version,
            comb_api::group_of(api_version),
            kind,
        ))
    }
}

/// Where a workload keeps the Pod templates that get the Comb's labels: `None` for a Kind that
/// is no workload, an empty list for a bare Pod (itself a workload).
pub fn workload_templates(group: &str, kind: &str) -> Option<&'static [&'static [&'static str]]> {
    const TEMPLATE: &[&[&str]] = &[&["spec", "template"]];
    const CRON_JOB: &[&[&str]] = &[
        &["spec", "jobTemplate"],
        &["spec", "jobTemplate", "spec", "template"],
    ];
    match (group, kind) {
        ("", "Pod") => Some(&[]),
        ("", "ReplicationController")
        | ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch", "Job") => Some(TEMPLATE),
        ("batch", "CronJob") => Some(CRON_JOB),
        _ => None,
    }
}

/// What create-or-replace (`ensure`) does with an object that exists already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExistingTreatment {
    /// Left as it is: a `v1` PersistentVolumeClaim (its spec is immutable), a `batch/v1` Job that
    /// is active or has succeeded (replacing it would run it again). Such objects keep the digest
    /// they were created with, so reconcile does not compare it.
    Keep,
    /// Deleted and created anew: any other existing `batch/v1` Job (failed, or without status).
    Recreate,
    /// Replaced by the manifest.
    Replace,
}

/// How `ensure` treats the existing `live` object of a manifest of `api_version` and `kind`.
pub fn existing_treatment(api_version: &str, kind: &str, live: &Projection) -> ExistingTreatment {
    match (api_version, kind, &live.state) {
        ("v1", "PersistentVolumeClaim", _) => ExistingTreatment::Keep,
        ("batch/v1", "Job", State::Job(job))
            if job.active.unwrap_or(0) != 0 || job.succeeded.unwrap_or(0) != 0 =>
        {
            ExistingTreatment::Keep
        }
        ("batch/v1", "Job", _) => ExistingTreatment::Recreate,
        _ => ExistingTreatment::Replace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Scopes {
        /// Records what discovery said of `apiVersion`/`kind` (the tests' discovery).
        pub fn insert(&mut self, api_version: &str, kind: &str, namespaced: bool) {
            self.discovered
                .insert((api_version.to_string(), kind.to_string()), namespaced);
        }
    }

    #[test]
    fn fills_api_versions() {
        let cases = [
            ("Deployment", Some("apps/v1")),
            ("Service", Some("v1")),
            ("Event", Some("v1")),
            ("CronJob", Some("batch/v1")),
            ("EndpointSlice", Some("discovery.k8s.io/v1")),
            ("ClusterRoleBinding", Some("rbac.authorization.k8s.io/v1")),
            ("Comb", Some("comb.example.com/v1")),
            ("Widget", None),
        ];
        for (kind, want) in cases {
            assert_eq!(
                default_api_version(kind, "comb.example.com").as_deref(),
                want,
                "{kind}"
            );
        }
    }

    #[test]
    fn scopes() {
        let cases = [
            ("", "Namespace", false),
            ("rbac.authorization.k8s.io", "ClusterRole", false),
            ("rbac.authorization.k8s.io", "ClusterRoleBinding", false),
            ("apiextensions.k8s.io", "CustomResourceDefinition", false),
            ("", "Service", true),
            ("apps", "Deployment", true),
            ("example.com", "Widget", true),
            ("comb.internal", "Comb", true),
        ];
        for (group, kind, namespaced) in cases {
            assert_eq!(is_namespaced(group, kind), namespaced, "{group}/{kind}");
        }
    }

    #[test]
    fn what_ensure_does_with_existing_objects() {
        use ExistingTreatment::{Keep, Recreate, Replace};
        use serde_json::json;
        let cases = [
            ("v1", "PersistentVolumeClaim", json!({}), Keep),
            ("batch/v1", "Job", json!({"status": {"active": 1}}), Keep),
            ("batch/v1", "Job", json!({"status": {"succeeded": 1}}), Keep),
            (
                "batch/v1",
                "Job",
                json!({"status": {"failed": 1, "active": 0}}),
                Recreate,
            ),
            ("batch/v1", "Job", json!({}), Recreate),
            ("v1", "Service", json!({}), Replace),
            ("apps/v1", "Deployment", json!({}), Replace),
        ];
        for (api_version, kind, live, treatment) in cases {
            assert_eq!(
                existing_treatment(
                    api_version,
                    kind,
                    &Projection::of(api_version, kind, &live, &comb_api::LabelKeys::default())
                        .unwrap()
                ),
                treatment,
                "{kind} {live}"
            );
        }
    }

    #[test]
    fn groups_and_workloads() {
        assert_eq!(comb_api::group_of("v1"), "");
        assert_eq!(comb_api::group_of("apps/v1beta1"), "apps");
        assert_eq!(workload_templates("", "Pod").unwrap().len(), 0);
        assert_eq!(workload_templates("batch", "CronJob").unwrap().len(), 2);
        assert_eq!(workload_templates("apps", "Deployment").unwrap().len(), 1);
        assert!(workload_templates("", "Service").is_none());
        assert!(workload_templates("extensions", "Deployment").is_none());
    }
}
