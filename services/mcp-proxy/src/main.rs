//! `toolplane-mcp-proxy`: reads its config (file, flags, environment), sets up telemetry, opens
//! its store, serves gRPC (with health and reflection) on loopback by default, and on SIGINT or
//! SIGTERM finishes in-flight calls and stops every MCP server it started.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use toolplane_mcp_proxy::config::Config;
use toolplane_mcp_proxy::{McpProxy, STORE_NAMESPACE};
use toolplane_store::{Store, StoreExt as _};

/// The process's allocator: mimalloc (BENCHMARKS.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "toolplane-mcp-proxy",
    version,
    about = "MCP servers behind the tool plane"
)]
struct Args {
    /// TOML config file.
    #[arg(long, env = "TOOLPLANE_MCP_PROXY_CONFIG")]
    config: Option<PathBuf>,
    /// gRPC address to listen on (default 127.0.0.1:7440).
    #[arg(long, env = "TOOLPLANE_MCP_PROXY_LISTEN")]
    listen: Option<std::net::SocketAddr>,
    /// Store root directory (default ./toolplane-data); the state is kept under
    /// `<dir>/mcp-proxy/`.
    #[arg(long, env = "TOOLPLANE_MCP_PROXY_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// HTTP address of `/metrics` and `/healthz`.
    #[arg(
        long,
        env = "TOOLPLANE_MCP_PROXY_HTTP_LISTEN",
        default_value = "127.0.0.1:7441"
    )]
    http_listen: std::net::SocketAddr,
    /// Environment variables `inherit_env` and `header_env` may name (names or one-`*`
    /// patterns, comma-separated); replaces the config's `proxy.processes.env_allow`.
    #[arg(long, env = "TOOLPLANE_MCP_PROXY_ENV_ALLOW", value_name = "NAME,...")]
    env_allow: Option<String>,
    /// Commands stdio registrations may run when authentication is on (comma-separated, as
    /// written in registrations); replaces the config's `proxy.processes.allowed_commands`.
    #[arg(
        long,
        env = "TOOLPLANE_MCP_PROXY_ALLOWED_COMMANDS",
        value_name = "COMMAND,..."
    )]
    allowed_commands: Option<String>,
    #[command(flatten)]
    auth: toolplane_serve::auth::AuthArgs,
    #[command(flatten)]
    tls: toolplane_serve::tls::TlsArgs,
}

/// Why the binary stops early: the line it prints and its exit status (2 when authentication
/// refuses the start, as `auth.required`; 1 otherwise).
struct Failure {
    status: u8,
    message: String,
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure { status: 1, message }
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(Failure { status, message }) => {
            eprintln!("toolplane-mcp-proxy: {message}");
            std::process::ExitCode::from(status)
        }
    }
}

async fn run() -> Result<(), Failure> {
    let args = Args::parse();
    let mut config = match &args.config {
        Some(path) => Config::from_file(path).map_err(|e| e.to_string())?,
        None => Config::default(),
    };
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(dir) = args.data_dir {
        config.data_dir = dir;
    }
    if let Some(list) = &args.env_allow {
        config.proxy.processes.env_allow = toolplane_core::envallow::EnvAllowList::parse(list);
    }
    if let Some(list) = &args.allowed_commands {
        config.proxy.processes.allowed_commands = list
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect();
    }
    // Private networks are reachable by default only from a proxy on loopback (docs/egress.md).
    config.proxy.egress = config
        .proxy
        .egress
        .clone()
        .for_posture(!config.listen.ip().is_loopback());
    let _telemetry = toolplane_telemetry::init(
        toolplane_telemetry::TelemetryConfig::new("mcp-proxy")
            .with_service_version(env!("CARGO_PKG_VERSION")),
    )
    .map_err(|e| e.to_string())?;

    let auth = args
        .auth
        .over(&config.auth)
        .start_service(
            "mcp-proxy",
            &config.data_dir,
            &[config.listen, args.http_listen],
        )
        .await
        .map_err(|message| Failure { status: 2, message })?;
    let tls = args
        .tls
        .over(&config.tls)
        .server()
        .map_err(|message| Failure { status: 2, message })?;
    let store: Arc<dyn Store> = config
        .store_config()
        .open(toolplane_store::StoreOptions::default())
        .await
        .map_err(|e| format!("mcp.store_failed: {e}"))?;
    let store = store
        .namespace(STORE_NAMESPACE)
        .map_err(|e| format!("mcp.store_failed: {e}"))?;
    let proxy = McpProxy::open(store, config.proxy.clone())
        .await
        .map_err(|e| e.to_string())?;
    proxy.set_shared_store(config.store_config().is_shared());
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("mcp.serve_failed: cannot bind {}: {e}", config.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let http = tokio::net::TcpListener::bind(args.http_listen)
        .await
        .map_err(|e| format!("mcp.serve_failed: cannot bind {}: {e}", args.http_listen))?;
    let serving = toolplane_mcp_proxy::start_on_with_tls(listener, proxy, Some(http), auth, tls)
        .await
        .map_err(|e| e.to_string())?;
    // Caught from before the line scripts wait for: a signal right after it is a clean stop.
    let stop = toolplane_serve::shutdown_signal();
    let metrics = serving
        .http_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    tracing::info!(%addr, %metrics, "mcp-proxy serving");
    // Tests and scripts read this line to learn the port when listening on :0.
    println!("listening on {addr}");
    serving
        .until(stop)
        .await
        .map_err(|e| format!("mcp.serve_failed: {e}"))?;
    tracing::info!("mcp-proxy stopped");
    Ok(())
}
