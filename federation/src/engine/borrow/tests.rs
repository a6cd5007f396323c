use super::*;
use crate::engine::class::{ClassRegistry, CombInstance, Settings};
use crate::engine::endpoints::EndpointDecl;
use crate::engine::kinds::Scopes;
use crate::engine::live_status::LiveStatus;
use async_trait::async_trait;
use comb_api::Comb;
use comb_api::{Endpoint, Reason, UpstreamSpec};
use comb_kubeconfigs::ClientPool;
use comb_upstreams::Static;
use comb_upstreams::{Resolved, Upstream, UpstreamContext, UpstreamStatus};
use jiff::Timestamp;
use kube::config::Kubeconfig;
use serde_json::Value;
use serde_json::json;
use std::sync::Arc;

fn env() -> BorrowEnv {
    let kubeconfig = Kubeconfig::from_yaml(
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n\
         contexts: [{name: dev, context: {cluster: c}}, {name: prod, context: {cluster: c}}]\n",
    )
    .unwrap();
    let mut env = BorrowEnv::new(ClientPool::from_kubeconfig(kubeconfig, "test"), "dev");
    env.layers.insert("production".into(), "prod".into());
    env
}

async fn comb(spec: Value) -> CombInstance {
    comb_with(spec, &Settings::default()).await
}

async fn comb_with(spec: Value, settings: &Settings) -> CombInstance {
    let cr = Comb::new(
        "comb.internal",
        "platform",
        "db",
        serde_json::from_value(spec).unwrap(),
    );
    ClassRegistry::with_builtins()
        .build(&cr, settings, &|_: &CombInstance| false)
        .await
        .unwrap()
}

/// A Comb declaring `postgres` (5432) and `metrics` (9187, Service db-metrics).
async fn db() -> CombInstance {
    comb(json!({"class": "Manifests", "config": {"endpoints": [
        {"name": "postgres", "port": 5432},
        {"name": "metrics", "port": 9187, "service": "db-metrics", "protocol": "http"}
    ]}}))
    .await
}

fn endpoint(name: &str, port: i32, cluster: Option<&str>, external: Option<&str>) -> Endpoint {
    let mut endpoint = Endpoint::new(name, port).unwrap();
    if let Some(cluster) = cluster {
        endpoint = endpoint.with_cluster(cluster);
    }
    if let Some(external) = external {
        endpoint = endpoint.with_external(external);
    }
    endpoint
}

async fn observe(comb: &CombInstance, upstream: &dyn Upstream) -> UpstreamObservation {
    observe_upstream(
        comb,
        upstream,
        &env().upstream_context(comb),
        &Scopes::default(),
    )
    .await
}

fn stop(observed: &UpstreamObservation) -> (&str, &str, &str) {
    let stop = observed.stop.as_ref().unwrap();
    (
        stop.phase.as_str(),
        stop.reason.as_str(),
        stop.message.as_str(),
    )
}

#[tokio::test]
async fn resolution_order_and_errors() {
    let env = env();
    let none = Controlling::none();
    let static_spec = |via: &str| {
        UpstreamSpec::Declared(
            json!({"class": "Static", "via": [via]})
                .as_object()
                .cloned()
                .unwrap(),
        )
    };
    let via = |resolved: Resolved| match resolved {
        Resolved::Local => "local".to_string(),
        Resolved::Upstream(_) => "upstream".to_string(),
    };

    let local = comb(json!({"class": "Manifests"})).await;
    assert_eq!(
        via(resolve_upstream(&local, &none, &env).await.unwrap()),
        "local"
    );

    let k8s_spec =
        json!({"class": "Manifests", "upstream": {"class": "K8s", "layer": "production"}});
    let declared = comb(k8s_spec.clone()).await;
    // The CR's own word reaches another context only where the layer allows it.
    let forbidden = "spec.upstream names context prod, namespace platform, which the engine's \
                     default tenancy does not allow: add {context: prod, namespaces: [platform]} \
                     to Settings.tenancy.upstreams.grants";
    let error = resolve_upstream(&declared, &none, &env).await.unwrap_err();
    assert!(
        matches!(&error, crate::error::Error::UpstreamForbidden(_)),
        "{error:?}"
    );
    assert_eq!(error.to_string(), forbidden);
    assert!(matches!(
        resolution(&declared, &none, &env).await,
        UpstreamResolution::Forbidden(message) if message == forbidden
    ));
    let mut allowing = Settings::default();
    allowing.tenancy.upstreams.grants = vec![crate::engine::tenancy::UpstreamGrant {
        context: "prod".into(),
        namespaces: Some(vec!["platform".into()]),
        replicate: false,
    }];
    let allowed = comb_with(k8s_spec, &allowing).await;
    let Resolved::Upstream(upstream) = resolve_upstream(&allowed, &none, &env).await.unwrap()
    else {
        panic!("spec.upstream names K8s");
    };
    assert_eq!(upstream.class_name(), "Kubernetes::Comb::Upstream::K8s");
    // The layer's borrow is the administrator's word: it needs no allowing.
    let borrow = Controlling::new(
        "the borrow of layer dev",
        UpstreamSpec::Declared(
            json!({"class": "K8s", "layer": "production",
                   "replicate": [{"kind": "Secret", "name": "db-credentials"}]})
            .as_object()
            .cloned()
            .unwrap(),
        ),
    );
    assert!(matches!(
        resolve_upstream(&local, &borrow, &env).await,
        Ok(Resolved::Upstream(_))
    ));

    // The controlling code decides first, even when it says local.
    let explicit_local = Controlling::new("the borrow of layer dev", UpstreamSpec::Local);
    assert_eq!(
        via(resolve_upstream(&declared, &explicit_local, &env)
            .await
            .unwrap()),
        "local"
    );
    let controlling = Controlling::new("the borrow of layer dev", static_spec("x"));
    assert_eq!(
        via(resolve_upstream(&local, &controlling, &env).await.unwrap()),
        "upstream"
    );
    // `upstream: null` is local and ends the resolution.
    let null = comb(json!({"class": "Manifests", "upstream": null})).await;
    assert_eq!(
        via(resolve_upstream(&null, &none, &env).await.unwrap()),
        "local"
    );

    let cases = [
        (
            comb(json!({"class": "Manifests", "upstream": {"context": "prod"}})).await,
            none.clone(),
            "spec.upstream names no class",
        ),
        (
            local.clone(),
            Controlling::new(
                "the borrow of layer dev",
                UpstreamSpec::Declared(
                    json!({"class": "K8s", "layer": "qa"})
                        .as_object()
                        .cloned()
                        .unwrap(),
                ),
            ),
            "the borrow of layer dev: Kubernetes::Comb::Upstream::K8s: there is no layer qa (layers: production)",
        ),
    ];
    for (comb, controlling, message) in cases {
        let error = resolve_upstream(&comb, &controlling, &env)
            .await
            .unwrap_err();
        assert_eq!(error.to_string(), message);
    }
}

#[test]
fn redirect_keeps_local_ports_and_appends_upstream_ports() {
    let declared = [
        EndpointDecl::new("postgres", 5432),
        EndpointDecl::new("metrics", 9187).protocol("http"),
        EndpointDecl::new("v6", 53).protocol("udp"),
        EndpointDecl::new("bracketed", 80),
        EndpointDecl::new("external", 443),
    ];
    let offered = [
        endpoint("ignored", 1, Some("x:1"), None),
        endpoint(
            "postgres",
            15432,
            Some("db.prod.svc:15432"),
            Some("192.0.2.10:5432"),
        ),
        endpoint("metrics", 9000, Some("DB.Example.COM"), None),
        endpoint("v6", 5353, Some("2001:db8::7"), None),
        endpoint("bracketed", 8080, Some("[::1]"), None),
        endpoint("external", 8443, Some(""), Some("api.example.com:8443")),
    ];
    let redirected = redirect("C", &declared, &offered).unwrap();
    let rows: Vec<(String, i32, String, String, Option<String>)> = redirected
        .iter()
        .map(|e| {
            (
                e.name().to_string(),
                e.port(),
                e.protocol().to_string(),
                e.cluster().unwrap().to_string(),
                e.external().map(str::to_string),
            )
        })
        .collect();
    let row = |n: &str, p: i32, proto: &str, c: &str, e: Option<&str>| {
        (
            n.to_string(),
            p,
            proto.to_string(),
            c.to_string(),
            e.map(str::to_string),
        )
    };
    assert_eq!(
        rows,
        [
            row(
                "postgres",
                5432,
                "tcp",
                "db.prod.svc:15432",
                Some("192.0.2.10:5432")
            ),
            row("metrics", 9187, "http", "DB.Example.COM:9000", None),
            row("v6", 53, "udp", "[2001:db8::7]:5353", None),
            row("bracketed", 80, "tcp", "[::1]:8080", None),
            row(
                "external",
                443,
                "tcp",
                "api.example.com:8443",
                Some("api.example.com:8443")
            ),
        ]
    );

    let Err(Redirect::Missing(missing)) = redirect(
        "C",
        &declared,
        &[
            endpoint("postgres", 1, None, None),
            endpoint("v6", 1, Some("a:1"), None),
        ],
    ) else {
        panic!("endpoints without addresses");
    };
    assert_eq!(missing, ["postgres", "metrics", "bracketed", "external"]);
    assert!(redirect("C", &[], &offered).unwrap().is_empty());
    let Err(Redirect::Failed(error)) = redirect(
        "C",
        &[EndpointDecl {
            name: "postgres".into(),
            ..EndpointDecl::default()
        }],
        &offered,
    ) else {
        panic!("a declaration without a port");
    };
    assert_eq!(
        error.to_string(),
        "C->endpoints: endpoint postgres has no port"
    );
}

#[tokio::test]
async fn borrowed_through_an_external_name_bridge() {
    let comb = db().await;
    let upstream = Static::new(vec![
        endpoint(
            "postgres",
            5432,
            Some("db.platform.svc"),
            Some("192.0.2.10:5432"),
        ),
        endpoint("metrics", 9187, Some("db.platform.svc:9187"), None),
    ])
    .with_via(vec!["staging".into(), "prod".into()]);
    let observed = observe(&comb, &upstream).await;
    assert!(observed.stop.is_none(), "{:?}", observed.stop);
    let redirected: Vec<Value> = observed
        .endpoints
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| serde_json::to_value(e.to_crd()).unwrap())
        .collect();
    assert_eq!(
        redirected,
        [
            json!({"name": "postgres", "protocol": "tcp", "port": 5432, "cluster": "db.platform.svc:5432", "external": "192.0.2.10:5432"}),
            json!({"name": "metrics", "protocol": "http", "port": 9187, "cluster": "db.platform.svc:9187"}),
        ]
    );
    let bridge: Vec<(&str, &str, Option<&str>)> = observed
        .bridge
        .iter()
        .map(|item| {
            (
                item.kind.as_str(),
                item.name.as_str(),
                item.manifest
                    .pointer("/spec/externalName")
                    .and_then(Value::as_str),
            )
        })
        .collect();
    assert_eq!(
        bridge,
        [
            ("Service", "db", Some("db.platform.svc.cluster.local")),
            (
                "Service",
                "db-metrics",
                Some("db.platform.svc.cluster.local")
            ),
        ]
    );
    assert_eq!(
        observed.bridge[0]
            .manifest
            .pointer("/metadata/labels/comb.internal~1comb"),
        Some(&json!("db")),
        "the bridge is rendered like manifests"
    );
    let verdict = observed.verdict();
    assert_eq!(
        (
            verdict.phase.as_str(),
            verdict.reason.as_str(),
            verdict.message.as_str()
        ),
        (
            "Running",
            "Borrowed",
            "borrowed from upstream Kubernetes::Comb::Upstream::Static via staging, prod"
        )
    );
    let now: Timestamp = "2026-09-26T12:00:00Z".parse().unwrap();
    assert_eq!(
        serde_json::to_value(observed.record(now)).unwrap(),
        json!({"class": "Kubernetes::Comb::Upstream::Static", "reachable": true, "phase": "Running",
               "via": ["staging", "prod"], "observedAt": "2026-09-26T12:00:00Z"})
    );
}

#[tokio::test]
async fn verdicts_name_the_phase_and_what_the_upstream_says() {
    let comb = comb(json!({"class": "Manifests"})).await;
    let cases = [
        (
            Static::new(vec![]),
            (
                "Running",
                "Borrowed",
                "borrowed from upstream Kubernetes::Comb::Upstream::Static",
            ),
        ),
        (
            Static::new(vec![])
                .with_phase("Pending")
                .with_message("starting \n"),
            (
                "Pending",
                "UpstreamNotRunning",
                "upstream Kubernetes::Comb::Upstream::Static is Pending: starting",
            ),
        ),
        // Mid-rollout, and a borrower whose own upstream rolls out: one message throughout,
        // whatever the upstream says of its progress.
        (
            Static::new(vec![])
                .with_phase("Pending")
                .with_reason("RolloutInProgress")
                .with_message("Deployment web: 1 of 2 updated, 1 ready"),
            (
                "Pending",
                "UpstreamRollingOut",
                "upstream Kubernetes::Comb::Upstream::Static is rolling out",
            ),
        ),
        (
            Static::new(vec![])
                .with_phase("Pending")
                .with_reason("Deployed"),
            (
                "Pending",
                "UpstreamRollingOut",
                "upstream Kubernetes::Comb::Upstream::Static is rolling out",
            ),
        ),
        (
            Static::new(vec![])
                .with_phase("Pending")
                .with_reason("UpstreamRollingOut"),
            (
                "Pending",
                "UpstreamRollingOut",
                "upstream Kubernetes::Comb::Upstream::Static is rolling out",
            ),
        ),
        // Pending for another reason is not a rollout.
        (
            Static::new(vec![])
                .with_phase("Pending")
                .with_reason("ReplicasNotReady")
                .with_message("Deployment web: 0 of 1 ready"),
            (
                "Pending",
                "UpstreamNotRunning",
                "upstream Kubernetes::Comb::Upstream::Static is Pending: Deployment web: 0 of 1 ready",
            ),
        ),
    ];
    for (upstream, (phase, reason, message)) in cases {
        let observed = observe(&comb, &upstream).await;
        assert!(observed.stop.is_none());
        assert!(observed.bridge.is_empty(), "no endpoints, an empty bridge");
        let verdict = observed.verdict();
        assert_eq!(
            (
                verdict.phase.as_str(),
                verdict.reason.as_str(),
                verdict.message.as_str()
            ),
            (phase, reason, message)
        );
    }
    let mut no_phase = UpstreamObservation::new("K");
    no_phase.status = Some(UpstreamStatus {
        reachable: true,
        context: Some("c".into()),
        via: Some(vec!["c".into(), "c".into()]),
        ..UpstreamStatus::default()
    });
    assert_eq!(
        no_phase.verdict().message,
        "upstream K (context c) is in no known phase"
    );
    no_phase.status.as_mut().unwrap().phase = Some("Running".into());
    assert_eq!(
        no_phase.verdict().message,
        "borrowed from upstream K (context c) via c, c"
    );
}

/// An upstream whose answers fail, to reach the UpstreamFailed rows.
#[derive(Debug)]
struct Failing {
    status: bool,
}

#[async_trait]
impl Upstream for Failing {
    fn class_name(&self) -> &str {
        "Test::Failing"
    }
    async fn status(&self, _ctx: &UpstreamContext) -> comb_upstreams::Result<UpstreamStatus> {
        if self.status {
            return Err(comb_upstreams::Error::Answer("vault sealed \n".into()));
        }
        Ok(UpstreamStatus {
            reachable: true,
            phase: Some("Running".into()),
            context: Some("prod".into()),
            ..UpstreamStatus::default()
        })
    }
    async fn endpoints(&self, _ctx: &UpstreamContext) -> comb_upstreams::Result<Vec<Endpoint>> {
        Err(comb_upstreams::Error::Unreachable(
            "connection reset".into(),
        ))
    }
}

#[tokio::test]
async fn every_stop_in_order() {
    let db = db().await;
    let s = "upstream Kubernetes::Comb::Upstream::Static";
    let deep: Vec<String> = (0..17).map(|i| format!("l{i}")).collect();
    let cut = deep[..16].join(", ");
    type Case<'a> = (Box<dyn Upstream>, (&'a str, &'a str, String));
    let cases: Vec<Case> = vec![
        (
            Box::new(Failing { status: true }),
            ("Error", "UpstreamFailed", "reading the status of Test::Failing failed: vault sealed".into()),
        ),
        (
            Box::new(Static::new(vec![]).with_reachable(false).with_message("vendor down")),
            ("Blocked", "UpstreamUnreachable", format!("{s} is unreachable: vendor down")),
        ),
        (
            Box::new(Static::new(vec![]).with_reachable(false).with_via(deep.clone())),
            ("Blocked", "UpstreamUnreachable", format!("{s} is unreachable")),
        ),
        (
            Box::new(Static::new(vec![]).with_via(deep.clone())),
            ("Blocked", "UpstreamLoop", format!("{s} leads through more than 16 layers, a loop? via {cut}")),
        ),
        (
            Box::new(Failing { status: false }),
            (
                "Error",
                "UpstreamFailed",
                "reading the endpoints of upstream Test::Failing (context prod) failed: connection reset".into(),
            ),
        ),
        (
            Box::new(
                Static::new(vec![endpoint("postgres", 5432, Some("db:5432"), None)])
                    .with_phase("Pending")
                    .with_message("restoring a backup"),
            ),
            (
                "Blocked",
                "UpstreamEndpointsMissing",
                format!("{s} offers no reachable address for endpoint(s) metrics (it is Pending); restoring a backup"),
            ),
        ),
    ];
    for (upstream, (phase, reason, message)) in cases {
        let observed = observe(&db, upstream.as_ref()).await;
        assert_eq!(stop(&observed), (phase, reason, message.as_str()));
        assert_eq!(observed.endpoints, None, "{reason} publishes no endpoints");
    }
    let portless =
        comb(json!({"class": "Manifests", "config": {"endpoints": [{"name": "postgres"}]}})).await;
    let upstream = Static::new(vec![endpoint("postgres", 5432, Some("db:5432"), None)]);
    assert_eq!(
        stop(&observe(&portless, &upstream).await),
        (
            "Error",
            "UpstreamFailed",
            "borrowing from Kubernetes::Comb::Upstream::Static failed: Manifests->endpoints: endpoint postgres has no port"
        )
    );
}

#[tokio::test]
async fn bridge_impossible_keeps_the_redirected_endpoints() {
    let comb = comb(json!({"class": "Manifests", "config": {"endpoints": [
        {"name": "postgres", "port": 5432}, {"name": "replica", "port": 5433}
    ]}}))
    .await;
    let mixed = Static::new(vec![
        endpoint("postgres", 5432, Some("db.example.com:5432"), None),
        endpoint("replica", 5433, Some("10.0.0.1"), None),
    ]);
    let observed = observe(&comb, &mixed).await;
    assert_eq!(
        stop(&observed),
        (
            "Blocked",
            "BridgeImpossible",
            "the upstream cannot be bridged: Service db: its endpoints point at both host names and IP \
             addresses (postgres at db.example.com, replica at 10.0.0.1), one Service cannot bridge both"
        )
    );
    let published: Vec<&str> = observed
        .endpoints
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(Endpoint::cluster)
        .collect();
    assert_eq!(published, ["db.example.com:5432", "10.0.0.1:5433"]);
    assert!(observed.bridge.is_empty());
}

/// A class whose bridge does not render.
struct BadBridge;

#[async_trait]
impl crate::engine::class::CombClass for BadBridge {
    fn name(&self) -> &str {
        "BadBridge"
    }
    async fn bridge_manifests(
        &self,
        _ctx: &crate::engine::class::CombContext,
        _endpoints: &[Endpoint],
    ) -> crate::error::Result<Vec<Value>> {
        Ok(vec![json!({"metadata": {"name": "x"}})])
    }
}

#[tokio::test]
async fn a_bridge_that_does_not_render_is_an_error() {
    let mut registry = ClassRegistry::new();
    registry.register_shared(Arc::new(BadBridge));
    let cr = Comb::new(
        "comb.internal",
        "platform",
        "db",
        comb_api::CombSpec::of_class("BadBridge"),
    );
    let comb = registry
        .build(&cr, &Settings::default(), &|_: &CombInstance| false)
        .await
        .unwrap();
    let observed = observe(&comb, &Static::new(vec![])).await;
    assert_eq!(
        stop(&observed),
        (
            "Error",
            "BridgeFailed",
            "rendering the bridge failed: BadBridge: a manifest has no kind"
        )
    );
    assert_eq!(observed.endpoints, Some(vec![]));
}

#[tokio::test]
async fn status_while_borrowing() {
    let db = db().await;
    let now: Timestamp = "2026-09-26T12:00:00Z".parse().unwrap();
    let offered = vec![
        endpoint("postgres", 5432, Some("db.platform.svc:5432"), None),
        endpoint("metrics", 9187, Some("db.platform.svc:9187"), None),
    ];
    let running = observe(&db, &Static::new(offered.clone())).await;
    let pending = observe(&db, &Static::new(offered).with_phase("Pending")).await;
    let live = Some(
        crate::engine::projection::Projection::of(
            "v1",
            "Service",
            &json!({"metadata": {"name": "x"}}),
            &comb_api::LabelKeys::default(),
        )
        .unwrap(),
    );
    let row = |status: LiveStatus| {
        assert!(status.pods.is_empty());
        assert_eq!(
            status
                .upstream
                .and_then(|upstream| upstream.class)
                .as_deref(),
            Some("Kubernetes::Comb::Upstream::Static")
        );
        (
            status.phase.to_string(),
            status.healthy,
            status.reason.map(|reason| reason.to_string()),
            status.message,
        )
    };
    let s = |text: &str| Some(text.to_string());
    let cases = [
        (
            &running,
            vec![live.clone(), live.clone()],
            ("Running", true, None, None),
        ),
        (
            &running,
            vec![live.clone(), None],
            (
                "Pending",
                false,
                s("ResourcesMissing"),
                s("Service db-metrics is missing"),
            ),
        ),
        (
            &running,
            vec![None, None],
            (
                "NotDeployed",
                false,
                s("ResourcesMissing"),
                s("Service db is missing; Service db-metrics is missing"),
            ),
        ),
        (
            &pending,
            vec![live.clone(), live.clone()],
            (
                "Pending",
                false,
                s("UpstreamNotRunning"),
                s("upstream Kubernetes::Comb::Upstream::Static is Pending"),
            ),
        ),
    ];
    for (observed, live, (phase, healthy, reason, message)) in cases {
        assert_eq!(
            row(derive_borrowed_status(observed, &live, now)),
            (phase.to_string(), healthy, reason, message)
        );
    }

    let unreachable = observe(&db, &Static::new(vec![]).with_reachable(false)).await;
    let status = derive_borrowed_status(&unreachable, &[], now);
    assert_eq!(
        (
            status.phase.as_str(),
            status.reason.as_ref().map(Reason::as_str),
            status.message.as_deref()
        ),
        (
            "Blocked",
            Some("UpstreamUnreachable"),
            Some("upstream Kubernetes::Comb::Upstream::Static is unreachable")
        )
    );
    assert_eq!(status.upstream.and_then(|u| u.reachable), Some(false));

    // Nothing to bridge: only the upstream's phase counts.
    let plain = comb(json!({"class": "Manifests"})).await;
    let nothing = observe(&plain, &Static::new(vec![]).with_phase("Pending")).await;
    assert_eq!(derive_borrowed_status(&nothing, &[], now).phase, "Pending");
    let nothing = observe(&plain, &Static::new(vec![])).await;
    assert!(derive_borrowed_status(&nothing, &[], now).healthy);
}

#[tokio::test]
async fn endpoints_while_borrowing_are_the_redirected_ones() {
    let db = db().await;
    let ctx = env().upstream_context(&db);
    let upstream = Static::new(vec![
        endpoint("postgres", 15432, Some("192.0.2.10"), None),
        endpoint("metrics", 9187, Some("192.0.2.10:9187"), None),
    ]);
    let endpoints = borrowed_endpoints(&db, &upstream, &ctx).await.unwrap();
    assert_eq!(endpoints[0].cluster(), Some("192.0.2.10:15432"));
    assert_eq!(endpoints[0].port(), 5432);
    let down = Static::new(vec![])
        .with_reachable(false)
        .with_message("vendor down");
    assert_eq!(
        borrowed_endpoints(&db, &down, &ctx)
            .await
            .unwrap_err()
            .to_string(),
        "upstream Kubernetes::Comb::Upstream::Static is unreachable: vendor down"
    );
}
