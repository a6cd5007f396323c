//! What a switch costs the packets (issue 20, DESIGN.md §10), measured on the real backend with
//! the sandbox network, never asserted: the demo's three layers (prod; staging, a namespace of
//! prod's server; dev, another cluster) with a client Pod in dev, whose calls go through dev's
//! CoreDNS and kube-proxy, comb's bridge, the router and prod's load balancer.
//!
//! 1. **Propagation.** prod's db has two backends, each behind a load balancer of its own:
//!    `db-0` (the demo's StatefulSet) at 192.0.2.10 and `db-blue` at 192.0.2.12. prod's db
//!    Comb switches the address it publishes between them `COMB_BENCH_CHANGES` times (default
//!    20); dev borrows db via [staging, prod] (two hops). Per change: the time until dev's
//!    client is answered by the new backend; comb's part, until the trigger time comb stamps on
//!    dev's bridge EndpointSlice (`endpoints.kubernetes.io/last-change-trigger-time`, when it
//!    rendered the change); the rest (the write, kube-proxy's sync, the path). Also kube-proxy's
//!    own `network_programming_duration_seconds` on dev's node over the changes (its mean: the
//!    histogram has no single values).
//! 2. **Continuity.** A client in dev calls `nats:4222` `COMB_BENCH_RATE` times a second
//!    (default 50) while staging's nats rolls out (a restart: a new Pod, the old one gone), while
//!    dev's nats switches borrow -> local (comb restarted with dev's borrow list without nats),
//!    and back: the calls that failed, and those answered by anyone but staging's or dev's nats
//!    (seconds from the start of the calls; each switch starts at 2 s).
//!
//! 3. **Fallback** (issue 22). Three clusters as `examples/fallback` sets them up (dev borrows
//!    nats from staging, falls back to prod, `unhealthyAfter: 5s`, `healthyAfter: 10s`); dev's
//!    client calls `nats:4222` `COMB_BENCH_RATE` times a second while staging's kube-apiserver
//!    is stopped (its nats goes on serving), then while staging's nats Pods are gone (its node
//!    cordoned, the Pods deleted), and each time back: the time to fail over (from the loss to
//!    the first call answered by prod) and to come back (from staging's return to the first
//!    call answered by it again through the bridge), the calls lost before the switch, after it
//!    and on the way back, and apart the calls after the switch that dev's node's stale
//!    connection tracking took to staging (see `Failover::stale_tracked`).
//!
//! `cargo bench ... -- fallback` (or `propagation`, `continuity`) runs the sections whose name
//! contains one of the words given; all by default.
//!
//! ```text
//! cargo build -p comb-identity && tests/kube/build
//! sudo COMB_TEST_BACKEND=kube cargo bench -p comb-federation --bench network
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, bail};
use comb_federation::cli::demo::{CONFIG_YAML, DemoWorld, RunningController, shortfalls};
use comb_sandbox::Backend;
use comb_sandbox::real::network::{CallOutcome, ClusterNetwork, ProxyMode};
use comb_testkit::network::{Caller, failover};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

const DB_BLUE: &str = "192.0.2.12";
const DB_GREEN: &str = "192.0.2.10";

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn wait_for<T>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> Result<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if Instant::now() > deadline {
            bail!("waited {limit:?} for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn summary(name: &str, mut values: Vec<Duration>) {
    values.sort();
    println!(
        "  {name:<44} median {:>8}   p90 {:>8}   min {:>8}   max {:>8}",
        ms(percentile(&values, 0.5)),
        ms(percentile(&values, 0.9)),
        ms(values.first().copied().unwrap_or_default()),
        ms(values.last().copied().unwrap_or_default())
    );
}

/// `(sum, count)` of kube-proxy's network programming histogram.
fn programming(metrics: &str) -> (f64, f64) {
    let value = |name: &str| {
        metrics
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (
        value("kubeproxy_network_programming_duration_seconds_sum"),
        value("kubeproxy_network_programming_duration_seconds_count"),
    )
}

async fn apply(world: &DemoWorld, context: &str, object: Value) -> Result<()> {
    world.apply(context, &object).await
}

fn answered_by(outcome: &CallOutcome) -> &str {
    outcome.answered_by.as_deref().unwrap_or_default()
}

/// Waits until dev's client calling `target` is answered by `who` (an identity's start).
async fn answered_eventually(dev: &ClusterNetwork, target: &str, who: &str) -> Result<()> {
    wait_for(
        &format!("dev's client answered on {target} by {who}"),
        Duration::from_secs(60),
        async || {
            answered_by(&dev.call("platform", "client", target).await)
                .starts_with(who)
                .then_some(())
        },
    )
    .await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; the words are the sections to run.
    let words: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let runs =
        |section: &str| words.is_empty() || words.iter().any(|w| section.contains(w.as_str()));
    let changes = setting("COMB_BENCH_CHANGES", 20);
    let rate = setting("COMB_BENCH_RATE", 50).max(1);
    if runs("propagation") || runs("continuity") {
        demo_sections(changes, rate, &runs).await?;
    }
    if runs("fallback") {
        fallback(rate).await?;
    }
    Ok(())
}

/// Sections 1 and 2, on the demo's layers.
async fn demo_sections(changes: usize, rate: usize, runs: &dyn Fn(&str) -> bool) -> Result<()> {
    let Some(network) =
        comb_testkit::network::options_or_skip("bench network", ProxyMode::Nftables, 2)
    else {
        // The reason is printed: this bench needs the real backend, root and nft.
        return Ok(());
    };
    let world = DemoWorld::start_with(Backend::Kube, None, Duration::ZERO, Some(network)).await?;
    let dev = world.sandbox.network("dev").context("dev's network")?;
    let demo = RunningController::start(&world.config).await?;
    world.apply_examples().await?;
    world.apply_clients().await?;
    // A second backend for prod's db, behind its own load balancer.
    apply(
        &world,
        "prod",
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "db-blue", "namespace": "platform"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "db-blue"}},
                 "template": {"metadata": {"labels": {"app": "db-blue"}},
                              "spec": {"containers": [{"name": "postgres", "image": "postgres:16",
                                                       "ports": [{"containerPort": 5432}]}]}}}}),
    )
    .await?;
    apply(&world, "prod", json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "db-blue-public", "namespace": "platform",
                     "annotations": {"metallb.io/loadBalancerIPs": DB_BLUE}},
        "spec": {"type": "LoadBalancer", "selector": {"app": "db-blue"}, "ports": [{"port": 5432}]}})).await?;
    wait_for("the demo's story", Duration::from_secs(180), async || {
        shortfalls(&world.rows().await.ok()?)
            .is_empty()
            .then_some(())
    })
    .await?;
    for (target, who) in [
        ("db:5432", "prod/platform/db-0"),
        (&format!("{DB_BLUE}:5432") as &str, "prod/platform/db-blue-"),
    ] {
        answered_eventually(&dev, target, who).await?;
    }
    println!(
        "comb network bench: the demo's layers on real control planes with the sandbox network"
    );

    if runs("propagation") {
        propagation(&world, &dev, changes).await?;
    }
    if runs("continuity") {
        continuity(&world, &dev, demo, rate).await?;
    } else {
        demo.stop().await?;
    }
    world.sandbox.shutdown().await;
    Ok(())
}

/// Section 3: the fallback example's three clusters, and a failover each way staging is lost.
async fn fallback(rate: usize) -> Result<()> {
    let Some(network) =
        comb_testkit::network::options_or_skip("bench network (fallback)", ProxyMode::Nftables, 3)
    else {
        return Ok(());
    };
    println!(
        "\n3. Fallback: dev's client calls nats:4222 {rate} times a second; dev borrows from \
         staging, falls back to prod (unhealthyAfter 5s, healthyAfter 10s)"
    );
    let world = DemoWorld::start_fallback(network).await?;
    let controller = RunningController::start(&world.config).await?;
    let dev = world.sandbox.network("dev").context("dev's network")?;
    let real = world.sandbox.real().context("the real backend")?;
    let (from, to) = ("staging/platform/nats-", "prod/platform/nats-");
    let call = ("platform", "client", "nats:4222");
    answered_eventually(&dev, call.2, from).await?;
    // Each stage waits for 3 s of calls after the one before.
    let (limit, settle) = (Duration::from_secs(120), 3 * rate);
    let stopped = failover(
        dev.clone(),
        call,
        rate,
        (from, to),
        async {
            if let Err(error) = real.stop_api_server("staging").await {
                eprintln!("stopping staging's kube-apiserver failed: {error}");
            }
        },
        async {
            if let Err(error) = real.start_api_server("staging").await {
                eprintln!("starting staging's kube-apiserver again failed: {error}");
            }
        },
        limit,
        settle,
    )
    .await
    .map_err(anyhow::Error::msg)?;
    println!(
        "  {:<44} {}",
        "staging's kube-apiserver stopped",
        stopped.summary()
    );
    let gone = failover(
        dev.clone(),
        call,
        rate,
        (from, to),
        async {
            if let Err(error) = world
                .take_pods_away("staging", "platform", "app=nats")
                .await
            {
                eprintln!("{error:#}");
            }
        },
        async {
            if let Err(error) = world.let_pods_back("staging").await {
                eprintln!("{error:#}");
            }
        },
        limit,
        settle,
    )
    .await
    .map_err(anyhow::Error::msg)?;
    println!("  {:<44} {}", "staging's nats Pods gone", gone.summary());
    controller.stop().await?;
    world.sandbox.shutdown().await;
    Ok(())
}

async fn propagation(world: &DemoWorld, dev: &ClusterNetwork, changes: usize) -> Result<()> {
    let prod = world.pool.client("prod").await?;
    let combs: Api<DynamicObject> = Api::namespaced_with(
        prod,
        "platform",
        &comb_api::api_resource(&world.config.group),
    );
    let dev_client = world.pool.client("dev").await?;
    let slices: Api<DynamicObject> = Api::namespaced_with(
        dev_client,
        "platform",
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("discovery.k8s.io", "v1", "EndpointSlice"),
            "endpointslices",
        ),
    );
    let before = programming(&dev.kube_proxy_metrics().await?);
    let (mut total, mut comb, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    for change in 0..changes {
        let (address, who) = if change % 2 == 0 {
            (DB_BLUE, "prod/platform/db-blue-")
        } else {
            (DB_GREEN, "prod/platform/db-0")
        };
        let patch = json!({"spec": {"config": {"endpoints": [
            {"name": "postgres", "port": 5432, "external": format!("{address}:5432")}]}}});
        let started = SystemTime::now();
        let clock = Instant::now();
        combs
            .patch("db", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        answered_eventually(dev, "db:5432", who).await?;
        let elapsed = clock.elapsed();
        let slice = slices.get("db-1").await?;
        let stamped = slice
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("endpoints.kubernetes.io/last-change-trigger-time"))
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .context("dev's bridge slice has no trigger time")?;
        let written = SystemTime::from(stamped);
        let comb_part = written.duration_since(started).unwrap_or_default();
        total.push(elapsed);
        comb.push(comb_part);
        rest.push(elapsed.saturating_sub(comb_part));
    }
    let after = programming(&dev.kube_proxy_metrics().await?);
    println!(
        "\n1. Propagation: prod's db publishes another address, {changes} times; dev's client (two hops)"
    );
    summary("until dev's client is answered by the new backend", total);
    summary("comb's part (until dev's bridge is rendered)", comb);
    summary("the rest (write, kube-proxy's sync, the path)", rest);
    let (sum, count) = (after.0 - before.0, after.1 - before.1);
    if count > 0.0 {
        println!(
            "  kube-proxy's network programming on dev's node: {count:.0} syncs with a trigger time, mean {:.0} ms",
            sum / count * 1000.0
        );
    }
    Ok(())
}

/// Calls `target` from dev's client `rate` times a second, until stopped.
fn caller(dev: &Arc<ClusterNetwork>, target: &str, rate: usize) -> Caller {
    Caller::start(dev.clone(), ("platform", "client", target), rate)
}

fn report(what: &str, outcomes: &[(Duration, CallOutcome)]) {
    let failed: Vec<&(Duration, CallOutcome)> = outcomes
        .iter()
        .filter(|(_, o)| o.answered_by.is_none())
        .collect();
    let elsewhere = outcomes
        .iter()
        .filter(|(_, o)| {
            o.answered_by.as_deref().is_some_and(|by| {
                !by.starts_with("prod/staging/nats-") && !by.starts_with("dev/platform/nats-")
            })
        })
        .count();
    println!(
        "  {what:<44} {} calls, {} failed, {elsewhere} answered by another Pod{}",
        outcomes.len(),
        failed.len(),
        match (failed.first(), failed.last()) {
            (Some((first, one)), Some((last, _))) => format!(
                " (from {:.1} s to {:.1} s; first: {})",
                first.as_secs_f64(),
                last.as_secs_f64(),
                one.message.as_deref().unwrap_or("no answer")
            ),
            _ => String::new(),
        }
    );
}

async fn continuity(
    world: &DemoWorld,
    dev: &Arc<ClusterNetwork>,
    demo: RunningController,
    rate: usize,
) -> Result<()> {
    println!("\n2. Continuity: dev's client calls nats:4222 {rate} times a second");
    answered_eventually(dev, "nats:4222", "prod/staging/nats-").await?;

    // A rollout upstream: staging's nats restarted.
    let calls = caller(dev, "nats:4222", rate);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = dev.call("platform", "client", "nats:4222").await;
    world
        .apply(
            "staging",
            &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "nats", "namespace": "staging"},
                    "spec": {"template": {"metadata": {"annotations": {"bench.comb/restartedAt": jiff::Timestamp::now().to_string()}}}}}),
        )
        .await?;
    wait_for(
        "the new nats Pod answering dev",
        Duration::from_secs(60),
        async || {
            let now = dev.call("platform", "client", "nats:4222").await;
            (now.answered_by.is_some() && now.answered_by != before.answered_by).then_some(())
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    report("while staging's nats rolls out", &calls.stop().await);

    // borrow -> local, then local -> borrow, each under calls of its own.
    let calls = caller(dev, "nats:4222", rate);
    tokio::time::sleep(Duration::from_secs(2)).await;
    demo.stop().await?;
    let local = RunningController::start(&world.config_from(
        "comb-local.yaml",
        &CONFIG_YAML.replace("combs: [nats, db]", "combs: [db]"),
    )?)
    .await?;
    answered_eventually(dev, "nats:4222", "dev/platform/nats-").await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    report(
        "while dev's nats switches borrow -> local",
        &calls.stop().await,
    );

    let calls = caller(dev, "nats:4222", rate);
    tokio::time::sleep(Duration::from_secs(2)).await;
    local.stop().await?;
    let back = RunningController::start(&world.config).await?;
    answered_eventually(dev, "nats:4222", "prod/staging/nats-").await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    report(
        "while dev's nats switches local -> borrow",
        &calls.stop().await,
    );
    back.stop().await?;
    Ok(())
}
