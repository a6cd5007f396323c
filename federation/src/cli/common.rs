//! What the commands that read the federation share: the global `--config`, the async runtime,
//! the layers' clients, listing and finding Combs. The client edge of the CLI.

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use comb_api::{Comb, CombRef, Endpoint};
use comb_kubeconfigs::{ClientPool, describe_error};
use kube::Api;
use kube::api::ListParams;

use crate::config::{Config, Layer, LocatedComb};
use crate::engine::borrow::{self, Borrowing, UpstreamResolution, live_status, resolved_endpoints};
use crate::engine::class::{ClassRegistry, CombInstance};
use crate::engine::kube_ops::KubeOps;
use crate::engine::live_status::LiveStatus;
use crate::engine::operations::{Description, describe};

/// Options every subcommand takes.
#[derive(Debug, Clone, clap::Args)]
pub struct GlobalArgs {
    /// The federation configuration: layers, their kube contexts and how they borrow.
    #[arg(
        long,
        global = true,
        env = "COMB_CONFIG",
        default_value = "comb.yaml",
        value_name = "FILE"
    )]
    pub config: PathBuf,
}

/// Runs a command's async body on a runtime of its own.
pub fn block_on<F>(body: F) -> anyhow::Result<ExitCode>
where
    F: Future<Output = anyhow::Result<ExitCode>>,
{
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime failed")?
        .block_on(body)
}

/// SIGINT and SIGTERM, listened for from the moment this is made until it is dropped.
///
/// One value per command, polled as often as needed: tokio hands a signal only to the listeners
/// that exist when it comes, so a `tokio::signal::ctrl_c()` made anew on each turn of a loop loses
/// a Ctrl-C that lands between two turns (the command then runs on, and whoever waits for it
/// waits forever).
pub struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Starts listening; needs the runtime.
    pub fn listen() -> anyhow::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt()).context("listening for SIGINT failed")?,
            terminate: signal(SignalKind::terminate()).context("listening for SIGTERM failed")?,
        })
    }

    /// Waits for the next SIGINT or SIGTERM (at once for one that came since the last call).
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

/// The configuration and one client per context: everything a command needs to reach the layers.
#[derive(Clone, Debug)]
pub struct Federation {
    pub config: Config,
    pub pool: ClientPool,
}

impl Federation {
    /// Loads the configuration named by `--config` and opens its kubeconfig.
    pub fn open(args: &GlobalArgs) -> anyhow::Result<Federation> {
        let config = Config::load(&args.config)?;
        let pool = crate::config::client_pool(&config)?;
        Ok(Federation { config, pool })
    }

    /// The Comb `reference` (`[LAYER:][NAMESPACE/]NAME`) names, read from its layer.
    pub async fn locate(&self, reference: &str) -> anyhow::Result<LocatedComb> {
        let reference = CombRef::parse(reference)?;
        Ok(self.config.locate(&self.pool, &reference).await?)
    }

    /// The layer named `name`, or an error that lists the layers there are.
    pub fn layer(&self, name: &str) -> anyhow::Result<&Layer> {
        self.config.layer(name).with_context(|| {
            let names: Vec<&str> = self
                .config
                .layers
                .iter()
                .map(|layer| layer.name.as_str())
                .collect();
            format!("unknown layer {name} (layers: {})", names.join(", "))
        })
    }

    /// The client of a layer's context.
    pub async fn client(&self, layer: &Layer) -> anyhow::Result<kube::Client> {
        Ok(self.pool.client(&layer.context).await?)
    }

    /// The Combs of a layer: those of `namespace`, else of its namespaces, else of all
    /// namespaces when it names none. A namespace the layer does not manage has none.
    pub async fn list_combs(
        &self,
        layer: &Layer,
        namespace: Option<&str>,
    ) -> anyhow::Result<Vec<Comb>> {
        self.list_selected_combs(layer, namespace, None).await
    }

    /// [`Federation::list_combs`], only those whose labels match `selector` when given.
    pub async fn list_selected_combs(
        &self,
        layer: &Layer,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> anyhow::Result<Vec<Comb>> {
        let mut params = ListParams::default();
        if let Some(selector) = selector {
            params = params.labels(selector);
        }
        let mut combs = Vec::new();
        for api in self.comb_apis(layer, namespace).await? {
            let list = api.list(&params).await.map_err(|error| {
                anyhow::anyhow!(
                    "listing the Combs of layer {} (context {}) failed: {}",
                    layer.name,
                    layer.context,
                    describe_error(&error)
                )
            })?;
            combs.extend(list.items);
        }
        combs.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        Ok(combs)
    }

    /// One Comb API per namespace the read covers: `namespace`, else the layer's namespaces,
    /// else one for all namespaces. None for a namespace the layer does not manage.
    pub async fn comb_apis(
        &self,
        layer: &Layer,
        namespace: Option<&str>,
    ) -> anyhow::Result<Vec<Api<Comb>>> {
        let namespaces: Option<Vec<String>> = match namespace {
            Some(namespace) if !layer.manages(namespace) => return Ok(Vec::new()),
            Some(namespace) => Some(vec![namespace.to_string()]),
            None => layer.namespaces.clone(),
        };
        let client = self.client(layer).await?;
        let resource = comb_api::api_resource(&self.config.group);
        Ok(match namespaces {
            Some(namespaces) => namespaces
                .iter()
                .map(|namespace| Api::namespaced_with(client.clone(), namespace, &resource))
                .collect(),
            None => vec![Api::all_with(client, &resource)],
        })
    }
}

/// A Comb as the controller sees it: built with its layer's stubs, its upstream resolved with
/// its layer's borrow, and the client of its layer.
pub struct Opened {
    pub located: LocatedComb,
    pub comb: CombInstance,
    pub ops: KubeOps,
    pub upstream: UpstreamResolution,
}

impl Federation {
    /// Finds the Comb `reference` names and builds it of `registry`'s classes, as the controller
    /// would.
    pub async fn open_comb(
        &self,
        registry: &ClassRegistry,
        reference: &str,
    ) -> anyhow::Result<Opened> {
        self.build(registry, self.locate(reference).await?).await
    }

    /// Builds a located Comb as the controller would.
    pub async fn build(
        &self,
        registry: &ClassRegistry,
        located: LocatedComb,
    ) -> anyhow::Result<Opened> {
        let layer = self.layer(&located.location.layer)?;
        let stubs = |comb: &CombInstance| layer.stubs_comb(comb.namespace(), comb.name());
        let comb = registry
            .build(&located.comb, &self.config.settings(layer), &stubs)
            .await
            .with_context(|| format!("{} cannot be built", located.location))?;
        let ops = KubeOps::new(self.client(layer).await?, self.config.label_keys());
        let controlling = self.config.controlling_as_recorded(
            layer,
            comb.namespace(),
            comb.name(),
            located.comb.status.as_ref(),
        );
        let env = self.config.borrow_env(&self.pool, layer);
        let upstream = borrow::resolution(&comb, &controlling, &env).await;
        Ok(Opened {
            located,
            comb,
            ops,
            upstream,
        })
    }
}

impl Opened {
    /// The upstream it borrows from; `None` when it runs locally. A resolution that failed is
    /// the error the reconcile step would record.
    pub fn borrowing(&self) -> anyhow::Result<Option<&Borrowing>> {
        match &self.upstream {
            UpstreamResolution::Local => Ok(None),
            UpstreamResolution::Borrowed(borrowing) => Ok(Some(borrowing)),
            failed => Err(anyhow::anyhow!(
                "{}: {}",
                self.located.location,
                failed.failure().unwrap_or_default()
            )),
        }
    }

    /// What the cluster shows of it now (reference §8): its own resources and pods, or, while it
    /// borrows, its bridge and the upstream.
    pub async fn live(&self) -> anyhow::Result<LiveStatus> {
        Ok(live_status(&self.ops, &self.comb, self.borrowing()?).await?)
    }

    /// Everything about it (reference §9 `describe`), as the engine describes it.
    pub async fn describe(&self) -> anyhow::Result<Description> {
        Ok(describe(&self.ops, &self.comb, self.borrowing()?).await?)
    }

    /// The endpoints it resolves now: its own, or the upstream's while it borrows.
    pub async fn endpoints(&self) -> anyhow::Result<Vec<Endpoint>> {
        Ok(resolved_endpoints(&self.comb, self.borrowing()?).await?)
    }
}
