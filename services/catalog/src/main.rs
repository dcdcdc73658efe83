//! `toolplane-catalog`: reads its configuration (a TOML file, then flags and `TOOLPLANE_CATALOG_*`
//! environment variables over it), sets up telemetry, serves until SIGINT or SIGTERM, then shuts
//! down gracefully. Everything else lives in the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use toolplane_catalog::{CatalogConfig, CatalogError, StoreConfig};

/// The process's allocator: mimalloc (BENCHMARKS.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The toolplane catalog: tool descriptors of every source, agent profiles and policies.
#[derive(Debug, Parser)]
#[command(name = "toolplane-catalog", version)]
struct Args {
    /// TOML configuration file; flags and environment variables override its values.
    #[arg(long, env = "TOOLPLANE_CATALOG_CONFIG")]
    config: Option<PathBuf>,
    /// gRPC address (default 127.0.0.1:7420).
    #[arg(long, env = "TOOLPLANE_CATALOG_LISTEN")]
    listen: Option<SocketAddr>,
    /// HTTP address for `GET /tools` and `/metrics` (default 127.0.0.1:7421).
    #[arg(long, env = "TOOLPLANE_CATALOG_HTTP_LISTEN")]
    http_listen: Option<SocketAddr>,
    /// Store directory (default .toolplane/store).
    #[arg(
        long,
        env = "TOOLPLANE_CATALOG_DATA_DIR",
        conflicts_with = "memory_store"
    )]
    data_dir: Option<PathBuf>,
    /// Keep everything in memory (lost on exit).
    #[arg(long, env = "TOOLPLANE_CATALOG_MEMORY_STORE")]
    memory_store: bool,
    /// The mcp-proxy's gRPC URL, e.g. http://127.0.0.1:7440.
    #[arg(long, env = "TOOLPLANE_CATALOG_MCP_PROXY_URL")]
    mcp_proxy_url: Option<String>,
    /// Directory of profile JSON files upserted at start-up (default: ./profiles when it exists).
    #[arg(long, env = "TOOLPLANE_CATALOG_PROFILES_DIR")]
    profiles_dir: Option<PathBuf>,
    /// How often sources are pulled again, in milliseconds (default 2000).
    #[arg(long, env = "TOOLPLANE_CATALOG_REFRESH_INTERVAL_MS")]
    refresh_interval_ms: Option<u64>,
    /// File holding the credential (`tp_…`) sent to the mcp-proxy when it requires one (default:
    /// `TOOLPLANE_PEER_TOKEN`).
    #[arg(long, env = "TOOLPLANE_PEER_TOKEN_FILE", value_name = "FILE")]
    peer_token_file: Option<PathBuf>,
    #[command(flatten)]
    auth: toolplane_serve::auth::AuthArgs,
    #[command(flatten)]
    tls: toolplane_serve::tls::TlsArgs,
}

fn config(args: &Args) -> Result<CatalogConfig, CatalogError> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                CatalogError::new(
                    toolplane_catalog::CatalogCode::ConfigInvalid,
                    format!("{}: {e}", path.display()),
                )
            })?;
            CatalogConfig::from_toml(&text)?
        }
        None => CatalogConfig::default(),
    };
    if let Some(a) = args.listen {
        config.listen = a;
    }
    if let Some(a) = args.http_listen {
        config.http_listen = a;
    }
    if let Some(dir) = &args.data_dir {
        config.store = StoreConfig::Fs { root: dir.clone() };
    }
    if args.memory_store {
        config.store = StoreConfig::Memory;
    }
    if let Some(url) = &args.mcp_proxy_url {
        config.mcp_proxy_url = Some(url.clone());
    }
    if let Some(ms) = args.refresh_interval_ms {
        config.refresh_interval_ms = ms;
    }
    match &args.profiles_dir {
        Some(dir) => config.profiles_dir = Some(dir.clone()),
        // The shipped profiles are picked up when run from a checkout; a configured directory
        // must exist, this default need not.
        None if config.profiles_dir.is_none() && PathBuf::from("profiles").is_dir() => {
            config.profiles_dir = Some(PathBuf::from("profiles"));
        }
        None => {}
    }
    config.tls = args.tls.over(&config.tls);
    config.mcp_proxy_token = toolplane_serve::auth::peer_token(args.peer_token_file.as_deref())
        .map_err(|e| CatalogError::new(toolplane_catalog::CatalogCode::ConfigInvalid, e))?;
    config.validate()?;
    Ok(config)
}

/// The authenticator of `--auth` and its flags, with the tokens and the first admin token in the
/// store's directory (a memory store needs `--auth-tokens`).
async fn authenticator(
    args: &Args,
    config: &CatalogConfig,
) -> Result<toolplane_auth::Authenticator, Box<dyn std::error::Error>> {
    let auth = args.auth.over(&config.auth);
    let data_dir = match (&config.store, &auth.auth_tokens) {
        (StoreConfig::Fs { root }, _) => root.clone(),
        (_, Some(dir)) => dir.clone(),
        (_, None) if auth.auth => {
            return Err(AuthRefused(
                "auth.invalid_request: --auth without a filesystem store (--memory-store, or a \
                 [store] of another kind) needs --auth-tokens DIR"
                    .into(),
            )
            .into());
        }
        (_, None) => PathBuf::new(),
    };
    let addrs = [config.listen, config.http_listen];
    auth.start_service("catalog", &data_dir, &addrs)
        .await
        .map_err(|message| AuthRefused(message).into())
}

/// Authentication refused the start (`auth.required`, flags that do not fit together): the
/// binary exits with status 2, as every service does.
#[derive(Debug)]
struct AuthRefused(String);

impl std::fmt::Display for AuthRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AuthRefused {}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let _telemetry = toolplane_telemetry::init(
        toolplane_telemetry::TelemetryConfig::new("catalog")
            .with_service_version(env!("CARGO_PKG_VERSION")),
    )?;
    let config = config(&args)?;
    let auth = authenticator(&args, &config).await?;
    // Caught from before the catalog logs that it serves: a signal right after is a clean stop.
    let stop = toolplane_serve::shutdown_signal();
    let running = toolplane_catalog::start_with_auth(config, auth).await?;
    // Tests and scripts read this line to learn the port when listening on :0.
    println!("listening on {}", running.grpc_addr());
    stop.await;
    tracing::info!("shutting down");
    running.shutdown().await?;
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("catalog.io: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolplane-catalog: {e}");
            if e.is::<AuthRefused>() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
