//! How many requests per second one sandbox cluster serves over HTTP to a `kube::Client`:
//! GET of one object, LIST of 100 objects, CREATE, each sequentially and with concurrent
//! clients. The floor later benchmarks compare against.
//!
//! `cargo bench --profile dev -p comb-sandbox --bench api_rate` (debug build), or without
//! `--profile dev` for an optimized one. `COMB_BENCH_SCALE=0.1` shortens it.

use std::time::{Duration, Instant};

use comb_sandbox::{Sandbox, SandboxOptions};
use futures::future::try_join_all;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams};
use kube::config::KubeConfigOptions;

const CONCURRENCY: usize = 8;
const LIST_SIZE: usize = 100;

fn config_map(name: &str) -> ConfigMap {
    let mut map = ConfigMap::default();
    map.metadata.name = Some(name.to_string());
    map.data = Some([("key".to_string(), "value".to_string())].into());
    map
}

struct Row {
    operation: &'static str,
    concurrency: usize,
    requests: usize,
    elapsed: Duration,
}

impl Row {
    fn print(&self) {
        let rate = self.requests as f64 / self.elapsed.as_secs_f64();
        println!(
            "{:<22} {:>11} {:>9} {:>9.2}s {:>10.0}",
            self.operation,
            self.concurrency,
            self.requests,
            self.elapsed.as_secs_f64(),
            rate
        );
    }
}

/// Runs `requests` calls of `call` split over `concurrency` tasks and times them.
async fn measure<F, Fut>(
    operation: &'static str,
    concurrency: usize,
    requests: usize,
    call: F,
) -> anyhow::Result<Row>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let per_task = requests / concurrency;
    let started = Instant::now();
    let tasks = (0..concurrency).map(|task| {
        let call = call.clone();
        tokio::spawn(async move {
            for i in 0..per_task {
                call(task * per_task + i).await?;
            }
            anyhow::Ok(())
        })
    });
    for outcome in try_join_all(tasks).await? {
        outcome?;
    }
    Ok(Row {
        operation,
        concurrency,
        requests: per_task * concurrency,
        elapsed: started.elapsed(),
    })
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let scale: f64 = std::env::var("COMB_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let count = |n: f64| ((n * scale) as usize).max(CONCURRENCY);

    let sandbox = Sandbox::start(SandboxOptions::clusters(["bench"])).await?;
    let kubeconfig = sandbox.kubeconfig().build();
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in ["bench-list", "bench-create"] {
        let mut namespace = Namespace::default();
        namespace.metadata.name = Some(name.to_string());
        namespaces
            .create(&PostParams::default(), &namespace)
            .await?;
    }
    let listed: Api<ConfigMap> = Api::namespaced(client.clone(), "bench-list");
    for i in 0..LIST_SIZE {
        listed
            .create(&PostParams::default(), &config_map(&format!("item-{i}")))
            .await?;
    }
    let created: Api<ConfigMap> = Api::namespaced(client.clone(), "bench-create");

    println!(
        "sandbox API over HTTP, kube::Client, {} build",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "optimized"
        }
    );
    println!(
        "{:<22} {:>11} {:>9} {:>10} {:>10}",
        "operation", "concurrency", "requests", "time", "req/s"
    );
    for concurrency in [1, CONCURRENCY] {
        let api = listed.clone();
        measure("GET one ConfigMap", concurrency, count(2000.0), move |_| {
            let api = api.clone();
            async move {
                api.get("item-0").await?;
                Ok(())
            }
        })
        .await?
        .print();

        let api = listed.clone();
        measure(
            "LIST 100 ConfigMaps",
            concurrency,
            count(200.0),
            move |_| {
                let api = api.clone();
                async move {
                    let list = api.list(&ListParams::default()).await?;
                    anyhow::ensure!(
                        list.items.len() == LIST_SIZE,
                        "listed {} items",
                        list.items.len()
                    );
                    Ok(())
                }
            },
        )
        .await?
        .print();

        let api = created.clone();
        measure("CREATE ConfigMap", concurrency, count(2000.0), move |i| {
            let api = api.clone();
            async move {
                api.create(
                    &PostParams::default(),
                    &config_map(&format!("c{concurrency}-{i}")),
                )
                .await?;
                Ok(())
            }
        })
        .await?
        .print();
    }
    sandbox.shutdown().await;
    Ok(())
}
