//! What the federation controller costs on sandbox clusters (DESIGN.md §10), measured, never
//! asserted:
//!
//! - reaction: a Comb's spec edited (its image) until the API server has the new Deployment,
//!   as a watch sees it, over `COMB_BENCH_EDITS` edits (default 50): median, p90, max;
//! - convergence: `COMB_BENCH_COMBS` Combs (default 100) on each of three layers (prod; staging,
//!   a namespace layer on prod's server borrowing from prod; dev, on its own server, borrowing
//!   from staging) from creation until all record their final phase, beside the time a plain
//!   client takes to write the same Deployments and Services and see them ready;
//! - a settled resync: requests per Comb and resync while nothing changes.
//!
//! `cargo bench --profile dev -p comb-federation --bench controller` (a debug build, as the team
//! builds; drop `--profile dev` for an optimized one).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use comb_api::{Comb, CombSpec, DEFAULT_GROUP};
use comb_federation::config::Config;
use comb_federation::controller::{BackoffPolicy, Controller, ControllerOptions};
use comb_federation::engine::class::ClassRegistry;
use comb_kubeconfigs::ClientPool;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WRITERS: usize = 8;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// The Deployment and Service `name` of the kit's web Comb.
fn manifests(name: &str, image: &str) -> Value {
    comb_testkit::fixtures::web(name, image)["config"]["manifests"].take()
}

fn spec(name: &str, image: &str) -> Result<CombSpec> {
    Ok(serde_json::from_value(json!({
        "class": "Manifests",
        "config": {
            "manifests": manifests(name, image),
            "endpoints": [{"name": "http", "port": 80, "external": "192.0.2.10:80"}]
        }
    }))?)
}

/// The kit's clusters on the emulator: prod and dev, and staging, a namespace of prod.
struct World {
    kit: comb_testkit::World,
    pool: ClientPool,
}

impl World {
    async fn start() -> Result<World> {
        let kit = comb_testkit::Setup::clusters(["prod", "dev"])
            .on(comb_testkit::Backend::Emulator)
            .context("staging", "prod", "staging")
            .namespace("prod", "platform")
            .namespace("prod", "staging")
            .namespace("dev", "platform")
            .namespace("dev", "bench")
            .start()
            .await;
        Ok(World {
            pool: kit.pool.clone(),
            kit,
        })
    }

    async fn combs(&self, context: &str, namespace: &str) -> Result<Api<Comb>> {
        Ok(self.kit.combs(context, namespace).await)
    }

    fn requests(&self, cluster: &str) -> BTreeMap<String, u64> {
        self.kit.requests(cluster)
    }

    fn reset_requests(&self) {
        for cluster in ["prod", "dev"] {
            self.kit.reset_requests(cluster);
        }
    }
}

const CONFIG: &str = "
resync: RESYNC
layers:
  - {name: prod, context: prod, namespaces: [platform]}
  - {name: staging, context: staging, namespaces: [staging], borrow: {from: prod, namespace: platform}}
  - {name: dev, context: dev, namespaces: [platform], borrow: {from: staging, namespace: staging}}
";

fn options() -> ControllerOptions {
    ControllerOptions {
        workers_per_layer: 8,
        backoff: BackoffPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
        },
        ..ControllerOptions::default()
    }
}

/// Waits until every Comb of `api` records `phase`; returns how many there are.
async fn wait_all(api: &Api<Comb>, count: usize, phase: &str, deadline: Instant) -> Result<()> {
    loop {
        let list = api.list(&ListParams::default()).await?;
        let done = list
            .items
            .iter()
            .filter(|comb| {
                comb.status
                    .as_ref()
                    .and_then(|s| s.phase.as_ref().map(|p| p.as_str()))
                    == Some(phase)
            })
            .count();
        if done == count {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{done} of {count} Combs reached {phase} before the deadline");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create_combs(api: &Api<Comb>, namespace: &str, count: usize) -> Result<()> {
    stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = format!("c{i:04}");
                let comb = Comb::new(DEFAULT_GROUP, namespace, &name, spec(&name, "nginx:1")?);
                api.create(&PostParams::default(), &comb).await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

fn millis(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

async fn reaction(world: &World, edits: usize) -> Result<()> {
    let config = Config::from_yaml(&CONFIG.replace("RESYNC", "1h"), "bench", None)?;
    let controller = Controller::with_pool(
        config,
        world.pool.clone(),
        ClassRegistry::with_builtins(),
        options(),
    )
    .await?;
    let handle = controller.handle();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(controller.run(shutdown.clone()));
    let combs = world.combs("prod", "platform").await?;
    create_combs(&combs, "platform", 20).await?;
    wait_all(
        &combs,
        20,
        "Running",
        Instant::now() + Duration::from_secs(120),
    )
    .await?;

    let deployments: Api<Deployment> =
        Api::namespaced(world.pool.client("prod").await?, "platform");
    let mut latencies = Vec::new();
    for edit in 0..edits {
        let name = format!("c{:04}", edit % 20);
        let image = format!("nginx:edit-{edit}");
        let watch = watcher::watcher(
            deployments.clone(),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        );
        futures::pin_mut!(watch);
        // Wait for the watch to have listed, so that only the edit's effect is timed.
        while let Some(event) = watch.try_next().await? {
            if matches!(event, Event::InitDone) {
                break;
            }
        }
        let started = Instant::now();
        combs
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"config": {"manifests": manifests(&name, &image)}}})),
            )
            .await?;
        let applied = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(event) = watch.try_next().await? {
                if let Event::Apply(deployment) = event {
                    let now = deployment
                        .spec
                        .template
                        .spec
                        .as_ref()
                        .and_then(|spec| spec.containers.first())
                        .and_then(|container| container.image.as_deref())
                        == Some(image.as_str());
                    if now {
                        return Ok::<_, anyhow::Error>(started.elapsed());
                    }
                }
            }
            bail!("the watch ended")
        })
        .await
        .context("the edit was not applied within 30 s")??;
        latencies.push(applied);
    }
    latencies.sort();
    println!(
        "reaction (CR edit -> Deployment updated, {edits} edits): median {}, p90 {}, max {}",
        millis(percentile(&latencies, 0.5)),
        millis(percentile(&latencies, 0.9)),
        millis(percentile(&latencies, 1.0)),
    );
    let metrics = handle.metrics_text()?;
    let stat = |name: &str| {
        metrics
            .lines()
            .find(|line| line.starts_with(name) && line.contains(r#"layer="prod""#))
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or_default()
    };
    println!(
        "reaction: {} steps on prod, {:.1} ms each on average",
        stat("comb_step_duration_seconds_count"),
        1000.0 * stat("comb_step_duration_seconds_sum") / stat("comb_step_duration_seconds_count")
    );
    // Leave prod empty for the convergence run: the controller cleans up as the CRs go.
    combs
        .delete_collection(&Default::default(), &ListParams::default())
        .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !combs.list(&ListParams::default()).await?.items.is_empty() {
        if Instant::now() > deadline {
            bail!("the reaction run's Combs were not cleaned up");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    task.await??;
    Ok(())
}

async fn convergence(world: &World, count: usize) -> Result<()> {
    let config = Config::from_yaml(&CONFIG.replace("RESYNC", "5s"), "bench", None)?;
    let layers = [
        ("prod", "prod", "platform", "Running"),
        ("staging", "staging", "staging", "Running"),
        ("dev", "dev", "platform", "Running"),
    ];
    let controller = Controller::with_pool(
        config,
        world.pool.clone(),
        ClassRegistry::with_builtins(),
        options(),
    )
    .await?;
    let handle = controller.handle();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(controller.run(shutdown.clone()));
    world.reset_requests();
    let started = Instant::now();
    for (_, context, namespace, _) in layers {
        create_combs(&world.combs(context, namespace).await?, namespace, count).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    for (layer, context, namespace, phase) in layers {
        wait_all(
            &world.combs(context, namespace).await?,
            count,
            phase,
            deadline,
        )
        .await?;
        println!(
            "convergence: {layer} ({count} Combs) {} after the first create",
            millis(started.elapsed())
        );
    }
    let converged = started.elapsed();
    let total = |cluster: &str| world.requests(cluster).values().sum::<u64>();
    println!(
        "convergence: {} Combs on 3 layers in {:.2} s; requests: prod {}, dev {}",
        3 * count,
        converged.as_secs_f64(),
        total("prod"),
        total("dev")
    );

    // Settled: what one resync of every Comb costs.
    tokio::time::sleep(Duration::from_secs(6)).await;
    world.reset_requests();
    let window = Duration::from_secs(10);
    tokio::time::sleep(window).await;
    let resyncs = window.as_secs_f64() / 5.0;
    for cluster in ["prod", "dev"] {
        let requests = world.requests(cluster);
        let combs = if cluster == "prod" { 2 * count } else { count };
        let per: Vec<String> = requests
            .iter()
            .filter(|(key, _)| !key.starts_with("watch"))
            .map(|(key, n)| format!("{key} {:.2}", *n as f64 / combs as f64 / resyncs))
            .collect();
        println!(
            "settled resync on {cluster} ({combs} Combs), requests per Comb and resync: {}",
            per.join(", ")
        );
    }
    let queue_depth: usize = handle.queue().iter().map(|layer| layer.depth).sum();
    println!("queue depth when settled: {queue_depth}");
    shutdown.cancel();
    task.await??;
    Ok(())
}

/// The floor: the same Deployments and Services written by a plain client, until all are ready.
async fn plain_client(world: &World, count: usize) -> Result<()> {
    let client = world.pool.client("dev").await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "bench");
    let services: Api<Service> = Api::namespaced(client, "bench");
    let started = Instant::now();
    stream::iter(0..count)
        .map(|i| {
            let (deployments, services) = (deployments.clone(), services.clone());
            async move {
                let name = format!("p{i:04}");
                let objects = manifests(&name, "nginx:1");
                let deployment: Deployment = serde_json::from_value(objects[0].clone())?;
                let service: Service = serde_json::from_value(objects[1].clone())?;
                deployments
                    .create(&PostParams::default(), &deployment)
                    .await?;
                services.create(&PostParams::default(), &service).await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<()>>()
        .await?;
    loop {
        let ready = deployments
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|d| d.status.as_ref().and_then(|s| s.ready_replicas) == Some(1))
            .count();
        if ready == count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "plain client: {count} Deployments and Services written and ready in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let edits = env_number("COMB_BENCH_EDITS", 50);
    let count = env_number("COMB_BENCH_COMBS", 100);
    let world = World::start().await?;
    reaction(&world, edits).await?;
    convergence(&world, count).await?;
    plain_client(&world, 3 * count).await?;
    Ok(())
}
