//! `toolplane-runtime`: the runtime service as its own process. Reads a TOML config file (if
//! given), applies flags and `TOOLPLANE_RUNTIME_*` environment overrides, starts telemetry, serves
//! until SIGINT / SIGTERM and shuts down gracefully.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use toolplane_runtime::RuntimeConfig;

/// The process's allocator: mimalloc (BENCHMARKS.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(name = "toolplane-runtime", about = "The toolplane runtime service")]
struct Args {
    /// TOML config file (see docs/runtime.md).
    #[arg(long, env = "TOOLPLANE_RUNTIME_CONFIG")]
    config: Option<PathBuf>,
    /// Listen address (default 127.0.0.1:7410).
    #[arg(long, env = "TOOLPLANE_RUNTIME_LISTEN")]
    listen: Option<SocketAddr>,
    #[arg(long, env = "TOOLPLANE_CATALOG_URL")]
    catalog_url: Option<String>,
    #[arg(long, env = "TOOLPLANE_WORKSPACE_URL")]
    workspace_url: Option<String>,
    #[arg(long, env = "TOOLPLANE_MCP_PROXY_URL")]
    mcp_proxy_url: Option<String>,
    /// Directory of the runtime's own state.
    #[arg(long, env = "TOOLPLANE_RUNTIME_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// HTTP address of `/metrics` and `/healthz`.
    #[arg(
        long,
        env = "TOOLPLANE_RUNTIME_HTTP_LISTEN",
        default_value = "127.0.0.1:7411"
    )]
    http_listen: SocketAddr,
    /// Variables a model endpoint's `api_key_env` may name (names or one-`*` patterns,
    /// comma-separated); replaces the config's `env_allow`.
    #[arg(long, env = "TOOLPLANE_RUNTIME_ENV_ALLOW", value_name = "NAME,...")]
    env_allow: Option<String>,
    /// `Host` values the MCP face at `/mcp` answers besides the loopback names (comma-separated,
    /// `name` or `name:port`, or `*` for any); replaces the config's `mcp_allowed_hosts`.
    #[arg(
        long,
        env = "TOOLPLANE_RUNTIME_MCP_ALLOWED_HOSTS",
        value_name = "HOST,..."
    )]
    mcp_allowed_hosts: Option<String>,
    /// File holding the credential (`tp_…`) sent to the catalog, the workspace and the mcp-proxy
    /// when they require one (default: `TOOLPLANE_PEER_TOKEN`).
    #[arg(long, env = "TOOLPLANE_PEER_TOKEN_FILE", value_name = "FILE")]
    peer_token_file: Option<PathBuf>,
    /// The gRPC URL the other runtimes of a cluster reach this one at (`[cluster] advertise`),
    /// e.g. `http://$(POD_IP):7410`.
    #[arg(long, env = "TOOLPLANE_RUNTIME_ADVERTISE", value_name = "URL")]
    advertise: Option<String>,
    #[command(flatten)]
    auth: toolplane_serve::auth::AuthArgs,
    #[command(flatten)]
    tls: toolplane_serve::tls::TlsArgs,
}

fn load(args: &Args) -> Result<RuntimeConfig, String> {
    let mut cfg = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => RuntimeConfig::default(),
    };
    if let Some(v) = args.listen {
        cfg.listen = v;
    }
    if let Some(v) = &args.catalog_url {
        cfg.catalog_url = v.clone();
    }
    if let Some(v) = &args.workspace_url {
        cfg.workspace_url = v.clone();
    }
    if let Some(v) = &args.mcp_proxy_url {
        cfg.mcp_proxy_url = v.clone();
    }
    if let Some(v) = &args.env_allow {
        cfg.env_allow = toolplane_core::envallow::EnvAllowList::parse(v);
    }
    if let Some(v) = &args.data_dir {
        cfg.data_dir = v.clone();
    }
    if let Some(v) = &args.advertise {
        cfg.cluster.advertise = v.clone();
    }
    if let Some(v) = &args.mcp_allowed_hosts {
        cfg.mcp_allowed_hosts = v
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
            .collect();
    }
    // Private networks are reachable by default only from a runtime on loopback (docs/egress.md).
    cfg.egress = cfg
        .egress
        .clone()
        .for_posture(!cfg.listen.ip().is_loopback());
    cfg.peer_token = toolplane_serve::auth::peer_token(args.peer_token_file.as_deref())?;
    cfg.tls = args.tls.over(&cfg.tls);
    Ok(cfg)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let cfg = match load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("toolplane-runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let telemetry = match toolplane_telemetry::init(
        toolplane_telemetry::TelemetryConfig::new("toolplane-runtime")
            .with_service_version(env!("CARGO_PKG_VERSION")),
    ) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("toolplane-runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let exposed = [cfg.listen, args.http_listen];
    let auth = match args
        .auth
        .over(&cfg.auth)
        .start_service("runtime", &cfg.data_dir, &exposed)
        .await
    {
        Ok(auth) => auth,
        Err(e) => {
            eprintln!("toolplane-runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let http = match tokio::net::TcpListener::bind(args.http_listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "toolplane-runtime: cannot listen on {}: {e}",
                args.http_listen
            );
            return std::process::ExitCode::from(1);
        }
    };
    let mut server = match toolplane_runtime::start(cfg, auth).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("toolplane-runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let metrics = match server.serve_metrics(http) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("toolplane-runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    // Caught from before the line scripts wait for: a signal right after it is a clean stop.
    let stop = toolplane_serve::shutdown_signal();
    println!(
        "toolplane-runtime listening on {} (metrics on http://{metrics}/metrics)",
        server.addr
    );
    stop.await;
    server.shutdown().await;
    drop(telemetry);
    std::process::ExitCode::SUCCESS
}
