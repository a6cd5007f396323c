//! What the real node's programs read: containerd's configuration, the kubelet's, the CNI
//! network, and kube-apiserver's egress selection. Pure functions of the node's paths and
//! addresses, so that each is a table test; the paths are all under the node's directory, and
//! the machine's own `/var/lib`, `/var/log` and `/run` are bind-mounted over from there inside
//! the node's mount namespace (`node-init.sh`), so nothing the node writes lands outside it.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::real::addresses::{Cidr, DNS_SERVICE_IP};
use crate::real::network::dns::CLUSTER_DOMAIN;

/// The node's name, beside kwok's `sandbox-node`.
pub const REAL_NODE_NAME: &str = "real-node";

/// The taint only Pods meant for the real node tolerate (and the label that selects it).
pub const REAL_NODE_TAINT: &str = "sandbox.comb.internal/real-node";

/// Where the kubelet serves (logs, exec) inside the node's network namespace: a real node's port.
pub const KUBELET_PORT: u16 = 10250;

/// The Debian package's CNI plugins (`containernetworking-plugins`).
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// Where the node's files are: everything under one directory of the cluster's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePaths {
    pub dir: PathBuf,
}

impl NodePaths {
    pub fn new(dir: &Path) -> NodePaths {
        NodePaths {
            dir: dir.to_path_buf(),
        }
    }
    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }
    pub fn containerd_config(&self) -> PathBuf {
        self.dir.join("containerd.toml")
    }
    pub fn kubelet_config(&self) -> PathBuf {
        self.dir.join("kubelet.json")
    }
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("cni").join("net.d")
    }
    /// The egress proxy kube-apiserver dials the node's network through.
    pub fn egress_socket(&self) -> PathBuf {
        self.dir.join("egress.sock")
    }
    pub fn egress_config(&self) -> PathBuf {
        self.dir.join("egress-selector.json")
    }
    /// What stands in for `/var/lib`, `/var/log` and `/run` inside the node's mount namespace.
    pub fn overlay(&self, of: &str) -> PathBuf {
        self.dir.join("root").join(of.trim_start_matches('/'))
    }
}

/// The addresses the node's configuration names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeAddresses {
    /// The node's address (the node namespace's `eth0`), shared with kwok's node.
    pub node_ip: Ipv4Addr,
    /// Where the node's Pods get their addresses, apart from kwok's.
    pub pod_cidr: Cidr,
}

/// containerd 1.6's configuration (format version 2): its own root, state and sockets, the CRI
/// plugin with the locally built pause image, runc through the v2 shim with cgroupfs, CNI from
/// Debian's plugins with the sandbox's network, Pod network namespaces under the node's
/// directory. `restrict_oom_score_adj`: this machine's root has no CAP_SYS_RESOURCE, and runc
/// cannot lower a sandbox's oom_score_adj without it (every Pod sandbox then fails with `can't
/// get final child's PID from pipe: EOF`).
pub fn containerd_toml(paths: &NodePaths, pause_image: &str, runc: &Path) -> String {
    let p = |path: PathBuf| path.display().to_string();
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_image}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under = "{netns}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "{runc}"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{cni_bin}"
  conf_dir = "{cni_conf}"
"#,
        root = p(paths.dir.join("containerd").join("root")),
        state = p(paths.dir.join("containerd").join("state")),
        socket = p(paths.containerd_socket()),
        opt = p(paths.dir.join("containerd").join("opt")),
        netns = p(paths.dir.join("netns")),
        cni_bin = CNI_BIN_DIR,
        cni_conf = p(paths.cni_conf_dir()),
        runc = runc.display(),
    )
}

/// The CNI network of the node's Pods: a veth pair per Pod into the node's namespace (Debian's
/// `ptp` plugin: the Pod's address on its `eth0`, a /32 route to it in the node, a default route
/// through the node), addresses from `host-local` in the node's own range, as the sandbox wires
/// kwok's Pods; kube-proxy in the node's namespace serves their Services alike. No masquerade:
/// inside the sandbox every address is routed.
pub fn cni_conflist(paths: &NodePaths, addresses: &NodeAddresses) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "comb-sandbox",
        "plugins": [{
            "type": "ptp",
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": addresses.pod_cidr.to_string()}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": paths.dir.join("cni").join("ipam").display().to_string()
            }
        }]
    })
}

/// The kubelet's configuration, as real-kube.md §8 found it working on these machines (cgroups
/// v1 kept with `failCgroupV1: false`, cgroupfs, no swap check), with:
/// - the node's cgroups under `cgroup_root`, a cgroup of the sandbox's own in every hierarchy
///   (removed with the node), never the machine's `kubepods`;
/// - `registerWithTaints`, so that only Pods meant for it come;
/// - the cluster's DNS and domain, and no resolv.conf of the machine's passed on to Pods;
/// - no eviction and no image garbage collection on this machine's shared disk (kind does so);
/// - anonymous access with AlwaysAllow: it listens only inside the node's namespace, which only
///   the API server's egress proxy reaches from outside.
pub fn kubelet_config(paths: &NodePaths, cgroup_root: &str) -> Value {
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": false,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "containerRuntimeEndpoint": format!("unix://{}", paths.containerd_socket().display()),
        "failSwapOn": false,
        "address": "0.0.0.0",
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": true},
            "webhook": {"enabled": false},
            "x509": {}
        },
        "authorization": {"mode": "AlwaysAllow"},
        "registerWithTaints": [{"key": REAL_NODE_TAINT, "value": "true", "effect": "NoSchedule"}],
        "clusterDNS": [DNS_SERVICE_IP.to_string()],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "",
        "podLogsDir": "/var/log/pods",
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "0%",
            "nodefs.inodesFree": "0%",
            "imagefs.available": "0%"
        },
        "imageGCHighThresholdPercent": 100,
        "serializeImagePulls": false,
        "maxPods": 110,
        "rotateCertificates": false,
        "serverTLSBootstrap": false
    })
}

/// The kubelet's flags beside its configuration file.
pub fn kubelet_args(paths: &NodePaths, kubeconfig: &Path, node_ip: Ipv4Addr) -> Vec<String> {
    let p = |path: PathBuf| path.display().to_string();
    vec![
        format!("--config={}", p(paths.kubelet_config())),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--hostname-override={REAL_NODE_NAME}"),
        format!("--node-ip={node_ip}"),
        format!("--node-labels={REAL_NODE_TAINT}=true"),
        format!("--root-dir={}", p(paths.dir.join("kubelet"))),
        format!("--cert-dir={}", p(paths.dir.join("kubelet").join("pki"))),
    ]
}

/// kube-apiserver's egress selection: what it sends into the cluster's network (to kubelets for
/// logs and exec, to Services of admission webhooks, to `proxy` subresources) goes through an
/// HTTP CONNECT proxy on `socket`, which the sandbox serves and which dials from inside the
/// node's namespace, as konnectivity does for a control plane outside its nodes' network. The
/// control plane's own traffic and etcd's stay direct.
pub fn egress_selector(socket: &Path) -> Value {
    json!({
        "apiVersion": "apiserver.k8s.io/v1beta1",
        "kind": "EgressSelectorConfiguration",
        "egressSelections": [{
            "name": "cluster",
            "connection": {
                "proxyProtocol": "HTTPConnect",
                "transport": {"uds": {"udsName": socket.display().to_string()}}
            }
        }]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> NodePaths {
        NodePaths::new(Path::new("/tmp/comb-kube-x/prod/node"))
    }

    #[test]
    fn every_path_of_the_node_is_under_its_directory() {
        let paths = paths();
        let containerd = containerd_toml(
            &paths,
            "localhost/comb-sandbox/pause:1.37.2",
            Path::new("/usr/sbin/runc"),
        );
        for line in containerd.lines() {
            // Every quoted absolute path but the machine's CNI plugins.
            for quoted in line.split('"').skip(1).step_by(2) {
                if quoted.starts_with('/') && quoted != CNI_BIN_DIR && quoted != "/usr/sbin/runc" {
                    assert!(quoted.starts_with("/tmp/comb-kube-x/prod/node/"), "{line}");
                }
            }
        }
        assert!(containerd.contains("sandbox_image = \"localhost/comb-sandbox/pause:1.37.2\""));
        assert!(containerd.contains("restrict_oom_score_adj = true"));
        let kubelet = kubelet_config(&paths, "/comb-node-x");
        assert_eq!(kubelet["cgroupRoot"], "/comb-node-x");
        assert_eq!(
            kubelet["containerRuntimeEndpoint"],
            "unix:///tmp/comb-kube-x/prod/node/containerd.sock"
        );
        for arg in kubelet_args(&paths, Path::new("/k"), Ipv4Addr::new(172, 18, 0, 2)) {
            if let Some((_, value)) = arg.split_once("dir=") {
                assert!(value.starts_with("/tmp/comb-kube-x/prod/node/"), "{arg}");
            }
        }
        assert_eq!(
            paths.overlay("/var/lib"),
            Path::new("/tmp/comb-kube-x/prod/node/root/var/lib")
        );
    }

    #[test]
    fn the_pods_get_the_nodes_own_range_and_a_default_route() {
        let addresses = NodeAddresses {
            node_ip: Ipv4Addr::new(172, 18, 1, 2),
            pod_cidr: Cidr {
                address: Ipv4Addr::new(10, 245, 128, 0),
                prefix: 24,
            },
        };
        let conflist = cni_conflist(&paths(), &addresses);
        let plugin = &conflist["plugins"][0];
        assert_eq!(plugin["type"], "ptp");
        assert_eq!(plugin["ipMasq"], false);
        assert_eq!(plugin["ipam"]["ranges"][0][0]["subnet"], "10.245.128.0/24");
        assert_eq!(plugin["ipam"]["routes"][0]["dst"], "0.0.0.0/0");
    }

    #[test]
    fn only_the_clusters_network_goes_through_the_egress_proxy() {
        let config = egress_selector(Path::new("/d/egress.sock"));
        let selections = config["egressSelections"].as_array().unwrap();
        assert_eq!(selections.len(), 1);
        assert_eq!(selections[0]["name"], "cluster");
        assert_eq!(
            selections[0]["connection"]["transport"]["uds"]["udsName"],
            "/d/egress.sock"
        );
    }
}
