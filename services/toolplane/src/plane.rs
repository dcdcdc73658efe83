//! The all-in-one plane: the workspace service, the mcp-proxy, the catalog and the runtime started
//! in one process, each on its own port over real gRPC, each with its own data directory under one
//! root. It composes the service libraries and never reimplements them: the separate service
//! binaries run exactly the same code.
//!
//! Every service is served behind the same [`Authenticator`] (`PlaneConfig::auth`). With
//! authentication on, the plane makes one service credential at start, in memory only: the
//! runtime calls the catalog, the workspace and the mcp-proxy with it, and the catalog the
//! mcp-proxy; each accepts it as an admin of the default cell (docs/auth.md).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use toolplane_auth::{Authenticator, TokenSecret};
use toolplane_serve::Serving;
use toolplane_serve::auth::DEFAULT_CELL;
use toolplane_store::{FsStore, Store, StoreExt, StoreOptions};

/// How long after every service serves the catalog pulls the default cell from the mcp-proxy:
/// past the burst of first connections (health checks, a client's first calls), and well before
/// a person types a first command.
const CATALOG_WARM_DELAY: Duration = Duration::from_millis(100);

/// Where the plane listens and keeps its data.
#[derive(Debug, Clone)]
pub struct PlaneConfig {
    pub data_dir: PathBuf,
    /// Address every service binds; loopback unless configured otherwise.
    pub host: IpAddr,
    pub runtime_port: u16,
    pub catalog_port: u16,
    pub catalog_http_port: u16,
    pub workspace_port: u16,
    pub mcp_proxy_port: u16,
    /// HTTP ports of `/metrics` (and `/healthz`) of the runtime, the workspace and the mcp-proxy
    /// (the catalog serves its own on `catalog_http_port`).
    pub runtime_http_port: u16,
    pub workspace_http_port: u16,
    pub mcp_proxy_http_port: u16,
    /// Profile JSON files loaded into the catalog at start-up.
    pub profiles_dir: Option<PathBuf>,
    /// Runtime settings (hardline rules, timeouts); addresses are filled in by the plane.
    pub runtime: toolplane_runtime::RuntimeConfig,
    /// The mcp-proxy's settings: [`up_proxy_settings`] unless configured otherwise.
    pub mcp_proxy: toolplane_mcp_proxy::ProxySettings,
    /// Who may call every service (default: off, every caller an admin of the default cell).
    pub auth: Authenticator,
}

/// Variables a registration may name on `toolplane up` (`inherit_env`, `header_env`,
/// `api_key_env`): model keys and MCP tokens by their usual names (docs/mcp-proxy.md).
pub const UP_ENV_ALLOW: &[&str] = &["*_API_KEY", "*_MCP_TOKEN"];

/// The mcp-proxy settings of `toolplane up`: its own program (the bundled demo MCP server) on the
/// stdio allow-list, [`UP_ENV_ALLOW`] as the environment allow-list.
pub fn up_proxy_settings() -> toolplane_mcp_proxy::ProxySettings {
    let mut settings = toolplane_mcp_proxy::ProxySettings::default();
    if let Ok(exe) = std::env::current_exe() {
        settings
            .processes
            .allowed_commands
            .push(exe.to_string_lossy().into_owned());
    }
    settings.processes.env_allow =
        toolplane_core::envallow::EnvAllowList::new(UP_ENV_ALLOW.iter().copied());
    settings
}

impl PlaneConfig {
    /// The defaults of `toolplane up`: runtime 7410 (HTTP 7411), catalog 7420 (HTTP 7421),
    /// workspace 7430 (HTTP 7431), mcp-proxy 7440 (HTTP 7441), data under `./.toolplane`.
    pub fn new(data_dir: PathBuf) -> Self {
        PlaneConfig {
            data_dir,
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            runtime_port: 7410,
            catalog_port: 7420,
            catalog_http_port: 7421,
            workspace_port: 7430,
            mcp_proxy_port: 7440,
            runtime_http_port: 7411,
            workspace_http_port: 7431,
            mcp_proxy_http_port: 7441,
            profiles_dir: None,
            runtime: toolplane_runtime::RuntimeConfig {
                env_allow: toolplane_core::envallow::EnvAllowList::new(
                    UP_ENV_ALLOW.iter().copied(),
                ),
                ..toolplane_runtime::RuntimeConfig::default()
            },
            mcp_proxy: up_proxy_settings(),
            auth: Authenticator::off(DEFAULT_CELL),
        }
    }

    /// Every service on a free port (`127.0.0.1:0`), for tests.
    pub fn ephemeral(data_dir: PathBuf) -> Self {
        PlaneConfig {
            runtime_port: 0,
            catalog_port: 0,
            catalog_http_port: 0,
            workspace_port: 0,
            mcp_proxy_port: 0,
            runtime_http_port: 0,
            workspace_http_port: 0,
            mcp_proxy_http_port: 0,
            ..PlaneConfig::new(data_dir)
        }
    }
}

/// Why the plane could not start.
#[derive(Debug, thiserror::Error)]
pub enum PlaneError {
    #[error("plane.bind_failed: cannot listen on {addr} for the {service}: {source}")]
    Bind {
        service: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("plane.start_failed: the {service} did not start: {message}")]
    Start {
        service: &'static str,
        message: String,
    },
}

fn start_err(service: &'static str, e: impl std::fmt::Display) -> PlaneError {
    PlaneError::Start {
        service,
        message: e.to_string(),
    }
}

/// The four services, running.
#[derive(Debug)]
pub struct Plane {
    workspace: Serving,
    mcp_proxy: Serving,
    catalog: toolplane_catalog::RunningCatalog,
    runtime: toolplane_runtime::RuntimeServer,
    service_token: Option<TokenSecret>,
}

async fn bind(service: &'static str, host: IpAddr, port: u16) -> Result<TcpListener, PlaneError> {
    let addr = SocketAddr::new(host, port);
    TcpListener::bind(addr)
        .await
        .map_err(|source| PlaneError::Bind {
            service,
            addr,
            source,
        })
}

fn addr_of(service: &'static str, listener: &TcpListener) -> Result<SocketAddr, PlaneError> {
    listener.local_addr().map_err(|e| start_err(service, e))
}

/// Every port of the plane, bound before any service starts.
struct Listeners {
    workspace: TcpListener,
    workspace_http: TcpListener,
    mcp_proxy: TcpListener,
    mcp_proxy_http: TcpListener,
    catalog: TcpListener,
    catalog_http: TcpListener,
    runtime: TcpListener,
    runtime_http: TcpListener,
}

impl Listeners {
    async fn bind(cfg: &PlaneConfig) -> Result<Listeners, PlaneError> {
        let host = cfg.host;
        Ok(Listeners {
            workspace: bind("workspace service", host, cfg.workspace_port).await?,
            mcp_proxy: bind("mcp-proxy", host, cfg.mcp_proxy_port).await?,
            catalog: bind("catalog", host, cfg.catalog_port).await?,
            catalog_http: bind("catalog http", host, cfg.catalog_http_port).await?,
            runtime: bind("runtime", host, cfg.runtime_port).await?,
            runtime_http: bind("runtime http", host, cfg.runtime_http_port).await?,
            workspace_http: bind("workspace http", host, cfg.workspace_http_port).await?,
            mcp_proxy_http: bind("mcp-proxy http", host, cfg.mcp_proxy_http_port).await?,
        })
    }
}

impl Plane {
    /// Binds every port first (so a port in use fails before anything starts and every address
    /// is known), then starts the workspace, the mcp-proxy, the catalog and the runtime
    /// concurrently: their clients connect lazily, so none waits for another to be up. Each
    /// serves through the one start every service shares (`toolplane_serve`).
    pub async fn up(cfg: PlaneConfig) -> Result<Plane, PlaneError> {
        let l = Listeners::bind(&cfg).await?;
        // The services start concurrently and each creates its directory below this one. Done
        // here rather than on the blocking pool: at start-up its first thread would be created
        // for these few system calls, on the path to the first answer.
        std::fs::create_dir_all(&cfg.data_dir)
            .map_err(|e| start_err("plane", format!("{}: {e}", cfg.data_dir.display())))?;
        let ws_addr = addr_of("workspace service", &l.workspace)?;
        let mcp_addr = addr_of("mcp-proxy", &l.mcp_proxy)?;
        let catalog_addr = addr_of("catalog", &l.catalog)?;
        let (auth, peer_token) = service_credential(&cfg.auth)?;
        let catalog_config = toolplane_catalog::CatalogConfig {
            store: toolplane_catalog::config::StoreConfig::Fs {
                root: cfg.data_dir.join("catalog"),
            },
            mcp_proxy_url: Some(format!("http://{mcp_addr}")),
            profiles_dir: cfg.profiles_dir.clone(),
            mcp_proxy_token: peer_token.clone(),
            ..Default::default()
        };
        let mut runtime_config = cfg.runtime.clone();
        runtime_config.catalog_url = format!("http://{catalog_addr}");
        runtime_config.workspace_url = format!("http://{ws_addr}");
        runtime_config.mcp_proxy_url = format!("http://{mcp_addr}");
        runtime_config.data_dir = cfg.data_dir.join("runtime");
        runtime_config.peer_token = peer_token.clone();
        let service_token = peer_token.clone();

        // Each start is its own task, so the CPU-bound parts use every core.
        // Beyond loopback, ImportSkill reads skill folders only from under the data directory.
        let skill_roots = (!cfg.host.is_loopback()).then(|| vec![cfg.data_dir.clone()]);
        let workspace = tokio::spawn(start_workspace(
            skill_roots,
            cfg.data_dir.join("workspace"),
            l.workspace,
            l.workspace_http,
            auth.clone(),
        ));
        runtime_config.egress = runtime_config
            .egress
            .clone()
            .for_posture(!cfg.host.is_loopback());
        let mut proxy_settings = cfg.mcp_proxy.clone();
        // Private networks are reachable by default only from a plane on loopback.
        proxy_settings.egress = proxy_settings.egress.for_posture(!cfg.host.is_loopback());
        let mcp_proxy = tokio::spawn(start_mcp_proxy(
            proxy_settings,
            cfg.data_dir.join("mcp-proxy"),
            l.mcp_proxy,
            l.mcp_proxy_http,
            auth.clone(),
        ));
        let catalog = tokio::spawn(start_catalog(
            catalog_config,
            l.catalog,
            l.catalog_http,
            auth.clone(),
        ));
        let runtime = tokio::spawn(start_runtime(
            runtime_config,
            l.runtime,
            l.runtime_http,
            auth,
        ));
        let (workspace, mcp_proxy, catalog, runtime) =
            tokio::join!(workspace, mcp_proxy, catalog, runtime);
        let mut plane = Plane::assemble(
            joined("workspace service", workspace),
            joined("mcp-proxy", mcp_proxy),
            joined("catalog", catalog),
            joined("runtime", runtime),
        )
        .await?;
        plane.service_token = service_token;
        Ok(plane)
    }

    /// The service credential the plane's services call each other with, when authentication
    /// is on (an admin of the default cell, held in memory only).
    pub fn service_token(&self) -> Option<&TokenSecret> {
        self.service_token.as_ref()
    }

    /// The plane when every service started; otherwise whatever started is stopped again and
    /// the first failure (in stop order) is reported.
    async fn assemble(
        workspace: Result<Serving, PlaneError>,
        mcp_proxy: Result<Serving, PlaneError>,
        catalog: Result<toolplane_catalog::RunningCatalog, PlaneError>,
        runtime: Result<toolplane_runtime::RuntimeServer, PlaneError>,
    ) -> Result<Plane, PlaneError> {
        match (workspace, mcp_proxy, catalog, runtime) {
            (Ok(workspace), Ok(mcp_proxy), Ok(mut catalog), Ok(runtime)) => {
                // The catalog's first pull from the mcp-proxy waits until every service serves
                // and their first clients have connected, so it competes with neither; a request
                // that needs the default cell sooner pulls it.
                catalog.warm_default_cell_after(CATALOG_WARM_DELAY);
                Ok(Plane {
                    workspace,
                    mcp_proxy,
                    catalog,
                    runtime,
                    service_token: None,
                })
            }
            (workspace, mcp_proxy, catalog, runtime) => {
                let mut first = None;
                match runtime {
                    Ok(r) => r.shutdown().await,
                    Err(e) => first = first.or(Some(e)),
                }
                match catalog {
                    Ok(c) => drop(c.shutdown().await),
                    Err(e) => first = first.or(Some(e)),
                }
                for serving in [mcp_proxy, workspace] {
                    match serving {
                        Ok(s) => drop(s.shutdown().await),
                        Err(e) => first = first.or(Some(e)),
                    }
                }
                Err(first.unwrap_or_else(|| start_err("plane", "a service failed to start")))
            }
        }
    }

    pub fn runtime_url(&self) -> String {
        format!("http://{}", self.runtime.addr)
    }
    pub fn catalog_url(&self) -> String {
        self.catalog.grpc_url()
    }
    pub fn catalog_http_url(&self) -> String {
        self.catalog.http_url()
    }
    pub fn workspace_url(&self) -> String {
        self.workspace.url()
    }
    pub fn mcp_proxy_url(&self) -> String {
        self.mcp_proxy.url()
    }

    /// `http://<addr>` of the runtime's, the workspace's and the mcp-proxy's `/metrics` ports.
    pub fn metrics_urls(&self) -> [String; 3] {
        [
            self.runtime.metrics_addr(),
            self.workspace.http_addr(),
            self.mcp_proxy.http_addr(),
        ]
        .map(|a| a.map(|a| format!("http://{a}")).unwrap_or_default())
    }

    /// The runtime, for in-process inspection (tests).
    pub fn runtime(&self) -> &Arc<toolplane_runtime::Runtime> {
        &self.runtime.runtime
    }

    /// Stops the services in reverse order: the runtime first, so nothing new reaches the others.
    pub async fn shutdown(self) {
        self.runtime.shutdown().await;
        let _ = self.catalog.shutdown().await;
        for (service, serving) in [("mcp-proxy", self.mcp_proxy), ("workspace", self.workspace)] {
            if let Err(e) = serving.shutdown().await {
                tracing::warn!(service, error = %e, "stopped with an error");
            }
        }
    }
}

/// With authentication on: the authenticator that also accepts a fresh service credential, and
/// that credential, for the services' calls to each other. Off: both unchanged.
fn service_credential(
    auth: &Authenticator,
) -> Result<(Authenticator, Option<TokenSecret>), PlaneError> {
    if !auth.is_on() {
        return Ok((auth.clone(), None));
    }
    let secret = TokenSecret::generate().map_err(|e| start_err("plane", e))?;
    let auth = auth.clone().with_service_credential(&secret, DEFAULT_CELL);
    Ok((auth, Some(secret)))
}

/// A start task's outcome, with a panic or cancellation reported as that service's failure.
fn joined<T>(
    service: &'static str,
    r: Result<Result<T, PlaneError>, tokio::task::JoinError>,
) -> Result<T, PlaneError> {
    r.map_err(|e| start_err(service, e)).and_then(|r| r)
}

async fn start_workspace(
    skill_import_roots: Option<Vec<PathBuf>>,
    dir: PathBuf,
    listener: TcpListener,
    metrics: TcpListener,
    auth: Authenticator,
) -> Result<Serving, PlaneError> {
    let ws = toolplane_workspace::Workspace::open(toolplane_workspace::EngineOptions {
        data_dir: dir,
        limits: toolplane_workspace::limits::Limits {
            skill_import_roots,
            ..Default::default()
        },
    })
    .await
    .map_err(|e| start_err("workspace service", e))?;
    toolplane_workspace::start_on(listener, Arc::new(ws), metrics, auth)
        .await
        .map_err(|e| start_err("workspace service", e))
}

async fn start_mcp_proxy(
    settings: toolplane_mcp_proxy::ProxySettings,
    dir: PathBuf,
    listener: TcpListener,
    metrics: TcpListener,
    auth: Authenticator,
) -> Result<Serving, PlaneError> {
    let failed = |e: &dyn std::fmt::Display| start_err("mcp-proxy", e);
    let store: Arc<dyn Store> = Arc::new(
        FsStore::open(dir, StoreOptions::default())
            .await
            .map_err(|e| failed(&e))?,
    );
    let store = store
        .namespace(toolplane_mcp_proxy::STORE_NAMESPACE)
        .map_err(|e| failed(&e))?;
    let proxy = toolplane_mcp_proxy::McpProxy::open(store, settings)
        .await
        .map_err(|e| failed(&e))?;
    toolplane_mcp_proxy::start_on(listener, proxy, Some(metrics), auth)
        .await
        .map_err(|e| failed(&e))
}

async fn start_catalog(
    config: toolplane_catalog::CatalogConfig,
    listener: TcpListener,
    http: TcpListener,
    auth: Authenticator,
) -> Result<toolplane_catalog::RunningCatalog, PlaneError> {
    let store = toolplane_catalog::open_store(&config.store)
        .await
        .map_err(|e| start_err("catalog", e))?;
    toolplane_catalog::start_unwarmed(config, store, listener, http, auth)
        .await
        .map_err(|e| start_err("catalog", e))
}

async fn start_runtime(
    config: toolplane_runtime::RuntimeConfig,
    listener: TcpListener,
    metrics: TcpListener,
    auth: Authenticator,
) -> Result<toolplane_runtime::RuntimeServer, PlaneError> {
    let mut server = toolplane_runtime::start_on(config, listener, auth)
        .await
        .map_err(|e| start_err("runtime", e))?;
    server
        .serve_metrics(metrics)
        .map_err(|e| start_err("runtime", e))?;
    Ok(server)
}
