//! Cluster DNS: CoreDNS per cluster, serving `cluster.local` from that cluster's API (its
//! kubernetes plugin, through the node's API relay) at the kube-dns Service's ClusterIP, as in a
//! real cluster; and the names the sandbox serves outside any cluster, as external-dns would
//! publish them: a LoadBalancer Service annotated `external-dns.alpha.kubernetes.io/hostname:
//! db.prod.example` makes `db.prod.example` resolve to its ingress IP in every cluster (CoreDNS's
//! hosts plugin reads the sandbox's file). Nothing is forwarded anywhere else: a name in neither
//! does not resolve.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Value, json};

use crate::real::addresses::DNS_SERVICE_IP;

/// The cluster domain of every sandbox cluster.
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// The annotation external-dns reads the names of a Service from (comma-separated).
pub const HOSTNAME_ANNOTATION: &str = "external-dns.alpha.kubernetes.io/hostname";

/// The field manager of what the sandbox writes for its DNS.
pub const MANAGER: &str = "comb-sandbox-network";

/// How often CoreDNS looks at the sandbox's names again.
const HOSTS_RELOAD: &str = "250ms";

/// The Corefile of one cluster's CoreDNS: on the node's address, `cluster.local` from the API
/// through `kubeconfig`'s `context`, the sandbox's names from `hosts`. No `cache` plugin: a
/// Service's change reaches callers at once, and the sandbox measures what kube-proxy and comb
/// take, not a cache's TTL. No `forward`: nothing leaves the sandbox.
pub fn corefile(node_ip: Ipv4Addr, hosts: &Path, kubeconfig: &Path, context: &str) -> String {
    format!(
        ".:53 {{
    bind {node_ip}
    ready 127.0.0.1:8181
    errors
    hosts {hosts} {{
        reload {HOSTS_RELOAD}
        fallthrough
    }}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} {context}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
}}
",
        hosts = hosts.display(),
        kubeconfig = kubeconfig.display(),
    )
}

/// `kube-system/kube-dns` at [`DNS_SERVICE_IP`] and the EndpointSlice that points it at CoreDNS
/// on the node (`node_ip:53`), as kubeadm's Service points at the CoreDNS Pods.
pub fn kube_dns(node_ip: Ipv4Addr) -> [Value; 2] {
    let ports = |port_key: &str| {
        json!([
            {"name": "dns", port_key: 53, "protocol": "UDP"},
            {"name": "dns-tcp", port_key: 53, "protocol": "TCP"}
        ])
    };
    [
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": "kube-system",
                         "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
            "spec": {"clusterIP": DNS_SERVICE_IP.to_string(), "ports": ports("port")}
        }),
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kube-dns-coredns", "namespace": "kube-system",
                         "labels": {"kubernetes.io/service-name": "kube-dns",
                                    "endpointslice.kubernetes.io/managed-by": MANAGER}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [node_ip.to_string()], "conditions": {"ready": true},
                           "nodeName": crate::real::NODE_NAME}],
            "ports": ports("port")
        }),
    ]
}

/// The search path of a Pod in `namespace`, as the kubelet writes it into resolv.conf.
pub fn search_path(namespace: &str) -> Vec<String> {
    vec![
        format!("{namespace}.svc.{CLUSTER_DOMAIN}"),
        format!("svc.{CLUSTER_DOMAIN}"),
        CLUSTER_DOMAIN.to_string(),
    ]
}

/// The names `service` publishes, each with its ingress IPs: what external-dns would write.
pub fn published_names(service: &Value) -> Vec<(String, Ipv4Addr)> {
    let names: Vec<String> = service["metadata"]["annotations"][HOSTNAME_ANNOTATION]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .map(|name| name.trim().trim_end_matches('.').to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect();
    let ips: Vec<Ipv4Addr> = service["status"]["loadBalancer"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ingress| ingress["ip"].as_str()?.parse().ok())
        .collect();
    names
        .iter()
        .flat_map(|name| ips.iter().map(move |ip| (name.clone(), *ip)))
        .collect()
}

/// Names with their addresses, by cluster, then by the `namespace/service` that publishes them.
type Records = BTreeMap<String, BTreeMap<String, Vec<(String, Ipv4Addr)>>>;

/// The sandbox's names outside the clusters, in a hosts file every cluster's CoreDNS reads.
#[derive(Debug)]
pub struct ExternalNames {
    path: PathBuf,
    /// By cluster, then `namespace/service`: the names that Service publishes.
    records: Mutex<Records>,
}

impl ExternalNames {
    /// Names written to `path` (created empty now).
    pub fn new(path: PathBuf) -> std::io::Result<ExternalNames> {
        let names = ExternalNames {
            path,
            records: Mutex::new(BTreeMap::new()),
        };
        names.write(&BTreeMap::new())?;
        Ok(names)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What Service `key` of `cluster` publishes now (nothing: it publishes no longer).
    pub fn set(
        &self,
        cluster: &str,
        key: &str,
        records: Vec<(String, Ipv4Addr)>,
    ) -> std::io::Result<()> {
        let mut all = self
            .records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let of_cluster = all.entry(cluster.to_string()).or_default();
        let changed = if records.is_empty() {
            of_cluster.remove(key).is_some()
        } else {
            of_cluster.insert(key.to_string(), records.clone()) != Some(records)
        };
        if changed {
            self.write(&all)?;
        }
        Ok(())
    }

    fn write(&self, all: &Records) -> std::io::Result<()> {
        let text = hosts_file(
            all.values()
                .flat_map(|services| services.values().flatten()),
        );
        // Atomically: CoreDNS may read it at any moment.
        let temporary = self.path.with_extension("tmp");
        std::fs::write(&temporary, text)?;
        std::fs::rename(&temporary, &self.path)
    }
}

/// A hosts file of `records`: one line per address with its names, sorted.
pub fn hosts_file<'a>(records: impl Iterator<Item = &'a (String, Ipv4Addr)>) -> String {
    let mut by_ip: BTreeMap<Ipv4Addr, Vec<&str>> = BTreeMap::new();
    for (name, ip) in records {
        let names = by_ip.entry(*ip).or_default();
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    let mut text = String::from(
        "# The sandbox's external names (LoadBalancer Services with the annotation external-dns.alpha.kubernetes.io/hostname)\n",
    );
    for (ip, mut names) in by_ip {
        names.sort_unstable();
        text.push_str(&format!("{ip} {}\n", names.join(" ")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corefile_serves_the_cluster_and_the_sandboxs_names_and_forwards_nothing() {
        let text = corefile(
            Ipv4Addr::new(172, 18, 1, 2),
            Path::new("/tmp/x/external.hosts"),
            Path::new("/tmp/x/dev/kubeconfig"),
            "dev",
        );
        assert!(text.contains("bind 172.18.1.2"));
        assert!(text.contains("hosts /tmp/x/external.hosts {"));
        assert!(text.contains("kubeconfig /tmp/x/dev/kubeconfig dev"));
        assert!(!text.contains("forward"));
    }

    #[test]
    fn a_service_publishes_each_name_at_each_ingress_ip() {
        let service = json!({
            "metadata": {"annotations": {HOSTNAME_ANNOTATION: "db.prod.example, DB2.prod.example."}},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}
        });
        let ip = Ipv4Addr::new(192, 0, 2, 10);
        assert_eq!(
            published_names(&service),
            [
                ("db.prod.example".to_string(), ip),
                ("db2.prod.example".to_string(), ip)
            ]
        );
        let pending = json!({"metadata": {"annotations": {HOSTNAME_ANNOTATION: "db.prod.example"}},
                             "status": {"loadBalancer": {}}});
        assert_eq!(published_names(&pending), []);
        assert_eq!(published_names(&json!({"metadata": {}})), []);
    }

    #[test]
    fn the_hosts_file_has_a_line_per_address() {
        let records = [
            ("db.prod.example".to_string(), Ipv4Addr::new(192, 0, 2, 10)),
            (
                "cache.prod.example".to_string(),
                Ipv4Addr::new(192, 0, 2, 3),
            ),
            ("pg.prod.example".to_string(), Ipv4Addr::new(192, 0, 2, 10)),
        ];
        let text = hosts_file(records.iter());
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            lines,
            [
                "192.0.2.3 cache.prod.example",
                "192.0.2.10 db.prod.example pg.prod.example"
            ]
        );
    }

    #[test]
    fn names_written_and_withdrawn() {
        let dir = tempfile::tempdir().expect("a directory");
        let names = ExternalNames::new(dir.path().join("external.hosts")).expect("the file");
        let ip = Ipv4Addr::new(192, 0, 2, 10);
        names
            .set("prod", "platform/db", vec![("db.prod.example".into(), ip)])
            .expect("written");
        let read = || std::fs::read_to_string(names.path()).expect("readable");
        assert!(read().contains("192.0.2.10 db.prod.example"));
        names
            .set("prod", "platform/db", Vec::new())
            .expect("written");
        assert!(!read().contains("db.prod.example"));
    }
}
