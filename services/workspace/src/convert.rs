//! Conversion between protobuf messages and the engine's types, in one place. Must never decide
//! anything: a field that needs a rule is checked in the engine or the service.

use toolplane_proto::v1 as pb;

use crate::{chat::StoredMessage, error::WsError, runs::RunRecord, tools::ToolOutput};

pub fn role_to_str(role: i32) -> Option<&'static str> {
    match pb::ChatRole::try_from(role).ok()? {
        pb::ChatRole::User => Some("user"),
        pb::ChatRole::Assistant => Some("assistant"),
        pb::ChatRole::System => Some("system"),
        pb::ChatRole::Unspecified => None,
    }
}

pub fn role_from_str(role: &str) -> i32 {
    match role {
        "user" => pb::ChatRole::User as i32,
        "assistant" => pb::ChatRole::Assistant as i32,
        "system" => pb::ChatRole::System as i32,
        _ => pb::ChatRole::Unspecified as i32,
    }
}

pub fn message(index: u64, m: &StoredMessage) -> pb::ChatMessage {
    pb::ChatMessage {
        index,
        message_id: m.message_id.clone(),
        role: role_from_str(&m.role),
        name: m.name.clone(),
        content: m.content.clone(),
        run_id: m.run_id.clone(),
        metadata_json: m.metadata.as_ref().map(|v| v.to_string()),
        created_at_unix_ms: m.created_at_unix_ms,
        updated_at_unix_ms: m.updated_at_unix_ms,
    }
}

pub fn manifest(r: &RunRecord) -> pb::RunWorkspaceManifest {
    pb::RunWorkspaceManifest {
        cell_id: r.cell_id.clone(),
        run_id: r.run_id.clone(),
        actor_id: r.actor_id.clone(),
        chat: Some(pb::ChatBinding {
            chat_id: r.chat_id.clone(),
            message_id: r.message_id.clone(),
        }),
        mode: r.mode,
        roots: Some(pb::WorkspaceRoots {
            visible: r.roots.visible.iter().map(|v| format!("{v}/")).collect(),
            writable: r.roots.writable.iter().map(|v| format!("{v}/")).collect(),
        }),
        persist_base_version: r.persist_base_version.clone(),
        message_artifact_root: r.message_artifact_root.clone(),
        created_at_unix_ms: r.created_at_unix_ms,
        epoch: r.epoch,
        status: r.status,
    }
}

/// A tool call's outcome as the wire's `ToolResult`; `Err` is a system failure (a gRPC status).
pub fn tool_result(
    call_id: &str,
    tool_id: &str,
    outcome: Result<ToolOutput, WsError>,
) -> Result<pb::ToolResult, WsError> {
    match outcome {
        Ok(out) => Ok(pb::ToolResult {
            call_id: call_id.to_owned(),
            tool_id: tool_id.to_owned(),
            content: out.content,
            structured_json: Some(out.structured.to_string()),
            is_error: false,
            error_code: None,
            resource_refs: out
                .refs
                .into_iter()
                .map(|uri| pb::ResourceRef {
                    uri,
                    title: None,
                    mime_type: None,
                })
                .collect(),
            error_class: pb::ErrorClass::Unspecified as i32,
        }),
        Err(error) if error.is_recoverable() => Ok(pb::ToolResult {
            call_id: call_id.to_owned(),
            tool_id: tool_id.to_owned(),
            content: error.message().to_owned(),
            structured_json: Some(serde_json::json!({"errorCode": error.code()}).to_string()),
            is_error: true,
            error_code: Some(error.code().to_owned()),
            resource_refs: Vec::new(),
            error_class: pb::ErrorClass::Recoverable as i32,
        }),
        Err(error) => Err(error),
    }
}

pub fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "json" => "application/json",
        "md" | "markdown" => "text/markdown",
        "txt" | "log" => "text/plain",
        "jsonl" => "application/jsonl",
        "html" => "text/html",
        "csv" => "text/csv",
        _ => "application/octet-stream",
    }
}
