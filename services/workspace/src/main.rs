//! The `toolplane-workspace` binary: configuration, telemetry, the gRPC server with health and
//! reflection, graceful shutdown on SIGINT / SIGTERM. Everything else lives in the library.

use std::sync::Arc;

use clap::Parser;
use tokio::net::TcpListener;
use tonic::transport::{Server, server::TcpIncoming};
use toolplane_workspace::{
    EngineOptions, Workspace,
    config::{Cli, Config},
};

/// The process's allocator: mimalloc (BENCHMARKS.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let config = Config::resolve(&cli)?;
    let _telemetry = toolplane_telemetry::init(
        toolplane_telemetry::TelemetryConfig::new("workspace")
            .with_service_version(env!("CARGO_PKG_VERSION")),
    )?;
    let ws = Arc::new(
        Workspace::open(EngineOptions {
            data_dir: config.data_dir.clone(),
            limits: config.limits.clone(),
        })
        .await?,
    );
    let routes = toolplane_workspace::routes(Arc::clone(&ws)).await?;
    let metrics = toolplane_telemetry::metrics::MetricsServer::start(
        TcpListener::bind(cli.http_listen).await?,
        Arc::clone(&ws.metrics().registry),
    )?;
    tracing::info!(addr = %metrics.addr(), "metrics served at /metrics");
    let listener = TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, data_dir = %config.data_dir.display(), "workspace service listening");
    // Tests and scripts read this line to learn the port when listening on :0.
    println!("listening on {addr}");
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    Server::builder()
        .layer(toolplane_telemetry::GrpcServerTraceLayer)
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, shutdown_signal())
        .await?;
    ws.shutdown();
    metrics.stop().await;
    tracing::info!("workspace service stopped");
    Ok(())
}
