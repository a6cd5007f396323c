//! The LoadBalancer ingress IPs of a cluster, as MetalLB or cloud-provider-kind give them: what
//! a cloud controller writes into a Service's status some time after the create. Both backends
//! decide with [`LoadBalancerPool::status_for`]: the emulator's simulated cloud (`sim::service`)
//! and the real backend's controller (`real::load_balancer`), whose addresses kube-proxy then
//! serves when the sandbox has a network.
//!
//! A Service may ask for its address, as MetalLB's users do: the annotation
//! `metallb.io/loadBalancerIPs` (or the older `metallb.universe.tf/loadBalancerIPs`), or the
//! deprecated `spec.loadBalancerIP`. An address in the pool and free is given; any other request
//! leaves the Service pending, as MetalLB does, instead of handing out an address the Service did
//! not ask for. A Service with a `spec.loadBalancerClass` belongs to another controller.

use std::net::Ipv4Addr;

use serde_json::{Value, json};

use crate::service_addresses::{Pool, ip_of};

/// The annotations a Service names its address with, MetalLB's current one first.
pub const REQUESTED_IP_ANNOTATIONS: [&str; 2] = [
    "metallb.io/loadBalancerIPs",
    "metallb.universe.tf/loadBalancerIPs",
];

/// The ingress IPs of one cluster: which are handed out, and to whom next.
#[derive(Debug, Clone)]
pub struct LoadBalancerPool {
    pool: Pool,
}

fn ingress_ips(service: &Value) -> impl Iterator<Item = &Value> {
    service["status"]["loadBalancer"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|ingress| &ingress["ip"])
}

/// The address `service` asks for, if it names one (the first IPv4 address of the annotation).
pub fn requested_ip(service: &Value) -> Option<Ipv4Addr> {
    let annotations = &service["metadata"]["annotations"];
    REQUESTED_IP_ANNOTATIONS
        .iter()
        .find_map(|key| annotations[key].as_str())
        .or_else(|| service["spec"]["loadBalancerIP"].as_str())
        .and_then(|list| {
            list.split(',')
                .find_map(|address| address.trim().parse::<Ipv4Addr>().ok())
        })
}

/// Whether this pool's controller serves `service`: a LoadBalancer of no other class.
pub fn is_ours(service: &Value) -> bool {
    service["spec"]["type"] == "LoadBalancer"
        && service["spec"]["loadBalancerClass"]
            .as_str()
            .is_none_or(str::is_empty)
}

fn ingress(ip: u32) -> Value {
    json!({"loadBalancer": {"ingress": [{"ip": Ipv4Addr::from(ip).to_string(), "ipMode": "VIP"}]}})
}

impl LoadBalancerPool {
    /// The addresses `first..=last`, handed out in order.
    pub fn new(first: Ipv4Addr, last: Ipv4Addr) -> LoadBalancerPool {
        LoadBalancerPool {
            pool: Pool::new(u32::from(first), u32::from(last)),
        }
    }

    /// Marks what `service` holds as taken (a Service that existed before the controller).
    pub fn hold(&mut self, service: &Value) {
        ingress_ips(service)
            .filter_map(ip_of)
            .for_each(|ip| self.pool.hold(ip));
    }

    /// Frees what a deleted `service` held.
    pub fn release(&mut self, service: &Value) {
        ingress_ips(service)
            .filter_map(ip_of)
            .for_each(|ip| self.pool.release(ip));
    }

    /// The `status` `service` must get (`{"loadBalancer": ...}`), or `None` when it has what it
    /// should. An address handed out is held from here on.
    pub fn status_for(&mut self, service: &Value) -> Option<Value> {
        if service["metadata"]["deletionTimestamp"].is_string() {
            return None;
        }
        let current: Vec<u32> = ingress_ips(service).filter_map(ip_of).collect();
        if !is_ours(service) {
            if current.is_empty() {
                return None;
            }
            current.iter().for_each(|ip| self.pool.release(*ip));
            return Some(json!({"loadBalancer": {}}));
        }
        let requested = requested_ip(service).map(u32::from);
        let available = |pool: &Pool, ip: u32| pool.contains(ip) && !pool.is_taken(ip);
        match (current.first(), requested) {
            // Asked for another address than it has (the annotation changed): moved when free.
            (Some(held), Some(wanted)) if *held != wanted => {
                if !available(&self.pool, wanted) {
                    return None;
                }
                current.iter().for_each(|ip| self.pool.release(*ip));
                self.pool.hold(wanted);
                Some(ingress(wanted))
            }
            (Some(_), _) => None,
            (None, Some(wanted)) => available(&self.pool, wanted).then(|| {
                self.pool.hold(wanted);
                ingress(wanted)
            }),
            (None, None) => self.pool.take().map(ingress),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(spec: Value, annotations: Value, status: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default", "annotations": annotations},
               "spec": spec, "status": status})
    }

    fn ip(ip: &str) -> Value {
        json!({"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}})
    }

    fn pool() -> LoadBalancerPool {
        LoadBalancerPool::new(Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 62))
    }

    #[test]
    fn load_balancers_get_an_address_and_others_lose_theirs() {
        let mut pool = pool();
        let lb = json!({"type": "LoadBalancer"});
        let none = json!({});
        let empty = json!({"loadBalancer": {}});
        let cases = [
            (
                service(lb.clone(), none.clone(), empty.clone()),
                Some(ip("192.0.2.1")),
            ),
            (service(lb.clone(), none.clone(), ip("192.0.2.1")), None),
            (
                service(json!({"type": "ClusterIP"}), none.clone(), empty.clone()),
                None,
            ),
            (
                service(json!({"type": "ClusterIP"}), none.clone(), ip("192.0.2.9")),
                Some(empty.clone()),
            ),
            (
                service(lb.clone(), none.clone(), empty.clone()),
                Some(ip("192.0.2.2")),
            ),
            (
                service(
                    json!({"type": "LoadBalancer", "loadBalancerClass": "example.com/other"}),
                    none.clone(),
                    empty.clone(),
                ),
                None,
            ),
        ];
        for (svc, expected) in cases {
            assert_eq!(pool.status_for(&svc), expected, "{svc}");
        }
    }

    #[test]
    fn an_address_asked_for_is_given_when_in_the_pool_and_free() {
        let mut pool = pool();
        let lb = json!({"type": "LoadBalancer"});
        let empty = json!({"loadBalancer": {}});
        let asking = |annotations: Value| service(lb.clone(), annotations, empty.clone());
        let cases = [
            (
                asking(json!({"metallb.io/loadBalancerIPs": "192.0.2.10"})),
                Some(ip("192.0.2.10")),
            ),
            // Taken now: the second asker stays pending, as with MetalLB.
            (
                asking(json!({"metallb.io/loadBalancerIPs": "192.0.2.10"})),
                None,
            ),
            (
                asking(json!({"metallb.universe.tf/loadBalancerIPs": "2001:db8::1, 192.0.2.11"})),
                Some(ip("192.0.2.11")),
            ),
            // Outside the pool: pending, never another address.
            (
                asking(json!({"metallb.io/loadBalancerIPs": "192.0.2.100"})),
                None,
            ),
            (
                service(
                    json!({"type": "LoadBalancer", "loadBalancerIP": "192.0.2.20"}),
                    json!({}),
                    empty.clone(),
                ),
                Some(ip("192.0.2.20")),
            ),
            // Asked addresses are not handed out to others.
            (asking(json!({})), Some(ip("192.0.2.1"))),
        ];
        for (svc, expected) in cases {
            assert_eq!(pool.status_for(&svc), expected, "{svc}");
        }
        // A changed annotation moves the Service to its new address.
        let moved = service(
            lb.clone(),
            json!({"metallb.io/loadBalancerIPs": "192.0.2.30"}),
            ip("192.0.2.10"),
        );
        assert_eq!(pool.status_for(&moved), Some(ip("192.0.2.30")));
        let back = asking(json!({"metallb.io/loadBalancerIPs": "192.0.2.10"}));
        assert_eq!(pool.status_for(&back), Some(ip("192.0.2.10")), "released");
    }

    #[test]
    fn addresses_in_use_are_not_handed_out_again_until_released() {
        let mut pool = pool();
        let lb = json!({"type": "LoadBalancer"});
        let existing = service(lb.clone(), json!({}), ip("192.0.2.1"));
        pool.hold(&existing);
        let fresh = service(lb.clone(), json!({}), json!({"loadBalancer": {}}));
        assert_eq!(pool.status_for(&fresh), Some(ip("192.0.2.2")));
        pool.release(&existing);
        // Handed out in order: .1 comes back only after the pool wraps around.
        assert_eq!(pool.status_for(&fresh), Some(ip("192.0.2.3")));
    }
}
