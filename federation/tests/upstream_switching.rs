//! Starting and ending to borrow on sandbox clusters: local -> borrowed -> local, replication
//! while borrowing, a bridge that cannot be built, and the errors of the upstream path.

use std::collections::BTreeMap;

use comb_api::managed_fields::{FIELD_MANAGER, applied_by};
use comb_api::{CombStatus, ManagedObject, UpstreamSpec};
use comb_federation::engine::borrow::Controlling;
use comb_federation::engine::class::CombInstance;
use comb_sandbox::controls::Fault;
use comb_testkit::fixtures::expect;
use comb_testkit::fixtures::{db_spec, endpoints, managed, slice_addresses, verdict};
use comb_testkit::upstream::{Layers, borrow};
use comb_testkit::wait_until;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

const STATIC: &str = "upstream Kubernetes::Comb::Upstream::Static";
const K8S: &str = "upstream Kubernetes::Comb::Upstream::K8s";

fn running_healthy(status: &CombStatus) -> bool {
    verdict(status) == ("Running".into(), "Healthy".into(), "healthy".into())
}

fn uid(object: &Value) -> &str {
    object["metadata"]["uid"].as_str().expect("a uid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_then_borrowed_then_local_again() {
    let layers = Layers::start().await;
    let none = Controlling::none();
    let mut db = layers
        .comb("dev", "platform", "db", db_spec("ClusterIP", None))
        .await;
    let status = layers.settle("dev", &mut db, &none, running_healthy).await;
    assert_eq!(status.upstream, None);
    let db_slices = async || -> Vec<(String, String)> {
        let slices: Api<DynamicObject> = Api::namespaced_with(
            layers.client("dev").await,
            "platform",
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("discovery.k8s.io", "v1", "EndpointSlice"),
                "endpointslices",
            ),
        );
        let listed = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=db"))
            .await
            .expect("the Service's EndpointSlices");
        let mut found: Vec<(String, String)> = listed
            .items
            .iter()
            .map(|slice| {
                let labels = slice.metadata.labels.clone().unwrap_or_default();
                (
                    slice.metadata.name.clone().unwrap_or_default(),
                    labels
                        .get("endpointslice.kubernetes.io/managed-by")
                        .cloned()
                        .unwrap_or_default(),
                )
            })
            .collect();
        found.sort();
        found
    };
    let selected = wait_until("the selector's EndpointSlice", async || {
        let slices = db_slices().await;
        slices
            .iter()
            .any(|(_, manager)| manager == "endpointslice-controller.k8s.io")
            .then_some(slices)
    })
    .await;
    assert!(!selected.is_empty());
    let local_service = layers
        .peek("dev", "v1", "Service", "platform", "db")
        .await
        .unwrap();
    assert_eq!(local_service["spec"]["selector"], json!({"app": "db"}));

    // Borrowing: the bridge Service replaces the local one in place, the workload is pruned.
    db = layers
        .edit(
            "dev",
            &db,
            json!({"upstream": {"class": "Static", "via": ["vendor"],
                   "endpoints": [{"name": "postgres", "port": 15432, "cluster": "10.1.2.3"}]}}),
        )
        .await;
    let status = layers.step("dev", &mut db, &none).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Running",
            "Borrowed",
            &format!("borrowed from {STATIC} via vendor")
        )
    );
    assert_eq!(
        endpoints(&status),
        [("postgres".into(), 5432, Some("10.1.2.3:15432".into()))],
        "the local port, the upstream's address and port"
    );
    assert_eq!(managed(&status), ["Service/db", "EndpointSlice/db-1"]);
    let upstream = status
        .upstream
        .clone()
        .expect("status.upstream while borrowing");
    assert_eq!(
        (
            upstream.class.as_deref(),
            upstream.reachable,
            upstream.via.clone()
        ),
        (
            Some("Kubernetes::Comb::Upstream::Static"),
            Some(true),
            Some(vec!["vendor".to_string()])
        )
    );
    let bridge = layers
        .peek("dev", "v1", "Service", "platform", "db")
        .await
        .unwrap();
    assert_eq!(uid(&bridge), uid(&local_service), "replaced in place");
    assert_eq!(bridge["spec"].get("selector"), None);
    assert_eq!(
        (
            &bridge["spec"]["ports"][0]["name"],
            &bridge["spec"]["ports"][0]["port"]
        ),
        (&json!("postgres"), &json!(5432)),
        "the Service keeps the local port"
    );
    let slice = layers
        .peek(
            "dev",
            "discovery.k8s.io/v1",
            "EndpointSlice",
            "platform",
            "db-1",
        )
        .await
        .unwrap();
    assert_eq!(slice_addresses(&slice), [json!(["10.1.2.3"])]);
    assert_eq!(slice["ports"][0]["port"], 15432);
    assert!(
        layers
            .peek("dev", "apps/v1", "Deployment", "platform", "db")
            .await
            .is_none(),
        "the local workload is pruned"
    );
    // What kube-controller-manager kept for the selector the bridge no longer has is gone: it
    // leaves them (kubernetes#91072), and kube-proxy would send part of the bridge's traffic to
    // the pruned Pods' addresses (the sandbox network found it).
    wait_until("only the bridge's EndpointSlice for db", async || {
        let slices = db_slices().await;
        (slices == [("db-1".to_string(), "comb".to_string())])
            .then_some(())
            .ok_or(slices)
    })
    .await;
    assert!(
        layers
            .peek("dev", "v1", "Endpoints", "platform", "db")
            .await
            .is_none(),
        "the Endpoints of the old selector are gone"
    );

    // A step that establishes nothing keeps the bridge recorded, status.upstream included.
    db = layers.edit("dev", &db, json!({"enabled": false})).await;
    let status = layers.step("dev", &mut db, &none).await;
    assert_eq!(verdict(&status).1, "Disabled");
    assert_eq!(status.upstream, Some(upstream));
    assert_eq!(managed(&status), ["Service/db", "EndpointSlice/db-1"]);

    // Local again: deployed in place of the bridge, which is pruned; status.upstream is gone.
    db = layers
        .edit("dev", &db, json!({"enabled": true, "upstream": null}))
        .await;
    let status = layers.step("dev", &mut db, &none).await;
    assert_eq!(
        (verdict(&status).0.as_str(), verdict(&status).1.as_str()),
        ("Pending", "Deployed")
    );
    assert_eq!(status.upstream, None);
    assert_eq!(managed(&status), ["Deployment/db", "Service/db"]);
    assert_eq!(
        endpoints(&status),
        [("postgres".into(), 5432, Some("db.platform.svc:5432".into()))]
    );
    let service = layers
        .peek("dev", "v1", "Service", "platform", "db")
        .await
        .unwrap();
    assert_eq!(uid(&service), uid(&local_service));
    assert_eq!(service["spec"]["selector"], json!({"app": "db"}));
    assert!(
        layers
            .peek(
                "dev",
                "discovery.k8s.io/v1",
                "EndpointSlice",
                "platform",
                "db-1"
            )
            .await
            .is_none()
    );
    assert!(
        layers
            .peek("dev", "apps/v1", "Deployment", "platform", "db")
            .await
            .is_some()
    );
    let status = layers.settle("dev", &mut db, &none, running_healthy).await;
    assert_eq!(status.upstream, None);
}

/// Prod's db, settled (a running upstream), and dev's db with the borrow of layer dev from
/// it, copying `replicate` (`[{kind, name}]`).
async fn dev_db_replicating_from_prod(
    layers: &Layers,
    replicate: Value,
) -> (CombInstance, Controlling) {
    let mut prod = layers
        .comb(
            "prod",
            "platform",
            "db",
            db_spec("ClusterIP", Some("192.0.2.10:5432")),
        )
        .await;
    layers
        .settle("prod", &mut prod, &Controlling::none(), running_healthy)
        .await;
    let dev = layers
        .comb("dev", "platform", "db", db_spec("ClusterIP", None))
        .await;
    let replicating = borrow(
        "dev",
        json!({"class": "K8s", "layer": "prod", "replicate": replicate}),
    );
    (dev, replicating)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_follows_the_upstream_and_ends_with_borrowing() {
    let layers = Layers::start().await;
    let prod_secrets: Api<Secret> = Api::namespaced(layers.client("prod").await, "platform");
    let dev_secrets: Api<Secret> = Api::namespaced(layers.client("dev").await, "platform");
    let secret = |password: &[u8]| -> Secret {
        serde_json::from_value(json!({
            "metadata": {"name": "db-credentials",
                         "annotations": {"comb.internal/replicable": "true"}},
            "data": {"password": ByteString(password.to_vec())}
        }))
        .unwrap()
    };
    prod_secrets
        .create(&PostParams::default(), &secret(b"s3cret"))
        .await
        .unwrap();
    let (mut dev, replicating) = dev_db_replicating_from_prod(
        &layers,
        json!([{"kind": "Secret", "name": "db-credentials"}]),
    )
    .await;
    let status = layers.step("dev", &mut dev, &replicating).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Running",
            "Borrowed",
            &format!(
                "borrowed from {K8S} (context prod) via prod; replicated Secret db-credentials"
            )
        )
    );
    assert_eq!(
        managed(&status),
        ["Service/db", "EndpointSlice/db-1", "Secret/db-credentials"]
    );
    let password = |secret: Secret| secret.data.unwrap()["password"].0.clone();
    let copy = dev_secrets.get("db-credentials").await.unwrap();
    assert_eq!(
        copy.metadata.labels.as_ref().unwrap()["comb.internal/comb"],
        "db"
    );
    assert_eq!(password(copy), b"s3cret");

    // Refreshed on the next borrowing step after the upstream copy changed.
    let mut rotated = prod_secrets.get("db-credentials").await.unwrap();
    rotated.data = Some(BTreeMap::from([(
        "password".to_string(),
        ByteString(b"rotated".to_vec()),
    )]));
    prod_secrets
        .replace("db-credentials", &PostParams::default(), &rotated)
        .await
        .unwrap();
    let status = layers.step("dev", &mut dev, &replicating).await;
    assert_eq!(verdict(&status).1, "Borrowed");
    assert_eq!(
        password(dev_secrets.get("db-credentials").await.unwrap()),
        b"rotated"
    );

    // A copy that cannot be made: ReplicationFailed, nothing applied, the upstream recorded.
    let missing = borrow(
        "dev",
        json!({"class": "K8s", "layer": "prod",
               "replicate": [{"kind": "Secret", "name": "db-credentials"}, {"kind": "ConfigMap", "name": "nope"}]}),
    );
    let failed = layers.step("dev", &mut dev, &missing).await;
    assert_eq!(
        verdict(&failed),
        expect(
            "Error",
            "ReplicationFailed",
            &format!(
                "replicating from {K8S} (context prod) failed: reading ConfigMap nope in namespace \
                 platform of context prod failed: 404 NotFound: configmaps \"nope\" not found"
            )
        )
    );
    assert_eq!(managed(&failed), managed(&status));
    assert_eq!(
        failed
            .upstream
            .as_ref()
            .unwrap()
            .phase
            .as_ref()
            .map(|p| p.as_str()),
        Some("Running")
    );
    assert_eq!(
        endpoints(&failed),
        [("postgres".into(), 5432, Some("192.0.2.10:5432".into()))]
    );

    // Borrowing ends (the layer runs it locally): the copy is pruned with the bridge.
    let local = Controlling::new("borrow.local of layer dev", UpstreamSpec::Local);
    let status = layers.step("dev", &mut dev, &local).await;
    assert_eq!(verdict(&status).1, "Deployed");
    assert_eq!(managed(&status), ["Deployment/db", "Service/db"]);
    assert!(
        dev_secrets
            .get_opt("db-credentials")
            .await
            .unwrap()
            .is_none(),
        "the replicated Secret is pruned"
    );
    assert!(
        prod_secrets
            .get_opt("db-credentials")
            .await
            .unwrap()
            .is_some(),
        "the upstream's is not touched"
    );
}

/// A copy an older comb wrote (by create, without a field manager) is taken over on the next
/// borrowing step: comb applies it from then on, so a key its source drops leaves it too; a
/// copy that stands as its source is not written at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_an_older_comb_wrote_is_taken_over_and_follows_its_source() {
    let layers = Layers::start().await;
    let prod_configs: Api<ConfigMap> = Api::namespaced(layers.client("prod").await, "platform");
    let dev_configs: Api<ConfigMap> = Api::namespaced(layers.client("dev").await, "platform");
    let config_map = |object: Value| -> ConfigMap { serde_json::from_value(object).unwrap() };
    prod_configs
        .create(
            &PostParams::default(),
            &config_map(json!({"metadata": {"name": "db-config",
                                            "annotations": {"comb.internal/replicable": "true"}},
                               "data": {"a": "1", "b": "2"}})),
        )
        .await
        .unwrap();
    // What an older comb left: the Comb's labels and origin, and a key the source has dropped.
    dev_configs
        .create(
            &PostParams::default(),
            &config_map(json!({
                "metadata": {"name": "db-config",
                    "labels": {"app.kubernetes.io/managed-by": "comb", "comb.internal/comb": "db",
                               "comb.internal/comb-namespace": "platform"},
                    "annotations": {"comb.internal/replicated-from": "prod/platform/db-config"}},
                "data": {"a": "1", "stale": "x"}
            })),
        )
        .await
        .unwrap();
    let (mut dev, replicating) =
        dev_db_replicating_from_prod(&layers, json!([{"kind": "ConfigMap", "name": "db-config"}]))
            .await;
    // ... and recorded it by identity, as it did (no uid): what makes it the Comb's.
    let mut cr = dev.cr().clone();
    cr.status = Some(CombStatus {
        managed_resources: Some(vec![ManagedObject::new(
            "v1",
            "ConfigMap",
            Some("platform"),
            "db-config",
        )]),
        ..CombStatus::default()
    });
    let stored = layers
        .ops("dev")
        .await
        .update_comb_status("comb.internal", cr)
        .await
        .unwrap();
    dev.adopt_cr(stored);
    let copy = async || serde_json::to_value(dev_configs.get("db-config").await.unwrap()).unwrap();

    let status = layers.step("dev", &mut dev, &replicating).await;
    assert_eq!(verdict(&status).1, "Borrowed", "{status:?}");
    let taken_over = copy().await;
    assert_eq!(taken_over["data"], json!({"a": "1", "b": "2"}));
    assert!(applied_by(&taken_over, FIELD_MANAGER), "{taken_over}");

    // Dropped at the source: it leaves the copy too.
    let mut source = prod_configs.get("db-config").await.unwrap();
    source.data = Some(BTreeMap::from([("a".to_string(), "1".to_string())]));
    prod_configs
        .replace("db-config", &PostParams::default(), &source)
        .await
        .unwrap();
    let status = layers.step("dev", &mut dev, &replicating).await;
    assert_eq!(verdict(&status).1, "Borrowed", "{status:?}");
    let followed = copy().await;
    assert_eq!(followed["data"], json!({"a": "1"}));

    // Standing as its source: not written again.
    layers.step("dev", &mut dev, &replicating).await;
    assert_eq!(
        copy().await["metadata"]["resourceVersion"],
        followed["metadata"]["resourceVersion"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_names_and_ips_behind_one_service_cannot_be_bridged() {
    let layers = Layers::start().await;
    let none = Controlling::none();
    let mut db = layers
        .comb(
            "dev",
            "platform",
            "db",
            json!({"class": "Manifests",
                   "config": {"endpoints": [{"name": "postgres", "port": 5432}, {"name": "replica", "port": 5433}]},
                   "upstream": {"class": "Kubernetes::Comb::Upstream::Static", "endpoints": [
                       {"name": "postgres", "port": 5432, "cluster": "db.example.com:5432"},
                       {"name": "replica", "port": 5433, "cluster": "10.0.0.1"}]}}),
        )
        .await;
    let status = layers.step("dev", &mut db, &none).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Blocked",
            "BridgeImpossible",
            "the upstream cannot be bridged: Service db: its endpoints point at both host names and \
             IP addresses (postgres at db.example.com, replica at 10.0.0.1), one Service cannot bridge both"
        )
    );
    assert_eq!(
        endpoints(&status),
        [
            ("postgres".into(), 5432, Some("db.example.com:5432".into())),
            ("replica".into(), 5433, Some("10.0.0.1:5433".into()))
        ],
        "the redirected endpoints are published"
    );
    assert!(status.managed().is_empty());
    assert!(
        layers
            .peek("dev", "v1", "Service", "platform", "db")
            .await
            .is_none()
    );
    assert!(status.upstream.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_of_the_upstream_path() {
    let layers = Layers::start().await;
    let none = Controlling::none();

    // Resolution is checked before Disabled; the controlling code decides before spec.upstream.
    let mut broken = layers
        .comb_admitted_earlier(
            "dev",
            "platform",
            "broken",
            json!({"class": "Manifests", "enabled": false}),
            json!({"class": "Manifests", "enabled": false, "upstream": {"class": "Probe"}}),
        )
        .await;
    let status = layers.step("dev", &mut broken, &none).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Error",
            "UpstreamFailed",
            "resolving the upstream failed: spec.upstream: unknown upstream class 'Probe' (known: K8s, \
             Kubernetes::Comb::Upstream::K8s, Kubernetes::Comb::Upstream::Static, Static)"
        )
    );
    assert!(
        status.endpoint_list().is_empty(),
        "no endpoints while unresolved"
    );
    let local = Controlling::new("borrow.local of layer dev", UpstreamSpec::Local);
    let status = layers.step("dev", &mut broken, &local).await;
    assert_eq!(verdict(&status).1, "Disabled");

    // The bridge fails half-way: DeployFailed, the upstream established and recorded.
    layers.controls("dev").inject(Fault::status(
        "PATCH",
        "/api/v1/namespaces/platform/services/db",
        500,
        1,
    ));
    let mut db = layers
        .comb(
            "dev",
            "platform",
            "db",
            json!({"class": "Manifests", "config": {"endpoints": [{"name": "postgres", "port": 5432}]}}),
        )
        .await;
    let upstream = borrow(
        "dev",
        json!({"class": "Static", "endpoints": [{"name": "postgres", "port": 5432, "cluster": "pg.example.com:5432"}]}),
    );
    let status = layers.step("dev", &mut db, &upstream).await;
    let (phase, reason, message) = verdict(&status);
    assert_eq!((phase.as_str(), reason.as_str()), ("Error", "DeployFailed"));
    assert!(
        message.starts_with("deploy failed: ensure Service db: "),
        "{message}"
    );
    assert!(status.upstream.is_some());
    assert_eq!(
        endpoints(&status),
        [("postgres".into(), 5432, Some("pg.example.com:5432".into()))]
    );
    // The fault was one request: the next step bridges.
    let status = layers.step("dev", &mut db, &upstream).await;
    assert_eq!(
        verdict(&status),
        expect("Running", "Borrowed", &format!("borrowed from {STATIC}"))
    );
    let bridge = layers
        .peek("dev", "v1", "Service", "platform", "db")
        .await
        .unwrap();
    assert_eq!(bridge["spec"]["externalName"], "pg.example.com");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_endpoints_while_borrowing() {
    use comb_federation::engine::borrow::{live_status, resolution};
    use comb_federation::engine::operations::{describe, endpoint};
    use comb_federation::engine::reconcile::UpstreamResolution;

    let layers = Layers::start().await;
    let none = Controlling::none();
    let mut db = layers
        .comb(
            "dev",
            "platform",
            "db",
            json!({"class": "Manifests",
                   "config": {"endpoints": [{"name": "postgres", "port": 5432}]},
                   "upstream": {"class": "Static", "phase": "Pending", "message": "restoring",
                                "endpoints": [{"name": "postgres", "port": 5432, "cluster": "10.9.8.7:6432"}]}}),
        )
        .await;
    let ops = layers.ops("dev").await;
    let UpstreamResolution::Borrowed(borrowing) = resolution(&db, &none, &layers.env("dev")).await
    else {
        panic!("db borrows");
    };
    async fn borrowed_status(
        ops: &comb_federation::engine::kube_ops::KubeOps,
        db: &comb_federation::engine::class::CombInstance,
        borrowing: &comb_federation::engine::borrow::Borrowing,
    ) -> comb_federation::engine::live_status::LiveStatus {
        let status = live_status(ops, db, Some(borrowing)).await.unwrap();
        assert!(
            status.upstream.is_some(),
            "a local status while borrowing: {status:?}"
        );
        status
    }

    // Nothing deployed yet.
    let status = borrowed_status(&ops, &db, &borrowing).await;
    assert_eq!(
        (
            status.phase.as_str(),
            status.reason.as_ref().map(|r| r.as_str()),
            status.message.as_deref()
        ),
        (
            "NotDeployed",
            Some("ResourcesMissing"),
            Some(
                "Service db is missing; EndpointSlice db-1 is missing; \
                 upstream Kubernetes::Comb::Upstream::Static is Pending: restoring"
            )
        )
    );
    let step = layers.step("dev", &mut db, &none).await;
    assert_eq!(verdict(&step).1, "UpstreamNotRunning");

    // The bridge stands, the upstream does not run yet.
    let status = borrowed_status(&ops, &db, &borrowing).await;
    assert_eq!(
        (
            status.phase.as_str(),
            status.reason.as_ref().map(|r| r.as_str())
        ),
        ("Pending", Some("UpstreamNotRunning"))
    );
    assert!(status.pods.is_empty());
    assert_eq!(
        status
            .upstream
            .and_then(|u| u.phase)
            .map(|p| p.to_string())
            .as_deref(),
        Some("Pending")
    );

    // endpoint(name) and describe answer with the redirected addresses.
    let postgres = endpoint(&db, "postgres", Some(&borrowing)).await.unwrap();
    assert_eq!(
        (postgres.port(), postgres.cluster()),
        (5432, Some("10.9.8.7:6432"))
    );
    assert_eq!(
        endpoint(&db, "web", Some(&borrowing))
            .await
            .unwrap_err()
            .to_string(),
        "Manifests->endpoint: db has no endpoint web (it has: postgres)"
    );
    let described = describe(&ops, &db, Some(&borrowing)).await.unwrap();
    assert_eq!(
        described.endpoints[0].cluster.as_deref(),
        Some("10.9.8.7:6432")
    );
    let json = serde_json::to_value(&described.status).unwrap();
    assert_eq!(json["phase"], "Pending");
    assert_eq!(
        json["upstream"]["class"],
        "Kubernetes::Comb::Upstream::Static"
    );

    // An unreachable upstream: the status is the stop, and there are no endpoints to give.
    db = layers
        .edit(
            "dev",
            &db,
            json!({"upstream": {"reachable": false, "message": "vendor down"}}),
        )
        .await;
    let UpstreamResolution::Borrowed(down) = resolution(&db, &none, &layers.env("dev")).await
    else {
        panic!("db borrows");
    };
    let status = borrowed_status(&ops, &db, &down).await;
    assert_eq!(
        (
            status.phase.as_str(),
            status.reason.as_ref().map(|r| r.as_str()),
            status.message.as_deref()
        ),
        (
            "Blocked",
            Some("UpstreamUnreachable"),
            Some("upstream Kubernetes::Comb::Upstream::Static is unreachable: vendor down")
        )
    );
    assert_eq!(
        endpoint(&db, "postgres", Some(&down))
            .await
            .unwrap_err()
            .to_string(),
        "upstream Kubernetes::Comb::Upstream::Static is unreachable: vendor down"
    );
}
