//! Running the controller: the admin server (metrics, health, readiness, the queue) and leader
//! election between two replicas.

use std::net::SocketAddr;

use comb_federation::controller::{ControllerOptions, LeaderElection};
use comb_testkit::controller::{World, test_options};
use comb_testkit::fixtures::web;
use comb_testkit::wait_until;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CONFIG: &str = "resync: 1h\nlayers: [{name: prod, context: prod, namespaces: [platform]}]";

/// A plain HTTP/1.1 GET: the status code and the body.
async fn get(address: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connects");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("the request is sent");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("the response reads");
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("parses");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    (code, body)
}

#[tokio::test]
async fn the_admin_server_shows_metrics_health_and_the_queue() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    let options = ControllerOptions {
        admin_address: Some("127.0.0.1:0".parse().unwrap()),
        ..test_options()
    };
    let running = world.run_options(world.config(CONFIG), options).await;
    world
        .create_comb("prod", "platform", "web", web("web", "nginx:1"))
        .await;
    world
        .wait_phase("prod", "platform", "web", "Running", None)
        .await;
    let handle = running.handle.clone();
    let address = wait_until("the admin server to listen", || {
        let handle = handle.clone();
        async move { handle.admin_address() }
    })
    .await;

    assert_eq!(get(address, "/healthz").await, (200, "ok\n".to_string()));
    assert_eq!(get(address, "/readyz").await, (200, "ready\n".to_string()));
    // The step that recorded Running counts itself once it has ended, a moment after its
    // status write is visible: wait for the metrics rather than race them.
    let lines = [
        r#"comb_layer_up{layer="prod"} 1"#,
        r#"comb_queue_depth{layer="prod"} 0"#,
        r#"comb_reconciles_total{layer="prod",phase="Running"}"#,
        r#"comb_transitions_total{layer="prod",phase="Running",reason="Healthy"} 1"#,
        r#"comb_step_duration_seconds_count{layer="prod"}"#,
    ];
    let metrics = wait_until("the metrics of the Running step", || async {
        let (code, metrics) = get(address, "/metrics").await;
        (code == 200 && lines.iter().all(|line| metrics.contains(line))).then_some(metrics)
    })
    .await;
    // Each transition was one status write, counted as such.
    let sum = |prefix: &str| -> u64 {
        metrics
            .lines()
            .filter(|line| line.starts_with(prefix))
            .filter_map(|line| line.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum()
    };
    let transitions = sum(r#"comb_transitions_total{layer="prod","#);
    assert_eq!(
        sum(r#"comb_status_writes_total{layer="prod",change="transition"}"#),
        transitions,
        "{metrics}"
    );
    let queue = wait_until("web idle in the queue", || async {
        let (_, body) = get(address, "/debug/queue").await;
        let queue: serde_json::Value = serde_json::from_str(&body).ok()?;
        (queue[0]["combs"][0]["state"] == "idle").then_some(queue)
    })
    .await;
    let web = &queue[0]["combs"][0];
    assert_eq!(queue[0]["layer"], "prod");
    assert_eq!(web["namespace"], "platform");
    assert_eq!(web["name"], "web");
    assert_eq!(web["lastPhase"], "Running");
    assert!(web["lastStepAt"].is_string(), "{web}");
    let (_, layers) = get(address, "/debug/layers").await;
    let layers: serde_json::Value = serde_json::from_str(&layers).unwrap();
    assert_eq!(layers[0]["name"], "prod");
    assert_eq!(layers[0]["state"], "up");
    assert_eq!(layers[0]["listed"], true);
    assert_eq!(layers[0]["combs"], 1);
    running.stop().await;
}

/// Deletes Deployment web and waits until a reconciling replica has brought it back.
async fn restore_after_delete(world: &World, deployments: &Api<Deployment>) {
    let uid = deployments
        .get("web")
        .await
        .expect("the read answers")
        .metadata
        .uid;
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("deleted");
    world
        .wait_object(deployments, "web", "the Deployment back", |d| {
            d.is_some_and(|d| d.metadata.uid != uid)
        })
        .await;
}

fn elected(identity: &str) -> ControllerOptions {
    ControllerOptions {
        leader_election: Some(LeaderElection {
            duration_seconds: 2,
            ..LeaderElection::new("default", "comb", identity)
        }),
        ..test_options()
    }
}

#[tokio::test]
async fn one_replica_leads_and_the_other_takes_over_when_it_stops() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    world
        .create_comb("prod", "platform", "web", web("web", "nginx:1"))
        .await;
    let first = world
        .run_options(world.config(CONFIG), elected("first"))
        .await;
    world
        .wait_phase("prod", "platform", "web", "Running", None)
        .await;
    let leases: Api<Lease> = Api::namespaced(world.client("prod").await, "default");
    let lease = leases.get("comb-controller").await.unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("first")
    );

    let second = world
        .run_options(world.config(CONFIG), elected("second"))
        .await;
    assert!(
        second.handle.readiness().is_ready(),
        "a standby replica is ready"
    );
    // While the first leads, it alone reconciles: a deleted Deployment comes back, and the
    // second replica has stepped nothing.
    let deployments: Api<Deployment> = Api::namespaced(world.client("prod").await, "platform");
    restore_after_delete(&world, &deployments).await;
    assert!(
        second.handle.queue()[0].combs.is_empty(),
        "the standby replica steps nothing"
    );
    let lease = leases.get("comb-controller").await.unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("first")
    );

    first.stop().await;
    wait_until("the second replica to take the Lease", || {
        let leases = leases.clone();
        async move {
            let lease = leases.get("comb-controller").await.ok()?;
            (lease.spec?.holder_identity.as_deref() == Some("second")).then_some(())
        }
    })
    .await;
    // The second replica reconciles now.
    restore_after_delete(&world, &deployments).await;
    assert!(!second.handle.queue()[0].combs.is_empty());
    second.stop().await;
}
