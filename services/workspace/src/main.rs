//! The `toolplane-workspace` binary: configuration, telemetry, the service served through the one
//! start every service shares (health, reflection, `/metrics`), and a graceful stop on SIGINT /
//! SIGTERM. Everything else lives in the library.

use std::sync::Arc;

use clap::Parser;
use tokio::net::TcpListener;
use toolplane_workspace::{
    EngineOptions, Workspace,
    config::{Cli, Config},
};

/// The process's allocator: mimalloc (BENCHMARKS.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let mut config = Config::resolve(&cli)?;
    // Beyond loopback, ImportSkill reads only from configured roots (docs/egress.md).
    if config.limits.skill_import_roots.is_none() && !config.listen.ip().is_loopback() {
        config.limits.skill_import_roots = Some(Vec::new());
    }
    let _telemetry = toolplane_telemetry::init(
        toolplane_telemetry::TelemetryConfig::new("workspace")
            .with_service_version(env!("CARGO_PKG_VERSION")),
    )?;
    let auth = match config
        .auth
        .start_service(
            "workspace",
            &config.data_dir,
            &[config.listen, cli.http_listen],
        )
        .await
    {
        Ok(auth) => auth,
        Err(message) => {
            eprintln!("toolplane-workspace: {message}");
            std::process::exit(2);
        }
    };
    // With a shared `[store]` everything is in it and this process is one replica of several
    // (docs/workspace.md, "On a shared store"); without, the data directory holds it all.
    let ws = Arc::new(match &config.store {
        Some(store) => {
            let store = store.open(toolplane_store::StoreOptions::default()).await?;
            Workspace::open_on_store(store, config.limits.clone()).await?
        }
        None => {
            Workspace::open(EngineOptions {
                data_dir: config.data_dir.clone(),
                limits: config.limits.clone(),
            })
            .await?
        }
    });
    let tls = match config.tls.server() {
        Ok(tls) => tls,
        Err(message) => {
            eprintln!("toolplane-workspace: {message}");
            std::process::exit(2);
        }
    };
    let metrics = TcpListener::bind(cli.http_listen).await?;
    let listener = TcpListener::bind(config.listen).await?;
    let serving = toolplane_workspace::start_on_with_tls(listener, ws, metrics, auth, tls).await?;
    let addr = serving.addr();
    if let Some(metrics) = serving.http_addr() {
        tracing::info!(addr = %metrics, "metrics served at /metrics");
    }
    tracing::info!(%addr, data_dir = %config.data_dir.display(), shared_store = config.store.is_some(), "workspace service listening");
    // Caught from before the line scripts wait for: a signal right after it is a clean stop.
    let stop = toolplane_serve::shutdown_signal();
    // Tests and scripts read this line to learn the port when listening on :0.
    println!("listening on {addr}");
    serving.until(stop).await?;
    tracing::info!("workspace service stopped");
    Ok(())
}
