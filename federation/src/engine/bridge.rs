//! The default bridge (reference §10): for each Service a Comb would have locally, the one that
//! points at the upstream instead, so consumers keep using `<service>:<port>`.
//!
//! - all host names: an `ExternalName` Service (one host, no port mapping);
//! - all IP addresses of one family: a selector-less Service plus one EndpointSlice per address;
//! - anything else cannot be bridged: an [`Error::Bridge`] naming every problem.

use comb_api::{Address, Endpoint, Host};
use serde_json::{Value, json};

use crate::engine::context::CombContext;
use crate::engine::endpoints::EndpointDecl;
use crate::error::{Error, Result};

/// One redirected endpoint with its parsed upstream address.
struct Target<'a> {
    endpoint: &'a Endpoint,
    host: Host,
    /// The upstream's port (the address always has one here).
    port: u16,
}

/// The bridge manifests for the `redirected` endpoints (their `cluster` is the upstream address,
/// their port the local one). `declared` supplies each endpoint's Service (default: the Comb's
/// name). Fails with [`Error::Bridge`], every problem joined with `"; "`.
pub fn plan_bridge(
    ctx: &CombContext,
    declared: &[EndpointDecl],
    redirected: &[Endpoint],
) -> Result<Vec<Value>> {
    let service_of = |endpoint: &Endpoint| {
        declared
            .iter()
            .find(|decl| decl.name == endpoint.name())
            .and_then(|decl| decl.service.as_deref())
            .unwrap_or(&ctx.name)
            .to_string()
    };
    let mut services: Vec<(String, Vec<&Endpoint>)> = Vec::new();
    for endpoint in redirected {
        let service = service_of(endpoint);
        match services.iter_mut().find(|(name, _)| *name == service) {
            Some((_, members)) => members.push(endpoint),
            None => services.push((service, vec![endpoint])),
        }
    }

    let mut manifests = Vec::new();
    let mut problems = Vec::new();
    for (service, members) in &services {
        match plan_service(ctx, service, members) {
            Ok(planned) => manifests.extend(planned),
            Err(found) => problems.extend(found),
        }
    }
    if problems.is_empty() {
        Ok(manifests)
    } else {
        Err(Error::Bridge(problems.join("; ")))
    }
}

fn plan_service(
    ctx: &CombContext,
    service: &str,
    members: &[&Endpoint],
) -> Result<Vec<Value>, Vec<String>> {
    let mut targets = Vec::new();
    let mut problems = Vec::new();
    for endpoint in members {
        let name = endpoint.name();
        let Some(text) = endpoint.cluster().filter(|text| !text.is_empty()) else {
            problems.push(format!("endpoint {name} has no address"));
            continue;
        };
        match Address::parse(text) {
            Some(Address {
                host,
                port: Some(port),
            }) => targets.push(Target {
                endpoint,
                host,
                port,
            }),
            _ => problems.push(format!(
                "endpoint {name} has the address {text}, not host:port"
            )),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }

    let listing = || {
        targets
            .iter()
            .map(|t| format!("{} at {}", t.endpoint.name(), t.host))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let names = targets.iter().any(|t| matches!(t.host, Host::Name(_)));
    let v4 = targets.iter().any(|t| matches!(t.host, Host::Ipv4(_)));
    let v6 = targets.iter().any(|t| matches!(t.host, Host::Ipv6(_)));
    let mixed = if names && (v4 || v6) {
        Some("host names and IP addresses")
    } else if v4 && v6 {
        Some("IPv4 and IPv6 addresses")
    } else {
        None
    };
    if let Some(mixed) = mixed {
        return Err(vec![format!(
            "Service {service}: its endpoints point at both {mixed} ({}), one Service cannot bridge both",
            listing()
        )]);
    }

    let ports: Vec<Value> = targets
        .iter()
        .map(|t| json!({"name": t.endpoint.name(), "port": t.endpoint.port(), "protocol": protocol(t.endpoint)}))
        .collect();

    let mut hosts: Vec<&Host> = Vec::new();
    for target in &targets {
        if !hosts.contains(&&target.host) {
            hosts.push(&target.host);
        }
    }
    if names {
        if hosts.len() > 1 {
            problems.push(format!(
                "Service {service}: an ExternalName Service points at one host, but its endpoints are at {}",
                listing()
            ));
        }
        for target in &targets {
            if i32::from(target.port) != target.endpoint.port() {
                problems.push(format!(
                    "Service {service}: endpoint {} is port {} here but {} at {}, and an ExternalName Service cannot map ports",
                    target.endpoint.name(),
                    target.endpoint.port(),
                    target.port,
                    target.host
                ));
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let host = hosts.first().map(ToString::to_string).unwrap_or_default();
        // A CNAME to `x.svc` would not be search-expanded by a Pod's resolver.
        let external_name = if host.ends_with(".svc") {
            format!("{host}.{}", ctx.settings.cluster_domain)
        } else {
            host
        };
        return Ok(vec![json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service},
            "spec": {"type": "ExternalName", "externalName": external_name, "ports": ports}
        })]);
    }

    let family = if v6 { "IPv6" } else { "IPv4" };
    let mut manifests = vec![json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service},
        "spec": {"ipFamilies": [family], "ipFamilyPolicy": "SingleStack", "ports": ports}
    })];
    for (index, address) in hosts.iter().enumerate() {
        let slice_ports: Vec<Value> = targets
            .iter()
            .filter(|t| &&t.host == address)
            .map(|t| json!({"name": t.endpoint.name(), "port": t.port, "protocol": protocol(t.endpoint)}))
            .collect();
        manifests.push(json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": format!("{service}-{}", index + 1),
                "labels": {
                    "kubernetes.io/service-name": service,
                    "endpointslice.kubernetes.io/managed-by": ctx.settings.managed_by,
                }
            },
            "addressType": family,
            "ports": slice_ports,
            "endpoints": [{"addresses": [address.to_string()]}]
        }));
    }
    Ok(manifests)
}

/// `UDP` and `SCTP` as they are (upper-cased); everything else (`tcp`, `http`, ...) is `TCP`.
fn protocol(endpoint: &Endpoint) -> &'static str {
    match endpoint.protocol().to_ascii_uppercase().as_str() {
        "UDP" => "UDP",
        "SCTP" => "SCTP",
        _ => "TCP",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::context::test_context;

    fn endpoint(name: &str, port: i32, cluster: Option<&str>) -> Endpoint {
        let endpoint = Endpoint::new(name, port).unwrap();
        match cluster {
            Some(cluster) => endpoint.with_cluster(cluster),
            None => endpoint,
        }
    }

    fn plan(declared: &[EndpointDecl], redirected: &[Endpoint]) -> Result<Vec<Value>> {
        plan_bridge(
            &test_context("db", "platform", json!({})),
            declared,
            redirected,
        )
    }

    #[test]
    fn host_names_become_external_name_services() {
        let cases = [
            (
                "postgres.shared.svc:5432",
                "postgres.shared.svc.cluster.local",
            ),
            ("DB.Example.COM:5432", "db.example.com"),
        ];
        for (address, external_name) in cases {
            let manifests = plan(
                &[EndpointDecl::new("postgres", 5432)],
                &[endpoint("postgres", 5432, Some(address))],
            )
            .unwrap();
            assert_eq!(
                manifests,
                [
                    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
                        "spec": {"type": "ExternalName", "externalName": external_name,
                                 "ports": [{"name": "postgres", "port": 5432, "protocol": "TCP"}]}})
                ]
            );
        }
    }

    #[test]
    fn ip_addresses_become_services_with_endpoint_slices() {
        let declared = [
            EndpointDecl::new("client", 4222),
            EndpointDecl::new("monitor", 8222).service("nats-monitor"),
            EndpointDecl::new("cluster", 6222),
            EndpointDecl::new("dns", 53).protocol("udp"),
        ];
        let redirected = [
            endpoint("client", 4222, Some("10.0.0.1:14222")),
            endpoint("monitor", 8222, Some("10.0.0.9:8222")),
            endpoint("cluster", 6222, Some("10.0.0.2:6222")),
            endpoint("dns", 53, Some("10.0.0.1:53")).with_protocol("udp"),
        ];
        let manifests = plan(&declared, &redirected).unwrap();
        let slice = |name: &str, service: &str, address: &str, ports: Value| {
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service,
                                                         "endpointslice.kubernetes.io/managed-by": "comb"}},
                   "addressType": "IPv4", "ports": ports, "endpoints": [{"addresses": [address]}]})
        };
        assert_eq!(
            manifests,
            [
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
                       "spec": {"ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "ports": [
                           {"name": "client", "port": 4222, "protocol": "TCP"},
                           {"name": "cluster", "port": 6222, "protocol": "TCP"},
                           {"name": "dns", "port": 53, "protocol": "UDP"}]}}),
                slice(
                    "db-1",
                    "db",
                    "10.0.0.1",
                    json!([
                    {"name": "client", "port": 14222, "protocol": "TCP"},
                    {"name": "dns", "port": 53, "protocol": "UDP"}])
                ),
                slice(
                    "db-2",
                    "db",
                    "10.0.0.2",
                    json!([{"name": "cluster", "port": 6222, "protocol": "TCP"}])
                ),
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nats-monitor"},
                       "spec": {"ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "ports": [
                           {"name": "monitor", "port": 8222, "protocol": "TCP"}]}}),
                slice(
                    "nats-monitor-1",
                    "nats-monitor",
                    "10.0.0.9",
                    json!([{"name": "monitor", "port": 8222, "protocol": "TCP"}])
                ),
            ]
        );

        let v6 = plan(
            &[EndpointDecl::new("pg", 5432)],
            &[endpoint("pg", 5432, Some("[2001:DB8:0::5]:5432")).with_protocol("sctp")],
        )
        .unwrap();
        assert_eq!(v6[0]["spec"]["ipFamilies"], json!(["IPv6"]));
        assert_eq!(v6[0]["spec"]["ports"][0]["protocol"], "SCTP");
        assert_eq!(v6[1]["addressType"], "IPv6");
        assert_eq!(v6[1]["endpoints"], json!([{"addresses": ["2001:db8::5"]}]));
    }

    #[test]
    fn problems() {
        let cases: Vec<(Vec<EndpointDecl>, Vec<Endpoint>, &str)> = vec![
            (
                vec![],
                vec![endpoint("a", 1, None)],
                "endpoint a has no address",
            ),
            (
                vec![],
                vec![endpoint("a", 1, Some("db.example.com"))],
                "endpoint a has the address db.example.com, not host:port",
            ),
            (
                vec![],
                vec![endpoint("a", 1, Some("db:x"))],
                "endpoint a has the address db:x, not host:port",
            ),
            (
                vec![],
                vec![
                    endpoint("a", 1, Some("db.example.com:1")),
                    endpoint("b", 2, Some("10.0.0.1:2")),
                ],
                "Service db: its endpoints point at both host names and IP addresses (a at db.example.com, b at 10.0.0.1), one Service cannot bridge both",
            ),
            (
                vec![],
                vec![
                    endpoint("a", 1, Some("10.0.0.1:1")),
                    endpoint("b", 2, Some("[::1]:2")),
                ],
                "Service db: its endpoints point at both IPv4 and IPv6 addresses (a at 10.0.0.1, b at ::1), one Service cannot bridge both",
            ),
            (
                vec![],
                vec![
                    endpoint("a", 1, Some("x.example.com:1")),
                    endpoint("b", 2, Some("y.example.com:3")),
                ],
                "Service db: an ExternalName Service points at one host, but its endpoints are at a at x.example.com, b at y.example.com; \
                 Service db: endpoint b is port 2 here but 3 at y.example.com, and an ExternalName Service cannot map ports",
            ),
            (
                vec![EndpointDecl::new("b", 2).service("other")],
                vec![endpoint("a", 1, None), endpoint("b", 2, Some("y:3"))],
                "endpoint a has no address; Service other: endpoint b is port 2 here but 3 at y, and an ExternalName Service cannot map ports",
            ),
        ];
        for (declared, redirected, message) in cases {
            let error = plan(&declared, &redirected).unwrap_err();
            assert_eq!(error.to_string(), message);
            assert_eq!(error.category(), "bridge");
        }
        assert!(plan(&[], &[]).unwrap().is_empty());
    }
}
