//! Service addresses: a cluster IP from 10.96.0.0/16 (none for `ExternalName`, `None` kept for
//! headless Services), node ports for NodePort and LoadBalancer Services, and for the latter an
//! ingress IP from 172.18.255.0/24, as kind with MetalLB would give. Addresses are unique within
//! one cluster and handed out in order.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use serde_json::{Value, json};

use super::{Action, Kind, Plan, object};

/// One pool of addresses (or ports): a range, the next candidate, and what is taken.
#[derive(Debug, Clone)]
pub(super) struct Pool {
    first: u32,
    last: u32,
    next: u32,
    taken: HashSet<u32>,
}

impl Pool {
    pub(super) fn new(first: u32, last: u32) -> Pool {
        Pool {
            first,
            last,
            next: first,
            taken: HashSet::new(),
        }
    }

    pub(super) fn hold(&mut self, value: u32) {
        self.taken.insert(value);
    }

    pub(super) fn release(&mut self, value: u32) {
        self.taken.remove(&value);
    }

    /// The next free value after the last one handed out, wrapping around.
    pub(super) fn take(&mut self) -> Option<u32> {
        let size = self.last - self.first + 1;
        for _ in 0..size {
            let candidate = self.next;
            self.next = if self.next == self.last {
                self.first
            } else {
                self.next + 1
            };
            if self.taken.insert(candidate) {
                return Some(candidate);
            }
        }
        None
    }
}

/// The cluster's address allocator, fed with the addresses of existing Services.
#[derive(Debug, Clone)]
pub struct Addresses {
    cluster_ips: Pool,
    node_ports: Pool,
    ingress_ips: Pool,
}

impl Default for Addresses {
    fn default() -> Self {
        let ip = |a, b, c, d| u32::from(Ipv4Addr::new(a, b, c, d));
        Addresses {
            // 10.96.0.1 is the `kubernetes` Service and 10.96.0.10 kube-dns on real clusters.
            cluster_ips: Pool::new(ip(10, 96, 0, 11), ip(10, 96, 255, 254)),
            node_ports: Pool::new(30000, 32767),
            ingress_ips: Pool::new(ip(172, 18, 255, 1), ip(172, 18, 255, 254)),
        }
    }
}

pub(super) fn ip_of(value: &Value) -> Option<u32> {
    value.as_str()?.parse::<Ipv4Addr>().ok().map(u32::from)
}

fn port_of(value: &Value) -> Option<u32> {
    value.as_u64().and_then(|p| u32::try_from(p).ok())
}

fn node_ports(service: &Value) -> impl Iterator<Item = &Value> {
    service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| &p["nodePort"])
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
        if let Some(ip) = ip_of(&service["spec"]["clusterIP"]) {
            self.cluster_ips.hold(ip);
        }
        node_ports(service)
            .filter_map(port_of)
            .for_each(|p| self.node_ports.hold(p));
        ingress_ips(service)
            .filter_map(ip_of)
            .for_each(|ip| self.ingress_ips.hold(ip));
    }

    /// Frees what a deleted `service` held.
    pub fn release(&mut self, service: &Value) {
        if let Some(ip) = ip_of(&service["spec"]["clusterIP"]) {
            self.cluster_ips.release(ip);
        }
        node_ports(service)
            .filter_map(port_of)
            .for_each(|p| self.node_ports.release(p));
        ingress_ips(service)
            .filter_map(ip_of)
            .for_each(|ip| self.ingress_ips.release(ip));
    }
}

fn needs_node_ports(service: &Value) -> bool {
    match service["spec"]["type"].as_str() {
        Some("NodePort") => true,
        Some("LoadBalancer") => service["spec"]["allocateLoadBalancerNodePorts"] != false,
        _ => false,
    }
}

/// `new` with the addresses `old` had where `new` leaves them empty, as kube-apiserver keeps
/// allocated values on update (`patchAllocatedValues`): a Service replaced from a manifest
/// without a clusterIP keeps its clusterIP and node ports.
pub fn keep_allocated(old: &Value, new: &Value) -> Value {
    let mut kept = new.clone();
    let external = |s: &Value| s["spec"]["type"] == "ExternalName";
    if !external(old) && !external(new) {
        let spec = &mut kept["spec"];
        if spec["clusterIP"].as_str().is_none_or(str::is_empty)
            && old["spec"]["clusterIP"].is_string()
        {
            spec["clusterIP"] = old["spec"]["clusterIP"].clone();
        }
        for field in ["clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if spec[field].is_null() && !old["spec"][field].is_null() {
                spec[field] = old["spec"][field].clone();
            }
        }
    }
    if needs_node_ports(old) && needs_node_ports(new) {
        let used: Vec<&Value> = node_ports(new).filter(|p| !p.is_null()).collect();
        let old_ports = old["spec"]["ports"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if let Some(ports) = kept["spec"]["ports"].as_array_mut() {
            for port in ports.iter_mut().filter(|p| p["nodePort"].is_null()) {
                let previous = old_ports
                    .iter()
                    .find(|o| o["name"] == port["name"])
                    .map(|o| o["nodePort"].clone())
                    .filter(|n| !n.is_null() && !used.contains(&n));
                if let Some(previous) = previous {
                    port["nodePort"] = previous;
                }
            }
        }
    }
    kept
}

/// The addresses `service` still needs, taken from `addresses`; `before` is its state before
/// an update that left out addresses it had (see [`keep_allocated`]).
pub fn plan(service: &Value, before: Option<&Value>, addresses: &mut Addresses) -> Plan {
    if object::is_deleting(service) {
        return Plan::default();
    }
    let mut plan = Plan::default();
    let kind = service["spec"]["type"].as_str().unwrap_or("ClusterIP");
    let mut updated = match before {
        Some(old) => keep_allocated(old, service),
        None => service.clone(),
    };
    let mut spec_changed = updated != *service;
    let spec = &mut updated["spec"];
    if kind != "ExternalName" {
        let current = spec["clusterIP"].as_str().unwrap_or_default().to_string();
        if current.is_empty() {
            if let Some(ip) = addresses.cluster_ips.take() {
                let ip = Ipv4Addr::from(ip).to_string();
                spec["clusterIP"] = json!(ip);
                spec["clusterIPs"] = json!([ip]);
                spec_changed = true;
            }
        } else if spec["clusterIPs"].is_null() {
            spec["clusterIPs"] = json!([current]);
            spec_changed = true;
        }
        if spec["ipFamilies"].is_null() {
            spec["ipFamilies"] = json!(["IPv4"]);
            spec["ipFamilyPolicy"] = json!("SingleStack");
            spec_changed = true;
        }
    }
    if needs_node_ports(service)
        && let Some(ports) = spec["ports"].as_array_mut()
    {
        for port in ports.iter_mut().filter(|p| p["nodePort"].is_null()) {
            if let Some(node_port) = addresses.node_ports.take() {
                port["nodePort"] = json!(node_port);
                spec_changed = true;
            }
        }
    }
    if spec_changed {
        plan.actions
            .push(Action::Update(Kind::Service, updated.clone()));
    }

    let ingress = &service["status"]["loadBalancer"]["ingress"];
    let has_ingress = ingress.as_array().is_some_and(|i| !i.is_empty());
    let status = if kind != "LoadBalancer" {
        has_ingress.then(|| json!({"loadBalancer": {}}))
    } else if !has_ingress {
        addresses.ingress_ips.take().map(|ip| {
            json!({"loadBalancer": {"ingress": [{"ip": Ipv4Addr::from(ip).to_string(), "ipMode": "VIP"}]}})
        })
    } else {
        None
    };
    if let Some(status) = status {
        plan.push(Action::status_change(Kind::Service, &updated, status));
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(spec: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec, "status": {"loadBalancer": {}}})
    }

    fn plan_fresh(service: &Value, addresses: &mut Addresses) -> Plan {
        plan(service, None, addresses)
    }

    fn written(plan: &Plan) -> (Option<Value>, Option<Value>) {
        let mut spec = None;
        let mut status = None;
        for action in &plan.actions {
            match action {
                Action::Update(Kind::Service, s) => spec = Some(s["spec"].clone()),
                Action::UpdateStatus(Kind::Service, s) => status = Some(s["status"].clone()),
                other => panic!("unexpected {other:?}"),
            }
        }
        (spec, status)
    }

    #[test]
    fn services_get_addresses_by_type() {
        let mut addresses = Addresses::default();
        let (spec, status) = written(&plan_fresh(
            &service(json!({"ports": [{"port": 80}]})),
            &mut addresses,
        ));
        let spec = spec.expect("a cluster IP");
        assert_eq!(spec["clusterIP"], "10.96.0.11");
        assert_eq!(spec["clusterIPs"], json!(["10.96.0.11"]));
        assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
        assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
        assert!(spec["ports"][0].get("nodePort").is_none());
        assert_eq!(status, None);

        let (spec, _) = written(&plan_fresh(
            &service(json!({"clusterIP": "None", "ports": [{"port": 80}]})),
            &mut addresses,
        ));
        let spec = spec.expect("families for the headless service");
        assert_eq!(spec["clusterIP"], "None");
        assert_eq!(spec["clusterIPs"], json!(["None"]));

        let (spec, status) = written(&plan_fresh(
            &service(json!({"type": "ExternalName", "externalName": "db.example.com"})),
            &mut addresses,
        ));
        assert_eq!((spec, status), (None, None));

        let (spec, _) = written(&plan_fresh(
            &service(
                json!({"type": "NodePort", "ports": [{"port": 80}, {"port": 443, "nodePort": 30001}]}),
            ),
            &mut addresses,
        ));
        let spec = spec.expect("node ports");
        assert_eq!(spec["clusterIP"], "10.96.0.12");
        assert_eq!(spec["ports"][0]["nodePort"], 30000);
        assert_eq!(spec["ports"][1]["nodePort"], 30001);

        let (spec, status) = written(&plan_fresh(
            &service(json!({"type": "LoadBalancer", "ports": [{"port": 80}]})),
            &mut addresses,
        ));
        assert_eq!(
            spec.map(|s| s["ports"][0]["nodePort"].clone()),
            Some(json!(30001))
        );
        assert_eq!(
            status,
            Some(json!({"loadBalancer": {"ingress": [{"ip": "172.18.255.1", "ipMode": "VIP"}]}}))
        );
    }

    #[test]
    fn addresses_in_use_are_not_handed_out_again_until_released() {
        let mut addresses = Addresses::default();
        let existing = service(
            json!({"clusterIP": "10.96.0.11", "clusterIPs": ["10.96.0.11"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"}),
        );
        addresses.hold(&existing);
        assert_eq!(plan(&existing, None, &mut addresses), Plan::default());
        let (spec, _) = written(&plan_fresh(&service(json!({})), &mut addresses));
        assert_eq!(
            spec.map(|s| s["clusterIP"].clone()),
            Some(json!("10.96.0.12"))
        );

        let mut small = Pool::new(1, 2);
        assert_eq!(
            (small.take(), small.take(), small.take()),
            (Some(1), Some(2), None)
        );
        small.release(1);
        assert_eq!(small.take(), Some(1));
    }

    #[test]
    fn an_update_keeps_allocated_addresses_the_new_object_leaves_empty() {
        let old = service(json!({
            "type": "NodePort", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "http", "port": 80, "nodePort": 30080}, {"name": "admin", "port": 81, "nodePort": 30081}],
        }));
        let replaced = service(
            json!({"type": "NodePort", "ports": [{"name": "http", "port": 8080}, {"name": "admin", "port": 81, "nodePort": 30080}]}),
        );
        let kept = keep_allocated(&old, &replaced);
        assert_eq!(kept["spec"]["clusterIP"], "10.96.0.20");
        assert_eq!(kept["spec"]["clusterIPs"], json!(["10.96.0.20"]));
        assert_eq!(kept["spec"]["ipFamilyPolicy"], "SingleStack");
        // http's old port is taken by admin now, so http gets none back.
        assert!(kept["spec"]["ports"][0]["nodePort"].is_null());
        assert_eq!(kept["spec"]["ports"][1]["nodePort"], 30080);

        let external = service(json!({"type": "ExternalName", "externalName": "db.example.com"}));
        assert_eq!(keep_allocated(&old, &external), external);
        let cluster_ip = service(json!({"ports": [{"name": "http", "port": 80}]}));
        let kept = keep_allocated(&old, &cluster_ip);
        assert_eq!(kept["spec"]["clusterIP"], "10.96.0.20");
        assert!(kept["spec"]["ports"][0].get("nodePort").is_none());

        // The plan writes the kept addresses back instead of allocating new ones.
        let mut addresses = Addresses::default();
        addresses.hold(&old);
        let (spec, _) = written(&plan(&replaced, Some(&old), &mut addresses));
        assert_eq!(
            spec.map(|s| s["clusterIP"].clone()),
            Some(json!("10.96.0.20"))
        );
    }

    #[test]
    fn a_service_that_stops_being_a_load_balancer_loses_its_ingress() {
        let mut addresses = Addresses::default();
        let mut svc = service(
            json!({"clusterIP": "10.96.0.11", "clusterIPs": ["10.96.0.11"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"}),
        );
        svc["status"] = json!({"loadBalancer": {"ingress": [{"ip": "172.18.255.1"}]}});
        let (_, status) = written(&plan(&svc, None, &mut addresses));
        assert_eq!(status, Some(json!({"loadBalancer": {}})));
    }
}
