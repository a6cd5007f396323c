//! The way from a node's namespace to its cluster's API server, which listens on the host's
//! loopback: a listener on `PORT` bound inside the node's namespace (its loopback and its address) and served by the
//! sandbox, which forwards each connection to the same port on the host's loopback. So kube-proxy
//! and CoreDNS inside use the kubeconfig and certificates of the other components unchanged, and
//! nothing listens anywhere but inside the sandbox's namespaces. The relay is part of the
//! sandbox process: it goes when the sandbox does.

use std::net::{Ipv4Addr, SocketAddr};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::netns::Netns;
use crate::error::{Error, Result};

/// Relays `port` inside `netns`, on every address there, to `127.0.0.1:port` of the host until
/// `shutdown`. `lo` must be up inside. On the node's own address too: kube-apiserver advertises
/// it (the `kubernetes` Service's endpoint), so that Pods reach the API server through the
/// Service as on a control-plane node.
pub fn start(netns: &Netns, port: u16, shutdown: CancellationToken) -> Result<JoinHandle<()>> {
    let listener = netns.run(&format!("listening on port {port}"), || {
        let listener = std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))?;
        listener.set_nonblocking(true)?;
        Ok(listener)
    })?;
    let listener = TcpListener::from_std(listener).map_err(|source| Error::Io {
        what: format!("serving the API relay of {}", netns.name()),
        source,
    })?;
    let target = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    Ok(tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((mut inside, _)) = accepted else {
                continue;
            };
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let Ok(mut outside) = TcpStream::connect(target).await else {
                    return;
                };
                tokio::select! {
                    () = shutdown.cancelled() => {}
                    _ = tokio::io::copy_bidirectional(&mut inside, &mut outside) => {}
                }
            });
        }
    }))
}
