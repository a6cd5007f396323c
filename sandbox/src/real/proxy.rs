//! The proxy in front of a real kube-apiserver: clients talk to it (TLS with the sandbox CA),
//! it forwards every request unchanged (headers, bearer token and impersonation included) and
//! streams the answer back, watches too. Wrapped in the sandbox's [`crate::controls`], it
//! serves the same `/_sandbox/` test controls as an emulated cluster.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;

use crate::error::Result;

/// An HTTPS client that trusts only `ca` (DER), HTTP/1.1, pooled.
pub type ApiClient = Client<HttpsConnector<HttpConnector>, Body>;

/// A client for servers whose certificates `ca` signs.
pub fn api_client(ca: CertificateDer<'static>) -> Result<ApiClient> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

#[derive(Clone)]
struct Upstream {
    client: ApiClient,
    /// `127.0.0.1:PORT` of the kube-apiserver.
    authority: String,
}

/// A router that forwards everything to the kube-apiserver at `authority`.
pub fn forwarding_router(client: ApiClient, authority: String) -> Router {
    Router::new()
        .fallback(forward)
        .with_state(Upstream { client, authority })
}

async fn forward(State(upstream): State<Upstream>, mut request: Request) -> Response {
    let path_and_query = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    let uri: Uri = match format!("https://{}{path_and_query}", upstream.authority).parse() {
        Ok(uri) => uri,
        Err(error) => return bad_gateway(format!("the request path does not parse: {error}")),
    };
    *request.uri_mut() = uri;
    if let Ok(host) = HeaderValue::from_str(&upstream.authority) {
        request.headers_mut().insert(http::header::HOST, host);
    }
    match upstream.client.request(request).await {
        Ok(response) => response.map(Body::new).into_response(),
        Err(error) => bad_gateway(format!("the kube-apiserver does not answer: {error}")),
    }
}

/// A 502 as a `metav1.Status`, so clients read it like any API error.
fn bad_gateway(message: String) -> Response {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "ServiceUnavailable", "code": 502
    });
    (
        StatusCode::BAD_GATEWAY,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
