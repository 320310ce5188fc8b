//! The tower layer that authenticates every call before it reaches a
//! service: a valid bearer token, or UNAUTHENTICATED. Handshake (where
//! clients log in) and the gRPC health service (load balancers) are open.
//! The caller's `Principal` is left in the request's extensions.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tower::{Layer, Service};

use super::auth::Authenticator;

const OPEN_PATHS: &[&str] = &[
    "/arrow.flight.protocol.FlightService/Handshake",
    "/grpc.health.v1.Health/",
];

#[derive(Clone)]
pub struct AuthLayer {
    auth: Option<Arc<Authenticator>>,
}

impl AuthLayer {
    /// Checks calls with `auth`; lets everything through with `None`
    /// (insecure mode).
    pub fn new(auth: Option<Arc<Authenticator>>) -> Self {
        Self { auth }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            auth: self.auth.clone(),
        }
    }
}

#[derive(Clone)]
pub struct AuthService<S> {
    inner: S,
    auth: Option<Arc<Authenticator>>,
}

impl<S, B> Service<http::Request<B>> for AuthService<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let open = OPEN_PATHS
            .iter()
            .any(|p| request.uri().path().starts_with(p));
        if let (Some(auth), false) = (&self.auth, open) {
            match auth.authenticate(request.headers()) {
                Ok(principal) => {
                    request.extensions_mut().insert(principal);
                }
                Err(status) => {
                    metrics::counter!(squadron_coordinator::metrics::AUTH_FAILURES, "kind" => "token")
                        .increment(1);
                    tracing::debug!(path = request.uri().path(), "refused: {}", status.message());
                    return Box::pin(async move { Ok(status.into_http()) });
                }
            }
        }
        Box::pin(self.inner.call(request))
    }
}
