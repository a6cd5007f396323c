//! Layers on demand, proven by traffic (issue 34, item 7): two developers' layers at once on
//! real clusters with the sandbox network, set up as `examples/layers` says. Cluster staging
//! runs the file's layer `staging` (namespace staging: `api` and `db`, each a Deployment
//! answering with its identity behind a Service and a load balancer at the address it
//! publishes); cluster dev is where template `dev` puts the developers' layers (namespaces
//! `dev-*`, borrowing from staging, made by comb). Two clusters rather than one: a layer
//! borrows across clusters through an EndpointSlice bridge to staging's load balancer, the path
//! a developer's layer takes in practice (one cluster would test an ExternalName CNAME instead).
//!
//! With the controller running (the file's layers and the layers on demand, as `comb run`
//! runs them: [`RunningController`]), `comb layer create` makes `bob` (every Comb borrowed, a long TTL), then `alice`
//! (`--local api`, a TTL of [`ALICE_TTL`]). A client Pod in each layer's namespace calls
//! `api:8080` and `db:5432` [`RATE`] times a second each:
//!
//! - alice's `api` is answered by her own Pod (`dev/dev-alice/api-...`), her `db` by staging's
//!   (`staging/staging/db-...`), every call that started before her expiry;
//! - bob's `api` and `db` are answered by staging's, every call from his first answer until
//!   after alice's namespace is gone: alice's layer coming and going costs bob nothing;
//! - after alice's TTL her namespace is gone (within the kit's deadline past the expiry), her
//!   CombLayer says `Expired`, and bob's is still `Ready`.
//!
//! The figures (calls, failures, who answered, time from a CombLayer's create to the first
//! answer, from alice's expiry to her namespace gone) are printed for the closing notes.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use comb_api::{CombLayer, LayerPhase, layer_api_resource};
use comb_federation::cli::demo::{DemoWorld, RunningController};
use comb_sandbox::real::network::{CallOutcome, ClusterNetwork, ProxyMode};
use comb_sandbox::{Backend, SandboxOptions};
use comb_testkit::network::{Caller, answered_by, expect_answers, options_or_skip};
use comb_testkit::process::{COMMAND_DEADLINE, OutputWithin as _};
use comb_testkit::wait_until;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;

/// The example's configuration and staging's Combs.
const CONFIG_YAML: &str = include_str!("../../examples/layers/comb.yaml");
const STAGING_COMBS: &str = include_str!("../../examples/layers/combs/staging.yaml");

/// alice's TTL: long enough for her layer to answer and be called for a while, short enough to
/// watch it expire.
const ALICE_TTL: Duration = Duration::from_secs(60);
const BOB_TTL: &str = "30m";
/// Calls a second, per client and target.
const RATE: usize = 10;
/// Calls of bob's that must end after alice's namespace is gone: 2 s of them.
const AFTER: usize = 2 * RATE;
const API: &str = "api:8080";
const DB: &str = "db:5432";
const STAGING_API: &str = "staging/staging/api-";
const STAGING_DB: &str = "staging/staging/db-";
const ALICE_API: &str = "dev/dev-alice/api-";
const CLIENT: &str = comb_federation::cli::packets::CLIENT;
/// How often alice's namespace is looked at after her expiry: the resolution of that figure.
const LOOK: Duration = Duration::from_millis(100);

/// Logs to the test output when `COMB_TEST_LOG` holds a filter (as the controller tests do).
fn init_logging() {
    if let Ok(filter) = std::env::var("COMB_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(comb_federation::logging::body_safe_filter(&filter))
            .with_test_writer()
            .try_init();
    }
}

/// `comb --config <config> layer create <args>`, which must succeed.
async fn comb_layer_create(config: &Path, args: &[&str]) {
    let (config, args): (std::path::PathBuf, Vec<String>) = (
        config.to_path_buf(),
        args.iter().map(ToString::to_string).collect(),
    );
    let output = tokio::task::spawn_blocking(move || {
        comb_testkit::comb()
            .arg("--config")
            .arg(&config)
            .args(["layer", "create"])
            .args(&args)
            .env("RUST_LOG", "warn")
            .output_within(COMMAND_DEADLINE)
    })
    .await
    .expect("comb ran");
    assert!(
        output.status.success(),
        "comb layer create: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn layers(world: &DemoWorld) -> Api<CombLayer> {
    Api::all_with(
        world
            .pool
            .client("staging")
            .await
            .expect("a client of staging"),
        &layer_api_resource(&world.config.group),
    )
}

/// CombLayer `name`, once its status satisfies `test`.
async fn wait_layer(
    world: &DemoWorld,
    name: &str,
    what: &str,
    test: impl Fn(&CombLayer) -> bool,
) -> CombLayer {
    let api = layers(world).await;
    wait_until(format!("CombLayer {name} {what}"), async || {
        let layer = api.get(name).await.map_err(|e| e.to_string())?;
        if test(&layer) {
            Ok(layer)
        } else {
            Err(format!("{:?}", layer.status))
        }
    })
    .await
}

fn phase(layer: &CombLayer) -> Option<LayerPhase> {
    layer.status.as_ref().and_then(|status| status.phase)
}

/// Milliseconds since the epoch, now: the clock `expiresAt` is on.
fn wall_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch");
    i64::try_from(since.as_millis()).expect("a time in range")
}

/// A developer's layer answering: its namespace made by comb, a client Pod in it, the first
/// call of each of `expected` (target, who) answered as expected and then [`CALLS`] in a row.
/// The time from `created` to each first answer.
///
/// [`CALLS`]: comb_testkit::network::CALLS
async fn answering(
    world: &DemoWorld,
    dev: &ClusterNetwork,
    namespace: &str,
    created: Instant,
    expected: &[(&str, &str)],
) -> Vec<Duration> {
    let namespaces: Api<Namespace> =
        Api::all(world.pool.client("dev").await.expect("a client of dev"));
    wait_until(format!("namespace {namespace} made by comb"), async || {
        namespaces.get_opt(namespace).await.ok().flatten()
    })
    .await;
    world
        .apply("dev", &comb_federation::cli::packets::client_pod(namespace))
        .await
        .expect("the client Pod applies");
    let mut firsts = Vec::new();
    for (target, who) in expected {
        wait_until(
            format!("{namespace}/{CLIENT} -> {target} answered by {who}*"),
            async || {
                let outcome = dev.call(namespace, CLIENT, target).await;
                if answered_by(&outcome, who) {
                    Ok(())
                } else {
                    Err(outcome)
                }
            },
        )
        .await;
        firsts.push(created.elapsed());
        expect_answers(dev, namespace, CLIENT, target, who).await;
    }
    firsts
}

/// The calls of one caller, by outcome: who answered (the Pod), or how it failed.
fn tally(calls: &[&(Duration, CallOutcome)]) -> BTreeMap<String, usize> {
    let mut tally = BTreeMap::new();
    for (_, outcome) in calls {
        let key = match (&outcome.answered_by, outcome.failure) {
            (Some(by), _) => by.clone(),
            (None, Some(failure)) => format!("failed: {failure:?}"),
            (None, None) => "no answer".to_string(),
        };
        *tally.entry(key).or_default() += 1;
    }
    tally
}

/// Prints one caller's figures and checks that every call of `checked` was answered by `who`.
fn check(what: &str, calls: &[(Duration, CallOutcome)], checked: Duration, who: &str) {
    let (within, after): (Vec<_>, Vec<_>) = calls.iter().partition(|(at, _)| *at < checked);
    let wrong: Vec<_> = within
        .iter()
        .filter(|(_, outcome)| !answered_by(outcome, who))
        .collect();
    println!(
        "{what}: {} calls, {} not answered by {who}*: {:?}",
        within.len(),
        wrong.len(),
        tally(&within)
    );
    if !after.is_empty() {
        println!(
            "{what}: {} calls after alice's expiry: {:?}",
            after.len(),
            tally(&after)
        );
    }
    assert!(
        !within.is_empty(),
        "{what}: no call made while it was checked"
    );
    assert!(
        wrong.is_empty(),
        "{what}: {} of {} calls not answered by {who}*, the first: {:?}",
        wrong.len(),
        within.len(),
        wrong.iter().take(5).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_developers_layers_alice_runs_api_bob_borrows_all_and_alice_expires() {
    let Some(network) = options_or_skip(
        "network_layers::two_developers_layers_alice_runs_api_bob_borrows_all_and_alice_expires",
        ProxyMode::Nftables,
        2,
    ) else {
        return;
    };
    init_logging();
    let world = DemoWorld::start_for(
        Backend::Kube,
        None,
        SandboxOptions {
            network: Some(network),
            ..SandboxOptions::clusters(["staging", "dev"])
        },
        CONFIG_YAML,
    )
    .await
    .expect("examples/layers on two clusters with the network");
    let crd =
        comb_api::layer_custom_resource_definition(&world.config.group).expect("the CombLayer CRD");
    world
        .apply(
            "staging",
            &serde_json::to_value(&crd).expect("the CRD as JSON"),
        )
        .await
        .expect("the CombLayer CRD applies");
    let api = layers(&world).await;
    wait_until("the CombLayer CRD served on staging", async || {
        api.list(&Default::default()).await.map(|_| ())
    })
    .await;
    world
        .apply_combs("staging", STAGING_COMBS)
        .await
        .expect("staging's Combs apply");
    let running = RunningController::start(&world.config)
        .await
        .expect("the controller starts, with the layers on demand");
    wait_until("staging's api and db Running", async || {
        let rows = world.rows().await.map_err(|e| e.to_string())?;
        let running: Vec<&str> = rows
            .iter()
            .filter(|row| row.phase.as_deref() == Some("Running"))
            .map(|row| row.name.as_str())
            .collect();
        if running.contains(&"api") && running.contains(&"db") {
            Ok(())
        } else {
            Err(format!("Running: {running:?}"))
        }
    })
    .await;
    let dev = world.sandbox.network("dev").expect("dev's network");
    let config = world.config_path();

    // bob: every Comb of staging borrowed.
    let created = Instant::now();
    comb_layer_create(
        &config,
        &[
            "bob",
            "--template",
            "dev",
            "--from",
            "staging",
            "--ttl",
            BOB_TTL,
        ],
    )
    .await;
    let bob_first = answering(
        &world,
        &dev,
        "dev-bob",
        created,
        &[(API, STAGING_API), (DB, STAGING_DB)],
    )
    .await;
    let bob_api = Caller::start(dev.clone(), ("dev-bob", CLIENT, API), RATE);
    let bob_db = Caller::start(dev.clone(), ("dev-bob", CLIENT, DB), RATE);

    // alice: api runs in her layer, db is staging's.
    let created = Instant::now();
    let ttl = format!("{}s", ALICE_TTL.as_secs());
    comb_layer_create(
        &config,
        &[
            "alice",
            "--template",
            "dev",
            "--from",
            "staging",
            "--local",
            "api",
            "--ttl",
            &ttl,
        ],
    )
    .await;
    let alice_first = answering(
        &world,
        &dev,
        "dev-alice",
        created,
        &[(API, ALICE_API), (DB, STAGING_DB)],
    )
    .await;
    let alice = wait_layer(&world, "alice", "with its expiry", |layer| {
        layer
            .status
            .as_ref()
            .is_some_and(|status| status.expires_at.is_some())
    })
    .await;
    let expires_ms = alice
        .status
        .and_then(|status| status.expires_at)
        .expect("an expiry")
        .0
        .as_millisecond();
    let alice_api = Caller::start(dev.clone(), ("dev-alice", CLIENT, API), RATE);
    let alice_db = Caller::start(dev.clone(), ("dev-alice", CLIENT, DB), RATE);
    let until_expiry =
        Duration::from_millis(u64::try_from(expires_ms - wall_ms()).unwrap_or_else(|_| {
            panic!("alice's layer answered only after its TTL ({ALICE_TTL:?}): raise ALICE_TTL")
        }));
    // Alice's expiry on each of her callers' clocks: a call that started before it went
    // through her layer's Services, which go only after it.
    let expiry = (
        alice_api.elapsed() + until_expiry,
        alice_db.elapsed() + until_expiry,
    );

    // After alice's TTL: her namespace gone, within the kit's deadline past the expiry.
    let namespaces: Api<Namespace> =
        Api::all(world.pool.client("dev").await.expect("a client of dev"));
    let limit = until_expiry + comb_testkit::deadline();
    let waited = Instant::now();
    // When comb deleted it (its Combs went first), on the expiry's clock: the rest is
    // Kubernetes' namespace deletion.
    let mut deleted_after_ms = None;
    loop {
        let Some(namespace) = namespaces
            .get_opt("dev-alice")
            .await
            .expect("namespaces are read")
        else {
            break;
        };
        if deleted_after_ms.is_none() && namespace.metadata.deletion_timestamp.is_some() {
            deleted_after_ms = Some(wall_ms() - expires_ms);
        }
        assert!(
            waited.elapsed() < limit,
            "namespace dev-alice still there {:?} after alice's expiry",
            comb_testkit::deadline()
        );
        tokio::time::sleep(LOOK).await;
    }
    let gone_after_ms = wall_ms() - expires_ms;
    let gone_at = bob_api.elapsed();
    // bob's calls go on a while after.
    wait_until("bob's calls after alice's namespace went", async || {
        bob_api.ended_since(gone_at) >= AFTER && bob_db.ended_since(gone_at) >= AFTER
    })
    .await;
    let expired = wait_layer(&world, "alice", "Expired", |layer| {
        phase(layer) == Some(LayerPhase::Expired)
    })
    .await;
    let bob = layers(&world)
        .await
        .get("bob")
        .await
        .expect("bob's CombLayer");

    let (alice_api, alice_db) = (alice_api.stop().await, alice_db.stop().await);
    let (bob_api, bob_db) = (bob_api.stop().await, bob_db.stop().await);
    println!(
        "bob: create to first answer: api {:.1} s, db {:.1} s",
        bob_first[0].as_secs_f64(),
        bob_first[1].as_secs_f64()
    );
    let seconds = |ms: Option<i64>| {
        ms.map_or("unseen".to_string(), |ms| {
            format!("{:.1} s", ms as f64 / 1000.0)
        })
    };
    println!(
        "alice: create to first answer: api {:.1} s (her own), db {:.1} s (staging's); TTL {ALICE_TTL:?}; \
         after the expiry, namespace dev-alice deleted by comb at {}, gone at {}",
        alice_first[0].as_secs_f64(),
        alice_first[1].as_secs_f64(),
        seconds(deleted_after_ms),
        seconds(Some(gone_after_ms)),
    );
    check("alice -> api", &alice_api, expiry.0, ALICE_API);
    check("alice -> db", &alice_db, expiry.1, STAGING_DB);
    check("bob -> api", &bob_api, Duration::MAX, STAGING_API);
    check("bob -> db", &bob_db, Duration::MAX, STAGING_DB);
    assert!(
        gone_after_ms >= 0,
        "dev-alice went {gone_after_ms} ms before alice's expiry"
    );
    assert_eq!(
        phase(&bob),
        Some(LayerPhase::Ready),
        "bob's layer after alice's went: {:?}",
        bob.status
    );
    let message = expired
        .status
        .as_ref()
        .and_then(|status| status.condition(comb_api::READY))
        .and_then(|ready| ready.message.clone())
        .unwrap_or_default();
    println!("alice: {message}");

    running.stop().await.expect("the controller ends");
    world.sandbox.shutdown().await;
}
