//! Conversion between protobuf messages and the engine's types, in one place. Must never decide
//! anything: a field that needs a rule is checked in the engine or the service.

use toolplane_proto::v1 as pb;

use crate::{
    chat::StoredMessage,
    engine::objects::ObjectInfo,
    error::WsError,
    paths::Roots,
    runs::{RunRecord, SkillAccess},
    skills::SkillPackage,
    tools::ToolOutput,
};

/// A page size asked for: 0 selects `default`, anything over `max` is `max`.
pub fn page_size(asked: u32, default: usize, max: usize) -> usize {
    match asked {
        0 => default,
        n => (n as usize).min(max),
    }
}

/// The cursor of a page token `listing` issued (`toolplane_proto::page_token`); empty for the
/// first page. A token it did not issue is `request.invalid_page_token`.
pub fn page_cursor(listing: &'static str, token: &str) -> Result<String, WsError> {
    toolplane_proto::page_token::decode(listing, token)
        .map(Option::unwrap_or_default)
        .map_err(|e| {
            WsError::status(
                toolplane_proto::page_token::CODE,
                tonic::Code::InvalidArgument,
                e.to_string(),
            )
        })
}

/// The token of the page after `cursor` in `listing`; empty at the end (an empty cursor).
pub fn page_token(listing: &str, cursor: &str) -> String {
    if cursor.is_empty() {
        String::new()
    } else {
        toolplane_proto::page_token::encode(listing, cursor)
    }
}

/// A run mode's number as the manifest keeps it: background, or foreground for anything else.
pub fn run_mode(mode: i32) -> i32 {
    if mode == pb::RunMode::Background as i32 {
        pb::RunMode::Background as i32
    } else {
        pb::RunMode::Foreground as i32
    }
}

/// An invocation's skill access; 0 limits select the defaults, no access sees no skill.
pub fn skill_access(access: Option<pb::SkillAccess>) -> SkillAccess {
    let default = SkillAccess::default();
    access
        .map(|s| SkillAccess {
            visible: s.visible,
            deny: s.deny,
            max_read_chars_per_call: if s.max_read_chars_per_call == 0 {
                default.max_read_chars_per_call
            } else {
                s.max_read_chars_per_call
            },
            max_read_chars_per_run: if s.max_read_chars_per_run == 0 {
                default.max_read_chars_per_run
            } else {
                s.max_read_chars_per_run
            },
        })
        .unwrap_or_default()
}

pub fn roots(r: &Roots) -> pb::WorkspaceRoots {
    pb::WorkspaceRoots {
        visible: r.visible.iter().map(|v| format!("{v}/")).collect(),
        writable: r.writable.iter().map(|v| format!("{v}/")).collect(),
    }
}

pub fn object(o: ObjectInfo) -> pb::WorkspaceObject {
    pb::WorkspaceObject {
        path: o.path,
        size_bytes: o.size_bytes,
        sha256: o.sha256,
        modified_at_unix_ms: o.modified_at_unix_ms.unwrap_or(0),
        visible: o.visible,
        writable: o.writable,
    }
}

pub fn skill(s: &SkillPackage) -> pb::Skill {
    pb::Skill {
        name: s.name.clone(),
        description: s.description.clone(),
        file_count: s.files.len() as u32,
        total_bytes: s.total_bytes(),
        skipped_file_count: s.skipped.len() as u32,
        version: s.version.clone(),
        imported_at_unix_ms: s.imported_at_unix_ms,
    }
}

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
        roots: Some(roots(&r.roots)),
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

/// A run lease as the wire's `RunLease`.
pub fn lease(l: crate::engine::leases::Lease) -> pb::RunLease {
    pb::RunLease {
        run_id: l.run_id,
        cell_id: l.cell_id,
        holder: l.holder,
        epoch: l.epoch,
        expires_at_unix_ms: l.expires_at_unix_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Manifests keep the proto's numbers: the engine's names for them must stay equal.
    #[test]
    fn the_engine_s_run_numbers_are_the_proto_s() {
        assert_eq!(
            crate::runs::STATUS_COMPLETED,
            pb::RunStatus::Completed as i32
        );
        assert_eq!(run_mode(0), pb::RunMode::Foreground as i32);
        assert_eq!(run_mode(7), pb::RunMode::Foreground as i32);
        assert_eq!(run_mode(pb::RunMode::Background as i32), 2);
    }
}
