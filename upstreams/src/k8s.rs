//! `Kubernetes::Comb::Upstream::K8s` (reference §5.4): the peer Comb in another kube context.
//!
//! It reads the peer's custom resource and nothing else (`get` on `combs`), through the pool's
//! client for the peer's context, unless a watch already holds it ([`UpstreamContext::peers`]:
//! the federation controller's layers), which answers without a request. Every Comb publishes its already-resolved endpoints, so a chain
//! of any depth works without a layer knowing more than its own upstream, and `via` grows one
//! context per hop. Unreachable peers are `reachable: false`, never an error.

use std::time::Duration;

use async_trait::async_trait;
use comb_api::names::{namespace_problem, object_name_problem};
use comb_api::{Comb, CombEndpoint, CombStatus, Endpoint, ManagedObject};
use kube::Api;
use serde_json::{Map, Value};
use tokio::sync::OnceCell;

use crate::args::Args;
use crate::error::{Error, Result};
use crate::replicate::{Replica, parse_replicas, replicate};
use crate::upstream::{PeerReads, Reads, Upstream, UpstreamContext, UpstreamStatus};
use comb_kubeconfigs::describe_error;

/// The canonical class name.
pub const K8S_CLASS: &str = "Kubernetes::Comb::Upstream::K8s";

/// How long reading the peer may take. A peer that does not answer in time is unreachable: a
/// hung or refusing API server (the client retries 429/503/504 with backoff for minutes) must not
/// hold up the borrowing Comb's step.
pub const PEER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The peer Comb `namespace/name` (default: the borrowing Comb's own) in kube context `context`.
///
/// An instance reads its peer once, on the first question, and answers `status` and `endpoints`
/// from that one read: they describe the same moment, at the cost of one request. Resolution
/// builds a fresh instance for every reconcile step.
#[derive(Debug)]
pub struct K8s {
    context: String,
    namespace: Option<String>,
    name: Option<String>,
    replicas: Vec<Replica>,
    peer: OnceCell<PeerView>,
}

/// What one read of the peer found.
#[derive(Clone, Debug, PartialEq)]
enum PeerView {
    /// The peer cannot be used; the message says why.
    Failed(String),
    Read {
        /// `Comb <ns>/<name> in context <ctx>`.
        place: String,
        /// Whether the peer's context talks to the Comb's own API server.
        same_server: bool,
        /// The peer's recorded status (empty when it has not reconciled yet).
        status: Box<CombStatus>,
    },
}

impl K8s {
    /// The peer of the same name and namespace in kube context `context`.
    pub fn new(context: impl Into<String>) -> K8s {
        K8s {
            context: context.into(),
            namespace: None,
            name: None,
            replicas: Vec::new(),
            peer: OnceCell::new(),
        }
    }

    /// The same upstream with the peer in `namespace`.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> K8s {
        self.namespace = Some(namespace.into());
        self
    }

    /// The same upstream with the peer named `name`.
    pub fn with_name(mut self, name: impl Into<String>) -> K8s {
        self.name = Some(name.into());
        self
    }

    /// The same upstream copying `replicas` into the Comb's namespace while borrowing.
    pub fn with_replicas(mut self, replicas: Vec<Replica>) -> K8s {
        self.replicas = replicas;
        self
    }

    /// The kube context of the peer.
    pub fn context(&self) -> &str {
        &self.context
    }

    /// Builds it from constructor arguments (`spec.upstream` without `class`): `context`, or
    /// `layer` naming a layer of `ctx.layers`; `namespace` and `name` of the peer; `replicate`
    /// (`[{kind: Secret|ConfigMap, name}]`).
    pub fn from_args(args: &Map<String, Value>, ctx: &UpstreamContext) -> Result<K8s> {
        let args = Args::new(
            K8S_CLASS,
            args,
            &["context", "layer", "name", "namespace", "replicate"],
        )?;
        let context = match (args.string("context")?, args.string("layer")?) {
            (Some(_), Some(_)) => {
                return Err(Error::Resolve(format!(
                    "{K8S_CLASS}: context and layer both name the peer's context, give one"
                )));
            }
            (Some(context), None) => context,
            (None, Some(layer)) => ctx.layers.get(&layer).cloned().ok_or_else(|| {
                let known: Vec<&str> = ctx.layers.keys().map(String::as_str).collect();
                let layers = if known.is_empty() {
                    "no layers are configured here, give a context".to_string()
                } else {
                    format!("layers: {}", known.join(", "))
                };
                Error::Resolve(format!("{K8S_CLASS}: there is no layer {layer} ({layers})"))
            })?,
            (None, None) => {
                return Err(Error::Resolve(format!(
                    "{K8S_CLASS}: context is required (or layer, naming a layer)"
                )));
            }
        };
        let mut upstream = K8s::new(context);
        upstream.namespace = args.string("namespace")?;
        upstream.name = args.string("name")?;
        // Both go into the path of the request that reads the peer.
        let problems = [
            (
                "namespace",
                upstream.namespace.as_deref().and_then(namespace_problem),
            ),
            (
                "name",
                upstream
                    .name
                    .as_deref()
                    .and_then(|name| object_name_problem("", name)),
            ),
        ];
        if let Some((key, Some(problem))) = problems.into_iter().find(|(_, p)| p.is_some()) {
            return Err(Error::Resolve(format!("{K8S_CLASS}: {key}: {problem}")));
        }
        if let Some(items) = args.array("replicate")? {
            upstream.replicas = parse_replicas(K8S_CLASS, items)?;
        }
        Ok(upstream)
    }

    fn peer_namespace<'a>(&'a self, ctx: &'a UpstreamContext) -> &'a str {
        self.namespace.as_deref().unwrap_or(&ctx.namespace)
    }

    async fn view(&self, ctx: &UpstreamContext) -> &PeerView {
        self.peer.get_or_init(|| self.read_peer(ctx)).await
    }

    /// Reads the peer (reference `_observe`); every problem becomes [`PeerView::Failed`].
    async fn read_peer(&self, ctx: &UpstreamContext) -> PeerView {
        let namespace = self.peer_namespace(ctx);
        let name = self.name.as_deref().unwrap_or(&ctx.name);
        let place = format!("Comb {namespace}/{name} in context {}", self.context);
        let failed = |error: String| PeerView::Failed(format!("reading {place} failed: {error}"));
        // Same API server detection by URL string equality, as the kubeconfig writes them.
        let same_server = match (
            ctx.pool.server_url(&self.context),
            ctx.pool.server_url(&ctx.context),
        ) {
            (Ok(peer), Ok(own)) => peer == own,
            (Err(error), _) | (_, Err(error)) => return failed(error.to_string()),
        };
        if same_server && namespace == ctx.namespace && name == ctx.name {
            return PeerView::Failed(format!("{place} is this Comb itself"));
        }
        // A watch that holds the peer answers without a request (its changes wake the Comb).
        if let Some(peer) = ctx
            .peers
            .as_ref()
            .and_then(|peers| peers.peer(&self.context, namespace, name))
        {
            return PeerView::Read {
                place,
                same_server,
                status: Box::new(peer.status.unwrap_or_default()),
            };
        }
        let client = match ctx.pool.client(&self.context).await {
            Ok(client) => client,
            Err(error) => return failed(error.to_string()),
        };
        let combs: Api<Comb> =
            Api::namespaced_with(client, namespace, &comb_api::api_resource(&ctx.group));
        match tokio::time::timeout(PEER_READ_TIMEOUT, combs.get(name)).await {
            Ok(Ok(peer)) => PeerView::Read {
                place,
                same_server,
                status: Box::new(peer.status.unwrap_or_default()),
            },
            Ok(Err(error)) => failed(describe_error(&error)),
            Err(_) => failed(format!("no answer within {}s", PEER_READ_TIMEOUT.as_secs())),
        }
    }
}

/// The address of a published peer endpoint usable from here: on the same API server its
/// `cluster` address (else `external`), from another one only `external`.
pub fn usable_address(same_server: bool, endpoint: &CombEndpoint) -> Option<&str> {
    if same_server {
        present(&endpoint.cluster).or_else(|| present(&endpoint.external))
    } else {
        present(&endpoint.external)
    }
}

fn present(address: &Option<String>) -> Option<&str> {
    address.as_deref().filter(|text| !text.is_empty())
}

/// The status of the peer as this Comb sees it.
fn status_of(context: &str, view: &PeerView) -> UpstreamStatus {
    match view {
        PeerView::Failed(message) => UpstreamStatus {
            reachable: false,
            phase: None,
            via: Some(vec![context.to_string()]),
            context: Some(context.to_string()),
            message: Some(message.clone()),
            reason: None,
        },
        PeerView::Read {
            place,
            same_server,
            status,
        } => {
            let mut via = vec![context.to_string()];
            via.extend(
                status
                    .upstream
                    .as_ref()
                    .and_then(|upstream| upstream.via.clone())
                    .unwrap_or_default(),
            );
            let unusable: Vec<&str> = status
                .endpoint_list()
                .iter()
                .filter(|endpoint| usable_address(*same_server, endpoint).is_none())
                .map(|endpoint| endpoint.name.as_str())
                .collect();
            let message = (!unusable.is_empty()).then(|| {
                let why = if *same_server {
                    format!("{place} publishes none")
                } else {
                    format!(
                        "context {context} is another API server, and {place} publishes no external address"
                    )
                };
                format!(
                    "no address reachable from here for endpoint(s) {}: {why}",
                    unusable.join(", ")
                )
            });
            UpstreamStatus {
                reachable: true,
                phase: status.phase.clone(),
                via: Some(via),
                context: Some(context.to_string()),
                message,
                reason: status.ready().and_then(|ready| ready.reason.clone()),
            }
        }
    }
}

/// One endpoint per published endpoint that has a usable address: that address as `cluster`,
/// the peer's `external` kept.
fn endpoints_of(view: &PeerView) -> Result<Vec<Endpoint>> {
    let (same_server, status) = match view {
        PeerView::Failed(message) => return Err(Error::Unreachable(message.clone())),
        PeerView::Read {
            same_server,
            status,
            ..
        } => (*same_server, status),
    };
    status
        .endpoint_list()
        .iter()
        .filter_map(|published| {
            let address = usable_address(same_server, published)?;
            Some(
                Endpoint::new(&published.name, published.port)
                    .map_err(|error| Error::Answer(error.to_string()))
                    .map(|endpoint| {
                        let mut endpoint = endpoint.with_cluster(address);
                        if let Some(protocol) = &published.protocol {
                            endpoint = endpoint.with_protocol(protocol.clone());
                        }
                        if let Some(external) = &published.external {
                            endpoint = endpoint.with_external(external.clone());
                        }
                        endpoint
                    }),
            )
        })
        .collect()
}

#[async_trait]
impl Upstream for K8s {
    fn class_name(&self) -> &str {
        K8S_CLASS
    }

    async fn status(&self, ctx: &UpstreamContext) -> Result<UpstreamStatus> {
        Ok(status_of(&self.context, self.view(ctx).await))
    }

    async fn endpoints(&self, ctx: &UpstreamContext) -> Result<Vec<Endpoint>> {
        endpoints_of(self.view(ctx).await)
    }

    async fn replicate_into(&self, ctx: &UpstreamContext) -> Result<Vec<ManagedObject>> {
        replicate(ctx, &self.context, self.peer_namespace(ctx), &self.replicas).await
    }

    fn reads(&self, ctx: &UpstreamContext) -> Reads {
        Reads::Peer(PeerReads {
            context: self.context.clone(),
            namespace: self.peer_namespace(ctx).to_string(),
            replicas: self.replicas.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::context;
    use comb_api::CombUpstreamStatus;
    use serde_json::json;

    /// A watch holding one peer.
    #[derive(Debug)]
    struct Watched(Comb);

    impl crate::PeerCombs for Watched {
        fn peer(&self, context: &str, namespace: &str, name: &str) -> Option<Comb> {
            (context == "prod" && namespace == "platform" && name == "db").then(|| self.0.clone())
        }
    }

    #[tokio::test]
    async fn a_watched_peer_is_answered_without_a_request() {
        // The test contexts' servers do not answer: only the watch can.
        let mut peer = Comb::new(
            comb_api::DEFAULT_GROUP,
            "platform",
            "db",
            comb_api::CombSpec::of_class("Manifests"),
        );
        peer.status = Some(
            serde_json::from_value(json!({"phase": "Running", "endpoints": [
                {"name": "pg", "port": 5432, "external": "192.0.2.10:5432"}]}))
            .unwrap(),
        );
        let mut ctx = context();
        ctx.peers = Some(std::sync::Arc::new(Watched(peer)));
        let upstream = K8s::new("prod");
        let status = upstream.status(&ctx).await.unwrap();
        assert!(status.reachable, "{status:?}");
        assert_eq!(status.phase, Some("Running".into()));
        let endpoints = upstream.endpoints(&ctx).await.unwrap();
        assert_eq!(endpoints[0].cluster(), Some("192.0.2.10:5432"));
        // A peer the watch does not hold is read from its server (here: unreachable).
        let elsewhere = K8s::new("prod").with_name("other");
        let status = elsewhere.status(&ctx).await.unwrap();
        assert!(!status.reachable, "{status:?}");
    }

    fn published(name: &str, cluster: Option<&str>, external: Option<&str>) -> CombEndpoint {
        CombEndpoint {
            name: name.to_string(),
            protocol: Some("tcp".to_string()),
            port: 5432,
            cluster: cluster.map(str::to_string),
            external: external.map(str::to_string),
        }
    }

    fn read(same_server: bool, status: Value) -> PeerView {
        PeerView::Read {
            place: "Comb platform/db in context prod".into(),
            same_server,
            status: Box::new(serde_json::from_value(status).unwrap()),
        }
    }

    #[test]
    fn addresses_on_the_same_server_prefer_cluster_else_only_external() {
        let both = published("a", Some("db.platform.svc:5432"), Some("192.0.2.10:5432"));
        let cluster_only = published("a", Some("db.platform.svc:5432"), None);
        let external_only = published("a", None, Some("192.0.2.10:5432"));
        let empty = published("a", Some(""), Some(""));
        let cases = [
            (true, &both, Some("db.platform.svc:5432")),
            (true, &cluster_only, Some("db.platform.svc:5432")),
            (true, &external_only, Some("192.0.2.10:5432")),
            (true, &empty, None),
            (false, &both, Some("192.0.2.10:5432")),
            (false, &cluster_only, None),
            (false, &external_only, Some("192.0.2.10:5432")),
            (false, &empty, None),
        ];
        for (same, endpoint, want) in cases {
            assert_eq!(usable_address(same, endpoint), want, "{same} {endpoint:?}");
        }
    }

    #[test]
    fn via_is_this_context_then_the_peers() {
        let chain = read(
            true,
            json!({"phase": "Running", "upstream": {"via": ["prod", "vendor"]}}),
        );
        assert_eq!(
            status_of("staging", &chain),
            UpstreamStatus {
                reachable: true,
                phase: Some("Running".into()),
                via: Some(vec!["staging".into(), "prod".into(), "vendor".into()]),
                context: Some("staging".into()),
                message: None,
                reason: None,
            }
        );
        let local_peer = read(true, json!({"phase": "Pending"}));
        assert_eq!(status_of("prod", &local_peer).via.unwrap(), ["prod"]);
        // The peer's Ready reason goes along: it tells a rollout from other Pendings.
        let rolling = read(
            true,
            json!({"phase": "Pending", "conditions": [
                {"type": "Ready", "status": "False", "reason": "RolloutInProgress"}]}),
        );
        assert_eq!(
            status_of("prod", &rolling).reason,
            Some(comb_api::Reason::RolloutInProgress)
        );
        let fresh_peer = read(false, json!({}));
        assert_eq!(
            status_of("prod", &fresh_peer),
            UpstreamStatus {
                reachable: true,
                phase: None,
                via: Some(vec!["prod".into()]),
                context: Some("prod".into()),
                message: None,
                reason: None,
            },
            "a peer that has not reconciled yet: reachable, no phase"
        );
        let empty_upstream = PeerView::Read {
            place: String::new(),
            same_server: true,
            status: Box::new(CombStatus {
                upstream: Some(CombUpstreamStatus::default()),
                ..CombStatus::default()
            }),
        };
        assert_eq!(status_of("p", &empty_upstream).via.unwrap(), ["p"]);
    }

    /// What a layer judges: the context (a `layer:` resolved), the namespace (the Comb's own
    /// unless given) and the copies.
    #[test]
    fn reads_name_the_peers_context_namespace_and_copies() {
        let ctx = context();
        let args = |value: Value| value.as_object().cloned().unwrap();
        let cases = [
            (json!({"context": "prod"}), "prod", "platform", vec![]),
            (
                json!({"layer": "production", "namespace": "billing", "name": "ledger",
                       "replicate": [{"kind": "Secret", "name": "ledger-keys"}]}),
                "prod",
                "billing",
                vec![Replica::secret("ledger-keys")],
            ),
        ];
        for (spec, context, namespace, replicas) in cases {
            let upstream = K8s::from_args(&args(spec), &ctx).unwrap();
            assert_eq!(
                upstream.reads(&ctx),
                Reads::Peer(PeerReads {
                    context: context.into(),
                    namespace: namespace.into(),
                    replicas,
                })
            );
        }
    }

    #[test]
    fn unreachable_peers_say_why() {
        let failed = PeerView::Failed("reading Comb platform/db in context qa failed: x".into());
        assert_eq!(
            status_of("qa", &failed),
            UpstreamStatus {
                reachable: false,
                phase: None,
                via: Some(vec!["qa".into()]),
                context: Some("qa".into()),
                message: Some("reading Comb platform/db in context qa failed: x".into()),
                reason: None,
            }
        );
        assert_eq!(
            endpoints_of(&failed).unwrap_err().to_string(),
            "reading Comb platform/db in context qa failed: x"
        );
    }

    #[test]
    fn endpoints_without_a_usable_address_are_left_out_and_named() {
        let status = json!({"phase": "Running", "endpoints": [
            {"name": "postgres", "protocol": "tcp", "port": 5432,
             "cluster": "db.platform.svc:5432", "external": "192.0.2.10:5432"},
            {"name": "metrics", "port": 9187, "cluster": "db.platform.svc:9187"},
            {"name": "admin", "protocol": "http", "port": 8080, "cluster": "db.platform.svc:8080"},
        ]});
        let same = read(true, status.clone());
        let endpoints = endpoints_of(&same).unwrap();
        assert_eq!(
            endpoints,
            [
                Endpoint::new("postgres", 5432)
                    .unwrap()
                    .with_cluster("db.platform.svc:5432")
                    .with_external("192.0.2.10:5432"),
                Endpoint::new("metrics", 9187)
                    .unwrap()
                    .with_cluster("db.platform.svc:9187"),
                Endpoint::new("admin", 8080)
                    .unwrap()
                    .with_protocol("http")
                    .with_cluster("db.platform.svc:8080"),
            ]
        );
        assert_eq!(status_of("prod", &same).message, None);

        let other = read(false, status);
        assert_eq!(
            endpoints_of(&other).unwrap(),
            [Endpoint::new("postgres", 5432)
                .unwrap()
                .with_cluster("192.0.2.10:5432")
                .with_external("192.0.2.10:5432")]
        );
        assert_eq!(
            status_of("prod", &other).message.unwrap(),
            "no address reachable from here for endpoint(s) metrics, admin: context prod is another \
             API server, and Comb platform/db in context prod publishes no external address"
        );
        let none_here = read(true, json!({"endpoints": [{"name": "a", "port": 1}]}));
        assert_eq!(
            status_of("prod", &none_here).message.unwrap(),
            "no address reachable from here for endpoint(s) a: Comb platform/db in context prod publishes none"
        );
        let bad_name = read(
            true,
            json!({"endpoints": [{"name": "A_b", "port": 1, "cluster": "x:1"}]}),
        );
        assert_eq!(endpoints_of(&bad_name).unwrap_err().category(), "answer");
    }

    fn build(args: Value) -> Result<K8s> {
        K8s::from_args(args.as_object().unwrap(), &context())
    }

    #[test]
    fn arguments() {
        let upstream =
            build(json!({"context": "prod", "namespace": "shared", "name": "pg"})).unwrap();
        assert_eq!(
            (
                upstream.context(),
                upstream.namespace.as_deref(),
                upstream.name.as_deref()
            ),
            ("prod", Some("shared"), Some("pg"))
        );
        let by_layer = build(json!({"layer": "production"})).unwrap();
        assert_eq!(by_layer.context(), "prod");
        let replicating = build(json!({"context": "prod", "replicate": [
            {"kind": "Secret", "name": "db-credentials"}, {"kind": "ConfigMap", "name": "db-config"}
        ]}))
        .unwrap();
        assert_eq!(replicating.replicas.len(), 2);

        let k = K8S_CLASS;
        let cases = [
            (
                json!({}),
                format!("{k}: context is required (or layer, naming a layer)"),
            ),
            (
                json!({"context": "prod", "layer": "production"}),
                format!("{k}: context and layer both name the peer's context, give one"),
            ),
            (
                json!({"layer": "qa"}),
                format!("{k}: there is no layer qa (layers: development, production)"),
            ),
            (
                json!({"contxt": "prod"}),
                format!(
                    "{k}: unknown key(s) contxt (known: context, layer, name, namespace, replicate)"
                ),
            ),
            (
                json!({"context": 7}),
                format!("{k}: context is a non-empty string, got a number"),
            ),
            (
                json!({"context": "prod", "replicate": {"kind": "Secret"}}),
                format!("{k}: replicate is an array, got an object"),
            ),
            // Both go into the path that reads the peer.
            (
                json!({"context": "prod", "name": "db?x=1"}),
                format!(
                    "{k}: name: 'db?x=1' is not a Kubernetes object name (a DNS-1123 subdomain: \
                     lowercase letters, digits, - and ., alphanumeric at both ends, at most 253 \
                     characters)"
                ),
            ),
            (
                json!({"context": "prod", "namespace": "billing/combs/x"}),
                format!(
                    "{k}: namespace: 'billing/combs/x' is not a namespace name (a DNS-1123 \
                     label: lowercase letters, digits and -, alphanumeric at both ends, at most \
                     63 characters)"
                ),
            ),
        ];
        for (args, message) in cases {
            assert_eq!(build(args).unwrap_err().to_string(), message);
        }
        let mut no_layers = context();
        no_layers.layers.clear();
        assert_eq!(
            K8s::from_args(json!({"layer": "qa"}).as_object().unwrap(), &no_layers)
                .unwrap_err()
                .to_string(),
            format!("{k}: there is no layer qa (no layers are configured here, give a context)")
        );
    }

    #[tokio::test]
    async fn failures_before_any_request() {
        let ctx = context();
        // `context()` runs in `dev`; `staging` shares prod's server.
        let missing = K8s::new("qa");
        let status = missing.status(&ctx).await.unwrap();
        assert!(!status.reachable);
        assert_eq!(
            status.message.unwrap(),
            "reading Comb platform/db in context qa failed: context qa is not in test kubeconfig"
        );
        let mut on_prod = context();
        on_prod.context = "prod".into();
        let itself = K8s::new("staging").with_namespace("platform");
        assert_eq!(
            itself.status(&on_prod).await.unwrap().message.unwrap(),
            "Comb platform/db in context staging is this Comb itself"
        );
    }
}
