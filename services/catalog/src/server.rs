//! Starting and stopping the catalog: the store, the start-up profiles, the gRPC servers (catalog,
//! profiles, the plane's tokens, and the admin audit) and the HTTP server
//! (through the one start every service shares, `toolplane_serve`: health, reflection, tracing,
//! the request limit) and the background refresher.
//!
//! Owns the listeners and the tasks; [`RunningCatalog::shutdown`] stops them gracefully. It
//! must never bind anything but the configured addresses (loopback by default).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use toolplane_auth::{AdminAuditLog, Authenticator, TokenStore};
use toolplane_proto::v1::catalog_service_server::CatalogServiceServer;
use toolplane_proto::v1::profile_service_server::ProfileServiceServer;
use toolplane_serve::admin_audit::AdminAuditGrpc;
use toolplane_serve::{MessageLimits, ServeOptions, Services, Serving};
use toolplane_store::{Store, StoreExt, StoreOptions};
use toolplane_telemetry::metrics::Registry;

use crate::audit::{AUDIT_SERVICE, CatalogAudit};
use crate::cell::CellId;
use crate::config::{CatalogConfig, StoreConfig};
use crate::error::{CatalogCode, CatalogError};
use crate::grpc::CatalogGrpc;
use crate::records::Records;
use crate::state::Catalog;
use crate::tokens::{TOKEN_NAMESPACE, TokenGrpc};

/// The store namespace the catalog keeps its state in.
pub const NAMESPACE: &str = "catalog";
/// Largest `ProfileService` request decoded (at most the catalog's `limits.max_request_bytes`):
/// a profile or a policy document is at most 256 KiB.
pub const MAX_PROFILE_REQUEST_BYTES: usize = 1024 * 1024;

/// A catalog serving gRPC and HTTP.
#[derive(Debug)]
pub struct RunningCatalog {
    grpc_addr: SocketAddr,
    http_addr: SocketAddr,
    /// The gRPC and HTTP servers; `None` once shut down.
    serving: Option<Serving>,
    catalog: Arc<Catalog>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<Result<(), CatalogError>>>,
}

/// Opens the configured store (any backend of `toolplane_store`; the S3 credentials and the
/// PostgreSQL password come from the environment).
pub async fn open_store(config: &StoreConfig) -> Result<Arc<dyn Store>, CatalogError> {
    Ok(config.open(StoreOptions::default()).await?)
}

/// Opens the configured store and starts serving, with authentication off.
pub async fn start(config: CatalogConfig) -> Result<RunningCatalog, CatalogError> {
    let off = Authenticator::off(toolplane_serve::auth::DEFAULT_CELL);
    start_with_auth(config, off).await
}

/// [`start`] behind `auth` (docs/auth.md).
pub async fn start_with_auth(
    config: CatalogConfig,
    auth: Authenticator,
) -> Result<RunningCatalog, CatalogError> {
    config.validate()?;
    let store = open_store(&config.store).await?;
    let (grpc_listener, http_listener) = bind(&config).await?;
    start_on(config, store, grpc_listener, http_listener, auth).await
}

fn io(what: &str, e: impl std::fmt::Display) -> CatalogError {
    CatalogError::new(CatalogCode::Io, format!("{what}: {e}"))
}

/// Starts serving over a store the caller opened (shared with other services in one process,
/// each under its own namespace).
pub async fn start_with_store(
    config: CatalogConfig,
    store: Arc<dyn Store>,
) -> Result<RunningCatalog, CatalogError> {
    config.validate()?;
    let (grpc_listener, http_listener) = bind(&config).await?;
    let off = Authenticator::off(toolplane_serve::auth::DEFAULT_CELL);
    start_on(config, store, grpc_listener, http_listener, off).await
}

async fn bind(config: &CatalogConfig) -> Result<(TcpListener, TcpListener), CatalogError> {
    let grpc_listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| io(&format!("bind grpc {}", config.listen), e))?;
    let http_listener = TcpListener::bind(config.http_listen)
        .await
        .map_err(|e| io(&format!("bind http {}", config.http_listen), e))?;
    Ok((grpc_listener, http_listener))
}

/// Starts serving on listeners the caller bound (so an embedder knows both addresses before any
/// service starts). `config.listen` and `config.http_listen` are ignored.
///
/// The catalog answers health checks as soon as it serves; the default cell's first pull from the
/// mcp-proxy runs in the background, and a request that needs the cell meanwhile waits for it.
pub async fn start_on(
    config: CatalogConfig,
    store: Arc<dyn Store>,
    grpc_listener: TcpListener,
    http_listener: TcpListener,
    auth: Authenticator,
) -> Result<RunningCatalog, CatalogError> {
    let mut running = start_unwarmed(config, store, grpc_listener, http_listener, auth).await?;
    running.warm_default_cell();
    Ok(running)
}

/// [`start_on`] without warming the default cell: the embedder calls
/// [`RunningCatalog::warm_default_cell`] or [`RunningCatalog::warm_default_cell_after`] when the
/// pull should run (`toolplane up` does shortly after all its services serve, so the pull competes
/// neither with their start nor with their clients' first connections). A request that needs the
/// cell before then pulls it itself.
pub async fn start_unwarmed(
    config: CatalogConfig,
    store: Arc<dyn Store>,
    grpc_listener: TcpListener,
    http_listener: TcpListener,
    auth: Authenticator,
) -> Result<RunningCatalog, CatalogError> {
    config.validate()?;
    let records = Records::new(store.namespace(NAMESPACE)?);
    let catalog = Arc::new(Catalog::new(config.clone(), records)?);
    if let Some(dir) = &config.profiles_dir {
        let loaded = catalog.load_profile_dir(dir).await?;
        tracing::info!(dir = %dir.display(), written = loaded.len(), "profile directory loaded");
    }
    let audit = AdminAuditLog::new(store.namespace(NAMESPACE)?, AUDIT_SERVICE)
        .with_tokens(auth.tokens().cloned());
    let svc = CatalogGrpc::new(Arc::clone(&catalog)).with_audit(CatalogAudit::new(audit.clone()));
    // Tokens are made in the store the authenticator verifies them against; with
    // authentication off (nothing verifies them), in the catalog's own store.
    let tokens = match auth.tokens() {
        Some(tokens) => tokens.clone(),
        None => TokenStore::new(store.namespace(TOKEN_NAMESPACE)?),
    };
    let services = Services::new()
        .add_service(CatalogServiceServer::new(svc.clone()))
        .add_service_with_limits(
            ProfileServiceServer::new(svc),
            MessageLimits {
                decoding: Some(MAX_PROFILE_REQUEST_BYTES.min(config.limits.max_request_bytes)),
                encoding: None,
            },
        )
        .add_service(
            TokenGrpc::new(tokens)
                .with_audit(CatalogAudit::new(audit.clone()))
                .server(),
        )
        .add_service(AdminAuditGrpc::new(audit).server());
    // The server's own metrics (`toolplane_handler_panics_total`), rendered after the catalog's
    // on its `/metrics`.
    let registry = Arc::new(Registry::new());
    toolplane_telemetry::metrics::export(&registry, "toolplane-catalog");
    let tls = config
        .tls
        .server()
        .map_err(|e| CatalogError::new(CatalogCode::ConfigInvalid, e))?;
    let options = ServeOptions::new("catalog")
        .max_request_bytes(config.limits.max_request_bytes)
        .auth(auth)
        .tls(tls)
        .registry(Arc::clone(&registry))
        .http(
            http_listener,
            crate::http::router(Arc::clone(&catalog), registry),
        );
    let serving = toolplane_serve::serve(grpc_listener, services, options)
        .await
        .map_err(|e| io("serve", e))?;
    let grpc_addr = serving.addr();
    let http_addr = serving
        .http_addr()
        .ok_or_else(|| io("http local address", "not served"))?;

    let (stop, stopped) = watch::channel(false);
    let refresher = Arc::clone(&catalog);
    let tasks = vec![tokio::spawn(async move {
        refresher.run_refresher(stopped).await;
        tracing::debug!("refresher stopped");
        Ok(())
    })];

    tracing::info!(grpc = %grpc_addr, http = %http_addr, "catalog serving");
    Ok(RunningCatalog {
        grpc_addr,
        http_addr,
        serving: Some(serving),
        catalog,
        stop,
        tasks,
    })
}

impl RunningCatalog {
    /// Pulls the default cell in the background, so the first request does not pay for it.
    pub fn warm_default_cell(&mut self) {
        self.warm_default_cell_after(Duration::ZERO);
    }

    /// Pulls the default cell in the background once `delay` has passed (unless a request pulled
    /// it meanwhile, which leaves nothing to do).
    pub fn warm_default_cell_after(&mut self, delay: Duration) {
        let warm = Arc::clone(&self.catalog);
        let mut warm_stop = self.stop.subscribe();
        self.tasks.push(tokio::spawn(async move {
            let default_cell = CellId::default_cell();
            let pull = async {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                warm.cell(&default_cell).await
            };
            tokio::select! {
                r = pull => {
                    if let Err(e) = r {
                        tracing::warn!(error = %e, "warming the default cell failed");
                    }
                }
                _ = warm_stop.wait_for(|s| *s) => {}
            }
            Ok(())
        }));
    }

    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// `http://<grpc addr>`, as gRPC clients connect.
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc_addr)
    }

    /// `http://<http addr>`, the base of `GET /tools`.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http_addr)
    }

    /// The catalog itself, for embedders (e.g. to install adapter tools).
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// Stops accepting requests, lets in-flight ones finish, stops the background refresher and
    /// warm-up, and reports how the servers ended.
    pub async fn shutdown(mut self) -> Result<(), CatalogError> {
        let mut result = match self.serving.take() {
            Some(serving) => serving.shutdown().await.map_err(|e| io("grpc server", e)),
            None => Ok(()),
        };
        let _ = self.stop.send(true);
        for task in std::mem::take(&mut self.tasks) {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(e) => result = Err(io("server task", e)),
            }
        }
        result
    }
}

impl Drop for RunningCatalog {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
