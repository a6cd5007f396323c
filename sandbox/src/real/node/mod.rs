//! A real node beside kwok's (`comb sandbox --backend kube --network --real-node CLUSTER`): the
//! kubelet built by `tests/kube/build` from the same `k8s.io/kubernetes` module as the control
//! plane, Debian's containerd and runc, and Debian's CNI plugins wiring its Pods into the sandbox
//! network as kwok's Pods are wired (a veth pair into the node's namespace, [`config`]). It runs
//! in the cluster's node namespace, registers as the Node [`REAL_NODE_NAME`] with the taint
//! [`REAL_NODE_TAINT`] (only Pods that tolerate it, and select it, come), and runs what a node
//! runs: Pod sandboxes from a pause image compiled from the module's `pause.c`, containers from
//! images loaded from OCI archives into its own image store (nothing is pulled: no registry is
//! reached), projected ServiceAccount tokens, ConfigMap and Secret volumes, probes, restarts,
//! status, logs (kube-apiserver reaches it through [`egress`]).
//!
//! Nothing outlives it: containerd, the kubelet and all they start run in a PID and a mount
//! namespace of their own (`node.sh`, `node-init.sh`), which the kernel empties when the node
//! stops or the sandbox dies; its cgroups are a tree of the sandbox's own, removed after; its
//! files are under the cluster's directory.

pub mod config;
pub mod egress;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::real::addresses::Cidr;
use crate::real::network::netns::Netns;
use crate::real::process::Component;
use crate::real::{KUBE_VERSION, START_LIMIT};
use config::{CNI_BIN_DIR, NodeAddresses, NodePaths};
pub use config::{REAL_NODE_NAME, REAL_NODE_TAINT};

/// What the node adds to the real backend's binaries (built by `tests/kube/build`): the kubelet
/// and the pause image's OCI archive.
pub const BINARIES: [&str; 2] = ["kubelet", PAUSE_ARCHIVE];

/// The pause image's archive in the binaries' directory.
pub const PAUSE_ARCHIVE: &str = "pause.oci.tar";

/// The programs the node runs from the machine (Debian: containerd, runc, util-linux).
const TOOLS: [(&str, &str); 6] = [
    ("containerd", "containerd"),
    ("containerd-shim-runc-v2", "containerd"),
    ("ctr", "containerd"),
    ("runc", "runc"),
    ("unshare", "util-linux"),
    ("mount", "mount"),
];

/// The CNI plugins the node's network uses (Debian: containernetworking-plugins).
const CNI_PLUGINS: [&str; 3] = ["ptp", "host-local", "loopback"];

/// The node's scripts (see each for why).
const NODE_SCRIPT: &str = include_str!("node.sh");
const NODE_INIT_SCRIPT: &str = include_str!("node-init.sh");

/// The pause image's name: the locally built one, named for the Kubernetes release whose
/// `pause.c` it is compiled from (`tests/kube/build` imports it under this name).
pub fn pause_image() -> String {
    format!("localhost/comb-sandbox/pause:{KUBE_VERSION}")
}

/// Which clusters get a real node, and what images it loads besides pause.
#[derive(Debug, Clone, Default)]
pub struct RealNodeOptions {
    pub clusters: Vec<String>,
    /// OCI archives (an OCI image layout in a tar; `tests/image/build` writes comb's) loaded into
    /// the node's image store before it is Ready.
    pub images: Vec<PathBuf>,
}

/// An image the node has, loaded from an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedImage {
    pub name: String,
    /// The digest of its index or manifest, as containerd reports it (`sha256:...`).
    pub digest: String,
}

/// Why a real node cannot run here, if it cannot: a binary, tool, plugin or image missing, or a
/// machine whose cgroups it does not handle.
pub fn unavailable(bin_dir: &Path, options: &RealNodeOptions) -> Option<Error> {
    let unavailable = |reason: String| Some(Error::RealNodeUnavailable { reason });
    if let Some(binary) = BINARIES.iter().find(|b| !bin_dir.join(b).is_file()) {
        return unavailable(format!(
            "{binary} is not in {}; build it with tests/kube/build (the kubelet from the Go module proxy, the pause image from the module's pause.c with gcc and umoci)",
            bin_dir.display()
        ));
    }
    if let Some((tool, package)) = TOOLS.iter().find(|(tool, _)| find_program(tool).is_none()) {
        return unavailable(format!(
            "{tool} is not on PATH (Debian: apt-get install {package})"
        ));
    }
    if let Some(plugin) = CNI_PLUGINS
        .iter()
        .find(|p| !Path::new(CNI_BIN_DIR).join(p).is_file())
    {
        return unavailable(format!(
            "the CNI plugin {plugin} is not in {CNI_BIN_DIR} (Debian: apt-get install containernetworking-plugins)"
        ));
    }
    if !Path::new("/sys/fs/cgroup/cpu").is_dir() {
        return unavailable(
            "it runs the kubelet on cgroups v1 (cgroupfs), and /sys/fs/cgroup has no v1 hierarchies here".into(),
        );
    }
    if let Some(image) = options.images.iter().find(|image| !image.is_file()) {
        return unavailable(format!(
            "the image archive {} is not there (tests/image/build writes comb's)",
            image.display()
        ));
    }
    // The node's directory must stay visible once /var/lib, /var/log and /run are replaced.
    let temp = std::env::temp_dir();
    if let Some(hidden) = ["/run", "/var/run", "/var/lib", "/var/log"]
        .iter()
        .find(|dir| temp.starts_with(dir))
    {
        return unavailable(format!(
            "its files go under the temporary directory {}, which is under {hidden}, which the node replaces; set TMPDIR elsewhere",
            temp.display()
        ));
    }
    None
}

/// `program` on PATH (or in the sbin directories, which a non-root PATH may lack).
pub fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// What starting the node needs from its cluster.
pub struct NodeSetup<'a> {
    pub cluster: &'a str,
    /// The node's directory (under the cluster's).
    pub dir: &'a Path,
    pub bin_dir: &'a Path,
    /// The components' kubeconfig (`https://127.0.0.1:<api port>`, which the node's namespace
    /// relays to the API server).
    pub kubeconfig: &'a Path,
    /// The cluster's node namespace, where kube-proxy and CoreDNS run too.
    pub netns: Netns,
    pub node_ip: Ipv4Addr,
    pub pod_cidr: Cidr,
    pub images: &'a [PathBuf],
    pub client: kube::Client,
}

/// A running real node.
pub struct RealNode {
    cluster: String,
    /// The node's cgroup, in every hierarchy (`/comb-node-<cluster>-<id>`).
    cgroup: String,
    component: tokio::sync::Mutex<Option<Component>>,
    images: Vec<LoadedImage>,
    paths: NodePaths,
    shutdown: CancellationToken,
    egress: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for RealNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealNode")
            .field("cluster", &self.cluster)
            .field("images", &self.images)
            .finish_non_exhaustive()
    }
}

/// The node's directory inside its cluster's: the egress configuration kube-apiserver reads is
/// written there before the node starts.
pub fn node_dir(cluster_dir: &Path) -> PathBuf {
    cluster_dir.join("node")
}

/// Writes kube-apiserver's egress selection for a cluster with a real node, and gives the flags
/// that use it: the cluster's network through the node's proxy, nodes dialed by InternalIP (the
/// proxy dials addresses, not names).
pub fn api_server_flags(cluster_dir: &Path) -> Result<Vec<String>> {
    let paths = NodePaths::new(&node_dir(cluster_dir));
    std::fs::create_dir_all(&paths.dir).map_err(|source| Error::Io {
        what: format!("creating {}", paths.dir.display()),
        source,
    })?;
    write(
        &paths.egress_config(),
        &config::egress_selector(&paths.egress_socket()).to_string(),
    )?;
    Ok(vec![
        format!(
            "--egress-selector-config-file={}",
            paths.egress_config().display()
        ),
        "--kubelet-preferred-address-types=InternalIP".into(),
    ])
}

fn write(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents).map_err(|source| Error::Io {
        what: format!("writing {}", path.display()),
        source,
    })
}

impl RealNode {
    /// Starts containerd and the kubelet in the node's namespace, loads the images, and waits
    /// until the Node is Ready.
    pub async fn start(setup: NodeSetup<'_>) -> Result<RealNode> {
        let paths = NodePaths::new(setup.dir);
        for dir in [paths.cni_conf_dir(), paths.dir.join("kubelet")] {
            std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
                what: format!("creating {}", dir.display()),
                source,
            })?;
        }
        let program = |name: &str| {
            find_program(name).ok_or_else(|| Error::RealNodeUnavailable {
                reason: format!("{name} is not on PATH"),
            })
        };
        let (containerd, runc) = (program("containerd")?, program("runc")?);
        write(
            &paths.containerd_config(),
            &config::containerd_toml(&paths, &pause_image(), &runc),
        )?;
        let addresses = NodeAddresses {
            node_ip: setup.node_ip,
            pod_cidr: setup.pod_cidr,
        };
        write(
            &paths.cni_conf_dir().join("10-comb-sandbox.conflist"),
            &config::cni_conflist(&paths, &addresses).to_string(),
        )?;
        // A cgroup of this node's own, in every hierarchy: unique per sandbox and cluster.
        let cgroup = format!(
            "/comb-node-{}-{}",
            setup.cluster,
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        write(
            &paths.kubelet_config(),
            &config::kubelet_config(&paths, &cgroup).to_string(),
        )?;
        let script = paths.dir.join("node.sh");
        write(&script, NODE_SCRIPT)?;
        write(&paths.dir.join("node-init.sh"), NODE_INIT_SCRIPT)?;

        let mut args = vec![
            script.display().to_string(),
            paths.dir.display().to_string(),
            cgroup.clone(),
            containerd.display().to_string(),
            setup.bin_dir.join("kubelet").display().to_string(),
        ];
        args.extend(config::kubelet_args(
            &paths,
            setup.kubeconfig,
            setup.node_ip,
        ));
        let runtime = tokio::runtime::Handle::current();
        let log = paths.dir.join("kubelet.log");
        let component = setup.netns.run("starting the real node", || {
            let _entered = runtime.enter();
            Ok(Component::spawn(
                "kubelet",
                Path::new("sh"),
                &args,
                &log,
                Some(&paths.dir),
            ))
        })??;
        let shutdown = CancellationToken::new();
        let mut node = RealNode {
            cluster: setup.cluster.to_string(),
            cgroup: cgroup.clone(),
            component: tokio::sync::Mutex::new(Some(component)),
            images: Vec::new(),
            paths: paths.clone(),
            shutdown: shutdown.clone(),
            egress: std::sync::Mutex::new(None),
        };
        match node.come_up(&setup).await {
            Ok(()) => Ok(node),
            Err(error) => {
                node.shutdown().await;
                Err(error)
            }
        }
    }

    async fn come_up(&mut self, setup: &NodeSetup<'_>) -> Result<()> {
        let socket = self.paths.containerd_socket();
        self.wait_until("containerd to open its socket", || {
            let socket = socket.clone();
            async move { socket.exists() }
        })
        .await?;
        let mut archives = vec![setup.bin_dir.join(PAUSE_ARCHIVE)];
        archives.extend(setup.images.iter().cloned());
        for archive in &archives {
            let loaded = self.import(archive).await?;
            self.images.extend(loaded);
        }
        let egress = egress::start(
            &self.paths.egress_socket(),
            setup.netns.clone(),
            self.shutdown.clone(),
        )?;
        *self
            .egress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(egress);
        let nodes: Api<Node> = Api::all(setup.client.clone());
        self.wait_until("the Node to be Ready", || {
            let nodes = nodes.clone();
            async move {
                nodes
                    .get_opt(REAL_NODE_NAME)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|node| node_ready(&node))
            }
        })
        .await
    }

    /// Loads an OCI archive into the node's image store (containerd's `k8s.io` namespace, the
    /// CRI's), unpacked for its snapshotter.
    async fn import(&self, archive: &Path) -> Result<Vec<LoadedImage>> {
        let failed = |message: String| Error::ComponentFailed {
            cluster: self.cluster.clone(),
            component: "containerd".into(),
            message: format!("loading the image {} failed: {message}", archive.display()),
            log: self.paths.dir.join("containerd.log"),
        };
        let output = tokio::time::timeout(
            START_LIMIT,
            tokio::process::Command::new("ctr")
                .arg("--address")
                .arg(self.paths.containerd_socket())
                .args(["--namespace", "k8s.io", "images", "import"])
                .arg(archive)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .map_err(|_| failed(format!("ctr took over {}s", START_LIMIT.as_secs())))?
        .map_err(|error| failed(error.to_string()))?;
        let text = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(failed(format!(
                "ctr {}: {}{}",
                output.status,
                text.trim(),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        let loaded = imported(&text);
        if loaded.is_empty() {
            return Err(failed(format!(
                "ctr named no image (its archive has no org.opencontainers.image.ref.name?): {}",
                text.trim()
            )));
        }
        Ok(loaded)
    }

    /// Polls `ready` until it holds; fails when the node's process ended, and after
    /// [`START_LIMIT`], with the end of its log.
    async fn wait_until<F, Fut>(&self, what: &str, ready: F) -> Result<()>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + START_LIMIT;
        loop {
            if ready().await {
                return Ok(());
            }
            let exited = self
                .component
                .lock()
                .await
                .as_mut()
                .and_then(Component::exited);
            let message = match exited {
                Some(status) => Some(format!("it exited ({status})")),
                None if tokio::time::Instant::now() > deadline => {
                    Some(format!("waited {}s for {what}", START_LIMIT.as_secs()))
                }
                None => None,
            };
            if let Some(message) = message {
                let log = self.paths.dir.join("kubelet.log");
                return Err(Error::ComponentFailed {
                    cluster: self.cluster.clone(),
                    component: "the real node".into(),
                    message: format!(
                        "{message}; its log ends: {}; containerd's: {}",
                        crate::real::process::log_tail(&log, 8),
                        crate::real::process::log_tail(&self.paths.dir.join("containerd.log"), 4)
                    ),
                    log,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Gives the loaded image `from` another name `to` in the node's store (a new tag for the
    /// same image, as a registry would serve a rebuilt one).
    pub async fn tag_image(&self, from: &str, to: &str) -> Result<()> {
        self.ctr(
            &["images", "tag", "--force", from, to],
            &format!("tagging {from} as {to}"),
        )
        .await
    }

    /// Kills container `id` (its process, SIGKILL), as an OOM kill or a crash would: the kubelet
    /// sees it exit and restarts it by the Pod's policy.
    pub async fn kill_container(&self, id: &str) -> Result<()> {
        self.ctr(
            &["tasks", "kill", "--signal", "SIGKILL", id],
            &format!("killing container {id}"),
        )
        .await
    }

    /// `ctr ARGS` on the node's containerd, in the CRI's namespace.
    async fn ctr(&self, args: &[&str], what: &str) -> Result<()> {
        let failed = |message: String| Error::ComponentFailed {
            cluster: self.cluster.clone(),
            component: "containerd".into(),
            message: format!("{what} failed: {message}"),
            log: self.paths.dir.join("containerd.log"),
        };
        let output = tokio::process::Command::new("ctr")
            .arg("--address")
            .arg(self.paths.containerd_socket())
            .args(["--namespace", "k8s.io"])
            .args(args)
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|error| failed(error.to_string()))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(failed(
                String::from_utf8_lossy(&output.stderr).trim().to_string(),
            ))
        }
    }

    /// The images loaded into the node, pause first.
    pub fn images(&self) -> &[LoadedImage] {
        &self.images
    }

    /// The node's directory: its logs (`kubelet.log`, `containerd.log`), `/var/log/pods` under
    /// `root/var/log/pods`.
    pub fn dir(&self) -> &Path {
        &self.paths.dir
    }

    /// Stops the node: every process in its namespaces goes, then its cgroups and its files.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        let egress = self
            .egress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(egress) = egress {
            let _ = egress.await;
        }
        if let Some(mut component) = self.component.lock().await.take() {
            component.stop_and_wait(Duration::from_secs(20)).await;
        }
        // node.sh removes the cgroups after the node's processes are gone; a cgroup whose last
        // task was still exiting when it gave up is taken here.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !remove_cgroups(Path::new(CGROUP_ROOT), &self.cgroup)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Where the cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Removes the cgroup `name` (a path from a hierarchy's root) and every cgroup below it, deepest
/// first, in every hierarchy under `root`: whether none is left.
fn remove_cgroups(root: &Path, name: &str) -> bool {
    let Ok(hierarchies) = std::fs::read_dir(root) else {
        return true;
    };
    let mut all_gone = true;
    for hierarchy in hierarchies.flatten() {
        let top = hierarchy.path().join(name.trim_start_matches('/'));
        if !top.is_dir() {
            continue;
        }
        for dir in deepest_first(&top) {
            // A cgroup's files go with it; only the directory is removed.
            let _ = std::fs::remove_dir(&dir);
        }
        all_gone &= !top.exists();
    }
    all_gone
}

/// `top` and every directory below it, children before their parents.
fn deepest_first(top: &Path) -> Vec<PathBuf> {
    let mut order = Vec::new();
    if let Ok(entries) = std::fs::read_dir(top) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                order.extend(deepest_first(&entry.path()));
            }
        }
    }
    order.push(top.to_path_buf());
    order
}

/// Whether a Node says it is Ready.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// The images `ctr images import` says it loaded: lines `unpacking NAME (DIGEST)...done`.
pub fn imported(output: &str) -> Vec<LoadedImage> {
    output
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("unpacking ")?;
            let (name, rest) = rest.split_once(" (")?;
            let (digest, _) = rest.split_once(')')?;
            Some(LoadedImage {
                name: name.to_string(),
                digest: digest.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_tree_is_removed_deepest_first_in_every_hierarchy() {
        // Plain directories stand in for cgroupfs (where rmdir takes a cgroup's files along).
        let root = tempfile::tempdir().unwrap();
        for hierarchy in ["cpu", "memory"] {
            let leaf = root
                .path()
                .join(hierarchy)
                .join("comb-node-x/kubepods/pod1/c1");
            std::fs::create_dir_all(&leaf).unwrap();
        }
        std::fs::create_dir_all(root.path().join("pids/other")).unwrap();
        let order = deepest_first(&root.path().join("cpu/comb-node-x"));
        assert_eq!(
            order.first(),
            Some(&root.path().join("cpu/comb-node-x/kubepods/pod1/c1"))
        );
        assert_eq!(order.last(), Some(&root.path().join("cpu/comb-node-x")));
        assert!(remove_cgroups(root.path(), "/comb-node-x"));
        assert!(!root.path().join("cpu/comb-node-x").exists());
        assert!(!root.path().join("memory/comb-node-x").exists());
        assert!(root.path().join("pids/other").exists());
    }

    #[test]
    fn the_images_ctr_loaded_are_read_from_its_output() {
        let cases = [
            (
                "unpacking localhost/comb:0.1.0 (sha256:8b1f7c2d)...done\n",
                vec![("localhost/comb:0.1.0", "sha256:8b1f7c2d")],
            ),
            (
                "unpacking localhost/comb-sandbox/pause:1.37.2 (sha256:aa)...done\nunpacking localhost/x:1 (sha256:bb)...done",
                vec![
                    ("localhost/comb-sandbox/pause:1.37.2", "sha256:aa"),
                    ("localhost/x:1", "sha256:bb"),
                ],
            ),
            ("", vec![]),
            ("ctr: image might be filtered out\n", vec![]),
        ];
        for (output, expected) in cases {
            let loaded: Vec<(String, String)> = imported(output)
                .into_iter()
                .map(|image| (image.name, image.digest))
                .collect();
            let expected: Vec<(String, String)> = expected
                .into_iter()
                .map(|(name, digest)| (name.to_string(), digest.to_string()))
                .collect();
            assert_eq!(loaded, expected, "{output}");
        }
    }
}
