//! The sandbox network (`comb sandbox --backend kube --network`): packets, not just objects.
//!
//! ```text
//!                       router namespace (the sandbox's, not the host's)
//!            c0 172.18.0.1/24   c1 172.18.1.1/24   ...   routes: each cluster's Pod CIDR and
//!                 |                   |                  LoadBalancer pool via its node
//!   node prod  eth0 172.18.0.2   node dev eth0 172.18.1.2
//!     kube-proxy, CoreDNS,         ...
//!     API relay on 127.0.0.1
//!       |  veth, /32 route per Pod
//!   Pod namespaces: eth0 = Pod IP, default via the node; comb-identity on each TCP port
//! ```
//!
//! Per cluster a node namespace runs real kube-proxy (nftables mode, or iptables) and CoreDNS
//! (`cluster.local` from the cluster's API, at the kube-dns Service's ClusterIP), both reaching
//! the API server through a relay of the sandbox ([`relay`]). Every Pod kwok runs gets a
//! namespace of its own at its Pod IP ([`pods`]). LoadBalancer Services get addresses from their
//! cluster's pool ([`crate::real::load_balancer`]), which the router sends to the cluster's node,
//! where kube-proxy serves them; NodePorts answer on the node's address. A client inside a Pod
//! resolves through its cluster's DNS and connects from the Pod's namespace ([`call`]).
//!
//! Everything lives in namespaces the sandbox creates and holds by descriptors only
//! ([`netns`]): the host's namespace gets no address, route or interface, and when the sandbox
//! stops or dies, every namespace, process and relay goes with it.

pub mod call;
pub mod dns;
pub mod links;
pub mod netns;
pub mod pods;
pub mod relay;

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::real::addresses::{ClusterAddresses, DNS_SERVICE_IP, MAX_CLUSTERS};
use crate::real::process::Component;
use crate::real::{NODE_NAME, START_LIMIT};
use call::Target;
pub use call::{CallOutcome, Failure};
use dns::ExternalNames;
use links::{Links, sysctl};
use netns::Netns;
use pods::PodNetworks;

/// The binaries the network adds to the control plane's (built by `tests/kube/build`).
pub const BINARIES: [&str; 2] = ["kube-proxy", "coredns"];

/// Where kube-proxy serves its metrics, on the node's loopback.
const KUBE_PROXY_METRICS: u16 = 10249;

/// Where the identity server is, when not beside the running executable.
pub const IDENTITY_ENV: &str = "COMB_IDENTITY_BIN";
const IDENTITY_BIN: &str = "comb-identity";

/// How kube-proxy programs the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ProxyMode {
    /// nftables (kube-proxy's newest mode; needs `nft`).
    #[default]
    Nftables,
    /// iptables (needs `iptables-restore`, Debian's `iptables`).
    Iptables,
}

impl ProxyMode {
    fn flag(self) -> &'static str {
        match self {
            ProxyMode::Nftables => "nftables",
            ProxyMode::Iptables => "iptables",
        }
    }

    /// The program kube-proxy runs in this mode.
    fn tool(self) -> &'static str {
        match self {
            ProxyMode::Nftables => "nft",
            ProxyMode::Iptables => "iptables-restore",
        }
    }
}

/// What the network needs to be asked for.
#[derive(Debug, Clone, Default)]
pub struct NetworkOptions {
    /// `comb-identity`; default `$COMB_IDENTITY_BIN`, else beside the running executable.
    pub identity_bin: Option<PathBuf>,
    pub proxy_mode: ProxyMode,
    /// A real node beside kwok's in some clusters ([`crate::real::node`]).
    pub real_node: Option<crate::real::node::RealNodeOptions>,
}

/// The identity server: `explicit`, else `$COMB_IDENTITY_BIN`, else beside the running
/// executable (or one directory up, where cargo puts a test binary's).
pub fn identity_bin(explicit: Option<&Path>) -> Result<PathBuf> {
    let mut tried = Vec::new();
    if let Some(path) = explicit {
        tried.push(path.to_path_buf());
    } else if let Some(path) = std::env::var_os(IDENTITY_ENV).filter(|p| !p.is_empty()) {
        tried.push(PathBuf::from(path));
    } else if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(2) {
            tried.push(dir.join(IDENTITY_BIN));
        }
    }
    tried
        .iter()
        .find(|path| path.is_file())
        .cloned()
        .ok_or_else(|| Error::NetworkUnavailable {
            reason: format!(
                "the Pods' identity server {IDENTITY_BIN} is not at {}; build it with `cargo build -p comb-identity` (add --release for a release comb), or point {IDENTITY_ENV} at it",
                tried
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        })
}

/// Why the network cannot run here, if it cannot: not root, a binary or tool missing, too many
/// clusters. Creating a namespace is the test of privilege (it needs CAP_SYS_ADMIN).
pub fn unavailable(bin_dir: &Path, options: &NetworkOptions, clusters: usize) -> Option<Error> {
    let unavailable = |reason: String| Some(Error::NetworkUnavailable { reason });
    if clusters > MAX_CLUSTERS {
        return unavailable(format!(
            "it places at most {MAX_CLUSTERS} clusters, and {clusters} were asked for"
        ));
    }
    if let Some(binary) = BINARIES.iter().find(|b| !bin_dir.join(b).is_file()) {
        return Some(Error::MissingBinary {
            binary: binary.to_string(),
            dir: bin_dir.to_path_buf(),
        });
    }
    let tool = options.proxy_mode.tool();
    if !on_path(tool) {
        return unavailable(format!(
            "kube-proxy's {} mode runs {tool}, which is not on PATH (Debian: apt-get install {})",
            options.proxy_mode.flag(),
            match options.proxy_mode {
                ProxyMode::Nftables => "nftables",
                ProxyMode::Iptables => "iptables",
            }
        ));
    }
    if let Err(error) = identity_bin(options.identity_bin.as_deref()) {
        return Some(error);
    }
    if let Some(real_node) = &options.real_node
        && let Some(error) = crate::real::node::unavailable(bin_dir, real_node)
    {
        return Some(error);
    }
    if let Err(error) = Netns::create("a probe") {
        return unavailable(format!(
            "creating a network namespace failed ({error}); the network needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
        ));
    }
    None
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
            .any(|dir| dir.join(program).is_file())
    })
}

/// The namespace that joins the clusters, and the names the sandbox serves to all of them.
pub struct Router {
    netns: Netns,
    links: Links,
    names: Arc<ExternalNames>,
    identity_bin: PathBuf,
    proxy_mode: ProxyMode,
}

impl Router {
    /// The router's namespace, forwarding; the sandbox's names in `dir`.
    pub async fn start(dir: &Path, options: &NetworkOptions) -> Result<Arc<Router>> {
        let identity_bin = identity_bin(options.identity_bin.as_deref())?;
        let netns = Netns::create("the sandbox router")?;
        let links = Links::open(&netns)?;
        links.up("lo").await?;
        forwarding(&netns)?;
        let path = dir.join("external.hosts");
        let names = ExternalNames::new(path.clone()).map_err(|source| Error::Io {
            what: format!("writing {}", path.display()),
            source,
        })?;
        Ok(Arc::new(Router {
            netns,
            links,
            names: Arc::new(names),
            identity_bin,
            proxy_mode: options.proxy_mode,
        }))
    }

    pub fn names(&self) -> Arc<ExternalNames> {
        self.names.clone()
    }
}

/// A namespace that forwards packets, whatever the host's defaults say.
fn forwarding(netns: &Netns) -> Result<()> {
    sysctl(netns, "net.ipv4.ip_forward", "1")?;
    sysctl(netns, "net.ipv4.conf.all.rp_filter", "0")?;
    sysctl(netns, "net.ipv4.conf.default.rp_filter", "0")
}

/// What joining one cluster to the network needs.
pub struct Attach<'a> {
    pub name: &'a str,
    pub index: usize,
    /// The cluster's data directory.
    pub dir: &'a Path,
    pub bin_dir: &'a Path,
    /// The components' kubeconfig (server `https://127.0.0.1:<api_port>`, context `name`).
    pub kubeconfig: &'a Path,
    pub api_port: u16,
    /// A client of the cluster's API server, from the host.
    pub client: kube::Client,
}

/// One cluster's part of the network: its node namespace with kube-proxy, CoreDNS and the API
/// relay, and its Pods' namespaces.
pub struct ClusterNetwork {
    name: String,
    addresses: ClusterAddresses,
    node: Netns,
    router: Arc<Router>,
    /// The router's end of the node's link.
    router_link: String,
    pods: Arc<PodNetworks>,
    components: tokio::sync::Mutex<Vec<Component>>,
    shutdown: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for ClusterNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterNetwork")
            .field("name", &self.name)
            .field("node_ip", &self.addresses.node_ip)
            .finish_non_exhaustive()
    }
}

impl ClusterNetwork {
    /// Joins a cluster to the network and waits until its DNS answers through kube-proxy.
    pub async fn start(router: Arc<Router>, attach: Attach<'_>) -> Result<Arc<ClusterNetwork>> {
        let addresses =
            ClusterAddresses::of(attach.index).ok_or_else(|| Error::NetworkUnavailable {
                reason: format!("it places at most {MAX_CLUSTERS} clusters"),
            })?;
        let node = Netns::create(&format!("the node of cluster {}", attach.name))?;
        let node_links = Arc::new(Links::open(&node)?);
        let router_link = format!("c{}", attach.index);
        let shutdown = CancellationToken::new();
        let log = attach.dir.join("pods.log");
        let network = Arc::new(ClusterNetwork {
            name: attach.name.to_string(),
            addresses,
            node: node.clone(),
            router: router.clone(),
            router_link: router_link.clone(),
            pods: Arc::new(PodNetworks::new(
                attach.name,
                node.clone(),
                addresses.node_ip,
                node_links.clone(),
                &router.identity_bin,
                log,
            )),
            components: tokio::sync::Mutex::new(Vec::new()),
            shutdown: shutdown.clone(),
            tasks: Mutex::new(Vec::new()),
        });
        match network.wire(&node_links, &attach).await {
            Ok(()) => Ok(network),
            Err(error) => {
                network.shutdown().await;
                Err(error)
            }
        }
    }

    async fn wire(self: &Arc<Self>, node_links: &Arc<Links>, attach: &Attach<'_>) -> Result<()> {
        let a = self.addresses;
        let router = &self.router;
        node_links.up("lo").await?;
        node_links
            .add_veth("eth0", &self.router_link, &router.netns)
            .await?;
        node_links
            .add_address("eth0", a.node_ip, a.node_link.prefix)
            .await?;
        node_links.up("eth0").await?;
        node_links
            .add_route(
                crate::real::addresses::Cidr::DEFAULT,
                Some(a.router_ip),
                "eth0",
            )
            .await?;
        router
            .links
            .add_address(&self.router_link, a.router_ip, a.node_link.prefix)
            .await?;
        router.links.up(&self.router_link).await?;
        for destination in [a.pod_cidr, a.load_balancer_cidr] {
            router
                .links
                .add_route(destination, Some(a.node_ip), &self.router_link)
                .await?;
        }
        forwarding(&self.node)?;
        self.task(relay::start(
            &self.node,
            attach.api_port,
            self.shutdown.clone(),
        )?);

        // kube-dns, then CoreDNS and kube-proxy on the node.
        for object in dns::kube_dns(a.node_ip) {
            apply(&attach.client, &object).await.map_err(|message| {
                self.failed(
                    "kube-apiserver",
                    attach.dir,
                    format!("creating kube-system/kube-dns failed: {message}"),
                )
            })?;
        }
        let corefile = attach.dir.join("Corefile");
        std::fs::write(
            &corefile,
            dns::corefile(
                a.node_ip,
                router.names.path(),
                attach.kubeconfig,
                attach.name,
            ),
        )
        .map_err(|source| Error::Io {
            what: format!("writing {}", corefile.display()),
            source,
        })?;
        let path = |p: &Path| p.display().to_string();
        self.spawn(attach, "coredns", vec!["-conf".into(), path(&corefile)])
            .await?;
        self.spawn(
            attach,
            "kube-proxy",
            vec![
                format!("--kubeconfig={}", path(attach.kubeconfig)),
                format!("--proxy-mode={}", router.proxy_mode.flag()),
                format!("--hostname-override={NODE_NAME}"),
                format!("--cluster-cidr={}", a.pod_cidr),
                // The host's conntrack table is the machine's: kube-proxy leaves it alone.
                "--conntrack-max-per-core=0".into(),
                "--conntrack-tcp-timeout-established=0".into(),
                "--conntrack-tcp-timeout-close-wait=0".into(),
                format!("--metrics-bind-address=127.0.0.1:{KUBE_PROXY_METRICS}"),
                "--healthz-bind-address=127.0.0.1:10256".into(),
            ],
        )
        .await?;
        self.task(tokio::spawn(
            self.pods
                .clone()
                .run(attach.client.clone(), self.shutdown.clone()),
        ));
        self.wait_for_dns(attach.dir).await
    }

    fn task(&self, task: JoinHandle<()>) {
        self.tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(task);
    }

    async fn spawn(&self, attach: &Attach<'_>, name: &str, args: Vec<String>) -> Result<()> {
        let runtime = tokio::runtime::Handle::current();
        let binary = attach.bin_dir.join(name);
        let log = attach.dir.join(format!("{name}.log"));
        let component = self.node.run(&format!("starting {name}"), || {
            let _entered = runtime.enter();
            Ok(Component::spawn(name, &binary, &args, &log, None))
        })??;
        self.components.lock().await.push(component);
        Ok(())
    }

    fn failed(&self, component: &str, dir: &Path, message: String) -> Error {
        Error::ComponentFailed {
            cluster: self.name.clone(),
            component: component.to_string(),
            message,
            log: dir.join(format!("{component}.log")),
        }
    }

    /// Waits until the node resolves `kubernetes.default` through the kube-dns ClusterIP: then
    /// kube-proxy has programmed the node and CoreDNS serves the cluster.
    async fn wait_for_dns(&self, dir: &Path) -> Result<()> {
        let deadline = tokio::time::Instant::now() + START_LIMIT;
        let name = format!("kubernetes.default.svc.{}", dns::CLUSTER_DOMAIN);
        loop {
            let resolved = call::resolve(&self.node, self.dns_server(), &name, &[]).await;
            let last = match resolved {
                Ok(_) => return Ok(()),
                Err(error) => error.to_string(),
            };
            for component in self.components.lock().await.iter_mut() {
                if let Some(status) = component.exited() {
                    return Err(self.failed(
                        &component.name,
                        dir,
                        format!(
                            "it exited ({status}); its log ends: {}",
                            component.log_tail(12)
                        ),
                    ));
                }
            }
            if tokio::time::Instant::now() > deadline {
                let tails: Vec<String> = self
                    .components
                    .lock()
                    .await
                    .iter()
                    .map(|c| format!("{}: {}", c.name, c.log_tail(6)))
                    .collect();
                return Err(self.failed(
                    "coredns",
                    dir,
                    format!(
                        "the node did not resolve {name} through {DNS_SERVICE_IP} within {}s ({last}); {}",
                        START_LIMIT.as_secs(),
                        tails.join("; ")
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The node's network namespace (kube-proxy's, CoreDNS's, and a real node's).
    pub fn node_netns(&self) -> &Netns {
        &self.node
    }

    /// kube-dns's address, where the cluster's Pods send their queries.
    pub fn dns_server(&self) -> SocketAddrV4 {
        SocketAddrV4::new(DNS_SERVICE_IP, 53)
    }

    pub fn addresses(&self) -> ClusterAddresses {
        self.addresses
    }

    /// The Pods that have a network now.
    pub fn pods(&self) -> Vec<pods::PodPlan> {
        self.pods.plans()
    }

    /// A call from inside Pod `namespace/pod`: `target` (`host:port`) resolved through the
    /// cluster's DNS with the Pod's search path, then connected to from the Pod's namespace,
    /// and what answered.
    pub async fn call(&self, namespace: &str, pod: &str, target: &str) -> CallOutcome {
        let target = match Target::parse(target) {
            Ok(target) => target,
            Err(outcome) => return outcome,
        };
        let Some(netns) = self.pods.netns_of(namespace, pod) else {
            return CallOutcome::no_pod(&self.name, namespace, pod, &target);
        };
        call::call(
            &netns,
            self.dns_server(),
            &dns::search_path(namespace),
            &target,
        )
        .await
    }

    /// kube-proxy's Prometheus metrics (`/metrics`, served on the node's loopback), for what
    /// it says of itself: `kubeproxy_network_programming_duration_seconds`, its syncs.
    pub async fn kube_proxy_metrics(&self) -> Result<String> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let failed = |source: std::io::Error| Error::Io {
            what: format!("reading kube-proxy's metrics in cluster {}", self.name),
            source,
        };
        let socket = self
            .node
            .run("opening a TCP socket", tokio::net::TcpSocket::new_v4)?;
        let exchange = async {
            let mut stream = socket
                .connect(std::net::SocketAddr::from((
                    [127, 0, 0, 1],
                    KUBE_PROXY_METRICS,
                )))
                .await?;
            stream
                .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                .await?;
            let mut response = Vec::new();
            stream.read_to_end(&mut response).await?;
            Ok::<_, std::io::Error>(String::from_utf8_lossy(&response).into_owned())
        };
        let response = tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .map_err(|_| failed(std::io::ErrorKind::TimedOut.into()))?
            .map_err(failed)?;
        Ok(response
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_string())
            .unwrap_or(response))
    }

    /// What the node's data path holds now, for a test's failure message: the rules kube-proxy
    /// programmed (`nft list ruleset`, which shows iptables-nft's too) and the node's
    /// connection-tracking entries whose text contains `conntrack_filter` (e.g. `dport=4222`).
    pub fn node_state(&self, conntrack_filter: &str) -> String {
        let rules = self
            .node
            .run("listing the nftables rules", || {
                std::process::Command::new("nft")
                    .args(["list", "ruleset"])
                    .output()
            })
            .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
            .unwrap_or_else(|error| error.to_string());
        // The table is the namespace's own; a thread inside reads it through /proc/thread-self.
        let tracked = self
            .node
            .run("reading the connection-tracking table", || {
                std::fs::read_to_string("/proc/thread-self/net/nf_conntrack")
            })
            .map(|table| {
                table
                    .lines()
                    .filter(|line| line.contains(conntrack_filter))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_else(|error| error.to_string());
        format!(
            "nftables of the node of {}:\n{rules}\nconntrack ({conntrack_filter}):\n{tracked}",
            self.name
        )
    }

    /// Calls `target` from Pod `namespace/pod` until `count` calls in a row satisfy `converged`
    /// (the data path follows the objects after a while: kube-proxy's next sync, CoreDNS's
    /// watch, and during a switch both sides may answer for a moment), or `limit` passes: those
    /// calls.
    pub async fn calls_once_converged(
        &self,
        namespace: &str,
        pod: &str,
        target: &str,
        count: usize,
        limit: Duration,
        converged: impl Fn(&CallOutcome) -> bool,
    ) -> Calls {
        let deadline = tokio::time::Instant::now() + limit;
        let mut streak = Vec::with_capacity(count);
        let mut last_miss = None;
        loop {
            let outcome = self.call(namespace, pod, target).await;
            if converged(&outcome) {
                streak.push(outcome);
                if streak.len() >= count.max(1) {
                    return Calls {
                        converged: true,
                        outcomes: streak,
                    };
                }
            } else {
                streak.clear();
                last_miss = Some(outcome);
            }
            if tokio::time::Instant::now() > deadline {
                streak.extend(last_miss);
                return Calls {
                    converged: false,
                    outcomes: streak,
                };
            }
            if streak.is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Stops kube-proxy, CoreDNS, the relay and every Pod's server, and lets the namespaces go.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        let tasks = std::mem::take(
            &mut *self
                .tasks
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for task in tasks {
            let _ = task.await;
        }
        self.pods.remove_all().await;
        let mut components = self.components.lock().await;
        for component in components.iter_mut() {
            component.stop();
        }
        for component in components.iter_mut() {
            component.stop_and_wait(Duration::from_secs(10)).await;
        }
        // The node's namespace takes its end of the link along when it goes, but the kernel
        // frees a namespace later: the router's end is removed now, so its name is free.
        let _ = self.router.links.delete(&self.router_link).await;
    }
}

/// Repeated calls ([`ClusterNetwork::calls_once_converged`]).
#[derive(Debug, Clone)]
pub struct Calls {
    /// Whether `count` calls in a row satisfied the condition within the limit.
    pub converged: bool,
    /// Those calls (else the last ones that did, and the last that did not).
    pub outcomes: Vec<CallOutcome>,
}

impl Calls {
    /// How many of the calls satisfy `expected`.
    pub fn count(&self, expected: impl Fn(&CallOutcome) -> bool) -> usize {
        self.outcomes
            .iter()
            .filter(|outcome| expected(outcome))
            .count()
    }
}

/// The network's control on each cluster's proxy: `POST /_sandbox/network/call` with
/// `{"namespace": "platform", "pod": "client", "target": "db:5432"}` makes the call from inside
/// that Pod and answers with its [`CallOutcome`] (200 whether or not something answered; 404
/// when the sandbox has no network).
pub fn control(network: Option<Arc<ClusterNetwork>>) -> axum::Router {
    use axum::Json;
    use axum::extract::State;
    use axum::response::IntoResponse as _;

    #[derive(serde::Deserialize)]
    struct CallRequest {
        namespace: String,
        pod: String,
        target: String,
    }

    async fn handle(
        State(network): State<Option<Arc<ClusterNetwork>>>,
        body: axum::body::Bytes,
    ) -> axum::response::Response {
        let status = |code: http::StatusCode, reason: &str, message: String| {
            let body = serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code.as_u16()
            });
            (code, Json(body)).into_response()
        };
        let Some(network) = network else {
            return status(
                http::StatusCode::NOT_FOUND,
                "NotFound",
                "this sandbox has no network: start it with `comb sandbox --backend kube --network`".into(),
            );
        };
        match serde_json::from_slice::<CallRequest>(&body) {
            Ok(call) => {
                Json(network.call(&call.namespace, &call.pod, &call.target).await).into_response()
            }
            Err(error) => status(
                http::StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("a call is {{\"namespace\", \"pod\", \"target\": \"host:port\"}}: {error}"),
            ),
        }
    }

    axum::Router::new()
        .route("/_sandbox/network/call", axum::routing::post(handle))
        .with_state(network)
}

/// Server-side applies `object` (the sandbox's own: forced).
async fn apply(client: &kube::Client, object: &Value) -> std::result::Result<(), String> {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use kube::discovery::ApiResource;
    let object: DynamicObject =
        serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    let types = object.types.clone().ok_or("no apiVersion and kind")?;
    let gvk = kube::core::GroupVersionKind::try_from(&types).map_err(|e| e.to_string())?;
    let plural = format!("{}s", types.kind.to_ascii_lowercase());
    let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        object.metadata.namespace.as_deref().unwrap_or("default"),
        &resource,
    );
    let name = object.metadata.name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(dns::MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}
