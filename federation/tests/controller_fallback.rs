//! Fallback along the chain (issue 22) on three clusters, prod, staging and dev: dev borrows
//! `nats` from staging and falls back to prod (or runs its own) while staging is unhealthy, as
//! the controller sees it: staging's API server partitioned away (connections refused, or
//! taken and never answered), its nats not serving, or (`probe: tcp`) its address not taking
//! connections. Every test waits on conditions with the kit's deadline; `unhealthyAfter` and
//! `healthyAfter` are short so that the switches come quickly.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use comb_api::{Comb, CombStatus};
use comb_federation::controller::LayerState;
use comb_sandbox::controls::PartitionMode;
use comb_testkit::controller::{Running, World, comb_events};
use comb_testkit::fixtures::verdict;
use comb_testkit::wait_until;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::watcher;
use serde_json::{Value, json};

/// nats: a Deployment and a Service, its client endpoint published at `external`.
fn nats(external: &str, port: u16) -> Value {
    json!({
        "class": "Manifests",
        "config": {
            "manifests": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nats"},
                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "nats"}},
                          "template": {"metadata": {"labels": {"app": "nats"}},
                                       "spec": {"containers": [{"name": "nats", "image": "nats:2"}]}}}},
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nats"},
                 "spec": {"selector": {"app": "nats"}, "ports": [{"name": "client", "port": port}]}}
            ],
            "endpoints": [{"name": "client", "port": port, "external": external}]
        }
    })
}

/// Where each layer's nats is published (TEST-NET addresses: nothing is sent to them).
const PROD_NATS: &str = "192.0.2.10";
const STAGING_NATS: &str = "192.0.2.20";
const DEV_NATS: &str = "192.0.2.30";

/// Three clusters with the Comb CRD and namespace `platform`.
async fn three_clusters() -> World {
    World::start(
        &["prod", "staging", "dev"],
        &[],
        &[
            ("prod", "platform"),
            ("staging", "platform"),
            ("dev", "platform"),
        ],
    )
    .await
}

/// staging runs its own nats (and would borrow the rest from prod); dev borrows from staging
/// with `dev_borrow`'s fallback settings.
fn config(world: &World, dev_borrow: &str) -> comb_federation::config::Config {
    world.config(&format!(
        "resync: 1h
layers:
 - {{name: prod, context: prod, namespaces: [platform]}}
 - {{name: staging, context: staging, namespaces: [platform], borrow: {{from: prod, local: [nats]}}}}
 - {{name: dev, context: dev, namespaces: [platform], borrow: {{from: staging, combs: [nats], {dev_borrow}}}}}"
    ))
}

/// The three clusters, the controller with dev's fallback settings `dev_fallback`, and nats in
/// every layer, dev borrowing staging's.
async fn started(dev_fallback: &str) -> (World, Running) {
    let world = three_clusters().await;
    let running = world.run(config(&world, dev_fallback)).await;
    nats_everywhere(&world).await;
    (world, running)
}

/// Creates nats in each (context, namespace, published host), on port 4222, in order, each
/// Running before the next: a borrower met before its upstreams recorded a status would count
/// them as not serving from the start.
async fn create_nats(world: &World, places: &[(&str, &str, &str)]) {
    for (context, namespace, host) in places {
        create_running(
            world,
            context,
            namespace,
            nats(&format!("{host}:4222"), 4222),
        )
        .await;
    }
}

/// Creates nats in `context`'s `namespace` with `spec` and waits until it runs.
async fn create_running(world: &World, context: &str, namespace: &str, spec: Value) {
    world.create_comb(context, namespace, "nats", spec).await;
    world
        .wait_phase(context, namespace, "nats", "Running", None)
        .await;
}

/// prod, staging and dev each with its own nats.
const NATS_EVERYWHERE: [(&str, &str, &str); 3] = [
    ("prod", "platform", PROD_NATS),
    ("staging", "platform", STAGING_NATS),
    ("dev", "platform", DEV_NATS),
];

/// Creates nats in every layer, each publishing its own address, and waits until dev borrows
/// staging's.
async fn nats_everywhere(world: &World) {
    create_nats(world, &NATS_EVERYWHERE).await;
    wait_on(world, "dev's nats to borrow from staging", |status| {
        borrowed_from(status, "staging")
    })
    .await;
}

/// Waits until dev's nats borrows from staging again.
async fn back_on_staging(world: &World) -> CombStatus {
    wait_on(world, "dev's nats back on staging", |s| {
        borrowed_from(s, "staging")
    })
    .await
}

/// Waits until dev's nats records a status `test` accepts, and returns it.
async fn wait_on(world: &World, what: &str, test: impl Fn(&CombStatus) -> bool) -> CombStatus {
    let combs: Api<Comb> = world.combs("dev", "platform").await;
    wait_until(what, async || {
        let status = combs.get("nats").await.ok()?.status?;
        test(&status).then_some(status)
    })
    .await
}

/// A refusing partition reads as `context unreachable` (the layer's watches fail, its checks
/// are refused); on a loaded machine a check may come late first, which reads as `context not
/// answering`: the same partition.
fn as_refused(message: &str) -> String {
    message.replace("(context not answering)", "(context unreachable)")
}

/// The `UpstreamFallback` condition as (status, reason, message).
fn fallback_condition(status: &CombStatus) -> Option<(String, String, String)> {
    let condition = status.condition("UpstreamFallback")?;
    Some((
        condition.status.to_string(),
        condition
            .reason
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        condition.message.clone().unwrap_or_default(),
    ))
}

/// Running and borrowing from the layer of context `context`.
fn borrowed_from(status: &CombStatus, context: &str) -> bool {
    status.phase.as_ref().is_some_and(|p| p == "Running")
        && status
            .upstream
            .as_ref()
            .is_some_and(|upstream| upstream.context.as_deref() == Some(context))
}

/// The Events on dev's nats, as (type, reason, message), oldest first.
async fn events_of_nats(world: &World) -> Vec<(String, String, String)> {
    let events: Api<Event> = Api::namespaced(world.client("dev").await, "platform");
    comb_events(&events, "nats").await
}

fn metric(running: &Running, line_prefix: &str) -> Option<String> {
    let text = running.handle.metrics_text().ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(line_prefix))
        .map(|value| value.trim().to_string())
}

/// Every version of dev's bridge (Service nats and EndpointSlice nats-1) the API server
/// announces while the returned guard lives: what a consumer resolving `nats` could meet.
struct BridgeVersions {
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl BridgeVersions {
    async fn watch(world: &World) -> BridgeVersions {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let client = world.client("dev").await;
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "platform");
        let services: Api<Service> = Api::namespaced(client, "platform");
        let log = seen.clone();
        let task = tokio::spawn(async move {
            let slices = watcher(slices, watcher::Config::default()).map(|event| {
                event.map(|event| match event {
                    watcher::Event::Apply(slice) | watcher::Event::InitApply(slice) => {
                        (slice.metadata.name.clone(), Some(slice_addresses(&slice)))
                    }
                    watcher::Event::Delete(slice) => (slice.metadata.name.clone(), None),
                    _ => (None, Some(String::new())),
                })
            });
            let services = watcher(services, watcher::Config::default()).map(|event| {
                event.map(|event| match event {
                    watcher::Event::Delete(service) => (service.metadata.name.clone(), None),
                    _ => (None, Some(String::new())),
                })
            });
            let mut both = std::pin::pin!(futures::stream::select(slices, services));
            while let Some(event) = both.next().await {
                let Ok((Some(name), addresses)) = event else {
                    continue;
                };
                let line = match addresses {
                    Some(addresses) => format!("{name} {addresses}"),
                    None => format!("{name} deleted"),
                };
                log.lock().expect("the log").push(line);
            }
        });
        BridgeVersions { seen, task }
    }

    /// Stops watching; every version seen, in order.
    fn stop(self) -> Vec<String> {
        self.task.abort();
        self.seen.lock().expect("the log").clone()
    }
}

fn slice_addresses(slice: &EndpointSlice) -> String {
    slice
        .endpoints
        .iter()
        .flatten()
        .flat_map(|endpoint| endpoint.addresses.clone())
        .collect::<Vec<_>>()
        .join(",")
}

/// The addresses of dev's bridge EndpointSlice, now.
async fn bridge_address(world: &World) -> Option<String> {
    let slices: Api<EndpointSlice> = Api::namespaced(world.client("dev").await, "platform");
    slices
        .get_opt("nats-1")
        .await
        .ok()
        .flatten()
        .map(|slice| slice_addresses(&slice))
}

/// dev's nats while staging's API server is partitioned away (`mode`) and after it heals: on
/// prod within `unhealthyAfter` of the last answer, back on staging `healthyAfter` after it
/// answers again, with what `comb get`, the status and the Events say at each switch, and a
/// bridge that points somewhere at every version.
async fn partitioned_staging(mode: PartitionMode, why: &str) {
    let (world, running) = started("fallback: [prod], unhealthyAfter: 1s, healthyAfter: 2s").await;
    world
        .create_comb(
            "dev",
            "platform",
            "app",
            json!({"class": "Manifests", "dependsOn": ["nats"], "config": {"manifests": []}}),
        )
        .await;
    world
        .wait_phase("dev", "platform", "app", "Running", None)
        .await;
    let status = wait_on(&world, "dev's nats on staging", |s| {
        borrowed_from(s, "staging")
    })
    .await;
    assert_eq!(
        fallback_condition(&status),
        Some((
            "False".into(),
            "PreferredUpstream".into(),
            "borrowing from staging, the preferred upstream".into()
        ))
    );
    assert_eq!(bridge_address(&world).await.as_deref(), Some(STAGING_NATS));
    assert_eq!(
        metric(&running, "comb_borrowers_on_fallback{layer=\"dev\"} ").as_deref(),
        Some("0")
    );

    let bridge = BridgeVersions::watch(&world).await;
    let cut = jiff::Timestamp::now();
    world.controls("staging").partition_as(mode);
    let status = wait_on(&world, "dev's nats on prod", |s| borrowed_from(s, "prod")).await;
    let (phase, reason, message) = verdict(&status);
    assert_eq!((phase.as_str(), reason.as_str()), ("Running", "Borrowed"));
    let said = match mode {
        PartitionMode::Refuse => as_refused(&message),
        PartitionMode::Hang => message.clone(),
    };
    assert!(
        said.starts_with(&format!("staging unhealthy for 1s ({why}")),
        "{message}"
    );
    assert!(message.ends_with("; borrowing from prod"), "{message}");
    let upstream = status.upstream.clone().expect("an upstream record");
    assert_eq!(
        upstream.via,
        Some(vec!["prod".to_string()]),
        "prod's directly"
    );
    assert_eq!(
        fallback_condition(&status),
        Some(("True".into(), "UpstreamUnhealthy".into(), message.clone()))
    );
    assert_eq!(
        status.endpoint_list()[0].cluster.as_deref(),
        Some(format!("{PROD_NATS}:4222").as_str())
    );
    if mode == PartitionMode::Hang {
        assert_eq!(
            running.handle.layer("staging").map(|layer| layer.state),
            Some(LayerState::Up),
            "staging's watches stay open and quiet: only the checks could tell"
        );
    }
    wait_until("the bridge to point at prod", async || {
        bridge_address(&world).await.as_deref() == Some(PROD_NATS)
    })
    .await;
    wait_until("an Event of the switch", async || {
        events_of_nats(&world).await.contains(&(
            "Warning".into(),
            "UpstreamFallback".into(),
            message.clone(),
        ))
    })
    .await;
    assert_eq!(
        metric(&running, "comb_borrowers_on_fallback{layer=\"dev\"} ").as_deref(),
        Some("1")
    );
    // Its dependent was woken by the change and judged it again (still healthy: it serves).
    wait_until("app to be stepped after the switch", || {
        let handle = running.handle.clone();
        async move {
            handle.queue().iter().any(|layer| {
                layer.layer == "dev"
                    && layer.combs.iter().any(|comb| {
                        comb.name == "app"
                            && comb.last_step_at.is_some_and(|at| at > cut)
                            && comb.last_phase.as_deref() == Some("Running")
                    })
            })
        }
    })
    .await;

    world.controls("staging").heal();
    let status = back_on_staging(&world).await;
    assert_eq!(
        verdict(&status).2,
        "borrowed from upstream Kubernetes::Comb::Upstream::K8s (context staging) via staging"
    );
    assert_eq!(
        fallback_condition(&status).map(|c| c.0),
        Some("False".into())
    );
    wait_until("the bridge to point at staging again", async || {
        bridge_address(&world).await.as_deref() == Some(STAGING_NATS)
    })
    .await;
    wait_until("an Event of the way back", async || {
        events_of_nats(&world).await.contains(&(
            "Normal".into(),
            "UpstreamRecovered".into(),
            "healthy again for 2s; borrowing from staging, the preferred upstream".into(),
        ))
    })
    .await;
    assert_eq!(
        metric(&running, "comb_borrowers_on_fallback{layer=\"dev\"} ").as_deref(),
        Some("0")
    );
    // A consumer of `nats` in dev always found it: the bridge was rewritten in place, never
    // removed or emptied.
    let versions = bridge.stop();
    assert!(
        versions
            .iter()
            .all(|version| !version.ends_with(" deleted") && !version.ends_with(' ')),
        "{versions:?}"
    );
    let addresses: Vec<&String> = versions
        .iter()
        .filter(|v| v.starts_with("nats-1 "))
        .collect();
    assert!(
        addresses.iter().any(|v| v.ends_with(PROD_NATS)),
        "{versions:?}"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_upstream_hands_its_borrowers_to_the_next_layer_and_takes_them_back() {
    partitioned_staging(PartitionMode::Refuse, "context unreachable").await;
}

/// A partition that takes connections and never answers leaves staging's watches open and
/// quiet, so the layer never looks down: the checks notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_upstream_is_noticed_by_the_checks() {
    partitioned_staging(PartitionMode::Hang, "context not answering").await;
}

/// staging's nats stops serving (an operator stops it under maintenance): dev moves to prod, and
/// back once staging's nats runs again; staging's API server answers all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_comb_that_stops_serving_hands_its_borrowers_over() {
    let (world, running) = started("fallback: [prod], unhealthyAfter: 1s, healthyAfter: 2s").await;
    world
        .patch_spec(
            "staging",
            "platform",
            "nats",
            json!({"maintenance": "NoResourceReconciliation"}),
        )
        .await;
    let status = wait_on(&world, "dev's nats on prod", |s| borrowed_from(s, "prod")).await;
    assert_eq!(
        verdict(&status).2,
        "staging unhealthy for 1s (Comb platform/nats is Maintenance); borrowing from prod"
    );
    world
        .patch_spec("staging", "platform", "nats", json!({"maintenance": null}))
        .await;
    back_on_staging(&world).await;
    running.stop().await;
}

/// With every layer above unhealthy the borrower runs its own nats (`local`), then moves up
/// again as each layer comes back: to prod first, then to staging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_layer_above_unhealthy_the_borrower_runs_locally() {
    let (world, running) =
        started("fallback: [prod, local], unhealthyAfter: 1s, healthyAfter: 2s").await;
    world.controls("staging").partition();
    world.controls("prod").partition();
    let status = wait_on(&world, "dev's nats to run locally", |s| {
        s.phase.as_ref().is_some_and(|p| p == "Running") && s.upstream.is_none()
    })
    .await;
    let (phase, reason, message) = verdict(&status);
    assert_eq!(
        (phase, reason, as_refused(&message)),
        (
            "Running".into(),
            "Healthy".into(),
            "staging unhealthy for 1s (context unreachable), prod unhealthy for 1s (context \
             unreachable); running locally"
                .into()
        )
    );
    assert_eq!(
        status.endpoint_list()[0].external.as_deref(),
        Some(format!("{DEV_NATS}:4222").as_str()),
        "its own endpoints"
    );
    let deployments: Api<Deployment> = Api::namespaced(world.client("dev").await, "platform");
    assert!(deployments.get_opt("nats").await.unwrap().is_some());
    assert!(
        bridge_address(&world).await.is_none(),
        "the bridge gave way"
    );

    world.controls("prod").heal();
    let status = wait_on(&world, "dev's nats on prod", |s| borrowed_from(s, "prod")).await;
    assert_eq!(
        as_refused(&verdict(&status).2),
        "staging unhealthy for 1s (context unreachable); borrowing from prod"
    );
    world
        .wait_object(&deployments, "nats", "dev's own nats to be pruned", |d| {
            d.is_none()
        })
        .await;
    world.controls("staging").heal();
    back_on_staging(&world).await;
    running.stop().await;
}

/// Fallback composes along the chain: staging's nats, itself on its fallback (local) while
/// prod's is not serving, still serves, so dev (which could run its own) stays on staging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrower_on_fallback_is_still_a_healthy_upstream() {
    let world = three_clusters().await;
    let running = world
        .run(world.config(
            "resync: 1h
layers:
 - {name: prod, context: prod, namespaces: [platform]}
 - {name: staging, context: staging, namespaces: [platform], borrow: {from: prod, fallback: [local], unhealthyAfter: 1s, healthyAfter: 2s}}
 - {name: dev, context: dev, namespaces: [platform], borrow: {from: staging, fallback: [local], unhealthyAfter: 10s, healthyAfter: 2s}}",
        ))
        .await;
    create_nats(&world, &NATS_EVERYWHERE).await;
    let status = wait_on(&world, "dev's nats through staging from prod", |s| {
        borrowed_from(s, "staging")
            && s.upstream.as_ref().and_then(|u| u.via.clone())
                == Some(vec!["staging".to_string(), "prod".to_string()])
    })
    .await;
    assert_eq!(
        status.endpoint_list()[0].cluster.as_deref(),
        Some(format!("{PROD_NATS}:4222").as_str()),
        "staging borrows prod's and publishes it"
    );
    world
        .patch_spec(
            "prod",
            "platform",
            "nats",
            json!({"maintenance": "NoResourceReconciliation"}),
        )
        .await;
    // staging runs its own: dev now borrows staging's own nats through staging alone.
    let status = wait_on(&world, "dev's nats on staging's own nats", |s| {
        borrowed_from(s, "staging")
            && s.upstream.as_ref().and_then(|u| u.via.clone()) == Some(vec!["staging".to_string()])
    })
    .await;
    assert_eq!(
        fallback_condition(&status).map(|c| c.0),
        Some("False".into()),
        "dev never left staging: staging served all along, from prod, then on its own"
    );
    // Long enough for dev to have gone local if it would: its unhealthyAfter (10s) of staging
    // checks (every 1s) after staging moved, counted by the checks' metric.
    let checks = |running: &Running| {
        metric(
            running,
            "comb_upstream_checks_total{context=\"staging\",result=\"ok\"} ",
        )
        .and_then(|count| count.parse::<u64>().ok())
        .unwrap_or(0)
    };
    let before = checks(&running);
    wait_until("10s of staging's checks", || {
        let after = checks(&running);
        async move { after >= before + 12 }
    })
    .await;
    let status = wait_on(&world, "dev's nats still on staging", |s| {
        borrowed_from(s, "staging")
    })
    .await;
    assert_eq!(
        fallback_condition(&status).map(|c| c.0),
        Some("False".into())
    );
    assert!(
        !events_of_nats(&world)
            .await
            .iter()
            .any(|(_, reason, _)| reason == "UpstreamFallback"),
        "no switch in dev"
    );
    running.stop().await;
}

/// A fallback path longer than `maxUpstreamDepth` is a loop there as anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_upstream_depth_holds_on_fallback_paths() {
    // mid is a layer in prod's cluster (its own context and namespace) that borrows from prod.
    let world = World::start(
        &["prod", "staging", "dev"],
        &[("mid", "prod", "mid")],
        &[
            ("prod", "platform"),
            ("prod", "mid"),
            ("staging", "platform"),
            ("dev", "platform"),
        ],
    )
    .await;
    let running = world
        .run(world.config(
            "resync: 1h
maxUpstreamDepth: 1
layers:
 - {name: prod, context: prod, namespaces: [platform]}
 - {name: mid, context: mid, namespaces: [mid], borrow: {from: prod, namespace: platform}}
 - {name: staging, context: staging, namespaces: [platform], borrow: {from: mid, namespace: mid, local: [nats]}}
 - {name: dev, context: dev, namespaces: [platform], borrow: {from: staging, fallback: [mid], unhealthyAfter: 1s, healthyAfter: 2s}}",
        ))
        .await;
    create_nats(
        &world,
        &[
            ("prod", "platform", PROD_NATS),
            ("mid", "mid", "192.0.2.40"),
            ("staging", "platform", STAGING_NATS),
            ("dev", "platform", DEV_NATS),
        ],
    )
    .await;
    wait_on(&world, "dev's nats on staging", |s| {
        borrowed_from(s, "staging")
    })
    .await;
    world.controls("staging").partition();
    // On mid, the service comes through mid and prod: two layers, one more than allowed.
    let status = wait_on(&world, "dev's nats to find the loop rule on mid", |s| {
        s.upstream
            .as_ref()
            .is_some_and(|u| u.context.as_deref() == Some("mid"))
            && s.phase.as_ref().is_some_and(|p| p == "Blocked")
    })
    .await;
    let (phase, reason, message) = verdict(&status);
    assert_eq!(
        (phase, reason, as_refused(&message)),
        (
            "Blocked".into(),
            "UpstreamLoop".into(),
            "staging unhealthy for 1s (context unreachable); borrowing from mid; upstream \
             Kubernetes::Comb::Upstream::K8s (context mid) leads through more than 1 layers, a \
             loop? via mid"
                .into()
        )
    );
    world.controls("staging").heal();
    back_on_staging(&world).await;
    running.stop().await;
}

/// `probe: tcp`: staging's nats publishes an address nothing serves any more. Its API and its
/// status are fine; the connect from the controller is not, so dev runs its own nats until the
/// address takes connections again. The address is a host name (an ExternalName bridge): a
/// real API server refuses loopback IPs in an EndpointSlice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_probe_finds_an_address_that_takes_no_connections() {
    let listener = Answering::on(0);
    let port = listener.port;
    let world = three_clusters().await;
    let running = world
        .run(config(
            &world,
            "fallback: [local], unhealthyAfter: 1s, healthyAfter: 2s, probe: tcp",
        ))
        .await;
    for (context, host) in [
        ("prod", PROD_NATS),
        ("staging", "localhost"),
        ("dev", DEV_NATS),
    ] {
        create_running(
            &world,
            context,
            "platform",
            nats(&format!("{host}:{port}"), port),
        )
        .await;
    }
    wait_on(&world, "dev's nats on staging", |s| {
        borrowed_from(s, "staging")
    })
    .await;
    let services: Api<Service> = Api::namespaced(world.client("dev").await, "platform");
    let bridge = services.get("nats").await.unwrap();
    assert_eq!(
        bridge
            .spec
            .as_ref()
            .and_then(|s| s.external_name.as_deref()),
        Some("localhost")
    );

    drop(listener);
    let status = wait_on(&world, "dev's nats to run locally", |s| {
        s.phase.as_ref().is_some_and(|p| p == "Running") && s.upstream.is_none()
    })
    .await;
    assert_eq!(
        verdict(&status).2,
        format!(
            "staging unhealthy for 1s (tcp localhost:{port}: connection refused); running locally"
        )
    );

    let _listener = Answering::on(port);
    back_on_staging(&world).await;
    let metrics: BTreeMap<String, String> = running
        .handle
        .metrics_text()
        .unwrap()
        .lines()
        .filter(|line| line.starts_with("comb_borrowers_on_fallback"))
        .map(|line| (line.to_string(), String::new()))
        .collect();
    assert!(
        metrics.contains_key("comb_borrowers_on_fallback{layer=\"dev\"} 0"),
        "{metrics:?}"
    );
    running.stop().await;
}

/// A server on `port` of 127.0.0.1 (0: any) that takes every connection and closes it, until
/// dropped; its port may be taken again once it is.
struct Answering {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Answering {
    fn on(port: u16) -> Answering {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket.set_reuseaddr(true).expect("SO_REUSEADDR");
        socket
            .bind(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
            .expect("the port is free");
        let listener = socket.listen(64).expect("listening");
        let port = listener.local_addr().expect("its address").port();
        let task = tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                drop(connection);
            }
        });
        Answering { port, task }
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.task.abort();
    }
}
