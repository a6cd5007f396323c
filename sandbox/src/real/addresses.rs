//! Where each real cluster of a sandbox lives on the network, by its place in `--clusters`:
//! distinct node addresses, Pod CIDRs and LoadBalancer pools, as separate real clusters have,
//! so that with `--network` their packets can be routed between them (and without it, kwok's
//! node and Pod addresses and the LoadBalancer ingress IPs already tell the clusters apart).
//!
//! | cluster | node | Pod CIDR (kwok's half; a real node's /24) | LoadBalancer pool |
//! |---|---|---|---|
//! | 0 | 172.18.0.2 (router 172.18.0.1) | 10.244.0.0/16 (10.244.0.0/17; 10.244.128.0/24) | 192.0.2.1-62 |
//! | 1 | 172.18.1.2 | 10.245.0.0/16 | 192.0.2.65-126 |
//! | 4 | 172.18.4.2 | 10.248.0.0/16 | 198.51.100.1-62 |
//! | 11 | 172.18.11.2 | 10.255.0.0/16 | 203.0.113.193-254 |
//!
//! The pools are quarters of the documentation ranges (RFC 5737): addresses nobody else uses, and
//! only ever inside the sandbox's own network namespaces. Every cluster has the same Service
//! CIDR, as real clusters do: a ClusterIP means something only inside its own cluster.

use std::net::Ipv4Addr;

/// How many clusters one sandbox can place (twelve quarters of the three documentation ranges).
pub const MAX_CLUSTERS: usize = 12;

/// The Service CIDR of every cluster (kube-apiserver's and kube-controller-manager's flag).
pub const SERVICE_CIDR: &str = "10.96.0.0/16";

/// The ClusterIP of `kube-system/kube-dns`, kubeadm's choice (the tenth of the Service CIDR).
pub const DNS_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);

/// The first address of the Pod CIDRs, cluster 0's: `10.244.0.0/16`.
const POD_CIDR_BASE: u8 = 244;

/// The documentation ranges the LoadBalancer pools are cut from, a quarter per cluster.
const POOL_RANGES: [[u8; 3]; 3] = [[192, 0, 2], [198, 51, 100], [203, 0, 113]];

/// An IPv4 network: its first address and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub address: Ipv4Addr,
    pub prefix: u8,
}

impl Cidr {
    /// Everything: the destination of a default route.
    pub const DEFAULT: Cidr = Cidr {
        address: Ipv4Addr::UNSPECIFIED,
        prefix: 0,
    };

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = u32::MAX
            .checked_shl(32 - u32::from(self.prefix))
            .unwrap_or(0);
        u32::from(ip) & mask == u32::from(self.address) & mask
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

/// The addresses of one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterAddresses {
    /// The node's address (kwok's `--node-ip`, the node namespace's `eth0`).
    pub node_ip: Ipv4Addr,
    /// The sandbox router's address on the node's link, the node's default gateway.
    pub router_ip: Ipv4Addr,
    /// The node's link: `node_ip` and `router_ip` are in it.
    pub node_link: Cidr,
    /// The cluster's Pod network, kube-proxy's `--cluster-cidr`: kwok's range and the real
    /// node's.
    pub pod_cidr: Cidr,
    /// Where kwok takes Pod IPs from (`--cidr`): the lower half of `pod_cidr`.
    pub kwok_pod_cidr: Cidr,
    /// Where a real node's Pods get theirs (`--real-node`): a /24 of the upper half.
    pub real_node_pod_cidr: Cidr,
    /// Where LoadBalancer Services get their ingress IP from (the first and last address).
    pub load_balancer_pool: (Ipv4Addr, Ipv4Addr),
    /// The pool as a network, for the router's route to the node.
    pub load_balancer_cidr: Cidr,
}

impl ClusterAddresses {
    /// The addresses of the cluster at `index` in `--clusters`; `None` past [`MAX_CLUSTERS`].
    pub fn of(index: usize) -> Option<ClusterAddresses> {
        if index >= MAX_CLUSTERS {
            return None;
        }
        let octet = u8::try_from(index).ok()?;
        let [a, b, c] = POOL_RANGES[index / 4];
        let quarter = u8::try_from(index % 4).ok()? * 64;
        Some(ClusterAddresses {
            node_ip: Ipv4Addr::new(172, 18, octet, 2),
            router_ip: Ipv4Addr::new(172, 18, octet, 1),
            node_link: Cidr {
                address: Ipv4Addr::new(172, 18, octet, 0),
                prefix: 24,
            },
            pod_cidr: Cidr {
                address: Ipv4Addr::new(10, POD_CIDR_BASE + octet, 0, 0),
                prefix: 16,
            },
            kwok_pod_cidr: Cidr {
                address: Ipv4Addr::new(10, POD_CIDR_BASE + octet, 0, 0),
                prefix: 17,
            },
            real_node_pod_cidr: Cidr {
                address: Ipv4Addr::new(10, POD_CIDR_BASE + octet, 128, 0),
                prefix: 24,
            },
            load_balancer_pool: (
                Ipv4Addr::new(a, b, c, quarter + 1),
                Ipv4Addr::new(a, b, c, quarter + 62),
            ),
            load_balancer_cidr: Cidr {
                address: Ipv4Addr::new(a, b, c, quarter),
                prefix: 26,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cluster_has_addresses_of_its_own() {
        let ip = |text: &str| text.parse::<Ipv4Addr>().expect("an address");
        let cases = [
            (0, "172.18.0.2", "10.244.0.0/16", "192.0.2.1", "192.0.2.62"),
            (
                1,
                "172.18.1.2",
                "10.245.0.0/16",
                "192.0.2.65",
                "192.0.2.126",
            ),
            (
                3,
                "172.18.3.2",
                "10.247.0.0/16",
                "192.0.2.193",
                "192.0.2.254",
            ),
            (
                4,
                "172.18.4.2",
                "10.248.0.0/16",
                "198.51.100.1",
                "198.51.100.62",
            ),
            (
                11,
                "172.18.11.2",
                "10.255.0.0/16",
                "203.0.113.193",
                "203.0.113.254",
            ),
        ];
        for (index, node, pods, first, last) in cases {
            let addresses = ClusterAddresses::of(index).expect("addresses");
            assert_eq!(addresses.node_ip, ip(node), "{index}");
            assert_eq!(addresses.pod_cidr.to_string(), pods, "{index}");
            assert_eq!(
                addresses.load_balancer_pool,
                (ip(first), ip(last)),
                "{index}"
            );
            assert!(addresses.node_link.contains(addresses.router_ip));
            // kwok's Pods and the real node's share the cluster's network, never an address.
            for part in [addresses.kwok_pod_cidr, addresses.real_node_pod_cidr] {
                assert!(addresses.pod_cidr.contains(part.address), "{index}");
            }
            assert!(
                !addresses
                    .kwok_pod_cidr
                    .contains(addresses.real_node_pod_cidr.address)
            );
            assert!(addresses.load_balancer_cidr.contains(ip(first)));
            assert!(addresses.load_balancer_cidr.contains(ip(last)));
        }
        assert_eq!(ClusterAddresses::of(MAX_CLUSTERS), None);
        // No two clusters share a node link, a Pod CIDR or a pool.
        let all: Vec<ClusterAddresses> =
            (0..MAX_CLUSTERS).filter_map(ClusterAddresses::of).collect();
        for (i, one) in all.iter().enumerate() {
            for other in &all[i + 1..] {
                assert!(!one.pod_cidr.contains(other.pod_cidr.address));
                assert!(!one.node_link.contains(other.node_ip));
                assert!(!one.load_balancer_cidr.contains(other.load_balancer_pool.0));
            }
        }
    }
}
