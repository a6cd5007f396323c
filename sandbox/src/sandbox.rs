//! Sandboxes: N clusters, each an API server on its own 127.0.0.1 port (HTTP or HTTPS) with
//! its own store, resourceVersions, UIDs and CRDs; their kubeconfig; clean shutdown.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use comb_kubeconfigs::write::KubeconfigBuilder;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::Service;

use crate::error::{Error, Result};
use crate::gc;
use crate::server::{self, ApiServer, ServerOptions};
use crate::store::{Store, StoreOptions};
use crate::tls::Tls;

/// The user every sandbox context uses. The servers accept any request; the token is there
/// because kubectl prompts for a password over HTTPS when a user has no credentials.
pub const SANDBOX_USER: &str = "sandbox";
const SANDBOX_TOKEN: &str = "sandbox";

/// A context beyond the one per cluster: same server, another default namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraContext {
    pub name: String,
    pub cluster: String,
    pub namespace: Option<String>,
}

/// Something that plugs into every cluster: middleware around its API and tasks beside it.
pub trait ClusterExtension: Send + Sync {
    /// Wraps the cluster's router (request counters, fault injection, partitions).
    fn layer(&self, _cluster: &ClusterHandle, router: Router) -> Router {
        router
    }

    /// The test controls of `cluster`, when this extension serves them.
    fn controls(&self, _cluster: &str) -> Option<crate::controls::Controls> {
        None
    }

    /// Starts the cluster's background tasks (simulated controllers); they stop when
    /// `shutdown` is cancelled.
    fn spawn(
        &self,
        _cluster: &ClusterHandle,
        _options: &SandboxOptions,
        _shutdown: CancellationToken,
    ) -> Vec<JoinHandle<()>> {
        Vec::new()
    }
}

#[derive(Clone)]
pub struct SandboxOptions {
    /// Cluster names; each gets a server, and a kubeconfig context of the same name.
    pub clusters: Vec<String>,
    pub contexts: Vec<ExtraContext>,
    /// Serve HTTPS with a generated CA (in the kubeconfig as certificate-authority-data).
    pub https: bool,
    /// How long simulated Pods take to become Ready.
    pub pod_ready_delay: Duration,
    pub store: StoreOptions,
    pub server: ServerOptions,
    pub extensions: Vec<Arc<dyn ClusterExtension>>,
    /// The sandbox network (the real backend only: the emulator has no data path).
    pub network: Option<crate::real::network::NetworkOptions>,
}

impl std::fmt::Debug for SandboxOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxOptions")
            .field("clusters", &self.clusters)
            .field("contexts", &self.contexts)
            .field("https", &self.https)
            .field("pod_ready_delay", &self.pod_ready_delay)
            .field("store", &self.store)
            .field("server", &self.server)
            .field("extensions", &self.extensions.len())
            .field("network", &self.network)
            .finish()
    }
}

impl Default for SandboxOptions {
    fn default() -> Self {
        SandboxOptions {
            clusters: vec!["sandbox".into()],
            contexts: Vec::new(),
            https: false,
            pod_ready_delay: Duration::ZERO,
            store: StoreOptions::default(),
            server: ServerOptions::default(),
            // A sandbox cluster behaves like a cluster and has test controls.
            extensions: vec![
                Arc::new(crate::sim::Simulation::default()),
                Arc::new(crate::controls::ClusterControls::default()),
            ],
            network: None,
        }
    }
}

impl SandboxOptions {
    /// Options for these clusters, everything else default.
    pub fn clusters<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        SandboxOptions {
            clusters: names.into_iter().map(Into::into).collect(),
            ..SandboxOptions::default()
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.clusters.is_empty() {
            return Err(Error::NoClusters);
        }
        for (i, name) in self.clusters.iter().enumerate() {
            if self.clusters[..i].contains(name) {
                return Err(Error::DuplicateCluster(name.clone()));
            }
        }
        for context in &self.contexts {
            if !self.clusters.contains(&context.cluster) {
                return Err(Error::UnknownContextCluster {
                    context: context.name.clone(),
                    cluster: context.cluster.clone(),
                    known: self.clusters.join(", "),
                });
            }
        }
        Ok(())
    }
}

/// One running cluster.
#[derive(Clone, Debug)]
pub struct ClusterHandle {
    name: String,
    address: SocketAddr,
    https: bool,
    ca_pem: Option<String>,
    store: Store,
}

impl ClusterHandle {
    /// The CA that signs an HTTPS cluster's certificate (none for HTTP).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `http://127.0.0.1:PORT` or `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.address)
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The cluster's objects, for in-process inspection and setup.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// Running clusters; they stop on [`Sandbox::shutdown`] or when dropped.
pub struct Sandbox {
    clusters: Vec<ClusterHandle>,
    extensions: Vec<Arc<dyn ClusterExtension>>,
    contexts: Vec<ExtraContext>,
    ca_pem: Option<String>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("clusters", &self.clusters)
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// Starts every cluster: binds its port, then serves it in the background.
    pub async fn start(options: SandboxOptions) -> Result<Sandbox> {
        options.check()?;
        let tls = if options.https {
            Some(Tls::generate()?)
        } else {
            None
        };
        let shutdown = CancellationToken::new();
        let mut clusters = Vec::new();
        let mut tasks = Vec::new();
        for name in &options.clusters {
            let listener = TcpListener::bind(("127.0.0.1", 0))
                .await
                .map_err(|source| Error::Bind {
                    cluster: name.clone(),
                    source,
                })?;
            let address = listener.local_addr().map_err(|source| Error::Bind {
                cluster: name.clone(),
                source,
            })?;
            let store = Store::new(options.store.clone());
            publish_api_service(&store, address);
            let handle = ClusterHandle {
                name: name.clone(),
                address,
                https: options.https,
                ca_pem: tls.as_ref().map(|t| t.ca_pem.clone()),
                store: store.clone(),
            };
            let api = Arc::new(ApiServer {
                store: store.clone(),
                options: options.server.clone(),
                address: address.to_string(),
                shutdown: shutdown.clone(),
            });
            let mut router = server::router(api);
            for extension in &options.extensions {
                router = extension.layer(&handle, router);
                tasks.extend(extension.spawn(&handle, &options, shutdown.clone()));
            }
            tasks.push(gc::spawn(store, shutdown.clone()));
            let acceptor = tls
                .as_ref()
                .map(|t| TlsAcceptor::from(t.server_config.clone()));
            tasks.push(tokio::spawn(serve(
                listener,
                router,
                acceptor,
                shutdown.clone(),
            )));
            clusters.push(handle);
        }
        Ok(Sandbox {
            clusters,
            extensions: options.extensions,
            contexts: options.contexts,
            ca_pem: tls.map(|t| t.ca_pem),
            shutdown,
            tasks,
        })
    }

    pub fn clusters(&self) -> &[ClusterHandle] {
        &self.clusters
    }

    pub fn cluster(&self, name: &str) -> Result<&ClusterHandle> {
        self.clusters
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| Error::UnknownCluster {
                name: name.to_string(),
                known: self.cluster_names(),
            })
    }

    fn cluster_names(&self) -> String {
        self.clusters
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The test controls of cluster `name`, when an extension serves them.
    pub fn controls(&self, name: &str) -> Option<crate::controls::Controls> {
        self.extensions
            .iter()
            .find_map(|extension| extension.controls(name))
    }

    /// Creates `namespace` in cluster `cluster` (an existing one is fine).
    pub fn create_namespace(&self, cluster: &str, namespace: &str) -> Result<()> {
        let store = self.cluster(cluster)?.store();
        let Some(namespaces) = store.resource_type("", "Namespace") else {
            return Ok(());
        };
        match store.create(&namespaces, None, json!({"metadata": {"name": namespace}})) {
            Ok(_) => Ok(()),
            Err(error) if error.reason == "AlreadyExists" => Ok(()),
            Err(error) => Err(Error::Io {
                what: format!("creating namespace {namespace} in cluster {cluster}"),
                source: std::io::Error::other(error.message),
            }),
        }
    }

    /// The PEM of the CA that signs the HTTPS servers, if they are HTTPS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The kubeconfig: a context per cluster (the first is current), then the extra contexts.
    pub fn kubeconfig(&self) -> KubeconfigBuilder {
        let clusters: Vec<(&str, String)> = self
            .clusters
            .iter()
            .map(|cluster| (cluster.name.as_str(), cluster.url()))
            .collect();
        sandbox_kubeconfig(
            &clusters,
            &self.contexts,
            self.ca_pem.as_deref(),
            SANDBOX_TOKEN,
        )
    }

    pub fn kubeconfig_yaml(&self) -> Result<String> {
        self.kubeconfig()
            .to_yaml()
            .map_err(|source| Error::WriteKubeconfig {
                path: "<memory>".into(),
                source,
            })
    }

    /// Writes the kubeconfig atomically (temporary file, then rename).
    pub fn write_kubeconfig(&self, path: &Path) -> Result<()> {
        self.kubeconfig()
            .write_atomic(path)
            .map_err(|source| Error::WriteKubeconfig {
                path: path.to_path_buf(),
                source,
            })
    }

    /// Stops every server, watch and background task, and waits for them.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The kubeconfig of sandbox clusters, on either backend: a context per cluster `(name, url)`
/// (the first is current), then the extra contexts, all as the token user [`SANDBOX_USER`].
pub(crate) fn sandbox_kubeconfig(
    clusters: &[(&str, String)],
    contexts: &[ExtraContext],
    ca_pem: Option<&str>,
    token: &str,
) -> KubeconfigBuilder {
    let mut builder = KubeconfigBuilder::new().token_user(SANDBOX_USER, token);
    for (name, url) in clusters {
        builder = builder
            .cluster(name, url, ca_pem)
            .context(name, name, SANDBOX_USER, None);
    }
    for extra in contexts {
        builder = builder.context(
            &extra.name,
            &extra.cluster,
            SANDBOX_USER,
            extra.namespace.as_deref(),
        );
    }
    if let Some((first, _)) = clusters.first() {
        builder = builder.current_context(first);
    }
    builder
}

/// The `kubernetes` Service in `default` and its endpoints, which every kube-apiserver
/// keeps pointing at itself (ClusterIP 10.96.0.1, which the allocator never hands out).
fn publish_api_service(store: &Store, address: SocketAddr) {
    let port = address.port();
    let labels = json!({"component": "apiserver", "provider": "kubernetes"});
    let objects = [
        (
            "",
            "Service",
            json!({"metadata": {"name": "kubernetes", "labels": labels}, "spec": {
                "type": "ClusterIP", "clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"],
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]}}),
        ),
        (
            "",
            "Endpoints",
            json!({"metadata": {"name": "kubernetes", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                "subsets": [{"addresses": [{"ip": address.ip().to_string()}],
                             "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]}),
        ),
        (
            "discovery.k8s.io",
            "EndpointSlice",
            json!({"metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [address.ip().to_string()], "conditions": {"ready": true}}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}),
        ),
    ];
    for (group, kind, object) in objects {
        let created = store
            .resource_type(group, kind)
            .map(|rt| store.create(&rt, Some("default"), object));
        if let Some(Err(error)) = created {
            tracing::warn!(%error, kind, "could not publish the kubernetes service");
        }
    }
}

/// Accepts connections until shutdown; each connection is HTTP/1.1, over TLS when given.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsAcceptor>,
    shutdown: CancellationToken,
) {
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::debug!(%error, "accept failed");
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let tls = tls.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            match tls {
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(stream) => serve_connection(TokioIo::new(stream), router, shutdown).await,
                    Err(error) => tracing::debug!(%error, "TLS handshake failed"),
                },
                None => serve_connection(TokioIo::new(stream), router, shutdown).await,
            }
        });
    }
}

async fn serve_connection<I>(io: I, router: Router, shutdown: CancellationToken)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
        let mut router = router.clone();
        async move { router.call(request.map(Body::new)).await }
    });
    let connection = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        _ = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}
