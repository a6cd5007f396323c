//! The K8s upstream against sandbox clusters: `prod` and `dev` on two API servers, and `staging`,
//! a second context on prod's server with the default namespace `staging`, on the backend
//! `COMB_TEST_BACKEND` names (the emulator by default, or real kube-apiservers).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use comb_api::{Comb, CombSpec, CombStatus, DEFAULT_GROUP, Endpoint, LabelKeys};
use comb_kubeconfigs::ClientPool;
use comb_sandbox::controls::{Controls, Fault};
use comb_testkit::{Setup, World};
use comb_upstreams::{K8s, PEER_READ_TIMEOUT, Replica, Upstream, UpstreamContext, UpstreamStatus};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// The kit's clusters (plus a context `gone` whose server does not exist) and a pool over
/// their kubeconfig.
struct Clusters {
    world: World,
    pool: ClientPool,
}

impl Clusters {
    async fn start() -> Result<Clusters> {
        let world = Setup::clusters(["prod", "dev"])
            .context("staging", "prod", "staging")
            .dead_context("gone")
            .namespace_everywhere("platform")
            .namespace_everywhere("staging")
            .start()
            .await;
        Ok(Clusters {
            pool: world.pool.clone(),
            world,
        })
    }

    /// The test controls of `cluster` (faults, partitions).
    fn controls(&self, cluster: &str) -> Controls {
        self.world.controls(cluster)
    }

    /// The Comb `namespace/name` in `context`, created with `status`.
    async fn comb(&self, context: &str, namespace: &str, name: &str, status: Value) -> Result<()> {
        let client = self.pool.client(context).await?;
        let api: Api<Comb> =
            Api::namespaced_with(client, namespace, &comb_api::api_resource(DEFAULT_GROUP));
        let cr = Comb::new(
            DEFAULT_GROUP,
            namespace,
            name,
            CombSpec::of_class("Manifests"),
        );
        let mut stored = api.create(&PostParams::default(), &cr).await?;
        stored.status = Some(serde_json::from_value::<CombStatus>(status)?);
        api.replace_status(name, &PostParams::default(), &stored)
            .await?;
        Ok(())
    }

    /// What the Comb `namespace/name` running in `context` gets to know.
    fn context(&self, context: &str, namespace: &str, name: &str) -> UpstreamContext {
        UpstreamContext {
            name: name.into(),
            namespace: namespace.into(),
            context: context.into(),
            pool: self.pool.clone(),
            group: DEFAULT_GROUP.into(),
            labels: LabelKeys::default(),
            managed_by: "comb".into(),
            layers: BTreeMap::new(),
            act_as: None,
            source_reader: comb_upstreams::SourceReader::Controller,
            record: Vec::new(),
            peers: None,
        }
    }

    async fn api<K>(&self, context: &str, namespace: &str) -> Result<Api<K>>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Ok(Api::namespaced(self.pool.client(context).await?, namespace))
    }
}

/// prod's `platform/db`: Running, reached through `vendor`, three endpoints of which one has an
/// external address.
fn prod_db_status() -> Value {
    json!({
        "phase": "Running",
        "endpoints": [
            {"name": "postgres", "protocol": "tcp", "port": 5432,
             "cluster": "db.platform.svc:5432", "external": "192.0.2.10:5432"},
            {"name": "metrics", "protocol": "http", "port": 9187, "cluster": "db.platform.svc:9187"}
        ],
        "upstream": {"class": "Kubernetes::Comb::Upstream::Static", "via": ["vendor"]}
    })
}

#[tokio::test]
async fn a_peer_on_another_api_server_offers_its_external_addresses() -> Result<()> {
    let clusters = Clusters::start().await?;
    clusters
        .comb("prod", "platform", "db", prod_db_status())
        .await?;
    let ctx = clusters.context("dev", "platform", "db");
    let upstream = K8s::new("prod");

    let status = upstream.status(&ctx).await?;
    assert_eq!(
        status,
        UpstreamStatus {
            reachable: true,
            phase: Some("Running".into()),
            via: Some(vec!["prod".into(), "vendor".into()]),
            context: Some("prod".into()),
            message: Some(
                "no address reachable from here for endpoint(s) metrics: context prod is another \
                 API server, and Comb platform/db in context prod publishes no external address"
                    .into()
            ),
            reason: None,
        }
    );
    assert_eq!(
        upstream.endpoints(&ctx).await?,
        [Endpoint::new("postgres", 5432)?
            .with_cluster("192.0.2.10:5432")
            .with_external("192.0.2.10:5432")]
    );
    Ok(())
}

#[tokio::test]
async fn a_peer_on_the_same_api_server_offers_its_cluster_addresses() -> Result<()> {
    let clusters = Clusters::start().await?;
    clusters
        .comb("prod", "platform", "db", prod_db_status())
        .await?;
    // staging's db runs in namespace staging of prod's server.
    let ctx = clusters.context("staging", "staging", "db");
    let upstream = K8s::new("prod").with_namespace("platform");

    let status = upstream.status(&ctx).await?;
    assert!(status.reachable);
    assert_eq!(status.message, None);
    assert_eq!(
        status.via.as_deref(),
        Some(&["prod".to_string(), "vendor".to_string()][..])
    );
    let endpoints = upstream.endpoints(&ctx).await?;
    let clusters_addresses: Vec<Option<&str>> = endpoints.iter().map(Endpoint::cluster).collect();
    assert_eq!(
        clusters_addresses,
        [Some("db.platform.svc:5432"), Some("db.platform.svc:9187")]
    );
    assert_eq!(endpoints[1].protocol(), "http");

    // A peer that has not reconciled yet: reachable, no phase, nothing offered.
    clusters
        .comb("prod", "platform", "fresh", json!({}))
        .await?;
    let fresh = K8s::new("prod")
        .with_namespace("platform")
        .with_name("fresh");
    let status = fresh.status(&ctx).await?;
    assert_eq!((status.reachable, status.phase), (true, None));
    assert_eq!(status.via.as_deref(), Some(&["prod".to_string()][..]));
    assert!(fresh.endpoints(&ctx).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn unreachable_peers_are_reported_not_errors() -> Result<()> {
    let clusters = Clusters::start().await?;
    let ctx = clusters.context("dev", "platform", "db");
    let unreachable = |status: UpstreamStatus| {
        assert!(!status.reachable);
        assert_eq!(status.phase, None);
        status.message.unwrap_or_default()
    };

    let missing_context = K8s::new("qa");
    assert_eq!(
        unreachable(missing_context.status(&ctx).await?),
        "reading Comb platform/db in context qa failed: context qa is not in the sandbox kubeconfig"
    );
    assert_eq!(
        missing_context
            .endpoints(&ctx)
            .await
            .unwrap_err()
            .to_string(),
        "reading Comb platform/db in context qa failed: context qa is not in the sandbox kubeconfig"
    );

    let not_there = K8s::new("prod");
    assert_eq!(
        unreachable(not_there.status(&ctx).await?),
        "reading Comb platform/db in context prod failed: 404 NotFound: combs.comb.internal \"db\" not found"
    );

    let refused = unreachable(K8s::new("gone").status(&ctx).await?);

    assert!(
        refused.starts_with("reading Comb platform/db in context gone failed: ")
            && refused.to_lowercase().contains("connection refused"),
        "{refused}"
    );
    Ok(())
}

#[tokio::test]
async fn a_partitioned_peer_is_unreachable_until_healed() -> Result<()> {
    let clusters = Clusters::start().await?;
    clusters
        .comb("prod", "platform", "db", prod_db_status())
        .await?;
    let ctx = clusters.context("dev", "platform", "db");
    let prod = clusters.controls("prod");

    prod.partition();
    let status = K8s::new("prod").status(&ctx).await?;
    assert!(!status.reachable);
    // The pool's clients do not retry 503s, so a down layer answers at once, in its own words.
    assert_eq!(
        status.message.as_deref(),
        Some(
            "reading Comb platform/db in context prod failed: 503 ServiceUnavailable: \
             the sandbox cluster is partitioned (POST /_sandbox/heal ends it)"
        )
    );
    assert_eq!(status.via.as_deref(), Some(&["prod".to_string()][..]));

    prod.heal();
    let status = K8s::new("prod").status(&ctx).await?;
    assert!(status.reachable, "{status:?}");
    assert_eq!(status.phase, Some(comb_api::Phase::Running));
    Ok(())
}

#[tokio::test]
async fn a_peer_that_does_not_answer_in_time_is_unreachable() -> Result<()> {
    let clusters = Clusters::start().await?;
    clusters
        .comb("prod", "platform", "db", prod_db_status())
        .await?;
    let ctx = clusters.context("dev", "platform", "db");
    let prod = clusters.controls("prod");

    // A slow API server must not hold a borrowing step: past the bound the peer is unreachable.
    prod.inject(Fault::delay(
        "GET",
        "/apis/comb.internal/v1/namespaces/platform/combs/db",
        PEER_READ_TIMEOUT + Duration::from_secs(2),
        1,
    ));
    let status = K8s::new("prod").status(&ctx).await?;
    assert!(!status.reachable);
    assert_eq!(
        status.message.as_deref(),
        Some(
            format!(
                "reading Comb platform/db in context prod failed: no answer within {}s",
                PEER_READ_TIMEOUT.as_secs()
            )
            .as_str()
        )
    );
    Ok(())
}

#[tokio::test]
async fn a_comb_cannot_borrow_from_itself() -> Result<()> {
    let clusters = Clusters::start().await?;
    clusters
        .comb("prod", "platform", "db", prod_db_status())
        .await?;
    // staging is another context, but on prod's server: namespace and name make it the same Comb.
    let ctx = clusters.context("prod", "platform", "db");
    let status = K8s::new("staging")
        .with_namespace("platform")
        .status(&ctx)
        .await?;
    assert!(!status.reachable);
    assert_eq!(
        status.message.as_deref(),
        Some("Comb platform/db in context staging is this Comb itself")
    );
    // The same name in another namespace of the same server is another Comb.
    let other = K8s::new("staging").with_namespace("platform");
    let status = other
        .status(&clusters.context("prod", "staging", "db"))
        .await?;
    assert!(status.reachable, "{status:?}");
    Ok(())
}

#[tokio::test]
async fn replication_copies_refreshes_and_never_overwrites_what_is_not_ours() -> Result<()> {
    let clusters = Clusters::start().await?;
    let prod_secrets: Api<Secret> = clusters.api("prod", "platform").await?;
    let prod_configs: Api<ConfigMap> = clusters.api("prod", "platform").await?;
    let dev_secrets: Api<Secret> = clusters.api("dev", "platform").await?;
    let dev_configs: Api<ConfigMap> = clusters.api("dev", "platform").await?;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "db-credentials", "labels": {"team": "db"},
                     "annotations": {"comb.internal/replicable": "true"}},
        "type": "Opaque", "data": {"password": "czNjcmV0"}
    }))?;
    prod_secrets.create(&PostParams::default(), &secret).await?;
    let config: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "db-config", "annotations": {"comb.internal/replicable": "true"}},
        "data": {"max_connections": "100"}
    }))?;
    prod_configs.create(&PostParams::default(), &config).await?;

    let mut ctx = clusters.context("dev", "platform", "db");
    let upstream = K8s::new("prod").with_replicas(vec![
        Replica::secret("db-credentials"),
        Replica::config_map("db-config"),
    ]);
    let copied = upstream.replicate_into(&ctx).await?;
    assert!(
        copied.iter().all(|copy| copy.uid.is_some()),
        "each copy with its uid, for the record: {copied:?}"
    );
    // What the Comb records, and the next step is asked with: the copies are its own.
    ctx.record = copied.clone();
    let names: Vec<(&str, &str, Option<&str>, &str)> = copied
        .iter()
        .map(|r| {
            (
                r.api_version.as_str(),
                r.kind.as_str(),
                r.namespace.as_deref(),
                r.name.as_str(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("v1", "Secret", Some("platform"), "db-credentials"),
            ("v1", "ConfigMap", Some("platform"), "db-config")
        ]
    );
    let copy = dev_secrets.get("db-credentials").await?;
    let password = |secret: &Secret| -> Option<Vec<u8>> {
        Some(secret.data.as_ref()?.get("password")?.0.clone())
    };
    assert_eq!(password(&copy).as_deref(), Some(&b"s3cret"[..]));
    let labels = copy.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("comb.internal/comb").map(String::as_str),
        Some("db")
    );
    assert_eq!(
        labels
            .get("comb.internal/comb-namespace")
            .map(String::as_str),
        Some("platform")
    );
    assert_eq!(
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("comb")
    );
    assert_eq!(
        labels.get("team"),
        None,
        "labelled as the Comb's, not the source's"
    );
    assert_eq!(
        copy.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("comb.internal/replicated-from"))
            .map(String::as_str),
        Some("prod/platform/db-credentials")
    );
    let config_copy = dev_configs.get("db-config").await?;
    assert_eq!(
        config_copy
            .data
            .unwrap_or_default()
            .get("max_connections")
            .map(String::as_str),
        Some("100")
    );

    // Unchanged upstream: nothing is written again.
    let version = copy.metadata.resource_version.clone();
    upstream.replicate_into(&ctx).await?;
    assert_eq!(
        dev_secrets
            .get("db-credentials")
            .await?
            .metadata
            .resource_version,
        version
    );

    // Changed upstream: the copy follows.
    let mut changed = prod_secrets.get("db-credentials").await?;
    changed.data = Some(BTreeMap::from([(
        "password".to_string(),
        k8s_openapi::ByteString(b"rotated".to_vec()),
    )]));
    prod_secrets
        .replace("db-credentials", &PostParams::default(), &changed)
        .await?;
    upstream.replicate_into(&ctx).await?;
    assert_eq!(
        password(&dev_secrets.get("db-credentials").await?).as_deref(),
        Some(&b"rotated"[..])
    );

    // A ConfigMap of that name that is not the Comb's is left alone, and the error says why.
    let foreign = K8s::new("prod").with_replicas(vec![Replica::config_map("db-config")]);
    let other_ctx = clusters.context("dev", "platform", "cache");
    let error = foreign.replicate_into(&other_ctx).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "ConfigMap db-config in namespace platform of context dev exists and is not this Comb's: \
         it is labelled as another Comb's (comb.internal/comb=db, comb.internal/comb-namespace=\
         platform) (written by comb); comb leaves it untouched (to hand it to this Comb, annotate \
         it comb.internal/adopt=platform/cache)"
    );
    assert_eq!(
        dev_configs
            .get("db-config")
            .await?
            .metadata
            .labels
            .unwrap_or_default()
            .get("comb.internal/comb")
            .map(String::as_str),
        Some("db")
    );

    // A source that does not exist is named, and no value ever appears in a message.
    let missing = K8s::new("prod").with_replicas(vec![Replica::secret("nope")]);
    let error = missing.replicate_into(&ctx).await.unwrap_err().to_string();
    assert_eq!(
        error,
        "reading Secret nope in namespace platform of context prod failed: 404 NotFound: secrets \"nope\" not found"
    );
    let same_namespace = K8s::new("staging")
        .with_namespace("staging")
        .with_replicas(vec![Replica::secret("x")]);
    let error = same_namespace
        .replicate_into(&clusters.context("prod", "staging", "db"))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        "the upstream's namespace staging in context staging is this Comb's own namespace on the \
         same API server, so there is nothing to copy"
    );
    Ok(())
}
