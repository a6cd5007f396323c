//! `comb demo`: the README's first command. Two sandbox clusters, three layers, the example
//! Combs, the controller; every transition printed, then a table of every Comb with its phase
//! and via chain.
//!
//! The story (examples/README.md tells it): prod runs nats, db and mailer; staging, a namespace
//! on prod's API server, runs nats itself, borrows db from prod (an ExternalName bridge) and runs
//! mailer as its stub; dev, another API server, borrows db through staging (`via: [staging,
//! prod]`, an EndpointSlice bridge to prod's external address) and nats from staging, and runs
//! mailer as its stub.
//!
//! [`DemoWorld`] is the set-up on its own, for tests and the Rust example.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use comb_api::{Comb, Phase};
use comb_kubeconfigs::ClientPool;
use comb_sandbox::{Backend, Clusters, ExtraContext, SandboxOptions};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};

use std::collections::BTreeMap;
use std::time::Instant;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::cli::common::{Federation, StopSignals, block_on};
use crate::cli::endpoints::{self, Published};
use crate::cli::get::{self, CombRow};
use crate::cli::packets;
use crate::config::{Config, Layer};
use crate::controller::{Controller, ControllerOptions, LayersOnDemand, Transition};
use crate::engine::class::ClassRegistry;
use comb_sandbox::real::network::NetworkOptions;

/// The federation configuration of the demo (kubeconfig `sandbox.kubeconfig` beside it).
pub const CONFIG_YAML: &str = include_str!("../../../examples/comb.yaml");

/// The example Combs, per layer: embedded, so that `cargo run -- demo` works from any directory.
pub const COMBS_YAML: [(&str, &str); 3] = [
    ("prod", include_str!("../../../examples/combs/prod.yaml")),
    (
        "staging",
        include_str!("../../../examples/combs/staging.yaml"),
    ),
    ("dev", include_str!("../../../examples/combs/dev.yaml")),
];

/// The fallback example (`examples/fallback`): prod, staging and dev on clusters of their own;
/// dev borrows nats from staging and falls back to prod while staging is unhealthy.
pub const FALLBACK_CONFIG_YAML: &str = include_str!("../../../examples/fallback/comb.yaml");

/// The fallback example's Combs, per layer: each runs nats behind a load balancer.
pub const FALLBACK_COMBS_YAML: [(&str, &str); 3] = [
    (
        "prod",
        include_str!("../../../examples/fallback/combs/prod.yaml"),
    ),
    (
        "staging",
        include_str!("../../../examples/fallback/combs/staging.yaml"),
    ),
    (
        "dev",
        include_str!("../../../examples/fallback/combs/dev.yaml"),
    ),
];

/// The sandbox clusters of the demo's three layers: `prod` and `dev` are clusters, `staging` is
/// the extra context "prod's server, namespace staging".
const CLUSTERS: [&str; 2] = ["prod", "dev"];
const STAGING: (&str, &str, &str) = ("staging", "prod", "staging");

/// The field manager of everything the demo applies.
const MANAGER: &str = "comb-demo";

/// How long it waits for the CRD to be served.
const CRD_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Keep the clusters and the controller running after the demo settles (stop with Ctrl-C),
    /// to look around with kubectl and `comb get`.
    #[arg(long)]
    pub(crate) follow: bool,
    /// Give up when the Combs have not all reached their expected phase by then.
    #[arg(long, default_value = "60s", value_parser = crate::config::duration_arg)]
    pub(crate) timeout: Duration,
    /// How long simulated Pods take to become Ready (emulator only).
    #[arg(long, default_value = "300ms", value_parser = crate::config::parse_duration)]
    pod_ready_delay: Duration,
    /// Serve the controller's admin address here: `/` is the federation's status page
    /// (port 0: any free port; the address is printed).
    #[arg(long, value_name = "ADDRESS")]
    admin_address: Option<std::net::SocketAddr>,
    /// Run comb as its users do (with `--backend kube --network`): its image (`--image`, else
    /// $COMB_IMAGE, else the last one tests/image/build wrote) loaded into a real node of prod's
    /// cluster, installed by its chart with helm, as a Pod; prints where it runs.
    #[arg(long, requires = "network")]
    pub(crate) in_cluster: bool,
    #[command(flatten)]
    pub(crate) backend: crate::cli::sandbox::BackendArgs,
}

/// The demo's clusters, set up: the CRD installed in each, the layers' namespaces created, the
/// kubeconfig and the federation configuration written to a temporary directory.
pub struct DemoWorld {
    /// The clusters, of either backend.
    pub sandbox: Clusters,
    pub config: Config,
    pub pool: ClientPool,
    dir: tempfile::TempDir,
}

impl DemoWorld {
    /// Starts the clusters on the emulator and sets them up. Pods become Ready
    /// `pod_ready_delay` after they are scheduled.
    pub async fn start(pod_ready_delay: Duration) -> anyhow::Result<DemoWorld> {
        DemoWorld::start_on(Backend::Emulator, None, pod_ready_delay).await
    }

    /// Starts the clusters on `backend` (the real one from `kube_bin`, default its cache) and
    /// sets them up.
    pub async fn start_on(
        backend: Backend,
        kube_bin: Option<PathBuf>,
        pod_ready_delay: Duration,
    ) -> anyhow::Result<DemoWorld> {
        DemoWorld::start_with(backend, kube_bin, pod_ready_delay, None).await
    }

    /// [`DemoWorld::start_on`], with the sandbox network when `network` says so (the real
    /// backend only).
    pub async fn start_with(
        backend: Backend,
        kube_bin: Option<PathBuf>,
        pod_ready_delay: Duration,
        network: Option<NetworkOptions>,
    ) -> anyhow::Result<DemoWorld> {
        let (context, cluster, namespace) = STAGING;
        let options = SandboxOptions {
            contexts: vec![ExtraContext {
                name: context.to_string(),
                cluster: cluster.to_string(),
                namespace: Some(namespace.to_string()),
            }],
            pod_ready_delay,
            network,
            ..SandboxOptions::clusters(CLUSTERS)
        };
        DemoWorld::start_for(backend, kube_bin, options, CONFIG_YAML).await
    }

    /// The clusters of `options` on `backend`, set up for the federation configuration
    /// `config_yaml` (whose `kubeconfig` names where the clusters' kubeconfig goes, beside it):
    /// the CRD in each cluster, the layers' namespaces. For other federations than the demo's
    /// (the fallback's three clusters, say).
    pub async fn start_for(
        backend: Backend,
        kube_bin: Option<PathBuf>,
        options: SandboxOptions,
        config_yaml: &str,
    ) -> anyhow::Result<DemoWorld> {
        let sandbox = Clusters::start(backend, options, kube_bin)
            .await
            .context("starting the sandbox clusters failed")?;
        let dir = tempfile::Builder::new()
            .prefix("comb-demo-")
            .tempdir()
            .context("creating a temporary directory failed")?;
        let config_path = dir.path().join("comb.yaml");
        std::fs::write(&config_path, config_yaml)
            .with_context(|| format!("writing {} failed", config_path.display()))?;
        let config = Config::load(&config_path)?;
        let kubeconfig = config
            .kubeconfig
            .clone()
            .context("the demo configuration names no kubeconfig")?;
        sandbox.write_kubeconfig(&kubeconfig)?;
        let pool = crate::config::client_pool(&config)?;
        let world = DemoWorld {
            sandbox,
            config,
            pool,
            dir,
        };
        world.install().await?;
        Ok(world)
    }

    /// The directory of the configuration and the kubeconfig; removed when the world is dropped.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The federation configuration file (`comb --config <this> get`).
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("comb.yaml")
    }

    /// The kubeconfig with a context per layer (`kubectl --kubeconfig <this> --context dev`).
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.config.kubeconfig.clone().unwrap_or_default()
    }

    /// Another federation configuration over the demo's clusters: `yaml` written beside the
    /// demo's (so `kubeconfig: sandbox.kubeconfig` names the demo's kubeconfig) as `name`, and
    /// loaded. For a switch: the demo's own with a Comb out of a borrow list, say.
    pub fn config_from(&self, name: &str, yaml: &str) -> anyhow::Result<Config> {
        let path = self.dir.path().join(name);
        std::fs::write(&path, yaml)
            .with_context(|| format!("writing {} failed", path.display()))?;
        Ok(Config::load(&path)?)
    }

    /// The CRD on every cluster, and every namespace a layer names.
    async fn install(&self) -> anyhow::Result<()> {
        let crd = comb_api::crd(&self.config.group)?;
        let crd_name = format!("{}.{}", comb_api::PLURAL, self.config.group);
        for (cluster, _) in self.sandbox.urls() {
            let cluster = cluster.as_str();
            let crds: Api<CustomResourceDefinition> = Api::all(self.pool.client(cluster).await?);
            crds.patch(&crd_name, &PatchParams::apply(MANAGER), &Patch::Apply(&crd))
                .await
                .with_context(|| format!("installing the CRD in cluster {cluster} failed"))?;
            tokio::time::timeout(
                CRD_WAIT,
                await_condition(crds, &crd_name, conditions::is_crd_established()),
            )
            .await
            .with_context(|| format!("the CRD in cluster {cluster} was not established in time"))?
            .with_context(|| format!("waiting for the CRD in cluster {cluster} failed"))?;
        }
        for layer in &self.config.layers {
            for namespace in layer.namespaces.iter().flatten() {
                self.apply(
                    &layer.context,
                    &json!({"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": namespace}}),
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Applies (server-side) one object through a context's client.
    pub async fn apply(&self, context: &str, object: &Value) -> anyhow::Result<()> {
        let object: DynamicObject = serde_json::from_value(object.clone())?;
        let types = object
            .types
            .clone()
            .context("an object to apply has no apiVersion and kind")?;
        let gvk = GroupVersionKind::try_from(&types)?;
        let name = object.metadata.name.clone().unwrap_or_default();
        let client = self.pool.client(context).await?;
        let (resource, _) = kube::discovery::pinned_kind(&client, &gvk)
            .await
            .with_context(|| {
                format!(
                    "{} {} is not a kind context {context} serves",
                    types.api_version, types.kind
                )
            })?;
        let api: Api<DynamicObject> = match &object.metadata.namespace {
            Some(namespace) => Api::namespaced_with(client, namespace, &resource),
            None => Api::all_with(client, &resource),
        };
        api.patch(&name, &PatchParams::apply(MANAGER), &Patch::Apply(&object))
            .await
            .map_err(|error| {
                // The API's own words (a webhook's refusal, say), which the one-line error
                // leaves out of kube's errors.
                let why = match &error {
                    kube::Error::Api(status) => format!(": {}", status.message),
                    _ => String::new(),
                };
                anyhow::Error::new(error).context(format!(
                    "applying {} {name} in context {context} failed{why}",
                    types.kind
                ))
            })?;
        Ok(())
    }

    /// Applies the Combs of a YAML file (one or more documents) in a layer; a Comb without a
    /// namespace goes to the layer's first namespace.
    pub async fn apply_combs(&self, layer: &str, yaml: &str) -> anyhow::Result<Vec<Comb>> {
        let layer = self
            .config
            .layer(layer)
            .with_context(|| format!("the demo has no layer {layer}"))?;
        let combs: Vec<Comb> = serde_saphyr::from_multiple(yaml)
            .with_context(|| format!("the Combs for layer {} do not parse", layer.name))?;
        for comb in &combs {
            // What does not decode would be written back as the default spec: refuse it.
            if let Some(problem) = &comb.spec_error {
                anyhow::bail!(
                    "Comb {} for layer {}: {problem}",
                    comb.metadata.name.as_deref().unwrap_or_default(),
                    layer.name
                );
            }
            let mut object = serde_json::to_value(comb)?;
            if comb.metadata.namespace.is_none() {
                let namespace = layer.namespaces.iter().flatten().next().with_context(|| {
                    format!("a Comb for layer {} names no namespace", layer.name)
                })?;
                object["metadata"]["namespace"] = json!(namespace);
            }
            self.apply(&layer.context, &object).await?;
        }
        Ok(combs)
    }

    /// Every Comb of every layer, as `comb get` reads them.
    pub async fn rows(&self) -> anyhow::Result<Vec<CombRow>> {
        read_rows(&Federation {
            config: self.config.clone(),
            pool: self.pool.clone(),
        })
        .await
    }

    /// Calls every service of [`packets::CALLS`] from each layer's client Pod, expecting the
    /// answers where `rows` say each service comes from ([`packets::call_every_layer`]).
    pub async fn calls(&self, rows: &[CombRow]) -> Vec<packets::CallRow> {
        packets::call_every_layer(&self.sandbox, &self.places(), rows).await
    }

    /// Each layer's place: `(layer, (cluster, namespace))`.
    pub fn places(&self) -> Vec<(&str, packets::Place<'_>)> {
        self.config
            .layers
            .iter()
            .map(|layer| {
                let cluster = if layer.context == STAGING.0 {
                    STAGING.1
                } else {
                    layer.context.as_str()
                };
                let namespace = layer
                    .namespaces
                    .iter()
                    .flatten()
                    .next()
                    .map(String::as_str)
                    .unwrap_or("default");
                (layer.name.as_str(), (cluster, namespace))
            })
            .collect()
    }

    /// A client Pod in each layer's namespace ([`packets::client_pod`]), to call from.
    pub async fn apply_clients(&self) -> anyhow::Result<()> {
        for layer in &self.config.layers {
            if let Some(namespace) = layer.namespaces.iter().flatten().next() {
                self.apply(&layer.context, &packets::client_pod(namespace))
                    .await?;
            }
        }
        Ok(())
    }

    /// The fallback example on real clusters with `network`: its Combs applied and a client Pod
    /// in each layer, to call from (the fallback's test and benchmark).
    pub async fn start_fallback(network: NetworkOptions) -> anyhow::Result<DemoWorld> {
        let world = DemoWorld::start_for(
            Backend::Kube,
            None,
            SandboxOptions {
                network: Some(network),
                ..SandboxOptions::clusters(["prod", "staging", "dev"])
            },
            FALLBACK_CONFIG_YAML,
        )
        .await?;
        for (layer, yaml) in FALLBACK_COMBS_YAML {
            world.apply_combs(layer, yaml).await?;
        }
        world.apply_clients().await?;
        Ok(world)
    }

    /// Takes the Pods labelled `selector` in `namespace` of cluster `cluster` away for good:
    /// its nodes cordoned, then the Pods deleted, so that those their controllers make instead
    /// stay Pending until [`DemoWorld::let_pods_back`].
    pub async fn take_pods_away(
        &self,
        cluster: &str,
        namespace: &str,
        selector: &str,
    ) -> anyhow::Result<()> {
        self.cordon(cluster, true).await?;
        let client = self.pool.client(cluster).await?;
        Api::<Pod>::namespaced(client, namespace)
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels(selector),
            )
            .await
            .with_context(|| {
                format!("deleting the Pods {selector} in {cluster}/{namespace} failed")
            })?;
        Ok(())
    }

    /// Uncordons cluster `cluster`'s nodes: the Pods [`DemoWorld::take_pods_away`] left Pending
    /// are scheduled.
    pub async fn let_pods_back(&self, cluster: &str) -> anyhow::Result<()> {
        self.cordon(cluster, false).await
    }

    /// Marks every node of cluster `cluster` (un)schedulable.
    async fn cordon(&self, cluster: &str, unschedulable: bool) -> anyhow::Result<()> {
        let nodes: Api<Node> = Api::all(self.pool.client(cluster).await?);
        let patch = json!({"spec": {"unschedulable": unschedulable}});
        for node in nodes.list(&ListParams::default()).await? {
            let name = node.metadata.name.unwrap_or_default();
            nodes
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("(un)cordoning node {name} of {cluster} failed"))?;
        }
        Ok(())
    }

    /// The demo's story: the Secret prod's mailer needs, then the example Combs of every layer.
    pub async fn apply_examples(&self) -> anyhow::Result<()> {
        self.apply(
            "prod",
            &json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "mailer-relay", "namespace": "platform"},
                    "data": {"password": "ZGVtby1vbmx5"}}),
        )
        .await?;
        for (layer, yaml) in COMBS_YAML {
            self.apply_combs(layer, yaml).await?;
        }
        Ok(())
    }
}

/// A controller with the built-in classes over `config`, on the current runtime until
/// [`RunningController::stop`]: for the tests and benchmarks that switch configurations. With
/// `layerTemplates`, the layers on demand run beside it while it reconciles, as `comb run`
/// runs them.
pub struct RunningController {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<crate::error::Result<crate::controller::RunOutcome>>,
    layers: Option<tokio::task::JoinHandle<crate::error::Result<()>>>,
}

impl RunningController {
    pub async fn start(config: &Config) -> anyhow::Result<RunningController> {
        let pool = crate::config::client_pool(config)?;
        let registry = ClassRegistry::with_builtins();
        let options = ControllerOptions::default();
        let on_demand = (!config.layer_templates.is_empty()).then(|| {
            LayersOnDemand::new(
                config.clone(),
                pool.clone(),
                registry.clone(),
                options.clone(),
            )
        });
        let controller = Controller::with_pool(config.clone(), pool, registry, options).await?;
        let shutdown = CancellationToken::new();
        let layers = on_demand.map(|on_demand| {
            tokio::spawn(
                on_demand
                    .while_reconciling(controller.handle())
                    .run(shutdown.clone()),
            )
        });
        let task = tokio::spawn(controller.run(shutdown.clone()));
        Ok(RunningController {
            shutdown,
            task,
            layers,
        })
    }

    /// Stops it and waits until it ended.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.task.await.context("the controller task failed")??;
        if let Some(layers) = self.layers {
            layers
                .await
                .context("the task of the layers on demand failed")??;
        }
        Ok(())
    }
}

/// What the demo expects of each Comb: its phase and its via chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    pub layer: &'static str,
    pub namespace: &'static str,
    pub name: &'static str,
    pub phase: &'static str,
    pub via: &'static [&'static str],
}

/// The end of the story: every Comb Running, the borrowed ones through these layers.
pub const EXPECTED: [Expected; 9] = [
    expect("prod", "platform", "nats", &[]),
    expect("prod", "platform", "db", &[]),
    expect("prod", "platform", "mailer", &[]),
    expect("staging", "staging", "nats", &[]),
    expect("staging", "staging", "db", &["prod"]),
    expect("staging", "staging", "mailer", &[]),
    expect("dev", "platform", "nats", &["staging"]),
    expect("dev", "platform", "db", &["staging", "prod"]),
    expect("dev", "platform", "mailer", &[]),
];

const fn expect(
    layer: &'static str,
    namespace: &'static str,
    name: &'static str,
    via: &'static [&'static str],
) -> Expected {
    Expected {
        layer,
        namespace,
        name,
        phase: "Running",
        via,
    }
}

/// What keeps `rows` (every Comb as `get` reads it) from the expected end, one line per Comb;
/// empty when the story is complete.
pub fn shortfalls(rows: &[CombRow]) -> Vec<String> {
    EXPECTED
        .iter()
        .filter_map(|expected| {
            let reference = format!(
                "{}:{}/{}",
                expected.layer, expected.namespace, expected.name
            );
            let want = match expected.via {
                [] => expected.phase.to_string(),
                via => format!("{} via {}", expected.phase, via.join(", ")),
            };
            let Some(row) = rows.iter().find(|row| {
                (
                    row.layer.as_str(),
                    row.namespace.as_str(),
                    row.name.as_str(),
                ) == (expected.layer, expected.namespace, expected.name)
            }) else {
                return Some(format!("{reference}: expected {want}, but it is missing"));
            };
            let phase = row.phase.as_deref().unwrap_or("without a phase");
            if phase == expected.phase && row.via == expected.via {
                return None;
            }
            let mut got = phase.to_string();
            if let Some(reason) = &row.reason {
                got.push_str(&format!(" ({reason})"));
            }
            if !row.via.is_empty() {
                got.push_str(&format!(" via {}", row.via.join(", ")));
            }
            if let Some(message) = row.message.as_deref().filter(|m| !m.is_empty()) {
                got.push_str(&format!(": {message}"));
            }
            Some(format!("{reference}: expected {want}, got {got}"))
        })
        .collect()
}

/// A transition as the demo prints it: `HH:MM:SS layer:ns/name: old -> new (reason): message`,
/// the time in the local time zone.
pub fn transition_line(transition: &Transition, zone: &TimeZone) -> String {
    let time = transition.at.to_zoned(zone.clone()).strftime("%H:%M:%S");
    format!("{time} {transition}")
}

/// How to look around while `--follow` keeps the clusters running.
pub fn follow_hints(config: &Path, kubeconfig: &Path) -> String {
    let (config, kubeconfig) = (config.display(), kubeconfig.display());
    format!(
        "\nThe clusters and the controller keep running until Ctrl-C. Look around:\n  \
         kubectl --kubeconfig {kubeconfig} --context dev get combs -A\n  \
         kubectl --kubeconfig {kubeconfig} --context staging get services\n  \
         comb --config {config} get\n  \
         comb --config {config} via dev:db\n  \
         comb --config {config} endpoints dev:db dev:nats dev:mailer -o env\n"
    )
}

/// How often the demo reads the Combs once the transitions say the story may be complete (a
/// via chain can change without a phase changing).
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(500);

pub fn run(args: DemoArgs, registry: &ClassRegistry) -> anyhow::Result<ExitCode> {
    block_on(async move {
        let started = Instant::now();
        let zone = TimeZone::system();
        // From the start: a Ctrl-C while the story plays still shuts the clusters down.
        let mut stop_signals = StopSignals::listen()?;
        let network = args.backend.network();
        let world = DemoWorld::start_with(
            args.backend.backend,
            args.backend.kube_bin.clone(),
            args.pod_ready_delay,
            network.clone(),
        )
        .await?;
        let federation = Federation {
            config: world.config.clone(),
            pool: world.pool.clone(),
        };
        println!(
            "comb demo: sandbox clusters prod ({}) and dev ({}); layers prod, staging (namespace \
             staging on prod's server) and dev; the example Combs of examples/combs",
            world.sandbox.url("prod")?,
            world.sandbox.url("dev")?,
        );
        let controller = Controller::with_pool(
            world.config.clone(),
            world.pool.clone(),
            registry.clone(),
            ControllerOptions {
                admin_address: args.admin_address,
                ..ControllerOptions::default()
            },
        )
        .await?;
        let handle = controller.handle();
        let mut transitions = controller.subscribe();
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(controller.run(shutdown.clone()));
        world.apply_examples().await?;
        let applied = Instant::now();
        if network.is_some() {
            world.apply_clients().await?;
        }

        let deadline = tokio::time::Instant::now() + args.timeout;
        let mut states: BTreeMap<String, Phase> = BTreeMap::new();
        let mut rows = Vec::new();
        let mut missing = shortfalls(&rows);
        let mut next_check = tokio::time::Instant::now();
        let mut interrupted = false;
        while !missing.is_empty() {
            let may_be_complete = EXPECTED.iter().all(|expected| {
                let key = format!(
                    "{}:{}/{}",
                    expected.layer, expected.namespace, expected.name
                );
                states
                    .get(&key)
                    .is_some_and(|phase| phase == expected.phase)
            });
            tokio::select! {
                // The deadline first: a steady stream of transitions must not outlast it.
                biased;
                () = tokio::time::sleep_until(deadline) => break,
                () = stop_signals.recv() => {
                    interrupted = true;
                    break;
                }
                received = transitions.recv() => match received {
                    Ok(transition) => {
                        println!("{}", transition_line(&transition, &zone));
                        states.insert(
                            format!("{}:{}/{}", transition.layer, transition.namespace, transition.name),
                            transition.new.phase.clone(),
                        );
                    }
                    Err(broadcast::error::RecvError::Lagged(lost)) => {
                        println!("({lost} transitions not shown)");
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                () = tokio::time::sleep_until(next_check), if may_be_complete => {
                    rows = read_rows(&federation).await?;
                    missing = shortfalls(&rows);
                    next_check = tokio::time::Instant::now() + CHECK_EVERY;
                }
            }
        }
        if interrupted {
            shutdown.cancel();
            let _ = running.await;
            world.sandbox.shutdown().await;
            anyhow::bail!("interrupted before every Comb reached its expected phase");
        }
        rows = read_rows(&federation).await?;
        missing = shortfalls(&rows);
        println!();
        print!("{}", get::table(&rows, false, Timestamp::now()));
        let borrowed: Vec<Published> = rows
            .iter()
            .filter(|row| !row.via.is_empty())
            .map(Published::from)
            .collect();
        if !borrowed.is_empty() {
            println!(
                "\nWhat the borrowing Combs publish (their bridges serve these addresses under the local names):"
            );
            print!("{}", endpoints::table(&borrowed));
        }
        if !missing.is_empty() {
            shutdown.cancel();
            let _ = running.await;
            anyhow::bail!(
                "not every Comb reached its expected phase within {:?}: {}",
                args.timeout,
                missing.join("; ")
            );
        }
        println!(
            "\nEvery Comb reached its expected phase in {:.1}s ({:.1}s after the Combs were applied).",
            started.elapsed().as_secs_f64(),
            applied.elapsed().as_secs_f64()
        );
        if network.is_some() {
            println!(
                "\nCalls from the Pod `{}` of each layer ({} each once answered, by the names consumers use, through the layer's DNS, kube-proxy and comb's bridges):",
                packets::CLIENT,
                packets::CALLS_PER_ROW
            );
            let incomplete = print_calls(&world, &rows).await;
            if !incomplete.is_empty() {
                shutdown.cancel();
                let _ = running.await;
                world.sandbox.shutdown().await;
                anyhow::bail!(
                    "calls not answered from where comb says the service comes from: {}",
                    incomplete.join(", ")
                );
            }
        }
        if args.follow {
            print!(
                "{}",
                follow_hints(&world.config_path(), &world.kubeconfig_path())
            );
            if let Some(address) = handle.admin_address() {
                println!("  open http://{address}/ (the federation's status page)");
            }
            if network.is_some() {
                println!(
                    "  curl -sk -X POST {}/_sandbox/network/call -d '{{\"namespace\": \"platform\", \"pod\": \"{}\", \"target\": \"db:5432\"}}'   (a call from dev's client Pod)",
                    world.sandbox.url("dev")?,
                    packets::CLIENT
                );
            }
            loop {
                tokio::select! {
                    received = transitions.recv() => match received {
                        Ok(transition) => println!("{}", transition_line(&transition, &zone)),
                        Err(broadcast::error::RecvError::Lagged(lost)) => {
                            println!("({lost} transitions not shown)");
                        }
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                    () = stop_signals.recv() => break,
                }
            }
        }
        shutdown.cancel();
        running.await.context("the controller task failed")??;
        world.sandbox.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Makes the calls of every layer, prints their table, and names those not answered from where
/// `rows` say the service comes from (`layer call`).
pub(crate) async fn print_calls(world: &DemoWorld, rows: &[CombRow]) -> Vec<String> {
    let calls = world.calls(rows).await;
    print!("{}", packets::table(&calls));
    calls
        .iter()
        .filter(|row| !row.complete())
        .map(|row| format!("{} {}", row.layer, row.call))
        .collect()
}

/// Every Comb of every layer, as `comb get` reads them.
pub(crate) async fn read_rows(federation: &Federation) -> anyhow::Result<Vec<CombRow>> {
    let layers: Vec<&Layer> = federation.config.layers.iter().collect();
    match get::collect_rows(federation, &layers, None, None).await {
        (rows, failures) if failures.is_empty() => Ok(rows),
        (_, failures) => Err(anyhow::anyhow!(failures.join("; "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(layer: &str, namespace: &str, name: &str, phase: &str, via: &[&str]) -> CombRow {
        CombRow {
            layer: layer.into(),
            namespace: namespace.into(),
            name: name.into(),
            class: Some("Manifests".into()),
            stub: false,
            phase: Some(phase.into()),
            reason: Some("Borrowed".into()),
            message: Some("m".into()),
            upstream: None,
            via: via.iter().map(|v| v.to_string()).collect(),
            fallback: None,
            endpoints: Vec::new(),
            creation_timestamp: None,
        }
    }

    fn complete() -> Vec<CombRow> {
        EXPECTED
            .iter()
            .map(|e| row(e.layer, e.namespace, e.name, e.phase, e.via))
            .collect()
    }

    #[test]
    fn the_story_is_complete_when_every_comb_is_where_expected() {
        assert!(shortfalls(&complete()).is_empty());
        let mut rows = complete();
        rows[7] = row("dev", "platform", "db", "Pending", &["staging"]);
        rows.remove(0);
        assert_eq!(
            shortfalls(&rows),
            [
                "prod:platform/nats: expected Running, but it is missing",
                "dev:platform/db: expected Running via staging, prod, got Pending (Borrowed) via staging: m",
            ]
        );
    }

    #[test]
    fn the_examples_parse_and_tell_the_story() {
        let config = Config::from_yaml(CONFIG_YAML, "examples/comb.yaml", None).unwrap();
        let names: Vec<&str> = config.layers.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["prod", "staging", "dev"]);
        for (layer, yaml) in COMBS_YAML {
            let combs: Vec<Comb> = serde_saphyr::from_multiple(yaml).unwrap();
            assert!(combs.iter().all(|c| c.spec_error.is_none()), "{layer}");
            let mut found: Vec<(String, String)> = combs
                .iter()
                .map(|c| {
                    (
                        c.metadata.namespace.clone().unwrap(),
                        c.metadata.name.clone().unwrap(),
                    )
                })
                .collect();
            found.sort();
            let mut expected: Vec<(String, String)> = EXPECTED
                .iter()
                .filter(|e| e.layer == layer)
                .map(|e| (e.namespace.to_string(), e.name.to_string()))
                .collect();
            expected.sort();
            assert_eq!(found, expected, "{layer}");
            assert!(
                combs.iter().all(|c| config
                    .layer(layer)
                    .unwrap()
                    .manages(c.metadata.namespace.as_deref().unwrap())),
                "{layer}"
            );
        }
    }
}
