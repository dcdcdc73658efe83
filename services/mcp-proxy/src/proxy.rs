//! The mcp-proxy itself: registrations in memory and in the store, one
//! connection supervisor per server, discovery into the cached catalog, and the listings.
//!
//! [`McpProxy`] is what the gRPC layer calls. Every admin mutation is serialized by one lock and
//! written to the store before it is visible; listings answer from memory only, never from the
//! network. Each registration has a supervisor task that keeps an active server connected,
//! reconnecting with exponential backoff after it dies; calls that arrive while it is down try
//! once themselves unless a backoff is running. Execution lives in [`crate::execute`].

mod connect;
mod listing;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use toolplane_auth::{Caller, CallerKind, Role};
use toolplane_core::catalog::McpPermission;
use toolplane_core::egress::EgressPolicy;
use toolplane_core::id::{Provider, ToolId};
use toolplane_store::{Store, Version};

use crate::catalog::{
    CachedCatalog, CachedTool, CatalogBuilder, LiveCatalog, MAX_PAGES, Note, Usability, usability,
};
use crate::children::ProcessSettings;
use crate::connection::{Connection, connect};
use crate::error::{
    MCP_CONNECTION_FAILED, MCP_DISCOVERY_FAILED, MCP_DUPLICATE_DISPLAY_NAME,
    MCP_GENERATION_MISMATCH, MCP_INVALID_REQUEST, MCP_SERVER_NOT_FOUND, MCP_SERVER_PAUSED,
    MCP_SHUTTING_DOWN, MCP_TOO_MANY_SERVERS, ProxyError, REQUEST_INVALID_PAGE_TOKEN,
};
use crate::live::Trigger;
use crate::persist::Persist;
use crate::registration::{
    LimitDefaults, Limits, MAX_TOOL_PERMISSIONS, REGISTRATION_FORMAT, Registration,
    RequestedLimits, ServerState, TransportSpec, cell_or_default, keep_redacted, parse_server_id,
    shown, validate_display_name, validate_transport,
};

/// Proxy-wide settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProxySettings {
    /// Defaults and ceilings of per-registration limits.
    pub limits: LimitDefaults,
    /// Most registrations in one cell (default 100).
    pub max_servers_per_cell: usize,
    /// First reconnect delay after a server died (default 250 ms); doubles per failure.
    pub reconnect_initial_ms: u64,
    /// Longest reconnect delay (default 30 s).
    pub reconnect_max_ms: u64,
    /// Allow-lists and resource limits of stdio processes and named environment variables.
    pub processes: ProcessSettings,
    /// Which hosts and addresses streamable HTTP servers may be reached at (docs/egress.md).
    pub egress: EgressPolicy,
}

impl Default for ProxySettings {
    fn default() -> ProxySettings {
        ProxySettings {
            limits: LimitDefaults::default(),
            max_servers_per_cell: 100,
            reconnect_initial_ms: 250,
            reconnect_max_ms: 30_000,
            processes: ProcessSettings::default(),
            egress: EgressPolicy::default(),
        }
    }
}

/// Connection status of a server, as listings show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnStatus {
    Disconnected,
    Connecting,
    Connected,
    Failed,
}

#[derive(Debug)]
pub(crate) struct Health {
    pub status: ConnStatus,
    pub last_error: String,
    pub failures: u32,
    pub retry_at: Option<Instant>,
}

/// One registration with its live state.
#[derive(Debug)]
pub(crate) struct Server {
    pub reg: RwLock<Arc<Registration>>,
    pub(crate) reg_version: std::sync::Mutex<Option<Version>>,
    pub catalog: RwLock<Option<Arc<LiveCatalog>>>,
    pub(crate) catalog_version: std::sync::Mutex<Option<Version>>,
    pub conn: tokio::sync::Mutex<Option<Arc<Connection>>>,
    pub health: std::sync::Mutex<Health>,
    pub permits: RwLock<Arc<Semaphore>>,
    /// Cancelled when the registration is removed.
    pub removed: CancellationToken,
    /// Wakes the supervisor on a state or transport change.
    pub changed: Notify,
    refresh: tokio::sync::Mutex<()>,
    /// What keeps the cached catalog following the server (`crate::live`).
    pub live: crate::live::LiveState,
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(PoisonError::into_inner)
}

impl Server {
    pub(crate) fn new(
        reg: Registration,
        version: Option<Version>,
        catalog: Option<(CachedCatalog, Version)>,
        limits: &Limits,
    ) -> Server {
        let (catalog, catalog_version) = match catalog {
            Some((c, v)) => (Some(Arc::new(LiveCatalog::new(&reg.server_id, c))), Some(v)),
            None => (None, None),
        };
        Server {
            reg: RwLock::new(Arc::new(reg)),
            reg_version: std::sync::Mutex::new(version),
            catalog: RwLock::new(catalog),
            catalog_version: std::sync::Mutex::new(catalog_version),
            conn: tokio::sync::Mutex::new(None),
            health: std::sync::Mutex::new(Health {
                status: ConnStatus::Disconnected,
                last_error: String::new(),
                failures: 0,
                retry_at: None,
            }),
            permits: RwLock::new(Arc::new(Semaphore::new(
                usize::try_from(limits.max_concurrent_calls).unwrap_or(16),
            ))),
            removed: CancellationToken::new(),
            changed: Notify::new(),
            refresh: tokio::sync::Mutex::new(()),
            live: crate::live::LiveState::default(),
        }
    }

    pub fn registration(&self) -> Arc<Registration> {
        Arc::clone(&read(&self.reg))
    }

    pub fn cached(&self) -> Option<Arc<LiveCatalog>> {
        read(&self.catalog).clone()
    }

    pub(crate) fn set_health(&self, status: ConnStatus, error: Option<String>) {
        let mut h = lock(&self.health);
        h.status = status;
        if let Some(e) = error {
            h.last_error = e;
        }
    }
}

/// What listings show about one server.
#[derive(Debug, Clone)]
pub struct ServerView {
    pub reg: Arc<Registration>,
    pub limits: Limits,
    pub connection: ConnStatus,
    pub last_error: String,
    pub cached_tool_count: u32,
    pub refreshed_at_unix_ms: i64,
    /// The cached catalog's version (0: never discovered).
    pub catalog_version: u64,
}

/// What listings show about one tool.
#[derive(Debug, Clone)]
pub struct ToolView {
    pub reg: Arc<Registration>,
    pub native: String,
    /// `None`: a permission is stored for this name but the tool is not in the cache.
    pub tool: Option<CachedTool>,
    pub usability: Usability,
    /// The version of the cached catalog the tool was read from (0: not cached).
    pub catalog_version: u64,
}

impl ToolView {
    pub fn usable(&self) -> bool {
        self.tool.is_some() && self.usability.usable()
    }
}

/// An upsert as the operator asked for it (proto already decoded).
#[derive(Debug, Clone)]
pub struct UpsertInput {
    pub cell_id: String,
    pub server_id: Option<String>,
    pub display_name: String,
    pub transport: Option<TransportSpec>,
    pub state: Option<ServerState>,
    pub limits: Option<RequestedLimits>,
    pub default_permission: Option<McpPermission>,
    pub tool_permissions: BTreeMap<String, McpPermission>,
    pub skip_refresh: bool,
    pub expected_generation: Option<u64>,
    /// Who asks; `None` (or an `AuthOff` caller) when authentication is off.
    pub caller: Option<Caller>,
}

/// The outcome of a discovery.
#[derive(Debug, Clone, Default)]
pub struct RefreshOutcome {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub warnings: Vec<Note>,
}

/// The proxy's metric families.
#[derive(Debug)]
pub(crate) struct ProxyMetrics {
    pub registry: Arc<toolplane_telemetry::metrics::Registry>,
    pub calls: toolplane_telemetry::metrics::Counter,
    pub duration: toolplane_telemetry::metrics::Histogram,
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        let registry = Arc::new(toolplane_telemetry::metrics::Registry::new());
        toolplane_telemetry::metrics::export(&registry, "toolplane-mcp-proxy");
        ProxyMetrics {
            calls: registry.counter(
                "toolplane_mcp_calls_total",
                "MCP tool calls by server and outcome (`ok`, or the error code).",
                &["server", "outcome"],
            ),
            duration: registry.histogram(
                "toolplane_mcp_call_duration_seconds",
                "Time the mcp-proxy took for a call, from its first recheck to the server's answer.",
                &["server"],
            ),
            registry,
        }
    }
}

/// Registrations by cell, then by server id: nested so that a call looks its server up with the
/// `&str`s it already has, without building a key.
pub(crate) type Servers = HashMap<String, HashMap<String, Arc<Server>>>;

pub(crate) struct Inner {
    pub(crate) persist: Persist,
    /// The newest run epochs (`crate::fence`).
    pub(crate) fence: crate::fence::Fence,
    pub(crate) metrics: ProxyMetrics,
    pub settings: ProxySettings,
    servers: RwLock<Servers>,
    pub(crate) admin: tokio::sync::Mutex<()>,
    /// The version of the store's generation marker the registrations were last loaded at
    /// (`crate::replicas`).
    seen_generation: std::sync::Mutex<Option<Version>>,
    pub shutdown: CancellationToken,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").finish_non_exhaustive()
    }
}

/// The mcp-proxy: cheap to clone, all clones share state.
#[derive(Debug, Clone)]
pub struct McpProxy {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl McpProxy {
    /// Loads every registration from `store` (the proxy's namespace) and starts a supervisor per
    /// registration, which connects the active ones in the background — stdio servers (locally
    /// installed plugins) start with the proxy.
    pub async fn open(
        store: Arc<dyn Store>,
        settings: ProxySettings,
    ) -> Result<McpProxy, ProxyError> {
        let fence = crate::fence::Fence::new(Arc::clone(&store));
        let persist = Persist::new(store);
        let seen = persist.generation().await?;
        let loaded = persist.load().await?;
        for bad in &loaded.unreadable {
            tracing::error!(key = %bad.key, reason = %bad.reason, "unreadable mcp-proxy record skipped");
        }
        let inner = Arc::new(Inner {
            persist,
            fence,
            metrics: ProxyMetrics::default(),
            settings,
            servers: RwLock::new(HashMap::new()),
            admin: tokio::sync::Mutex::new(()),
            seen_generation: std::sync::Mutex::new(seen),
            shutdown: CancellationToken::new(),
        });
        let proxy = McpProxy { inner };
        proxy.count_connections_on_scrape();
        for (reg, version, catalog) in loaded.servers {
            let limits = reg.limits.resolve(&proxy.inner.settings.limits);
            let (cell, id) = (reg.cell_id.clone(), reg.server_id.clone());
            let server = Arc::new(Server::new(reg, Some(version), catalog, &limits));
            write(&proxy.inner.servers)
                .entry(cell)
                .or_default()
                .insert(id, Arc::clone(&server));
            proxy.spawn_supervisor(server);
        }
        Ok(proxy)
    }

    pub fn settings(&self) -> &ProxySettings {
        &self.inner.settings
    }

    pub(crate) fn limits_of(&self, reg: &Registration) -> Limits {
        reg.limits.resolve(&self.inner.settings.limits)
    }

    pub(crate) fn seen_generation(&self) -> std::sync::MutexGuard<'_, Option<Version>> {
        lock(&self.inner.seen_generation)
    }

    pub(crate) fn servers_mut(&self) -> std::sync::RwLockWriteGuard<'_, Servers> {
        write(&self.inner.servers)
    }

    /// The registration `server_id` of `cell`, if it exists.
    pub(crate) fn find(&self, cell: &str, server_id: &str) -> Option<Arc<Server>> {
        read(&self.inner.servers)
            .get(cell)
            .and_then(|servers| servers.get(server_id))
            .cloned()
    }

    pub(crate) fn server(&self, cell: &str, server_id: &str) -> Result<Arc<Server>, ProxyError> {
        self.find(cell, server_id).ok_or_else(|| {
            ProxyError::new(
                MCP_SERVER_NOT_FOUND,
                format!("no mcp server `{}` in cell `{cell}`", shown(server_id)),
            )
        })
    }

    fn servers_of(&self, cell: &str) -> Vec<Arc<Server>> {
        let mut servers: Vec<Arc<Server>> = read(&self.inner.servers)
            .get(cell)
            .map(|servers| servers.values().cloned().collect())
            .unwrap_or_default();
        servers.sort_by_key(|s| {
            let r = s.registration();
            (r.display_name.clone(), r.server_id.clone())
        });
        servers
    }

    fn check_open(&self) -> Result<(), ProxyError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(ProxyError::new(
                MCP_SHUTTING_DOWN,
                "the proxy is shutting down",
            ));
        }
        Ok(())
    }

    /// The view of one server.
    pub(crate) fn view(&self, server: &Server) -> ServerView {
        let reg = server.registration();
        let health = lock(&server.health);
        let catalog = server.cached();
        ServerView {
            limits: self.limits_of(&reg),
            reg,
            connection: health.status,
            last_error: health.last_error.clone(),
            cached_tool_count: catalog
                .as_ref()
                .map_or(0, |c| u32::try_from(c.len()).unwrap_or(u32::MAX)),
            refreshed_at_unix_ms: catalog.as_ref().map_or(0, |c| c.refreshed_at_unix_ms()),
            catalog_version: catalog.as_ref().map_or(0, |c| c.version()),
        }
    }

    pub fn get_server(&self, cell_id: &str, server_id: &str) -> Result<ServerView, ProxyError> {
        let cell = cell_or_default(cell_id)?;
        let id = parse_server_id(server_id)?;
        Ok(self.view(&*self.server(&cell, &id)?))
    }

    /// Creates or updates a registration, then (unless asked not to, or paused) connects and
    /// discovers its tools. A failed discovery does not undo the registration: the view says
    /// what failed.
    pub async fn upsert(
        &self,
        input: UpsertInput,
    ) -> Result<(ServerView, bool, Vec<Note>), ProxyError> {
        self.check_open()?;
        let cell = cell_or_default(&input.cell_id)?;
        validate_display_name(&input.display_name)?;
        if let Some(t) = &input.transport {
            validate_transport(t)?;
            let processes = &self.inner.settings.processes;
            processes.check_env(t)?;
            if let Some(caller) = input.caller.as_ref()
                && caller.kind != CallerKind::AuthOff
            {
                processes.check_stdio(t, caller.role == Role::Admin)?;
            }
            if let TransportSpec::StreamableHttp { url, .. } = t {
                let egress = self.inner.settings.egress.for_cell(&cell);
                crate::egress::check_url(&egress, url).await?;
            }
        }
        if let Some(l) = &input.limits {
            l.validate()?;
        }
        check_tool_permissions(&input.tool_permissions)?;
        let guard = self.inner.admin.lock().await;
        let existing = match &input.server_id {
            Some(id) => {
                let id = parse_server_id(id)?;
                self.server(&cell, &id).ok().map(|s| (id, s))
            }
            None => None,
        };
        let taken = self.servers_of(&cell).into_iter().any(|s| {
            let r = s.registration();
            r.display_name == input.display_name
                && existing.as_ref().is_none_or(|(id, _)| *id != r.server_id)
        });
        if taken {
            return Err(ProxyError::new(
                MCP_DUPLICATE_DISPLAY_NAME,
                format!(
                    "cell `{cell}` already has a server named `{}`",
                    input.display_name
                ),
            ));
        }
        let now = now_ms();
        let (server, created, reconnect) = match existing {
            Some((_, server)) => {
                let old = server.registration();
                if let Some(expected) = input.expected_generation
                    && expected != old.generation
                {
                    return Err(ProxyError::new(
                        MCP_GENERATION_MISMATCH,
                        format!(
                            "server `{}` is at generation {}, not {expected}",
                            old.server_id, old.generation
                        ),
                    ));
                }
                let mut reg = (*old).clone();
                reg.display_name = input.display_name.clone();
                if let Some(mut t) = input.transport.clone() {
                    keep_redacted(&mut t, &old.transport);
                    reg.transport = t;
                }
                if let Some(s) = input.state {
                    reg.state = s;
                }
                if let Some(l) = input.limits {
                    reg.limits = l;
                }
                if let Some(p) = input.default_permission {
                    reg.default_permission = p;
                }
                reg.tool_permissions.extend(input.tool_permissions.clone());
                check_tool_permissions(&reg.tool_permissions)?;
                reg.generation += 1;
                reg.updated_at_unix_ms = now;
                let reconnect = reg.transport != old.transport || reg.limits != old.limits;
                self.store_registration(&server, reg).await?;
                (server, false, reconnect)
            }
            None => {
                let Some(transport) = input.transport.clone() else {
                    return Err(ProxyError::new(
                        crate::error::MCP_INVALID_REGISTRATION,
                        "a new registration needs a transport",
                    ));
                };
                if self.servers_of(&cell).len() >= self.inner.settings.max_servers_per_cell {
                    return Err(ProxyError::new(
                        MCP_TOO_MANY_SERVERS,
                        format!(
                            "cell `{cell}` already has {} servers",
                            self.inner.settings.max_servers_per_cell
                        ),
                    ));
                }
                let server_id = match &input.server_id {
                    Some(id) => parse_server_id(id)?,
                    None => uuid::Uuid::new_v4().hyphenated().to_string(),
                };
                let reg = Registration {
                    format: REGISTRATION_FORMAT,
                    cell_id: cell.clone(),
                    server_id: server_id.clone(),
                    display_name: input.display_name.clone(),
                    transport,
                    state: input.state.unwrap_or(ServerState::Active),
                    limits: input.limits.unwrap_or_default(),
                    // Tools stay off until an operator allows them (or sets another default).
                    default_permission: input.default_permission.unwrap_or(McpPermission::Off),
                    tool_permissions: input.tool_permissions.clone(),
                    generation: 1,
                    created_at_unix_ms: now,
                    updated_at_unix_ms: now,
                };
                let version = self.inner.persist.put_registration(&reg, None).await?;
                self.mark_written().await;
                let limits = self.limits_of(&reg);
                let server = Arc::new(Server::new(reg, Some(version), None, &limits));
                write(&self.inner.servers)
                    .entry(cell.clone())
                    .or_default()
                    .insert(server_id, Arc::clone(&server));
                self.spawn_supervisor(Arc::clone(&server));
                (server, true, false)
            }
        };
        drop(guard);
        let reg = server.registration();
        if reconnect {
            let limits = self.limits_of(&reg);
            *write(&server.permits) = Arc::new(Semaphore::new(
                usize::try_from(limits.max_concurrent_calls).unwrap_or(16),
            ));
            if let Some(conn) = server.conn.lock().await.take() {
                conn.close().await;
            }
            server.set_health(ConnStatus::Disconnected, None);
        }
        server.changed.notify_one();
        let mut warnings = Vec::new();
        if !input.skip_refresh && reg.state == ServerState::Active {
            match self.refresh_server(&server).await {
                Ok(outcome) => warnings = outcome.warnings,
                Err(e) => warnings.push(Note::new(e.code.code, e.message, reg.server_id.clone())),
            }
        }
        Ok((self.view(&server), created, warnings))
    }

    async fn store_registration(
        &self,
        server: &Server,
        reg: Registration,
    ) -> Result<(), ProxyError> {
        let expected = lock(&server.reg_version).clone();
        let version = self
            .inner
            .persist
            .put_registration(&reg, expected.as_ref())
            .await?;
        *lock(&server.reg_version) = Some(version);
        *write(&server.reg) = Arc::new(reg);
        self.mark_written().await;
        Ok(())
    }

    /// Removes a registration: its connection is closed (a stdio child stopped and reaped), its
    /// records deleted. Returns the ids of the tools that left the cache.
    pub async fn deregister(
        &self,
        cell_id: &str,
        server_id: &str,
    ) -> Result<Vec<String>, ProxyError> {
        let cell = cell_or_default(cell_id)?;
        let id = parse_server_id(server_id)?;
        let _guard = self.inner.admin.lock().await;
        let server = self.server(&cell, &id)?;
        self.inner.persist.delete_server(&cell, &id).await?;
        self.mark_written().await;
        {
            let mut servers = write(&self.inner.servers);
            if let Some(in_cell) = servers.get_mut(&cell) {
                in_cell.remove(&id);
                if in_cell.is_empty() {
                    servers.remove(&cell);
                }
            }
        }
        server.removed.cancel();
        if let Some(conn) = server.conn.lock().await.take() {
            conn.close().await;
        }
        Ok(server
            .cached()
            .map(|c| {
                c.tools()
                    .iter()
                    .map(|t| format!("mcp/{id}:{}", t.name))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Activates or pauses a server. A paused server's connection is closed once its in-flight
    /// calls are done; an activated one is connected in the background.
    pub async fn set_state(
        &self,
        cell_id: &str,
        server_id: &str,
        state: ServerState,
    ) -> Result<ServerView, ProxyError> {
        self.check_open()?;
        let cell = cell_or_default(cell_id)?;
        let id = parse_server_id(server_id)?;
        let guard = self.inner.admin.lock().await;
        let server = self.server(&cell, &id)?;
        let old = server.registration();
        if old.state != state {
            let mut reg = (*old).clone();
            reg.state = state;
            reg.generation += 1;
            reg.updated_at_unix_ms = now_ms();
            self.store_registration(&server, reg).await?;
        }
        drop(guard);
        server.changed.notify_one();
        if state == ServerState::Paused {
            let server = Arc::clone(&server);
            let limits = self.limits_of(&old);
            tokio::spawn(async move {
                let permits = Arc::clone(&read(&server.permits));
                let all = u32::try_from(permits.available_permits().max(1))
                    .unwrap_or(1)
                    .max(limits.max_concurrent_calls);
                // Waits until no call is in flight (or the call timeout passes), then closes.
                let _ = tokio::time::timeout(limits.call_timeout, permits.acquire_many(all)).await;
                if server.registration().state == ServerState::Paused
                    && let Some(conn) = server.conn.lock().await.take()
                {
                    conn.close().await;
                    server.set_health(ConnStatus::Disconnected, None);
                }
            });
        }
        Ok(self.view(&server))
    }

    /// Sets one tool's permission; returns the tool's view when it is cached.
    pub async fn set_permission(
        &self,
        cell_id: &str,
        server_id: &str,
        native: &str,
        permission: McpPermission,
    ) -> Result<Option<ToolView>, ProxyError> {
        self.check_open()?;
        let cell = cell_or_default(cell_id)?;
        let id = parse_server_id(server_id)?;
        ToolId::new(Provider::Mcp(id.clone()), native).map_err(|e| {
            ProxyError::new(MCP_INVALID_REQUEST, format!("tool name: {}", e.message))
        })?;
        let _guard = self.inner.admin.lock().await;
        let server = self.server(&cell, &id)?;
        let mut reg = (*server.registration()).clone();
        if reg.tool_permissions.get(native) != Some(&permission) {
            reg.tool_permissions.insert(native.to_owned(), permission);
            check_tool_permissions(&reg.tool_permissions)?;
            reg.generation += 1;
            reg.updated_at_unix_ms = now_ms();
            self.store_registration(&server, reg).await?;
        }
        let reg = server.registration();
        Ok(server.cached().and_then(|c| {
            c.get(native).map(|entry| ToolView {
                usability: usability(&reg, entry),
                reg: Arc::clone(&reg),
                native: native.to_owned(),
                tool: Some(entry.tool.clone()),
                catalog_version: c.version(),
            })
        }))
    }

    /// The proxy's metrics: MCP calls by server and outcome with their latency, and
    /// `toolplane_mcp_connections{state}` read from the live connections at every scrape.
    pub fn metrics(&self) -> Arc<toolplane_telemetry::metrics::Registry> {
        Arc::clone(&self.inner.metrics.registry)
    }

    /// Sets `toolplane_mcp_connections` from the live connections before every render.
    fn count_connections_on_scrape(&self) {
        let gauge = self.inner.metrics.registry.gauge(
            "toolplane_mcp_connections",
            "MCP server connections by state.",
            &["state"],
        );
        let inner = Arc::downgrade(&self.inner);
        self.inner.metrics.registry.before_render(move || {
            let Some(inner) = inner.upgrade() else { return };
            let mut counts = [0usize; 4];
            for server in read(&inner.servers).values().flat_map(|c| c.values()) {
                let i = match lock(&server.health).status {
                    ConnStatus::Disconnected => 0,
                    ConnStatus::Connecting => 1,
                    ConnStatus::Connected => 2,
                    ConnStatus::Failed => 3,
                };
                counts[i] += 1;
            }
            for (state, n) in ["disconnected", "connecting", "connected", "failed"]
                .iter()
                .zip(counts)
            {
                gauge.set(&[state], n as f64);
            }
        });
    }

    /// Closes every connection (stdio children stopped and reaped) and refuses new work.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        let servers: Vec<Arc<Server>> = read(&self.inner.servers)
            .values()
            .flat_map(|in_cell| in_cell.values().cloned())
            .collect();
        let closing = servers.into_iter().map(|server| async move {
            if let Some(conn) = server.conn.lock().await.take() {
                conn.close().await;
            }
        });
        futures::future::join_all(closing).await;
    }
}

fn check_tool_permissions(p: &BTreeMap<String, McpPermission>) -> Result<(), ProxyError> {
    if p.len() > MAX_TOOL_PERMISSIONS {
        return Err(ProxyError::new(
            crate::error::MCP_INVALID_REGISTRATION,
            format!("more than {MAX_TOOL_PERMISSIONS} tool permissions"),
        ));
    }
    if let Some(bad) = p
        .keys()
        .find(|n| n.is_empty() || n.len() > toolplane_core::id::MAX_NATIVE_LEN)
    {
        return Err(ProxyError::new(
            crate::error::MCP_INVALID_REGISTRATION,
            format!(
                "tool permission for `{}`: not a valid tool name",
                shown(bad)
            ),
        ));
    }
    Ok(())
}
