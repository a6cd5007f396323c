//! comb-api: the `Comb` custom resource and the value types around it.
//!
//! Pure data and pure functions: this crate must never depend on a client or an async runtime,
//! so that every other crate (and other programs) can use the types cheaply.
//!
//! - [`Comb`], [`CombSpec`] (with [`UpstreamSpec`]'s null-vs-absent rule), [`CombStatus`] and
//!   the value types in it, with its words typed: [`Phase`] and [`Reason`];
//! - [`Endpoint`] with [`name_problem`], and [`Address`] for `host:port`;
//! - [`LabelKeys`]: every label and annotation key from one prefix;
//! - [`CombRef`]: references of the form `LAYER:NAMESPACE/NAME` (layer and namespace optional);
//! - [`crd()`]: the CustomResourceDefinition for a group; [`layer_crd`] the CombLayer's;
//! - [`CombLayer`]: a layer made on demand from a template of the configuration;
//! - [`managed_fields`]: comb's field manager and the takeover of older combs' writes;
//! - [`ownership`]: whose an existing object is, the rule every write and delete of comb's asks;
//! - [`names`]: Kubernetes names, checked before they reach a request path.

mod comb;
mod crd;
mod endpoint;
mod error;
mod labels;
mod layer;
pub mod managed_fields;
pub mod names;
pub mod ownership;
mod phase;
mod reference;
mod status;

pub use comb::{
    Comb, CombAnswer, CombSpec, DEFAULT_GROUP, KIND, NO_RESOURCE_RECONCILIATION, OrphanResource,
    PLURAL, UpstreamSpec, VERSION, api_resource,
};
pub use crd::{
    UPSTREAM_CLASSES, crd, crds, custom_resource_definition, layer_crd,
    layer_custom_resource_definition,
};
pub use endpoint::{Address, DEFAULT_PROTOCOL, Endpoint, Host, name_problem};
pub use error::{Error, Result};
pub use labels::{DEFAULT_PREFIX, LabelKeys, MANAGED_BY_LABEL, is_label_value};
pub use layer::{
    CombCounts, CombLayer, CombLayerSpec, CombLayerStatus, EXPIRED, LAYER_KIND, LAYER_PLURAL,
    LAYER_SHORT_NAME, LayerBorrowSpec, LayerPhase, ReplicateSpec, SecretRef, layer_api_resource,
};
pub use phase::{Phase, Reason};
pub use reference::CombRef;
pub use status::{
    CONFIG_READY, CombCondition, CombEndpoint, CombStatus, CombUpstreamStatus, ConditionStatus,
    DEPENDENCIES_READY, ManagedObject, READY, STATUS_WRITTEN, UPSTREAM_FALLBACK, group_of,
};
