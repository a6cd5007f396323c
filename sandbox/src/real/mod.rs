//! Real control planes, the oracle the emulator answers to (`comb sandbox --backend kube`).
//!
//! Per cluster: etcd, kube-apiserver (RBAC, TLS with the sandbox CA, a token user in
//! `system:masters`), kube-controller-manager, kube-scheduler and kwok with one fake node whose
//! Pods follow the sandbox's image conventions (`kwok-stages.yaml`), all on 127.0.0.1, all built
//! by `tests/kube/build` into [`default_bin_dir`]. Clients reach each cluster through a proxy
//! that serves the sandbox's `/_sandbox/` test controls and forwards everything else, so the
//! kubeconfig, the contexts and the controls are the emulator's.
//!
//! LoadBalancer Services get ingress IPs from their cluster's pool ([`load_balancer`]), and each
//! cluster has addresses of its own ([`addresses`]). With `--network` ([`network`]), packets
//! flow too: kube-proxy, CoreDNS and a namespace per Pod, all in network namespaces of the
//! sandbox.
//!
//! Every process stops when the sandbox is dropped or shut down, and when comb dies
//! ([`process`]); the data directories are temporary.

pub mod addresses;
pub mod load_balancer;
pub mod network;
pub mod node;
pub mod process;
pub mod provisioner;
pub mod proxy;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use comb_kubeconfigs::write::KubeconfigBuilder;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::controls::Controls;
use crate::error::{Error, Result};
use crate::load_balancer::LoadBalancerPool;
use crate::sandbox::{ExtraContext, sandbox_kubeconfig, serve};
use crate::tls::Authority;
use addresses::{ClusterAddresses, SERVICE_CIDR};
use network::dns::ExternalNames;
use network::{Attach, ClusterNetwork, NetworkOptions, Router};
use process::Component;
use proxy::{ApiClient, api_client, forwarding_router};

/// The versions `tests/kube/build` builds by default; the cache directory is keyed by them.
pub const KUBE_VERSION: &str = "1.37.2";
pub const ETCD_VERSION: &str = "3.6.16";
pub const KWOK_VERSION: &str = "0.8.0";
pub const HELM_VERSION: &str = "3.22.0";
/// CoreDNS, the cluster DNS of the sandbox network.
pub const COREDNS_VERSION: &str = "1.15.0";

/// The binaries a cluster needs.
pub const BINARIES: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
];

/// The stages that give kwok's Pods the sandbox's behaviour.
const KWOK_STAGES: &str = include_str!("kwok-stages.yaml");

/// The fake node every Pod is scheduled to, named like the emulator's.
pub const NODE_NAME: &str = "sandbox-node";

/// How long one cluster may take to come up (kube-apiserver's first start migrates storage).
pub(crate) const START_LIMIT: Duration = Duration::from_secs(120);

/// `$XDG_CACHE_HOME/comb`, else `~/.cache/comb`: where the project's scripts cache what they
/// build (`tests/kube/build` under `kube/`, `tests/image/build` under `image/`).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("comb")
}

/// `$COMB_KUBE_BIN`, else `~/.cache/comb/kube/<versions>` (where `tests/kube/build` puts them).
pub fn default_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("COMB_KUBE_BIN").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    cache_dir().join("kube").join(format!(
        "k8s-v{KUBE_VERSION}_etcd-v{ETCD_VERSION}_kwok-v{KWOK_VERSION}_helm-v{HELM_VERSION}_coredns-v{COREDNS_VERSION}"
    ))
}

/// Why the real backend cannot start here, if it cannot: a binary missing from `dir`.
pub fn missing_binary(dir: &Path) -> Option<Error> {
    BINARIES
        .iter()
        .find(|binary| !dir.join(binary).is_file())
        .map(|binary| Error::MissingBinary {
            binary: binary.to_string(),
            dir: dir.to_path_buf(),
        })
}

/// For tests of the real backend: whether its binaries are here. When they are not, the test
/// should return at once; this says why on stderr and, when `$COMB_SKIP_LOG` names a file,
/// appends `<test>: <reason>` to it, which `.ci/run` prints in its summary.
pub fn available_or_skip(test: &str) -> bool {
    let Some(missing) = missing_binary(&default_bin_dir()) else {
        return true;
    };
    record_skip(&format!("{test}: skipped on the real backend: {missing}"));
    false
}

/// For tests of the sandbox network: whether it can run here (the real backend's binaries,
/// kube-proxy and CoreDNS, root, the proxy mode's tool, the identity server), saying why not as
/// [`available_or_skip`] does.
pub fn network_available_or_skip(test: &str, options: &NetworkOptions, clusters: usize) -> bool {
    let bin_dir = default_bin_dir();
    let missing =
        missing_binary(&bin_dir).or_else(|| network::unavailable(&bin_dir, options, clusters));
    let Some(missing) = missing else {
        return true;
    };
    record_skip(&format!("{test}: skipped, no sandbox network: {missing}"));
    false
}

/// Says why a test is skipped: on stderr, and in `$COMB_SKIP_LOG` when set.
pub fn record_skip(line: &str) {
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("COMB_SKIP_LOG") {
        use std::io::Write as _;
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            // One write per line: tests skip from several threads at once, and a line written
            // in pieces would interleave with another's.
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct RealOptions {
    pub clusters: Vec<String>,
    pub contexts: Vec<ExtraContext>,
    pub bin_dir: PathBuf,
    /// Packets too: kube-proxy, CoreDNS and a network namespace per Pod ([`network`]).
    pub network: Option<NetworkOptions>,
}

/// One running real cluster.
#[derive(Clone)]
pub struct RealCluster {
    name: String,
    /// The proxy clients use.
    url: String,
    /// kube-apiserver itself, behind the proxy.
    api_url: String,
    controls: Controls,
    network: Option<Arc<ClusterNetwork>>,
    /// Its real node (`--real-node`), when it has one.
    real_node: Option<Arc<node::RealNode>>,
    api_server: Arc<tokio::sync::Mutex<ApiServer>>,
}

/// A cluster's kube-apiserver, which a test may stop and start again: its process while it
/// runs, and what starts it on the same port and storage.
struct ApiServer {
    process: Option<Component>,
    binary: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    /// The token only this kube-apiserver knows ([`ClusterSetup::start_components`]): its
    /// readiness is asked with it, so that no other server on the port can answer for it.
    probe_token: String,
}

impl std::fmt::Debug for RealCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealCluster")
            .field("name", &self.name)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl RealCluster {
    pub fn name(&self) -> &str {
        &self.name
    }
    /// `https://127.0.0.1:PORT` of the proxy: what kubeconfigs name.
    pub fn url(&self) -> String {
        self.url.clone()
    }
    /// The kube-apiserver behind the proxy (no test controls on this one).
    pub fn api_url(&self) -> &str {
        &self.api_url
    }
    /// The test controls of the proxy (request counts, faults, partitions).
    pub fn controls(&self) -> &Controls {
        &self.controls
    }
    /// The cluster's part of the sandbox network, when it has one.
    pub fn network(&self) -> Option<&Arc<ClusterNetwork>> {
        self.network.as_ref()
    }
    /// Its real node, when it has one (`--real-node`).
    pub fn real_node(&self) -> Option<&Arc<node::RealNode>> {
        self.real_node.as_ref()
    }
}

/// Running real clusters; everything stops on [`RealSandbox::shutdown`] or drop.
pub struct RealSandbox {
    clusters: Vec<RealCluster>,
    contexts: Vec<ExtraContext>,
    ca_pem: String,
    token: String,
    client: ApiClient,
    components: Vec<Component>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    /// Held so that the router's namespace lives as long as the clusters'.
    _router: Option<Arc<Router>>,
    _dir: tempfile::TempDir,
    /// Removes `_dir` when the sandbox is never dropped: held in a static (a test binary's
    /// shared control planes) or its process killed. Each cluster's etcd removes its own
    /// directory so; this takes the directory above them too.
    _janitor: Component,
}

impl std::fmt::Debug for RealSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealSandbox")
            .field("clusters", &self.clusters)
            .finish_non_exhaustive()
    }
}

impl RealSandbox {
    /// Starts every cluster (in parallel) and waits until each serves, has its controllers
    /// running and its node Ready.
    pub async fn start(options: RealOptions) -> Result<RealSandbox> {
        crate::SandboxOptions {
            clusters: options.clusters.clone(),
            contexts: options.contexts.clone(),
            ..crate::SandboxOptions::default()
        }
        .check()?;
        if let Some(missing) = missing_binary(&options.bin_dir) {
            return Err(missing);
        }
        if let Some(real_node) = options.network.as_ref().and_then(|n| n.real_node.as_ref())
            && let Some(unknown) = real_node
                .clusters
                .iter()
                .find(|name| !options.clusters.contains(name))
        {
            return Err(Error::UnknownCluster {
                name: unknown.clone(),
                known: options.clusters.join(", "),
            });
        }
        if options.clusters.len() > addresses::MAX_CLUSTERS {
            return Err(Error::TooManyClusters {
                count: options.clusters.len(),
                max: addresses::MAX_CLUSTERS,
            });
        }
        if let Some(network) = &options.network
            && let Some(unavailable) =
                network::unavailable(&options.bin_dir, network, options.clusters.len())
        {
            return Err(unavailable);
        }
        let dir = tempfile::Builder::new()
            .prefix("comb-kube-")
            .tempdir()
            .map_err(|source| Error::Io {
                what: "creating the clusters' data directory".into(),
                source,
            })?;
        let janitor = Component::spawn(
            "janitor",
            Path::new("sleep"),
            &["infinity".to_string()],
            &dir.path().join("janitor.log"),
            Some(dir.path()),
        )?;
        let authority = Arc::new(Authority::generate()?);
        let token = uuid::Uuid::new_v4().simple().to_string();
        let client = api_client(authority.der())?;
        let shutdown = CancellationToken::new();
        let router = match &options.network {
            Some(network) => Some(Router::start(dir.path(), network).await?),
            None => None,
        };
        let names = match &router {
            Some(router) => router.names(),
            None => {
                let path = dir.path().join("external.hosts");
                Arc::new(
                    ExternalNames::new(path.clone()).map_err(|source| Error::Io {
                        what: format!("writing {}", path.display()),
                        source,
                    })?,
                )
            }
        };
        let starts = options.clusters.iter().enumerate().map(|(index, name)| {
            let setup = ClusterSetup {
                name: name.clone(),
                index,
                dir: dir.path().join(name),
                bin_dir: options.bin_dir.clone(),
                authority: authority.clone(),
                token: token.clone(),
                client: client.clone(),
                router: router.clone(),
                names: names.clone(),
                real_node: options
                    .network
                    .as_ref()
                    .and_then(|network| network.real_node.as_ref())
                    .filter(|real_node| real_node.clusters.contains(name))
                    .map(|real_node| real_node.images.clone()),
            };
            let shutdown = shutdown.clone();
            async move { setup.start(shutdown).await }
        });
        let mut clusters = Vec::new();
        let mut components = Vec::new();
        let mut tasks = Vec::new();
        let mut first_error = None;
        for started in futures::future::join_all(starts).await {
            match started {
                Ok(started) => {
                    clusters.push(started.cluster);
                    components.extend(started.components);
                    tasks.push(started.proxy);
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        let sandbox = RealSandbox {
            clusters,
            contexts: options.contexts,
            ca_pem: authority.pem(),
            token,
            client,
            components,
            shutdown,
            tasks,
            _router: router,
            _dir: dir,
            _janitor: janitor,
        };
        match first_error {
            Some(error) => {
                sandbox.shutdown().await;
                Err(error)
            }
            None => Ok(sandbox),
        }
    }

    pub fn clusters(&self) -> &[RealCluster] {
        &self.clusters
    }

    pub fn cluster(&self, name: &str) -> Result<&RealCluster> {
        self.clusters
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| Error::UnknownCluster {
                name: name.to_string(),
                known: self
                    .clusters
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The CA that signs the proxies' and the kube-apiservers' certificates.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The bearer token of the `system:masters` user every context uses.
    pub fn admin_token(&self) -> &str {
        &self.token
    }

    /// The kubeconfig: a context per cluster (the first is current), then the extra contexts;
    /// servers are the proxies.
    pub fn kubeconfig(&self) -> KubeconfigBuilder {
        let clusters: Vec<(&str, String)> = self
            .clusters
            .iter()
            .map(|cluster| (cluster.name.as_str(), cluster.url.clone()))
            .collect();
        sandbox_kubeconfig(&clusters, &self.contexts, Some(&self.ca_pem), &self.token)
    }

    /// Writes the kubeconfig atomically.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<()> {
        self.kubeconfig()
            .write_atomic(path)
            .map_err(|source| Error::WriteKubeconfig {
                path: path.to_path_buf(),
                source,
            })
    }

    /// Creates namespace `namespace` in `cluster` (an existing one is fine).
    pub async fn create_namespace(&self, cluster: &str, namespace: &str) -> Result<()> {
        let cluster = self.cluster(cluster)?;
        let body =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
        let (status, answer) = api_request(
            &self.client,
            &self.token,
            Method::POST,
            &format!("{}/api/v1/namespaces", cluster.api_url),
            Some(&body),
        )
        .await
        .map_err(|message| Error::Io {
            what: format!("creating namespace {namespace} in cluster {}", cluster.name),
            source: std::io::Error::other(message),
        })?;
        if status.is_success() || status == StatusCode::CONFLICT {
            return Ok(());
        }
        Err(Error::Io {
            what: format!("creating namespace {namespace} in cluster {}", cluster.name),
            source: std::io::Error::other(format!(
                "{status}: {}",
                answer["message"].as_str().unwrap_or_default()
            )),
        })
    }

    /// Stops cluster `name`'s kube-apiserver and waits until it is gone: the control plane is
    /// down (its proxy answers 502, watches end) while everything it set up goes on: the Pods,
    /// their network, kube-proxy's rules. [`RealSandbox::start_api_server`] brings it back.
    pub async fn stop_api_server(&self, name: &str) -> Result<()> {
        let cluster = self.cluster(name)?;
        let mut api_server = cluster.api_server.lock().await;
        if let Some(mut process) = api_server.process.take() {
            process.stop_and_wait(Duration::from_secs(10)).await;
        }
        Ok(())
    }

    /// Starts cluster `name`'s kube-apiserver again (when stopped) on its port and storage, and
    /// waits until it is ready.
    pub async fn start_api_server(&self, name: &str) -> Result<()> {
        let cluster = self.cluster(name)?;
        let mut api_server = cluster.api_server.lock().await;
        if api_server.process.is_none() {
            let process = Component::spawn(
                "kube-apiserver",
                &api_server.binary,
                &api_server.args,
                &api_server.log,
                None,
            )?;
            api_server.process = Some(process);
        }
        let failed = |process: &Component, message: String| Error::ComponentFailed {
            cluster: name.to_string(),
            component: process.name.clone(),
            message: format!("{message}; its log ends: {}", process.log_tail(12)),
            log: process.log.clone(),
        };
        let readyz = format!("{}/readyz", cluster.api_url);
        let deadline = tokio::time::Instant::now() + START_LIMIT;
        loop {
            if answers_ready(&self.client, &api_server.probe_token, &readyz).await {
                return Ok(());
            }
            let Some(process) = api_server.process.as_mut() else {
                return Ok(());
            };
            if let Some(status) = process.exited() {
                return Err(failed(process, format!("it exited ({status})")));
            }
            if tokio::time::Instant::now() > deadline {
                let waited = START_LIMIT.as_secs();
                return Err(failed(
                    process,
                    format!("waited {waited}s for it to be ready"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the proxies and every process, and waits for them.
    pub async fn shutdown(mut self) {
        // The real nodes first: their Pods' networks hang off the node namespaces.
        for node in self.clusters.iter().filter_map(|c| c.real_node.as_ref()) {
            node.shutdown().await;
        }
        for network in self.clusters.iter().filter_map(|c| c.network.as_ref()) {
            network.shutdown().await;
        }
        self.shutdown.cancel();
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
        // Everything but etcd first, so that kube-apiserver shuts down with its storage there.
        let (mut etcds, mut others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.components)
            .into_iter()
            .partition(|component| component.name == "etcd");
        for cluster in &self.clusters {
            others.extend(cluster.api_server.lock().await.process.take());
        }
        for group in [&mut others, &mut etcds] {
            for component in group.iter_mut() {
                component.stop();
            }
            for component in group.iter_mut() {
                component.stop_and_wait(Duration::from_secs(10)).await;
            }
        }
    }
}

impl Drop for RealSandbox {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// What starting one cluster needs.
struct ClusterSetup {
    name: String,
    /// Its place in `--clusters`, which decides its addresses.
    index: usize,
    dir: PathBuf,
    bin_dir: PathBuf,
    authority: Arc<Authority>,
    token: String,
    client: ApiClient,
    router: Option<Arc<Router>>,
    names: Arc<ExternalNames>,
    /// The images a real node of this cluster loads, when it has one.
    real_node: Option<Vec<PathBuf>>,
}

struct Started {
    cluster: RealCluster,
    components: Vec<Component>,
    proxy: JoinHandle<()>,
}

impl ClusterSetup {
    fn io(&self, what: &str) -> impl FnOnce(std::io::Error) -> Error + use<> {
        let what = format!("{what} for cluster {}", self.name);
        move |source| Error::Io { what, source }
    }

    fn failed(&self, component: &Component, message: String) -> Error {
        Error::ComponentFailed {
            cluster: self.name.clone(),
            component: component.name.clone(),
            message: format!("{message}; its log ends: {}", component.log_tail(12)),
            log: component.log.clone(),
        }
    }

    fn write(&self, file: &str, contents: &str) -> Result<PathBuf> {
        let path = self.dir.join(file);
        std::fs::write(&path, contents).map_err(self.io(&format!("writing {file}")))?;
        Ok(path)
    }

    fn spawn(&self, name: &str, args: Vec<String>, cleanup: Option<&Path>) -> Result<Component> {
        Component::spawn(
            name,
            &self.bin_dir.join(name),
            &args,
            &self.dir.join(format!("{name}.log")),
            cleanup,
        )
    }

    async fn start(self, shutdown: CancellationToken) -> Result<Started> {
        let mut attempt = 1;
        loop {
            std::fs::create_dir_all(&self.dir).map_err(self.io("creating the data directory"))?;
            let mut components = Vec::new();
            let outcome = self
                .start_components(&mut components, shutdown.clone())
                .await;
            match outcome {
                Ok((cluster, proxy)) => {
                    return Ok(Started {
                        cluster,
                        components,
                        proxy,
                    });
                }
                Err(error) => {
                    for component in &mut components {
                        component.stop_and_wait(Duration::from_secs(10)).await;
                    }
                    // The free ports are found by binding and releasing them, so another
                    // process may take one before the component binds it: start again on
                    // fresh ports, from an empty directory.
                    if attempt < START_ATTEMPTS && lost_a_port(&error) {
                        attempt += 1;
                        let _ = std::fs::remove_dir_all(&self.dir);
                        continue;
                    }
                    return Err(error);
                }
            }
        }
    }

    async fn start_components(
        &self,
        components: &mut Vec<Component>,
        shutdown: CancellationToken,
    ) -> Result<(RealCluster, JoinHandle<()>)> {
        let [etcd_port, peer_port, api_port] = free_ports()?;
        let ca = self.write("ca.crt", &self.authority.pem())?;
        // The node's address too: with the network, the node's relay serves the API there, to
        // Pods of this cluster (the `kubernetes` Service's endpoint) and of the others (a
        // kubeconfig of this cluster used from inside a Pod elsewhere).
        let node_ip = self.addresses()?.node_ip.to_string();
        let serving = self.authority.issue(
            &[
                "127.0.0.1",
                "localhost",
                "10.96.0.1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
                &node_ip,
            ],
            "kube-apiserver",
        )?;
        let cert = self.write("apiserver.crt", &serving.certificate)?;
        let key = self.write("apiserver.key", &serving.key)?;
        // kube-apiserver verifies tokens with the public half, signs them with the private one.
        let service_accounts = rcgen::KeyPair::generate()?;
        let sa_key = self.write("sa.key", &service_accounts.serialize_pem())?;
        let sa_pub = self.write("sa.pub", &service_accounts.public_key_pem())?;
        // The ports were free a moment ago, not now (free_ports): another cluster's etcd or
        // kube-apiserver may be serving on one of them by the time this one starts, and answer
        // its readiness while this one dies of "address already in use". A kube-apiserver that
        // answered for another made a test's shared cluster store into etcd of a cluster that a
        // test then stopped: every request of it timed out (504). So each readiness check asks
        // for what only this cluster's component knows: a token of its own for kube-apiserver,
        // a member name of its own for etcd.
        let probe_token = uuid::Uuid::new_v4().simple().to_string();
        let tokens = self.write(
            "tokens.csv",
            &format!(
                "{},admin,admin,\"system:masters\"\n{probe_token},{PROBE_USER},{PROBE_USER}\n",
                self.token
            ),
        )?;
        let api_url = format!("https://127.0.0.1:{api_port}");
        let kubeconfig = self.dir.join("kubeconfig");
        KubeconfigBuilder::new()
            .token_user("admin", &self.token)
            .cluster(&self.name, &api_url, Some(&self.authority.pem()))
            .context(&self.name, &self.name, "admin", None)
            .current_context(&self.name)
            .write_atomic(&kubeconfig)
            .map_err(self.io("writing the components' kubeconfig"))?;
        let stages = self.write("kwok-stages.yaml", KWOK_STAGES)?;
        let path = |p: &Path| p.display().to_string();

        let etcd_data = self.dir.join("etcd");
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd_member = format!("{}-{}", self.name, &probe_token[..12]);
        components.push(self.spawn(
            "etcd",
            vec![
                format!("--name={etcd_member}"),
                format!("--data-dir={}", path(&etcd_data)),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster={etcd_member}={peer_url}"),
                "--log-level=warn".into(),
                "--unsafe-no-fsync".into(),
            ],
            // etcd stops last: its watchdog removes the cluster's directory, also when comb was
            // killed and could not remove it itself.
            Some(&self.dir),
        )?);
        self.wait_until(components, 0, "etcd to be healthy", || async {
            etcd_serves_as(&etcd_url, &etcd_member).await
        })
        .await?;

        let mut api_server_args: Vec<String> = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={api_port}"),
            format!("--cert-dir={}", path(&self.dir)),
            format!("--tls-cert-file={}", path(&cert)),
            format!("--tls-private-key-file={}", path(&key)),
            format!("--client-ca-file={}", path(&ca)),
            format!("--token-auth-file={}", path(&tokens)),
            "--authorization-mode=RBAC".into(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", path(&sa_pub)),
            format!("--service-account-signing-key-file={}", path(&sa_key)),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--allow-privileged=true".into(),
            "--profiling=false".into(),
        ];
        if self.router.is_some() {
            // The `kubernetes` Service's endpoint: the node's address, where the node's relay
            // serves the API to Pods (the sandbox's namespaces have no route to the host's).
            api_server_args.push(format!("--advertise-address={}", self.addresses()?.node_ip));
        }
        if self.real_node.is_some() {
            api_server_args.extend(node::api_server_flags(&self.dir)?);
        }
        components.push(self.spawn("kube-apiserver", api_server_args.clone(), None)?);
        self.wait_until(components, 1, "kube-apiserver to be ready", || async {
            answers_ready(&self.client, &probe_token, &format!("{api_url}/readyz")).await
        })
        .await?;

        let kubeconfig_flag = format!("--kubeconfig={}", path(&kubeconfig));
        components.push(self.spawn(
            "kube-controller-manager",
            vec![
                kubeconfig_flag.clone(),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                format!("--service-account-private-key-file={}", path(&sa_key)),
                format!("--root-ca-file={}", path(&ca)),
                format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                "--use-service-account-credentials=false".into(),
            ],
            None,
        )?);
        components.push(self.spawn(
            "kube-scheduler",
            vec![
                kubeconfig_flag.clone(),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
            ],
            None,
        )?);
        components.push(self.spawn(
            "kwok",
            vec![
                kubeconfig_flag,
                format!("--config={}", path(&stages)),
                "--manage-all-nodes=false".into(),
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
                format!("--cidr={}", self.addresses()?.kwok_pod_cidr),
                format!("--node-ip={}", self.addresses()?.node_ip),
                // The node keeps Ready by renewing its Lease; without it, kube-controller-manager
                // marks the node NotReady after 40 s and its Pods unready.
                "--node-lease-duration-seconds=40".into(),
            ],
            None,
        )?);
        self.create_node(&api_url).await?;
        self.wait_until(components, 4, "the kwok node to be Ready", || async {
            self.get_json(&format!("{api_url}/api/v1/nodes/{NODE_NAME}"))
                .await
                .is_some_and(|(_, node)| {
                    node["status"]["conditions"]
                        .as_array()
                        .is_some_and(|conditions| {
                            conditions
                                .iter()
                                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                        })
                })
        })
        .await?;
        // The controller-manager is up once it made the default ServiceAccount.
        self.wait_until(
            components,
            2,
            "the default ServiceAccount (made by kube-controller-manager)",
            || async {
                self.get_json(&format!(
                    "{api_url}/api/v1/namespaces/default/serviceaccounts/default"
                ))
                .await
                .is_some_and(|(status, _)| status == StatusCode::OK)
            },
        )
        .await?;

        let kube_client = self.kube_client(&api_url)?;
        let (first, last) = self.addresses()?.load_balancer_pool;
        tokio::spawn(load_balancer::run(
            self.name.clone(),
            kube_client.clone(),
            LoadBalancerPool::new(first, last),
            self.names.clone(),
            shutdown.clone(),
        ));
        let network = match &self.router {
            Some(router) => Some(
                ClusterNetwork::start(
                    router.clone(),
                    Attach {
                        name: &self.name,
                        index: self.index,
                        dir: &self.dir,
                        bin_dir: &self.bin_dir,
                        kubeconfig: &kubeconfig,
                        api_port,
                        client: kube_client.clone(),
                    },
                )
                .await?,
            ),
            None => None,
        };
        let real_node = match (&network, &self.real_node) {
            (Some(network), Some(images)) => {
                let addresses = self.addresses()?;
                Some(Arc::new(
                    node::RealNode::start(node::NodeSetup {
                        cluster: &self.name,
                        dir: &node::node_dir(&self.dir),
                        bin_dir: &self.bin_dir,
                        kubeconfig: &kubeconfig,
                        netns: network.node_netns().clone(),
                        node_ip: addresses.node_ip,
                        pod_cidr: addresses.real_node_pod_cidr,
                        images,
                        client: kube_client,
                    })
                    .await?,
                ))
            }
            _ => None,
        };

        let controls = Controls::new();
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|source| Error::Bind {
                cluster: self.name.clone(),
                source,
            })?;
        let address = listener.local_addr().map_err(|source| Error::Bind {
            cluster: self.name.clone(),
            source,
        })?;
        let router = network::control(network.clone()).fallback_service(controls.wrap(
            forwarding_router(self.client.clone(), format!("127.0.0.1:{api_port}")),
        ));
        let acceptor = TlsAcceptor::from(self.authority.server_config()?);
        tokio::spawn(provisioner::run(
            self.client.clone(),
            self.token.clone(),
            api_url.clone(),
            shutdown.clone(),
        ));
        let proxy = tokio::spawn(serve(listener, router, Some(acceptor), shutdown));
        // The cluster holds its kube-apiserver apart from the other components, so that a test
        // can stop and start it ([`RealSandbox::stop_api_server`]).
        let process = components
            .iter()
            .position(|component| component.name == "kube-apiserver")
            .map(|index| components.remove(index));
        let api_server = ApiServer {
            process,
            binary: self.bin_dir.join("kube-apiserver"),
            args: api_server_args,
            log: self.dir.join("kube-apiserver.log"),
            probe_token,
        };
        Ok((
            RealCluster {
                name: self.name.clone(),
                url: format!("https://{address}"),
                api_url,
                controls,
                network,
                real_node,
                api_server: Arc::new(tokio::sync::Mutex::new(api_server)),
            },
            proxy,
        ))
    }

    fn addresses(&self) -> Result<ClusterAddresses> {
        ClusterAddresses::of(self.index).ok_or(Error::TooManyClusters {
            count: self.index + 1,
            max: addresses::MAX_CLUSTERS,
        })
    }

    /// A client of the kube-apiserver itself (not through the proxy, whose controls count and
    /// fault the requests of the code under test).
    fn kube_client(&self, api_url: &str) -> Result<kube::Client> {
        let url = api_url.parse().map_err(|error| Error::Io {
            what: format!("parsing the API URL {api_url}"),
            source: std::io::Error::other(error),
        })?;
        let mut config = kube::Config::new(url);
        config.root_cert = Some(vec![self.authority.der().to_vec()]);
        config.auth_info.token = Some(self.token.clone().into());
        kube::Client::try_from(config).map_err(|error| Error::Io {
            what: format!("building a client of cluster {}", self.name),
            source: std::io::Error::other(error),
        })
    }

    /// Polls `ready` until it holds; fails at once when the component `index` exited, and after
    /// [`START_LIMIT`].
    async fn wait_until<F, Fut>(
        &self,
        components: &mut [Component],
        index: usize,
        what: &str,
        ready: F,
    ) -> Result<()>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + START_LIMIT;
        let mut pause = Duration::from_millis(50);
        loop {
            if ready().await {
                return Ok(());
            }
            let component = &mut components[index];
            if let Some(status) = component.exited() {
                return Err(self.failed(component, format!("it exited ({status})")));
            }
            if tokio::time::Instant::now() > deadline {
                return Err(self.failed(
                    component,
                    format!("waited {}s for {what}", START_LIMIT.as_secs()),
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// The fake node kwok manages, with room for every Pod a test makes.
    async fn create_node(&self, api_url: &str) -> Result<()> {
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": NODE_NAME,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux",
                           "kubernetes.io/arch": "amd64", "type": "kwok"}
            },
            "status": {
                "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
                "capacity": {"cpu": "64", "memory": "256Gi", "pods": "1000"}
            }
        });
        let (status, answer) = self
            .request(
                Method::POST,
                &format!("{api_url}/api/v1/nodes"),
                Some(&node),
            )
            .await
            .map_err(|message| Error::ComponentFailed {
                cluster: self.name.clone(),
                component: "kube-apiserver".into(),
                message: format!("creating the node failed: {message}"),
                log: self.dir.join("kube-apiserver.log"),
            })?;
        if status.is_success() || status == StatusCode::CONFLICT {
            return Ok(());
        }
        Err(Error::ComponentFailed {
            cluster: self.name.clone(),
            component: "kube-apiserver".into(),
            message: format!(
                "creating the node answered {status}: {}",
                answer["message"].as_str().unwrap_or_default()
            ),
            log: self.dir.join("kube-apiserver.log"),
        })
    }

    /// `GET url` as JSON with the admin token; `None` when it does not answer.
    async fn get_json(&self, url: &str) -> Option<(StatusCode, Value)> {
        self.request(Method::GET, url, None).await.ok()
    }

    async fn request(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
    ) -> std::result::Result<(StatusCode, Value), String> {
        api_request(&self.client, &self.token, method, url, body).await
    }
}

/// One JSON request with the admin token, answered within 10 s.
async fn api_request(
    client: &ApiClient,
    token: &str,
    method: Method,
    url: &str,
    body: Option<&Value>,
) -> std::result::Result<(StatusCode, Value), String> {
    let request = Request::builder()
        .method(method)
        .uri(url)
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json")
        .body(Body::from(body.map(Value::to_string).unwrap_or_default()))
        .map_err(|error| error.to_string())?;
    let response = tokio::time::timeout(Duration::from_secs(10), client.request(request))
        .await
        .map_err(|_| "no answer in 10s".to_string())?
        .map_err(|error| error.to_string())?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|error| error.to_string())?
        .to_bytes();
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

/// The user of each kube-apiserver's own readiness token.
const PROBE_USER: &str = "comb-sandbox-probe";

/// Whether the kube-apiserver at `readyz` is ready and is the one that knows `probe_token`
/// (another one answers 401).
async fn answers_ready(client: &ApiClient, probe_token: &str, readyz: &str) -> bool {
    api_request(client, probe_token, Method::GET, readyz, None)
        .await
        .is_ok_and(|(status, _)| status == StatusCode::OK)
}

/// Whether the etcd at `url` is healthy and is the member named `member` (etcd's member list,
/// through its JSON gateway), not another cluster's etcd that took the port first.
async fn etcd_serves_as(url: &str, member: &str) -> bool {
    let healthy = plain_request(&format!("{url}/health"), None)
        .await
        .is_some_and(|(_, health)| health["health"] == "true");
    healthy
        && plain_request(&format!("{url}/v3/cluster/member/list"), Some("{}"))
            .await
            .is_some_and(|(_, list)| is_member_list_of(&list, member))
}

/// Whether etcd's member list `list` is that of the one-member cluster `member`.
fn is_member_list_of(list: &Value, member: &str) -> bool {
    list["members"]
        .as_array()
        .is_some_and(|members| members.len() == 1 && members[0]["name"] == member)
}

/// A `GET` (or, with a body, a `POST`) over plain HTTP to etcd, with a short deadline.
async fn plain_request(url: &str, body: Option<&str>) -> Option<(StatusCode, Value)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(authority).await.ok()?;
        let request = match body {
            None => {
                format!("GET /{path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n")
            }
            Some(body) => format!(
                "POST /{path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ),
        };
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let text = String::from_utf8_lossy(&response).into_owned();
        let code: u16 = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .unwrap_or_default();
        Some((
            StatusCode::from_u16(code).ok()?,
            serde_json::from_str(body.trim()).unwrap_or(Value::Null),
        ))
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .ok()
        .flatten()
}

/// How often a cluster starts before a port taken meanwhile fails it.
const START_ATTEMPTS: u32 = 3;

/// Whether a component failed because a port it was given was taken before it bound it.
fn lost_a_port(error: &Error) -> bool {
    matches!(error, Error::ComponentFailed { message, .. } if message.contains("address already in use"))
}

/// Three free ports on 127.0.0.1 (bound, then released, for the components to take).
fn free_ports() -> Result<[u16; 3]> {
    let bind = || {
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|source| Error::Io {
            what: "finding a free port".into(),
            source,
        })
    };
    let listeners = [bind()?, bind()?, bind()?];
    let port = |l: &std::net::TcpListener| {
        l.local_addr()
            .map(|a| a.port())
            .map_err(|source| Error::Io {
                what: "finding a free port".into(),
                source,
            })
    };
    Ok([
        port(&listeners[0])?,
        port(&listeners[1])?,
        port(&listeners[2])?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An HTTP server on a port of its own that answers every request with `body`, as an etcd
    /// of another cluster would on a port this one was given.
    async fn answering(body: &'static str) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = [0u8; 1024];
                let _ = stream.read(&mut request).await;
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        url
    }

    #[test]
    fn a_member_list_is_this_clusters_only_with_its_one_member() {
        let one = |name: &str| json!({"members": [{"name": name}]});
        for (list, member, ours) in [
            (one("test-0a1b"), "test-0a1b", true),
            (one("test-9f8e"), "test-0a1b", false),
            (
                json!({"members": [{"name": "test-0a1b"}, {"name": "x"}]}),
                "test-0a1b",
                false,
            ),
            (json!({"members": []}), "test-0a1b", false),
            (Value::Null, "test-0a1b", false),
        ] {
            assert_eq!(is_member_list_of(&list, member), ours, "{list}");
        }
    }

    #[tokio::test]
    async fn another_clusters_etcd_on_the_port_is_not_taken_for_this_one() {
        // Healthy, and a member list, but of another member: /health and the list get the same
        // answer here, which holds both keys.
        let url = answering(r#"{"health":"true","members":[{"name":"test-9f8e7d6c5b4a"}]}"#).await;
        assert!(!etcd_serves_as(&url, "test-0a1b2c3d4e5f").await);
        assert!(etcd_serves_as(&url, "test-9f8e7d6c5b4a").await);
    }
}
