//! The cached tool catalog of one registration: what discovery found, as stored
//! on disk and held in memory, and whether each tool is usable right now.
//!
//! [`CatalogBuilder`] turns the pages of `tools/list` into a [`LiveCatalog`], dropping tools
//! whose names cannot form a tool id or repeat an earlier name and stopping at the registration's
//! tool-count and byte limits, each with a diagnostic. A [`LiveCatalog`] is the stored
//! [`CachedCatalog`] plus what can be decided once per discovery: an index by name and each tool's
//! descriptor verdict (the core's own validation, so the proxy and the snapshot compiler agree).
//! [`usability`] combines that verdict with the registration's current state and permission to
//! say whether a tool can be offered and why not. This module does no IO.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolplane_core::catalog::{McpPermission, OmitReason};
use toolplane_core::descriptor::{ToolAnnotations, ToolDescriptor};
use toolplane_core::id::{Provider, ToolId};

use crate::error::{
    MCP_CATALOG_TRUNCATED, MCP_INVALID_TOOL, MCP_PERMISSION_ASK, MCP_PERMISSION_OFF,
    MCP_SERVER_PAUSED, MCP_TASK_REQUIRED, ProxyCode,
};
use crate::registration::{Registration, ServerState, shown};

/// Format version of the stored catalog; a stored catalog of another version is ignored (and
/// re-discovered) instead of misread.
pub const CATALOG_FORMAT: u32 = 1;
/// Most `tools/list` pages followed in one discovery (a server whose cursor never ends stops here).
pub const MAX_PAGES: usize = 1_000;

/// A machine-readable note: code, message, subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    pub code: String,
    pub message: String,
    #[serde(default)]
    pub subject: String,
}

impl Note {
    pub fn new(code: &str, message: impl Into<String>, subject: impl Into<String>) -> Note {
        Note {
            code: code.to_owned(),
            message: message.into(),
            subject: subject.into(),
        }
    }

    fn of(code: ProxyCode, message: impl Into<String>, subject: impl Into<String>) -> Note {
        Note::new(code.code, message, subject)
    }
}

/// One discovered tool, as the server described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedTool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    #[serde(default)]
    pub annotations: ToolAnnotations,
    /// The server's `execution.taskSupport` for the tool (`forbidden`, `optional`, `required`),
    /// when it declares one. A `required` tool runs only as an MCP task and is unusable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_support: Option<String>,
}

impl CachedTool {
    /// The server runs this tool only as an MCP task.
    pub fn task_required(&self) -> bool {
        self.task_support.as_deref() == Some("required")
    }
}

/// The cached catalog of one registration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedCatalog {
    pub format: u32,
    /// Increases by one each time a discovery finds a tool list different from the one before
    /// (names, schemas, descriptions, annotations); a discovery that finds the same list keeps
    /// it. 0 only in catalogs stored before versions were kept.
    #[serde(default)]
    pub version: u64,
    pub refreshed_at_unix_ms: i64,
    /// Tools in the server's listing order, names unique.
    pub tools: Vec<CachedTool>,
    /// Findings of the discovery that produced this catalog.
    #[serde(default)]
    pub warnings: Vec<Note>,
}

/// Why the core refuses a cached tool's descriptor. It depends only on the tool and the server
/// id, never on the registration's state or permissions, so it is decided once per catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorIssue {
    /// The core's code (`tool.invalid_schema`, `tool.invalid_descriptor`).
    pub code: String,
    pub message: String,
}

/// A cached catalog as the proxy holds it in memory: the stored [`CachedCatalog`], an index by
/// tool name and each tool's descriptor verdict. Built once when discovery finishes or the store
/// is read, so calls and listings look tools up without scanning and never rebuild descriptors.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveCatalog {
    stored: CachedCatalog,
    by_name: HashMap<String, usize>,
    /// Per tool, in `stored.tools` order.
    issues: Vec<Option<DescriptorIssue>>,
}

/// One cached tool with its descriptor verdict.
#[derive(Debug, Clone, Copy)]
pub struct ToolEntry<'a> {
    pub tool: &'a CachedTool,
    /// `Some` when the core would refuse the tool's descriptor.
    pub issue: Option<&'a DescriptorIssue>,
}

impl LiveCatalog {
    /// Indexes a catalog and judges every tool's descriptor. A name listed twice (only possible
    /// in a hand-edited store) resolves to its first entry, as discovery would have kept it.
    pub fn new(server_id: &str, stored: CachedCatalog) -> LiveCatalog {
        let mut by_name = HashMap::with_capacity(stored.tools.len());
        for (i, tool) in stored.tools.iter().enumerate() {
            by_name.entry(tool.name.clone()).or_insert(i);
        }
        let issues = stored
            .tools
            .iter()
            .map(|tool| {
                descriptor_of(server_id, tool)
                    .err()
                    .map(|e| DescriptorIssue {
                        code: e.code.as_str().to_owned(),
                        message: e.message,
                    })
            })
            .collect();
        LiveCatalog {
            stored,
            by_name,
            issues,
        }
    }

    /// The catalog as stored.
    pub fn stored(&self) -> &CachedCatalog {
        &self.stored
    }

    pub fn len(&self) -> usize {
        self.stored.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stored.tools.is_empty()
    }

    pub fn refreshed_at_unix_ms(&self) -> i64 {
        self.stored.refreshed_at_unix_ms
    }

    /// The catalog's version (see [`CachedCatalog::version`]).
    pub fn version(&self) -> u64 {
        self.stored.version
    }

    /// This catalog, freshly discovered, versioned against the one it replaces: the same version
    /// when the tools are unchanged, the next one when they differ.
    pub fn versioned_after(mut self, previous: Option<&LiveCatalog>) -> LiveCatalog {
        self.stored.version = match previous {
            Some(old) if old.stored.tools == self.stored.tools => old.stored.version,
            Some(old) => old.stored.version + 1,
            None => 1,
        };
        self
    }

    pub fn warnings(&self) -> &[Note] {
        &self.stored.warnings
    }

    /// The tool named `name`, if cached.
    pub fn get(&self, name: &str) -> Option<ToolEntry<'_>> {
        let i = *self.by_name.get(name)?;
        self.entry(i)
    }

    fn entry(&self, i: usize) -> Option<ToolEntry<'_>> {
        Some(ToolEntry {
            tool: self.stored.tools.get(i)?,
            issue: self.issues.get(i).and_then(Option::as_ref),
        })
    }

    /// Every tool in the server's listing order.
    pub fn entries(&self) -> impl Iterator<Item = ToolEntry<'_>> {
        (0..self.stored.tools.len()).filter_map(|i| self.entry(i))
    }

    pub fn tools(&self) -> &[CachedTool] {
        &self.stored.tools
    }
}

/// Accumulates `tools/list` pages into a catalog under the registration's limits.
#[derive(Debug)]
pub struct CatalogBuilder {
    server_id: String,
    max_tools: usize,
    max_bytes: u64,
    bytes: u64,
    tools: Vec<CachedTool>,
    names: std::collections::HashSet<String>,
    warnings: Vec<Note>,
    full: bool,
}

impl CatalogBuilder {
    pub fn new(server_id: &str, max_tools: u32, max_bytes: u64) -> CatalogBuilder {
        CatalogBuilder {
            server_id: server_id.to_owned(),
            max_tools: usize::try_from(max_tools).unwrap_or(usize::MAX),
            max_bytes,
            bytes: 0,
            tools: Vec::new(),
            names: std::collections::HashSet::new(),
            warnings: Vec::new(),
            full: false,
        }
    }

    /// Whether a limit was reached: the caller stops asking for pages.
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// Adds one tool as the server listed it (its JSON form).
    pub fn add(&mut self, tool: &Value) {
        if self.full {
            return;
        }
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        let id = match ToolId::new(Provider::Mcp(self.server_id.clone()), name) {
            Ok(id) => id,
            Err(e) => {
                self.warnings.push(Note::of(
                    MCP_INVALID_TOOL,
                    format!("tool `{}` left out: {}", shown(name), e.message),
                    shown(name),
                ));
                return;
            }
        };
        if self.names.contains(name) {
            self.warnings.push(Note::of(
                MCP_INVALID_TOOL,
                format!(
                    "tool `{}` is listed more than once; the first one is kept",
                    shown(name)
                ),
                id.to_string(),
            ));
            return;
        }
        if self.tools.len() >= self.max_tools {
            self.full = true;
            self.warnings.push(Note::of(
                MCP_CATALOG_TRUNCATED,
                format!(
                    "the server lists more than {} tools; only the first {} are cached",
                    self.max_tools, self.max_tools
                ),
                String::new(),
            ));
            return;
        }
        let size = serde_json::to_vec(tool).map(|v| v.len()).unwrap_or(0) as u64;
        if self.bytes.saturating_add(size) > self.max_bytes {
            self.full = true;
            self.warnings.push(Note::of(
                MCP_CATALOG_TRUNCATED,
                format!(
                    "the tool list is over {} bytes; {} tools are cached",
                    self.max_bytes,
                    self.tools.len()
                ),
                String::new(),
            ));
            return;
        }
        self.bytes += size;
        let text = |key: &str| tool.get(key).and_then(Value::as_str).map(str::to_owned);
        let annotations = tool.get("annotations");
        let hint = |key: &str| {
            annotations
                .and_then(|a| a.get(key))
                .and_then(Value::as_bool)
        };
        self.names.insert(name.to_owned());
        self.tools.push(CachedTool {
            name: name.to_owned(),
            title: text("title").or_else(|| {
                annotations
                    .and_then(|a| a.get("title"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            }),
            description: text("description"),
            input_schema: tool.get("inputSchema").cloned().unwrap_or(Value::Null),
            output_schema: tool.get("outputSchema").cloned(),
            annotations: ToolAnnotations {
                read_only_hint: hint("readOnlyHint"),
                destructive_hint: hint("destructiveHint"),
                idempotent_hint: hint("idempotentHint"),
                open_world_hint: hint("openWorldHint"),
            },
            task_support: tool
                .get("execution")
                .and_then(|e| e.get("taskSupport"))
                .and_then(Value::as_str)
                .map(str::to_owned),
        });
    }

    /// Records that pagination stopped at [`MAX_PAGES`].
    pub fn pages_exhausted(&mut self) {
        self.full = true;
        self.warnings.push(Note::of(
            MCP_CATALOG_TRUNCATED,
            format!("the tool list has more than {MAX_PAGES} pages; discovery stopped there"),
            String::new(),
        ));
    }

    pub fn finish(self, refreshed_at_unix_ms: i64) -> LiveCatalog {
        let stored = CachedCatalog {
            format: CATALOG_FORMAT,
            version: 0,
            refreshed_at_unix_ms,
            tools: self.tools,
            warnings: self.warnings,
        };
        let mut live = LiveCatalog::new(&self.server_id, stored);
        // Tools the core would refuse are kept (the listing shows why they are unusable), but the
        // discovery reports them once as warnings too.
        let found: Vec<Note> = live
            .entries()
            .filter_map(|e| {
                e.issue.map(|issue| {
                    Note::new(
                        &issue.code,
                        issue.message.clone(),
                        format!("mcp/{}:{}", self.server_id, e.tool.name),
                    )
                })
            })
            .collect();
        live.stored.warnings.extend(found);
        live
    }
}

/// The core descriptor of a cached tool; fails (with the core's code) when the core would not
/// accept it (non-object input schema, schema or description over the limits).
pub fn descriptor_of(
    server_id: &str,
    tool: &CachedTool,
) -> Result<ToolDescriptor, toolplane_core::CoreError> {
    let id = ToolId::new(Provider::Mcp(server_id.to_owned()), &tool.name)?;
    ToolDescriptor::new(
        id,
        tool.description.clone().unwrap_or_default(),
        tool.input_schema.clone(),
    )?
    .with_title(tool.title.clone())?
    .with_output_schema(tool.output_schema.clone())
    .map(|d| d.with_annotations(tool.annotations.clone()))
}

/// Whether a cached tool can be used now, with the notes a listing shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Usability {
    pub permission: McpPermission,
    /// The first reason the tool is unusable; `None` when usable.
    pub omit: Option<OmitReason>,
    /// Why it is unusable, and notes for usable tools (ASK runs like ALLOW).
    pub notes: Vec<Note>,
}

impl Usability {
    pub fn usable(&self) -> bool {
        self.omit.is_none()
    }
}

/// Decides a cached tool's usability from the registration's current facts: the server must be
/// active, the permission not off, and the descriptor acceptable to the core (judged when the
/// catalog was built).
pub fn usability(reg: &Registration, entry: ToolEntry<'_>) -> Usability {
    let tool = entry.tool;
    let subject = format!("mcp/{}:{}", reg.server_id, tool.name);
    let permission = reg.permission_of(&tool.name);
    let mut notes = Vec::new();
    let mut omit = None;
    if reg.state == ServerState::Paused {
        notes.push(Note::of(
            MCP_SERVER_PAUSED,
            format!(
                "{}: {}",
                reg.display_name,
                OmitReason::ServerPaused.describe()
            ),
            subject.clone(),
        ));
        omit = Some(OmitReason::ServerPaused);
    }
    match permission {
        McpPermission::Off => {
            notes.push(Note::of(
                MCP_PERMISSION_OFF,
                OmitReason::PermissionOff.describe(),
                subject.clone(),
            ));
            omit = omit.or(Some(OmitReason::PermissionOff));
        }
        McpPermission::Ask => notes.push(Note::of(
            MCP_PERMISSION_ASK,
            "permission is ask: the runtime holds each call for approval",
            subject.clone(),
        )),
        McpPermission::Allow => {}
    }
    if let Some(issue) = entry.issue {
        let reason = OmitReason::NonObjectSchema {
            detail: issue.message.clone(),
        };
        notes.push(Note::new(
            &issue.code,
            issue.message.clone(),
            subject.clone(),
        ));
        omit = omit.or(Some(reason));
    }
    if tool.task_required() {
        notes.push(Note::of(
            MCP_TASK_REQUIRED,
            OmitReason::McpTaskRequired.describe(),
            subject,
        ));
        omit = omit.or(Some(OmitReason::McpTaskRequired));
    }
    Usability {
        permission,
        omit,
        notes,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::registration::{RequestedLimits, TransportSpec};

    const ID: &str = "6f1c2a0e-3b1d-4c5e-9f00-0123456789ab";

    fn reg(state: ServerState, default: McpPermission) -> Registration {
        Registration {
            format: 1,
            cell_id: "default".into(),
            server_id: ID.into(),
            display_name: "fx".into(),
            transport: TransportSpec::StreamableHttp {
                url: "http://x".into(),
                headers: BTreeMap::new(),
                header_env: BTreeMap::new(),
            },
            state,
            limits: RequestedLimits::default(),
            default_permission: default,
            tool_permissions: BTreeMap::from([("ask_me".to_owned(), McpPermission::Ask)]),
            generation: 1,
            created_at_unix_ms: 0,
            updated_at_unix_ms: 0,
        }
    }

    fn tool(name: &str, schema: Value) -> Value {
        json!({"name": name, "description": "d", "inputSchema": schema})
    }

    #[test]
    fn builder_drops_bad_names_and_duplicates_and_keeps_order() {
        let mut b = CatalogBuilder::new(ID, 100, 1 << 20);
        for t in [
            tool("b", json!({"type": "object"})),
            tool("bad name", json!({"type": "object"})),
            tool("", json!({"type": "object"})),
            tool("a", json!({"type": "array"})),
            tool("b", json!({"type": "object"})),
            tool(&"x".repeat(129), json!({"type": "object"})),
        ] {
            b.add(&t);
        }
        let c = b.finish(7);
        let names: Vec<_> = c.tools().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(c.get("a").unwrap().tool.name, "a");
        assert!(c.get("a").unwrap().issue.is_some());
        assert!(c.get("b").unwrap().issue.is_none());
        assert!(c.get("bad name").is_none());
        let codes: Vec<_> = c.warnings().iter().map(|w| w.code.as_str()).collect();
        assert_eq!(
            codes,
            [
                "mcp.invalid_tool",
                "mcp.invalid_tool",
                "mcp.invalid_tool",
                "mcp.invalid_tool",
                "tool.invalid_schema"
            ]
        );
    }

    #[test]
    fn builder_stops_at_the_limits() {
        let mut b = CatalogBuilder::new(ID, 3, 1 << 20);
        for i in 0..10 {
            b.add(&tool(&format!("t{i}"), json!({"type": "object"})));
        }
        assert!(b.is_full());
        let c = b.finish(0);
        assert_eq!(c.len(), 3);
        assert_eq!(c.warnings().len(), 1);
        assert_eq!(c.warnings()[0].code, "mcp.catalog_truncated");

        let mut b = CatalogBuilder::new(ID, 100, 200);
        for i in 0..10 {
            b.add(&tool(&format!("t{i}"), json!({"type": "object"})));
        }
        assert!(b.is_full());
        assert!(b.finish(0).len() < 10);
    }

    #[test]
    fn a_stored_catalog_is_indexed_and_judged_like_a_discovered_one() {
        let mut b = CatalogBuilder::new(ID, 10, 1 << 20);
        b.add(&tool("ok", json!({"type": "object"})));
        b.add(&tool("arr", json!({"type": "array"})));
        let discovered = b.finish(3);
        // What the store holds, read back: same tools, same verdicts, same lookups.
        let bytes = serde_json::to_vec(discovered.stored()).unwrap();
        let loaded = LiveCatalog::new(ID, serde_json::from_slice(&bytes).unwrap());
        assert_eq!(loaded, discovered);
        assert_eq!(
            loaded.get("arr").unwrap().issue.unwrap().code,
            "tool.invalid_schema"
        );

        // A hand-edited store listing a name twice: the first entry wins, as in discovery.
        let mut stored = loaded.stored().clone();
        let mut second = stored.tools[0].clone();
        second.description = Some("second".into());
        stored.tools.push(second);
        let live = LiveCatalog::new(ID, stored);
        assert_eq!(
            live.get("ok").unwrap().tool.description.as_deref(),
            Some("d")
        );
        assert_eq!(live.entries().count(), 3);
    }

    #[test]
    fn usability_reasons() {
        let mut b = CatalogBuilder::new(ID, 10, 1 << 20);
        b.add(&tool("ok", json!({"type": "object"})));
        b.add(&tool("ask_me", json!({"type": "object"})));
        b.add(&tool("arr", json!({"type": "array"})));
        let c = b.finish(0);
        let active = reg(ServerState::Active, McpPermission::Allow);
        assert!(usability(&active, c.get("ok").unwrap()).usable());
        let ask = usability(&active, c.get("ask_me").unwrap());
        assert!(ask.usable());
        assert_eq!(ask.notes[0].code, "mcp.permission_ask");
        let arr = usability(&active, c.get("arr").unwrap());
        assert!(!arr.usable());
        assert_eq!(arr.notes[0].code, "tool.invalid_schema");

        let mut b = CatalogBuilder::new(ID, 10, 1 << 20);
        let mut task = tool("research", json!({"type": "object"}));
        task["execution"] = json!({"taskSupport": "required"});
        b.add(&task);
        let mut optional = tool("maybe", json!({"type": "object"}));
        optional["execution"] = json!({"taskSupport": "optional"});
        b.add(&optional);
        let t = b.finish(0);
        let research = usability(&active, t.get("research").unwrap());
        assert_eq!(research.omit, Some(OmitReason::McpTaskRequired));
        assert_eq!(research.notes[0].code, "mcp.task_required");
        assert!(usability(&active, t.get("maybe").unwrap()).usable());

        let paused = reg(ServerState::Paused, McpPermission::Off);
        let u = usability(&paused, c.get("ok").unwrap());
        assert_eq!(u.omit, Some(OmitReason::ServerPaused));
        let codes: Vec<_> = u.notes.iter().map(|n| n.code.as_str()).collect();
        assert_eq!(codes, ["mcp.server_paused", "mcp.permission_off"]);
    }
}
