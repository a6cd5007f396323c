//! `comb run`: the federation controller (DESIGN.md §6).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::cli::common::{GlobalArgs, StopSignals, block_on};
use crate::config::{Config, duration_arg};
use crate::controller::{
    Controller, ControllerOptions, LayerGate, LayersOnDemand, LeaderElection, OnceOptions,
    RunOutcome, Sharding, default_identity,
};
use crate::engine::class::ClassRegistry;
use crate::webhook::{Certificates, ServiceName, WebhookOptions};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Run until every Comb is settled, then exit: 1 when any Comb ended in Error or the
    /// timeout hit, else 0.
    #[arg(long)]
    once: bool,
    /// With --once: how long a Pending Comb's status must stay unchanged to count as settled.
    #[arg(long, value_parser = duration_arg, default_value = "10s", requires = "once", value_name = "DURATION")]
    settle: Duration,
    /// With --once: the longest the run may take.
    #[arg(long, value_parser = duration_arg, default_value = "300s", requires = "once", value_name = "DURATION")]
    timeout: Duration,
    /// Serve /metrics, /healthz, /readyz and /debug/queue on this address (e.g. 127.0.0.1:9090).
    #[arg(long, value_name = "ADDRESS")]
    admin_address: Option<SocketAddr>,
    /// Reconcile only while holding the Lease `<managedBy>-controller` in $POD_NAMESPACE
    /// (else `default`) of the first layer's cluster.
    #[arg(long, conflicts_with = "sharded")]
    leader_elect: bool,
    /// Share the layers with the other replicas run so: each layer is stepped by the one
    /// replica holding its Lease `<managedBy>-shard-<layer>`, balanced over the live replicas
    /// (each renews `<managedBy>-member-<id>`), in $POD_NAMESPACE (else `default`) of the first
    /// layer's cluster. A replica that dies is taken over after the Lease duration.
    #[arg(long, conflicts_with = "once")]
    sharded: bool,
    /// With --leader-elect or --sharded: how long a Lease holds without renewal (whole
    /// seconds, at least 2).
    #[arg(long, value_parser = duration_arg, default_value = "15s", value_name = "DURATION")]
    lease_duration: Duration,
    /// This replica's identity in Leases and Events (default: $POD_NAME, else $HOSTNAME, else
    /// comb-<pid>).
    #[arg(long, value_name = "NAME")]
    replica_id: Option<String>,
    /// Combs stepped at once in each layer.
    #[arg(long, default_value_t = 8, value_name = "N")]
    workers: usize,
    /// Log lines as JSON objects instead of text.
    #[arg(long)]
    log_json: bool,
    #[command(flatten)]
    webhook: WebhookArgs,
}

/// The validating admission webhook.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Admission webhook")]
pub struct WebhookArgs {
    /// Serve the validating admission webhook (POST /validate, HTTPS) on this address
    /// (e.g. 0.0.0.0:8443).
    #[arg(long, value_name = "ADDRESS")]
    webhook_addr: Option<SocketAddr>,
    /// Serve the certificate of this directory (tls.crt, tls.key, as cert-manager writes them)
    /// instead of generating one.
    #[arg(long, value_name = "DIR", requires = "webhook_addr")]
    webhook_cert_dir: Option<PathBuf>,
    /// The Service in front of the webhook (NAME.NAMESPACE): the generated certificate is also
    /// for NAME.NAMESPACE.svc and NAME.NAMESPACE.svc.<clusterDomain>.
    #[arg(
        long,
        value_name = "NAME.NAMESPACE",
        requires = "webhook_addr",
        conflicts_with = "webhook_cert_dir"
    )]
    webhook_service: Option<ServiceName>,
    /// Write the generated CA (PEM) here, for the webhook configuration's caBundle.
    #[arg(
        long,
        value_name = "PATH",
        requires = "webhook_addr",
        conflicts_with = "webhook_cert_dir"
    )]
    webhook_ca_file: Option<PathBuf>,
}

impl WebhookArgs {
    fn options(&self) -> Option<WebhookOptions> {
        let address = self.webhook_addr?;
        let certificates = match &self.webhook_cert_dir {
            Some(dir) => Certificates::Directory(dir.clone()),
            None => Certificates::Generated {
                service: self.webhook_service.clone(),
                ca_file: self.webhook_ca_file.clone(),
            },
        };
        Some(WebhookOptions {
            address,
            certificates,
        })
    }
}

pub fn run(
    global: &GlobalArgs,
    registry: &ClassRegistry,
    args: RunArgs,
) -> anyhow::Result<ExitCode> {
    init_logging(args.log_json);
    let config = Config::load(&global.config)?;
    block_on(async move {
        let mut options = options(&args, &config);
        // Listening before the controller starts: a signal during its start is not lost.
        let stop_signals = StopSignals::listen()?;
        let pool = crate::config::client_pool(&config)?;
        // Layers on demand run beside the file's layers while they are reconciled (with
        // leader election, by the leader alone; sharded, each CombLayer by the replica that
        // holds its Lease, through the gate the coordinator shares with them).
        let on_demand = (!config.layer_templates.is_empty() && !args.once).then(|| {
            if options.sharding.is_some() {
                options.layer_gate = Some(LayerGate::default());
            }
            LayersOnDemand::new(
                config.clone(),
                pool.clone(),
                registry.clone(),
                options.clone(),
            )
        });
        let controller = Controller::with_pool(config, pool, registry.clone(), options).await?;
        let shutdown = CancellationToken::new();
        tokio::spawn(stop_on_signal(stop_signals, shutdown.clone()));
        let leader = controller.handle();
        let layers = on_demand.map(|on_demand| {
            let on_demand = on_demand.while_reconciling(leader);
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                if let Err(error) = on_demand.run(shutdown).await {
                    tracing::error!(%error, "layers on demand stopped");
                }
            })
        });
        let outcome = controller.run(shutdown.clone()).await?;
        shutdown.cancel();
        if let Some(layers) = layers {
            let _ = layers.await;
        }
        if args.once {
            print_outcome(&outcome);
        }
        Ok(ExitCode::from(if args.once {
            outcome.exit_code()
        } else {
            0
        }))
    })
}

fn options(args: &RunArgs, config: &Config) -> ControllerOptions {
    let identity = args.replica_id.clone().unwrap_or_else(default_identity);
    let namespace = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".to_string());
    ControllerOptions {
        workers_per_layer: args.workers,
        admin_address: args.admin_address,
        leader_election: args.leader_elect.then(|| LeaderElection {
            duration_seconds: args.lease_duration.as_secs(),
            ..LeaderElection::new(&namespace, &config.managed_by, &identity)
        }),
        sharding: args.sharded.then(|| Sharding {
            lease_duration: args.lease_duration,
            ..Sharding::new(
                &namespace,
                &config.managed_by,
                &config.label_prefix,
                &identity,
            )
        }),
        once: args.once.then_some(OnceOptions {
            settle: args.settle,
            timeout: args.timeout,
        }),
        identity,
        webhook: args.webhook.options(),
        ..ControllerOptions::default()
    }
}

/// Logs go to stderr (stdout carries `--once`'s summary), filtered by `RUST_LOG` (default
/// `info`) with the body-logging targets capped ([`crate::logging`]).
fn init_logging(json: bool) {
    let filter = crate::logging::default_filter();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    // A subscriber set before (a test, an embedding program) stays.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Cancels `shutdown` on SIGINT or SIGTERM; running steps finish, then `run` returns.
async fn stop_on_signal(mut stop_signals: StopSignals, shutdown: CancellationToken) {
    stop_signals.recv().await;
    tracing::info!("signal received: stopping");
    shutdown.cancel();
}

/// One line per Comb: `layer:namespace/name phase (reason): message`.
fn print_outcome(outcome: &RunOutcome) {
    for comb in &outcome.combs {
        let mut line = format!(
            "{}:{}/{} {}",
            comb.layer,
            comb.namespace,
            comb.name,
            comb.phase
                .as_ref()
                .map_or("(no status)", |phase| phase.as_str())
        );
        if let Some(reason) = &comb.reason {
            line.push_str(&format!(" ({reason})"));
        }
        if let Some(message) = comb.message.as_deref().filter(|m| !m.is_empty()) {
            line.push_str(&format!(": {message}"));
        }
        println!("{line}");
    }
    if outcome.timed_out {
        println!("timed out before every Comb settled");
    }
}
