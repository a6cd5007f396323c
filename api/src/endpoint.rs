//! The `Endpoint` value object and `host:port` addresses.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::names::is_dns1123_label;
use crate::status::CombEndpoint;
use crate::{Error, Result};

/// The protocol of an endpoint that declares none.
pub const DEFAULT_PROTOCOL: &str = "tcp";

/// Why `name` cannot be an endpoint name, or `None` when it can. An endpoint name becomes a
/// Service port name, so it must be a DNS-1123 label.
pub fn name_problem(name: &str) -> Option<String> {
    if is_dns1123_label(name) {
        None
    } else {
        Some(format!(
            "the name '{name}' is not a DNS-1123 label (lowercase letters, digits and -, \
             alphanumeric at both ends, at most 63 characters), as the name of a Service port must be"
        ))
    }
}

/// What a Comb offers: a named port, and where to reach it. Immutable; the name is validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    name: String,
    protocol: String,
    port: i32,
    cluster: Option<String>,
    external: Option<String>,
}

impl Endpoint {
    /// An endpoint `name` on `port` with protocol `tcp` and no addresses. Fails on a name that
    /// cannot be a Service port name.
    pub fn new(name: &str, port: i32) -> Result<Endpoint> {
        if let Some(problem) = name_problem(name) {
            return Err(Error::EndpointName(problem));
        }
        Ok(Endpoint {
            name: name.to_string(),
            protocol: DEFAULT_PROTOCOL.to_string(),
            port,
            cluster: None,
            external: None,
        })
    }

    /// The same endpoint with another protocol.
    pub fn with_protocol(mut self, protocol: impl Into<String>) -> Endpoint {
        self.protocol = protocol.into();
        self
    }

    /// The same endpoint with a cluster address (`host:port`).
    pub fn with_cluster(mut self, cluster: impl Into<String>) -> Endpoint {
        self.cluster = Some(cluster.into());
        self
    }

    /// The same endpoint with an external address (`host:port`).
    pub fn with_external(mut self, external: impl Into<String>) -> Endpoint {
        self.external = Some(external.into());
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn protocol(&self) -> &str {
        &self.protocol
    }
    pub fn port(&self) -> i32 {
        self.port
    }
    /// The address to use from inside the Comb's cluster.
    pub fn cluster(&self) -> Option<&str> {
        self.cluster.as_deref()
    }
    /// The address to use from elsewhere.
    pub fn external(&self) -> Option<&str> {
        self.external.as_deref()
    }

    /// The status form: name, protocol, port, and the addresses that are present.
    pub fn to_crd(&self) -> CombEndpoint {
        CombEndpoint {
            name: self.name.clone(),
            protocol: Some(self.protocol.clone()),
            port: self.port,
            cluster: self.cluster.clone(),
            external: self.external.clone(),
        }
    }

    /// Back from the status form; a missing protocol becomes `tcp`.
    pub fn from_crd(entry: &CombEndpoint) -> Result<Endpoint> {
        let mut endpoint = Endpoint::new(&entry.name, entry.port)?;
        if let Some(protocol) = &entry.protocol {
            endpoint.protocol = protocol.clone();
        }
        endpoint.cluster = entry.cluster.clone();
        endpoint.external = entry.external.clone();
        Ok(endpoint)
    }
}

/// The host part of an address: a host name (lower-cased), or an IP address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    Name(String),
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
}

impl Host {
    /// Classifies a host without brackets: an IP literal, else a (lower-cased) name.
    fn classify(host: &str) -> Host {
        if let Ok(v4) = host.parse::<Ipv4Addr>() {
            Host::Ipv4(v4)
        } else if let Ok(v6) = host.parse::<Ipv6Addr>() {
            Host::Ipv6(v6)
        } else {
            Host::Name(host.to_lowercase())
        }
    }
}

impl fmt::Display for Host {
    /// The canonical form: a lower-cased name, dotted IPv4, RFC 5952 IPv6 (no brackets).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ipv4(ip) => write!(f, "{ip}"),
            Host::Ipv6(ip) => write!(f, "{ip}"),
        }
    }
}

/// A parsed address: `host`, `host:port`, `[v6]`, `[v6]:port`, or a bare IPv6 literal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Address {
    pub host: Host,
    pub port: Option<u16>,
}

impl Address {
    /// Parses an address, `None` when it is none of the accepted forms. A host contains no `:`,
    /// `[`, `]` or whitespace; a port is decimal and fits 16 bits.
    pub fn parse(text: &str) -> Option<Address> {
        if let Some(rest) = text.strip_prefix('[') {
            let (inside, after) = rest.split_once(']')?;
            let ip = inside.parse::<Ipv6Addr>().ok()?;
            let port = match after {
                "" => None,
                _ => Some(parse_port(after.strip_prefix(':')?)?),
            };
            return Some(Address {
                host: Host::Ipv6(ip),
                port,
            });
        }
        if text.matches(':').count() > 1 {
            let ip = text.parse::<Ipv6Addr>().ok()?;
            return Some(Address {
                host: Host::Ipv6(ip),
                port: None,
            });
        }
        let (host, port) = match text.split_once(':') {
            Some((host, port)) => (host, Some(parse_port(port)?)),
            None => (text, None),
        };
        let bad = |c: char| c == ':' || c == '[' || c == ']' || c.is_whitespace();
        if host.is_empty() || host.contains(bad) {
            return None;
        }
        Some(Address {
            host: Host::classify(host),
            port,
        })
    }
}

fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

impl fmt::Display for Address {
    /// `host:port` with an IPv6 host in brackets; the host alone without a port.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.host, self.port) {
            (host, None) => write!(f, "{host}"),
            (Host::Ipv6(ip), Some(port)) => write!(f, "[{ip}]:{port}"),
            (host, Some(port)) => write!(f, "{host}:{port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_names() {
        let long_ok = "x".repeat(63);
        for valid in ["client", "a", "web-2", "2fa", long_ok.as_str()] {
            assert_eq!(name_problem(valid), None, "{valid}");
            assert!(Endpoint::new(valid, 1).is_ok());
        }
        let long_bad = "x".repeat(64);
        for invalid in [
            "Client",
            "web_ui",
            "web.ui",
            "-web",
            "web-",
            long_bad.as_str(),
            "",
        ] {
            assert!(name_problem(invalid).is_some(), "{invalid}");
        }
        assert_eq!(
            Endpoint::new("web_ui", 80).unwrap_err().to_string(),
            "Endpoint: the name 'web_ui' is not a DNS-1123 label (lowercase letters, digits and -, \
             alphanumeric at both ends, at most 63 characters), as the name of a Service port must be"
        );
    }

    #[test]
    fn endpoint_crd_form() {
        let ep = Endpoint::new("client", 4222)
            .unwrap()
            .with_cluster("nats.platform.svc:4222");
        let crd = ep.to_crd();
        assert_eq!(
            serde_json::to_string(&crd).unwrap(),
            r#"{"name":"client","protocol":"tcp","port":4222,"cluster":"nats.platform.svc:4222"}"#
        );
        let back = Endpoint::from_crd(&CombEndpoint {
            protocol: None,
            ..crd
        })
        .unwrap();
        assert_eq!(back, ep);
        assert_eq!(back.protocol(), "tcp");
        assert_eq!(back.external(), None);
    }

    #[test]
    fn addresses() {
        let v6 = |s: &str| Host::Ipv6(s.parse().unwrap());
        let name = |s: &str| Host::Name(s.to_string());
        type Case<'a> = (&'a str, Option<(Host, Option<u16>)>, &'a str);
        let cases: &[Case] = &[
            ("db:5432", Some((name("db"), Some(5432))), "db:5432"),
            (
                "DB.Example.COM",
                Some((name("db.example.com"), None)),
                "db.example.com",
            ),
            (
                "10.0.0.1:80",
                Some((Host::Ipv4([10, 0, 0, 1].into()), Some(80))),
                "10.0.0.1:80",
            ),
            (
                "[2001:DB8:0::5]:5432",
                Some((v6("2001:db8::5"), Some(5432))),
                "[2001:db8::5]:5432",
            ),
            ("[::1]", Some((v6("::1"), None)), "::1"),
            (
                "2001:db8::7",
                Some((v6("2001:db8::7"), None)),
                "2001:db8::7",
            ),
            ("db:", None, ""),
            ("db:http", None, ""),
            ("db:70000", None, ""),
            (":80", None, ""),
            ("", None, ""),
            ("d b:80", None, ""),
            ("[db]:80", None, ""),
            ("[::1]80", None, ""),
            ("2001:db8::zz", None, ""),
        ];
        for (text, want, shown) in cases {
            let got = Address::parse(text);
            assert_eq!(
                got.clone().map(|a| (a.host, a.port)),
                want.clone(),
                "{text}"
            );
            if let Some(address) = got {
                assert_eq!(address.to_string(), *shown, "{text}");
            }
        }
    }
}
