//! `comb via REF`: the upstream chain, layer by layer, with each hop's phase.
//!
//! The walk follows what the Combs recorded: a hop whose status has an `upstream` borrows, and
//! its peer is where the layer's `borrow` points (else where its `spec.upstream` points, else the
//! layer of the recorded context). It ends at a Comb that serves the service itself, at an
//! upstream outside the federation (a Static upstream, a context that is no layer), at a Comb
//! that cannot be read, or at a loop.

use std::collections::BTreeSet;
use std::future::Future;
use std::process::ExitCode;

use comb_api::{Comb, CombRef, CombStatus, ConditionStatus, Phase, Reason, UPSTREAM_FALLBACK};
use serde::Serialize;

use crate::cli::common::{Federation, GlobalArgs, block_on};
use crate::cli::output::{DataFormat, Table, list, serialize};
use crate::config::{CombLocation, Config};
use crate::controller::triggers::upstream_peer;

#[derive(Debug, clap::Args)]
pub struct ViaArgs {
    /// The Comb, `[LAYER:][NAMESPACE/]NAME`.
    #[arg(value_name = "REF")]
    reference: String,
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    output: Option<DataFormat>,
}

/// One Comb of the chain as it recorded itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Hop {
    /// `layer:namespace/name`.
    pub comb: String,
    pub layer: String,
    pub namespace: String,
    pub name: String,
    pub phase: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// The recorded `status.upstream.via`: where this hop's service comes through.
    pub via: Vec<String>,
    /// Why the hop is on a fallback of its layer's chain, while it is (its `UpstreamFallback`
    /// message); the next hop is then the fallback's Comb.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// Why the Comb could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Hop {
    fn read(at: &CombLocation, comb: &Comb) -> Hop {
        let status = comb.status.as_ref();
        let ready = status.and_then(CombStatus::ready);
        Hop {
            phase: status.and_then(|status| status.phase.as_ref().map(Phase::to_string)),
            reason: ready.and_then(|ready| ready.reason.as_ref().map(Reason::to_string)),
            message: ready.and_then(|ready| ready.message.clone()),
            via: status
                .and_then(|status| status.upstream.as_ref())
                .and_then(|upstream| upstream.via.clone())
                .unwrap_or_default(),
            fallback: status
                .and_then(|status| status.condition(UPSTREAM_FALLBACK))
                .filter(|condition| condition.status == ConditionStatus::True)
                .map(|condition| condition.message.clone().unwrap_or_default()),
            ..Hop::unread(at, None)
        }
    }

    fn unread(at: &CombLocation, error: Option<String>) -> Hop {
        Hop {
            comb: at.to_string(),
            layer: at.layer.clone(),
            namespace: at.namespace.clone(),
            name: at.name.clone(),
            phase: None,
            reason: None,
            message: None,
            via: Vec::new(),
            fallback: None,
            error,
        }
    }
}

/// How the chain ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "end")]
pub enum End {
    /// The last hop serves the service itself (or has not borrowed yet).
    Served,
    /// The last hop borrows from something that is not a Comb of a layer.
    Outside { upstream: String },
    /// The last hop could not be read.
    Unreadable,
    /// The last hop borrows from a Comb already in the chain.
    Loop { back_to: String },
    /// More hops than `maxUpstreamDepth` allows, without a repeated Comb.
    TooDeep { max: usize },
}

/// The walked chain, nearest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Chain {
    pub hops: Vec<Hop>,
    #[serde(flatten)]
    pub end: End,
}

impl Chain {
    /// Whether the chain could be followed to where the service comes from.
    pub fn complete(&self) -> bool {
        matches!(self.end, End::Served | End::Outside { .. })
    }
}

/// Where a recorded Comb's service comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    Served,
    Peer(CombLocation),
    Outside(String),
}

/// The peer a Comb borrows from: where its layer's `borrow` or its `spec.upstream` points (as
/// the controller finds it), else the layer of the context its last step recorded (an upstream
/// its class decided).
pub fn next_hop(config: &Config, at: &CombLocation, comb: &Comb) -> Next {
    let Some(upstream) = comb
        .status
        .as_ref()
        .and_then(|status| status.upstream.as_ref())
    else {
        return Next::Served;
    };
    let declared = config
        .layers
        .iter()
        .position(|layer| layer.name == at.layer)
        .and_then(|index| upstream_peer(config, index, comb))
        .and_then(|(index, key)| Some((config.layers.get(index)?, key.namespace, key.name)));
    let recorded = || {
        let context = upstream.context.as_deref()?;
        let layer = config
            .layers
            .iter()
            .find(|layer| layer.context == context && layer.manages(&at.namespace))?;
        Some((layer, at.namespace.clone(), at.name.clone()))
    };
    match declared.or_else(recorded) {
        Some((layer, namespace, name)) => Next::Peer(CombLocation {
            layer: layer.name.clone(),
            context: layer.context.clone(),
            namespace,
            name,
        }),
        None => {
            let class = upstream.class.as_deref().unwrap_or("of no known class");
            Next::Outside(match &upstream.context {
                Some(context) => format!("upstream {class} (context {context}, no layer)"),
                None => format!("upstream {class}"),
            })
        }
    }
}

/// Walks the chain from `start`, reading each hop with `read` (an error is the reason it could
/// not be read).
pub async fn walk<F, Fut>(config: &Config, start: CombLocation, read: F) -> Chain
where
    F: Fn(CombLocation) -> Fut,
    Fut: Future<Output = crate::error::Result<Comb>>,
{
    // The Combs themselves stop at maxUpstreamDepth layers of via; one more hop shows where.
    let max = config.max_upstream_depth.get() + 1;
    let mut hops = Vec::new();
    let mut seen = BTreeSet::new();
    let mut at = start;
    loop {
        seen.insert(at.clone());
        let comb = match read(at.clone()).await {
            Ok(comb) => comb,
            Err(error) => {
                hops.push(Hop::unread(&at, Some(error.to_string())));
                return Chain {
                    hops,
                    end: End::Unreadable,
                };
            }
        };
        hops.push(Hop::read(&at, &comb));
        let end = match next_hop(config, &at, &comb) {
            Next::Served => End::Served,
            Next::Outside(upstream) => End::Outside { upstream },
            Next::Peer(peer) if seen.contains(&peer) => End::Loop {
                back_to: peer.to_string(),
            },
            Next::Peer(_) if hops.len() >= max => End::TooDeep { max },
            Next::Peer(peer) => {
                at = peer;
                continue;
            }
        };
        return Chain { hops, end };
    }
}

/// The chain for people: a row per hop, then how it ends.
pub fn render(chain: &Chain) -> String {
    let mut table = Table::new(vec!["LAYER", "COMB", "PHASE", "REASON", "VIA"]);
    for hop in &chain.hops {
        table.row(vec![
            hop.layer.clone(),
            format!("{}/{}", hop.namespace, hop.name),
            hop.phase.clone().unwrap_or_default(),
            hop.reason.clone().unwrap_or_default(),
            list(&hop.via),
        ]);
    }
    let mut text = table.render();
    for hop in &chain.hops {
        if let Some(why) = &hop.fallback {
            text.push_str(&format!("{} is on a fallback: {why}\n", hop.comb));
        }
    }
    let Some(last) = chain.hops.last() else {
        return text;
    };
    text.push_str(&match &chain.end {
        End::Served => format!(
            "served by {}{}\n",
            last.comb,
            last.phase
                .as_deref()
                .map(|phase| format!(" ({phase})"))
                .unwrap_or_default()
        ),
        End::Outside { upstream } => format!("{} borrows from {upstream}\n", last.comb),
        End::Unreadable => format!(
            "{} cannot be read: {}\n",
            last.comb,
            last.error.as_deref().unwrap_or("unknown error")
        ),
        End::Loop { back_to } => format!("a loop: {} borrows from {back_to} again\n", last.comb),
        End::TooDeep { max } => {
            format!(
                "stopped after {max} hops (maxUpstreamDepth + 1) at {}\n",
                last.comb
            )
        }
    });
    text
}

/// The chain from `start`, each hop read from its layer's API server.
pub async fn walk_federation(federation: &Federation, start: CombLocation) -> Chain {
    walk(&federation.config, start, |at| async move {
        let reference = CombRef {
            layer: Some(at.layer.clone()),
            namespace: Some(at.namespace.clone()),
            name: at.name.clone(),
        };
        federation
            .config
            .locate(&federation.pool, &reference)
            .await
            .map(|located| located.comb)
    })
    .await
}

pub fn run(global: &GlobalArgs, args: ViaArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let federation = Federation::open(global)?;
        let start = federation.locate(&args.reference).await?.location;
        let chain = walk_federation(&federation, start).await;
        print!(
            "{}",
            match args.output {
                None => render(&chain),
                Some(format) => serialize(&chain, format)?,
            }
        );
        Ok(if chain.complete() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use serde_json::{Value, json};

    const CONFIG: &str = "
layers:
  - { name: prod, context: prod, namespaces: [platform] }
  - name: staging
    context: staging
    namespaces: [staging]
    borrow: { from: prod, namespace: platform, combs: [db] }
  - name: dev
    context: dev
    namespaces: [platform]
    borrow: { from: staging, namespace: staging, combs: [nats, db] }
";

    fn config() -> Config {
        Config::from_yaml(CONFIG, "test", None).unwrap()
    }

    fn at(layer: &str, namespace: &str, name: &str) -> CombLocation {
        CombLocation {
            layer: layer.into(),
            context: layer.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A recorded Comb: phase, reason and (when borrowing) the upstream record.
    fn comb(spec: Value, phase: &str, reason: &str, upstream: Option<Value>) -> Comb {
        let mut status = json!({"phase": phase, "conditions": [
            {"type": "Ready", "status": if phase == "Running" {"True"} else {"False"},
             "reason": reason, "message": format!("{reason} message")}]});
        if let Some(upstream) = upstream {
            status["upstream"] = upstream;
        }
        Comb::from_value(json!({"metadata": {"name": "x"}, "spec": spec, "status": status}))
            .unwrap()
    }

    fn k8s(context: &str, via: &[&str]) -> Option<Value> {
        Some(
            json!({"class": "K8s", "context": context, "reachable": true, "phase": "Running",
                    "via": via}),
        )
    }

    /// The Comb stored at `at`, with its name and namespace.
    fn found(combs: &BTreeMap<String, Comb>, at: &CombLocation) -> crate::error::Result<Comb> {
        let mut comb = combs
            .get(&at.to_string())
            .cloned()
            .ok_or_else(|| crate::error::Error::request(at.to_string(), "no such Comb"))?;
        comb.metadata.name = Some(at.name.clone());
        comb.metadata.namespace = Some(at.namespace.clone());
        Ok(comb)
    }

    async fn walk_over(combs: BTreeMap<String, Comb>, start: CombLocation) -> Chain {
        let config = config();
        walk(&config, start, |at| {
            let found = found(&combs, &at);
            async move { found }
        })
        .await
    }

    #[tokio::test]
    async fn follows_borrowing_layer_by_layer() {
        let class = json!({"class": "Manifests"});
        let combs = BTreeMap::from([
            (
                "dev:platform/db".to_string(),
                comb(
                    class.clone(),
                    "Running",
                    "Borrowed",
                    k8s("staging", &["staging", "prod"]),
                ),
            ),
            (
                "staging:staging/db".to_string(),
                comb(class.clone(), "Running", "Borrowed", k8s("prod", &["prod"])),
            ),
            (
                "prod:platform/db".to_string(),
                comb(class.clone(), "Running", "Healthy", None),
            ),
        ]);
        let chain = walk_over(combs, at("dev", "platform", "db")).await;
        assert_eq!(chain.end, End::Served);
        assert!(chain.complete());
        let hops: Vec<(&str, &[String])> = chain
            .hops
            .iter()
            .map(|hop| (hop.comb.as_str(), hop.via.as_slice()))
            .collect();
        assert_eq!(
            hops,
            [
                (
                    "dev:platform/db",
                    &["staging".to_string(), "prod".to_string()][..]
                ),
                ("staging:staging/db", &["prod".to_string()][..]),
                ("prod:platform/db", &[][..]),
            ]
        );
        assert_eq!(
            render(&chain),
            "LAYER     COMB          PHASE     REASON     VIA\n\
             dev       platform/db   Running   Borrowed   staging, prod\n\
             staging   staging/db    Running   Borrowed   prod\n\
             prod      platform/db   Running   Healthy    <none>\n\
             served by prod:platform/db (Running)\n"
        );
        let json = serde_json::to_value(&chain).unwrap();
        assert_eq!(json["end"], "served");
        assert_eq!(json["hops"][0]["via"], json!(["staging", "prod"]));
    }

    #[tokio::test]
    async fn a_borrower_on_fallback_is_followed_to_the_fallback() {
        let config = Config::from_yaml(
            "layers:
  - { name: prod, context: prod, namespaces: [platform] }
  - { name: staging, context: staging, namespaces: [staging], borrow: { from: prod, namespace: platform } }
  - name: dev
    context: dev
    namespaces: [platform]
    borrow: { from: staging, namespace: staging, fallback: [prod] }",
            "test",
            None,
        )
        .unwrap();
        let why = "staging unhealthy for 30s (context unreachable); borrowing from prod";
        let mut on_prod = comb(
            json!({"class": "Manifests"}),
            "Running",
            "Borrowed",
            k8s("prod", &["prod"]),
        );
        let conditions = on_prod
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap();
        conditions[0].message = Some(why.into());
        conditions.push(
            serde_json::from_value(json!({"type": "UpstreamFallback", "status": "True",
                                          "reason": "UpstreamUnhealthy", "message": why}))
            .unwrap(),
        );
        let combs = BTreeMap::from([
            ("dev:platform/nats".to_string(), on_prod),
            (
                "prod:platform/nats".to_string(),
                comb(json!({"class": "Manifests"}), "Running", "Healthy", None),
            ),
        ]);
        let chain = walk(&config, at("dev", "platform", "nats"), |at| {
            let found = found(&combs, &at);
            async move { found }
        })
        .await;
        assert_eq!(chain.end, End::Served);
        assert_eq!(
            render(&chain),
            format!(
                "LAYER   COMB            PHASE     REASON     VIA\n\
                 dev     platform/nats   Running   Borrowed   prod\n\
                 prod    platform/nats   Running   Healthy    <none>\n\
                 dev:platform/nats is on a fallback: {why}\n\
                 served by prod:platform/nats (Running)\n"
            )
        );
        assert_eq!(
            serde_json::to_value(&chain).unwrap()["hops"][0]["fallback"],
            json!(why)
        );
    }

    #[tokio::test]
    async fn a_comb_that_does_not_borrow_is_its_own_chain() {
        let combs = BTreeMap::from([(
            "staging:staging/nats".to_string(),
            comb(json!({"class": "Manifests"}), "Running", "Healthy", None),
        )]);
        let chain = walk_over(combs, at("staging", "staging", "nats")).await;
        assert_eq!(chain.hops.len(), 1);
        assert_eq!(chain.end, End::Served);
    }

    #[tokio::test]
    async fn the_crs_own_upstream_and_the_recorded_context() {
        // prod's cache names its peer by layer and namespace in spec.upstream; prod's web
        // borrows through a class-decided upstream, found by the context it recorded.
        let combs = BTreeMap::from([
            (
                "prod:platform/cache".to_string(),
                comb(
                    json!({"class": "Manifests", "upstream": {"class": "K8s", "layer": "staging",
                           "namespace": "staging", "name": "redis"}}),
                    "Pending",
                    "UpstreamNotRunning",
                    k8s("staging", &["staging"]),
                ),
            ),
            (
                "staging:staging/redis".to_string(),
                comb(json!({"class": "Manifests"}), "Pending", "Deployed", None),
            ),
            (
                "prod:platform/web".to_string(),
                comb(
                    json!({"class": "Web"}),
                    "Running",
                    "Borrowed",
                    k8s("dev", &["dev"]),
                ),
            ),
            (
                "dev:platform/web".to_string(),
                comb(json!({"class": "Web"}), "Running", "Healthy", None),
            ),
        ]);
        let chain = walk_over(combs.clone(), at("prod", "platform", "cache")).await;
        assert_eq!(chain.hops[1].comb, "staging:staging/redis");
        assert_eq!(chain.hops[1].phase.as_deref(), Some("Pending"));
        let chain = walk_over(combs, at("prod", "platform", "web")).await;
        assert_eq!(chain.hops[1].comb, "dev:platform/web");
        assert_eq!(chain.end, End::Served);
    }

    #[tokio::test]
    async fn ends_outside_unreadable_and_in_loops() {
        let fixed = comb(
            json!({"class": "Manifests", "upstream": {"class": "Static", "endpoints": []}}),
            "Running",
            "Borrowed",
            Some(json!({"class": "Static", "via": ["static"]})),
        );
        let combs = BTreeMap::from([("prod:platform/mail".to_string(), fixed)]);
        let chain = walk_over(combs, at("prod", "platform", "mail")).await;
        assert_eq!(
            chain.end,
            End::Outside {
                upstream: "upstream Static".into()
            }
        );
        assert!(render(&chain).ends_with("prod:platform/mail borrows from upstream Static\n"));

        // dev's db borrows from staging, whose db is missing.
        let combs = BTreeMap::from([(
            "dev:platform/db".to_string(),
            comb(
                json!({"class": "Manifests"}),
                "Blocked",
                "UpstreamUnreachable",
                k8s("staging", &["staging"]),
            ),
        )]);
        let chain = walk_over(combs, at("dev", "platform", "db")).await;
        assert_eq!(chain.end, End::Unreadable);
        assert!(!chain.complete());
        assert!(
            render(&chain)
                .ends_with("staging:staging/db cannot be read: staging:staging/db: no such Comb\n"),
            "{}",
            render(&chain)
        );

        // Two Combs whose CRs borrow from each other (the configuration has no say on them).
        let pointing = |layer: &str, namespace: &str| {
            comb(
                json!({"class": "Manifests", "upstream": {"class": "K8s", "layer": layer,
                       "namespace": namespace}}),
                "Blocked",
                "UpstreamLoop",
                k8s(layer, &[layer]),
            )
        };
        let combs = BTreeMap::from([
            (
                "prod:platform/a".to_string(),
                pointing("staging", "staging"),
            ),
            (
                "staging:staging/a".to_string(),
                pointing("prod", "platform"),
            ),
        ]);
        let chain = walk_over(combs, at("prod", "platform", "a")).await;
        assert_eq!(
            chain.end,
            End::Loop {
                back_to: "prod:platform/a".into()
            }
        );
        assert!(
            render(&chain)
                .ends_with("a loop: staging:staging/a borrows from prod:platform/a again\n")
        );
    }

    #[tokio::test]
    async fn stops_one_hop_after_max_upstream_depth() {
        let config =
            Config::from_yaml(&format!("maxUpstreamDepth: 1\n{CONFIG}"), "test", None).unwrap();
        let borrowed = |context: &str| {
            comb(
                json!({"class": "Manifests"}),
                "Running",
                "Borrowed",
                k8s(context, &[context]),
            )
        };
        let combs = BTreeMap::from([
            ("dev:platform/db".to_string(), borrowed("staging")),
            ("staging:staging/db".to_string(), borrowed("prod")),
        ]);
        let chain = walk(&config, at("dev", "platform", "db"), |at| {
            let found = found(&combs, &at);
            async move { found }
        })
        .await;
        assert_eq!(chain.end, End::TooDeep { max: 2 });
        assert_eq!(chain.hops.len(), 2);
        assert!(
            render(&chain)
                .ends_with("stopped after 2 hops (maxUpstreamDepth + 1) at staging:staging/db\n")
        );
    }
}
