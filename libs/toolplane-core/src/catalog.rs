//! The tool catalog: the descriptors every source contributes, in one ordered set.
//!
//! The catalog holds neutral facts only: which tools exist, where each comes from, and whether its
//! source can use it right now (an MCP tool of a paused server is listed but not usable). It never
//! holds aliases, budgets or invocation state. A duplicate id fails fast and names both sources.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::descriptor::ToolDescriptor;
use crate::error::{CoreError, TOOL_DUPLICATE_ID, TOOL_INVALID_ID};
use crate::id::{Provider, ToolId};
use crate::selector::ToolSelector;

/// The six sources a tool can come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolSource {
    /// Declared in code by toolplane.
    Builtin,
    /// An MCP server's tool, from the mcp-proxy's cached catalog.
    Mcp,
    /// An external tool host (SDK tools, plugins, extensions) registered with an executor endpoint.
    External,
    /// A tool derived by an adapter (knowledge base, email, browser, …) from a cell's spec.
    Adapter,
    /// A sub-agent offered as a tool.
    SubAgent,
    /// A tool that exists for one run only, declared in its run spec.
    RunSpec,
}

impl ToolSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolSource::Builtin => "builtin",
            ToolSource::Mcp => "mcp",
            ToolSource::External => "external",
            ToolSource::Adapter => "adapter",
            ToolSource::SubAgent => "sub_agent",
            ToolSource::RunSpec => "run_spec",
        }
    }

    pub fn parse(s: &str) -> Option<ToolSource> {
        [
            ToolSource::Builtin,
            ToolSource::Mcp,
            ToolSource::External,
            ToolSource::Adapter,
            ToolSource::SubAgent,
            ToolSource::RunSpec,
        ]
        .into_iter()
        .find(|src| src.as_str() == s)
    }
}

/// An MCP tool's permission. `Off` tools are never usable; `Ask` marks the binding as
/// approval-required, so each call is held for a person's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpPermission {
    Off,
    Ask,
    Allow,
}

/// Where a catalog entry comes from, with the facts its executor binding needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum ToolOrigin {
    Builtin,
    Mcp {
        registration_id: String,
        /// The registration's display name: used by `mcp:<server name>/…` selectors and aliases.
        server_name: String,
        permission: McpPermission,
    },
    External {
        host_id: String,
        /// The `toolplane.v1.ToolExecutor` endpoint of the host.
        endpoint: String,
    },
    Adapter {
        adapter: String,
        endpoint: String,
    },
    SubAgent {
        profile_id: String,
    },
    RunSpec {
        host_id: String,
        endpoint: String,
    },
}

impl ToolOrigin {
    pub fn source(&self) -> ToolSource {
        match self {
            ToolOrigin::Builtin => ToolSource::Builtin,
            ToolOrigin::Mcp { .. } => ToolSource::Mcp,
            ToolOrigin::External { .. } => ToolSource::External,
            ToolOrigin::Adapter { .. } => ToolSource::Adapter,
            ToolOrigin::SubAgent { .. } => ToolSource::SubAgent,
            ToolOrigin::RunSpec { .. } => ToolSource::RunSpec,
        }
    }

    /// The MCP server display name, for MCP tools.
    pub fn server_name(&self) -> Option<&str> {
        match self {
            ToolOrigin::Mcp { server_name, .. } => Some(server_name),
            _ => None,
        }
    }

    /// Whether a tool id is consistent with this origin: builtin tools under `builtin`, MCP tools
    /// under their registration's `mcp/<uuid>`, sub-agents under `agent/<profile>`, hosts and
    /// adapters under `ext/…`.
    fn admits(&self, id: &ToolId) -> bool {
        match (self, id.provider()) {
            (ToolOrigin::Builtin, Provider::Builtin) => true,
            (
                ToolOrigin::Mcp {
                    registration_id, ..
                },
                Provider::Mcp(reg),
            ) => reg == registration_id,
            (ToolOrigin::External { host_id, .. }, Provider::Ext(h))
            | (ToolOrigin::RunSpec { host_id, .. }, Provider::Ext(h)) => h == host_id,
            (ToolOrigin::Adapter { .. }, Provider::Ext(_)) => true,
            (ToolOrigin::SubAgent { profile_id }, Provider::Agent(p)) => p == profile_id,
            _ => false,
        }
    }
}

impl fmt::Display for ToolOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolOrigin::Builtin => f.write_str("builtin tools"),
            ToolOrigin::Mcp {
                registration_id,
                server_name,
                ..
            } => {
                write!(f, "mcp server `{server_name}` ({registration_id})")
            }
            ToolOrigin::External { host_id, .. } => write!(f, "external host `{host_id}`"),
            ToolOrigin::Adapter { adapter, .. } => write!(f, "adapter `{adapter}`"),
            ToolOrigin::SubAgent { profile_id } => write!(f, "sub-agent profile `{profile_id}`"),
            ToolOrigin::RunSpec { host_id, .. } => write!(f, "run spec tools `{host_id}`"),
        }
    }
}

/// Why a tool that a profile selects cannot be bound. Each becomes a
/// `tool_omitted` diagnostic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum OmitReason {
    /// The MCP server has never been discovered, or its cache is gone.
    NotCached,
    /// The MCP registration is paused.
    ServerPaused,
    /// The tool's permission is `Off`.
    PermissionOff,
    /// The root input schema is not an object schema.
    NonObjectSchema { detail: String },
    /// The registration's stored state could not be read.
    RegistrationCorrupt { detail: String },
    /// A profile names a tool that is not in the catalog.
    Missing,
    /// A policy layer denies it (user, platform, plan node or profile).
    Denied { layer: String, selector: String },
    /// The platform disabled it for the cell.
    DisabledByPlatform { selector: String },
    /// The plan node's allow list does not include it.
    NotInPlanNode,
    /// The invocation's exit policy removes it (commit/finish/delegation in a return-mode child).
    RemovedByExitPolicy,
    /// A sub-agent target without a model endpoint cannot run delegated children.
    NoModelEndpoint { profile_id: String },
    /// The MCP server runs the tool only as an MCP task (`execution.taskSupport: "required"`).
    McpTaskRequired,
}

impl OmitReason {
    /// One line for people and for the journal.
    pub fn describe(&self) -> String {
        match self {
            OmitReason::NotCached => "the MCP server has no cached tool list; refresh it".into(),
            OmitReason::ServerPaused => "the MCP server is paused".into(),
            OmitReason::PermissionOff => "the tool's permission is off".into(),
            OmitReason::NonObjectSchema { detail } => {
                format!("the input schema is not an object schema: {detail}")
            }
            OmitReason::RegistrationCorrupt { detail } => {
                format!("the MCP registration could not be read: {detail}")
            }
            OmitReason::Missing => "no such tool in the catalog".into(),
            OmitReason::Denied { layer, selector } => {
                format!("denied by the {layer} policy (`{selector}`)")
            }
            OmitReason::DisabledByPlatform { selector } => {
                format!("disabled for this cell (`{selector}`)")
            }
            OmitReason::NotInPlanNode => "not in the plan node's allow list".into(),
            OmitReason::RemovedByExitPolicy => "removed by the invocation's exit policy".into(),
            OmitReason::NoModelEndpoint { profile_id } => {
                format!(
                    "profile `{profile_id}` has no model endpoint, so it cannot run delegated work"
                )
            }
            OmitReason::McpTaskRequired => {
                "the MCP server runs this tool only as a task (`execution.taskSupport: required`), which toolplane does not run".into()
            }
        }
    }

    /// Stable snake_case name of the reason.
    pub fn kind(&self) -> &'static str {
        match self {
            OmitReason::NotCached => "not_cached",
            OmitReason::ServerPaused => "server_paused",
            OmitReason::PermissionOff => "permission_off",
            OmitReason::NonObjectSchema { .. } => "non_object_schema",
            OmitReason::RegistrationCorrupt { .. } => "registration_corrupt",
            OmitReason::Missing => "missing",
            OmitReason::Denied { .. } => "denied",
            OmitReason::DisabledByPlatform { .. } => "disabled_by_platform",
            OmitReason::NotInPlanNode => "not_in_plan_node",
            OmitReason::RemovedByExitPolicy => "removed_by_exit_policy",
            OmitReason::NoModelEndpoint { .. } => "no_model_endpoint",
            OmitReason::McpTaskRequired => "task_required",
        }
    }
}

/// One tool in the catalog: its id and origin, and either a usable descriptor or the reason its
/// source cannot offer it now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    id: ToolId,
    origin: ToolOrigin,
    /// Absent only for tools whose source could not produce a valid descriptor. Shared, so that
    /// compiling a snapshot does not copy schemas.
    descriptor: Option<Arc<ToolDescriptor>>,
    unusable: Option<OmitReason>,
    /// For an MCP tool: the version of its server's cached tool list it was read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    catalog_version: Option<u64>,
}

impl CatalogEntry {
    /// A usable tool.
    pub fn usable(origin: ToolOrigin, descriptor: ToolDescriptor) -> Result<Self, CoreError> {
        let id = descriptor.id().clone();
        check_origin(&origin, &id)?;
        Ok(CatalogEntry {
            id,
            origin,
            descriptor: Some(Arc::new(descriptor)),
            unusable: None,
            catalog_version: None,
        })
    }

    /// A tool its source lists but cannot offer now (paused, off, not cached, bad schema).
    pub fn unusable(
        id: ToolId,
        origin: ToolOrigin,
        reason: OmitReason,
        descriptor: Option<ToolDescriptor>,
    ) -> Result<Self, CoreError> {
        check_origin(&origin, &id)?;
        Ok(CatalogEntry {
            id,
            origin,
            descriptor: descriptor.map(Arc::new),
            unusable: Some(reason),
            catalog_version: None,
        })
    }

    /// Names the version of the source's tool list the entry was read from (an MCP server's
    /// cached catalog version, which increases each time the server's list changes).
    pub fn with_catalog_version(mut self, version: u64) -> Self {
        self.catalog_version = (version > 0).then_some(version);
        self
    }
    /// The version of the source's tool list the entry was read from, when known.
    pub fn catalog_version(&self) -> Option<u64> {
        self.catalog_version
    }
    pub fn id(&self) -> &ToolId {
        &self.id
    }
    pub fn origin(&self) -> &ToolOrigin {
        &self.origin
    }
    pub fn source(&self) -> ToolSource {
        self.origin.source()
    }
    pub fn descriptor(&self) -> Option<&ToolDescriptor> {
        self.descriptor.as_deref()
    }
    /// Why the tool is not usable, if it is not.
    pub fn unusable_reason(&self) -> Option<&OmitReason> {
        self.unusable.as_ref()
    }
    /// The descriptor, when the source can offer the tool now.
    pub fn usable_descriptor(&self) -> Option<&ToolDescriptor> {
        self.usable_descriptor_arc().map(|d| &**d)
    }
    /// The shared descriptor, when the source can offer the tool now.
    pub fn usable_descriptor_arc(&self) -> Option<&Arc<ToolDescriptor>> {
        if self.unusable.is_some() {
            None
        } else {
            self.descriptor.as_ref()
        }
    }
}

fn check_origin(origin: &ToolOrigin, id: &ToolId) -> Result<(), CoreError> {
    if origin.admits(id) {
        Ok(())
    } else {
        Err(CoreError::new(
            TOOL_INVALID_ID,
            format!("`{id}` cannot come from {origin}"),
        ))
    }
}

/// The ordered set of every tool the sources contribute. Order is insertion order, which is the
/// order selectors expand in.
#[derive(Debug, Clone, Default)]
pub struct ToolCatalog {
    entries: Vec<CatalogEntry>,
    index: HashMap<ToolId, usize>,
    /// Entry positions per provider and per MCP server name, so expanding a selector touches only
    /// the tools it can match, not the whole catalog.
    by_provider: HashMap<Provider, Vec<usize>>,
    by_server: HashMap<String, Vec<usize>>,
}

impl ToolCatalog {
    /// Builds a catalog; a duplicate id fails fast with an error naming both sources.
    pub fn new(entries: impl IntoIterator<Item = CatalogEntry>) -> Result<Self, CoreError> {
        let mut catalog = ToolCatalog::default();
        for entry in entries {
            catalog.push(entry)?;
        }
        Ok(catalog)
    }

    /// Adds one entry; a duplicate id fails with an error naming both sources.
    pub fn push(&mut self, entry: CatalogEntry) -> Result<(), CoreError> {
        if let Some(&existing) = self.index.get(&entry.id) {
            return Err(CoreError::new(
                TOOL_DUPLICATE_ID,
                format!(
                    "`{}` is contributed by both {} and {}",
                    entry.id, self.entries[existing].origin, entry.origin
                ),
            ));
        }
        let pos = self.entries.len();
        self.index.insert(entry.id.clone(), pos);
        self.by_provider
            .entry(entry.id.provider().clone())
            .or_default()
            .push(pos);
        if let Some(server) = entry.origin.server_name() {
            self.by_server
                .entry(server.to_owned())
                .or_default()
                .push(pos);
        }
        self.entries.push(entry);
        Ok(())
    }

    /// The entries a selector matches, in catalog order.
    pub fn select<'a>(
        &'a self,
        sel: &'a ToolSelector,
    ) -> impl Iterator<Item = &'a CatalogEntry> + 'a {
        self.select_positions(sel).map(|(_, e)| e)
    }

    /// Like [`ToolCatalog::select`], with each entry's position in the catalog.
    pub fn select_positions<'a>(
        &'a self,
        sel: &'a ToolSelector,
    ) -> Box<dyn Iterator<Item = (usize, &'a CatalogEntry)> + 'a> {
        let positions: Option<&Vec<usize>> = match sel {
            ToolSelector::All => return Box::new(self.entries.iter().enumerate()),
            ToolSelector::Exact(id) => {
                return Box::new(
                    self.index
                        .get(id)
                        .map(|&i| (i, &self.entries[i]))
                        .into_iter(),
                );
            }
            ToolSelector::Prefix { provider, .. } => self.by_provider.get(provider),
            ToolSelector::McpServer { server, .. } => self.by_server.get(server),
            ToolSelector::AllMcp | ToolSelector::Annotation(_) => {
                return Box::new(
                    self.entries
                        .iter()
                        .enumerate()
                        .filter(move |(_, e)| sel.matches(e)),
                );
            }
        };
        Box::new(
            positions
                .into_iter()
                .flatten()
                .map(|&i| (i, &self.entries[i]))
                .filter(move |(_, e)| sel.matches(e)),
        )
    }

    pub fn get(&self, id: &ToolId) -> Option<&CatalogEntry> {
        self.index.get(id).map(|&i| &self.entries[i])
    }

    pub fn entries(&self) -> &[CatalogEntry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ext(host: &str, name: &str) -> CatalogEntry {
        let id = ToolId::parse(&format!("ext/{host}:{name}")).unwrap();
        let d = ToolDescriptor::new(id, "d", json!({"type": "object"})).unwrap();
        CatalogEntry::usable(
            ToolOrigin::External {
                host_id: host.into(),
                endpoint: "http://127.0.0.1:1".into(),
            },
            d,
        )
        .unwrap()
    }

    #[test]
    fn duplicate_ids_fail_fast_naming_both_sources() {
        let a = ext("crm", "lookup");
        let run = CatalogEntry::usable(
            ToolOrigin::RunSpec {
                host_id: "crm".into(),
                endpoint: "http://127.0.0.1:2".into(),
            },
            a.descriptor().unwrap().clone(),
        )
        .unwrap();
        let err = ToolCatalog::new([a, run]).unwrap_err();
        assert_eq!(err.code, TOOL_DUPLICATE_ID);
        assert!(err.message.contains("external host `crm`"), "{err}");
        assert!(err.message.contains("run spec tools `crm`"), "{err}");
    }

    #[test]
    fn origin_must_match_provider() {
        let id = ToolId::parse("ext/crm:lookup").unwrap();
        let d = ToolDescriptor::new(id, "d", json!({"type": "object"})).unwrap();
        let err = CatalogEntry::usable(ToolOrigin::Builtin, d.clone()).unwrap_err();
        assert_eq!(err.code, TOOL_INVALID_ID);
        let other_host = ToolOrigin::External {
            host_id: "other".into(),
            endpoint: "x".into(),
        };
        assert!(CatalogEntry::usable(other_host, d).is_err());
    }

    #[test]
    fn keeps_insertion_order_and_lookup() {
        let cat = ToolCatalog::new([ext("a", "z"), ext("a", "b")]).unwrap();
        let ids: Vec<String> = cat.entries().iter().map(|e| e.id().to_string()).collect();
        assert_eq!(ids, ["ext/a:z", "ext/a:b"]);
        assert!(cat.get(&ToolId::parse("ext/a:b").unwrap()).is_some());
    }
}
