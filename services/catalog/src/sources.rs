//! The tool sources the catalog gathers (the six sources of the core's `ToolSource`, minus per-run tools, which arrive in the
//! run spec): builtin descriptors declared in the core, MCP tools from the mcp-proxy's cache,
//! external tool hosts' registrations, adapter-derived tools and sub-agents offered as tools.
//!
//! Each source turns its facts into [`SourcedTool`]s: a core `CatalogEntry` (id, origin, a usable
//! descriptor or the reason it is unusable) plus what only listings need. This module never
//! talks to the network or the store; it builds entries from facts it is given.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::{Value, json};
use toolplane_core::builtin;
use toolplane_core::catalog::{CatalogEntry, OmitReason, ToolOrigin};
use toolplane_core::category::Category;
use toolplane_core::descriptor::{ToolAnnotations, ToolDescriptor};
use toolplane_core::id::{Provider, ToolId};
use toolplane_core::profile::Profile;

use crate::error::{CatalogError, diag};
use crate::listing::{Diagnostic, ExternalFacts, McpFacts};
use crate::records::{Endpoint, HostRecord, RegisteredTool};

/// A descriptor's facts as a source sent them, kept for listing a tool whose descriptor the core
/// could not accept (an MCP tool with a non-object schema).
#[derive(Debug, Clone, PartialEq)]
pub struct RawDescriptor {
    pub title: Option<String>,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub annotations: ToolAnnotations,
}

/// One tool of one source: the core entry and the facts only listings need.
#[derive(Debug, Clone, PartialEq)]
pub struct SourcedTool {
    pub entry: CatalogEntry,
    /// Set only when `entry` has no descriptor.
    pub raw: Option<RawDescriptor>,
    /// Notes from the source (e.g. the mcp-proxy's diagnostics, "ASK runs like ALLOW").
    pub notes: Vec<Diagnostic>,
    pub declared_category: Option<Category>,
    pub declared_progress_aware: bool,
    pub mcp: Option<McpFacts>,
    pub external: Option<ExternalFacts>,
    /// The full executor endpoint (header values included) of external and adapter tools.
    pub endpoint: Option<Endpoint>,
}

impl SourcedTool {
    fn plain(entry: CatalogEntry) -> Self {
        SourcedTool {
            entry,
            raw: None,
            notes: Vec::new(),
            declared_category: None,
            declared_progress_aware: false,
            mcp: None,
            external: None,
            endpoint: None,
        }
    }

    pub fn id(&self) -> &ToolId {
        self.entry.id()
    }
}

/// The builtin tools, declared once in `toolplane_core::builtin`: built on first use and shared
/// by every catalog of the process. A catalog that starts does not need them before its first
/// cell is assembled, so building them is not part of its start (~60% of it, BENCHMARKS.md).
///
/// A builtin is its `builtin:` id and a constant descriptor, so turning it into an entry cannot
/// fail; should it, the tool would be missing, never misdescribed, and
/// `builtins_are_the_cores_twenty` would say so.
pub fn builtin_tools() -> &'static [SourcedTool] {
    static TOOLS: OnceLock<Vec<SourcedTool>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        builtin::descriptors()
            .into_iter()
            .filter_map(|d| {
                let runtime_only = builtin::is_runtime_only(d.id());
                let entry = CatalogEntry::usable(ToolOrigin::Builtin, d).ok()?;
                let mut tool = SourcedTool::plain(entry);
                if runtime_only {
                    tool.notes.push(Diagnostic::new(
                        diag::RUNTIME_ONLY,
                        "injected by the runtime into return-mode children; a profile cannot allow it",
                        tool.id().to_string(),
                    ));
                }
                Some(tool)
            })
            .collect()
    })
}

/// The tools of one external host registration.
pub fn host_tools(host: &HostRecord) -> Result<Vec<SourcedTool>, CatalogError> {
    let facts = ExternalFacts {
        host_id: host.host_id.clone(),
        host_display_name: host.display_name.clone(),
        endpoint_url: host.endpoint.url.clone(),
    };
    host.tools
        .iter()
        .map(|t| {
            let origin = ToolOrigin::External {
                host_id: host.host_id.clone(),
                endpoint: host.endpoint.url.clone(),
            };
            Ok(declared(
                CatalogEntry::usable(origin, t.descriptor.clone())?,
                t,
                facts.clone(),
                &host.endpoint,
            ))
        })
        .collect()
}

fn declared(
    entry: CatalogEntry,
    t: &RegisteredTool,
    facts: ExternalFacts,
    endpoint: &Endpoint,
) -> SourcedTool {
    let mut tool = SourcedTool::plain(entry);
    tool.declared_category = t.category;
    tool.declared_progress_aware = t.progress_aware;
    tool.external = Some(facts);
    tool.endpoint = Some(endpoint.clone());
    tool
}

/// Tools an adapter derives from a cell's spec (a knowledge base, a mailbox, a browser …) and
/// executes behind its own `ToolExecutor` endpoint. No adapter ships with toolplane yet; an
/// embedder installs them with `Catalog::install_adapter`. Their ids are `ext/<adapter>:<name>`.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterTools {
    pub adapter: String,
    pub display_name: String,
    pub endpoint: Endpoint,
    pub tools: Vec<RegisteredTool>,
}

/// The tools of one adapter.
pub fn adapter_tools(adapter: &AdapterTools) -> Result<Vec<SourcedTool>, CatalogError> {
    let facts = ExternalFacts {
        host_id: adapter.adapter.clone(),
        host_display_name: adapter.display_name.clone(),
        endpoint_url: adapter.endpoint.url.clone(),
    };
    adapter
        .tools
        .iter()
        .map(|t| {
            let id = t.descriptor.id();
            if id.provider() != &Provider::Ext(adapter.adapter.clone()) {
                return Err(CatalogError::Core(toolplane_core::CoreError::new(
                    toolplane_core::error::TOOL_INVALID_ID,
                    format!(
                        "`{id}` does not belong to adapter `{}`; its tools are `ext/{}:<name>`",
                        adapter.adapter, adapter.adapter
                    ),
                )));
            }
            let origin = ToolOrigin::Adapter {
                adapter: adapter.adapter.clone(),
                endpoint: adapter.endpoint.url.clone(),
            };
            Ok(declared(
                CatalogEntry::usable(origin, t.descriptor.clone())?,
                t,
                facts.clone(),
                &adapter.endpoint,
            ))
        })
        .collect()
}

/// The native name of every sub-agent tool: `agent/<profile-id>:run`.
pub const SUB_AGENT_TOOL: &str = "run";
/// Longest part of a profile's description copied into its sub-agent tool's description.
const MAX_SUB_AGENT_BLURB: usize = 2000;

/// The sub-agent tool of a profile that declares `delegation.callableAsTool`; `None` otherwise.
/// Without a model endpoint the profile cannot run delegated work, so the tool is listed as
/// unusable (`NoModelEndpoint`).
pub fn sub_agent_tool(profile: &Profile) -> Result<Option<SourcedTool>, CatalogError> {
    if !profile.delegation.callable_as_tool {
        return Ok(None);
    }
    let id = ToolId::new(Provider::Agent(profile.id.clone()), SUB_AGENT_TOOL)?;
    let name = profile.name.clone().unwrap_or_else(|| profile.id.clone());
    let mut description = format!(
        "Ask the {name} agent to do a task and wait for its result. Write a self-contained brief: the goal, the workspace paths that matter, and what you expect back."
    );
    if let Some(about) = profile
        .description
        .as_deref()
        .filter(|d| !d.trim().is_empty())
    {
        let about: String = about.trim().chars().take(MAX_SUB_AGENT_BLURB).collect();
        description = format!("{description} About this agent: {about}");
    }
    let schema = json!({
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "The task brief: the goal, the workspace paths that matter, and the result you expect back."}
        },
        "required": ["task"],
        "additionalProperties": false
    });
    let descriptor = ToolDescriptor::new(id.clone(), description, schema)?
        .with_title(Some(name.chars().take(200).collect()))?;
    let origin = ToolOrigin::SubAgent {
        profile_id: profile.id.clone(),
    };
    let entry = if profile.model.is_some() {
        CatalogEntry::usable(origin, descriptor)?
    } else {
        CatalogEntry::unusable(
            id,
            origin,
            OmitReason::NoModelEndpoint {
                profile_id: profile.id.clone(),
            },
            Some(descriptor),
        )?
    };
    Ok(Some(SourcedTool::plain(entry)))
}

/// MCP tools are built from the mcp-proxy's answer in `convert`; this is the shape they take.
pub fn mcp_tool(
    entry: CatalogEntry,
    raw: Option<RawDescriptor>,
    facts: McpFacts,
    notes: Vec<Diagnostic>,
) -> SourcedTool {
    let mut tool = SourcedTool::plain(entry);
    tool.raw = raw;
    tool.mcp = Some(facts);
    tool.notes = notes;
    tool
}

/// The declared categories of every tool that declares one (the category fallback's second
/// level), for the tools given.
pub fn declared_categories<'a>(
    tools: impl IntoIterator<Item = &'a SourcedTool>,
) -> BTreeMap<ToolId, Category> {
    tools
        .into_iter()
        .filter_map(|t| t.declared_category.map(|c| (t.id().clone(), c)))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn builtins_are_the_cores_twenty() {
        let tools = builtin_tools();
        assert_eq!(tools.len(), 21);
        let task_return = tools
            .iter()
            .find(|t| t.id().is_builtin(builtin::TASK_RETURN))
            .unwrap();
        assert_eq!(task_return.notes[0].code, diag::RUNTIME_ONLY);
    }

    #[test]
    fn sub_agents_need_a_model_endpoint_to_be_usable() {
        let without = Profile::from_json(
            r#"{"id":"researcher","name":"Researcher","description":"Finds facts.","tools":{"allow":[]},"delegation":{"callableAsTool":true}}"#,
        )
        .unwrap();
        let tool = sub_agent_tool(&without).unwrap().unwrap();
        assert_eq!(tool.id().to_string(), "agent/researcher:run");
        assert!(matches!(
            tool.entry.unusable_reason(),
            Some(OmitReason::NoModelEndpoint { .. })
        ));
        let d = tool.entry.descriptor().unwrap();
        assert!(d.description().starts_with("Ask the Researcher agent"));
        assert!(d.description().ends_with("About this agent: Finds facts."));

        let with = Profile::from_json(
            r#"{"id":"researcher","tools":{"allow":[]},"delegation":{"callableAsTool":true},"model":{"kind":"scripted","script":"s.json"}}"#,
        )
        .unwrap();
        assert!(
            sub_agent_tool(&with)
                .unwrap()
                .unwrap()
                .entry
                .unusable_reason()
                .is_none()
        );

        let not_offered = Profile::from_json(r#"{"id":"x","tools":{"allow":[]}}"#).unwrap();
        assert!(sub_agent_tool(&not_offered).unwrap().is_none());
    }
}
