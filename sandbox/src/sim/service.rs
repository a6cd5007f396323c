//! The LoadBalancer ingress IP of a Service, from 172.18.255.0/24 as kind with MetalLB would
//! give: what a cloud controller writes into the status some time after the create. (Cluster
//! IPs and node ports are the API server's, allocated by the write itself: see
//! [`crate::service_addresses`].) Addresses are unique within one cluster and handed out in
//! order.

use std::net::Ipv4Addr;

use serde_json::{Value, json};

use super::{Action, Kind, Plan, object};
use crate::service_addresses::{Pool, ip_of};

/// The cluster's ingress IPs, fed with those of existing Services.
#[derive(Debug, Clone)]
pub struct Addresses {
    ingress_ips: Pool,
}

impl Default for Addresses {
    fn default() -> Self {
        let ip = |a, b, c, d| u32::from(Ipv4Addr::new(a, b, c, d));
        Addresses {
            ingress_ips: Pool::new(ip(172, 18, 255, 1), ip(172, 18, 255, 254)),
        }
    }
}

fn ingress_ips(service: &Value) -> impl Iterator<Item = &Value> {
    service["status"]["loadBalancer"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| &i["ip"])
}

impl Addresses {
    /// Marks what `service` holds as taken.
    pub fn hold(&mut self, service: &Value) {
        ingress_ips(service)
            .filter_map(ip_of)
            .for_each(|ip| self.ingress_ips.hold(ip));
    }

    /// Frees what a deleted `service` held.
    pub fn release(&mut self, service: &Value) {
        ingress_ips(service)
            .filter_map(ip_of)
            .for_each(|ip| self.ingress_ips.release(ip));
    }
}

/// The ingress a LoadBalancer Service still needs, or the one a Service that stopped being a
/// load balancer must lose.
pub fn plan(service: &Value, addresses: &mut Addresses) -> Plan {
    if object::is_deleting(service) {
        return Plan::default();
    }
    let load_balancer = service["spec"]["type"] == "LoadBalancer";
    let has_ingress = ingress_ips(service).next().is_some();
    let status = if !load_balancer {
        has_ingress.then(|| json!({"loadBalancer": {}}))
    } else if !has_ingress {
        addresses.ingress_ips.take().map(|ip| {
            json!({"loadBalancer": {"ingress": [{"ip": Ipv4Addr::from(ip).to_string(), "ipMode": "VIP"}]}})
        })
    } else {
        None
    };
    let mut plan = Plan::default();
    if let Some(status) = status {
        plan.push(Action::status_change(Kind::Service, service, status));
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec, "status": status})
    }

    fn written_status(plan: &Plan) -> Option<Value> {
        match plan.actions.as_slice() {
            [] => None,
            [Action::UpdateStatus(Kind::Service, s)] => Some(s["status"].clone()),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn load_balancers_get_an_ingress_ip_and_others_lose_theirs() {
        let mut addresses = Addresses::default();
        let lb = |status| {
            service(
                json!({"type": "LoadBalancer", "clusterIP": "10.96.0.11"}),
                status,
            )
        };
        let ingress =
            |ip: &str| json!({"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}});
        let cases = [
            (
                lb(json!({"loadBalancer": {}})),
                Some(ingress("172.18.255.1")),
            ),
            (lb(ingress("172.18.255.1")), None),
            (
                service(json!({"type": "ClusterIP"}), json!({"loadBalancer": {}})),
                None,
            ),
            (
                service(json!({"type": "ClusterIP"}), ingress("172.18.255.9")),
                Some(json!({"loadBalancer": {}})),
            ),
            (
                lb(json!({"loadBalancer": {}})),
                Some(ingress("172.18.255.2")),
            ),
        ];
        for (svc, expected) in cases {
            assert_eq!(
                written_status(&plan(&svc, &mut addresses)),
                expected,
                "{svc}"
            );
        }
    }

    #[test]
    fn ingress_ips_in_use_are_not_handed_out_again_until_released() {
        let mut addresses = Addresses::default();
        let existing = service(
            json!({"type": "LoadBalancer"}),
            json!({"loadBalancer": {"ingress": [{"ip": "172.18.255.1"}]}}),
        );
        addresses.hold(&existing);
        let fresh = service(json!({"type": "LoadBalancer"}), json!({"loadBalancer": {}}));
        let status = written_status(&plan(&fresh, &mut addresses));
        assert_eq!(
            status.map(|s| s["loadBalancer"]["ingress"][0]["ip"].clone()),
            Some(json!("172.18.255.2"))
        );
        addresses.release(&existing);
        // Handed out in order: .1 comes back only after the pool wraps around.
        let status = written_status(&plan(&fresh, &mut addresses));
        assert_eq!(
            status.map(|s| s["loadBalancer"]["ingress"][0]["ip"].clone()),
            Some(json!("172.18.255.3"))
        );
    }
}
