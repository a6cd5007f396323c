//! The `Comb` custom resource and its spec.
//!
//! The API group is chosen at run time (default [`DEFAULT_GROUP`]), so `Comb` implements
//! [`kube_core::Resource`] with an [`ApiResource`] as its dynamic type: build one with
//! [`api_resource`] and use `Api::<Comb>::namespaced_with(client, ns, &api_resource(group))`.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube_core::{ApiResource, DynamicResourceScope, ObjectMeta, Resource, TypeMeta};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::status::CombStatus;

/// The API group of the Comb CRD unless configured otherwise.
pub const DEFAULT_GROUP: &str = "comb.internal";
/// The one served and stored version.
pub const VERSION: &str = "v1";
/// The kind of the custom resource.
pub const KIND: &str = "Comb";
/// The plural (resource) name.
pub const PLURAL: &str = "combs";
/// The value of `spec.maintenance` that stops applying, pruning and restoring.
pub const NO_RESOURCE_RECONCILIATION: &str = "NoResourceReconciliation";

/// The [`ApiResource`] of the Comb CRD in `group`, the dynamic type of [`Comb`].
pub fn api_resource(group: &str) -> ApiResource {
    ApiResource {
        group: group.to_string(),
        version: VERSION.to_string(),
        api_version: format!("{group}/{VERSION}"),
        kind: KIND.to_string(),
        plural: PLURAL.to_string(),
    }
}

/// A Comb custom resource: one cell of the honeycomb.
///
/// Serialises as `apiVersion, kind, metadata, spec, status`. `metadata` follows k8s-openapi's
/// (alphabetical) field order; `spec` and `status` follow the reference's canonical order.
///
/// Decoding never fails on a bad `spec` or `status` (a CRD without a schema lets any value
/// through): the object still decodes, with the default spec and [`Comb::spec_error`] naming
/// the field (or no status and [`Comb::status_error`]), so that one bad Comb cannot fail the
/// list or watch of its whole layer. Only `metadata` must decode.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Comb {
    /// `apiVersion` and `kind`; absent on some list items, so optional.
    #[serde(flatten)]
    pub types: Option<TypeMeta>,
    pub metadata: ObjectMeta,
    pub spec: CombSpec,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<CombStatus>,
    /// Why `spec` did not decode (`spec.class: invalid type: integer `5`, expected a string`):
    /// the Comb cannot be built. String values are left out of the message, since a field may
    /// hold anything. Never serialised, so never written back.
    #[serde(skip)]
    pub spec_error: Option<String>,
    /// Why `status` did not decode (`status.phase: ...`): it counts as absent, and the next
    /// status written replaces it. Never serialised.
    #[serde(skip)]
    pub status_error: Option<String>,
}

impl<'de> Deserialize<'de> for Comb {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // `apiVersion` and `kind` as fields of their own, not a flattened `TypeMeta`: serde
        // buffers every field of a struct with a flattened member into an intermediate tree
        // before decoding any of them, which doubled the cost of decoding each watch event
        // and write answer (the manifests in `spec.config` are most of a Comb).
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default, rename = "apiVersion")]
            api_version: Option<String>,
            #[serde(default)]
            kind: Option<String>,
            #[serde(default)]
            metadata: MetadataWithoutManagedFields,
            #[serde(default)]
            spec: Option<Value>,
            #[serde(default)]
            status: Option<Value>,
        }
        let raw = Raw::deserialize(deserializer)?;
        let (spec, spec_error) = decode_spec(raw.spec);
        let (status, status_error) = decode_status(raw.status);
        let types = match (raw.api_version, raw.kind) {
            (Some(api_version), Some(kind)) => Some(TypeMeta { api_version, kind }),
            _ => None,
        };
        Ok(Comb {
            types,
            metadata: raw.metadata.into(),
            spec,
            status,
            spec_error,
            status_error,
        })
    }
}

/// A Comb's `spec`, or a default one and why it did not decode.
fn decode_spec(spec: Option<Value>) -> (CombSpec, Option<String>) {
    match spec {
        None | Some(Value::Null) => (CombSpec::default(), None),
        Some(spec) => match decode_part::<CombSpec>(spec) {
            Ok(spec) => (spec, None),
            Err(error) => (CombSpec::default(), Some(field_problem("spec", &error))),
        },
    }
}

/// A Comb's `status`, or none and why it did not decode.
fn decode_status(status: Option<Value>) -> (Option<CombStatus>, Option<String>) {
    match status {
        None | Some(Value::Null) => (None, None),
        Some(status) => match decode_part::<CombStatus>(status) {
            Ok(status) => (Some(status), None),
            Err(error) => (None, Some(field_problem("status", &error))),
        },
    }
}

/// The API server's answer to a write of a Comb that leaves its spec alone (its status, its
/// finalizers), decoded without building the spec, which is most of a Comb (the manifests in
/// `spec.config`): comb writes a status per transition of every Comb, and building the spec of
/// each answer again was half of the Comb CRs it decoded (`docs/benchmarks.md`, the call-graph
/// profile). The spec stays the answer's text until [`Comb::answered`] needs it.
pub struct CombAnswer {
    metadata: ObjectMeta,
    spec: Option<Box<serde_json::value::RawValue>>,
    status: Option<CombStatus>,
    status_error: Option<String>,
}

impl<'de> Deserialize<'de> for CombAnswer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default)]
            metadata: MetadataWithoutManagedFields,
            #[serde(default)]
            spec: Option<Box<serde_json::value::RawValue>>,
            #[serde(default)]
            status: Option<Value>,
        }
        let raw = Raw::deserialize(deserializer)?;
        let (status, status_error) = decode_status(raw.status);
        Ok(CombAnswer {
            metadata: raw.metadata.into(),
            spec: raw.spec,
            status,
            status_error,
        })
    }
}

/// A Comb's `metadata` as decoded: every field of [`ObjectMeta`] but `managedFields`, which
/// serde skips without building it. They record, per manager, every field of the spec and the
/// status as a tree of JSON maps, as big as the spec itself; no reader of a Comb looks at them
/// (the controller drops them), and building them was most of the cost of decoding each watch
/// event and write answer. A Comb written back without them keeps the server's (a missing
/// `managedFields` leaves them as they are).
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct MetadataWithoutManagedFields {
    annotations: Option<std::collections::BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<std::collections::BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<MetadataWithoutManagedFields> for ObjectMeta {
    fn from(meta: MetadataWithoutManagedFields) -> ObjectMeta {
        ObjectMeta {
            annotations: meta.annotations,
            creation_timestamp: meta.creation_timestamp,
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            deletion_timestamp: meta.deletion_timestamp,
            finalizers: meta.finalizers,
            generate_name: meta.generate_name,
            generation: meta.generation,
            labels: meta.labels,
            managed_fields: None,
            name: meta.name,
            namespace: meta.namespace,
            owner_references: meta.owner_references,
            resource_version: meta.resource_version,
            self_link: meta.self_link,
            uid: meta.uid,
        }
    }
}

/// Decodes a Comb's `spec` or `status`, keeping where it failed (the field's path).
fn decode_part<T: serde::de::DeserializeOwned>(
    value: Value,
) -> std::result::Result<T, serde_path_to_error::Error<serde_json::Error>> {
    serde_path_to_error::deserialize(value)
}

/// Which field of `part` is wrong and how, without the value it held: the text a Comb keeps
/// for a spec or status that does not decode.
fn field_problem(part: &str, error: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = error.path().to_string();
    let field = if path == "." {
        part.to_string()
    } else {
        format!("{part}.{path}")
    };
    format!(
        "{field}: {}",
        without_string_values(&error.inner().to_string())
    )
}

/// serde's messages quote a string that has the wrong type or value (`invalid type: string
/// "hunter2", expected a boolean`); a Comb's field may hold a credential by mistake, so the
/// quoted text is dropped (`invalid type: a string, expected a boolean`).
fn without_string_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find("string \"") {
        out.push_str(&rest[..start]);
        out.push_str("a string");
        let quoted = &rest[start + "string \"".len()..];
        rest = match quoted.find('"') {
            Some(end) => &quoted[end + 1..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

impl Comb {
    /// A new Comb CR of `group` named `name` in `namespace`.
    pub fn new(group: &str, namespace: &str, name: &str, spec: CombSpec) -> Comb {
        Comb {
            types: Some(TypeMeta {
                api_version: format!("{group}/{VERSION}"),
                kind: KIND.to_string(),
            }),
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
            spec_error: None,
            status_error: None,
        }
    }

    /// The Comb the server stored when it answered `answer` to a write of `self`: the answer's
    /// metadata and status, and `self`'s spec while the generation says the spec is the one
    /// `self` carried (a write conditional on `self`'s resourceVersion finds it so; the spec
    /// is decoded from the answer otherwise).
    pub fn answered(self, answer: CombAnswer) -> Comb {
        let same_spec = self.metadata.generation.is_some()
            && answer.metadata.generation == self.metadata.generation;
        let (spec, spec_error) = if same_spec {
            (self.spec, self.spec_error)
        } else {
            let spec = answer
                .spec
                .map(|text| serde_json::from_str::<Value>(text.get()))
                .transpose();
            match spec {
                Ok(spec) => decode_spec(spec),
                Err(error) => (CombSpec::default(), Some(format!("spec: {error}"))),
            }
        };
        Comb {
            types: self.types,
            metadata: answer.metadata,
            spec,
            status: answer.status,
            spec_error,
            status_error: answer.status_error,
        }
    }

    /// Parses a Comb from JSON data (e.g. a `DynamicObject` turned into a value). Fails only when
    /// the data is not an object or its metadata does not decode; a bad spec or status is
    /// [`Comb::spec_error`] or [`Comb::status_error`].
    pub fn from_value(value: Value) -> crate::Result<Comb> {
        Ok(serde_json::from_value(value)?)
    }
}

impl Resource for Comb {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// `spec` of a Comb. A JSON `null` counts as absent for every field but `upstream`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CombSpec {
    /// The class of the Comb, a name in the controller's class registry. Required by the CRD;
    /// `None` only for a CR that lacks it, which then fails to build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Dependencies, each `name` or `namespace/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<String>>,
    /// Free-form configuration for the class. Never credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Map<String, Value>>,
    /// Tri-state: unset = automatic, `false` = off, `true` = on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Where the service is borrowed from; the presence of the key matters, see [`UpstreamSpec`].
    #[serde(default, skip_serializing_if = "UpstreamSpec::is_absent")]
    pub upstream: UpstreamSpec,
    /// `NoResourceReconciliation` stops applying, pruning and restoring (our extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<String>,
    /// Kinds deleted with the Comb when they carry its labels (our extension, Deckhouse semantics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphan_resources: Option<Vec<OrphanResource>>,
}

impl CombSpec {
    /// A spec naming `class` and nothing else.
    pub fn of_class(class: &str) -> CombSpec {
        CombSpec {
            class: Some(class.to_string()),
            ..CombSpec::default()
        }
    }

    /// The dependencies as written, empty when there are none.
    pub fn dependencies(&self) -> &[String] {
        self.depends_on.as_deref().unwrap_or_default()
    }

    /// Whether `spec.maintenance` is `NoResourceReconciliation`.
    pub fn in_maintenance(&self) -> bool {
        self.maintenance.as_deref() == Some(NO_RESOURCE_RECONCILIATION)
    }
}

/// `spec.upstream`, where `null` and absent differ: absent lets the next source decide, an
/// explicit `null` means local and ends the resolution.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum UpstreamSpec {
    /// The key is not there.
    #[default]
    Absent,
    /// `upstream: null`: explicitly local.
    Local,
    /// `upstream: {class: ..., ...}`.
    Declared(Map<String, Value>),
}

impl UpstreamSpec {
    /// Whether the key is missing (then it is not serialised).
    pub fn is_absent(&self) -> bool {
        matches!(self, UpstreamSpec::Absent)
    }

    /// Whether the key exists, `null` included (the reference's `has_upstream`).
    pub fn is_present(&self) -> bool {
        !self.is_absent()
    }
}

impl Serialize for UpstreamSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            // Skipped by the field attribute; a bare value serialises like null.
            UpstreamSpec::Absent | UpstreamSpec::Local => serializer.serialize_none(),
            UpstreamSpec::Declared(map) => map.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for UpstreamSpec {
    /// Only called when the key exists (absent is the field's default), so `null` is `Local`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(
            match Option::<Map<String, Value>>::deserialize(deserializer)? {
                None => UpstreamSpec::Local,
                Some(map) => UpstreamSpec::Declared(map),
            },
        )
    }
}

/// One entry of `spec.orphanResources`: a kind and its `group/version` (or bare `version`, which
/// matches the kind in every group serving that version).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrphanResource {
    pub kind: String,
    pub version: String,
}
