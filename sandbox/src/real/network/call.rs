//! A call from inside a Pod, as its client would make it: the target's name resolved through
//! the cluster's DNS (the kube-dns ClusterIP) with the Pod's search path, as the kubelet's
//! resolv.conf says (`ndots:5`), then a TCP connection from the Pod's own namespace, and the one
//! line the identity server that answered sends (`cluster/namespace/pod PORT`). Every step
//! happens in the Pod's namespace, so the call crosses exactly what a container's would: the
//! Pod's route, the node's kube-proxy rules, the router, another cluster's node.

use std::future::Future as _;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd as _;
use std::task::Poll;
use std::time::Duration;

use nix::sys::socket::{SockaddrIn, getsockname};
use serde::{Deserialize, Serialize};
use simple_dns::rdata::RData;
use simple_dns::{CLASS, Name, Packet, PacketFlag, Question, RCODE, TYPE};
use tokio::io::AsyncReadExt as _;
use tokio::net::{TcpSocket, UdpSocket};

use super::netns::Netns;

/// How long one DNS query waits for its answer, and how often it is sent.
const QUERY_WAIT: Duration = Duration::from_secs(1);
const QUERY_TRIES: usize = 3;
/// How long a connection may take, and its answer after.
const CONNECT_WAIT: Duration = Duration::from_secs(3);
const ANSWER_WAIT: Duration = Duration::from_secs(3);
/// Names with fewer dots are tried with the search path first (the kubelet's `ndots:5`).
const NDOTS: usize = 5;

/// `host:port`, as a client is configured with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: u16,
}

impl Target {
    /// `db:5432`, `db.platform.svc.cluster.local:5432`, `192.0.2.10:5432`; a bad one is the
    /// call's outcome already.
    pub fn parse(text: &str) -> Result<Target, CallOutcome> {
        let bad = || {
            CallOutcome::failed(
                text,
                Failure::BadTarget,
                format!("{text:?} is not HOST:PORT, e.g. db:5432"),
            )
        };
        let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        if host.is_empty() || port == 0 {
            return Err(bad());
        }
        Ok(Target {
            host: host.to_string(),
            port,
        })
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Why a call got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Failure {
    /// The target is not `host:port`.
    BadTarget,
    /// The Pod to call from has no network (not running, or not there).
    NoPod,
    /// The name does not resolve (NXDOMAIN or no address for every name of the search path).
    NotFound,
    /// The cluster's DNS did not answer.
    DnsUnanswered,
    /// The address refused the connection (a Service without endpoints, nothing listening).
    Refused,
    /// The connection was not accepted in time (nothing routes there, or it is dropped).
    Timeout,
    /// No route to the address.
    Unreachable,
    /// Connected, but nothing was said before the connection closed.
    NoAnswer,
}

/// What one call did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallOutcome {
    /// As asked: `db:5432`.
    pub target: String,
    /// The name that resolved, then the names it is an alias of (an ExternalName's CNAME).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Where the connection went: `10.96.4.7:5432`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Who answered: `cluster/namespace/pod`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
    /// The port the answering server was called on (after every translation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The caller's source port, once the connection attempt had one: a node's connection
    /// tracking keys its translations by it, so two attempts from one port within the
    /// tracking's timeout may go where the first went (see the network tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// What went wrong, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl CallOutcome {
    fn failed(target: &str, failure: Failure, message: String) -> CallOutcome {
        CallOutcome {
            target: target.to_string(),
            names: Vec::new(),
            address: None,
            answered_by: None,
            port: None,
            local_port: None,
            failure: Some(failure),
            message: Some(message),
        }
    }

    /// The call could not be made: Pod `namespace/pod` has no network in `cluster`.
    pub fn no_pod(cluster: &str, namespace: &str, pod: &str, target: &Target) -> CallOutcome {
        CallOutcome::failed(
            &target.to_string(),
            Failure::NoPod,
            format!(
                "Pod {namespace}/{pod} of cluster {cluster} has no network: it is not there or not Running with an IP"
            ),
        )
    }
}

/// What a name resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The name asked for that resolved, then its CNAME chain.
    pub names: Vec<String>,
    pub address: Ipv4Addr,
}

/// Why a name did not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("{name} does not resolve (asked {})", tried.join(", "))]
    NotFound { name: String, tried: Vec<String> },
    #[error("the cluster DNS at {server} did not answer for {name}: {reason}")]
    Unanswered {
        name: String,
        server: SocketAddrV4,
        reason: String,
    },
}

/// The names a resolver asks for `name`, in order, with `search` (resolv.conf's rules): a name
/// ending in a dot as it is; one with fewer than [`NDOTS`] dots through the search path first.
pub fn candidates(name: &str, search: &[String]) -> Vec<String> {
    if let Some(absolute) = name.strip_suffix('.') {
        return vec![absolute.to_string()];
    }
    let searched = search.iter().map(|domain| format!("{name}.{domain}"));
    if name.matches('.').count() >= NDOTS {
        std::iter::once(name.to_string()).chain(searched).collect()
    } else {
        searched.chain(std::iter::once(name.to_string())).collect()
    }
}

/// The A query for `name`, with id `id`.
pub fn query(id: u16, name: &str) -> Option<Vec<u8>> {
    let mut packet = Packet::new_query(id);
    packet.set_flags(PacketFlag::RECURSION_DESIRED);
    packet.questions.push(Question::new(
        Name::new(name).ok()?,
        TYPE::A.into(),
        CLASS::IN.into(),
        false,
    ));
    packet.build_bytes_vec().ok()
}

/// What an answer to query `id` for `name` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// An address, with the CNAME chain that led to it.
    Address {
        names: Vec<String>,
        address: Ipv4Addr,
    },
    /// No such name, or no address for it: the next name of the search path is asked.
    Nothing,
    /// Not an answer to this query.
    Other,
}

/// Reads an answer to query `id` for `name`.
pub fn read_answer(bytes: &[u8], id: u16, name: &str) -> Answer {
    let Ok(packet) = Packet::parse(bytes) else {
        return Answer::Other;
    };
    if packet.id() != id || !packet.has_flags(PacketFlag::RESPONSE) {
        return Answer::Other;
    }
    if packet.rcode() != RCODE::NoError {
        return Answer::Nothing;
    }
    // Follow the CNAMEs from the name asked to an address.
    let mut names = vec![name.to_string()];
    let mut current = name.to_ascii_lowercase();
    for _ in 0..=packet.answers.len() {
        let mut next = None;
        for record in &packet.answers {
            if record
                .name
                .to_string()
                .trim_end_matches('.')
                .to_ascii_lowercase()
                != current
            {
                continue;
            }
            match &record.rdata {
                RData::A(a) => {
                    return Answer::Address {
                        names,
                        address: Ipv4Addr::from(a.address),
                    };
                }
                RData::CNAME(alias) => {
                    next = Some(alias.0.to_string().trim_end_matches('.').to_string());
                }
                _ => {}
            }
        }
        let Some(next) = next else { break };
        current = next.to_ascii_lowercase();
        names.push(next);
    }
    Answer::Nothing
}

/// Resolves `name` from inside `netns` through `server`, with `search`.
pub async fn resolve(
    netns: &Netns,
    server: SocketAddrV4,
    name: &str,
    search: &[String],
) -> Result<Resolved, ResolveError> {
    if let Ok(address) = name.parse::<Ipv4Addr>() {
        return Ok(Resolved {
            names: Vec::new(),
            address,
        });
    }
    let unanswered = |reason: String| ResolveError::Unanswered {
        name: name.to_string(),
        server,
        reason,
    };
    let socket = netns
        .run("opening a DNS socket", || {
            let socket = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
            socket.set_nonblocking(true)?;
            Ok(socket)
        })
        .and_then(|socket| {
            UdpSocket::from_std(socket).map_err(|source| crate::Error::Io {
                what: "serving a DNS socket".into(),
                source,
            })
        })
        .map_err(|error| unanswered(error.to_string()))?;
    let tried = candidates(name, search);
    for (index, candidate) in tried.iter().enumerate() {
        let id = u16::try_from(index)
            .unwrap_or(u16::MAX)
            .wrapping_add(rand::random());
        let Some(query) = query(id, candidate) else {
            continue;
        };
        let mut answer = None;
        for _ in 0..QUERY_TRIES {
            socket
                .send_to(&query, SocketAddr::V4(server))
                .await
                .map_err(|error| unanswered(error.to_string()))?;
            let deadline = tokio::time::Instant::now() + QUERY_WAIT;
            let mut buffer = [0u8; 4096];
            while let Ok(Ok((length, from))) =
                tokio::time::timeout_at(deadline, socket.recv_from(&mut buffer)).await
            {
                if from != SocketAddr::V4(server) {
                    continue;
                }
                match read_answer(&buffer[..length], id, candidate) {
                    Answer::Other => continue,
                    found => {
                        answer = Some(found);
                        break;
                    }
                }
            }
            if answer.is_some() {
                break;
            }
        }
        match answer {
            Some(Answer::Address { names, address }) => return Ok(Resolved { names, address }),
            Some(_) => continue,
            None => {
                return Err(unanswered(format!(
                    "no answer for {candidate} in {} tries of {}s",
                    QUERY_TRIES,
                    QUERY_WAIT.as_secs()
                )));
            }
        }
    }
    Err(ResolveError::NotFound {
        name: name.to_string(),
        tried,
    })
}

/// Calls `target` from inside `netns`: resolved through `server` with `search`, connected, read.
pub async fn call(
    netns: &Netns,
    server: SocketAddrV4,
    search: &[String],
    target: &Target,
) -> CallOutcome {
    let text = target.to_string();
    let resolved = match resolve(netns, server, &target.host, search).await {
        Ok(resolved) => resolved,
        Err(error) => {
            let failure = match error {
                ResolveError::NotFound { .. } => Failure::NotFound,
                ResolveError::Unanswered { .. } => Failure::DnsUnanswered,
            };
            return CallOutcome::failed(&text, failure, error.to_string());
        }
    };
    let address = SocketAddr::from((resolved.address, target.port));
    let mut outcome = CallOutcome {
        names: resolved.names,
        address: Some(address.to_string()),
        ..CallOutcome::failed(&text, Failure::NoAnswer, String::new())
    };
    let socket = match netns.run("opening a TCP socket", TcpSocket::new_v4) {
        Ok(socket) => socket,
        Err(error) => {
            outcome.failure = Some(Failure::Unreachable);
            outcome.message = Some(error.to_string());
            return outcome;
        }
    };
    // connect(2) picks the source port at once; the first poll makes the call, and while it
    // is under way the socket's name says the port.
    let descriptor = socket.as_raw_fd();
    let mut connecting =
        std::pin::pin!(tokio::time::timeout(CONNECT_WAIT, socket.connect(address)));
    let first =
        std::future::poll_fn(|context| Poll::Ready(connecting.as_mut().poll(context))).await;
    if first.is_pending() {
        outcome.local_port = getsockname::<SockaddrIn>(descriptor)
            .ok()
            .map(|name| name.port())
            .filter(|port| *port != 0);
    }
    let connected = match first {
        Poll::Ready(connected) => connected,
        Poll::Pending => connecting.await,
    };
    let mut stream = match connected {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            outcome.failure = Some(match error.kind() {
                std::io::ErrorKind::ConnectionRefused => Failure::Refused,
                std::io::ErrorKind::TimedOut => Failure::Timeout,
                _ => Failure::Unreachable,
            });
            outcome.message = Some(format!("connecting to {address}: {error}"));
            return outcome;
        }
        Err(_) => {
            outcome.failure = Some(Failure::Timeout);
            outcome.message = Some(format!(
                "connecting to {address}: not accepted within {}s",
                CONNECT_WAIT.as_secs()
            ));
            return outcome;
        }
    };
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        ANSWER_WAIT,
        (&mut stream).take(4096).read_to_end(&mut answer),
    )
    .await;
    let line = String::from_utf8_lossy(&answer);
    match (read, line.trim().rsplit_once(' ')) {
        (Ok(Ok(_)), Some((identity, port))) if !identity.is_empty() => {
            outcome.answered_by = Some(identity.to_string());
            outcome.port = port.parse().ok();
            outcome.failure = None;
            outcome.message = None;
        }
        (Ok(Ok(_)), _) => {
            outcome.message = Some(format!(
                "{address} accepted the connection and closed it without an answer"
            ));
        }
        (Ok(Err(error)), _) => {
            outcome.message = Some(format!("reading the answer of {address}: {error}"));
        }
        (Err(_), _) => {
            outcome.message = Some(format!(
                "{address} accepted the connection but said nothing within {}s",
                ANSWER_WAIT.as_secs()
            ));
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use simple_dns::ResourceRecord;
    use simple_dns::rdata::{A, CNAME};

    #[test]
    fn targets() {
        let ok = |host: &str, port| {
            Ok(Target {
                host: host.into(),
                port,
            })
        };
        assert_eq!(Target::parse("db:5432"), ok("db", 5432));
        assert_eq!(Target::parse("192.0.2.10:80"), ok("192.0.2.10", 80));
        for bad in ["db", "db:", ":80", "db:0", "db:x", "db:70000"] {
            let outcome = Target::parse(bad).expect_err(bad);
            assert_eq!(outcome.failure, Some(Failure::BadTarget), "{bad}");
        }
    }

    #[test]
    fn names_are_searched_as_resolv_conf_says() {
        let search = crate::real::network::dns::search_path("platform");
        assert_eq!(
            candidates("db", &search),
            [
                "db.platform.svc.cluster.local",
                "db.svc.cluster.local",
                "db.cluster.local",
                "db"
            ]
        );
        assert_eq!(
            candidates("db.prod.example", &search)[0],
            "db.prod.example.platform.svc.cluster.local"
        );
        assert_eq!(candidates("db.prod.example.", &search), ["db.prod.example"]);
        assert_eq!(
            candidates("a.b.c.d.e.f", &search)[0],
            "a.b.c.d.e.f",
            "five dots: asked as it is first"
        );
    }

    fn answer(id: u16, rcode: RCODE, records: Vec<ResourceRecord<'static>>) -> Vec<u8> {
        let mut packet = Packet::new_reply(id);
        *packet.rcode_mut() = rcode;
        packet.answers = records;
        packet.build_bytes_vec().expect("an answer")
    }

    #[test]
    fn answers_are_read_through_their_cnames() {
        let name = "db.staging.svc.cluster.local";
        let cname = ResourceRecord::new(
            Name::new_unchecked(name),
            CLASS::IN,
            5,
            RData::CNAME(CNAME(Name::new_unchecked("db.platform.svc.cluster.local"))),
        );
        let a = ResourceRecord::new(
            Name::new_unchecked("db.platform.svc.cluster.local"),
            CLASS::IN,
            5,
            RData::A(A {
                address: u32::from(Ipv4Addr::new(10, 96, 4, 7)),
            }),
        );
        let query = query(7, name).expect("a query");
        assert!(Packet::parse(&query).is_ok());
        assert_eq!(
            read_answer(&answer(7, RCODE::NoError, vec![cname.clone(), a]), 7, name),
            Answer::Address {
                names: vec![name.into(), "db.platform.svc.cluster.local".into()],
                address: Ipv4Addr::new(10, 96, 4, 7)
            }
        );
        // A CNAME whose target has no address here: nothing.
        assert_eq!(
            read_answer(&answer(7, RCODE::NoError, vec![cname]), 7, name),
            Answer::Nothing
        );
        assert_eq!(
            read_answer(&answer(7, RCODE::NameError, vec![]), 7, name),
            Answer::Nothing
        );
        assert_eq!(
            read_answer(&answer(8, RCODE::NoError, vec![]), 7, name),
            Answer::Other,
            "another query's answer"
        );
    }
}
