//! What a settled resync costs the API servers (issue 12), counted by the clusters' request
//! counters: local Combs in prod, Combs in dev borrowing from them. A settled Comb's resync step
//! is answered from the watches the controller holds: no get, no list. The same run without the
//! watches' answers (`read_from_watches: false`, as `--once` reads) is counted too, for the
//! record (`cargo test -p comb-federation --test controller_requests -- --nocapture`).

use std::collections::BTreeMap;

use comb_federation::controller::{ControllerOptions, LayerQueue};
use comb_testkit::controller::{World, test_options};
use comb_testkit::wait_until;
use serde_json::{Value, json};

const COMBS: usize = 3;

/// A web Comb (Deployment and Service) whose endpoint other clusters can reach.
fn web(name: &str) -> Value {
    json!({
        "class": "Manifests",
        "config": {
            "manifests": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                          "template": {"metadata": {"labels": {"app": name}},
                                       "spec": {"containers": [{"name": "main", "image": "nginx:1"}]}}}},
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                 "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80}]}}
            ],
            "endpoints": [{"name": "http", "port": 80, "external": "192.0.2.10:80"}]
        }
    })
}

/// The check of an upstream's API server a borrow with a fallback makes (per upstream context,
/// not per step): counted apart from the steps' reads.
const UPSTREAM_CHECK: &str = "get /readyz";

fn is_read(request: &str) -> bool {
    (request.starts_with("get ") || request.starts_with("list ")) && request != UPSTREAM_CHECK
}

fn is_write(request: &str) -> bool {
    !is_read(request) && !request.starts_with("watch ") && request != UPSTREAM_CHECK
}

/// Steps of `layer` so far, by the step metric.
fn steps(metrics: &str, layer: &str) -> u64 {
    let prefix = format!("comb_step_duration_seconds_count{{layer=\"{layer}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

/// What one settled resync of every Comb cost, per cluster.
struct Measured {
    /// Requests by `<verb> <resource>`, per cluster.
    requests: BTreeMap<String, BTreeMap<String, u64>>,
    /// How long the window was.
    window: std::time::Duration,
    /// Steps per layer in the window.
    steps: BTreeMap<String, u64>,
    /// The debug view after the window.
    queue: Vec<LayerQueue>,
}

/// The peer reads of dev's borrowers go to prod's server: counted for the borrowers.
const PEER_READ: &str = "get combs.comb.internal";

impl Measured {
    /// The requests of the local Combs (prod's, but the peer reads) or of the borrowing ones
    /// (dev's, and the peer reads on prod), per step.
    fn per_step(&self, borrowing: bool, keep: impl Fn(&str) -> bool) -> BTreeMap<String, f64> {
        let layer = if borrowing { "dev" } else { "prod" };
        let steps = self.steps.get(layer).copied().unwrap_or(0).max(1) as f64;
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for (cluster, requests) in &self.requests {
            for (request, count) in requests {
                let of_borrowers = cluster == "dev" || request == PEER_READ;
                if of_borrowers == borrowing && keep(request) {
                    *counts.entry(request.clone()).or_default() += count;
                }
            }
        }
        counts
            .into_iter()
            .map(|(request, count)| (request, count as f64 / steps))
            .collect()
    }

    fn report(&self, what: &str) {
        for (layer, borrowing, kind) in [("prod", false, "local"), ("dev", true, "borrowing")] {
            println!(
                "{what}: settled {kind} Comb ({layer}), {} resync steps: reads per step {:?}; writes per step {:?}",
                self.steps.get(layer).copied().unwrap_or(0),
                self.per_step(borrowing, is_read),
                self.per_step(borrowing, is_write),
            );
        }
    }
}

/// Runs the controller on prod (local) and dev (borrowing from prod) until every Comb settled,
/// then counts the requests of a window in which every Comb was stepped again by its resync.
async fn settled_resync(world: &World, options: ControllerOptions) -> Measured {
    settled_resync_borrowing(world, options, "{from: prod}").await
}

/// [`settled_resync`] with dev's `borrow` as given.
async fn settled_resync_borrowing(
    world: &World,
    options: ControllerOptions,
    borrow: &str,
) -> Measured {
    let config = world.config(&format!(
        "resync: 2s\nlayers:\n - {{name: prod, context: prod, namespaces: [platform]}}\n - {{name: dev, context: dev, namespaces: [platform], borrow: {borrow}}}",
    ));
    let running = world.run_options(config, options).await;
    let names: Vec<String> = (0..COMBS).map(|i| format!("web-{i}")).collect();
    for context in ["prod", "dev"] {
        for name in &names {
            if world
                .combs(context, "platform")
                .await
                .get_opt(name)
                .await
                .expect("the read answers")
                .is_none()
            {
                world
                    .create_comb(context, "platform", name, web(name))
                    .await;
            }
        }
    }
    for name in &names {
        world
            .wait_phase("prod", "platform", name, "Running", Some("Healthy"))
            .await;
        world
            .wait_phase("dev", "platform", name, "Running", Some("Borrowed"))
            .await;
    }
    // Settled: every Comb's last step found it Running, and a step of each came after that.
    let handle = running.handle.clone();
    let stepped_since = |since: jiff::Timestamp| {
        let handle = handle.clone();
        async move {
            let queue = handle.queue();
            let behind: Vec<String> = queue
                .iter()
                .flat_map(|layer| {
                    layer.combs.iter().filter_map(move |comb| {
                        let settled = comb.last_step_at.is_some_and(|at| at > since)
                            && comb.state == "idle"
                            && comb.last_phase.as_deref() == Some("Running");
                        (!settled).then(|| format!("{}:{}", layer.layer, comb.name))
                    })
                })
                .collect();
            let all = queue.iter().map(|layer| layer.combs.len()).sum::<usize>() == 2 * COMBS;
            if all && behind.is_empty() {
                Ok(())
            } else {
                Err(behind)
            }
        }
    };
    let ran = jiff::Timestamp::now();
    wait_until("every Comb to step again after it ran", || {
        stepped_since(ran)
    })
    .await;

    let before = handle.metrics_text().expect("metrics");
    for cluster in ["prod", "dev"] {
        world.kit.reset_requests(cluster);
    }
    let reset = jiff::Timestamp::now();
    let started = std::time::Instant::now();
    wait_until("a resync of every settled Comb", || stepped_since(reset)).await;
    let window = started.elapsed();
    let requests = ["prod", "dev"]
        .into_iter()
        .map(|cluster| (cluster.to_string(), world.kit.requests(cluster)))
        .collect();
    let after = handle.metrics_text().expect("metrics");
    let steps = ["prod", "dev"]
        .into_iter()
        .map(|layer| {
            (
                layer.to_string(),
                steps(&after, layer).saturating_sub(steps(&before, layer)),
            )
        })
        .collect();
    let queue = handle.queue();
    running.stop().await;
    Measured {
        requests,
        window,
        steps,
        queue,
    }
}

#[tokio::test]
async fn a_settled_resync_reads_nothing_from_the_api_servers() {
    let world = World::start(
        &["prod", "dev"],
        &[],
        &[("prod", "platform"), ("dev", "platform")],
    )
    .await;

    // For the record: every read sent to the API servers.
    let direct = settled_resync(
        &world,
        ControllerOptions {
            read_from_watches: false,
            ..test_options()
        },
    )
    .await;
    direct.report("reads sent to the API server");
    assert!(
        direct.requests["prod"].keys().any(|r| is_read(r)),
        "without the watches' answers a settled step reads: {:?}",
        direct.requests
    );

    let cached = settled_resync(&world, test_options()).await;
    cached.report("reads from the watches");
    for cluster in ["prod", "dev"] {
        let reads: BTreeMap<&String, &u64> = cached.requests[cluster]
            .iter()
            .filter(|(request, _)| is_read(request))
            .collect();
        assert!(
            reads.is_empty(),
            "a settled resync in {cluster} read from the API server: {reads:?} (all: {:?})",
            cached.requests[cluster]
        );
        let writes: BTreeMap<&String, &u64> = cached.requests[cluster]
            .iter()
            .filter(|(request, _)| is_write(request))
            .collect();
        assert!(
            writes.is_empty(),
            "a settled resync in {cluster} wrote: {writes:?}"
        );
    }
    // `/debug/queue` says where each Comb's last step read: all from the watches.
    for layer in &cached.queue {
        for comb in &layer.combs {
            let reads = comb
                .last_reads
                .as_ref()
                .unwrap_or_else(|| panic!("{}:{} counts its reads", layer.layer, comb.name));
            assert!(
                reads.cached > 0 && reads.api.is_empty(),
                "{}:{}: {reads:?}",
                layer.layer,
                comb.name
            );
        }
    }
    let view = serde_json::to_value(&cached.queue).expect("the debug view as JSON");
    println!(
        "/debug/queue of a settled borrowing Comb: {}",
        view[1]["combs"][0]
    );
}

/// A borrow with a fallback adds one request to a settled resync, the check of its upstream's
/// API server (`GET /readyz`, every tenth of `unhealthyAfter` within 250 ms..2 s, per upstream
/// context, not per Comb): a settled layer sends nothing else, and silence proves nothing. The
/// counts tell it apart by its path; nothing else is read or written.
#[tokio::test]
async fn a_settled_resync_with_a_fallback_adds_only_the_upstream_check() {
    let world = World::start(
        &["prod", "dev"],
        &[],
        &[("prod", "platform"), ("dev", "platform")],
    )
    .await;
    let measured = settled_resync_borrowing(
        &world,
        test_options(),
        "{from: prod, fallback: [local], unhealthyAfter: 5s}",
    )
    .await;
    measured.report("reads from the watches, with a fallback");
    let checks = measured.requests["prod"]
        .get(UPSTREAM_CHECK)
        .copied()
        .unwrap_or(0);
    // One check every 500 ms (5s / 10), whatever the number of borrowers.
    let most = measured.window.as_millis() as u64 / 500 + 2;
    println!(
        "a settled resync with a fallback: {checks} upstream check(s) of prod in {:?} ({} borrowers)",
        measured.window, COMBS
    );
    assert!(
        (1..=most).contains(&checks),
        "{checks} checks in {:?}, at most {most}",
        measured.window
    );
    for cluster in ["prod", "dev"] {
        let others: BTreeMap<&String, &u64> = measured.requests[cluster]
            .iter()
            .filter(|(request, _)| *request != UPSTREAM_CHECK && !request.starts_with("watch "))
            .collect();
        assert!(
            others.is_empty(),
            "a settled resync in {cluster} sent more than the check: {others:?}"
        );
    }
    assert!(
        !measured.requests["dev"].contains_key(UPSTREAM_CHECK),
        "dev is nobody's upstream: it is not checked"
    );
}

/// Writes to Deployments, whatever the verb (a replace today, an apply once branch `writes`
/// has landed).
fn deployment_writes(requests: &BTreeMap<String, u64>) -> u64 {
    requests
        .iter()
        .filter(|(request, _)| request.ends_with(" deployments.apps") && is_write(request))
        .map(|(_, count)| count)
        .sum()
}

/// Read-your-writes: the steps after an edit (woken by the rollout's Pods and the Deployment's
/// status) read the Deployment as the edit's step wrote it, even before the watch brings it,
/// so none of them applies it again.
#[tokio::test]
async fn an_edit_writes_the_deployment_once_though_the_steps_read_from_the_watches() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    let config =
        world.config("resync: 1h\nlayers:\n - {name: prod, context: prod, namespaces: [platform]}");
    let running = world.run(config).await;
    world
        .create_comb("prod", "platform", "web-0", web("web-0"))
        .await;
    world
        .wait_phase("prod", "platform", "web-0", "Running", Some("Healthy"))
        .await;
    world.kit.reset_requests("prod");
    let mut edited = web("web-0");
    edited["config"]["manifests"][0]["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("nginx:2");
    world.patch_spec("prod", "platform", "web-0", edited).await;
    let handle = running.handle.clone();
    wait_until("the edit to be rolled out and the Comb settled", || {
        let handle = handle.clone();
        let world = &world;
        async move {
            let image = world
                .kit
                .peek("prod", "apps/v1", "Deployment", "platform", "web-0")
                .await
                .and_then(|d| {
                    d.pointer("/spec/template/spec/containers/0/image")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                });
            let queue = handle.queue();
            let comb = queue
                .iter()
                .flat_map(|layer| layer.combs.iter())
                .find(|comb| comb.name == "web-0")
                .cloned();
            let settled = comb.as_ref().is_some_and(|comb| {
                comb.state == "idle"
                    && comb.last_phase.as_deref() == Some("Running")
                    && comb.last_reason == Some(comb_api::Reason::Healthy)
            });
            if image.as_deref() == Some("nginx:2") && settled {
                Ok(())
            } else {
                Err((image, comb))
            }
        }
    })
    .await;
    let requests = world.kit.requests("prod");
    println!("an image edit until settled: {requests:?}");
    assert_eq!(deployment_writes(&requests), 1, "{requests:?}");
    // The edited Deployment carries the old digest: nothing of it read from the server could
    // make it stand, so the edit's apply goes out without a read.
    assert_eq!(requests.get("get deployments.apps"), None, "{requests:?}");
    running.stop().await;
}
