//! The admin HTTP server: `/` (the federation's status page), `/metrics`, `/healthz`, `/readyz`,
//! `/debug/queue`, `/debug/layers`, `/debug/shards`.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{ControllerHandle, Readiness};

/// The admin routes over the controller's state.
pub fn router(handle: ControllerHandle) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/debug/queue", get(queue))
        .route("/debug/layers", get(layers))
        .route("/debug/shards", get(shards))
        .with_state(handle)
}

/// Serves the admin routes on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, handle: ControllerHandle, shutdown: CancellationToken) {
    let address = listener
        .local_addr()
        .map(|address| address.to_string())
        .unwrap_or_default();
    tracing::info!(%address, "admin server listening (/, /metrics, /healthz, /readyz, /debug/queue)");
    let served = axum::serve(listener, router(handle))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
    if let Err(error) = served {
        tracing::error!(%error, "the admin server stopped");
    }
}

async fn metrics(State(handle): State<ControllerHandle>) -> Response {
    match handle.metrics_text() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

/// The status page: the layers as columns, each Comb's phase, the borrow edges; server-rendered
/// and refreshed by the browser every 5 seconds.
async fn page(State(handle): State<ControllerHandle>) -> Response {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%d %H:%M:%S UTC")
        .to_string();
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        crate::picture::to_html(&handle.picture(), &now, 5),
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(handle): State<ControllerHandle>) -> Response {
    match handle.readiness() {
        Readiness::Ready => (StatusCode::OK, "ready\n".to_string()).into_response(),
        Readiness::NotReady(why) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response()
        }
    }
}

async fn queue(State(handle): State<ControllerHandle>) -> Response {
    axum::Json(handle.queue()).into_response()
}

async fn layers(State(handle): State<ControllerHandle>) -> Response {
    axum::Json(handle.layers()).into_response()
}

/// Who holds which layer, as this replica sees it; 404 when the run is not sharded.
async fn shards(State(handle): State<ControllerHandle>) -> Response {
    match handle.shards() {
        Some(view) => axum::Json(view).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "not sharded: this replica steps every layer (comb run --sharded shares them)\n",
        )
            .into_response(),
    }
}
