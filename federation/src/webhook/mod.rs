//! The validating admission webhook (`comb run --webhook-addr`, DESIGN.md §11): `POST
//! /validate` answers `admission.k8s.io/v1` AdmissionReviews for CREATE and UPDATE of Combs
//! over HTTPS, refusing at the door what the controller would fail (an unknown class, a stub
//! that breaks its original's endpoints, a manifest the layer does not allow, an upstream the
//! layer does not allow `spec.upstream` to name, a dependency on itself, a spec that does not
//! decode), in one sentence, as the status would say it.
//!
//! The decision is [`decision::refusal`], a pure function; this module is the HTTPS around it.

pub mod decision;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use comb_api::Comb;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::Service;

use crate::config::Config;
use crate::engine::class::ClassRegistry;
use crate::error::{Error, Result};
pub use decision::{Refusal, layer_refusal, refusal};
pub use tls::{ServiceName, ServingTls};

/// Where the webhook listens and what it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookOptions {
    /// Port 0: any free port (see [`Webhook::address`]).
    pub address: SocketAddr,
    pub certificates: Certificates,
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Certificates {
    /// `tls.crt` and `tls.key` of a directory (cert-manager's Secret, mounted).
    Directory(PathBuf),
    /// A CA and a certificate generated at start, for the listen address and `service`'s DNS
    /// names; the CA's PEM is written to `ca_file` when given.
    Generated {
        service: Option<ServiceName>,
        ca_file: Option<PathBuf>,
    },
}

/// The webhook, bound and ready to serve.
pub struct Webhook {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    address: SocketAddr,
    ca_pem: Option<String>,
    router: Router,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

#[derive(Clone)]
struct Judge {
    config: Arc<Config>,
    registry: Arc<ClassRegistry>,
}

impl Webhook {
    /// Binds `options.address` and loads (or generates, and writes the CA of) the certificate.
    pub async fn bind(
        options: &WebhookOptions,
        config: Arc<Config>,
        registry: Arc<ClassRegistry>,
    ) -> Result<Webhook> {
        let listener = TcpListener::bind(options.address).await.map_err(|error| {
            Error::webhook_from(
                format!("the webhook address {} cannot be used", options.address),
                error,
            )
        })?;
        let address = listener.local_addr().map_err(|error| {
            Error::webhook_from("the webhook address has no local address", error)
        })?;
        let tls = match &options.certificates {
            Certificates::Directory(dir) => ServingTls::from_dir(dir)?,
            Certificates::Generated { service, ca_file } => {
                let names =
                    tls::certificate_names(address, service.as_ref(), &config.cluster_domain);
                let tls = ServingTls::generate(&names)?;
                if let (Some(path), Some(pem)) = (ca_file, &tls.ca_pem) {
                    comb_kubeconfigs::write::write_atomic(path, pem.as_bytes()).map_err(
                        |error| {
                            Error::webhook_from(
                                format!("the webhook's CA cannot be written to {}", path.display()),
                                error,
                            )
                        },
                    )?;
                }
                tls
            }
        };
        Ok(Webhook {
            listener,
            acceptor: TlsAcceptor::from(tls.server_config),
            address,
            ca_pem: tls.ca_pem,
            router: router(config, registry),
        })
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The PEM of the CA it generated (for a caBundle); `None` with a certificate directory.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Serves until `shutdown`.
    pub async fn serve(self, shutdown: CancellationToken) {
        tracing::info!(address = %self.address, "admission webhook listening (POST /validate)");
        loop {
            let stream = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(error) => {
                        tracing::debug!(%error, "webhook accept failed");
                        continue;
                    }
                },
            };
            let acceptor = self.acceptor.clone();
            let router = self.router.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                match acceptor.accept(stream).await {
                    Ok(stream) => serve_connection(TokioIo::new(stream), router, shutdown).await,
                    Err(error) => tracing::debug!(%error, "webhook TLS handshake failed"),
                }
            });
        }
    }
}

async fn serve_connection<I>(io: I, router: Router, shutdown: CancellationToken)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
        let mut router = router.clone();
        async move { router.call(request.map(Body::new)).await }
    });
    let connection = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        () = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// `POST /validate` over the controller's configuration and classes.
pub fn router(config: Arc<Config>, registry: Arc<ClassRegistry>) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .with_state(Judge { config, registry })
}

/// The part of an `AdmissionReview` the webhook reads.
#[derive(Deserialize)]
struct AdmissionReview {
    request: Option<AdmissionRequest>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionRequest {
    uid: String,
    operation: String,
    object: Option<Value>,
    old_object: Option<Value>,
}

async fn validate(State(judge): State<Judge>, body: axum::body::Bytes) -> Response {
    let review: AdmissionReview = match serde_json::from_slice(&body) {
        Ok(review) => review,
        Err(error) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("the body is not an AdmissionReview: {error}\n"),
            )
                .into_response();
        }
    };
    let Some(request) = review.request else {
        return (
            StatusCode::BAD_REQUEST,
            "the AdmissionReview has no request\n",
        )
            .into_response();
    };
    let refused = judge_request(&judge, &request).await;
    let mut response = json!({"uid": request.uid, "allowed": refused.is_none()});
    if let Some(refusal) = refused {
        response["status"] = json!({
            "code": refusal.code,
            "reason": refusal.reason,
            "message": refusal.message,
        });
    }
    axum::Json(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    }))
    .into_response()
}

/// The refusal of one request, logged without its body.
async fn judge_request(judge: &Judge, request: &AdmissionRequest) -> Option<Refusal> {
    if !matches!(request.operation.as_str(), "CREATE" | "UPDATE") {
        return None;
    }
    let object = request.object.as_ref()?;
    if request.operation == "UPDATE" && !judged_on_update(object, request.old_object.as_ref()) {
        return None;
    }
    if object.get("kind").and_then(Value::as_str) == Some(comb_api::LAYER_KIND) {
        return judge_layer(judge, object, &request.operation);
    }
    let comb = match Comb::from_value(object.clone()) {
        Ok(comb) => comb,
        Err(error) => {
            return Some(Refusal {
                code: 422,
                reason: "Invalid",
                message: format!("the object is not a Comb: {error}"),
            });
        }
    };
    let refused = refusal(&comb, &judge.config, &judge.registry).await;
    let namespace = comb.metadata.namespace.as_deref().unwrap_or_default();
    let name = comb.metadata.name.as_deref().unwrap_or_default();
    match &refused {
        Some(refusal) => tracing::info!(
            namespace,
            comb = name,
            operation = %request.operation,
            reason = refusal.reason,
            "admission refused"
        ),
        None => tracing::debug!(namespace, comb = name, operation = %request.operation, "admitted"),
    }
    refused
}

/// A CombLayer: refused as its template refuses it.
fn judge_layer(judge: &Judge, object: &Value, operation: &str) -> Option<Refusal> {
    let layer: comb_api::CombLayer = match serde_json::from_value(object.clone()) {
        Ok(layer) => layer,
        Err(error) => {
            return Some(Refusal {
                code: 422,
                reason: "Invalid",
                message: format!("the object is not a CombLayer: {error}"),
            });
        }
    };
    let refused = decision::layer_refusal(&layer, &judge.config, jiff::Timestamp::now());
    if let Some(refusal) = &refused {
        tracing::info!(
            layer = layer.name(),
            operation,
            reason = refusal.reason,
            "admission refused"
        );
    }
    refused
}

/// An update is judged when it changes the spec of a Comb that is not being deleted: the
/// controller's own writes (finalizers, annotations) and the finalizer's removal always pass, so
/// that a Comb that a new configuration refuses can still be cleaned up and deleted.
fn judged_on_update(object: &Value, old: Option<&Value>) -> bool {
    let deleting = object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|stamp| !stamp.is_null());
    !deleting && old.and_then(|old| old.get("spec")) != object.get("spec")
}
