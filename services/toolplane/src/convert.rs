//! Proto messages as the CLI shows them: the lowercase names of enums, and the JSON objects
//! `--json` prints (camelCase, like the catalog's HTTP listings and the journal). This is the
//! CLI's one place that reads generated types field by field; it never decides anything.

use serde_json::{Map, Value, json};
use toolplane_proto::v1 as pb;

pub fn source_name(v: i32) -> &'static str {
    match pb::ToolSource::try_from(v) {
        Ok(pb::ToolSource::Builtin) => "builtin",
        Ok(pb::ToolSource::Mcp) => "mcp",
        Ok(pb::ToolSource::External) => "external",
        Ok(pb::ToolSource::Agent) => "sub_agent",
        Ok(pb::ToolSource::Run) => "run_spec",
        Ok(pb::ToolSource::Adapter) => "adapter",
        _ => "unknown",
    }
}

/// `--source` values, with the catalog HTTP API's aliases.
pub fn parse_source(s: &str) -> Option<pb::ToolSource> {
    Some(match s {
        "builtin" => pb::ToolSource::Builtin,
        "mcp" => pb::ToolSource::Mcp,
        "external" => pb::ToolSource::External,
        "agent" | "sub_agent" => pb::ToolSource::Agent,
        "run" | "run_spec" => pb::ToolSource::Run,
        "adapter" => pb::ToolSource::Adapter,
        _ => return None,
    })
}

pub fn category_name(v: i32) -> &'static str {
    match pb::ToolCategory::try_from(v) {
        Ok(pb::ToolCategory::Exploration) => "exploration",
        Ok(pb::ToolCategory::Action) => "action",
        _ => "unspecified",
    }
}

pub fn run_status_name(v: i32) -> &'static str {
    match pb::RunStatus::try_from(v) {
        Ok(pb::RunStatus::Created) => "created",
        Ok(pb::RunStatus::Running) => "running",
        Ok(pb::RunStatus::Completed) => "completed",
        Ok(pb::RunStatus::PartialSuccess) => "partial_success",
        Ok(pb::RunStatus::Failed) => "failed",
        Ok(pb::RunStatus::Cancelling) => "cancelling",
        Ok(pb::RunStatus::Cancelled) => "cancelled",
        _ => "unknown",
    }
}

/// Whether a run in this status will change no more.
pub fn run_is_terminal(v: i32) -> bool {
    matches!(
        pb::RunStatus::try_from(v),
        Ok(pb::RunStatus::Completed
            | pb::RunStatus::PartialSuccess
            | pb::RunStatus::Failed
            | pb::RunStatus::Cancelled)
    )
}

pub fn mode_name(v: i32) -> &'static str {
    match pb::RunMode::try_from(v) {
        Ok(pb::RunMode::Background) => "background",
        _ => "foreground",
    }
}

pub fn driver_name(v: i32) -> &'static str {
    match pb::RunDriver::try_from(v) {
        Ok(pb::RunDriver::Host) => "host",
        Ok(pb::RunDriver::Runtime) => "runtime",
        _ => "unknown",
    }
}

pub fn server_state_name(v: i32) -> &'static str {
    match pb::McpServerState::try_from(v) {
        Ok(pb::McpServerState::Active) => "active",
        Ok(pb::McpServerState::Paused) => "paused",
        _ => "unknown",
    }
}

pub fn permission_name(v: i32) -> &'static str {
    match pb::McpToolPermission::try_from(v) {
        Ok(pb::McpToolPermission::Off) => "off",
        Ok(pb::McpToolPermission::Ask) => "ask",
        Ok(pb::McpToolPermission::Allow) => "allow",
        _ => "unknown",
    }
}

pub fn connection_name(v: i32) -> &'static str {
    match pb::McpConnectionStatus::try_from(v) {
        Ok(pb::McpConnectionStatus::Disconnected) => "disconnected",
        Ok(pb::McpConnectionStatus::Connecting) => "connecting",
        Ok(pb::McpConnectionStatus::Connected) => "connected",
        Ok(pb::McpConnectionStatus::Failed) => "failed",
        _ => "unknown",
    }
}

pub fn level_name(v: i32) -> &'static str {
    match pb::JournalLevel::try_from(v) {
        Ok(pb::JournalLevel::Debug) => "debug",
        Ok(pb::JournalLevel::Warn) => "warn",
        Ok(pb::JournalLevel::Error) => "error",
        _ => "info",
    }
}

fn error_class_name(v: i32) -> &'static str {
    match pb::ErrorClass::try_from(v) {
        Ok(pb::ErrorClass::Recoverable) => "recoverable",
        Ok(pb::ErrorClass::PolicyDenied) => "policy_denied",
        Ok(pb::ErrorClass::System) => "system",
        Ok(pb::ErrorClass::ProviderContract) => "provider_contract",
        Ok(pb::ErrorClass::InvalidInput) => "invalid_input",
        _ => "unspecified",
    }
}

/// JSON text from a `*_json` field; text that is not JSON stays a string.
pub fn parse_json_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

pub fn diagnostic_json(d: &pb::Diagnostic) -> Value {
    json!({"code": d.code, "message": d.message, "subject": d.subject})
}

/// Why an unusable tool cannot be used: the first diagnostic (the catalog puts the reason first).
pub fn unusable_reason(l: &pb::ToolListing) -> Option<&pb::Diagnostic> {
    if l.usable {
        None
    } else {
        l.diagnostics.first()
    }
}

/// One tool listing: at least `id`, `source`, `category`, `usable` and `reason` (null when usable).
pub fn listing_json(l: &pb::ToolListing) -> Value {
    let d = l.descriptor.clone().unwrap_or_default();
    let mut o = Map::new();
    o.insert("id".into(), json!(d.id));
    o.insert("title".into(), json!(d.title));
    o.insert("description".into(), json!(d.description));
    o.insert("source".into(), json!(source_name(l.source)));
    o.insert("category".into(), json!(category_name(l.category)));
    o.insert("usable".into(), json!(l.usable));
    o.insert(
        "reason".into(),
        json!(unusable_reason(l).map(|r| r.code.clone())),
    );
    o.insert(
        "diagnostics".into(),
        Value::Array(l.diagnostics.iter().map(diagnostic_json).collect()),
    );
    o.insert("progressAware".into(), json!(l.progress_aware));
    o.insert("inputSchema".into(), parse_json_text(&d.input_schema_json));
    if let Some(m) = &l.mcp {
        o.insert(
            "mcp".into(),
            json!({
                "serverId": m.server_id,
                "serverDisplayName": m.server_display_name,
                "nativeName": m.native_name,
                "serverState": server_state_name(m.server_state),
                "permission": permission_name(m.permission),
            }),
        );
    }
    if let Some(x) = &l.external {
        o.insert(
            "external".into(),
            json!({"hostId": x.host_id, "hostDisplayName": x.host_display_name, "endpointUrl": x.endpoint_url}),
        );
    }
    if let Some(p) = &l.policy {
        o.insert(
            "policy".into(),
            json!({"visible": p.visible, "callable": p.callable, "approvalRequired": p.approval_required, "reason": p.reason, "maxCalls": p.max_calls}),
        );
    }
    Value::Object(o)
}

pub fn failure_json(f: &pb::ErrorInfo) -> Value {
    json!({
        "code": f.code,
        "class": error_class_name(f.error_class),
        "message": f.message,
        "retryable": f.retryable,
    })
}

pub fn run_json(r: &pb::Run) -> Value {
    json!({
        "runId": r.run_id,
        "cellId": r.cell_id,
        "actorId": r.actor_id,
        "chatId": r.chat.as_ref().map(|c| c.chat_id.clone()),
        "mode": mode_name(r.mode),
        "profileId": r.profile_id,
        "status": run_status_name(r.status),
        "driver": driver_name(r.driver),
        "rootInvocationId": r.root_invocation_id,
        "activeInvocationId": r.active_invocation_id,
        "lastSeq": r.last_seq,
        "epoch": r.epoch,
        "createdAtUnixMs": r.created_at_unix_ms,
        "updatedAtUnixMs": r.updated_at_unix_ms,
        "committed": r.committed,
        "failure": r.failure.as_ref().map(failure_json),
        "labels": r.labels,
    })
}

pub fn server_json(s: &pb::McpServer) -> Value {
    let transport = match s.transport.as_ref().and_then(|t| t.kind.as_ref()) {
        Some(pb::mcp_transport::Kind::Stdio(x)) => {
            json!({"stdio": {"command": x.command, "args": x.args, "env": x.env, "inheritEnv": x.inherit_env, "cwd": x.cwd}})
        }
        Some(pb::mcp_transport::Kind::StreamableHttp(x)) => {
            json!({"streamableHttp": {"url": x.url, "headers": x.headers, "headerEnv": x.header_env}})
        }
        None => Value::Null,
    };
    json!({
        "serverId": s.server_id,
        "displayName": s.display_name,
        "state": server_state_name(s.state),
        "connection": connection_name(s.connection),
        "lastError": s.last_error,
        "defaultPermission": permission_name(s.default_permission),
        "cachedToolCount": s.cached_tool_count,
        "refreshedAtUnixMs": s.refreshed_at_unix_ms,
        "generation": s.generation,
        "transport": transport,
    })
}

pub fn cached_tool_json(t: &pb::McpCachedTool) -> Value {
    let status = t.status.clone().unwrap_or_default();
    json!({
        "id": t.descriptor.as_ref().map(|d| d.id.clone()),
        "nativeName": status.native_name,
        "permission": permission_name(status.permission),
        "serverState": server_state_name(status.server_state),
        "usable": t.usable,
        "diagnostics": t.diagnostics.iter().map(diagnostic_json).collect::<Vec<_>>(),
    })
}

pub fn profile_json(p: &pb::Profile) -> Value {
    json!({
        "profileId": p.profile_id,
        "version": p.version,
        "name": p.display_name,
        "description": p.description,
        "updatedAtUnixMs": p.updated_at_unix_ms,
        "profile": parse_json_text(&p.profile_json),
    })
}

pub fn event_json(e: &pb::JournalEvent) -> Value {
    json!({
        "seq": e.seq,
        "id": e.id,
        "runId": e.run_id,
        "timestampUnixMs": e.timestamp_unix_ms,
        "level": level_name(e.level),
        "type": e.r#type,
        "invocationId": e.scope.as_ref().map(|s| s.invocation_id.clone()).unwrap_or_default(),
        "causedBy": e.causality.as_ref().map(|c| c.caused_by.clone()).unwrap_or_default(),
        "payload": parse_json_text(&e.payload_json),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unusable_listing_carries_its_reason() {
        let l = pb::ToolListing {
            descriptor: Some(pb::ToolDescriptor {
                id: "mcp/x:echo".into(),
                input_schema_json: "{\"type\":\"object\"}".into(),
                ..Default::default()
            }),
            source: pb::ToolSource::Mcp as i32,
            category: pb::ToolCategory::Action as i32,
            usable: false,
            diagnostics: vec![pb::Diagnostic {
                code: "mcp.permission_off".into(),
                message: "off".into(),
                subject: String::new(),
            }],
            ..Default::default()
        };
        let j = listing_json(&l);
        assert_eq!(j["id"], "mcp/x:echo");
        assert_eq!(j["source"], "mcp");
        assert_eq!(j["category"], "action");
        assert_eq!(j["usable"], false);
        assert_eq!(j["reason"], "mcp.permission_off");
        assert_eq!(j["inputSchema"]["type"], "object");
    }

    #[test]
    fn sources_round_trip_through_their_names() {
        for s in [
            pb::ToolSource::Builtin,
            pb::ToolSource::Mcp,
            pb::ToolSource::External,
            pb::ToolSource::Agent,
            pb::ToolSource::Run,
            pb::ToolSource::Adapter,
        ] {
            assert_eq!(parse_source(source_name(s as i32)), Some(s));
        }
        assert_eq!(parse_source("agent"), Some(pb::ToolSource::Agent));
        assert_eq!(parse_source("nope"), None);
    }
}
