//! `status` of a Comb and the value types inside it. Field order is the reference's canonical
//! order, so a status round-trips byte-identically.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use crate::phase::{Phase, Reason};

/// `status` of a Comb, as the last reconcile step recorded it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CombStatus {
    /// `Running`, `Pending`, `Blocked`, `NeedsConfig`, `Disabled`, `Error` or `Maintenance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// `Ready`, `DependenciesReady`, `ConfigReady`, then others sorted by type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<CombCondition>>,
    /// What the Comb deployed: the basis for pruning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_resources: Option<Vec<ManagedObject>>,
    /// The resolved endpoints (redirected to the upstream while borrowing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Vec<CombEndpoint>>,
    /// Present while an upstream is active, or while its bridge still stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<CombUpstreamStatus>,
    /// `metadata.generation` of the CR the status was built for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl CombStatus {
    /// The condition of type `kind`, if recorded.
    pub fn condition(&self, kind: &str) -> Option<&CombCondition> {
        self.conditions.as_deref()?.iter().find(|c| c.type_ == kind)
    }

    /// The `Ready` condition, whose reason and message are the step's.
    pub fn ready(&self) -> Option<&CombCondition> {
        self.condition(READY)
    }

    /// The recorded managed resources, empty when there are none.
    pub fn managed(&self) -> &[ManagedObject] {
        self.managed_resources.as_deref().unwrap_or_default()
    }

    /// The recorded endpoints, empty when there are none.
    pub fn endpoint_list(&self) -> &[CombEndpoint] {
        self.endpoints.as_deref().unwrap_or_default()
    }
}

/// Condition type: the step's verdict.
pub const READY: &str = "Ready";
/// Condition type: step 3.
pub const DEPENDENCIES_READY: &str = "DependenciesReady";
/// Condition type: step 4.
pub const CONFIG_READY: &str = "ConfigReady";
/// Condition type: present only when writing the status failed.
pub const STATUS_WRITTEN: &str = "StatusWritten";
/// Condition type: on a borrower whose layer's borrow has a `fallback`, True while it borrows
/// from a fallback (or runs locally) because its preferred upstream is unhealthy.
pub const UPSTREAM_FALLBACK: &str = "UpstreamFallback";

/// One condition of a Comb.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CombCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Serialised as `%Y-%m-%dT%H:%M:%SZ` in UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// `True`, `False` or `Unknown`; any other value does not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl From<bool> for ConditionStatus {
    fn from(value: bool) -> Self {
        if value {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        })
    }
}

/// A published endpoint, already resolved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CombEndpoint {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    pub port: i32,
    /// `host:port` to use from inside the Comb's cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// `host:port` to use from elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<String>,
}

/// One object a Comb manages: an entry of `status.managedResources` (the reference's
/// `CombResource`), also how the engine names an object it writes or deletes. `namespace` is
/// absent for cluster-scoped objects.
///
/// `uid` is comb's own addition: the uid of the object comb made (or was handed) for this
/// Comb, the record that makes it the Comb's ([`crate::ownership`]). Only the controller
/// writes a Comb's status, so whoever may only label an object cannot put its uid here. An
/// entry without one was recorded by an older comb, or names an object by identity only (what
/// the engine is about to write).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedObject {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl ManagedObject {
    /// The object `api_version` `kind` `namespace/name`, by identity only (no uid).
    pub fn new(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        namespace: Option<&str>,
        name: impl Into<String>,
    ) -> ManagedObject {
        ManagedObject {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: name.into(),
            uid: None,
        }
    }

    /// The same identity, recorded with the uid of the object comb made or took for the Comb.
    pub fn with_uid(self, uid: Option<&str>) -> ManagedObject {
        ManagedObject {
            uid: uid.map(str::to_string),
            ..self
        }
    }

    /// The API group: the part of `apiVersion` before the last `/`, `""` for the core group.
    pub fn group(&self) -> &str {
        group_of(&self.api_version)
    }
}

/// The API group of an apiVersion: the part before the last `/`, `""` for the core group.
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// `status.upstream`: what the upstream said in the last borrowing step.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CombUpstreamStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachable: Option<bool>,
    /// The upstream's phase, as it said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The layers (kube contexts) the service comes through, nearest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<Time>,
}
