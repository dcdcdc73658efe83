//! The toolplane runtime service: runs, invocations, their frozen tool snapshots, the request gate,
//! governance, the journal's content and the tool loop (ARCHITECTURE "The services").
//!
//! Two kinds of users: hosts that call their own model and hand the runtime each turn's tool calls
//! (`OpenInvocation` → `ExecuteToolCalls` → `CloseInvocation`), and hosts that let the runtime drive
//! the whole loop against a model endpoint (`StartRun` → `WatchRun`). Both run every call through one
//! pipeline (`pipeline`). The library starts the service on a real socket; `main.rs` is a thin
//! binary around [`start`].

// The modules form layers that import one way, down: state, context, lifecycle, tools, pipeline,
// runloop, children, convert, peers, service (ARCHITECTURE.md; the table is in tests/layering.rs).
pub mod children;
pub mod config;
pub mod context;
pub mod convert;
pub mod error;
pub mod lifecycle;
pub mod metrics;
pub mod model;
pub mod peers;
pub mod pipeline;
pub mod runloop;
pub mod service;
pub mod state;
pub mod tools;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use toolplane_proto::v1::runtime_service_server::RuntimeServiceServer;

pub use config::RuntimeConfig;
pub use context::Runtime;
pub use error::RuntimeError;

/// Largest request the service accepts (calls of one turn, run specs with scripts).
const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// A running runtime service.
#[derive(Debug)]
pub struct RuntimeServer {
    pub addr: SocketAddr,
    pub runtime: Arc<Runtime>,
    shutdown: Option<oneshot::Sender<()>>,
    join: JoinHandle<Result<(), tonic::transport::Error>>,
    reaper: JoinHandle<()>,
    http: Option<toolplane_telemetry::metrics::MetricsServer>,
}

impl RuntimeServer {
    /// Stops accepting requests, lets in-flight ones finish, and waits for the server to end.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.reaper.abort();
        let _ = (&mut self.join).await;
        if let Some(http) = self.http.take() {
            http.stop().await;
        }
    }

    /// Where `/metrics` is served, once [`RuntimeServer::serve_metrics`] ran.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.http
            .as_ref()
            .map(toolplane_telemetry::metrics::MetricsServer::addr)
    }

    /// Serves `GET /metrics` (and `GET /healthz`) on `listener` until the runtime stops.
    pub fn serve_metrics(&mut self, listener: TcpListener) -> Result<SocketAddr, RuntimeError> {
        let server = toolplane_telemetry::metrics::MetricsServer::start(
            listener,
            Arc::clone(&self.runtime.metrics.registry),
        )
        .map_err(|e| RuntimeError::invalid(format!("metrics listener: {e}")))?;
        let addr = server.addr();
        self.http = Some(server);
        Ok(addr)
    }

    /// Waits until the server stops on its own (a transport error).
    pub async fn wait(&mut self) -> Result<(), RuntimeError> {
        match (&mut self.join).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(RuntimeError::dependency(format!("the server stopped: {e}"))),
            Err(e) => Err(RuntimeError::dependency(format!(
                "the server task failed: {e}"
            ))),
        }
    }
}

/// Binds `cfg.listen` (port 0 picks a free port) and serves the runtime with gRPC health and
/// reflection.
pub async fn start(cfg: RuntimeConfig) -> Result<RuntimeServer, RuntimeError> {
    let listener = TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| RuntimeError::invalid(format!("cannot listen on {}: {e}", cfg.listen)))?;
    start_on(cfg, listener).await
}

/// Serves on an already bound listener.
pub async fn start_on(
    cfg: RuntimeConfig,
    listener: TcpListener,
) -> Result<RuntimeServer, RuntimeError> {
    let addr = listener
        .local_addr()
        .map_err(|e| RuntimeError::invalid(e.to_string()))?;
    let runtime = Runtime::open(cfg).await?;
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<RuntimeServiceServer<service::RuntimeGrpc>>()
        .await;
    let names = [<RuntimeServiceServer<service::RuntimeGrpc> as tonic::server::NamedService>::NAME];
    let reflection = toolplane_proto::reflection::v1(&names);
    let reflection_v1alpha = toolplane_proto::reflection::v1alpha(&names);
    let svc = RuntimeServiceServer::new(service::RuntimeGrpc {
        rt: runtime.clone(),
    })
    .max_decoding_message_size(MAX_REQUEST_BYTES)
    .max_encoding_message_size(MAX_REQUEST_BYTES);
    let (tx, rx) = oneshot::channel::<()>();
    // `serve_with_incoming` does not apply the builder's `tcp_nodelay`; set it on the incoming
    // connections, or Nagle's algorithm and delayed ACKs add ~40 ms to every small response.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let join = tokio::spawn(
        tonic::transport::Server::builder()
            .layer(toolplane_telemetry::GrpcServerTraceLayer)
            .add_service(health)
            .add_service(reflection)
            .add_service(reflection_v1alpha)
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = rx.await;
            }),
    );
    let reaper_rt = runtime.clone();
    let every = (reaper_rt.cfg.invocation_idle_timeout / 4)
        .clamp(Duration::from_millis(50), Duration::from_secs(60));
    let reaper = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            reaper_rt.reap_idle().await;
        }
    });
    tracing::info!(%addr, "runtime serving");
    Ok(RuntimeServer {
        addr,
        runtime,
        shutdown: Some(tx),
        join,
        reaper,
        http: None,
    })
}
