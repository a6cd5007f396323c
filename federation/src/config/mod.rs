//! The federation configuration (DESIGN.md §6): where the layers are, how they borrow, and the
//! settings every Comb shares.
//!
//! [`Config::load`] reads and checks a file, reporting every bad value with its key
//! (`comb.yaml: layers[2].borrow.from: unknown layer "stagin" (layers: prod, staging, dev)`);
//! [`Config::client_pool`] opens the kubeconfig and checks the layers' contexts against it;
//! [`Config::locate`] finds the Comb a `[LAYER:][NAMESPACE/]NAME` reference names.

mod duration;
mod load;
pub use load::{check, check_pool, client_pool};
mod on_demand;
mod raw;
mod selector;
mod validate;

use std::path::PathBuf;
use std::time::Duration;

use comb_api::{
    Comb, CombRef, CombStatus, ConditionStatus, LabelKeys, UPSTREAM_FALLBACK, UpstreamSpec,
};
use comb_kubeconfigs::ClientPool;
use kube::Api;
use serde_json::{Map, Value, json};

pub use duration::{duration_arg, parse_duration, parse_positive_duration};
pub use on_demand::{
    Admitted, Refusal, RefusalReason, SECRET_CONTEXT_PREFIX, layer_from_template, secret_context,
};
pub use selector::matches_any;
pub use validate::{
    DEFAULT_CLUSTER_DOMAIN, DEFAULT_MANAGED_BY, DEFAULT_MAX_UPSTREAM_DEPTH, DEFAULT_RESYNC,
    KubeContext, Problem, check_contexts,
};

use crate::engine::borrow::{BorrowEnv, Candidate, Controlling, HealthPolicy};
use crate::engine::class::Settings;
use crate::engine::tenancy::{
    GroupKind, LayerScope, PolicyOrigin, ServiceAccountRef, Tenancy, UpstreamGrant, UpstreamPolicy,
};
use crate::error::{Error, Result};

/// A checked federation configuration. Build it with [`Config::load`] or [`Config::from_yaml`];
/// a hand-built one is checked again by [`Config::check`] (the controller does).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Where the configuration came from, as messages name it (a path, or `the configuration`).
    pub origin: String,
    /// The kubeconfig file; `None`: `$KUBECONFIG`, `~/.kube/config`, else in-cluster.
    pub kubeconfig: Option<PathBuf>,
    /// API group of the Comb CRD.
    pub group: String,
    /// Prefix of every label and annotation key, trailing `/` included.
    pub label_prefix: String,
    /// Value of `app.kubernetes.io/managed-by` on every resource; the controller watches by it.
    pub managed_by: String,
    pub max_upstream_depth: std::num::NonZeroUsize,
    pub cluster_domain: String,
    /// Every Comb is reconciled at least this often.
    pub resync: Duration,
    /// Highest first is customary but not required; borrowing defines the order.
    pub layers: Vec<Layer>,
    /// The kube context whose cluster holds the CombLayers; `None`: the first layer's.
    pub layer_context: Option<String>,
    /// What a CombLayer made from each may be (docs/adr/0005-layers-on-demand.md).
    pub layer_templates: Vec<LayerTemplate>,
}

/// `layerTemplates[]`: the administrator's word on what a layer made on demand may be. A
/// CombLayer names one and may only narrow it ([`layer_from_template`]).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerTemplate {
    pub name: String,
    /// Kube contexts of the controller's kubeconfig a layer from it may run in.
    pub contexts: Vec<String>,
    /// Secrets (in the `layerContext` cluster) holding a kubeconfig a layer from it may use.
    pub kubeconfig_secrets: Vec<SecretName>,
    /// Patterns (`*` any run) the layer's namespaces must match; at least one.
    pub namespaces: Vec<String>,
    /// The layers a layer from it may borrow from.
    pub borrow_from: Vec<String>,
    /// The entries its `borrow.fallback` may use.
    pub fallback: Vec<Candidate>,
    /// What its borrow may copy; none by default.
    pub replicate: Vec<Replicate>,
    /// Given to the layer as they are: a CombLayer has no say in them.
    pub allow_upstreams: Vec<AllowUpstream>,
    pub allow_namespaces: Vec<String>,
    pub allow_cluster_scoped: Vec<GroupKind>,
    pub service_account: Option<ServiceAccountRef>,
    pub source_service_account: Option<ServiceAccountRef>,
    /// The longest a layer from it lives, counted from now.
    pub max_ttl: Duration,
    /// How long a layer from it lives when its CombLayer says nothing.
    pub default_ttl: Duration,
    /// Whether comb creates the layer's namespaces that do not exist (and deletes those it
    /// created when the layer goes).
    pub create_namespaces: bool,
}

/// A Secret by `NAMESPACE/NAME`, as `kubeconfigSecrets` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SecretName {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for SecretName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The template a layer was made from: its name and its index in `layerTemplates`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateRef {
    pub name: String,
    pub index: usize,
}

/// One place Combs run: a kube context, optionally narrowed to namespaces.
#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    pub name: String,
    pub context: String,
    /// `None`: every namespace.
    pub namespaces: Option<Vec<String>>,
    /// The layer's say on upstreams (the reference's controlling code).
    pub borrow: Option<Borrow>,
    /// Patterns of the Combs built as their stub.
    pub stubs: Vec<String>,
    /// Namespaces besides its own that a Comb's namespaced manifests may land in.
    pub allow_namespaces: Vec<String>,
    /// The cluster-scoped Kinds a Comb may write (none by default).
    pub allow_cluster_scoped: Vec<GroupKind>,
    /// Whom comb impersonates for every write of a Comb's resources, and, when it names one
    /// fixed account (`NAMESPACE/NAME`), to read what a Comb replicates; `None`: itself.
    pub service_account: Option<ServiceAccountRef>,
    /// Whom comb impersonates to read what a Comb replicates, in the source's cluster
    /// (`NAMESPACE/NAME`); `None`: the `service_account` when it is fixed.
    pub source_service_account: Option<ServiceAccountRef>,
    /// Which upstreams a Comb's own `spec.upstream` may name besides a peer in its own context
    /// and namespace (none by default).
    pub allow_upstreams: Vec<AllowUpstream>,
    /// For a layer made from a CombLayer, its template; `None` for a layer of the file.
    pub template: Option<TemplateRef>,
}

/// `layers[].allowUpstreams[]`: peers a Comb's own `spec.upstream` may name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowUpstream {
    pub target: UpstreamTarget,
    /// The peers' namespaces; `None`: those the layer manages (`layer:`; all when it manages
    /// all), or any (`context:`).
    pub namespaces: Option<Vec<String>>,
    /// Whether a Comb may copy Secrets and ConfigMaps from there (`replicate`); default false.
    pub replicate: bool,
}

/// Where the peers an [`AllowUpstream`] allows run: the context of a layer, or a kube context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamTarget {
    Layer(String),
    Context(String),
}

/// `layers[].borrow`: which Combs of the layer borrow from their peer in another layer.
#[derive(Clone, Debug, PartialEq)]
pub struct Borrow {
    /// The layer borrowed from.
    pub from: String,
    /// The peer's namespace; `None`: the Comb's own.
    pub namespace: Option<String>,
    /// Patterns of the Combs that borrow (default `*`).
    pub combs: Vec<String>,
    /// Patterns of the Combs that run locally whatever their CR says.
    pub local: Vec<String>,
    /// Objects copied from the peer's namespace while borrowing.
    pub replicate: Vec<Replicate>,
    /// Where the borrowers go while the layer borrowed from is unhealthy; `None`: nowhere.
    pub fallback: Option<Fallback>,
}

/// `borrow.fallback` with its timing (issue 22): the entries a borrower moves to, in order,
/// while the layer it borrows from is unhealthy, and when it counts as unhealthy and healthy.
#[derive(Clone, Debug, PartialEq)]
pub struct Fallback {
    /// Layers further up the chain than `borrow.from`, and/or `local` (last).
    pub to: Vec<Candidate>,
    pub policy: HealthPolicy,
    /// How the addresses the bridge uses are looked at besides the API and the peer's status.
    pub probe: Option<Probe>,
}

/// `borrow.probe`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// A TCP connect to each address the bridge uses, from the controller.
    Tcp,
}

/// One object replicated from the upstream's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replicate {
    pub kind: ReplicateKind,
    pub name: String,
}

/// The kinds that may be replicated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicateKind {
    Secret,
    ConfigMap,
}

impl ReplicateKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicateKind::Secret => "Secret",
            ReplicateKind::ConfigMap => "ConfigMap",
        }
    }
}

/// What a layer's configuration says about one Comb's upstream.
#[derive(Clone, Debug, PartialEq)]
pub enum BorrowDecision<'a> {
    /// Borrow from the peer `namespace/name` in layer `from`.
    Borrow {
        from: &'a Layer,
        namespace: String,
        name: String,
        replicate: &'a [Replicate],
    },
    /// Run locally whatever the CR says (`borrow.local`).
    Local,
    /// The layer has no say; the CR or the class decides.
    NoSay,
}

impl Layer {
    /// Layer `name` of `context` over `namespaces` (`None`: every one), with no borrow, stubs,
    /// allowances nor service accounts.
    pub fn plain(name: &str, context: &str, namespaces: Option<Vec<String>>) -> Layer {
        Layer {
            name: name.to_string(),
            context: context.to_string(),
            namespaces,
            borrow: None,
            stubs: Vec::new(),
            allow_namespaces: Vec::new(),
            allow_cluster_scoped: Vec::new(),
            service_account: None,
            source_service_account: None,
            allow_upstreams: Vec::new(),
            template: None,
        }
    }

    /// Whether the layer manages Combs in `namespace`.
    pub fn manages(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|namespaces| namespaces.iter().any(|n| n == namespace))
    }

    /// What the layer says about the upstream of Comb `namespace/name`.
    pub fn borrow_decision<'a>(
        &'a self,
        config: &'a Config,
        namespace: &str,
        name: &str,
    ) -> BorrowDecision<'a> {
        let Some(borrow) = &self.borrow else {
            return BorrowDecision::NoSay;
        };
        if matches_any(&borrow.local, namespace, name) {
            return BorrowDecision::Local;
        }
        match config.layer(&borrow.from) {
            Some(from) if matches_any(&borrow.combs, namespace, name) => BorrowDecision::Borrow {
                from,
                namespace: borrow
                    .namespace
                    .clone()
                    .unwrap_or_else(|| namespace.to_string()),
                name: name.to_string(),
                replicate: &borrow.replicate,
            },
            _ => BorrowDecision::NoSay,
        }
    }

    /// Whether Combs of this layer may get copies of Secrets or ConfigMaps: its `borrow`
    /// replicates, or an `allowUpstreams` entry lets `spec.upstream` replicate.
    pub fn replicates(&self) -> bool {
        self.borrow
            .as_ref()
            .is_some_and(|borrow| !borrow.replicate.is_empty())
            || self.allow_upstreams.iter().any(|allowed| allowed.replicate)
    }

    /// Whether Comb `namespace/name` is built as its stub in this layer.
    pub fn stubs_comb(&self, namespace: &str, name: &str) -> bool {
        matches_any(&self.stubs, namespace, name)
    }
}

impl BorrowDecision<'_> {
    /// The decision as an upstream answer: a K8s upstream with the other layer's context, an
    /// explicit local (`Some(None)`), or no say (`None`).
    pub fn upstream_spec(&self) -> Option<Option<Map<String, Value>>> {
        match self {
            BorrowDecision::Borrow {
                from,
                namespace,
                name,
                replicate,
            } => Some(Some(peer_spec(from, namespace, name, replicate))),
            BorrowDecision::Local => Some(None),
            BorrowDecision::NoSay => None,
        }
    }
}

/// The K8s upstream of peer `namespace/name` in layer `from`, copying `replicate`.
fn peer_spec(
    from: &Layer,
    namespace: &str,
    name: &str,
    replicate: &[Replicate],
) -> Map<String, Value> {
    let mut spec = Map::new();
    spec.insert("class".into(), json!("K8s"));
    spec.insert("context".into(), json!(from.context));
    spec.insert("namespace".into(), json!(namespace));
    spec.insert("name".into(), json!(name));
    if !replicate.is_empty() {
        let items: Vec<Value> = replicate
            .iter()
            .map(|item| json!({"kind": item.kind.as_str(), "name": item.name}))
            .collect();
        spec.insert("replicate".into(), Value::Array(items));
    }
    spec
}

impl Config {
    /// The kube context whose cluster holds the CombLayers: `layerContext`, else the first
    /// layer's (where the leader Lease is too).
    pub fn layer_context(&self) -> Option<&str> {
        self.layer_context
            .as_deref()
            .or_else(|| self.layers.first().map(|layer| layer.context.as_str()))
    }

    /// The layer template named `name`, with its index.
    pub fn template(&self, name: &str) -> Option<(usize, &LayerTemplate)> {
        self.layer_templates
            .iter()
            .enumerate()
            .find(|(_, template)| template.name == name)
    }

    /// The layer named `name`.
    pub fn layer(&self, name: &str) -> Option<&Layer> {
        self.layers.iter().find(|layer| layer.name == name)
    }

    /// The layers that borrow from layer `name`.
    pub fn borrowers_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Layer> + 'a {
        self.layers.iter().filter(move |layer| {
            layer
                .borrow
                .as_ref()
                .is_some_and(|borrow| borrow.from == name)
        })
    }

    /// The layers `name` borrows from, directly or through others, nearest first.
    pub fn chain_above(&self, name: &str) -> Vec<&Layer> {
        let mut chain: Vec<&Layer> = Vec::new();
        let mut at = self.layer(name);
        while let Some(next) = at
            .and_then(|layer| layer.borrow.as_ref())
            .and_then(|borrow| self.layer(&borrow.from))
        {
            // A checked configuration has no cycle; a hand-built one ends here.
            if next.name == name || chain.iter().any(|seen| seen.name == next.name) {
                break;
            }
            chain.push(next);
            at = Some(next);
        }
        chain
    }

    /// The fallback chain of Comb `namespace/name` in `layer`: its preferred layer, then the
    /// entries of the borrow's `fallback`, with the borrow's fallback settings. `None` when the
    /// layer's borrow has no fallback or does not take this Comb.
    pub fn fallback_of<'a>(
        &'a self,
        layer: &'a Layer,
        namespace: &str,
        name: &str,
    ) -> Option<(Vec<Candidate>, &'a Fallback)> {
        let fallback = layer.borrow.as_ref()?.fallback.as_ref()?;
        let BorrowDecision::Borrow { from, .. } = layer.borrow_decision(self, namespace, name)
        else {
            return None;
        };
        let candidates = std::iter::once(Candidate::Layer(from.name.clone()))
            .chain(fallback.to.iter().cloned())
            .collect();
        Some((candidates, fallback))
    }

    /// Where the peer of Comb `namespace/name` of `layer` is in layer `target`, further up its
    /// chain: that layer and the peer's namespace, each hop's `borrow.namespace` (else the
    /// namespace so far) taken on the way. `None` when `target` is not on the chain.
    pub fn peer_up_the_chain(
        &self,
        layer: &Layer,
        namespace: &str,
        target: &str,
    ) -> Option<(&Layer, String)> {
        let mut namespace = namespace.to_string();
        let mut at = layer;
        for next in self.chain_above(&layer.name) {
            if let Some(hop) = at
                .borrow
                .as_ref()
                .and_then(|borrow| borrow.namespace.clone())
            {
                namespace = hop;
            }
            if next.name == target {
                return Some((next, namespace));
            }
            at = next;
        }
        None
    }

    /// The entry of `candidates` (a chain of [`Config::fallback_of`] for a Comb of `layer`) that a
    /// recorded status shows in use: with its `UpstreamFallback` condition True, the fallback
    /// layer whose context its upstream record names (or `local` without an upstream record);
    /// else the preferred one. A status written before the configuration changed may name
    /// neither: the preferred one then.
    pub fn recorded_entry(&self, candidates: &[Candidate], status: Option<&CombStatus>) -> usize {
        let on_fallback = status
            .and_then(|status| status.condition(UPSTREAM_FALLBACK))
            .is_some_and(|condition| condition.status == ConditionStatus::True);
        if !on_fallback {
            return 0;
        }
        let context = status
            .and_then(|status| status.upstream.as_ref())
            .and_then(|upstream| upstream.context.as_deref());
        candidates
            .iter()
            .enumerate()
            .skip(1)
            .find(|(_, candidate)| match (candidate, context) {
                (Candidate::Layer(name), Some(context)) => self
                    .layer(name)
                    .is_some_and(|layer| layer.context == context),
                (Candidate::Local, None) => true,
                _ => false,
            })
            .map_or(0, |(index, _)| index)
    }

    /// The controlling code's answer for Comb `namespace/name` of `layer` on entry `candidate` of
    /// its fallback chain: borrow from the peer in that layer (the preferred one answers as
    /// [`Config::controlling`] does), or run locally.
    pub fn controlling_on(
        &self,
        layer: &Layer,
        namespace: &str,
        name: &str,
        candidate: &Candidate,
    ) -> Controlling {
        let preferred = layer.borrow.as_ref().map(|borrow| borrow.from.as_str());
        let source = format!("borrow.fallback of layer {}", layer.name);
        match candidate {
            Candidate::Layer(target) if Some(target.as_str()) == preferred => {
                self.controlling(layer, namespace, name)
            }
            Candidate::Layer(target) => {
                let Some((from, namespace)) = self.peer_up_the_chain(layer, namespace, target)
                else {
                    return self.controlling(layer, namespace, name);
                };
                if let Some(refusal) =
                    self.outside_the_source(&source, layer, from, &namespace, name)
                {
                    return Controlling::refused(source, refusal);
                }
                let replicate = layer
                    .borrow
                    .as_ref()
                    .map(|borrow| borrow.replicate.as_slice())
                    .unwrap_or_default();
                Controlling::new(
                    source,
                    UpstreamSpec::Declared(peer_spec(from, &namespace, name, replicate)),
                )
            }
            Candidate::Local => Controlling::new(source, UpstreamSpec::Local),
        }
    }

    /// [`Config::controlling`] as the Comb's recorded `status` shows it: on a fallback of its
    /// layer's chain, the entry in use (what the CLI reads and renders; the controller knows the
    /// chain itself).
    pub fn controlling_as_recorded(
        &self,
        layer: &Layer,
        namespace: &str,
        name: &str,
        status: Option<&CombStatus>,
    ) -> Controlling {
        match self.fallback_of(layer, namespace, name) {
            Some((candidates, _)) => {
                let entry = self.recorded_entry(&candidates, status);
                self.controlling_on(layer, namespace, name, &candidates[entry])
            }
            None => self.controlling(layer, namespace, name),
        }
    }

    /// The controlling code's answer about the upstream of Comb `namespace/name` in `layer`
    /// (reference §5.1, the first source): borrow from the peer, run locally, or no say.
    pub fn controlling(&self, layer: &Layer, namespace: &str, name: &str) -> Controlling {
        let decision = layer.borrow_decision(self, namespace, name);
        let source = format!("the borrow of layer {}", layer.name);
        if let BorrowDecision::Borrow {
            from,
            namespace: peer_namespace,
            ..
        } = &decision
            && let Some(refusal) =
                self.outside_the_source(&source, layer, from, peer_namespace, name)
        {
            return Controlling::refused(source, refusal);
        }
        match decision.upstream_spec() {
            Some(Some(spec)) => Controlling::new(source, UpstreamSpec::Declared(spec)),
            Some(None) => Controlling::new(
                format!("borrow.local of layer {}", layer.name),
                UpstreamSpec::Local,
            ),
            None => Controlling::none(),
        }
    }

    /// Why `source` (a borrow of `layer`) may not borrow the peer `peer_namespace/name` from
    /// layer `from`: the namespace is not one `from` manages. A borrow stays inside its source
    /// layer: the peer's namespace, given by `borrow.namespace` or the Comb's own, is where a
    /// Comb's author may point it (a layer of every namespace lets anyone make a namespace of
    /// any name), and outside `from`'s namespaces it reaches another tenant's Combs and
    /// Secrets. `None` when it stays inside. The status, `comb check` and the webhook say this
    /// sentence.
    pub fn outside_the_source(
        &self,
        source: &str,
        layer: &Layer,
        from: &Layer,
        peer_namespace: &str,
        name: &str,
    ) -> Option<String> {
        if from.manages(peer_namespace) {
            return None;
        }
        let index = self
            .layers
            .iter()
            .position(|candidate| candidate.name == layer.name)
            .unwrap_or(self.layers.len());
        Some(format!(
            "{source} names Comb {peer_namespace}/{name} in layer {}, which manages namespaces {} \
             only: a borrow stays inside the namespaces of the layer it borrows from (set \
             layers[{index}].borrow.namespace to one of them, or narrow layers[{index}].namespaces)",
            from.name,
            from.namespaces.as_deref().unwrap_or_default().join(", ")
        ))
    }

    /// What the engine needs to borrow for the Combs of `layer`: the pool, the layer's context,
    /// every layer's context by name, and the built-in upstream classes.
    pub fn borrow_env(&self, pool: &ClientPool, layer: &Layer) -> BorrowEnv {
        let mut env = BorrowEnv::new(pool.clone(), layer.context.clone());
        env.layers = self
            .layers
            .iter()
            .map(|layer| (layer.name.clone(), layer.context.clone()))
            .collect();
        env
    }

    /// The label and annotation keys of `labelPrefix`.
    pub fn label_keys(&self) -> LabelKeys {
        LabelKeys::new(&self.label_prefix)
    }

    /// The engine's settings for the Combs of `layer` (group, labels, managed-by, upstream
    /// depth, cluster domain, and the layer's tenancy).
    pub fn settings(&self, layer: &Layer) -> Settings {
        Settings {
            group: self.group.clone(),
            labels: self.label_keys(),
            managed_by: self.managed_by.clone(),
            max_upstream_depth: self.max_upstream_depth,
            cluster_domain: self.cluster_domain.clone(),
            tenancy: self.tenancy(layer),
        }
    }

    /// What the Combs of `layer` may write and as whom; refusals name the layer and its key.
    pub fn tenancy(&self, layer: &Layer) -> Tenancy {
        // Layer names are unique in a checked configuration, so the position is the layer's.
        let index = self
            .layers
            .iter()
            .position(|candidate| candidate.name == layer.name)
            .unwrap_or(self.layers.len());
        let origin = match &layer.template {
            Some(template) => PolicyOrigin::Template {
                layer: layer.name.clone(),
                template: template.name.clone(),
                index: template.index,
            },
            None => PolicyOrigin::Layer {
                name: layer.name.clone(),
                index,
            },
        };
        Tenancy {
            origin,
            allow_namespaces: layer.allow_namespaces.clone(),
            allow_cluster_scoped: layer.allow_cluster_scoped.clone(),
            service_account: layer.service_account.clone(),
            source_service_account: layer.source_service_account.clone(),
            upstreams: UpstreamPolicy {
                grants: layer
                    .allow_upstreams
                    .iter()
                    .filter_map(|allowed| self.upstream_grant(allowed))
                    .collect(),
                layers: self
                    .layers
                    .iter()
                    .map(|layer| LayerScope {
                        name: layer.name.clone(),
                        context: layer.context.clone(),
                        namespaces: layer.namespaces.clone(),
                    })
                    .collect(),
            },
        }
    }

    /// An `allowUpstreams` entry with its layer resolved: that layer's context, and its
    /// namespaces unless the entry names some. `None` for a layer that does not exist (a
    /// checked configuration has none).
    fn upstream_grant(&self, allowed: &AllowUpstream) -> Option<UpstreamGrant> {
        let (context, namespaces) = match &allowed.target {
            UpstreamTarget::Context(context) => (context.clone(), allowed.namespaces.clone()),
            UpstreamTarget::Layer(name) => {
                let layer = self.layer(name)?;
                let namespaces = allowed
                    .namespaces
                    .clone()
                    .or_else(|| layer.namespaces.clone());
                (layer.context.clone(), namespaces)
            }
        };
        Some(UpstreamGrant {
            context,
            namespaces,
            replicate: allowed.replicate,
        })
    }

    /// Where a reference may point, without asking any cluster: the named layer (or every
    /// layer), each with the reference's namespace, else the layer's only namespace, else the
    /// context's default namespace (`default_namespace`). Layers that do not manage that
    /// namespace are left out; naming such a layer explicitly is an error.
    pub fn candidates(
        &self,
        reference: &CombRef,
        default_namespace: impl Fn(&Layer) -> String,
    ) -> Result<Vec<CombLocation>> {
        let layers: Vec<&Layer> = match &reference.layer {
            Some(name) => vec![self.layer(name).ok_or_else(|| {
                Error::Config(format!(
                    "{reference}: unknown layer \"{name}\" (layers: {})",
                    self.layers
                        .iter()
                        .map(|layer| layer.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?],
            None => self.layers.iter().collect(),
        };
        let mut found = Vec::new();
        for layer in layers {
            let namespace = match (&reference.namespace, &layer.namespaces) {
                (Some(namespace), _) => namespace.clone(),
                (None, Some(only)) if only.len() == 1 => only[0].clone(),
                (None, _) => default_namespace(layer),
            };
            if layer.manages(&namespace) {
                found.push(CombLocation {
                    layer: layer.name.clone(),
                    context: layer.context.clone(),
                    namespace,
                    name: reference.name.clone(),
                });
            } else if reference.layer.is_some() {
                return Err(Error::Config(format!(
                    "{reference}: layer {} manages namespaces {} only, not {namespace}",
                    layer.name,
                    layer.namespaces.as_deref().unwrap_or_default().join(", ")
                )));
            }
        }
        if found.is_empty() {
            return Err(Error::Config(format!(
                "{reference}: no layer manages namespace {}",
                reference.namespace.as_deref().unwrap_or("(default)")
            )));
        }
        Ok(found)
    }

    /// The Comb a reference names, read from its layer. Without a layer every layer is searched,
    /// and the reference must be found in exactly one.
    pub async fn locate(&self, pool: &ClientPool, reference: &CombRef) -> Result<LocatedComb> {
        let candidates = self.candidates(reference, |layer| {
            pool.default_namespace(&layer.context)
                .unwrap_or_else(|_| "default".to_string())
        })?;
        let mut found = Vec::new();
        let mut unreachable = Vec::new();
        for location in candidates {
            match self.read_comb(pool, &location).await {
                Ok(Some(comb)) => found.push(LocatedComb { location, comb }),
                Ok(None) => {}
                Err(error) if reference.layer.is_some() => return Err(error),
                Err(error) => unreachable.push(format!("{}: {error}", location.layer)),
            }
        }
        match found.len() {
            1 => Ok(found.remove(0)),
            0 if unreachable.is_empty() => Err(Error::Config(format!(
                "{reference}: no such Comb in {}",
                self.describe_search(reference)
            ))),
            0 => Err(Error::Config(format!(
                "{reference}: not found where the layers could be read, and {}",
                unreachable.join("; ")
            ))),
            _ => Err(Error::Config(format!(
                "{reference} names a Comb in more than one layer ({}); name the layer, e.g. {}",
                found
                    .iter()
                    .map(|found| found.location.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                found[0].location
            ))),
        }
    }

    fn describe_search(&self, reference: &CombRef) -> String {
        match &reference.layer {
            Some(layer) => format!("layer {layer}"),
            None => format!(
                "any layer ({})",
                self.layers
                    .iter()
                    .map(|layer| layer.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    async fn read_comb(&self, pool: &ClientPool, location: &CombLocation) -> Result<Option<Comb>> {
        let client = pool
            .client(&location.context)
            .await
            .map_err(|source| Error::Kubeconfig {
                what: format!("reading the Comb {}/{}", location.namespace, location.name),
                source,
            })?;
        let api: Api<Comb> = Api::namespaced_with(
            client,
            &location.namespace,
            &comb_api::api_resource(&self.group),
        );
        api.get_opt(&location.name)
            .await
            .map_err(|error| Error::kube(format!("get Comb {location}"), error))
    }
}

/// Where one Comb lives: layer, its context, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CombLocation {
    pub layer: String,
    pub context: String,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for CombLocation {
    /// `layer:namespace/name`, a reference that names it exactly.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}/{}", self.layer, self.namespace, self.name)
    }
}

/// A Comb found by [`Config::locate`], with its CR as read.
#[derive(Clone, Debug)]
pub struct LocatedComb {
    pub location: CombLocation,
    pub comb: Comb,
}

#[cfg(test)]
mod tests;
