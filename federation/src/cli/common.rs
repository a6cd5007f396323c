//! What the commands that read the federation share: the global `--config`, the async runtime,
//! the layers' clients, listing and finding Combs. The client edge of the CLI.

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use comb_api::{Comb, CombRef};
use comb_kubeconfigs::ClientPool;
use kube::Api;
use kube::api::ListParams;

use crate::config::{Config, Layer, LocatedComb};

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
        let pool = config.client_pool()?;
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
        let namespaces: Option<Vec<String>> = match namespace {
            Some(namespace) if !layer.manages(namespace) => return Ok(Vec::new()),
            Some(namespace) => Some(vec![namespace.to_string()]),
            None => layer.namespaces.clone(),
        };
        let client = self.client(layer).await?;
        let resource = comb_api::api_resource(&self.config.group);
        let apis: Vec<Api<Comb>> = match namespaces {
            Some(namespaces) => namespaces
                .iter()
                .map(|namespace| Api::namespaced_with(client.clone(), namespace, &resource))
                .collect(),
            None => vec![Api::all_with(client, &resource)],
        };
        let mut combs = Vec::new();
        for api in apis {
            let list = api.list(&ListParams::default()).await.with_context(|| {
                format!(
                    "listing the Combs of layer {} (context {}) failed",
                    layer.name, layer.context
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
}
