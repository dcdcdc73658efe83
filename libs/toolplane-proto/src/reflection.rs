//! gRPC server reflection (`grpc.reflection.v1` and `v1alpha`) for the toolplane services.
//!
//! Indexing [`FILE_DESCRIPTOR_SET`](crate::FILE_DESCRIPTOR_SET) — every file, with its comments —
//! costs about 1.5 ms of CPU per reflection service, and a plane starts four servers with one or
//! two each: paid at start-up, that would be most of `toolplane up`'s start time. So each index is
//! built on the first reflection request to it and kept for every later one. Clients such as
//! `buf curl` and `grpcurl` notice nothing but a slightly slower first answer.
//!
//! Each server lists only the services it answers, plus `grpc.health.v1.Health`: `ListServices`
//! on the runtime's port never offers the workspace service.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::server::NamedService;
use tonic_reflection::server::{Builder, v1, v1alpha};
use tower_service::Service;

/// The health service every toolplane server also mounts.
pub const HEALTH: &str = "grpc.health.v1.Health";

type Response = http::Response<Body>;
type Build<S> = dyn Fn() -> Result<S, String> + Send + Sync;

/// A reflection service built on its first request.
pub struct Lazy<S> {
    built: Arc<OnceLock<Result<S, String>>>,
    build: Arc<Build<S>>,
}

impl<S> Clone for Lazy<S> {
    fn clone(&self) -> Self {
        Lazy {
            built: Arc::clone(&self.built),
            build: Arc::clone(&self.build),
        }
    }
}

impl<S> std::fmt::Debug for Lazy<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lazy")
            .field("built", &self.built.get().is_some())
            .finish()
    }
}

impl<S> Lazy<S> {
    fn new(build: impl Fn() -> Result<S, String> + Send + Sync + 'static) -> Self {
        Lazy {
            built: Arc::new(OnceLock::new()),
            build: Arc::new(build),
        }
    }

    /// Builds the index now (tests, or a server that prefers to pay at start).
    pub fn build_now(&self) -> Result<(), String> {
        self.built
            .get_or_init(|| (self.build)())
            .as_ref()
            .map(|_| ())
            .map_err(Clone::clone)
    }
}

impl<S: NamedService> NamedService for Lazy<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for Lazy<S>
where
    S: Service<http::Request<Body>, Response = Response, Error = Infallible> + Clone,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The generated reflection servers are always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        match self.built.get_or_init(|| (self.build)()) {
            Ok(server) => Box::pin(server.clone().call(req)),
            Err(e) => {
                let status = tonic::Status::internal(format!("reflection is unavailable: {e}"));
                Box::pin(std::future::ready(Ok(status.into_http())))
            }
        }
    }
}

fn builder(services: &[&'static str]) -> Builder<'static> {
    let mut b = Builder::configure()
        .register_encoded_file_descriptor_set(crate::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .with_service_name(HEALTH);
    for s in services {
        b = b.with_service_name(*s);
    }
    b
}

/// `grpc.reflection.v1.ServerReflection` for a server answering `services` (fully qualified, e.g.
/// `toolplane.v1.RuntimeService`).
pub fn v1(
    services: &[&'static str],
) -> Lazy<v1::ServerReflectionServer<impl v1::ServerReflection>> {
    let services = services.to_vec();
    Lazy::new(move || builder(&services).build_v1().map_err(|e| e.to_string()))
}

/// `grpc.reflection.v1alpha.ServerReflection`, for older clients; see [`v1`].
pub fn v1alpha(
    services: &[&'static str],
) -> Lazy<v1alpha::ServerReflectionServer<impl v1alpha::ServerReflection>> {
    let services = services.to_vec();
    Lazy::new(move || {
        builder(&services)
            .build_v1alpha()
            .map_err(|e| e.to_string())
    })
}
