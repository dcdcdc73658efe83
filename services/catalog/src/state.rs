//! The catalog's live state: one assembled catalog per cell, kept current.
//!
//! A cell's catalog is assembled from its inputs (the builtin descriptors, the mcp-proxy's
//! cached tools, the stored host registrations and profiles, installed adapters) and replaced
//! whole when an input changes, so a reader always sees one consistent catalog and never waits
//! for IO. Inputs are pulled when a cell is first used, after every write through this service,
//! on `RefreshSources`, and by a background refresher every `refresh_interval_ms` (so changes in
//! the mcp-proxy show up within one interval). Writes made through another replica sharing the
//! store are seen before the next request is served: every write of a registration or profile
//! rewrites the cell's generation marker, and [`Catalog::cell`] compares the marker's version with
//! the one the cell was last read at (one `head`) and re-reads the stored inputs when it moved
//! (docs/deploy.md, "Scaling out"). The store stays the truth: profile and policy reads go to it
//! directly.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use tokio::sync::OnceCell;
use toolplane_core::CoreError;
use toolplane_core::catalog::ToolOrigin;
use toolplane_core::error::TOOL_DUPLICATE_ID;
use toolplane_core::id::ToolId;
use toolplane_core::profile::Profile;
use toolplane_store::{Key, Version};

use crate::assembly::{self, Assembled, Inputs, Live};
use crate::cell::CellId;
use crate::config::CatalogConfig;
use crate::convert;
use crate::error::{CatalogCode, CatalogError, diag};
use crate::listing::{Diagnostic, SourceStatus};
use crate::mcp::McpClient;
use crate::records::{
    HostRecord, ProfileRecord, Records, generation_key, hosts_prefix, now_unix_ms, profiles_prefix,
};
use crate::sources::{self, AdapterTools, SourcedTool};

/// The catalog service's shared state.
#[derive(Debug)]
pub struct Catalog {
    pub(crate) config: CatalogConfig,
    pub(crate) records: Records,
    mcp: Option<McpClient>,
    cells: Mutex<HashMap<CellId, Arc<Cell>>>,
}

/// One cell's catalog and the inputs it was assembled from.
#[derive(Debug)]
pub struct Cell {
    id: CellId,
    ready: OnceCell<()>,
    inputs: tokio::sync::Mutex<CellInputs>,
    assembled: RwLock<Arc<Assembled>>,
    live: RwLock<Live>,
    /// The version of the cell's generation marker its stored inputs were last read at
    /// (`None`: no marker yet, or not read yet).
    seen_generation: Mutex<Option<Version>>,
}

#[derive(Debug, Default)]
struct CellInputs {
    mcp_raw: Vec<toolplane_proto::v1::McpCachedTool>,
    mcp: Vec<SourcedTool>,
    mcp_notes: Vec<Diagnostic>,
    host_versions: BTreeMap<String, Version>,
    hosts: BTreeMap<String, Arc<HostRecord>>,
    profile_versions: BTreeMap<String, Version>,
    profiles: BTreeMap<String, Arc<Profile>>,
    adapters: BTreeMap<String, AdapterTools>,
}

impl Catalog {
    pub fn new(config: CatalogConfig, records: Records) -> Result<Catalog, CatalogError> {
        config.validate()?;
        let mcp = match &config.mcp_proxy_url {
            Some(url) => Some(McpClient::new(
                url,
                config.mcp_timeout(),
                config.limits.max_mcp_tools_per_cell,
                config.mcp_proxy_token.as_ref(),
                config
                    .tls
                    .peer()
                    .map_err(|e| CatalogError::new(CatalogCode::ConfigInvalid, e))?
                    .as_ref(),
            )?),
            None => None,
        };
        Ok(Catalog {
            config,
            records,
            mcp,
            cells: Mutex::new(HashMap::new()),
        })
    }

    /// A cell's state, pulling its sources the first time it is used.
    pub async fn cell(&self, id: &CellId) -> Result<Arc<Cell>, CatalogError> {
        let cell = {
            let mut cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
            match cells.get(id) {
                Some(c) => Arc::clone(c),
                None => {
                    if cells.len() >= self.config.limits.max_cells {
                        return Err(CatalogError::new(
                            CatalogCode::LimitExceeded,
                            format!(
                                "the catalog already serves {} cells, its configured maximum",
                                cells.len()
                            ),
                        ));
                    }
                    let c = Arc::new(Cell {
                        id: id.clone(),
                        ready: OnceCell::new(),
                        inputs: tokio::sync::Mutex::new(CellInputs::default()),
                        assembled: RwLock::new(Arc::new(Assembled::default())),
                        live: RwLock::new(Live::default()),
                        seen_generation: Mutex::new(None),
                    });
                    cells.insert(id.clone(), Arc::clone(&c));
                    c
                }
            }
        };
        let mut first = false;
        cell.ready
            .get_or_init(|| async {
                first = true;
                self.pull(&cell, true).await;
            })
            .await;
        if !first {
            self.catch_up(&cell).await;
        }
        Ok(cell)
    }

    /// Re-reads the cell's stored inputs when another process wrote them since they were last
    /// read: one `head` of the generation marker when nothing changed. A store that cannot answer
    /// leaves the cell as it is (the refresher reports the store's state).
    async fn catch_up(&self, cell: &Cell) {
        let Ok(key) = generation_key(&cell.id) else {
            return;
        };
        let Ok(now) = self.records.head(&key).await else {
            return;
        };
        if now == *cell.seen() {
            return;
        }
        let mut inputs = cell.inputs.lock().await;
        let mut live = cell.live();
        if self.reread_store(cell, &mut inputs, &mut live).await {
            self.rebuild(cell, &inputs);
        }
        *cell.live.write().unwrap_or_else(PoisonError::into_inner) = live;
    }

    /// [`Self::refresh_store`], noting the generation marker's version read before it.
    async fn reread_store(&self, cell: &Cell, inputs: &mut CellInputs, live: &mut Live) -> bool {
        let generation = match generation_key(&cell.id) {
            Ok(key) => self.records.head(&key).await.ok(),
            Err(_) => None,
        };
        let changed = self.refresh_store(cell, inputs, live).await;
        if let Some(generation) = generation {
            *cell.seen() = generation;
        }
        changed
    }

    /// The cells in memory.
    pub fn known_cells(&self) -> Vec<Arc<Cell>> {
        let cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        cells.values().cloned().collect()
    }

    /// Pulls every source of a cell and reassembles it if anything changed.
    pub async fn refresh(&self, cell: &Cell) -> Vec<SourceStatus> {
        self.pull(cell, false).await
    }

    /// Pulls every source; `assemble` forces an assembly (the cell's first).
    async fn pull(&self, cell: &Cell, assemble: bool) -> Vec<SourceStatus> {
        let mut inputs = cell.inputs.lock().await;
        let mut live = cell.live();
        let mut changed = self.refresh_mcp(cell, &mut inputs, &mut live).await;
        changed |= self.reread_store(cell, &mut inputs, &mut live).await;
        if changed || assemble {
            self.rebuild(cell, &inputs);
        }
        *cell.live.write().unwrap_or_else(PoisonError::into_inner) = live;
        cell.statuses()
    }

    /// After a write of a registration or profile through this service: rewrites the cell's
    /// generation marker (so replicas sharing the store re-read it before their next answer),
    /// re-reads the cell's stored registrations and profiles and reassembles it if anything
    /// changed.
    pub async fn refresh_stored(&self, cell: &Cell) {
        match generation_key(&cell.id) {
            Ok(key) => {
                if let Err(e) = self.records.touch(&key).await {
                    tracing::warn!(cell = %cell.id, error = %e, "the cell's generation marker could not be rewritten; other replicas see this write at their next refresh");
                }
            }
            Err(e) => tracing::warn!(cell = %cell.id, error = %e, "no generation marker key"),
        }
        let mut inputs = cell.inputs.lock().await;
        let mut live = cell.live();
        if self.reread_store(cell, &mut inputs, &mut live).await {
            self.rebuild(cell, &inputs);
        }
        *cell.live.write().unwrap_or_else(PoisonError::into_inner) = live;
    }

    /// Installs (or replaces) the tools an adapter derives for a cell. Adapter tools are not
    /// stored: the embedder that derives them from the cell's spec installs them at start-up.
    /// An id another source already contributes is refused, naming both sources.
    pub async fn install_adapter(
        &self,
        cell: &CellId,
        adapter: AdapterTools,
    ) -> Result<(), CatalogError> {
        crate::cell::parse_segment("adapter", &adapter.adapter)?;
        let tools = sources::adapter_tools(&adapter)?;
        let cell = self.cell(cell).await?;
        let mut inputs = cell.inputs.lock().await;
        check_no_duplicates(
            sources::builtin_tools(),
            &inputs,
            Replacing::Adapter(&adapter.adapter),
            &tools,
        )?;
        inputs.adapters.insert(adapter.adapter.clone(), adapter);
        self.rebuild(&cell, &inputs);
        Ok(())
    }

    /// Refuses a host registration whose tools collide with another source's.
    pub(crate) async fn check_host_ids(
        &self,
        cell: &Cell,
        host: &HostRecord,
    ) -> Result<(), CatalogError> {
        let tools = sources::host_tools(host)?;
        let inputs = cell.inputs.lock().await;
        check_no_duplicates(
            sources::builtin_tools(),
            &inputs,
            Replacing::Host(&host.host_id),
            &tools,
        )
    }

    fn rebuild(&self, cell: &Cell, inputs: &CellInputs) {
        let assembled = Assembled::build(Inputs {
            builtin: sources::builtin_tools(),
            mcp: &inputs.mcp,
            hosts: &inputs.hosts,
            adapters: &inputs.adapters,
            profiles: &inputs.profiles,
        });
        tracing::debug!(cell = %cell.id, tools = assembled.tools.len(), "catalog assembled");
        *cell
            .assembled
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(assembled);
    }

    async fn refresh_mcp(&self, cell: &Cell, inputs: &mut CellInputs, live: &mut Live) -> bool {
        let Some(client) = &self.mcp else {
            live.mcp_configured = false;
            live.mcp_available = false;
            live.mcp_diagnostics = vec![Diagnostic::new(
                diag::MCP_NOT_CONFIGURED,
                "no mcp-proxy address is configured (mcp_proxy_url), so no MCP tools are listed",
                "",
            )];
            return false;
        };
        live.mcp_configured = true;
        match client.pull(&cell.id).await {
            Ok(pulled) => {
                let mut notes = Vec::new();
                if pulled.truncated {
                    notes.push(Diagnostic::new(
                        diag::MCP_UNAVAILABLE,
                        format!(
                            "the mcp-proxy holds more than {} tools for this cell; the rest are left out",
                            self.config.limits.max_mcp_tools_per_cell
                        ),
                        "",
                    ));
                }
                let changed = pulled.tools != inputs.mcp_raw;
                if changed {
                    let mut tools = Vec::with_capacity(pulled.tools.len());
                    let mut dropped = Vec::new();
                    for t in &pulled.tools {
                        match convert::mcp_tool_from_proto(t.clone()) {
                            Ok(tool) => tools.push(tool),
                            Err(d) => dropped.push(d),
                        }
                    }
                    inputs.mcp = tools;
                    inputs.mcp_notes = dropped;
                    inputs.mcp_raw = pulled.tools;
                }
                notes.extend(inputs.mcp_notes.iter().cloned());
                live.mcp_available = true;
                live.mcp_refreshed_at_unix_ms = now_unix_ms();
                live.mcp_diagnostics = notes;
                changed
            }
            Err(why) => {
                if live.mcp_available || live.mcp_diagnostics.is_empty() {
                    tracing::warn!(cell = %cell.id, mcp_proxy = client.url(), error = %why, "mcp source unavailable");
                }
                live.mcp_available = false;
                live.mcp_diagnostics = vec![Diagnostic::new(diag::MCP_UNAVAILABLE, why, "")];
                false
            }
        }
    }

    async fn refresh_store(&self, cell: &Cell, inputs: &mut CellInputs, live: &mut Live) -> bool {
        let mut problems = Vec::new();
        let mut changed = false;
        match self.load_hosts(&cell.id, inputs, &mut problems).await {
            Ok(c) => changed |= c,
            Err(e) => problems.push(Diagnostic::new(e.code(), e.to_string(), "")),
        }
        match self.load_profiles(&cell.id, inputs, &mut problems).await {
            Ok(c) => changed |= c,
            Err(e) => problems.push(Diagnostic::new(e.code(), e.to_string(), "")),
        }
        if problems.is_empty() {
            live.store_refreshed_at_unix_ms = now_unix_ms();
        } else if live.store_diagnostics != problems {
            tracing::warn!(cell = %cell.id, problems = problems.len(), "stored catalog state could not be read completely");
        }
        live.store_diagnostics = problems;
        changed
    }

    async fn load_hosts(
        &self,
        cell: &CellId,
        inputs: &mut CellInputs,
        problems: &mut Vec<Diagnostic>,
    ) -> Result<bool, CatalogError> {
        let keys = self
            .records
            .keys(
                &hosts_prefix(cell)?,
                self.config.limits.max_hosts_per_cell + 1,
            )
            .await?;
        let mut changed = sync_versions(&keys, &mut inputs.host_versions, &mut inputs.hosts);
        for key in &keys {
            let name = key.name().to_owned();
            let Some(version) = self.records.head(key).await? else {
                continue;
            };
            if inputs.host_versions.get(&name) == Some(&version) {
                continue;
            }
            match self.records.get::<HostRecord>(key).await {
                Ok(Some((version, host))) => {
                    inputs.host_versions.insert(name.clone(), version);
                    inputs.hosts.insert(name, Arc::new(host));
                    changed = true;
                }
                Ok(None) => {}
                Err(e) => problems.push(Diagnostic::new(
                    e.code(),
                    e.to_string(),
                    format!("ext/{name}"),
                )),
            }
        }
        Ok(changed)
    }

    async fn load_profiles(
        &self,
        cell: &CellId,
        inputs: &mut CellInputs,
        problems: &mut Vec<Diagnostic>,
    ) -> Result<bool, CatalogError> {
        let keys = self
            .records
            .keys(
                &profiles_prefix(cell)?,
                self.config.limits.max_profiles_per_cell + 1,
            )
            .await?;
        let mut changed = sync_versions(&keys, &mut inputs.profile_versions, &mut inputs.profiles);
        for key in &keys {
            let name = key.name().to_owned();
            let Some(version) = self.records.head(key).await? else {
                continue;
            };
            if inputs.profile_versions.get(&name) == Some(&version) {
                continue;
            }
            let parsed = match self.records.get::<ProfileRecord>(key).await {
                Ok(Some((version, rec))) => Profile::from_json(&rec.profile_json)
                    .map(|p| (version, p))
                    .map_err(CatalogError::from),
                Ok(None) => continue,
                Err(e) => Err(e),
            };
            match parsed {
                Ok((version, profile)) => {
                    inputs.profile_versions.insert(name.clone(), version);
                    inputs.profiles.insert(name, Arc::new(profile));
                    changed = true;
                }
                Err(e) => problems.push(Diagnostic::new(
                    e.code(),
                    e.to_string(),
                    format!("agent/{name}"),
                )),
            }
        }
        Ok(changed)
    }

    /// Runs the periodic refresh until `shutdown` turns true.
    pub async fn run_refresher(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.config.refresh_interval());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    for cell in self.known_cells() {
                        self.refresh(&cell).await;
                    }
                }
                _ = shutdown.changed() => return,
            }
        }
    }
}

impl Cell {
    pub fn id(&self) -> &CellId {
        &self.id
    }

    /// The cell's current catalog; cheap, never waits for a refresh.
    pub fn assembled(&self) -> Arc<Assembled> {
        Arc::clone(
            &self
                .assembled
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Option<Version>> {
        self.seen_generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn live(&self) -> Live {
        self.live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The state of every source as of the last refresh.
    pub fn statuses(&self) -> Vec<SourceStatus> {
        assembly::statuses(&self.assembled().counts, &self.live())
    }
}

/// Drops cached entries whose keys are gone; returns whether any was dropped.
fn sync_versions<T>(
    keys: &[Key],
    versions: &mut BTreeMap<String, Version>,
    values: &mut BTreeMap<String, T>,
) -> bool {
    let present: std::collections::BTreeSet<&str> = keys.iter().map(Key::name).collect();
    let before = values.len();
    versions.retain(|k, _| present.contains(k.as_str()));
    values.retain(|k, _| present.contains(k.as_str()));
    values.len() != before
}

/// Refuses new tools whose ids another source of the cell already contributes (the adapter or
/// host being replaced excepted), naming both sources.
fn check_no_duplicates(
    builtin: &[SourcedTool],
    inputs: &CellInputs,
    replacing: Replacing<'_>,
    new_tools: &[SourcedTool],
) -> Result<(), CatalogError> {
    let mut seen: HashMap<ToolId, String> = HashMap::new();
    for t in builtin.iter().chain(&inputs.mcp) {
        seen.insert(t.id().clone(), t.entry.origin().to_string());
    }
    for (name, host) in &inputs.hosts {
        if replacing == Replacing::Host(name) {
            continue;
        }
        let origin = ToolOrigin::External {
            host_id: host.host_id.clone(),
            endpoint: host.endpoint.url.clone(),
        };
        for t in &host.tools {
            seen.insert(t.descriptor.id().clone(), origin.to_string());
        }
    }
    for (name, adapter) in &inputs.adapters {
        if replacing == Replacing::Adapter(name) {
            continue;
        }
        let origin = ToolOrigin::Adapter {
            adapter: adapter.adapter.clone(),
            endpoint: adapter.endpoint.url.clone(),
        };
        for t in &adapter.tools {
            seen.insert(t.descriptor.id().clone(), origin.to_string());
        }
    }
    for profile in inputs.profiles.values() {
        if let Ok(Some(t)) = sources::sub_agent_tool(profile) {
            seen.insert(t.id().clone(), t.entry.origin().to_string());
        }
    }
    for t in new_tools {
        if let Some(other) = seen.get(t.id()) {
            return Err(CatalogError::Core(CoreError::new(
                TOOL_DUPLICATE_ID,
                format!(
                    "`{}` is contributed by both {other} and {}",
                    t.id(),
                    t.entry.origin()
                ),
            )));
        }
    }
    Ok(())
}

/// Which registration a duplicate check replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replacing<'a> {
    Host(&'a str),
    Adapter(&'a str),
}
