//! Tenancy (DESIGN.md §6): what a Comb may write, as its layer allows.
//!
//! A namespaced manifest lands in the Comb's own namespace, or in another one only when the
//! layer lists it in `allowNamespaces`; a cluster-scoped manifest only when the layer's
//! `allowClusterScoped` names its Kind. [`Tenancy::refusals`] is a pure function over the
//! rendered items: reconcile asks it before anything of a step is written, so that a refused
//! Comb writes nothing at all. Prune and cleanup delete only in namespaces the same rule allows.
//!
//! What a Comb makes the controller read is bounded the same way: its own `spec.upstream` may
//! name a peer Comb in another kube context or namespace, and copy Secrets and ConfigMaps from
//! there, only where the layer's `allowUpstreams` says ([`Tenancy::upstream_refusal`]). The
//! layer's own `borrow` and a class's `upstream` (the library user's code) are trusted.
//!
//! A Static upstream reads nothing, but its bridge writes: the Services its `endpoints[].service`
//! names and their EndpointSlices are the Comb's manifests like any other, held to this tenancy,
//! to [`endpoint_refusals`] (endpoints only for a Service the Comb renders itself, before them)
//! and to the ownership rule at the apply (a Service that is not the Comb's is never relabelled,
//! re-selected or given endpoints: the pattern of CVE-2021-25740).
//!
//! The default is the safe one (own namespace, no cluster-scoped Kind, no upstream outside the
//! Comb's own context and namespace), also for an engine used without a layer: whoever may
//! create a Comb must not get the controller's rights with it.

use std::fmt;

use comb_api::ManagedObject;
use comb_upstreams::{PeerReads, Reads, SourceReader};
use serde_json::Value;

use crate::engine::kinds::builtin_kind;

/// A Kind of an API group, as `allowClusterScoped` names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKind {
    /// `""` for the core group.
    pub group: String,
    pub kind: String,
}

impl GroupKind {
    pub fn new(group: impl Into<String>, kind: impl Into<String>) -> GroupKind {
        GroupKind {
            group: group.into(),
            kind: kind.into(),
        }
    }
}

impl fmt::Display for GroupKind {
    /// As `allowClusterScoped` writes it: a built-in Kind alone when its name alone means this
    /// group (`ClusterRole`, `Namespace`), anything else as `group/Kind`
    /// (`example.com/ClusterWidget`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if builtin_kind(&self.kind).is_some_and(|known| known.group == self.group) {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}/{}", self.group, self.kind)
        }
    }
}

/// `serviceAccount` of a layer: the identity every write of a Comb's resources impersonates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccountRef {
    /// `None`: the service account of that name in each Comb's own namespace.
    pub namespace: Option<String>,
    pub name: String,
}

impl ServiceAccountRef {
    /// The user the API server knows the service account as, for a Comb in `comb_namespace`
    /// (`system:serviceaccount:<namespace>:<name>`). A fixed `NAMESPACE/NAME` is the same user
    /// for every Comb, and in every cluster.
    pub fn user(&self, comb_namespace: &str) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.namespace.as_deref().unwrap_or(comb_namespace),
            self.name
        )
    }
}

impl fmt::Display for ServiceAccountRef {
    /// As `serviceAccount` writes it: `NAME` or `NAMESPACE/NAME`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{namespace}/{}", self.name),
            None => write!(f, "{}", self.name),
        }
    }
}

/// The label by which an EndpointSlice names the Service whose endpoints it holds: kube-proxy
/// sends that Service's traffic to its addresses.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The Service whose traffic the object `item` (`manifest` as rendered) feeds, if it feeds
/// one: an EndpointSlice names it by its [`SERVICE_NAME_LABEL`], an Endpoints object by its own
/// name (the mirroring controller copies it into a slice of that Service).
fn fed_service<'a>(item: &'a ManagedObject, manifest: &'a Value) -> Option<&'a str> {
    match (item.group(), item.kind.as_str()) {
        ("discovery.k8s.io", "EndpointSlice") => manifest
            .pointer("/metadata/labels")
            .and_then(|labels| labels.get(SERVICE_NAME_LABEL))
            .and_then(Value::as_str),
        ("", "Endpoints") => Some(item.name.as_str()),
        _ => None,
    }
}

/// Why the rendered `items` (identities with their manifests, in manifest order) may not be
/// written: an EndpointSlice or Endpoints object that feeds a Service the Comb does not render
/// itself before it. Endpoints are where a Service's traffic goes, so whoever may write them
/// for a Service that is not theirs takes its traffic (CVE-2021-25740); a Comb gives them only
/// to its own Services, and its deploy, in manifest order, has applied such a Service (and so
/// found it the Comb's) before it writes their endpoints. Empty when every item may go.
pub fn endpoint_refusals(items: &[(ManagedObject, &Value)]) -> Vec<String> {
    items
        .iter()
        .enumerate()
        .filter_map(|(index, (item, manifest))| {
            let service = fed_service(item, manifest)?;
            let rendered_before = items[..index].iter().any(|(before, _)| {
                before.group().is_empty()
                    && before.kind == "Service"
                    && before.name == service
                    && before.namespace == item.namespace
            });
            (!rendered_before).then(|| {
                format!(
                    "{} {} gives endpoints to Service {service}, which this Comb does not render \
                     before it; a Comb gives endpoints only to its own Services",
                    item.kind, item.name
                )
            })
        })
        .collect()
}

/// Who set a tenancy, as refusals name it and the setting that would allow more.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PolicyOrigin {
    /// The layer `name`, `layers[index]` of the configuration.
    Layer { name: String, index: usize },
    /// The layer `layer` made from a CombLayer of template `template`,
    /// `layerTemplates[index]` of the configuration: the template's keys allow more.
    Template {
        layer: String,
        template: String,
        index: usize,
    },
    /// No layer: the engine's default (tests, library users).
    #[default]
    Engine,
}

impl PolicyOrigin {
    fn who(&self) -> String {
        match self {
            PolicyOrigin::Layer { name, .. } => format!("layer {name}"),
            PolicyOrigin::Template {
                layer, template, ..
            } => format!("layer {layer} (template {template})"),
            PolicyOrigin::Engine => "the engine's default tenancy".to_string(),
        }
    }

    /// The setting that would allow more: `layers[i].<layer_key>` of the configuration, or the
    /// engine's `Settings.tenancy.<engine_key>`.
    fn key(&self, layer_key: &str, engine_key: &str) -> String {
        match self {
            PolicyOrigin::Layer { index, .. } => format!("layers[{index}].{layer_key}"),
            PolicyOrigin::Template { index, .. } => {
                format!("layerTemplates[{index}].{layer_key}")
            }
            PolicyOrigin::Engine => format!("Settings.tenancy.{engine_key}"),
        }
    }
}

/// Which upstreams a Comb's own `spec.upstream` may name: its layer's `allowUpstreams`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpstreamPolicy {
    /// The entries of `allowUpstreams`, their layers resolved to contexts.
    pub grants: Vec<UpstreamGrant>,
    /// The federation's layers, so that a refusal names the entry that would allow the peer by
    /// its layer (`{layer: prod, ...}`) where a layer holds it.
    pub layers: Vec<LayerScope>,
}

/// One entry of `allowUpstreams`: peers in kube context `context` (and `namespaces`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamGrant {
    pub context: String,
    /// `None`: any namespace of the context.
    pub namespaces: Option<Vec<String>>,
    /// Whether Secrets and ConfigMaps may be copied from there (`replicate` of the upstream).
    pub replicate: bool,
}

impl UpstreamGrant {
    /// Whether this entry lets a Comb read `peer`, copies included.
    fn allows(&self, peer: &PeerReads) -> bool {
        self.context == peer.context
            && self
                .namespaces
                .as_ref()
                .is_none_or(|namespaces| namespaces.contains(&peer.namespace))
            && (self.replicate || peer.replicas.is_empty())
    }
}

/// Where a layer of the federation runs: its name, kube context and namespaces (`None`: all).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerScope {
    pub name: String,
    pub context: String,
    pub namespaces: Option<Vec<String>>,
}

impl LayerScope {
    fn holds(&self, context: &str, namespace: &str) -> bool {
        self.context == context
            && self
                .namespaces
                .as_ref()
                .is_none_or(|namespaces| namespaces.iter().any(|n| n == namespace))
    }
}

/// What the Combs of one layer may write, and as whom.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tenancy {
    pub origin: PolicyOrigin,
    /// Namespaces besides a Comb's own that its namespaced manifests may land in.
    pub allow_namespaces: Vec<String>,
    /// The cluster-scoped Kinds a Comb may write.
    pub allow_cluster_scoped: Vec<GroupKind>,
    /// Whom writes of a Comb's resources impersonate; `None`: the controller itself. The engine
    /// writes through the [`KubeOps`](crate::engine::kube_ops::KubeOps) it is given, so the
    /// caller hands it one that writes as [`Tenancy::writer`] (the controller does).
    pub service_account: Option<ServiceAccountRef>,
    /// Whom replication reads sources as in the source's cluster (a `NAMESPACE/NAME`); `None`:
    /// the `service_account` when it is fixed ([`Tenancy::source_reader`]).
    pub source_service_account: Option<ServiceAccountRef>,
    /// Which upstreams a Comb's own `spec.upstream` may name.
    pub upstreams: UpstreamPolicy,
}

impl Tenancy {
    /// Whether a Comb in `comb_namespace` may write, prune and clean up in `namespace`.
    pub fn allows_namespace(&self, comb_namespace: &str, namespace: &str) -> bool {
        namespace == comb_namespace || self.allow_namespaces.iter().any(|n| n == namespace)
    }

    /// Whether a Comb may write cluster-scoped objects of `kind` in API group `group`.
    pub fn allows_cluster_scoped(&self, group: &str, kind: &str) -> bool {
        self.allow_cluster_scoped
            .iter()
            .any(|allowed| allowed.group == group && allowed.kind == kind)
    }

    /// Why the Comb in `comb_namespace` may not write `item`, naming the setting that would
    /// allow it; `None` when it may.
    pub fn refusal(&self, item: &ManagedObject, comb_namespace: &str) -> Option<String> {
        let who = self.origin.who();
        let group = item.group();
        match &item.namespace {
            None if self.allows_cluster_scoped(group, &item.kind) => None,
            None => {
                let allowed = if self.allow_cluster_scoped.is_empty() {
                    "no cluster-scoped kinds".to_string()
                } else {
                    let kinds: Vec<String> = self
                        .allow_cluster_scoped
                        .iter()
                        .map(ToString::to_string)
                        .collect();
                    format!("only {}", kinds.join(", "))
                };
                Some(format!(
                    "{} {} is cluster-scoped; {who} allows {allowed} (add {} to {})",
                    item.kind,
                    item.name,
                    GroupKind::new(group, &item.kind),
                    self.origin
                        .key("allowClusterScoped", "allow_cluster_scoped")
                ))
            }
            Some(namespace) if self.allows_namespace(comb_namespace, namespace) => None,
            Some(namespace) => Some(format!(
                "{} {namespace}/{} is in namespace {namespace}, not {comb_namespace}; {who} does not \
                 allow it (add {namespace} to {})",
                item.kind,
                item.name,
                self.origin.key("allowNamespaces", "allow_namespaces")
            )),
        }
    }

    /// The refusals of every item the Comb in `comb_namespace` may not write, in order; empty
    /// when it may write them all.
    pub fn refusals(
        &self,
        items: impl IntoIterator<Item = ManagedObject>,
        comb_namespace: &str,
    ) -> Vec<String> {
        items
            .into_iter()
            .filter_map(|item| self.refusal(&item, comb_namespace))
            .collect()
    }

    /// Why nothing is deleted in `namespace` (for prune notes and cleanup logs).
    pub fn disallowed_namespace(&self, namespace: &str) -> String {
        format!("{} does not allow namespace {namespace}", self.origin.who())
    }

    /// The user every write of the Comb in `comb_namespace` impersonates; `None`: the
    /// controller's own identity.
    pub fn writer(&self, comb_namespace: &str) -> Option<String> {
        self.service_account
            .as_ref()
            .map(|account| account.user(comb_namespace))
    }

    /// Whom replication reads sources as, in the source's cluster: the layer's
    /// `sourceServiceAccount`, else its `serviceAccount` when that names one fixed account
    /// (`NAMESPACE/NAME`), else the controller when the layer names no account at all. An
    /// account "in each Comb's own namespace" is never used there: the namespace is the Comb's
    /// author's choice, and a namespace of that name in the source's cluster may be another
    /// tenant's, with its own account of that name ([`SourceReader::Unnamed`] says so).
    pub fn source_reader(&self) -> SourceReader {
        match (&self.source_service_account, &self.service_account) {
            (Some(account), _) => SourceReader::User(account.user("")),
            (None, Some(account)) if account.namespace.is_some() => {
                SourceReader::User(account.user(""))
            }
            (None, Some(account)) => SourceReader::Unnamed(format!(
                "{} writes as serviceAccount {account}, an account in each Comb's own \
                 namespace, which names no account in the source's cluster; name the account \
                 that reads copies there as NAMESPACE/NAME in {}",
                self.origin.who(),
                self.origin
                    .key("sourceServiceAccount", "source_service_account")
            )),
            (None, None) => SourceReader::Controller,
        }
    }

    /// Why a Comb in `comb_namespace` of kube context `comb_context` may not have `source` (its
    /// own `spec.upstream`) name an upstream of `class` that `reads` so, naming the setting that
    /// would allow it; `None` when it may. Without an `allowUpstreams` entry a Comb may name a
    /// peer in its own context and namespace only, and copy nothing; an upstream that reads
    /// nothing (Static) is always allowed, one that does not say what it reads never.
    pub fn upstream_refusal(
        &self,
        source: &str,
        class: &str,
        reads: &Reads,
        comb_context: &str,
        comb_namespace: &str,
    ) -> Option<String> {
        let who = self.origin.who();
        let peer = match reads {
            Reads::Nothing => return None,
            Reads::Peer(peer) => peer,
            Reads::Undeclared => {
                return Some(format!(
                    "{source} names the upstream class {class}, which does not say what it reads, \
                     so {who} lets only its borrow and a class's own upstream use it"
                ));
            }
        };
        let own_place = peer.context == comb_context && peer.namespace == comb_namespace;
        if own_place && peer.replicas.is_empty()
            || self.upstreams.grants.iter().any(|grant| grant.allows(peer))
        {
            return None;
        }
        let (context, namespace) = (&peer.context, &peer.namespace);
        let (copies, replicate) = if peer.replicas.is_empty() {
            (String::new(), "")
        } else {
            let copied: Vec<String> = peer
                .replicas
                .iter()
                .map(|replica| format!("{} {}", replica.kind.kind(), replica.name))
                .collect();
            let copies = format!(" and copies {} from it", copied.join(", "));
            (copies, ", replicate: true")
        };
        let target = match self
            .upstreams
            .layers
            .iter()
            .find(|layer| layer.holds(context, namespace))
        {
            Some(layer) => format!("layer: {}", layer.name),
            None => format!("context: {context}"),
        };
        Some(format!(
            "{source} names context {context}, namespace {namespace}{copies}, which {who} does not \
             allow: add {{{target}, namespaces: [{namespace}]{replicate}}} to {}",
            self.origin.key("allowUpstreams", "upstreams.grants")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::context::test_context;
    use crate::engine::kinds::Scopes;
    use crate::engine::render::render_manifest;
    use serde_json::{Value, json};

    /// `manifest` rendered for Comb `nats` in namespace `platform`; `ClusterWidget` is a
    /// cluster-scoped custom Kind, as discovery would say.
    fn item(manifest: Value) -> ManagedObject {
        let mut scopes = Scopes::default();
        scopes.insert("example.com/v1", "ClusterWidget", false);
        render_manifest(
            "Manifests",
            &manifest,
            &test_context("nats", "platform", json!({})),
            &scopes,
        )
        .unwrap()
        .resource()
    }

    fn layer(index: usize, name: &str, namespaces: &[&str], kinds: &[GroupKind]) -> Tenancy {
        Tenancy {
            origin: PolicyOrigin::Layer {
                name: name.to_string(),
                index,
            },
            allow_namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            allow_cluster_scoped: kinds.to_vec(),
            ..Tenancy::default()
        }
    }

    #[test]
    fn what_a_comb_may_write() {
        let config_map = |namespace: Option<&str>| {
            let mut manifest =
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}});
            if let Some(namespace) = namespace {
                manifest["metadata"]["namespace"] = json!(namespace);
            }
            item(manifest)
        };
        let own = config_map(None);
        let own_explicit = config_map(Some("platform"));
        let other = config_map(Some("other"));
        let system = config_map(Some("kube-system"));
        let cluster_role = item(json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole", "metadata": {"name": "admin-all"}}));
        let namespace =
            item(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
        let widget = item(
            json!({"apiVersion": "example.com/v1", "kind": "ClusterWidget",
            "metadata": {"name": "shared"}}),
        );
        let role = item(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "reader", "namespace": "other"}}),
        );
        let cluster_role_kind = GroupKind::new("rbac.authorization.k8s.io", "ClusterRole");
        let namespace_kind = GroupKind::new("", "Namespace");
        let widget_kind = GroupKind::new("example.com", "ClusterWidget");

        let prod = layer(0, "prod", &[], &[]);
        let dev = layer(1, "dev", &[], &[]);
        let open = layer(
            2,
            "open",
            &["other"],
            &[namespace_kind.clone(), widget_kind.clone()],
        );
        let cases: Vec<(&Tenancy, &ManagedObject, Option<&str>)> = vec![
            (&prod, &own, None),
            (&prod, &own_explicit, None),
            (
                &dev,
                &other,
                Some(
                    "ConfigMap other/cfg is in namespace other, not platform; layer dev does not allow it \
                     (add other to layers[1].allowNamespaces)",
                ),
            ),
            (&open, &other, None),
            (
                &open,
                &system,
                Some(
                    "ConfigMap kube-system/cfg is in namespace kube-system, not platform; layer open does \
                     not allow it (add kube-system to layers[2].allowNamespaces)",
                ),
            ),
            (&open, &role, None),
            (
                &prod,
                &cluster_role,
                Some(
                    "ClusterRole admin-all is cluster-scoped; layer prod allows no cluster-scoped kinds \
                     (add ClusterRole to layers[0].allowClusterScoped)",
                ),
            ),
            (
                &open,
                &cluster_role,
                Some(
                    "ClusterRole admin-all is cluster-scoped; layer open allows only Namespace, \
                     example.com/ClusterWidget (add ClusterRole to layers[2].allowClusterScoped)",
                ),
            ),
            (
                &prod,
                &namespace,
                Some(
                    "Namespace team is cluster-scoped; layer prod allows no cluster-scoped kinds \
                     (add Namespace to layers[0].allowClusterScoped)",
                ),
            ),
            (&open, &namespace, None),
            (
                &prod,
                &widget,
                Some(
                    "ClusterWidget shared is cluster-scoped; layer prod allows no cluster-scoped kinds \
                     (add example.com/ClusterWidget to layers[0].allowClusterScoped)",
                ),
            ),
            (&open, &widget, None),
        ];
        for (tenancy, item, expected) in cases {
            assert_eq!(
                tenancy.refusal(item, "platform").as_deref(),
                expected,
                "{} {} {:?} in {:?}",
                item.kind,
                item.name,
                item.namespace,
                tenancy.origin
            );
        }

        let roles_allowed = layer(0, "prod", &[], &[cluster_role_kind]);
        assert!(roles_allowed.refusal(&cluster_role, "platform").is_none());
    }

    #[test]
    fn the_default_allows_only_the_combs_own_namespace_and_says_where_to_allow_more() {
        let tenancy = Tenancy::default();
        let items = [
            item(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nats"}})),
            item(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "other"}}),
            ),
            item(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})),
        ];
        assert_eq!(
            tenancy.refusals(items.clone(), "platform"),
            [
                "ConfigMap other/cfg is in namespace other, not platform; the engine's default tenancy \
                 does not allow it (add other to Settings.tenancy.allow_namespaces)",
                "Namespace team is cluster-scoped; the engine's default tenancy allows no cluster-scoped \
                 kinds (add Namespace to Settings.tenancy.allow_cluster_scoped)",
            ]
        );
        assert!(tenancy.refusals(items[..1].to_vec(), "platform").is_empty());
        assert_eq!(tenancy.writer("platform"), None);
        assert!(tenancy.allows_namespace("platform", "platform"));
        assert!(!tenancy.allows_namespace("platform", "other"));
        assert_eq!(
            tenancy.disallowed_namespace("other"),
            "the engine's default tenancy does not allow namespace other"
        );
    }

    /// The attack of issue 19 and its neighbours: a Comb of layer dev (`layers[1]`, context
    /// dev, namespace team-a) whose own `spec.upstream` names peers elsewhere.
    #[test]
    fn what_a_combs_own_upstream_may_name() {
        use comb_upstreams::Replica;
        let peer = |context: &str, namespace: &str, replicas: Vec<Replica>| {
            Reads::Peer(PeerReads {
                context: context.into(),
                namespace: namespace.into(),
                replicas,
            })
        };
        let keys = || vec![Replica::secret("ledger-keys")];
        let grant = |context: &str, namespaces: Option<&[&str]>, replicate: bool| UpstreamGrant {
            context: context.into(),
            namespaces: namespaces.map(|n| n.iter().map(|n| n.to_string()).collect()),
            replicate,
        };
        let layers = vec![
            LayerScope {
                name: "prod".into(),
                context: "prod".into(),
                namespaces: Some(vec!["billing".into(), "platform".into()]),
            },
            LayerScope {
                name: "dev".into(),
                context: "dev".into(),
                namespaces: Some(vec!["team-a".into(), "team-b".into()]),
            },
        ];
        let dev = |grants: Vec<UpstreamGrant>| Tenancy {
            upstreams: UpstreamPolicy {
                grants,
                layers: layers.clone(),
            },
            ..layer(1, "dev", &[], &[])
        };
        let closed = dev(vec![]);
        let platform = dev(vec![grant("prod", Some(&["platform"]), false)]);
        let billing_copies = dev(vec![grant("prod", Some(&["billing"]), true)]);
        let all_of_prod = dev(vec![grant("prod", None, false)]);
        let cases: Vec<(&Tenancy, Reads, Option<&str>)> = vec![
            (
                &closed,
                peer("prod", "billing", keys()),
                Some(
                    "spec.upstream names context prod, namespace billing and copies Secret \
                     ledger-keys from it, which layer dev does not allow: add {layer: prod, \
                     namespaces: [billing], replicate: true} to layers[1].allowUpstreams",
                ),
            ),
            (
                &closed,
                peer("prod", "billing", vec![]),
                Some(
                    "spec.upstream names context prod, namespace billing, which layer dev does \
                     not allow: add {layer: prod, namespaces: [billing]} to layers[1].allowUpstreams",
                ),
            ),
            (&closed, peer("dev", "team-a", vec![]), None),
            (
                &closed,
                peer("dev", "team-b", vec![]),
                Some(
                    "spec.upstream names context dev, namespace team-b, which layer dev does not \
                     allow: add {layer: dev, namespaces: [team-b]} to layers[1].allowUpstreams",
                ),
            ),
            (
                &closed,
                peer("dev", "team-a", vec![Replica::config_map("settings")]),
                Some(
                    "spec.upstream names context dev, namespace team-a and copies ConfigMap \
                     settings from it, which layer dev does not allow: add {layer: dev, \
                     namespaces: [team-a], replicate: true} to layers[1].allowUpstreams",
                ),
            ),
            (
                &closed,
                peer("vendor", "shared", vec![]),
                Some(
                    "spec.upstream names context vendor, namespace shared, which layer dev does \
                     not allow: add {context: vendor, namespaces: [shared]} to \
                     layers[1].allowUpstreams",
                ),
            ),
            (&closed, Reads::Nothing, None),
            (
                &closed,
                Reads::Undeclared,
                Some(
                    "spec.upstream names the upstream class My::Probe, which does not say what it \
                     reads, so layer dev lets only its borrow and a class's own upstream use it",
                ),
            ),
            (&platform, peer("prod", "platform", vec![]), None),
            (
                &platform,
                peer("prod", "platform", keys()),
                Some(
                    "spec.upstream names context prod, namespace platform and copies Secret \
                     ledger-keys from it, which layer dev does not allow: add {layer: prod, \
                     namespaces: [platform], replicate: true} to layers[1].allowUpstreams",
                ),
            ),
            (
                &platform,
                peer("prod", "billing", vec![]),
                Some(
                    "spec.upstream names context prod, namespace billing, which layer dev does \
                     not allow: add {layer: prod, namespaces: [billing]} to layers[1].allowUpstreams",
                ),
            ),
            (&billing_copies, peer("prod", "billing", keys()), None),
            (&all_of_prod, peer("prod", "anything", vec![]), None),
            (
                &all_of_prod,
                peer("staging", "billing", vec![]),
                Some(
                    "spec.upstream names context staging, namespace billing, which layer dev does \
                     not allow: add {context: staging, namespaces: [billing]} to \
                     layers[1].allowUpstreams",
                ),
            ),
        ];
        for (tenancy, reads, expected) in cases {
            assert_eq!(
                tenancy
                    .upstream_refusal("spec.upstream", "My::Probe", &reads, "dev", "team-a")
                    .as_deref(),
                expected,
                "{reads:?} with {:?}",
                tenancy.upstreams.grants
            );
        }
        assert_eq!(
            Tenancy::default()
                .upstream_refusal(
                    "spec.upstream",
                    "K8s",
                    &peer("prod", "billing", vec![]),
                    "dev",
                    "team-a"
                )
                .as_deref(),
            Some(
                "spec.upstream names context prod, namespace billing, which the engine's default \
                 tenancy does not allow: add {context: prod, namespaces: [billing]} to \
                 Settings.tenancy.upstreams.grants"
            )
        );
    }

    #[test]
    fn service_accounts_are_users() {
        let own = ServiceAccountRef {
            namespace: None,
            name: "deployer".into(),
        };
        let fixed = ServiceAccountRef {
            namespace: Some("comb-system".into()),
            name: "writer".into(),
        };
        assert_eq!(own.user("apps"), "system:serviceaccount:apps:deployer");
        assert_eq!(own.to_string(), "deployer");
        assert_eq!(
            fixed.user("apps"),
            "system:serviceaccount:comb-system:writer"
        );
        assert_eq!(fixed.to_string(), "comb-system/writer");
        let tenancy = Tenancy {
            service_account: Some(own),
            ..Tenancy::default()
        };
        assert_eq!(
            tenancy.writer("team").as_deref(),
            Some("system:serviceaccount:team:deployer")
        );
    }

    /// Attack 4 of issue 31: the source of a copy was read as the account of the Comb's own
    /// namespace, in another cluster where that namespace is another tenant's.
    #[test]
    fn sources_are_read_as_a_fixed_account_never_one_of_the_combs_namespace() {
        let per_namespace = ServiceAccountRef {
            namespace: None,
            name: "comb-writer".into(),
        };
        let fixed = |namespace: &str, name: &str| ServiceAccountRef {
            namespace: Some(namespace.into()),
            name: name.into(),
        };
        let tenancy =
            |writer: Option<ServiceAccountRef>, reader: Option<ServiceAccountRef>| Tenancy {
                service_account: writer,
                source_service_account: reader,
                ..layer(2, "dev", &[], &[])
            };
        let cases = [
            (tenancy(None, None), SourceReader::Controller),
            (
                tenancy(Some(fixed("comb-system", "dev-writer")), None),
                SourceReader::User("system:serviceaccount:comb-system:dev-writer".into()),
            ),
            (
                tenancy(
                    Some(per_namespace.clone()),
                    Some(fixed("comb-system", "dev-reader")),
                ),
                SourceReader::User("system:serviceaccount:comb-system:dev-reader".into()),
            ),
            (
                tenancy(Some(per_namespace), None),
                SourceReader::Unnamed(
                    "layer dev writes as serviceAccount comb-writer, an account in each Comb's \
                     own namespace, which names no account in the source's cluster; name the \
                     account that reads copies there as NAMESPACE/NAME in \
                     layers[2].sourceServiceAccount"
                        .into(),
                ),
            ),
        ];
        for (tenancy, expected) in cases {
            assert_eq!(tenancy.source_reader(), expected, "{tenancy:?}");
        }
    }

    /// Attack 2 of issue 31: endpoints for a Service the Comb does not render (kubectl's
    /// `payments`) would send part of its traffic where the Comb says.
    #[test]
    fn endpoints_only_for_the_combs_own_services() {
        let rendered = |manifests: Vec<Value>| -> Vec<(ManagedObject, Value)> {
            manifests
                .into_iter()
                .map(|manifest| (item(manifest.clone()), manifest))
                .collect()
        };
        let service =
            |name: &str| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}});
        let slice = |name: &str, service: &str| {
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}}})
        };
        let refusals = |manifests: Vec<Value>| {
            let items = rendered(manifests);
            let pairs: Vec<(ManagedObject, &Value)> = items
                .iter()
                .map(|(item, manifest)| (item.clone(), manifest))
                .collect();
            endpoint_refusals(&pairs)
        };
        assert!(
            refusals(vec![service("web"), slice("web-1", "web")]).is_empty(),
            "a bridge"
        );
        assert_eq!(
            refusals(vec![slice("payments-1", "payments")]),
            [
                "EndpointSlice payments-1 gives endpoints to Service payments, which this Comb does \
              not render before it; a Comb gives endpoints only to its own Services"
            ]
        );
        assert_eq!(
            refusals(vec![slice("web-1", "web"), service("web")]).len(),
            1,
            "the Service comes first, so that its apply decides whose it is"
        );
        assert_eq!(
            refusals(vec![
                json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "payments"}})
            ]),
            [
                "Endpoints payments gives endpoints to Service payments, which this Comb does not \
              render before it; a Comb gives endpoints only to its own Services"
            ]
        );
        let elsewhere = json!({"apiVersion": "v1", "kind": "Service",
                               "metadata": {"name": "web", "namespace": "other"}});
        assert_eq!(
            refusals(vec![elsewhere, slice("web-1", "web")]).len(),
            1,
            "another namespace"
        );
        assert!(
            refusals(vec![
                json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                                 "metadata": {"name": "loose"}})
            ])
            .is_empty(),
            "a slice of no Service feeds none"
        );
    }

    #[test]
    fn kinds_are_written_alone_when_the_name_says_the_group() {
        let cases = [
            (GroupKind::new("", "Namespace"), "Namespace"),
            (
                GroupKind::new("rbac.authorization.k8s.io", "ClusterRole"),
                "ClusterRole",
            ),
            (
                GroupKind::new("example.com", "ClusterWidget"),
                "example.com/ClusterWidget",
            ),
            (
                GroupKind::new("example.com", "ClusterRole"),
                "example.com/ClusterRole",
            ),
        ];
        for (kind, written) in cases {
            assert_eq!(kind.to_string(), written);
        }
    }
}
