//! Pointing a borrowing Comb at its upstream (reference `_redirect`): the declared endpoints
//! redirected to the addresses the upstream offers, and the note on what was replicated.

use comb_api::{Address, Endpoint, Host, ManagedObject};

use crate::engine::endpoints::EndpointDecl;
use crate::error::Error;

/// Why the declared endpoints could not be redirected.
#[derive(Debug)]
pub enum Redirect {
    /// The upstream offers no address for these declared endpoints.
    Missing(Vec<String>),
    /// A declaration does not hold (no port).
    Failed(Error),
}

/// The declared endpoints pointed at the upstream (reference `_redirect`), in declaration order:
/// the local name, port and protocol; `cluster` = the upstream endpoint's `cluster` (else its
/// `external`), with the upstream's port appended to a bare host; `external` = the upstream's.
/// Upstream endpoints the Comb does not declare are ignored. `class` names the Comb's class in
/// errors of its declarations.
pub fn redirect(
    class: &str,
    declared: &[EndpointDecl],
    offered: &[Endpoint],
) -> Result<Vec<Endpoint>, Redirect> {
    let mut redirected = Vec::new();
    let mut missing = Vec::new();
    for declaration in declared {
        let found = offered
            .iter()
            .find(|endpoint| endpoint.name() == declaration.name);
        let address = found.and_then(|upstream| {
            [upstream.cluster(), upstream.external()]
                .into_iter()
                .flatten()
                .find(|address| !address.is_empty())
                .map(|address| (upstream, with_port(address, upstream.port())))
        });
        let Some((upstream, address)) = address else {
            missing.push(declaration.name.clone());
            continue;
        };
        let mut endpoint = declaration
            .endpoint(class, |_| address)
            .map_err(Redirect::Failed)?;
        if let Some(external) = upstream.external() {
            endpoint = endpoint.with_external(external);
        }
        redirected.push(endpoint);
    }
    if missing.is_empty() {
        Ok(redirected)
    } else {
        Err(Redirect::Missing(missing))
    }
}

/// `address` with `port` appended when it is a host without one (an IPv6 literal in brackets);
/// anything else as it is (the bridge names what does not parse).
pub(crate) fn with_port(address: &str, port: i32) -> String {
    match Address::parse(address) {
        Some(Address { port: None, host }) => {
            if address.starts_with('[') || !matches!(host, Host::Ipv6(_)) {
                format!("{address}:{port}")
            } else {
                format!("[{address}]:{port}")
            }
        }
        _ => address.to_string(),
    }
}

/// `replicated Secret a, ConfigMap b`: what a borrowing step copied, by name only.
pub fn replication_note(replicas: &[ManagedObject]) -> Option<String> {
    (!replicas.is_empty()).then(|| {
        let names: Vec<String> = replicas
            .iter()
            .map(|replica| format!("{} {}", replica.kind, replica.name))
            .collect();
        format!("replicated {}", names.join(", "))
    })
}
