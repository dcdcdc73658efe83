//! Proto ↔ domain conversion, in one place (the only module besides [`crate::grpc`] that knows
//! protobuf). Decoding refuses unset enums where a value is required; encoding never loses a
//! fact a listing promises (state, permission, usability, diagnostics).

use std::collections::BTreeMap;

use toolplane_core::ErrorClass;
use toolplane_core::catalog::McpPermission;
use toolplane_proto::v1 as pb;

use crate::catalog::{CachedTool, Note};
use crate::error::{MCP_INVALID_REGISTRATION, MCP_INVALID_REQUEST, ProxyError};
use crate::execute::{CallOutput, Outcome};
use crate::proxy::{ConnStatus, ServerView, ToolView};
use crate::registration::{REDACTED, RequestedLimits, ServerState, TransportSpec};

pub fn permission_from(p: i32) -> Result<Option<McpPermission>, ProxyError> {
    match pb::McpToolPermission::try_from(p) {
        Ok(pb::McpToolPermission::Unspecified) => Ok(None),
        Ok(pb::McpToolPermission::Off) => Ok(Some(McpPermission::Off)),
        Ok(pb::McpToolPermission::Ask) => Ok(Some(McpPermission::Ask)),
        Ok(pb::McpToolPermission::Allow) => Ok(Some(McpPermission::Allow)),
        Err(_) => Err(ProxyError::new(
            MCP_INVALID_REQUEST,
            format!("unknown permission {p}"),
        )),
    }
}

pub fn permission_to(p: McpPermission) -> pb::McpToolPermission {
    match p {
        McpPermission::Off => pb::McpToolPermission::Off,
        McpPermission::Ask => pb::McpToolPermission::Ask,
        McpPermission::Allow => pb::McpToolPermission::Allow,
    }
}

pub fn state_from(s: i32) -> Result<Option<ServerState>, ProxyError> {
    match pb::McpServerState::try_from(s) {
        Ok(pb::McpServerState::Unspecified) => Ok(None),
        Ok(pb::McpServerState::Active) => Ok(Some(ServerState::Active)),
        Ok(pb::McpServerState::Paused) => Ok(Some(ServerState::Paused)),
        Err(_) => Err(ProxyError::new(
            MCP_INVALID_REQUEST,
            format!("unknown server state {s}"),
        )),
    }
}

pub fn state_to(s: ServerState) -> pb::McpServerState {
    match s {
        ServerState::Active => pb::McpServerState::Active,
        ServerState::Paused => pb::McpServerState::Paused,
    }
}

pub fn transport_from(t: Option<pb::McpTransport>) -> Result<Option<TransportSpec>, ProxyError> {
    let Some(t) = t else { return Ok(None) };
    match t.kind {
        None => Err(ProxyError::new(
            MCP_INVALID_REGISTRATION,
            "transport has neither stdio nor streamable_http set",
        )),
        Some(pb::mcp_transport::Kind::Stdio(s)) => Ok(Some(TransportSpec::Stdio {
            command: s.command,
            args: s.args,
            env: s.env.into_iter().collect(),
            inherit_env: s.inherit_env,
            cwd: (!s.cwd.is_empty()).then_some(s.cwd),
        })),
        Some(pb::mcp_transport::Kind::StreamableHttp(h)) => {
            Ok(Some(TransportSpec::StreamableHttp {
                url: h.url,
                headers: h.headers.into_iter().collect(),
                header_env: h.header_env.into_iter().collect(),
            }))
        }
    }
}

/// A registration's transport as answers show it: inline `env` values and `headers` values are
/// write-only, so their names come back with [`REDACTED`] as the value (`header_env` and
/// `inherit_env` name variables, not secrets, and come back as written).
pub fn transport_to(t: &TransportSpec) -> pb::McpTransport {
    let redacted =
        |m: &BTreeMap<String, String>| m.keys().map(|k| (k.clone(), REDACTED.to_owned())).collect();
    let kind = match t {
        TransportSpec::Stdio {
            command,
            args,
            env,
            inherit_env,
            cwd,
        } => pb::mcp_transport::Kind::Stdio(pb::McpStdioTransport {
            command: command.clone(),
            args: args.clone(),
            env: redacted(env),
            inherit_env: inherit_env.clone(),
            cwd: cwd.clone().unwrap_or_default(),
        }),
        TransportSpec::StreamableHttp {
            url,
            headers,
            header_env,
        } => pb::mcp_transport::Kind::StreamableHttp(pb::McpStreamableHttpTransport {
            url: url.clone(),
            headers: redacted(headers),
            header_env: header_env.clone().into_iter().collect(),
        }),
    };
    pb::McpTransport { kind: Some(kind) }
}

pub fn limits_from(l: Option<pb::McpServerLimits>) -> Option<RequestedLimits> {
    l.map(|l| RequestedLimits {
        connect_timeout_ms: l.connect_timeout_ms,
        call_timeout_ms: l.call_timeout_ms,
        max_concurrent_calls: l.max_concurrent_calls,
        max_tools: l.max_tools,
        max_response_bytes: l.max_response_bytes,
    })
}

pub fn tool_permissions_from(
    m: std::collections::HashMap<String, i32>,
) -> Result<BTreeMap<String, McpPermission>, ProxyError> {
    let mut out = BTreeMap::new();
    for (name, p) in m {
        if let Some(p) = permission_from(p)? {
            out.insert(name, p);
        }
    }
    Ok(out)
}

pub fn server_to(v: &ServerView) -> pb::McpServer {
    pb::McpServer {
        cell_id: v.reg.cell_id.clone(),
        server_id: v.reg.server_id.clone(),
        display_name: v.reg.display_name.clone(),
        transport: Some(transport_to(&v.reg.transport)),
        state: state_to(v.reg.state).into(),
        // Effective limits: what the server actually runs under.
        limits: Some(pb::McpServerLimits {
            connect_timeout_ms: u64::try_from(v.limits.connect_timeout.as_millis())
                .unwrap_or(u64::MAX),
            call_timeout_ms: u64::try_from(v.limits.call_timeout.as_millis()).unwrap_or(u64::MAX),
            max_concurrent_calls: v.limits.max_concurrent_calls,
            max_tools: v.limits.max_tools,
            max_response_bytes: v.limits.max_response_bytes,
        }),
        default_permission: permission_to(v.reg.default_permission).into(),
        connection: match v.connection {
            ConnStatus::Disconnected => pb::McpConnectionStatus::Disconnected,
            ConnStatus::Connecting => pb::McpConnectionStatus::Connecting,
            ConnStatus::Connected => pb::McpConnectionStatus::Connected,
            ConnStatus::Failed => pb::McpConnectionStatus::Failed,
        }
        .into(),
        last_error: v.last_error.clone(),
        cached_tool_count: v.cached_tool_count,
        refreshed_at_unix_ms: v.refreshed_at_unix_ms,
        generation: v.reg.generation,
        catalog_version: v.catalog_version,
        created_at_unix_ms: v.reg.created_at_unix_ms,
        updated_at_unix_ms: v.reg.updated_at_unix_ms,
    }
}

pub fn note_to(n: &Note) -> pb::Diagnostic {
    pb::Diagnostic {
        code: n.code.clone(),
        message: n.message.clone(),
        subject: n.subject.clone(),
    }
}

fn descriptor_to(server_id: &str, t: &CachedTool) -> pb::ToolDescriptor {
    let a = &t.annotations;
    let has_hints = a.read_only_hint.is_some()
        || a.destructive_hint.is_some()
        || a.idempotent_hint.is_some()
        || a.open_world_hint.is_some();
    pb::ToolDescriptor {
        id: format!("mcp/{server_id}:{}", t.name),
        title: t.title.clone(),
        description: t.description.clone().unwrap_or_default(),
        input_schema_json: t.input_schema.to_string(),
        output_schema_json: t.output_schema.as_ref().map(ToString::to_string),
        annotations: has_hints.then_some(pb::ToolAnnotations {
            read_only_hint: a.read_only_hint,
            destructive_hint: a.destructive_hint,
            idempotent_hint: a.idempotent_hint,
            open_world_hint: a.open_world_hint,
        }),
    }
}

pub fn tool_to(v: &ToolView) -> pb::McpCachedTool {
    pb::McpCachedTool {
        descriptor: v.tool.as_ref().map(|t| descriptor_to(&v.reg.server_id, t)),
        status: Some(pb::McpToolStatus {
            server_id: v.reg.server_id.clone(),
            server_display_name: v.reg.display_name.clone(),
            native_name: v.native.clone(),
            server_state: state_to(v.reg.state).into(),
            permission: permission_to(v.usability.permission).into(),
            catalog_version: v.catalog_version,
        }),
        usable: v.usable(),
        diagnostics: v.usability.notes.iter().map(note_to).collect(),
    }
}

fn class_to(c: ErrorClass) -> pb::ErrorClass {
    match c {
        ErrorClass::Recoverable => pb::ErrorClass::Recoverable,
        ErrorClass::PolicyDenied => pb::ErrorClass::PolicyDenied,
        ErrorClass::System => pb::ErrorClass::System,
        ErrorClass::ProviderContract => pb::ErrorClass::ProviderContract,
        ErrorClass::InvalidInput => pb::ErrorClass::InvalidInput,
    }
}

pub fn execute_to(
    call_id: String,
    tool_id: String,
    out: CallOutput,
    trace: bool,
) -> pb::ExecuteResponse {
    pb::ExecuteResponse {
        result: Some(pb::ToolResult {
            call_id,
            tool_id,
            content: out.content,
            structured_json: out.structured.map(|v| v.to_string()),
            is_error: out.is_error,
            error_code: out.error_code.map(str::to_owned),
            resource_refs: Vec::new(),
            error_class: out
                .error_class
                .map_or(pb::ErrorClass::Unspecified, class_to)
                .into(),
        }),
        outcome: match out.outcome {
            Outcome::Known => pb::ExecutionOutcome::Known,
            Outcome::NotSent => pb::ExecutionOutcome::NotSent,
            Outcome::Unknown => pb::ExecutionOutcome::Unknown,
        }
        .into(),
        elapsed_ms: u64::try_from(out.elapsed.as_millis()).unwrap_or(u64::MAX),
        raw_result_json: out.raw_result_json,
        trace: if trace {
            out.trace
                .into_iter()
                .map(|s| pb::ExecutionTraceStep {
                    name: s.name.to_owned(),
                    start_offset_us: s.start_us,
                    duration_us: s.duration_us,
                    detail: s.detail,
                })
                .collect()
        } else {
            Vec::new()
        },
    }
}
