//! The toolplane runtime service: runs, invocations, their frozen tool snapshots, the request gate,
//! governance, the journal's content and the tool loop (ARCHITECTURE "The services").
//!
//! Two kinds of users: hosts that call their own model and hand the runtime each turn's tool calls
//! (`OpenInvocation` → `ExecuteToolCalls` → `CloseInvocation`), and hosts that let the runtime drive
//! the whole loop against a model endpoint (`StartRun` → `WatchRun`). Both run every call through one
//! pipeline (`pipeline`). The library starts the service on a real socket; `main.rs` is a thin
//! binary around [`start`].

// The modules form layers that import one way, down: state, context, lifecycle, tools, pipeline,
// runloop, children, convert, peers, service, mcp and console (ARCHITECTURE.md; the table is in
// tests/integration/layering.rs).
pub mod children;
pub mod config;
pub mod console;
pub mod context;
pub mod convert;
pub mod error;
pub mod lifecycle;
pub mod mcp;
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
use tokio::task::JoinHandle;
use toolplane_proto::v1::runtime_service_server::RuntimeServiceServer;
use toolplane_serve::{ServeOptions, Services, Serving};

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
    serving: Serving,
}

impl RuntimeServer {
    /// Stops taking new runs; in cluster mode finishes in-flight turns and hands every run over
    /// to the other runtimes (`[cluster] drain_ms`, docs/runtime.md "Taking a run over"); then
    /// stops accepting requests, lets in-flight ones finish, stops the idle-invocation reaper and
    /// the metrics port, and waits for the server to end.
    pub async fn shutdown(self) {
        self.runtime.start_draining();
        self.runtime.hand_over_runs().await;
        if let Err(e) = self.serving.shutdown().await {
            tracing::warn!(error = %e, "the runtime server stopped with an error");
        }
    }

    /// Where `/metrics` is served, once [`RuntimeServer::serve_metrics`] ran.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.serving.http_addr()
    }

    /// Serves the HTTP port on `listener` until the runtime stops: `GET /metrics`,
    /// `GET /healthz`, the MCP face at `/mcp` (docs/mcp-server.md) and the web console at
    /// `/console` (docs/console.md).
    pub fn serve_metrics(&mut self, listener: TcpListener) -> Result<SocketAddr, RuntimeError> {
        let router =
            toolplane_telemetry::metrics::router(Arc::clone(&self.runtime.metrics.registry))
                .merge(mcp::router(Arc::clone(&self.runtime)))
                .merge(console::router(Arc::clone(&self.runtime)));
        self.serving
            .serve_http(listener, router)
            .map_err(|e| RuntimeError::invalid(format!("metrics listener: {e}")))
    }

    /// Waits until the server stops on its own (a transport error).
    pub async fn wait(&mut self) -> Result<(), RuntimeError> {
        self.serving
            .wait()
            .await
            .map_err(|e| RuntimeError::dependency(format!("the server stopped: {e}")))
    }
}

/// Binds `cfg.listen` (port 0 picks a free port) and serves the runtime with gRPC health and
/// reflection, behind `auth`.
pub async fn start(
    cfg: RuntimeConfig,
    auth: toolplane_auth::Authenticator,
) -> Result<RuntimeServer, RuntimeError> {
    let listener = TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| RuntimeError::invalid(format!("cannot listen on {}: {e}", cfg.listen)))?;
    start_on(cfg, listener, auth).await
}

/// Serves on an already bound listener, through the one start every service shares
/// (`toolplane_serve::serve`), behind `auth`; the idle-invocation reaper stops once in-flight
/// requests finished.
pub async fn start_on(
    cfg: RuntimeConfig,
    listener: TcpListener,
    auth: toolplane_auth::Authenticator,
) -> Result<RuntimeServer, RuntimeError> {
    let tls = cfg.tls.server().map_err(RuntimeError::invalid)?;
    let runtime = Runtime::open(cfg).await?;
    let services = Services::new().add_service(RuntimeServiceServer::new(
        service::RuntimeGrpc::new(runtime.clone()),
    ));
    let reaper = spawn_reaper(Arc::clone(&runtime));
    let options = ServeOptions::new("runtime")
        .max_message_bytes(MAX_REQUEST_BYTES)
        .registry(Arc::clone(&runtime.metrics.registry))
        .auth(auth)
        .tls(tls)
        .on_shutdown(move || async move { reaper.abort() });
    let serving = toolplane_serve::serve(listener, services, options)
        .await
        .map_err(|e| RuntimeError::invalid(e.to_string()))?;
    let addr = serving.addr();
    tracing::info!(%addr, "runtime serving");
    Ok(RuntimeServer {
        addr,
        runtime,
        serving,
    })
}

/// Closes idle invocations, checking four times per idle timeout (between 50 ms and 60 s), and
/// expires approvals at their deadlines (docs/approvals.md, "Timeouts").
fn spawn_reaper(runtime: Arc<Runtime>) -> JoinHandle<()> {
    let every = (runtime.cfg.invocation_idle_timeout / 4)
        .clamp(Duration::from_millis(50), Duration::from_secs(60));
    tokio::spawn(async move {
        let reap = async {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                runtime.reap_idle().await;
            }
        };
        tokio::join!(reap, runtime.sweep_approvals(), take_over(&runtime));
    })
}

/// In cluster mode over a shared store, looks for open runs nobody drives twice per lease TTL and
/// takes them over (docs/runtime.md, "Taking a run over").
async fn take_over(runtime: &Arc<Runtime>) {
    if !runtime.cfg.cluster.leases || !runtime.cfg.store_config().is_shared() {
        return;
    }
    let every = Duration::from_millis((runtime.cfg.cluster.lease_ttl_ms / 2).max(50));
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        if runtime.is_draining() {
            return;
        }
        runloop::take_over_orphans(runtime).await;
    }
}
