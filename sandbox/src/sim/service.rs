//! The LoadBalancer ingress IP of a Service, as MetalLB would give it from the pool of the real
//! backend's cluster in the same place ([`crate::real::addresses`]): what a cloud controller
//! writes into the status some time after the create, decided by [`LoadBalancerPool::status_for`] as on the real backend. (Cluster
//! IPs and node ports are the API server's, allocated by the write itself: see
//! [`crate::service_addresses`].) Addresses are unique within one cluster and handed out in
//! order; one a Service asks for is given when free.

use std::net::Ipv4Addr;

use super::{Action, Kind, Plan};
use crate::load_balancer::LoadBalancerPool;

/// The cluster's ingress IPs, fed with those of existing Services.
#[derive(Debug, Clone)]
pub struct Addresses {
    ingress_ips: LoadBalancerPool,
}

impl Addresses {
    /// Ingress IPs from `first..=last`.
    pub fn new((first, last): (Ipv4Addr, Ipv4Addr)) -> Addresses {
        Addresses {
            ingress_ips: LoadBalancerPool::new(first, last),
        }
    }

    /// Marks what `service` holds as taken.
    pub fn hold(&mut self, service: &serde_json::Value) {
        self.ingress_ips.hold(service);
    }

    /// Frees what a deleted `service` held.
    pub fn release(&mut self, service: &serde_json::Value) {
        self.ingress_ips.release(service);
    }
}

/// The ingress a LoadBalancer Service still needs, or the one a Service that stopped being a
/// load balancer must lose.
pub fn plan(service: &serde_json::Value, addresses: &mut Addresses) -> Plan {
    let mut plan = Plan::default();
    if let Some(status) = addresses.ingress_ips.status_for(service) {
        plan.push(Action::status_change(Kind::Service, service, status));
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_load_balancer_gets_its_ingress_as_a_status_change() {
        let mut addresses = Addresses::new(crate::sim::SimConfig::default().load_balancer_pool);
        let service = json!({"metadata": {"name": "web", "namespace": "default"},
                             "spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {}}});
        let plan = plan(&service, &mut addresses);
        match plan.actions.as_slice() {
            [Action::UpdateStatus(Kind::Service, s)] => assert_eq!(
                s["status"]["loadBalancer"]["ingress"][0]["ip"],
                json!("192.0.2.1")
            ),
            other => panic!("unexpected {other:?}"),
        }
        let settled = json!({"metadata": {"name": "web", "namespace": "default"},
                             "spec": {"type": "LoadBalancer"},
                             "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}});
        assert!(super::plan(&settled, &mut addresses).actions.is_empty());
    }
}
