//! The Error outcomes of a reconcile step (reference §6.9): each failure is a phase with its
//! reason and message, never a failed or panicking step.

use std::sync::Arc;

use async_trait::async_trait;
use comb_federation::engine::class::{CombClass, CombContext};
use comb_federation::engine::deploy::deploy;
use comb_federation::engine::endpoints::EndpointDecl;
use comb_federation::engine::projection::State;
use comb_federation::engine::reconcile::UpstreamResolution;
use comb_federation::error::{Error, Result};
use comb_testkit::engine::*;
use comb_testkit::fixtures::*;
use serde_json::{Value, json};

#[tokio::test]
async fn a_failed_upstream_resolution_is_upstream_failed() {
    let cluster = Cluster::start().await;
    let mut comb = cluster
        .comb("db", manifests_spec(vec![service("db", 5432)]))
        .await;
    let failed = UpstreamResolution::Failed("spec.upstream names no class\n".into());
    let status = cluster.reconcile_upstream(&mut comb, failed).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Error",
            "UpstreamFailed",
            "resolving the upstream failed: spec.upstream names no class"
        )
    );
    // Unresolved: no local endpoints are published.
    assert_eq!(status.endpoints, None);
}

#[tokio::test]
async fn manifests_that_do_not_render_are_manifests_failed() {
    let cluster = Cluster::start().await;
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![json!({"metadata": {"name": "nameless-kind"}})]),
        )
        .await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Error",
            "ManifestsFailed",
            "rendering the manifests failed: Manifests: a manifest has no kind"
        )
    );
}

#[tokio::test]
async fn a_failed_live_read_is_status_failed() {
    let cluster = Cluster::start_own().await;
    let mut comb = cluster
        .comb("nats", manifests_spec(vec![deployment("nats", "nats:2")]))
        .await;
    cluster.fail(
        "GET",
        "/apis/apps/v1/namespaces/platform/deployments",
        500,
        1,
        "boom",
    );
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Error",
            "StatusFailed",
            "reading the live status failed: Kubernetes API error (list Deployment): 500 InternalError: boom"
        )
    );
    assert!(
        cluster
            .peek("apps/v1", "Deployment", "nats")
            .await
            .is_none()
    );
}

#[tokio::test]
async fn a_check_that_cannot_look_is_check_failed() {
    let cluster = Cluster::start().await;
    let spec = json!({"class": "Manifests", "config": {"requires": {"secret": ["typo"]}}});
    let mut comb = cluster.comb("mailer", spec).await;
    let status = cluster.reconcile(&mut comb).await;
    let message = "check failed: Manifests: config.requires has unknown key(s) secret (known: config, configMaps, secrets)";
    assert_eq!(verdict(&status), expect("Error", "CheckFailed", message));
    let config = status.condition(comb_api::CONFIG_READY).unwrap();
    assert_eq!(config.status, comb_api::ConditionStatus::Unknown);
    assert_eq!(config.message.as_deref(), Some(message));
}

#[tokio::test]
async fn endpoints_that_do_not_resolve_are_endpoints_failed() {
    let cluster = Cluster::start().await;
    let spec = json!({"class": "Manifests", "config": {
        "manifests": [service("web", 80)],
        "endpoints": [{"name": "web", "port": 80, "sevice": "web"}]
    }});
    let mut comb = cluster.comb("web", spec).await;
    let status = cluster.reconcile(&mut comb).await;
    let (phase, reason, message) = verdict(&status);
    assert_eq!(
        (phase.as_str(), reason.as_str()),
        ("Error", "EndpointsFailed")
    );
    assert!(
        message.starts_with(
            "resolving the endpoints failed: Manifests->endpoints: unknown key(s) sevice"
        ),
        "{message}"
    );
    // The local path established before the endpoints failed: its record stands.
    assert_eq!(managed(&status), ["Service/web"]);
}

/// A class whose manifests panic.
struct Panicking;

#[async_trait]
impl CombClass for Panicking {
    fn name(&self) -> &str {
        "Panicking"
    }
    async fn manifests(&self, _ctx: &CombContext) -> Result<Vec<Value>> {
        panic!("index out of bounds")
    }
}

#[tokio::test]
async fn a_panicking_class_is_reconcile_failed() {
    let mut cluster = Cluster::start().await;
    cluster.register(Arc::new(Panicking));
    let mut comb = cluster.comb("odd", json!({"class": "Panicking"})).await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect("Error", "ReconcileFailed", "panicked: index out of bounds")
    );
    // Recorded like any other step.
    assert_eq!(cluster.cr("odd").await.status, Some(status));
}

/// A class whose endpoints panic: the step has run, and publishing what it serves panics.
struct PanickingEndpoints;

#[async_trait]
impl CombClass for PanickingEndpoints {
    fn name(&self) -> &str {
        "PanickingEndpoints"
    }
    async fn manifests(&self, _ctx: &CombContext) -> Result<Vec<Value>> {
        Ok(Vec::new())
    }
    async fn endpoints(&self, _ctx: &CombContext) -> Result<Vec<EndpointDecl>> {
        panic!("no endpoints here")
    }
}

/// A panic after the step decided (publishing its endpoints) is what the step records, and it
/// is written: the status a transition announces is the one the CR carries.
#[tokio::test]
async fn a_panic_while_recording_is_written_as_reconcile_failed() {
    let mut cluster = Cluster::start().await;
    cluster.register(Arc::new(PanickingEndpoints));
    let mut comb = cluster
        .comb("odd", json!({"class": "PanickingEndpoints"}))
        .await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect("Error", "ReconcileFailed", "panicked: no endpoints here")
    );
    assert_eq!(cluster.cr("odd").await.status, Some(status));
}

#[tokio::test]
async fn deploy_without_live_objects_reads_them_first() {
    let cluster = Cluster::start_own().await;
    let comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![service("nats", 4222), deployment("nats", "nats:2")]),
        )
        .await;
    let items = comb.render(&cluster.ops).await.unwrap();

    cluster.fail(
        "GET",
        "/apis/apps/v1/namespaces/platform/deployments",
        500,
        1,
        "boom",
    );
    let Err(Error::Deploy {
        message, applied, ..
    }) = deploy(&cluster.ops, comb.context(), &items, None, &[]).await
    else {
        panic!("the deploy fails");
    };
    assert_eq!(
        message,
        "reading the live objects failed: Kubernetes API error (list Deployment): 500 InternalError: boom"
    );
    assert!(applied.is_empty());
    assert!(cluster.peek("v1", "Service", "nats").await.is_none());

    // Applied in manifest order; each kind read once, to write only what changed.
    cluster.reset_requests();
    let stored = deploy(&cluster.ops, comb.context(), &items, None, &[])
        .await
        .unwrap();
    let workloads: Vec<bool> = stored
        .iter()
        .map(|o| matches!(o.state, State::Replicated(_)))
        .collect();
    assert_eq!(workloads, [false, true], "the Service, then the Deployment");
    let requests = cluster.requests();
    assert_eq!(requests.get("list deployments.apps"), Some(&1));
    assert_eq!(requests.get("list services"), Some(&1));
}

#[tokio::test]
async fn a_namespaced_object_without_namespace_is_refused_before_any_request() {
    let cluster = Cluster::start_own().await;
    let mut nowhere = resource("v1", "ConfigMap", "nats");
    nowhere.namespace = None;
    cluster.reset_requests();
    let error = cluster.ops.get_opt(&nowhere).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "get ConfigMap: ConfigMap nats is namespaced, but no namespace was given"
    );
    assert!(cluster.requests().is_empty());
    // Cluster-scoped kinds need none.
    let mut team = resource("v1", "Namespace", NS);
    team.namespace = None;
    assert!(cluster.ops.get_opt(&team).await.is_ok());
}
