//! One face for both backends: the emulator ([`Sandbox`]) and real control planes
//! ([`RealSandbox`]), so `comb sandbox`, `comb demo` and the tests start either with the same
//! options and get the same kubeconfig, contexts and test controls.

use std::path::{Path, PathBuf};

use comb_kubeconfigs::write::KubeconfigBuilder;

use crate::controls::Controls;
use crate::error::Result;
use crate::real::{RealOptions, RealSandbox, default_bin_dir};
use crate::sandbox::{Sandbox, SandboxOptions};

/// Which API servers to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Backend {
    /// The in-process emulator: starts in milliseconds.
    #[default]
    Emulator,
    /// Real etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok per
    /// cluster, built by tests/kube/build.
    Kube,
}

impl Backend {
    /// `COMB_TEST_BACKEND` (`emulator` or `kube`), default the emulator.
    pub fn from_env() -> Backend {
        match std::env::var("COMB_TEST_BACKEND").as_deref() {
            Ok("kube") => Backend::Kube,
            _ => Backend::Emulator,
        }
    }
}

/// For a test that needs what only the emulator has (its store, its container logs, its Pod
/// delay): whether it may run on the backend `COMB_TEST_BACKEND` names. When not, it says why
/// on stderr and in `$COMB_SKIP_LOG` (which `.ci/run` prints in its summary).
pub fn emulator_only(test: &str, why: &str) -> bool {
    if Backend::from_env() == Backend::Emulator {
        return true;
    }
    crate::real::record_skip(&format!("{test}: skipped on the real backend: {why}"));
    false
}

/// For a test that drives the real, installed `kubectl`: its path on `PATH`. Where it is not
/// installed the test skips and says why (on stderr and in `$COMB_SKIP_LOG`), except in CI
/// (`CI=true`), which installs kubectl: there a missing one fails the test instead of hiding it.
pub fn kubectl_or_skip(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("kubectl"))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: kubectl is not on PATH, and CI (CI=true) installs it: a missing one fails"
        );
        crate::real::record_skip(&format!(
            "{test}: skipped: kubectl is not on PATH (install kubernetes-client)"
        ));
    }
    found
}

/// Running clusters of either backend.
#[derive(Debug)]
pub enum Clusters {
    Emulator(Sandbox),
    Kube(Box<RealSandbox>),
}

impl Clusters {
    /// Starts `options.clusters` on `backend`. The real backend takes the binaries from
    /// `bin_dir` (default [`default_bin_dir`]) and ignores the emulator's knobs (Pod delay,
    /// HTTPS: it always serves HTTPS).
    pub async fn start(
        backend: Backend,
        options: SandboxOptions,
        bin_dir: Option<PathBuf>,
    ) -> Result<Clusters> {
        match backend {
            Backend::Emulator if options.network.is_some() => {
                Err(crate::Error::NetworkUnavailable {
                    reason: "the emulator has no data path; the network runs with the real backend (--backend kube)".into(),
                })
            }
            Backend::Emulator => Ok(Clusters::Emulator(Sandbox::start(options).await?)),
            Backend::Kube => Ok(Clusters::Kube(Box::new(
                RealSandbox::start(RealOptions {
                    clusters: options.clusters,
                    contexts: options.contexts,
                    bin_dir: bin_dir.unwrap_or_else(default_bin_dir),
                    network: options.network,
                })
                .await?,
            ))),
        }
    }

    pub fn backend(&self) -> Backend {
        match self {
            Clusters::Emulator(_) => Backend::Emulator,
            Clusters::Kube(_) => Backend::Kube,
        }
    }

    /// `(name, url)` of every cluster, in order.
    pub fn urls(&self) -> Vec<(String, String)> {
        match self {
            Clusters::Emulator(sandbox) => sandbox
                .clusters()
                .iter()
                .map(|c| (c.name().to_string(), c.url()))
                .collect(),
            Clusters::Kube(real) => real
                .clusters()
                .iter()
                .map(|c| (c.name().to_string(), c.url()))
                .collect(),
        }
    }

    /// The URL clients use for cluster `name`.
    pub fn url(&self, name: &str) -> Result<String> {
        match self {
            Clusters::Emulator(sandbox) => Ok(sandbox.cluster(name)?.url()),
            Clusters::Kube(real) => Ok(real.cluster(name)?.url()),
        }
    }

    /// The test controls of cluster `name` (request counts, faults, partitions).
    pub fn controls(&self, name: &str) -> Option<Controls> {
        match self {
            Clusters::Emulator(sandbox) => sandbox.controls(name),
            Clusters::Kube(real) => real.cluster(name).ok().map(|c| c.controls().clone()),
        }
    }

    pub fn kubeconfig(&self) -> KubeconfigBuilder {
        match self {
            Clusters::Emulator(sandbox) => sandbox.kubeconfig(),
            Clusters::Kube(real) => real.kubeconfig(),
        }
    }

    pub fn write_kubeconfig(&self, path: &Path) -> Result<()> {
        match self {
            Clusters::Emulator(sandbox) => sandbox.write_kubeconfig(path),
            Clusters::Kube(real) => real.write_kubeconfig(path),
        }
    }

    /// The certificate authority clients trust (the emulator's only when it serves HTTPS).
    pub fn ca_pem(&self) -> Option<&str> {
        match self {
            Clusters::Emulator(sandbox) => sandbox.ca_pem(),
            Clusters::Kube(real) => Some(real.ca_pem()),
        }
    }

    /// The emulator itself, for what only it offers (its store, in-process).
    pub fn emulator(&self) -> Option<&Sandbox> {
        match self {
            Clusters::Emulator(sandbox) => Some(sandbox),
            Clusters::Kube(_) => None,
        }
    }

    /// Creates `namespace` in `cluster`; an existing one is fine.
    pub async fn create_namespace(&self, cluster: &str, namespace: &str) -> Result<()> {
        match self {
            Clusters::Emulator(sandbox) => sandbox.create_namespace(cluster, namespace),
            Clusters::Kube(real) => real.create_namespace(cluster, namespace).await,
        }
    }

    /// Cluster `name`'s part of the sandbox network, when it has one (the real backend with
    /// `--network`): calls from inside its Pods.
    pub fn network(
        &self,
        name: &str,
    ) -> Option<std::sync::Arc<crate::real::network::ClusterNetwork>> {
        match self {
            Clusters::Emulator(_) => None,
            Clusters::Kube(real) => real.cluster(name).ok()?.network().cloned(),
        }
    }

    pub async fn shutdown(self) {
        match self {
            Clusters::Emulator(sandbox) => sandbox.shutdown().await,
            Clusters::Kube(real) => real.shutdown().await,
        }
    }
}

/// Clusters shared by every test of one test binary, so that a suite on the real backend
/// starts its control planes once (seconds each) and gives each test its own namespace.
/// They run on a runtime of their own: each `#[tokio::test]` has one that ends with the
/// test, and would take the proxies with it. Never stopped: the processes' watchdog ends
/// them when the test binary exits.
pub struct SharedClusters {
    clusters: Clusters,
    _runtime: tokio::runtime::Runtime,
}

impl SharedClusters {
    /// Starts `options.clusters` on `backend`, from a thread of its own (it may be called
    /// from inside a test's runtime, which cannot block on another).
    pub fn start(backend: Backend, options: SandboxOptions) -> Result<SharedClusters> {
        let started = std::thread::spawn(move || -> Result<SharedClusters> {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .map_err(|source| crate::Error::Io {
                    what: "starting the shared clusters' runtime".into(),
                    source,
                })?;
            let clusters = runtime.block_on(Clusters::start(backend, options, None))?;
            Ok(SharedClusters {
                clusters,
                _runtime: runtime,
            })
        })
        .join();
        started.unwrap_or_else(|_| {
            Err(crate::Error::Io {
                what: "starting the shared clusters".into(),
                source: std::io::Error::other("the starting thread panicked"),
            })
        })
    }

    pub fn clusters(&self) -> &Clusters {
        &self.clusters
    }
}

impl std::fmt::Debug for SharedClusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedClusters")
            .field("clusters", &self.clusters)
            .finish_non_exhaustive()
    }
}
