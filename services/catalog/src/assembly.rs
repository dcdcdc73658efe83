//! One cell's catalog, assembled from its sources, with every listing prepared once.
//!
//! Owns the order of sources (builtin, MCP, external hosts, adapters, sub-agents), the
//! duplicate-id rule across them (the core catalog refuses a second contribution of an id and
//! names both sources; assembly leaves the later tool out and reports it on its source), the
//! category and progress-awareness a listing shows, and the prebuilt proto and JSON forms each
//! listing is served from. Assembly is pure: it never reads the network or the store.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use toolplane_core::builtin;
use toolplane_core::catalog::{ToolCatalog, ToolSource};
use toolplane_core::category::{self, Category};
use toolplane_core::id::ToolId;
use toolplane_core::profile::Profile;
use toolplane_proto::v1 as pb;

use crate::convert;
use crate::error::diag;
use crate::listing::{Diagnostic, SourceStatus, ToolListing};
use crate::records::HostRecord;
use crate::sources::{self, AdapterTools, SourcedTool};

/// What the catalog last knew about a cell's sources beyond their tools: whether each could be
/// read, when, and why not. Changes here never require reassembling the catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Live {
    /// An mcp-proxy address is configured.
    pub mcp_configured: bool,
    /// The last pull from the mcp-proxy succeeded.
    pub mcp_available: bool,
    pub mcp_refreshed_at_unix_ms: i64,
    pub mcp_diagnostics: Vec<Diagnostic>,
    /// When the stored registrations and profiles were last read completely.
    pub store_refreshed_at_unix_ms: i64,
    /// Why the last read of the store failed, if it did.
    pub store_diagnostics: Vec<Diagnostic>,
}

/// How many tools a source contributed to the assembled catalog, and the notes assembly made
/// about it (a duplicate id left out, a descriptor that could not be used).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceCount {
    pub source: Option<ToolSource>,
    pub tool_count: u32,
    pub usable_tool_count: u32,
    pub notes: Vec<Diagnostic>,
}

/// The state of every source: what assembly counted, plus what the last refresh saw.
pub fn statuses(counts: &[SourceCount], live: &Live) -> Vec<SourceStatus> {
    counts
        .iter()
        .filter_map(|c| {
            let source = c.source?;
            let (available, refreshed, mut diagnostics) = match source {
                ToolSource::Mcp => (
                    live.mcp_configured && live.mcp_available,
                    live.mcp_refreshed_at_unix_ms,
                    live.mcp_diagnostics.clone(),
                ),
                ToolSource::External | ToolSource::SubAgent => (
                    live.store_diagnostics.is_empty(),
                    live.store_refreshed_at_unix_ms,
                    live.store_diagnostics.clone(),
                ),
                _ => (true, 0, Vec::new()),
            };
            diagnostics.extend(c.notes.iter().cloned());
            Some(SourceStatus {
                source,
                available,
                tool_count: c.tool_count,
                usable_tool_count: c.usable_tool_count,
                refreshed_at_unix_ms: refreshed,
                diagnostics,
            })
        })
        .collect()
}

/// Everything one cell's catalog is assembled from.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub builtin: &'a [SourcedTool],
    pub mcp: &'a [SourcedTool],
    pub hosts: &'a BTreeMap<String, Arc<HostRecord>>,
    pub adapters: &'a BTreeMap<String, AdapterTools>,
    pub profiles: &'a BTreeMap<String, Arc<Profile>>,
}

/// One listed tool with its prepared forms.
#[derive(Debug, Clone)]
pub struct ListedTool {
    pub tool: SourcedTool,
    /// The listing without a profile.
    pub listing: ToolListing,
    pub proto: pb::ToolListing,
    /// `proto`'s encoded length, for the response byte budget.
    pub proto_len: usize,
    /// `listing` as JSON, for `GET /tools`.
    pub json: Vec<u8>,
    /// Lowercase id, title and description, for the query filter.
    pub search: String,
    /// The provider part of the id (`builtin`, `mcp/<uuid>`, …), for the provider filter.
    pub provider: String,
}

/// One cell's assembled catalog.
#[derive(Debug, Default)]
pub struct Assembled {
    pub catalog: ToolCatalog,
    /// In catalog order, parallel to `catalog.entries()`.
    pub tools: Vec<ListedTool>,
    index: HashMap<ToolId, usize>,
    /// Categories registrations declared: the fallback's second level.
    pub declared_categories: BTreeMap<ToolId, Category>,
    /// Tools registrations declared progress-aware.
    pub declared_progress_aware: Vec<ToolId>,
    /// One count per source: builtin, MCP, external, adapter, agent.
    pub counts: Vec<SourceCount>,
}

impl Assembled {
    pub fn get(&self, id: &ToolId) -> Option<&ListedTool> {
        self.index.get(id).map(|&i| &self.tools[i])
    }

    /// Where a tool sits in catalog order.
    pub fn position(&self, id: &ToolId) -> Option<usize> {
        self.index.get(id).copied()
    }

    /// The profile as the runtime must compile it: the categories and progress-awareness that
    /// registrations declared are added where the profile says nothing (the profile's own
    /// `extraCategories` win).
    pub fn effective_profile(&self, profile: &Profile) -> Profile {
        let mut p = profile.clone();
        for (id, c) in &self.declared_categories {
            p.tools.extra_categories.entry(id.clone()).or_insert(*c);
        }
        for id in &self.declared_progress_aware {
            if !p.tools.extra_progress_aware.contains(id) {
                p.tools.extra_progress_aware.push(id.clone());
            }
        }
        p
    }

    /// Assembles a cell's catalog.
    pub fn build(inputs: Inputs<'_>) -> Assembled {
        let mut catalog = ToolCatalog::default();
        let mut kept: Vec<SourcedTool> = Vec::new();
        let mut counts = Vec::with_capacity(5);

        let mut add = |source: ToolSource, tools: Vec<SourcedTool>, mut notes: Vec<Diagnostic>| {
            let mut count = SourceCount {
                source: Some(source),
                ..SourceCount::default()
            };
            for tool in tools {
                match catalog.push(tool.entry.clone()) {
                    Ok(()) => {
                        count.tool_count += 1;
                        if tool.entry.unusable_reason().is_none() {
                            count.usable_tool_count += 1;
                        }
                        kept.push(tool);
                    }
                    Err(e) => notes.push(Diagnostic::new(
                        diag::DUPLICATE_ID,
                        e.message,
                        tool.id().to_string(),
                    )),
                }
            }
            count.notes = notes;
            counts.push(count);
        };

        add(ToolSource::Builtin, inputs.builtin.to_vec(), Vec::new());
        add(ToolSource::Mcp, inputs.mcp.to_vec(), Vec::new());

        let (mut tools, mut notes) = (Vec::new(), Vec::new());
        for host in inputs.hosts.values() {
            match sources::host_tools(host) {
                Ok(t) => tools.extend(t),
                Err(e) => notes.push(Diagnostic::new(
                    diag::INVALID_DESCRIPTOR,
                    e.to_string(),
                    format!("ext/{}", host.host_id),
                )),
            }
        }
        add(ToolSource::External, tools, notes);

        let (mut tools, mut notes) = (Vec::new(), Vec::new());
        for adapter in inputs.adapters.values() {
            match sources::adapter_tools(adapter) {
                Ok(t) => tools.extend(t),
                Err(e) => notes.push(Diagnostic::new(
                    diag::INVALID_DESCRIPTOR,
                    e.to_string(),
                    format!("ext/{}", adapter.adapter),
                )),
            }
        }
        add(ToolSource::Adapter, tools, notes);

        let (mut tools, mut notes) = (Vec::new(), Vec::new());
        for profile in inputs.profiles.values() {
            match sources::sub_agent_tool(profile) {
                Ok(Some(tool)) => tools.push(tool),
                Ok(None) => {}
                Err(e) => notes.push(Diagnostic::new(
                    diag::INVALID_DESCRIPTOR,
                    e.to_string(),
                    format!("agent/{}", profile.id),
                )),
            }
        }
        add(ToolSource::SubAgent, tools, notes);

        let declared_categories = sources::declared_categories(&kept);
        let declared_progress_aware: Vec<ToolId> = kept
            .iter()
            .filter(|t| t.declared_progress_aware)
            .map(|t| t.id().clone())
            .collect();
        let mut index = HashMap::with_capacity(kept.len());
        let tools: Vec<ListedTool> = kept
            .into_iter()
            .enumerate()
            .map(|(i, tool)| {
                index.insert(tool.id().clone(), i);
                prepare(tool, &declared_categories)
            })
            .collect();
        Assembled {
            catalog,
            tools,
            index,
            declared_categories,
            declared_progress_aware,
            counts,
        }
    }
}

/// The listing of a tool without a profile: category through the four-level fallback (builtin
/// map, declared category, `readOnlyHint`, action), usability and its reason first among the
/// diagnostics.
pub fn listing_of(tool: &SourcedTool, extra: &BTreeMap<ToolId, Category>) -> ToolListing {
    let id = tool.id();
    let (title, description, input_schema, output_schema, annotations) =
        match (tool.entry.descriptor(), &tool.raw) {
            (Some(d), _) => (
                d.title().map(str::to_owned),
                d.description().to_owned(),
                d.input_schema().clone(),
                d.output_schema().cloned(),
                d.annotations().clone(),
            ),
            (None, Some(raw)) => (
                raw.title.clone(),
                raw.description.clone(),
                raw.input_schema.clone(),
                raw.output_schema.clone(),
                raw.annotations.clone(),
            ),
            (None, None) => (
                None,
                String::new(),
                serde_json::Value::Null,
                None,
                Default::default(),
            ),
        };
    let mut diagnostics = Vec::with_capacity(tool.notes.len() + 1);
    if let Some(reason) = tool.entry.unusable_reason() {
        diagnostics.push(Diagnostic::from_reason(reason, &id.to_string(), false));
    }
    for note in &tool.notes {
        if !diagnostics.iter().any(|d| d.code == note.code) {
            diagnostics.push(note.clone());
        }
    }
    ToolListing {
        id: id.to_string(),
        title,
        description,
        category: category::resolve(id, &annotations, extra),
        input_schema,
        output_schema,
        annotations,
        source: tool.entry.source(),
        usable: tool.entry.unusable_reason().is_none(),
        diagnostics,
        progress_aware: builtin::is_progress_aware(id) || tool.declared_progress_aware,
        mcp: tool.mcp.clone(),
        external: tool.external.clone(),
        policy: None,
    }
}

fn prepare(tool: SourcedTool, extra: &BTreeMap<ToolId, Category>) -> ListedTool {
    let listing = listing_of(&tool, extra);
    let proto = convert::listing_to_proto(&listing, None);
    let proto_len = prost_len(&proto);
    // Serialising a listing of JSON values cannot fail; an empty object keeps the array valid.
    let json = serde_json::to_vec(&listing).unwrap_or_else(|_| b"{}".to_vec());
    let search = format!(
        "{}\n{}\n{}",
        listing.id,
        listing.title.as_deref().unwrap_or(""),
        listing.description
    )
    .to_lowercase();
    let provider = tool.id().provider().to_string();
    ListedTool {
        tool,
        listing,
        proto,
        proto_len,
        json,
        search,
        provider,
    }
}

fn prost_len(m: &pb::ToolListing) -> usize {
    use prost::Message;
    m.encoded_len()
}
