//! The all-in-one plane: the workspace service, the mcp-proxy, the catalog and the runtime started
//! in one process, each on its own port over real gRPC, each with its own data directory under one
//! root. It composes the service libraries and never reimplements them: the separate service
//! binaries run exactly the same code.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
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
            runtime: toolplane_runtime::RuntimeConfig::default(),
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

/// A served task with its shutdown trigger.
#[derive(Debug)]
struct Served {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Served {
    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// The four services, running.
#[derive(Debug)]
pub struct Plane {
    workspace: Served,
    mcp_proxy: Served,
    catalog: toolplane_catalog::RunningCatalog,
    runtime: toolplane_runtime::RuntimeServer,
    workspace_metrics: toolplane_telemetry::metrics::MetricsServer,
    mcp_proxy_metrics: toolplane_telemetry::metrics::MetricsServer,
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

impl Plane {
    /// Binds every port first (so a port in use fails before anything starts and every address
    /// is known), then starts the workspace, the mcp-proxy, the catalog and the runtime
    /// concurrently: their clients connect lazily, so none waits for another to be up.
    pub async fn up(cfg: PlaneConfig) -> Result<Plane, PlaneError> {
        let ws_listener = bind("workspace service", cfg.host, cfg.workspace_port).await?;
        let mcp_listener = bind("mcp-proxy", cfg.host, cfg.mcp_proxy_port).await?;
        let catalog_listener = bind("catalog", cfg.host, cfg.catalog_port).await?;
        let catalog_http_listener = bind("catalog http", cfg.host, cfg.catalog_http_port).await?;
        let rt_listener = bind("runtime", cfg.host, cfg.runtime_port).await?;
        let rt_http = bind("runtime http", cfg.host, cfg.runtime_http_port).await?;
        let ws_http = bind("workspace http", cfg.host, cfg.workspace_http_port).await?;
        let mcp_http = bind("mcp-proxy http", cfg.host, cfg.mcp_proxy_http_port).await?;

        let addr_of = |service: &'static str, l: &TcpListener| {
            l.local_addr().map_err(|e| start_err(service, e))
        };
        // The services start concurrently and each creates its directory below this one. Done
        // here rather than on the blocking pool: at start-up its first thread would be created
        // for these few system calls, on the path to the first answer.
        std::fs::create_dir_all(&cfg.data_dir)
            .map_err(|e| start_err("plane", format!("{}: {e}", cfg.data_dir.display())))?;
        let ws_addr = addr_of("workspace service", &ws_listener)?;
        let mcp_addr = addr_of("mcp-proxy", &mcp_listener)?;
        let catalog_addr = addr_of("catalog", &catalog_listener)?;

        // Each start is its own task, so the CPU-bound parts use every core.
        let ws_dir = cfg.data_dir.join("workspace");
        let workspace = tokio::spawn(async move {
            let ws = toolplane_workspace::Workspace::open(toolplane_workspace::EngineOptions {
                data_dir: ws_dir,
                limits: Default::default(),
            })
            .await
            .map_err(|e| start_err("workspace service", e))?;
            let ws = Arc::new(ws);
            let metrics = toolplane_telemetry::metrics::MetricsServer::start(
                ws_http,
                Arc::clone(&ws.metrics().registry),
            )
            .map_err(|e| start_err("workspace service", e))?;
            let routes = toolplane_workspace::routes(ws)
                .await
                .map_err(|e| start_err("workspace service", e))?;
            Ok::<_, PlaneError>((serve_routes(ws_listener, ws_addr, routes), metrics))
        });

        let mcp_dir = cfg.data_dir.join("mcp-proxy");
        let mcp_proxy = tokio::spawn(async move {
            let store: Arc<dyn Store> = Arc::new(
                FsStore::open(mcp_dir, StoreOptions::default())
                    .await
                    .map_err(|e| start_err("mcp-proxy", e))?,
            );
            let store = store
                .namespace(toolplane_mcp_proxy::STORE_NAMESPACE)
                .map_err(|e| start_err("mcp-proxy", e))?;
            let proxy = toolplane_mcp_proxy::McpProxy::open(store, Default::default())
                .await
                .map_err(|e| start_err("mcp-proxy", e))?;
            let metrics =
                toolplane_telemetry::metrics::MetricsServer::start(mcp_http, proxy.metrics())
                    .map_err(|e| start_err("mcp-proxy", e))?;
            let (tx, rx) = oneshot::channel::<()>();
            let task = tokio::spawn(async move {
                if let Err(e) = toolplane_mcp_proxy::server::serve(mcp_listener, proxy, async {
                    let _ = rx.await;
                })
                .await
                {
                    tracing::error!(error = %e, "mcp-proxy stopped");
                }
            });
            Ok::<_, PlaneError>((
                Served {
                    addr: mcp_addr,
                    stop: Some(tx),
                    task,
                },
                metrics,
            ))
        });

        let catalog_config = toolplane_catalog::CatalogConfig {
            store: toolplane_catalog::config::StoreConfig::Fs {
                dir: cfg.data_dir.join("catalog"),
            },
            mcp_proxy_url: Some(format!("http://{mcp_addr}")),
            profiles_dir: cfg.profiles_dir.clone(),
            ..Default::default()
        };
        let catalog = tokio::spawn(async move {
            let c = catalog_config;
            let store = toolplane_catalog::open_store(&c.store)
                .await
                .map_err(|e| start_err("catalog", e))?;
            toolplane_catalog::start_unwarmed(c, store, catalog_listener, catalog_http_listener)
                .await
                .map_err(|e| start_err("catalog", e))
        });

        let mut r = cfg.runtime.clone();
        r.catalog_url = format!("http://{catalog_addr}");
        r.workspace_url = format!("http://{ws_addr}");
        r.mcp_proxy_url = format!("http://{mcp_addr}");
        r.data_dir = cfg.data_dir.join("runtime");
        let runtime = tokio::spawn(async move {
            let mut server = toolplane_runtime::start_on(r, rt_listener)
                .await
                .map_err(|e| start_err("runtime", e))?;
            server
                .serve_metrics(rt_http)
                .map_err(|e| start_err("runtime", e))?;
            Ok(server)
        });

        let (workspace, mcp_proxy, catalog, runtime) =
            tokio::join!(workspace, mcp_proxy, catalog, runtime);
        let workspace = joined("workspace service", workspace);
        let mcp_proxy = joined("mcp-proxy", mcp_proxy);
        let catalog = joined("catalog", catalog);
        let runtime = joined("runtime", runtime);
        // Whatever started is stopped again when another part failed.
        match (workspace, mcp_proxy, catalog, runtime) {
            (
                Ok((workspace, workspace_metrics)),
                Ok((mcp_proxy, mcp_proxy_metrics)),
                Ok(mut catalog),
                Ok(runtime),
            ) => {
                // The catalog's first pull from the mcp-proxy waits until every service serves
                // and their first clients have connected, so it competes with neither; a request
                // that needs the default cell sooner pulls it.
                catalog.warm_default_cell_after(CATALOG_WARM_DELAY);
                Ok(Plane {
                    workspace,
                    mcp_proxy,
                    catalog,
                    runtime,
                    workspace_metrics,
                    mcp_proxy_metrics,
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
                match mcp_proxy {
                    Ok((m, metrics)) => {
                        m.stop().await;
                        metrics.stop().await;
                    }
                    Err(e) => first = first.or(Some(e)),
                }
                match workspace {
                    Ok((w, metrics)) => {
                        w.stop().await;
                        metrics.stop().await;
                    }
                    Err(e) => first = first.or(Some(e)),
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
        format!("http://{}", self.workspace.addr)
    }
    pub fn mcp_proxy_url(&self) -> String {
        format!("http://{}", self.mcp_proxy.addr)
    }

    /// `http://<addr>` of the runtime's, the workspace's and the mcp-proxy's `/metrics` ports.
    pub fn metrics_urls(&self) -> [String; 3] {
        [
            self.runtime.metrics_addr(),
            Some(self.workspace_metrics.addr()),
            Some(self.mcp_proxy_metrics.addr()),
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
        self.mcp_proxy.stop().await;
        self.mcp_proxy_metrics.stop().await;
        self.workspace.stop().await;
        self.workspace_metrics.stop().await;
    }
}

/// A start task's outcome, with a panic or cancellation reported as that service's failure.
fn joined<T>(
    service: &'static str,
    r: Result<Result<T, PlaneError>, tokio::task::JoinError>,
) -> Result<T, PlaneError> {
    r.map_err(|e| start_err(service, e)).and_then(|r| r)
}

fn serve_routes(listener: TcpListener, addr: SocketAddr, routes: tonic::service::Routes) -> Served {
    let (tx, rx) = oneshot::channel::<()>();
    // `serve_with_incoming` does not apply the builder's `tcp_nodelay`: set it per connection.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let task = tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .layer(toolplane_telemetry::GrpcServerTraceLayer)
            .add_routes(routes)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = rx.await;
            })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "service stopped");
        }
    });
    Served {
        addr,
        stop: Some(tx),
        task,
    }
}
