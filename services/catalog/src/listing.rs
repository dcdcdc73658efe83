//! The listing types people and agent hosts read: one tool as a UI shows it, a tool a profile
//! leaves out, the state of a source.
//!
//! A [`ToolListing`] is deliberately not the model projection: it carries what the model never
//! sees (source, usability, permission, host, policy) and no alias. It owns the JSON shape of
//! `GET /tools` (JSON Schemas as JSON, not text). It must never grow an alias or a budget of an
//! invocation.

use serde::Serialize;
use serde_json::Value;
use toolplane_core::catalog::{McpPermission, OmitReason, ToolSource};
use toolplane_core::category::Category;
use toolplane_core::descriptor::ToolAnnotations;

use crate::error::diag;

/// A machine-readable note with a human-readable explanation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnostic {
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subject: String,
}

impl Diagnostic {
    pub fn new(code: &str, message: impl Into<String>, subject: impl Into<String>) -> Self {
        Diagnostic {
            code: code.to_owned(),
            message: message.into(),
            subject: subject.into(),
        }
    }

    /// The diagnostic for a reason a tool is unusable or omitted. `subject` is the tool id or the
    /// selector; `mcp_selector` picks `mcp.tool_missing` over `catalog.tool_missing`.
    pub fn from_reason(reason: &OmitReason, subject: &str, mcp_selector: bool) -> Self {
        let code = match reason {
            OmitReason::NotCached => diag::MCP_NO_CACHE,
            OmitReason::ServerPaused => diag::MCP_SERVER_PAUSED,
            OmitReason::PermissionOff => diag::MCP_PERMISSION_OFF,
            OmitReason::NonObjectSchema { .. } => diag::INVALID_SCHEMA,
            OmitReason::RegistrationCorrupt { .. } => diag::MCP_REGISTRATION_CORRUPT,
            OmitReason::Missing if mcp_selector => diag::MCP_TOOL_MISSING,
            OmitReason::Missing => diag::TOOL_MISSING,
            OmitReason::Denied { .. }
            | OmitReason::DisabledByPlatform { .. }
            | OmitReason::NotInPlanNode => diag::POLICY_DENIED,
            OmitReason::RemovedByExitPolicy => diag::TOOL_OMITTED,
            OmitReason::NoModelEndpoint { .. } => diag::NO_MODEL_ENDPOINT,
            OmitReason::McpTaskRequired => diag::MCP_TASK_REQUIRED,
        };
        Diagnostic::new(code, reason.describe(), subject)
    }
}

/// An MCP server's administrative state, as the mcp-proxy reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpServerState {
    Active,
    Paused,
    Unknown,
}

/// Registration facts of an MCP tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct McpFacts {
    pub server_id: String,
    pub server_display_name: String,
    pub native_name: String,
    pub server_state: McpServerState,
    pub permission: McpPermission,
    /// The version of the server's cached tool list (increases when the list changes).
    pub catalog_version: u64,
}

/// Where an external (or adapter) tool is executed. Header values never appear in listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExternalFacts {
    pub host_id: String,
    pub host_display_name: String,
    pub endpoint_url: String,
}

/// The policy decision for one tool under a profile and its policy layers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyDecision {
    pub visible: bool,
    pub callable: bool,
    pub approval_required: bool,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_calls: Option<u32>,
}

/// One tool as a UI shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolListing {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub description: String,
    /// The JSON Schema of the arguments (for a tool whose schema could not be used, whatever the
    /// source sent, as JSON when it parses and as a string otherwise).
    pub input_schema: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    #[serde(skip_serializing_if = "is_default_annotations")]
    pub annotations: ToolAnnotations,
    pub source: ToolSource,
    pub category: Category,
    pub usable: bool,
    pub diagnostics: Vec<Diagnostic>,
    pub progress_aware: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpFacts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalFacts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyDecision>,
}

fn is_default_annotations(a: &ToolAnnotations) -> bool {
    *a == ToolAnnotations::default()
}

/// A tool a profile names but would not see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolOmission {
    /// The tool id, or the selector text when nothing matched it.
    pub tool_id: String,
    /// The profile entry that named it.
    pub selector: String,
    pub diagnostic: Diagnostic,
}

/// The state of one source in a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    pub source: ToolSource,
    pub available: bool,
    pub tool_count: u32,
    pub usable_tool_count: u32,
    pub refreshed_at_unix_ms: i64,
    pub diagnostics: Vec<Diagnostic>,
}
