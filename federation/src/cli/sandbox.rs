//! `comb sandbox`: Kubernetes API emulator clusters on 127.0.0.1 for kubectl, the demo and
//! tests (DESIGN.md §8). Writes a kubeconfig, prints `ready`, runs until SIGINT or SIGTERM.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use comb_sandbox::real::network::{NetworkOptions, ProxyMode};
use comb_sandbox::real::node::RealNodeOptions;
use comb_sandbox::{Backend, Clusters, ExtraContext, SandboxOptions};

use super::common::{StopSignals, block_on};
use crate::error::Error;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Each cluster is a separate API server with its own objects, simulated nodes and controllers,
and test controls under /_sandbox/ (request counts, fault injection, partitions).
The cluster URLs and the kubeconfig path are printed, then the line `ready` once the
kubeconfig is written; stop with Ctrl-C or SIGTERM.

Example:
  comb sandbox --clusters prod,dev --context staging=prod/staging --kubeconfig ./sandbox.kubeconfig
  KUBECONFIG=./sandbox.kubeconfig kubectl --context dev get pods -A")]
pub struct SandboxArgs {
    /// Cluster names, comma-separated; each gets an API server on its own port and a context
    /// of the same name (the first is the current context).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sandbox",
        value_name = "NAMES"
    )]
    clusters: Vec<String>,
    /// An extra context on a cluster, with a default namespace (created if missing); repeatable.
    #[arg(long = "context", value_name = "NAME=CLUSTER[/NAMESPACE]", value_parser = parse_context)]
    contexts: Vec<ExtraContext>,
    /// Serve HTTPS with a generated CA (the kubeconfig carries it) instead of plain HTTP.
    #[arg(long)]
    https: bool,
    /// Where the kubeconfig is written (atomically, before `ready` is printed).
    #[arg(long, default_value = "sandbox.kubeconfig", value_name = "PATH")]
    kubeconfig: PathBuf,
    /// How long a simulated Pod takes from being scheduled to Ready: `0`, `500ms`, `2s`, `1m30s`
    /// (emulator only; kwok makes Pods Ready at once).
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pod_ready_delay: Duration,
    #[command(flatten)]
    backend: BackendArgs,
}

/// Which API servers run the clusters.
#[derive(Debug, Clone, clap::Args)]
pub struct BackendArgs {
    /// `emulator` (in-process, starts in milliseconds) or `kube` (real etcd, kube-apiserver,
    /// kube-controller-manager, kube-scheduler and kwok per cluster, from tests/kube/build;
    /// always HTTPS).
    #[arg(long, value_enum, default_value = "emulator", value_name = "BACKEND")]
    pub backend: Backend,
    /// Where the real backend's binaries are (default: $COMB_KUBE_BIN, else
    /// ~/.cache/comb/kube/<versions>, where tests/kube/build puts them).
    #[arg(long, value_name = "DIR")]
    pub kube_bin: Option<PathBuf>,
    /// With `--backend kube`: a network too, in network namespaces of the sandbox (kube-proxy,
    /// CoreDNS, a namespace per Pod answering on its ports with its identity, LoadBalancer
    /// addresses), so that calls cross the bridges as packets. Needs root, nft and comb-identity
    /// (`cargo build -p comb-identity`).
    #[arg(long)]
    pub network: bool,
    /// kube-proxy's mode with `--network`.
    #[arg(
        long,
        value_enum,
        default_value = "nftables",
        requires = "network",
        value_name = "MODE"
    )]
    pub proxy_mode: ProxyMode,
    /// With `--network`: a real node in this cluster beside kwok's (repeatable): a kubelet from
    /// tests/kube/build, Debian's containerd, runc and CNI plugins, registered as Node
    /// `real-node` with the taint `sandbox.comb.internal/real-node` (only Pods that tolerate it
    /// and select it run there). Needs root and cgroups v1.
    #[arg(long = "real-node", requires = "network", value_name = "CLUSTER")]
    pub real_node: Vec<String>,
    /// An OCI image archive the real nodes load (repeatable; `tests/image/build` writes
    /// comb's); nothing is pulled from a registry.
    #[arg(long = "image", requires = "real_node", value_name = "ARCHIVE")]
    pub images: Vec<PathBuf>,
}

impl BackendArgs {
    /// The network asked for, if any.
    pub fn network(&self) -> Option<NetworkOptions> {
        self.network.then(|| NetworkOptions {
            identity_bin: None,
            proxy_mode: self.proxy_mode,
            real_node: (!self.real_node.is_empty()).then(|| RealNodeOptions {
                clusters: self.real_node.clone(),
                images: self.images.clone(),
            }),
        })
    }
}

/// `staging=prod/staging` or `admin=prod`.
fn parse_context(text: &str) -> Result<ExtraContext, Error> {
    let (name, target) = text.split_once('=').ok_or_else(|| {
        Error::Value(format!(
            "{text:?} is not NAME=CLUSTER[/NAMESPACE], e.g. staging=prod/staging"
        ))
    })?;
    let (cluster, namespace) = match target.split_once('/') {
        Some((cluster, namespace)) => (cluster, Some(namespace)),
        None => (target, None),
    };
    if name.is_empty() || cluster.is_empty() || namespace.is_some_and(str::is_empty) {
        return Err(Error::Value(format!(
            "{text:?} is not NAME=CLUSTER[/NAMESPACE]: name, cluster and a given namespace must not be empty"
        )));
    }
    Ok(ExtraContext {
        name: name.to_string(),
        cluster: cluster.to_string(),
        namespace: namespace.map(str::to_string),
    })
}

/// Durations as Go writes them (`500ms`, `1.5s`, `1m30s`, a bare `0`), read by kube's
/// [`kube::core::Duration`]. It multiplies in floating point, which panics on a number too large
/// for a duration or a sign inside a sum (`1s-1s`), and it reads an empty text as zero: such
/// texts are refused before it sees them (no delay needs more than nine digits).
fn parse_duration(text: &str) -> Result<Duration, Error> {
    let text = text.trim();
    let invalid = || {
        Error::Value(format!(
            "{text:?} is not a duration like 500ms, 2s, 1m30s or 0"
        ))
    };
    let longest_number = text
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(str::len)
        .max()
        .unwrap_or(0);
    if text.is_empty() || text.contains(['-', '+']) || longest_number > 9 {
        return Err(invalid());
    }
    let duration: kube::core::Duration = text.parse().map_err(|_| invalid())?;
    Ok(duration.into())
}

pub fn run(args: SandboxArgs) -> anyhow::Result<ExitCode> {
    block_on(serve(args))
}

async fn serve(args: SandboxArgs) -> anyhow::Result<ExitCode> {
    // Before anything starts: a signal while the clusters come up still shuts them down.
    let mut stop_signals = StopSignals::listen()?;
    let options = SandboxOptions {
        https: args.https,
        pod_ready_delay: args.pod_ready_delay,
        contexts: args.contexts.clone(),
        network: args.backend.network(),
        ..SandboxOptions::clusters(args.clusters.iter().cloned())
    };
    let sandbox = Clusters::start(args.backend.backend, options, args.backend.kube_bin.clone())
        .await
        .context("starting the sandbox clusters failed")?;
    create_context_namespaces(&sandbox, &args.contexts).await?;
    sandbox
        .write_kubeconfig(&args.kubeconfig)
        .with_context(|| {
            format!(
                "writing the kubeconfig to {} failed",
                args.kubeconfig.display()
            )
        })?;

    let mut out = std::io::stdout().lock();
    for (name, url) in sandbox.urls() {
        writeln!(out, "cluster {name} {url}")?;
    }
    let path = std::path::absolute(&args.kubeconfig).unwrap_or_else(|_| args.kubeconfig.clone());
    writeln!(out, "kubeconfig {}", path.display())?;
    writeln!(out, "ready")?;
    out.flush()?;
    drop(out);

    stop_signals.recv().await;
    eprintln!("comb sandbox: stopping");
    sandbox.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// The namespaces extra contexts default to exist, so the contexts are usable at once.
pub async fn create_context_namespaces(
    sandbox: &Clusters,
    contexts: &[ExtraContext],
) -> anyhow::Result<()> {
    for context in contexts {
        if let Some(namespace) = &context.namespace {
            sandbox
                .create_namespace(&context.cluster, namespace)
                .await
                .with_context(|| format!("creating the namespace of context {}", context.name))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let cases = [
            ("0", Some(Duration::ZERO)),
            ("500ms", Some(Duration::from_millis(500))),
            ("2s", Some(Duration::from_secs(2))),
            ("1.5s", Some(Duration::from_millis(1500))),
            ("1m30s", Some(Duration::from_secs(90))),
            ("1h", Some(Duration::from_secs(3600))),
            ("0s", Some(Duration::ZERO)),
            ("", None),
            ("2", None),
            ("s", None),
            ("2 s", None),
            ("-1s", None),
            ("3d", None),
            ("1s-1s", None),
            ("99999999999999999999h", None),
            ("250us", Some(Duration::from_micros(250))),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text).ok(), expected, "{text:?}");
        }
    }

    #[test]
    fn contexts() {
        let context = |name: &str, cluster: &str, namespace: Option<&str>| ExtraContext {
            name: name.into(),
            cluster: cluster.into(),
            namespace: namespace.map(Into::into),
        };
        let cases = [
            (
                "staging=prod/staging",
                Some(context("staging", "prod", Some("staging"))),
            ),
            ("admin=prod", Some(context("admin", "prod", None))),
            ("staging", None),
            ("=prod", None),
            ("x=", None),
            ("x=prod/", None),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_context(text).ok(), expected, "{text:?}");
        }
    }
}
