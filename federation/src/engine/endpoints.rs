//! Endpoint declarations of a class (reference §2, "Endpoint declarations on a Comb") and their
//! local resolution to `<service or comb name>.<namespace>.svc:<port>`.

use std::collections::HashSet;

use comb_api::{Endpoint, name_problem};
use serde_json::Value;

use crate::engine::values::{describe_value, unknown_keys};
use crate::error::{Error, Result};

/// The keys a declaration may have.
const KNOWN_KEYS: [&str; 6] = ["cluster", "external", "name", "port", "protocol", "service"];

/// One endpoint as a class declares it. `service` is the Service it is reached through (default:
/// the Comb's name); `cluster` overrides the local address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointDecl {
    pub name: String,
    /// Required to resolve, not to declare.
    pub port: Option<i32>,
    pub protocol: Option<String>,
    pub service: Option<String>,
    pub cluster: Option<String>,
    pub external: Option<String>,
}

impl EndpointDecl {
    /// `name` on `port`, everything else by default.
    pub fn new(name: &str, port: i32) -> EndpointDecl {
        EndpointDecl {
            name: name.to_string(),
            port: Some(port),
            ..EndpointDecl::default()
        }
    }

    /// The same declaration reached through Service `service`.
    pub fn service(mut self, service: &str) -> EndpointDecl {
        self.service = Some(service.to_string());
        self
    }

    /// The same declaration with `protocol`.
    pub fn protocol(mut self, protocol: &str) -> EndpointDecl {
        self.protocol = Some(protocol.to_string());
        self
    }

    /// The same declaration with an external address.
    pub fn external(mut self, external: &str) -> EndpointDecl {
        self.external = Some(external.to_string());
        self
    }

    /// The endpoint it declares, at the cluster address `cluster` gives for its port, with its
    /// protocol; a declaration without a port has none.
    pub fn endpoint(&self, class: &str, cluster: impl FnOnce(i32) -> String) -> Result<Endpoint> {
        let port = self.port.ok_or_else(|| {
            Error::endpoints(format!(
                "{class}->endpoints: endpoint {} has no port",
                self.name
            ))
        })?;
        let endpoint = Endpoint::new(&self.name, port)?.with_cluster(cluster(port));
        Ok(match &self.protocol {
            Some(protocol) => endpoint.with_protocol(protocol.clone()),
            None => endpoint,
        })
    }

    /// A declaration from data (e.g. `config.endpoints` of the `Manifests` class): an object with
    /// the keys `name port protocol service cluster external`. `class` names the class in errors.
    pub fn from_value(class: &str, value: &Value) -> Result<EndpointDecl> {
        let fail = |message: String| Error::endpoints(format!("{class}->endpoints: {message}"));
        let Value::Object(map) = value else {
            return Err(fail(format!(
                "an endpoint is an object or an Endpoint, got {}",
                describe_value(value)
            )));
        };
        if let Some(unknown) = unknown_keys(map, &KNOWN_KEYS) {
            return Err(fail(unknown));
        }
        let text = |key: &str| map.get(key).and_then(scalar_text);
        let name = text("name").unwrap_or_default();
        let port = match map.get("port") {
            None | Some(Value::Null) => None,
            Some(port) => Some(integer(port).ok_or_else(|| {
                fail(format!(
                    "endpoint {name} has the port {port}, not an integer"
                ))
            })?),
        };
        Ok(EndpointDecl {
            name,
            port,
            protocol: text("protocol"),
            service: text("service"),
            cluster: text("cluster"),
            external: text("external"),
        })
    }
}

/// Checks a class's declarations: every one has a valid name, none is declared twice.
pub fn validate(class: &str, declarations: &[EndpointDecl]) -> Result<()> {
    let fail = |message: String| Err(Error::endpoints(format!("{class}->endpoints: {message}")));
    let mut seen = HashSet::new();
    for declaration in declarations {
        if declaration.name.is_empty() {
            return fail("an endpoint has no name".into());
        }
        if let Some(problem) = name_problem(&declaration.name) {
            return fail(problem);
        }
        if !seen.insert(declaration.name.as_str()) {
            return fail(format!("endpoint {} is declared twice", declaration.name));
        }
    }
    Ok(())
}

/// The local endpoints: `cluster` as declared, else `<service or comb name>.<namespace>.svc:<port>`;
/// protocol and external only as declared.
pub fn resolve_local(
    class: &str,
    declarations: &[EndpointDecl],
    comb_name: &str,
    namespace: &str,
) -> Result<Vec<Endpoint>> {
    validate(class, declarations)?;
    declarations
        .iter()
        .map(|declaration| {
            let endpoint = declaration.endpoint(class, |port| {
                let service = declaration.service.as_deref().unwrap_or(comb_name);
                let cluster = declaration.cluster.clone();
                cluster.unwrap_or_else(|| format!("{service}.{namespace}.svc:{port}"))
            })?;
            Ok(match &declaration.external {
                Some(external) => endpoint.with_external(external.clone()),
                None => endpoint,
            })
        })
        .collect()
}

/// A string, or the text of a number or boolean (as Perl would stringify it); `None` for null
/// and structures.
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// An integer, or a string of one (`"4222"`), that fits a port field.
fn integer(value: &Value) -> Option<i32> {
    match value {
        Value::Number(number) => number.as_i64().and_then(|n| i32::try_from(n).ok()),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn declare(values: Value) -> Result<Vec<EndpointDecl>> {
        let declarations = values
            .as_array()
            .unwrap()
            .iter()
            .map(|value| EndpointDecl::from_value("NATS", value))
            .collect::<Result<Vec<_>>>()?;
        validate("NATS", &declarations)?;
        Ok(declarations)
    }

    #[test]
    fn declaration_errors() {
        let cases = [
            (
                json!([{"name": "client", "port": 4222, "sevice": "x"}]),
                "NATS->endpoints: unknown key(s) sevice (known: cluster, external, name, port, protocol, service)",
            ),
            (
                json!([{"name": "a", "zz": 1, "aa": 2}]),
                "NATS->endpoints: unknown key(s) aa, zz (known: cluster, external, name, port, protocol, service)",
            ),
            (
                json!(["client"]),
                "NATS->endpoints: an endpoint is an object or an Endpoint, got a plain scalar",
            ),
            (
                json!([["client"]]),
                "NATS->endpoints: an endpoint is an object or an Endpoint, got an array",
            ),
            (
                json!([{"port": 1}]),
                "NATS->endpoints: an endpoint has no name",
            ),
            (
                json!([{"name": "Web_UI", "port": 1}]),
                "NATS->endpoints: the name 'Web_UI' is not a DNS-1123 label (lowercase letters, \
                 digits and -, alphanumeric at both ends, at most 63 characters), as the name of a \
                 Service port must be",
            ),
            (
                json!([{"name": "a", "port": 1}, {"name": "a", "port": 2}]),
                "NATS->endpoints: endpoint a is declared twice",
            ),
            (
                json!([{"name": "a", "port": "http"}]),
                "NATS->endpoints: endpoint a has the port \"http\", not an integer",
            ),
        ];
        for (values, message) in cases {
            assert_eq!(declare(values).unwrap_err().to_string(), message);
        }
    }

    #[test]
    fn local_resolution() {
        let declarations = declare(json!([
            {"name": "client", "port": 4222},
            {"name": "monitor", "port": "8222", "service": "nats-monitor", "protocol": "http"},
            {"name": "ext", "port": 1, "cluster": "x.y:2", "external": "nats.example.com:4222"}
        ]))
        .unwrap();
        let endpoints = resolve_local("NATS", &declarations, "nats", "platform").unwrap();
        let crd: Vec<Value> = endpoints
            .iter()
            .map(|e| serde_json::to_value(e.to_crd()).unwrap())
            .collect();
        assert_eq!(
            crd,
            [
                json!({"name": "client", "protocol": "tcp", "port": 4222, "cluster": "nats.platform.svc:4222"}),
                json!({"name": "monitor", "protocol": "http", "port": 8222, "cluster": "nats-monitor.platform.svc:8222"}),
                json!({"name": "ext", "protocol": "tcp", "port": 1, "cluster": "x.y:2", "external": "nats.example.com:4222"}),
            ]
        );
        let no_port = declare(json!([{"name": "a"}])).unwrap();
        assert_eq!(
            resolve_local("NATS", &no_port, "n", "ns")
                .unwrap_err()
                .to_string(),
            "NATS->endpoints: endpoint a has no port"
        );
    }
}
