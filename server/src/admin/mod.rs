//! The coordinator's admin port (`--metrics-listen`): Prometheus metrics at
//! `/metrics`, and the query UI under `/ui`: running and recent queries, a
//! query's SQL, stage graph with live progress, task timeline by worker and
//! metrics, its error; the workers.
//!
//! Server-rendered page shells with one small embedded script that polls
//! the JSON under `/ui/api` twice a second: no build step, no npm
//! dependency, nothing fetched from elsewhere (the UI works offline).
//! With authentication on, every `/ui` request needs the users' Basic
//! credentials (as the Flight SQL handshake) or a bearer token; `/metrics`
//! stays open to the scraper, as before.

mod api;
mod pages;
mod state;

pub use state::Admin;

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// Binds `listen` now (so the port is known when the server says it is
/// up) and serves the admin routes in the background.
pub async fn serve(listen: SocketAddr, admin: Admin) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("--metrics-listen {listen}: {e}"))?;
    let addr = listener.local_addr()?;
    let ui = Router::new()
        .route("/ui", get(pages::queries))
        .route("/ui/query/{id}", get(pages::query))
        .route("/ui/workers", get(pages::workers))
        .route("/ui/assets/ui.js", get(pages::script))
        .route("/ui/assets/ui.css", get(pages::style))
        .route("/ui/api/queries", get(api::queries))
        .route("/ui/api/query/{id}", get(api::query))
        .route("/ui/api/workers", get(api::workers))
        .route_layer(axum::middleware::from_fn_with_state(
            admin.clone(),
            authenticated,
        ));
    let app = Router::new()
        .route("/metrics", get(metrics))
        .merge(ui)
        .with_state(admin);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        {
            tracing::error!("the admin port stopped: {e}");
        }
    });
    tracing::info!("metrics on http://{addr}/metrics, query UI on http://{addr}/ui");
    Ok(addr)
}

async fn metrics(State(admin): State<Admin>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        admin.metrics.render(),
    )
        .into_response()
}

/// Lets a request through when authentication is off, or its credentials
/// are a user's (Basic) or a valid token (Bearer); otherwise 401 with a
/// Basic challenge, so a browser asks for them.
async fn authenticated(
    State(admin): State<Admin>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    let Some(auth) = &admin.auth else {
        return next.run(request).await;
    };
    match auth.handshake(request.headers(), Some(peer.ip())) {
        Ok(_) => next.run(request).await,
        Err(status) => (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"Squadron\", charset=\"UTF-8\""),
            )],
            status.message().to_string(),
        )
            .into_response(),
    }
}
