//! The all-in-one plane: the workspace service, the mcp-proxy, the catalog and the runtime started
//! in one process, each on its own port over real gRPC, each with its own data directory under one
//! root. It composes the service libraries and never reimplements them: the separate service
//! binaries run exactly the same code.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use toolplane_store::{FsStore, Store, StoreExt, StoreOptions};

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
    /// Profile JSON files loaded into the catalog at start-up.
    pub profiles_dir: Option<PathBuf>,
    /// Runtime settings (hardline rules, timeouts); addresses are filled in by the plane.
    pub runtime: toolplane_runtime::RuntimeConfig,
}

impl PlaneConfig {
    /// The defaults of `toolplane up`: runtime 7410, catalog 7420 (HTTP 7421), workspace 7430,
    /// mcp-proxy 7440, data under `./.toolplane`.
    pub fn new(data_dir: PathBuf) -> Self {
        PlaneConfig {
            data_dir,
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            runtime_port: 7410,
            catalog_port: 7420,
            catalog_http_port: 7421,
            workspace_port: 7430,
            mcp_proxy_port: 7440,
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
    /// Binds every port first (so a port in use fails before anything starts), then starts the
    /// workspace, the mcp-proxy, the catalog and the runtime, in that order.
    pub async fn up(cfg: PlaneConfig) -> Result<Plane, PlaneError> {
        let ws_listener = bind("workspace service", cfg.host, cfg.workspace_port).await?;
        let mcp_listener = bind("mcp-proxy", cfg.host, cfg.mcp_proxy_port).await?;
        let rt_listener = bind("runtime", cfg.host, cfg.runtime_port).await?;
        // The catalog binds its own two ports; check them now so a clash is reported before start.
        for (service, port) in [
            ("catalog", cfg.catalog_port),
            ("catalog http", cfg.catalog_http_port),
        ] {
            if port != 0 {
                drop(bind(service, cfg.host, port).await?);
            }
        }

        let workspace = {
            let ws = toolplane_workspace::Workspace::open(toolplane_workspace::EngineOptions {
                data_dir: cfg.data_dir.join("workspace"),
                limits: Default::default(),
            })
            .await
            .map_err(|e| start_err("workspace service", e))?;
            let routes = toolplane_workspace::routes(Arc::new(ws))
                .await
                .map_err(|e| start_err("workspace service", e))?;
            serve_routes(ws_listener, routes)?
        };

        let mcp_proxy = {
            let store: Arc<dyn Store> = Arc::new(
                FsStore::open(cfg.data_dir.join("mcp-proxy"), StoreOptions::default())
                    .await
                    .map_err(|e| start_err("mcp-proxy", e))?,
            );
            let store = store
                .namespace(toolplane_mcp_proxy::STORE_NAMESPACE)
                .map_err(|e| start_err("mcp-proxy", e))?;
            let proxy = toolplane_mcp_proxy::McpProxy::open(store, Default::default())
                .await
                .map_err(|e| start_err("mcp-proxy", e))?;
            let addr = mcp_listener
                .local_addr()
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
            Served {
                addr,
                stop: Some(tx),
                task,
            }
        };

        let catalog = {
            let c = toolplane_catalog::CatalogConfig {
                listen: SocketAddr::new(cfg.host, cfg.catalog_port),
                http_listen: SocketAddr::new(cfg.host, cfg.catalog_http_port),
                store: toolplane_catalog::config::StoreConfig::Fs {
                    dir: cfg.data_dir.join("catalog"),
                },
                mcp_proxy_url: Some(format!("http://{}", mcp_proxy.addr)),
                profiles_dir: cfg.profiles_dir.clone(),
                ..Default::default()
            };
            toolplane_catalog::start(c)
                .await
                .map_err(|e| start_err("catalog", e))?
        };

        let runtime = {
            let mut r = cfg.runtime.clone();
            r.catalog_url = catalog.grpc_url();
            r.workspace_url = format!("http://{}", workspace.addr);
            r.mcp_proxy_url = format!("http://{}", mcp_proxy.addr);
            r.data_dir = cfg.data_dir.join("runtime");
            toolplane_runtime::start_on(r, rt_listener)
                .await
                .map_err(|e| start_err("runtime", e))?
        };

        Ok(Plane {
            workspace,
            mcp_proxy,
            catalog,
            runtime,
        })
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

    /// The runtime, for in-process inspection (tests).
    pub fn runtime(&self) -> &Arc<toolplane_runtime::Runtime> {
        &self.runtime.runtime
    }

    /// Stops the services in reverse order: the runtime first, so nothing new reaches the others.
    pub async fn shutdown(self) {
        self.runtime.shutdown().await;
        let _ = self.catalog.shutdown().await;
        self.mcp_proxy.stop().await;
        self.workspace.stop().await;
    }
}

fn serve_routes(
    listener: TcpListener,
    routes: tonic::service::Routes,
) -> Result<Served, PlaneError> {
    let addr = listener
        .local_addr()
        .map_err(|e| start_err("workspace service", e))?;
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
    Ok(Served {
        addr,
        stop: Some(tx),
        task,
    })
}
