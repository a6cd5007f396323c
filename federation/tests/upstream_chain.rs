//! Borrowing across layers on sandbox clusters: the chain prod <- staging <- dev, a loop, and an
//! upstream whose API server is partitioned away.

use comb_api::CombStatus;
use comb_federation::engine::borrow::Controlling;
use comb_testkit::fixtures::{db_spec, endpoints, managed, slice_addresses, verdict};
use comb_testkit::upstream::{DbChain, Layers, borrow};
use serde_json::{Value, json};

const K8S: &str = "upstream Kubernetes::Comb::Upstream::K8s";

fn running_healthy(status: &CombStatus) -> bool {
    verdict(status).0 == "Running" && verdict(status).1 == "Healthy"
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_layers_prod_staging_dev() {
    let layers = Layers::start().await;
    let local = Controlling::none();
    let DbChain {
        mut prod,
        mut staging,
        mut dev,
        staging_borrows,
        dev_borrows,
    } = layers.db_chain().await;

    // prod deploys; while it is not Running, staging bridges to it but does not run: prod is
    // rolling out (Pending, Deployed).
    let first = layers.step("prod", &mut prod, &local).await;
    assert_eq!(
        (verdict(&first).0.as_str(), verdict(&first).1.as_str()),
        ("Pending", "Deployed")
    );
    let status = layers.step("staging", &mut staging, &staging_borrows).await;
    assert_eq!(
        verdict(&status),
        (
            "Pending".into(),
            "UpstreamRollingOut".into(),
            format!("{K8S} (context prod) is rolling out")
        )
    );
    // dev is on another server, and nothing up the chain publishes an external address yet.
    let status = layers.step("dev", &mut dev, &dev_borrows).await;
    assert_eq!(
        verdict(&status),
        (
            "Blocked".into(),
            "UpstreamEndpointsMissing".into(),
            format!(
                "{K8S} (context staging) offers no reachable address for endpoint(s) postgres (it is Pending); \
                 no address reachable from here for endpoint(s) postgres: context staging is another API \
                 server, and Comb staging/db in context staging publishes no external address"
            )
        )
    );
    assert!(status.endpoint_list().is_empty());
    assert_eq!(
        status.upstream.as_ref().unwrap().via,
        Some(strings(&["staging", "prod"]))
    );

    // prod runs, and publishes its LoadBalancer address as its external address.
    layers
        .settle("prod", &mut prod, &local, running_healthy)
        .await;
    layers
        .provide_load_balancer("prod", "platform", "db", "198.51.100.7")
        .await;
    let service = layers
        .peek("prod", "v1", "Service", "platform", "db")
        .await
        .unwrap();
    let ip = service
        .pointer("/status/loadBalancer/ingress/0/ip")
        .and_then(Value::as_str)
        .expect("a LoadBalancer Service gets an ingress IP")
        .to_string();
    let external = format!("{ip}:5432");
    prod = layers
        .edit(
            "prod",
            &prod,
            json!({"config": {"endpoints": [{"name": "postgres", "port": 5432, "external": external}]}}),
        )
        .await;
    let status = layers.step("prod", &mut prod, &local).await;
    assert!(running_healthy(&status), "{status:#?}");
    assert_eq!(
        status.endpoint_list()[0].external.as_deref(),
        Some(external.as_str())
    );

    // staging, on prod's server: the cluster address, through an ExternalName Service.
    let status = layers.step("staging", &mut staging, &staging_borrows).await;
    assert_eq!(
        verdict(&status),
        (
            "Running".into(),
            "Borrowed".into(),
            format!("borrowed from {K8S} (context prod) via prod")
        )
    );
    let upstream = status.upstream.clone().unwrap();
    assert_eq!(
        (
            upstream.class.as_deref(),
            upstream.context.as_deref(),
            upstream.reachable,
            upstream.phase.as_ref().map(|p| p.as_str()),
            upstream.via
        ),
        (
            Some("Kubernetes::Comb::Upstream::K8s"),
            Some("prod"),
            Some(true),
            Some("Running"),
            Some(strings(&["prod"]))
        )
    );
    assert_eq!(
        endpoints(&status),
        [("postgres".into(), 5432, Some("db.platform.svc:5432".into()))]
    );
    assert_eq!(
        status.endpoint_list()[0].external.as_deref(),
        Some(external.as_str())
    );
    assert_eq!(managed(&status), ["Service/db"]);
    let bridge = layers
        .peek("prod", "v1", "Service", "staging", "db")
        .await
        .unwrap();
    assert_eq!(bridge["spec"]["type"], "ExternalName");
    assert_eq!(
        bridge["spec"]["externalName"],
        "db.platform.svc.cluster.local"
    );
    assert!(
        layers
            .peek("prod", "apps/v1", "Deployment", "staging", "db")
            .await
            .is_none(),
        "a borrowing Comb runs nothing"
    );

    // dev, on another server: prod's external address, through a Service and an EndpointSlice.
    let status = layers.step("dev", &mut dev, &dev_borrows).await;
    assert_eq!(
        verdict(&status),
        (
            "Running".into(),
            "Borrowed".into(),
            format!("borrowed from {K8S} (context staging) via staging, prod")
        )
    );
    assert_eq!(
        status.upstream.as_ref().unwrap().via,
        Some(strings(&["staging", "prod"]))
    );
    assert_eq!(
        endpoints(&status),
        [("postgres".into(), 5432, Some(external.clone()))]
    );
    assert_eq!(managed(&status), ["Service/db", "EndpointSlice/db-1"]);
    let service = layers
        .peek("dev", "v1", "Service", "platform", "db")
        .await
        .unwrap();
    assert_eq!(service["spec"].get("selector"), None);
    assert_eq!(service["spec"]["ipFamilies"], json!(["IPv4"]));
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
    assert_eq!(slice_addresses(&slice), [json!([ip])]);
    assert_eq!(
        slice["ports"],
        json!([{"name": "postgres", "port": 5432, "protocol": "TCP"}])
    );
    assert_eq!(
        slice["metadata"]["labels"]["kubernetes.io/service-name"],
        "db"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_combs_borrowing_from_each_other_are_a_stable_loop() {
    let layers = Layers::start().await;
    let none = Controlling::none();
    // Each names the other in spec.upstream (short and Perl class names alike).
    let mut on_dev = layers
        .comb(
            "dev",
            "platform",
            "echo",
            json!({"class": "Manifests", "upstream": {"class": "K8s", "context": "prod"}}),
        )
        .await;
    let mut on_prod = layers
        .comb(
            "prod",
            "platform",
            "echo",
            json!({"class": "Manifests", "upstream": {"class": "Kubernetes::Comb::Upstream::K8s", "context": "dev"}}),
        )
        .await;
    let max = layers.settings.max_upstream_depth.get();
    let mut rounds = 0;
    let (dev_status, prod_status) = loop {
        rounds += 1;
        assert!(rounds <= 2 * max, "no loop found after {rounds} rounds");
        let dev_status = layers.step("dev", &mut on_dev, &none).await;
        let prod_status = layers.step("prod", &mut on_prod, &none).await;
        if verdict(&dev_status).1 == "UpstreamLoop" && verdict(&prod_status).1 == "UpstreamLoop" {
            break (dev_status, prod_status);
        }
    };
    let via = |status: &CombStatus| status.upstream.as_ref().unwrap().via.clone().unwrap();
    let dev_via = via(&dev_status);
    assert_eq!(dev_via.len(), max);
    let expected: Vec<String> = ["prod", "dev"]
        .iter()
        .cycle()
        .take(max)
        .map(|c| c.to_string())
        .collect();
    assert_eq!(dev_via, expected);
    assert_eq!(
        verdict(&dev_status),
        (
            "Blocked".into(),
            "UpstreamLoop".into(),
            format!(
                "{K8S} (context prod) leads through more than {max} layers, a loop? via {}",
                expected.join(", ")
            )
        )
    );
    assert!(dev_status.endpoint_list().is_empty());
    assert_eq!(via(&prod_status).len(), max);

    // Further steps change nothing: the chain stays cut.
    for _ in 0..3 {
        let again = layers.step("dev", &mut on_dev, &none).await;
        assert_eq!(verdict(&again), verdict(&dev_status));
        assert_eq!(via(&again), dev_via);
        let again = layers.step("prod", &mut on_prod, &none).await;
        assert_eq!(verdict(&again), verdict(&prod_status));
        assert_eq!(via(&again), via(&prod_status));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_upstream_blocks_until_healed() {
    let layers = Layers::start().await;
    let local = Controlling::none();
    let mut prod = layers
        .comb(
            "prod",
            "platform",
            "db",
            db_spec("ClusterIP", Some("192.0.2.10:5432")),
        )
        .await;
    layers
        .settle("prod", &mut prod, &local, running_healthy)
        .await;
    let mut dev = layers
        .comb("dev", "platform", "db", db_spec("ClusterIP", None))
        .await;
    let dev_borrows = borrow("dev", json!({"class": "K8s", "layer": "prod"}));
    let borrowed = layers.step("dev", &mut dev, &dev_borrows).await;
    assert_eq!(
        verdict(&borrowed),
        (
            "Running".into(),
            "Borrowed".into(),
            format!("borrowed from {K8S} (context prod) via prod")
        )
    );

    layers.controls("prod").partition();
    let blocked = layers.step("dev", &mut dev, &dev_borrows).await;
    let (phase, reason, message) = verdict(&blocked);
    assert_eq!(
        (phase.as_str(), reason.as_str()),
        ("Blocked", "UpstreamUnreachable")
    );
    assert!(
        message.starts_with(&format!(
            "{K8S} (context prod) is unreachable: reading Comb platform/db in context prod failed: "
        )),
        "{message}"
    );
    let upstream = blocked.upstream.clone().unwrap();
    assert_eq!(upstream.reachable, Some(false));
    assert_eq!(upstream.via, Some(strings(&["prod"])));
    assert!(
        blocked.endpoint_list().is_empty(),
        "an unreachable upstream publishes nothing"
    );
    assert_eq!(
        managed(&blocked),
        managed(&borrowed),
        "the bridge stays recorded"
    );
    assert!(
        layers
            .peek("dev", "v1", "Service", "platform", "db")
            .await
            .is_some(),
        "and standing"
    );

    layers.controls("prod").heal();
    let healed = layers.step("dev", &mut dev, &dev_borrows).await;
    assert_eq!(verdict(&healed), verdict(&borrowed));
    assert_eq!(endpoints(&healed), endpoints(&borrowed));
}
