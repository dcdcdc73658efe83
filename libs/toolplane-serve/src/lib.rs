//! How every toolplane service serves. [`serve`] takes a bound listener, the service's gRPC
//! services ([`Services`]) and [`ServeOptions`], and runs them the one way: behind the telemetry
//! layer ([`toolplane_telemetry::GrpcServerTraceLayer`]), with the service's message-size limits,
//! with gRPC health reporting each service (and the server, `""`) SERVING, with reflection listing
//! only those services plus health, with `TCP_NODELAY` on every connection, and with the service's
//! HTTP port (`/metrics` and `/healthz`, or the catalog's own router) when it has one.
//! [`Serving::shutdown`] stops in one order: health flips to NOT_SERVING (watchers are told, then
//! their streams end), the server stops accepting, in-flight requests finish, the service's own
//! shutdown hooks run (the mcp-proxy stopping its MCP children, the workspace its journal writer),
//! and the HTTP port stops last. [`shutdown_signal`] and [`Signals`] are the processes' Ctrl-C and
//! SIGTERM.
//!
//! Every gRPC service (health excepted, per the role table) and every HTTP route is served
//! behind `toolplane-auth`'s [`toolplane_auth::AuthLayer`] with the options' [`Authenticator`]:
//! off by default, when every request still carries a [`toolplane_auth::Caller`] (a default-cell
//! admin) in its extensions. [`auth`] holds the flags that configure it (docs/auth.md), and
//! [`admin_audit`] the one admin audit read every service that makes administrative changes
//! serves over its own record, and [`cells::scoped`] the rule that a request acts in its caller's
//! cell.
//!
//! With [`ServeOptions::tls`], both ports serve over TLS ([`tls`]: certificates from files,
//! re-read when they change; client certificates required on the gRPC port when a client CA is
//! given, each connection's verified identity handed to the authentication layer).
//!
//! A crate of its own rather than a module of `toolplane-telemetry`: serving needs the generated
//! servers (`toolplane-proto`, for the message limits and reflection) and `tonic-health`, while
//! telemetry is used by every crate that makes a gRPC call and knows no protobuf; keeping serving
//! out of it keeps it so. This crate knows the wire contract's server types and names (and the
//! admin audit's read, the same on every service), never a service's messages or behaviour.

pub mod admin_audit;
pub mod auth;
pub mod cells;
mod limits;
mod panics;
mod signal;
pub mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::service::{Routes, RoutesBuilder};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use toolplane_auth::{AuthLayer, Authenticator};
use toolplane_telemetry::metrics::Registry;

use crate::panics::{CatchPanicLayer, Protocol};
use crate::tls::ServerTls;

pub use limits::{LimitMessages, MessageLimits};
pub use panics::{PANIC_MESSAGE, PANICS_METRIC};
pub use signal::{Signals, shutdown_signal};

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
type ShutdownHook = Box<dyn FnOnce() -> BoxFuture + Send>;
type AddService = Box<dyn FnOnce(&mut RoutesBuilder, MessageLimits) + Send>;

/// Why a server could not start or stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("serve.io: {what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("serve.transport: the server stopped: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("serve.task: the server task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// The gRPC services one server answers, in the order added. Health and reflection are added by
/// [`serve`] (or [`Services::into_routes`]), never here.
#[derive(Default)]
pub struct Services {
    names: Vec<&'static str>,
    adds: Vec<AddService>,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("names", &self.names)
            .finish()
    }
}

impl Services {
    pub fn new() -> Self {
        Services::default()
    }

    /// Adds a generated server; its message limits are set from the options it is served with.
    #[must_use]
    pub fn add_service<S>(self, service: S) -> Self
    where
        S: tower_service::Service<
                http::Request<Body>,
                Response = http::Response<Body>,
                Error = Infallible,
            > + LimitMessages
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        self.add_service_with_limits(service, MessageLimits::default())
    }

    /// Adds a generated server whose own message limits (each one set) replace the server's:
    /// a service that needs less than the others, or more, says so here.
    #[must_use]
    pub fn add_service_with_limits<S>(mut self, service: S, own: MessageLimits) -> Self
    where
        S: tower_service::Service<
                http::Request<Body>,
                Response = http::Response<Body>,
                Error = Infallible,
            > + LimitMessages
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        self.names.push(S::NAME);
        self.adds.push(Box::new(move |routes, limits| {
            let limits = MessageLimits {
                decoding: own.decoding.or(limits.decoding),
                encoding: own.encoding.or(limits.encoding),
            };
            routes.add_service(service.limit_messages(limits));
        }));
        self
    }

    /// The fully qualified names of the services added (what health and reflection list).
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }

    /// The routes [`serve`] would serve — health with every service SERVING, reflection, the
    /// services with `limits` — for a caller that runs its own server (tests, benchmarks).
    pub async fn into_routes(self, limits: MessageLimits) -> (Routes, HealthReporter) {
        let (health, health_service) = tonic_health::server::health_reporter();
        for name in &self.names {
            health
                .set_service_status(name, ServingStatus::Serving)
                .await;
        }
        let mut routes = Routes::builder();
        routes
            .add_service(health_service)
            .add_service(toolplane_proto::reflection::v1(&self.names))
            .add_service(toolplane_proto::reflection::v1alpha(&self.names));
        for add in self.adds {
            add(&mut routes, limits);
        }
        (routes.routes(), health)
    }
}

/// How one service serves besides its gRPC services.
pub struct ServeOptions {
    service: &'static str,
    limits: MessageLimits,
    http: Option<(TcpListener, axum::Router)>,
    hooks: Vec<ShutdownHook>,
    registry: Option<Arc<Registry>>,
    auth: Authenticator,
    tls: Option<ServerTls>,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("service", &self.service)
            .field("limits", &self.limits)
            .field(
                "http",
                &self.http.as_ref().map(|(l, _)| l.local_addr().ok()),
            )
            .field("hooks", &self.hooks.len())
            .field("auth", &self.auth.is_on())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl ServeOptions {
    /// Options of the service called `service` in logs (`"runtime"`, `"catalog"`, …).
    pub fn new(service: &'static str) -> Self {
        ServeOptions {
            service,
            limits: MessageLimits::default(),
            http: None,
            hooks: Vec::new(),
            registry: None,
            auth: Authenticator::off(auth::DEFAULT_CELL),
            tls: None,
        }
    }

    /// Serves the gRPC port and the HTTP port over TLS when given (default: in the clear).
    #[must_use]
    pub fn tls(mut self, tls: Option<ServerTls>) -> Self {
        self.tls = tls;
        self
    }

    /// Who may call: every gRPC service and HTTP route of the server is served behind
    /// [`AuthLayer`] with `auth` (default: off, every caller a default-cell admin).
    #[must_use]
    pub fn auth(mut self, auth: Authenticator) -> Self {
        self.auth = auth;
        self
    }

    /// The largest message decoded and encoded by every service of the server.
    #[must_use]
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.limits = MessageLimits {
            decoding: Some(bytes),
            encoding: Some(bytes),
        };
        self
    }

    /// The largest request decoded (responses keep tonic's default, no limit).
    #[must_use]
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.limits.decoding = Some(bytes);
        self
    }

    /// Serves `router` on `listener` next to the gRPC server, stopped after it.
    #[must_use]
    pub fn http(mut self, listener: TcpListener, router: axum::Router) -> Self {
        self.http = Some((listener, router));
        self
    }

    /// Serves `registry` as `GET /metrics` (and `GET /healthz`) on `listener`; the server's own
    /// metrics go to it too (as with [`ServeOptions::registry`]).
    #[must_use]
    pub fn metrics(mut self, listener: TcpListener, registry: Arc<Registry>) -> Self {
        self.registry = Some(Arc::clone(&registry));
        self.http(listener, toolplane_telemetry::metrics::router(registry))
    }

    /// The registry the server's own metrics go to (`toolplane_handler_panics_total`), for a
    /// service that serves its metrics some other way than [`ServeOptions::metrics`]. Without
    /// one they are counted but not served.
    #[must_use]
    pub fn registry(mut self, registry: Arc<Registry>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Runs `hook` once the server has stopped accepting and every in-flight request finished;
    /// hooks run in the order added.
    #[must_use]
    pub fn on_shutdown<F, Fut>(mut self, hook: F) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.hooks.push(Box::new(move || Box::pin(hook())));
        self
    }
}

/// Serves `services` on `listener` as described at the top of this crate, on a task of the
/// current tokio runtime; returns once the server accepts connections. Dropping the returned
/// [`Serving`] stops the servers too, without running the shutdown hooks.
pub async fn serve(
    listener: TcpListener,
    services: Services,
    options: ServeOptions,
) -> Result<Serving, ServeError> {
    let ServeOptions {
        service,
        limits,
        http,
        hooks,
        registry,
        auth,
        tls,
    } = options;
    let registry = registry.unwrap_or_default();
    let addr = listener.local_addr().map_err(|source| ServeError::Io {
        what: "the gRPC listener's address",
        source,
    })?;
    let names = services.names.clone();
    let (routes, health) = services.into_routes(limits).await;
    let (stop, stopped) = oneshot::channel::<()>();
    let auth = AuthLayer::new(auth);
    let server = Server::builder()
        .layer(toolplane_telemetry::GrpcServerTraceLayer)
        .layer(CatchPanicLayer::new(service, Protocol::Grpc, &registry))
        .layer(auth.clone())
        .add_routes(routes);
    let stopped = async {
        let _ = stopped.await;
    };
    let grpc = match &tls {
        // The TLS accept loop sets `TCP_NODELAY` itself.
        Some(tls) => {
            tokio::spawn(server.serve_with_incoming_shutdown(tls.grpc_incoming(listener), stopped))
        }
        None => {
            // `serve_with_incoming` does not apply the builder's `tcp_nodelay`; set it on the
            // incoming connections, or Nagle's algorithm and delayed ACKs add ~40 ms to every
            // small response.
            let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
            tokio::spawn(server.serve_with_incoming_shutdown(incoming, stopped))
        }
    };
    let mut serving = Serving {
        service,
        addr,
        health,
        names,
        stop: Some(stop),
        grpc: Some(grpc),
        http: None,
        hooks,
        registry,
        auth,
        tls,
    };
    if let Some((listener, router)) = http {
        serving.serve_http(listener, router)?;
    }
    tracing::debug!(service, %addr, "serving");
    Ok(serving)
}

/// A server started by [`serve`].
pub struct Serving {
    service: &'static str,
    addr: SocketAddr,
    health: HealthReporter,
    names: Vec<&'static str>,
    stop: Option<oneshot::Sender<()>>,
    grpc: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
    http: Option<HttpPort>,
    hooks: Vec<ShutdownHook>,
    registry: Arc<Registry>,
    auth: AuthLayer,
    tls: Option<ServerTls>,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving")
            .field("service", &self.service)
            .field("addr", &self.addr)
            .field("names", &self.names)
            .field("http", &self.http.as_ref().map(|h| h.addr))
            .finish()
    }
}

impl Serving {
    /// The gRPC address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<gRPC address>` (`https://` over TLS), as gRPC clients connect.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The HTTP port's address, when the service has one.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|h| h.addr)
    }

    /// Serves `router` on `listener` from now on (a service whose HTTP port is decided after its
    /// start), behind the same authentication as the gRPC server; replaces an HTTP port already
    /// served, which stops.
    pub fn serve_http(
        &mut self,
        listener: TcpListener,
        router: axum::Router,
    ) -> Result<SocketAddr, ServeError> {
        let router = router.layer(self.auth.clone()).layer(CatchPanicLayer::new(
            self.service,
            Protocol::Http,
            &self.registry,
        ));
        let port = HttpPort::start(self.service, listener, router, self.tls.as_ref())?;
        let addr = port.addr;
        self.http = Some(port);
        Ok(addr)
    }

    /// Waits until the gRPC server stops on its own (a transport error); never returns while it
    /// serves. Afterwards [`Serving::shutdown`] still runs the hooks.
    pub async fn wait(&mut self) -> Result<(), ServeError> {
        match self.grpc.as_mut() {
            Some(task) => {
                let ended = task.await;
                self.grpc = None;
                Ok(ended??)
            }
            None => std::future::pending().await,
        }
    }

    /// Serves until `signal` resolves (or the server stops on its own), then shuts down.
    pub async fn until(mut self, signal: impl Future<Output = ()>) -> Result<(), ServeError> {
        let ended = tokio::select! {
            () = signal => None,
            ended = self.wait() => Some(ended),
        };
        let stopped = self.shutdown().await;
        match ended {
            Some(Err(e)) => Err(e),
            _ => stopped,
        }
    }

    /// Stops gracefully: health NOT_SERVING, stop accepting, let in-flight requests finish, run
    /// the shutdown hooks, stop the HTTP port. Reports how the gRPC server ended.
    pub async fn shutdown(mut self) -> Result<(), ServeError> {
        tracing::debug!(service = self.service, "stopping");
        self.flip_health().await;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let served = match self.grpc.take() {
            Some(task) => task.await.map_err(ServeError::from).and_then(|r| Ok(r?)),
            None => Ok(()),
        };
        for hook in std::mem::take(&mut self.hooks) {
            hook().await;
        }
        if let Some(http) = self.http.take() {
            http.stop().await;
        }
        tracing::debug!(service = self.service, "stopped");
        served
    }

    /// Tells every health watcher NOT_SERVING, then ends their streams: a `Watch` never ends on
    /// its own and would hold the graceful stop open forever.
    async fn flip_health(&mut self) {
        let names: Vec<&str> = self.names.iter().copied().chain([""]).collect();
        for name in &names {
            self.health
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
        for name in &names {
            self.health.clear_service_status(name).await;
        }
    }
}

/// A service's HTTP port, stopped gracefully after its gRPC server.
#[derive(Debug)]
struct HttpPort {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl HttpPort {
    fn start(
        service: &'static str,
        listener: TcpListener,
        router: axum::Router,
        tls: Option<&ServerTls>,
    ) -> Result<HttpPort, ServeError> {
        let what = "the HTTP listener's address";
        let addr = listener
            .local_addr()
            .map_err(|source| ServeError::Io { what, source })?;
        let (stop, stopped) = oneshot::channel::<()>();
        let stopped = async {
            let _ = stopped.await;
        };
        let task = match tls {
            Some(tls) => {
                let listener = tls
                    .http_listener(listener)
                    .map_err(|source| ServeError::Io { what, source })?;
                tokio::spawn(async move {
                    let served = axum::serve(listener, router)
                        .with_graceful_shutdown(stopped)
                        .await;
                    if let Err(e) = served {
                        tracing::warn!(service, error = %e, "the HTTP server stopped");
                    }
                })
            }
            None => tokio::spawn(async move {
                let served = axum::serve(listener, router)
                    .with_graceful_shutdown(stopped)
                    .await;
                if let Err(e) = served {
                    tracing::warn!(service, error = %e, "the HTTP server stopped");
                }
            }),
        };
        Ok(HttpPort {
            addr,
            stop: Some(stop),
            task,
        })
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}
