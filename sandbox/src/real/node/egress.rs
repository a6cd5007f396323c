//! The way from kube-apiserver into a cluster's network: an HTTP CONNECT proxy on a Unix socket
//! of the node's directory (kube-apiserver's egress selection, [`super::config::egress_selector`],
//! names it), which dials each target from inside the node's network namespace. So the API
//! server reaches the kubelet (`kubectl logs`, exec) and the Services of admission webhooks as
//! a control plane reaches its nodes' network through konnectivity, while the machine's own
//! namespace still gets no address and no route.
//!
//! Built on hyper's CONNECT support (a request with the target as its authority, answered 200,
//! then the connection upgraded to the raw stream), as hyper's own proxy example does.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpSocket, TcpStream, UnixListener};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::real::network::netns::Netns;

/// How long a dial into the network may take before the API server is told it failed.
const DIAL_LIMIT: Duration = Duration::from_secs(10);

/// Serves CONNECT on `socket` (replacing a stale one) until `shutdown`, dialing from `netns`.
pub fn start(socket: &Path, netns: Netns, shutdown: CancellationToken) -> Result<JoinHandle<()>> {
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket).map_err(|source| Error::Io {
        what: format!("listening on {}", socket.display()),
        source,
    })?;
    Ok(tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((stream, _)) = accepted else {
                continue;
            };
            let netns = netns.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    connect(request, netns.clone(), shutdown.clone())
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades();
                let _ = connection.await;
            });
        }
    }))
}

/// Answers one CONNECT: dials the target first, so that a refusal reaches the API server as an
/// error status (502) rather than as a stream that closes at once.
async fn connect(
    request: Request<Incoming>,
    netns: Netns,
    shutdown: CancellationToken,
) -> std::result::Result<Response<Empty<Bytes>>, std::convert::Infallible> {
    let answer = |status: StatusCode| {
        let mut response = Response::new(Empty::new());
        *response.status_mut() = status;
        Ok(response)
    };
    if request.method() != Method::CONNECT {
        return answer(StatusCode::METHOD_NOT_ALLOWED);
    }
    let Some(target) = connect_target(request.uri()) else {
        return answer(StatusCode::BAD_REQUEST);
    };
    let Ok(mut inside) = dial(&netns, target).await else {
        return answer(StatusCode::BAD_GATEWAY);
    };
    tokio::spawn(async move {
        let Ok(upgraded) = hyper::upgrade::on(request).await else {
            return;
        };
        let mut upgraded = TokioIo::new(upgraded);
        tokio::select! {
            () = shutdown.cancelled() => {}
            _ = tokio::io::copy_bidirectional(&mut upgraded, &mut inside) => {}
        }
    });
    answer(StatusCode::OK)
}

/// The address a CONNECT names: an IP and a port (kube-apiserver dials nodes by their
/// InternalIP and webhooks by their Service's ClusterIP; a host name is not resolved here).
pub fn connect_target(uri: &http::Uri) -> Option<SocketAddr> {
    uri.authority()?.as_str().parse().ok()
}

async fn dial(netns: &Netns, target: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = netns
        .run("opening a TCP socket", TcpSocket::new_v4)
        .map_err(std::io::Error::other)?;
    tokio::time::timeout(DIAL_LIMIT, socket.connect(target))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_names_an_address_and_a_port() {
        let cases = [
            ("172.18.0.2:10250", Some("172.18.0.2:10250")),
            ("10.96.4.7:443", Some("10.96.4.7:443")),
            ("real-node:10250", None),
            ("/path", None),
        ];
        for (uri, expected) in cases {
            let uri: http::Uri = uri.parse().unwrap();
            assert_eq!(
                connect_target(&uri).map(|a| a.to_string()).as_deref(),
                expected,
                "{uri}"
            );
        }
    }
}
