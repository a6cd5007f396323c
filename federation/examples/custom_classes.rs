//! Comb classes written in Rust, run by the same federation controller as `comb run`.
//!
//! The three Combs of the reference example as classes of their own: `Example::NATS` (a
//! Deployment and a Service), `Example::DB` (a StatefulSet with a volume claim template and a
//! Service) and `Example::Mailer` (needs `config.relay_host` and the Secret `<name>-relay`,
//! depends on nats and db) with its stub `Example::Mailer::Stub` (Mailpit, which keeps the
//! endpoint `smtp` and adds `web`). They run on the demo's sandbox clusters and layers
//! (examples/comb.yaml): prod runs all three, staging runs nats, borrows db from prod and stubs
//! mailer, dev borrows db and nats from staging and stubs mailer.
//!
//! ```sh
//! cargo run --example custom_classes               # the controller, until every Comb is Running
//! cargo run --example custom_classes -- --help     # the comb CLI, with these classes
//! ```
//!
//! With arguments it is the `comb` command line itself (`cli::main_with`), knowing these classes:
//! `cargo run --example custom_classes -- --config comb.yaml describe dev:mailer`.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use comb_federation::cli::demo::DemoWorld;
use comb_federation::controller::{Controller, ControllerOptions};
use comb_federation::engine::class::{ClassRegistry, CombClass, CombContext, PrerequisiteLookup};
use comb_federation::engine::endpoints::EndpointDecl;
use comb_federation::error::Result;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A string of `spec.config`, if set.
fn config<'a>(ctx: &'a CombContext, key: &str) -> Option<&'a str> {
    ctx.config.get(key).and_then(Value::as_str)
}

/// A one-container Deployment labelled `app: <name>`.
fn deployment(name: &str, image: &str, ports: Value, env: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": image, "ports": ports, "env": env}]}
            }
        }
    })
}

/// A Service selecting `app: <name>`.
fn service(name: &str, ports: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
           "spec": {"selector": {"app": name}, "ports": ports}})
}

/// `Example::NATS`: its external address (what a load balancer would answer) comes from
/// `config.external_host`, so that lower layers on other API servers can borrow it.
struct Nats;

#[async_trait]
impl CombClass for Nats {
    fn name(&self) -> &str {
        "Example::NATS"
    }

    async fn endpoints(&self, ctx: &CombContext) -> Result<Vec<EndpointDecl>> {
        let mut client = EndpointDecl::new("client", 4222);
        let mut monitor = EndpointDecl::new("monitor", 8222);
        if let Some(host) = config(ctx, "external_host") {
            client = client.external(&format!("{host}:4222"));
            monitor = monitor.external(&format!("{host}:8222"));
        }
        Ok(vec![client, monitor])
    }

    async fn manifests(&self, _ctx: &CombContext) -> Result<Vec<Value>> {
        Ok(vec![
            deployment(
                "nats",
                "nats:2.10",
                json!([{"name": "client", "containerPort": 4222},
                       {"name": "monitor", "containerPort": 8222}]),
                json!([]),
            ),
            service(
                "nats",
                json!([{"name": "client", "port": 4222}, {"name": "monitor", "port": 8222}]),
            ),
        ])
    }
}

/// `Example::DB`: Postgres with its data on a volume claim; `config.external` is its address
/// from outside the cluster.
struct Db;

#[async_trait]
impl CombClass for Db {
    fn name(&self) -> &str {
        "Example::DB"
    }

    async fn endpoints(&self, ctx: &CombContext) -> Result<Vec<EndpointDecl>> {
        let postgres = EndpointDecl::new("postgres", 5432);
        Ok(vec![match config(ctx, "external") {
            Some(address) => postgres.external(address),
            None => postgres,
        }])
    }

    async fn manifests(&self, _ctx: &CombContext) -> Result<Vec<Value>> {
        Ok(vec![
            json!({
                "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
                "spec": {
                    "serviceName": "db", "replicas": 1,
                    "selector": {"matchLabels": {"app": "db"}},
                    "template": {
                        "metadata": {"labels": {"app": "db"}},
                        "spec": {"containers": [{
                            "name": "postgres", "image": "postgres:16",
                            "ports": [{"name": "postgres", "containerPort": 5432}],
                            "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql/data"}]
                        }]}
                    },
                    "volumeClaimTemplates": [{
                        "metadata": {"name": "data"},
                        "spec": {"accessModes": ["ReadWriteOnce"],
                                 "resources": {"requests": {"storage": "1Gi"}}}
                    }]
                }
            }),
            service("db", json!([{"name": "postgres", "port": 5432}])),
        ])
    }
}

/// `Example::Mailer`: relays through `config.relay_host` with the password in the Secret
/// `<name>-relay`; its stub is `Example::Mailer::Stub` (the default `<class>::Stub`).
struct Mailer;

#[async_trait]
impl CombClass for Mailer {
    fn name(&self) -> &str {
        "Example::Mailer"
    }

    fn depends_on(&self, _ctx: &CombContext) -> Vec<String> {
        vec!["nats".to_string(), "db".to_string()]
    }

    async fn endpoints(&self, _ctx: &CombContext) -> Result<Vec<EndpointDecl>> {
        Ok(vec![EndpointDecl::new("smtp", 587)])
    }

    async fn check(
        &self,
        ctx: &CombContext,
        lookup: &dyn PrerequisiteLookup,
    ) -> Result<Vec<String>> {
        let mut missing = Vec::new();
        if config(ctx, "relay_host").is_none() {
            missing.push("config key relay_host".to_string());
        }
        let secret = format!("{}-relay", ctx.name);
        if !lookup.secret_exists(&ctx.namespace, &secret).await? {
            missing.push(format!("secret {secret}"));
        }
        Ok(missing)
    }

    async fn manifests(&self, ctx: &CombContext) -> Result<Vec<Value>> {
        let relay = config(ctx, "relay_host").unwrap_or_default();
        Ok(vec![
            deployment(
                "mailer",
                "registry.example.com/mailer:1.4",
                json!([{"name": "smtp", "containerPort": 587}]),
                json!([
                    {"name": "RELAY_HOST", "value": relay},
                    {"name": "RELAY_PASSWORD", "valueFrom": {"secretKeyRef":
                        {"name": format!("{}-relay", ctx.name), "key": "password"}}},
                    {"name": "NATS_URL", "value": "nats://nats:4222"},
                    {"name": "DATABASE_URL", "value": "postgres://db:5432/mailer"}
                ]),
            ),
            service("mailer", json!([{"name": "smtp", "port": 587}])),
        ])
    }
}

/// `Example::Mailer::Stub`: Mailpit catches every mail; nothing to relay, so nothing to check.
struct MailerStub;

#[async_trait]
impl CombClass for MailerStub {
    fn name(&self) -> &str {
        "Example::Mailer::Stub"
    }

    fn depends_on(&self, _ctx: &CombContext) -> Vec<String> {
        vec!["nats".to_string(), "db".to_string()]
    }

    async fn endpoints(&self, _ctx: &CombContext) -> Result<Vec<EndpointDecl>> {
        Ok(vec![
            EndpointDecl::new("smtp", 587),
            EndpointDecl::new("web", 8025),
        ])
    }

    async fn manifests(&self, _ctx: &CombContext) -> Result<Vec<Value>> {
        Ok(vec![
            deployment(
                "mailer",
                "axllent/mailpit:v1.21",
                json!([{"name": "smtp", "containerPort": 1025},
                       {"name": "web", "containerPort": 8025}]),
                json!([]),
            ),
            service(
                "mailer",
                json!([{"name": "smtp", "port": 587, "targetPort": 1025},
                       {"name": "web", "port": 8025}]),
            ),
        ])
    }
}

/// The built-in classes and these four.
fn registry() -> ClassRegistry {
    let mut registry = ClassRegistry::with_builtins();
    registry
        .register_shared(Arc::new(Nats))
        .register_shared(Arc::new(Db))
        .register_shared(Arc::new(Mailer))
        .register_shared(Arc::new(MailerStub));
    registry
}

/// The Comb CRs: the same three in every layer (the layers' configuration decides who runs,
/// borrows or stubs them), each layer's nats with its own external address.
fn combs(namespace: &str, nats_host: &str) -> Vec<Value> {
    let comb = |name: &str, class: &str, config: Value| {
        json!({"apiVersion": "comb.internal/v1", "kind": "Comb",
               "metadata": {"name": name, "namespace": namespace},
               "spec": {"class": class, "config": config}})
    };
    vec![
        comb("nats", "Example::NATS", json!({"external_host": nats_host})),
        comb("db", "Example::DB", json!({"external": "192.0.2.10:5432"})),
        comb(
            "mailer",
            "Example::Mailer",
            json!({"relay_host": "smtp.example.com"}),
        ),
    ]
}

fn main() -> ExitCode {
    if std::env::args().len() > 1 {
        return comb_federation::cli::main_with(registry());
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("custom_classes: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("custom_classes: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Starts the clusters, applies the Combs, runs the controller until every Comb is Running.
pub async fn run() -> anyhow::Result<()> {
    let world = DemoWorld::start(Duration::from_millis(300)).await?;
    let controller = Controller::with_pool(
        world.config.clone(),
        world.pool.clone(),
        registry(),
        ControllerOptions::default(),
    )
    .await?;
    let mut transitions = controller.subscribe();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(controller.run(shutdown.clone()));

    world
        .apply(
            "prod",
            &json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "mailer-relay", "namespace": "platform"},
                    "data": {"password": "ZGVtby1vbmx5"}}),
        )
        .await?;
    for (layer, namespace, nats_host) in [
        ("prod", "platform", "192.0.2.11"),
        ("staging", "staging", "192.0.2.20"),
        ("dev", "platform", "192.0.2.30"),
    ] {
        let context = &world
            .config
            .layer(layer)
            .ok_or_else(|| anyhow::anyhow!("the demo has no layer {layer}"))?
            .context;
        for comb in combs(namespace, nats_host) {
            world.apply(context, &comb).await?;
        }
    }

    // Every transition, until all nine Combs are Running (or a minute passed).
    let mut phases = BTreeMap::new();
    let deadline = tokio::time::sleep(Duration::from_secs(60));
    tokio::pin!(deadline);
    while phases.len() < 9 || phases.values().any(|phase| phase != "Running") {
        tokio::select! {
            received = transitions.recv() => {
                let transition = received?;
                println!("{transition}");
                let key = format!("{}:{}/{}", transition.layer, transition.namespace, transition.name);
                phases.insert(key, transition.new.phase.clone());
            }
            () = &mut deadline => anyhow::bail!("not every Comb is Running after a minute: {phases:?}"),
        }
    }
    println!("every Comb is Running: the classes of this program, the controller of comb");
    shutdown.cancel();
    running.await??;
    world.sandbox.shutdown().await;
    Ok(())
}
