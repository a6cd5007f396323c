//! Service addresses as kube-apiserver allocates them, inside the create or update of the
//! Service: a cluster IP from 10.96.0.0/16 (none for `ExternalName`, `None` stays headless)
//! and node ports from 30000-32767 for NodePort and LoadBalancer Services. The response of
//! the write already carries them; a requested address that is taken or out of range makes
//! the write `Invalid`. (A LoadBalancer's ingress IP is a cloud controller's business, later:
//! see [`crate::sim::service`].)
//!
//! The store holds one [`Allocator`] per cluster and keeps it in step with every stored
//! Service, so an address is free exactly when no stored Service has it.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use serde_json::{Value, json};

use crate::api_error::FieldError;

/// One pool of addresses (or ports): a range, the next candidate, and what is taken.
#[derive(Debug, Clone)]
pub struct Pool {
    first: u32,
    last: u32,
    next: u32,
    taken: HashSet<u32>,
}

impl Pool {
    pub fn new(first: u32, last: u32) -> Pool {
        Pool::starting_at(first, last, first)
    }

    /// A pool that hands out `next` first (the values below stay for explicit requests).
    pub fn starting_at(first: u32, last: u32, next: u32) -> Pool {
        Pool {
            first,
            last,
            next,
            taken: HashSet::new(),
        }
    }

    pub fn contains(&self, value: u32) -> bool {
        (self.first..=self.last).contains(&value)
    }

    pub fn is_taken(&self, value: u32) -> bool {
        self.taken.contains(&value)
    }

    pub fn hold(&mut self, value: u32) {
        self.taken.insert(value);
    }

    pub fn release(&mut self, value: u32) {
        self.taken.remove(&value);
    }

    /// The next free value after the last one handed out (wrapping around) that is not in
    /// `also_taken`, without holding it: the write that uses it holds it once stored, so a
    /// write that fails later leaks nothing.
    pub fn pick(&mut self, also_taken: &[u32]) -> Option<u32> {
        let size = self.last - self.first + 1;
        for _ in 0..size {
            let candidate = self.next;
            self.next = if self.next == self.last {
                self.first
            } else {
                self.next + 1
            };
            if !self.taken.contains(&candidate) && !also_taken.contains(&candidate) {
                return Some(candidate);
            }
        }
        None
    }

    /// [`Pool::pick`] and hold.
    pub fn take(&mut self) -> Option<u32> {
        let value = self.pick(&[])?;
        self.hold(value);
        Some(value)
    }
}

pub fn ip_of(value: &Value) -> Option<u32> {
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

fn is_missing(value: Option<&Value>) -> bool {
    value.is_none_or(|v| v.is_null() || *v == json!("") || *v == json!([]))
}

fn needs_cluster_ip(service: &Value) -> bool {
    service["spec"]["type"] != "ExternalName"
}

fn needs_node_ports(service: &Value) -> bool {
    match service["spec"]["type"].as_str() {
        Some("NodePort") => true,
        Some("LoadBalancer") => service["spec"]["allocateLoadBalancerNodePorts"] != false,
        _ => false,
    }
}

const CLUSTER_IP_FIELDS: [&str; 4] = ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"];

/// kube-apiserver's `patchAllocatedValues`: an update that leaves out the addresses the
/// cluster allocated (clusterIP, IP families, node ports by port name) keeps them, so clients
/// can replace a Service from a manifest that never had them.
pub fn keep_allocated(old: &Value, new: &mut Value) {
    if !new["spec"].is_object() {
        return;
    }
    if needs_cluster_ip(old) && needs_cluster_ip(new) {
        for field in CLUSTER_IP_FIELDS {
            if is_missing(new["spec"].get(field))
                && let Some(value) = old["spec"].get(field).filter(|v| !v.is_null())
            {
                new["spec"][field] = value.clone();
            }
        }
    }
    if needs_node_ports(old) && needs_node_ports(new) {
        let used: Vec<Value> = node_ports(new).filter(|p| !p.is_null()).cloned().collect();
        let old_ports = old["spec"]["ports"].as_array().cloned().unwrap_or_default();
        if let Some(ports) = new["spec"]["ports"].as_array_mut() {
            for port in ports.iter_mut().filter(|p| p["nodePort"].is_null()) {
                let previous = old_ports
                    .iter()
                    .find(|o| o["name"] == port["name"])
                    .map(|o| o["nodePort"].clone())
                    .filter(|n| !n.is_null() && !used.contains(n));
                if let Some(previous) = previous {
                    port["nodePort"] = previous;
                }
            }
        }
    }
}

/// kube-apiserver's `dropTypeDependentFields`: a Service switched to a type that needs no
/// cluster IP (ExternalName) or no node ports loses the ones it still carries from before,
/// which releases them.
pub fn drop_type_dependent_fields(old: &Value, new: &mut Value) {
    if !new["spec"].is_object() {
        return;
    }
    if needs_cluster_ip(old) && !needs_cluster_ip(new) {
        for field in CLUSTER_IP_FIELDS {
            if new["spec"].get(field) == old["spec"].get(field)
                && let Some(spec) = new["spec"].as_object_mut()
            {
                spec.remove(field);
            }
        }
    }
    // An ExternalName Service has no traffic policy inside the cluster either.
    if needs_cluster_ip(old)
        && !needs_cluster_ip(new)
        && new["spec"].get("internalTrafficPolicy") == old["spec"].get("internalTrafficPolicy")
        && let Some(spec) = new["spec"].as_object_mut()
    {
        spec.remove("internalTrafficPolicy");
    }
    let same_node_ports = node_ports(old).eq(node_ports(new));
    if needs_node_ports(old) && !needs_node_ports(new) && same_node_ports {
        for port in new["spec"]["ports"].as_array_mut().into_iter().flatten() {
            if let Some(port) = port.as_object_mut() {
                port.remove("nodePort");
            }
        }
    }
}

/// One cluster's cluster IPs and node ports.
#[derive(Debug, Clone)]
pub struct Allocator {
    cluster_ips: Pool,
    node_ports: Pool,
}

impl Default for Allocator {
    fn default() -> Self {
        let ip = |a, b, c, d| u32::from(Ipv4Addr::new(a, b, c, d));
        Allocator {
            // The whole 10.96.0.0/16 may be asked for; handed out from .11 on, since 10.96.0.1
            // is the `kubernetes` Service and 10.96.0.10 kube-dns on real clusters.
            cluster_ips: Pool::starting_at(
                ip(10, 96, 0, 1),
                ip(10, 96, 255, 254),
                ip(10, 96, 0, 11),
            ),
            node_ports: Pool::new(30000, 32767),
        }
    }
}

impl Allocator {
    /// Marks what a stored `service` has as taken.
    pub fn hold(&mut self, service: &Value) {
        if let Some(ip) = ip_of(&service["spec"]["clusterIP"]) {
            self.cluster_ips.hold(ip);
        }
        node_ports(service)
            .filter_map(port_of)
            .for_each(|p| self.node_ports.hold(p));
    }

    /// Frees what a `service` that is gone or replaced had.
    pub fn release(&mut self, service: &Value) {
        if let Some(ip) = ip_of(&service["spec"]["clusterIP"]) {
            self.cluster_ips.release(ip);
        }
        node_ports(service)
            .filter_map(port_of)
            .for_each(|p| self.node_ports.release(p));
    }

    /// Fills in the addresses `service` needs (`old`: the stored Service it updates, whose
    /// own addresses it may keep), or says why the ones it asks for cannot be had. Nothing
    /// is held here: the store holds what it stores.
    pub fn allocate(&mut self, old: Option<&Value>, service: &mut Value) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if !service["spec"].is_object() {
            return errors;
        }
        if needs_cluster_ip(service) {
            errors.extend(self.allocate_cluster_ip(old, service));
        }
        if needs_node_ports(service) {
            errors.extend(self.allocate_node_ports(old, service));
        }
        errors
    }

    fn allocate_cluster_ip(&mut self, old: Option<&Value>, service: &mut Value) -> Vec<FieldError> {
        let spec = &mut service["spec"];
        let requested = spec["clusterIP"]
            .as_str()
            .filter(|ip| !ip.is_empty())
            .or_else(|| spec["clusterIPs"][0].as_str())
            .unwrap_or_default()
            .to_string();
        let ip = if requested.is_empty() {
            match self.cluster_ips.pick(&[]) {
                Some(ip) => Ipv4Addr::from(ip).to_string(),
                None => {
                    return vec![FieldError {
                        reason: "FieldValueInvalid",
                        field: "spec.clusterIPs".into(),
                        message: "Invalid value: []string(nil): failed to allocate a serviceIP: range is full".into(),
                    }];
                }
            }
        } else if requested == "None" {
            requested
        } else {
            let own = old.and_then(|o| ip_of(&o["spec"]["clusterIP"]));
            let failure = match ip_of(&json!(requested)) {
                None => Some("failed to parse IP".to_string()),
                Some(ip) if !self.cluster_ips.contains(ip) => Some(format!(
                    "failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. The range of valid IPs is 10.96.0.0/16"
                )),
                Some(ip) if self.cluster_ips.is_taken(ip) && own != Some(ip) => Some(format!(
                    "failed to allocate IP {requested}: provided IP is already allocated"
                )),
                Some(_) => None,
            };
            if let Some(failure) = failure {
                return vec![FieldError {
                    reason: "FieldValueInvalid",
                    field: "spec.clusterIPs".into(),
                    // kube-apiserver 1.37 prints the value as JSON.
                    message: format!("Invalid value: [{requested:?}]: {failure}"),
                }];
            }
            requested
        };
        spec["clusterIP"] = json!(ip);
        if is_missing(spec.get("clusterIPs")) {
            spec["clusterIPs"] = json!([ip]);
        }
        if is_missing(spec.get("ipFamilies")) {
            spec["ipFamilies"] = json!(["IPv4"]);
        }
        if is_missing(spec.get("ipFamilyPolicy")) {
            spec["ipFamilyPolicy"] = json!("SingleStack");
        }
        Vec::new()
    }

    fn allocate_node_ports(&mut self, old: Option<&Value>, service: &mut Value) -> Vec<FieldError> {
        let own: Vec<u32> = old
            .into_iter()
            .flat_map(node_ports)
            .filter_map(port_of)
            .collect();
        let requested: Vec<u32> = node_ports(service).filter_map(port_of).collect();
        let mut picked = Vec::new();
        let mut errors = Vec::new();
        let ports = service["spec"]["ports"]
            .as_array_mut()
            .into_iter()
            .flatten();
        for (index, port) in ports.enumerate() {
            let field = format!("spec.ports[{index}].nodePort");
            match port_of(&port["nodePort"]) {
                Some(p) if !self.node_ports.contains(p) => errors.push(FieldError::invalid(
                    field,
                    &port["nodePort"],
                    "provided port is not in the valid range. The range of valid ports is 30000-32767",
                )),
                Some(p) if self.node_ports.is_taken(p) && !own.contains(&p) => {
                    errors.push(FieldError::invalid(
                        field,
                        &port["nodePort"],
                        "provided port is already allocated",
                    ))
                }
                Some(_) => {}
                None => {
                    let taken: Vec<u32> = requested.iter().chain(&picked).copied().collect();
                    match self.node_ports.pick(&taken) {
                        Some(p) => {
                            port["nodePort"] = json!(p);
                            picked.push(p);
                        }
                        None => errors.push(FieldError::invalid(
                            field,
                            &json!(0),
                            "failed to allocate a nodePort: range is full",
                        )),
                    }
                }
            }
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(spec: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec})
    }

    /// Allocates like a create and stores (holds) the result.
    fn create(allocator: &mut Allocator, spec: Value) -> Result<Value, Vec<String>> {
        let mut svc = service(spec);
        let errors = allocator.allocate(None, &mut svc);
        if !errors.is_empty() {
            return Err(errors
                .into_iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect());
        }
        allocator.hold(&svc);
        Ok(svc["spec"].clone())
    }

    #[test]
    fn services_get_addresses_by_type() {
        let mut a = Allocator::default();
        let spec = create(&mut a, json!({"ports": [{"port": 80}]})).expect("cluster IP");
        assert_eq!(spec["clusterIP"], "10.96.0.11");
        assert_eq!(spec["clusterIPs"], json!(["10.96.0.11"]));
        assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
        assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
        assert!(spec["ports"][0].get("nodePort").is_none());

        let spec = create(&mut a, json!({"clusterIP": "None"})).expect("headless");
        assert_eq!(spec["clusterIP"], "None");
        assert_eq!(spec["clusterIPs"], json!(["None"]));

        let spec = create(
            &mut a,
            json!({"type": "ExternalName", "externalName": "db.example.com"}),
        )
        .expect("external");
        assert!(spec.get("clusterIP").is_none());

        let spec = create(
            &mut a,
            json!({"type": "NodePort", "ports": [{"port": 80}, {"port": 443, "nodePort": 30000}]}),
        )
        .expect("node ports");
        assert_eq!(spec["clusterIP"], "10.96.0.12");
        assert_eq!(spec["ports"][0]["nodePort"], 30001, "30000 is asked for");
        assert_eq!(spec["ports"][1]["nodePort"], 30000);

        let spec = create(
            &mut a,
            json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}),
        )
        .expect("load balancer without node ports");
        assert!(spec["ports"][0].get("nodePort").is_none());
    }

    #[test]
    fn requested_addresses_must_be_free_and_in_range() {
        let mut a = Allocator::default();
        create(&mut a, json!({"clusterIP": "10.96.0.11"})).expect("free");
        let cases = [
            (
                json!({"clusterIP": "10.96.0.11"}),
                r#"spec.clusterIPs: Invalid value: ["10.96.0.11"]: failed to allocate IP 10.96.0.11: provided IP is already allocated"#,
            ),
            (
                json!({"clusterIPs": ["10.97.0.1"]}),
                r#"spec.clusterIPs: Invalid value: ["10.97.0.1"]: failed to allocate IP 10.97.0.1: the provided IP (10.97.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/16"#,
            ),
            (
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 80}]}),
                "spec.ports[0].nodePort: Invalid value: 80: provided port is not in the valid range. The range of valid ports is 30000-32767",
            ),
        ];
        for (spec, message) in cases {
            assert_eq!(create(&mut a, spec), Err(vec![message.to_string()]));
        }
        // Handed out addresses skip the requested one.
        let spec = create(&mut a, json!({})).expect("next");
        assert_ne!(spec["clusterIP"], "10.96.0.11");
        let spec = create(&mut a, json!({"type": "NodePort", "ports": [{"port": 80}]}))
            .expect("node port");
        let port = spec["ports"][0]["nodePort"].clone();
        let taken = create(
            &mut a,
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": port}]}),
        );
        assert_eq!(
            taken,
            Err(vec![format!(
                "spec.ports[0].nodePort: Invalid value: {port}: provided port is already allocated"
            )])
        );
    }

    #[test]
    fn an_update_keeps_its_own_addresses_and_frees_them_on_release() {
        let mut a = Allocator::default();
        let old = service(
            create(
                &mut a,
                json!({"type": "NodePort", "ports": [{"name": "http", "port": 80}]}),
            )
            .expect("created"),
        );
        let mut same = service(old["spec"].clone());
        assert!(
            a.allocate(Some(&old), &mut same).is_empty(),
            "its own addresses"
        );
        a.release(&old);
        let spec = create(&mut a, json!({"clusterIP": "10.96.0.11"})).expect("released");
        assert_eq!(spec["clusterIP"], "10.96.0.11");

        let mut small = Pool::new(1, 2);
        assert_eq!(
            (small.take(), small.take(), small.take()),
            (Some(1), Some(2), None)
        );
        small.release(1);
        assert_eq!(small.take(), Some(1));
    }

    #[test]
    fn updates_keep_allocated_values_the_new_object_leaves_empty() {
        let old = service(json!({
            "type": "NodePort", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "http", "port": 80, "nodePort": 30080}, {"name": "admin", "port": 81, "nodePort": 30081}],
        }));
        let mut replaced = service(
            json!({"type": "NodePort", "clusterIP": "", "ports": [{"name": "http", "port": 8080}, {"name": "admin", "port": 81, "nodePort": 30080}]}),
        );
        keep_allocated(&old, &mut replaced);
        assert_eq!(replaced["spec"]["clusterIP"], "10.96.0.20");
        assert_eq!(replaced["spec"]["clusterIPs"], json!(["10.96.0.20"]));
        assert_eq!(replaced["spec"]["ipFamilyPolicy"], "SingleStack");
        // http's old port is taken by admin now, so http gets none back.
        assert!(replaced["spec"]["ports"][0]["nodePort"].is_null());
        assert_eq!(replaced["spec"]["ports"][1]["nodePort"], 30080);

        let mut external =
            service(json!({"type": "ExternalName", "externalName": "db.example.com"}));
        keep_allocated(&old, &mut external);
        assert!(external["spec"].get("clusterIP").is_none());

        let mut cluster_ip = service(json!({"ports": [{"name": "http", "port": 80}]}));
        keep_allocated(&old, &mut cluster_ip);
        assert_eq!(cluster_ip["spec"]["clusterIP"], "10.96.0.20");
        assert!(cluster_ip["spec"]["ports"][0].get("nodePort").is_none());
    }

    #[test]
    fn a_switch_of_type_drops_what_the_new_type_does_not_use() {
        let old = service(json!({
            "type": "NodePort", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "http", "port": 80, "nodePort": 30080}],
        }));
        let mut external = old.clone();
        external["spec"]["type"] = json!("ExternalName");
        external["spec"]["externalName"] = json!("db.example.com");
        drop_type_dependent_fields(&old, &mut external);
        for field in CLUSTER_IP_FIELDS {
            assert!(external["spec"].get(field).is_none(), "{field}");
        }
        assert!(external["spec"]["ports"][0].get("nodePort").is_none());

        let mut cluster_ip = old.clone();
        cluster_ip["spec"]["type"] = json!("ClusterIP");
        drop_type_dependent_fields(&old, &mut cluster_ip);
        assert_eq!(cluster_ip["spec"]["clusterIP"], "10.96.0.20");
        assert!(cluster_ip["spec"]["ports"][0].get("nodePort").is_none());
    }
}
