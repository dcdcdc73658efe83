//! What the MCP face shows a client, from the runtime's own values: a snapshot's advertised tool
//! as an MCP `Tool` (its alias as the name, title, schemas, annotations), one call's
//! `AgentToolResult` as a `CallToolResult` (text, `structuredContent`, a resource link to the
//! stored copy of an externalised large result, and the call's audit facts under `_meta`), and the
//! `toolplane://` URIs of stored objects that `resources/read` accepts (docs/mcp-server.md).

use std::sync::Arc;

use rmcp::model::{
    CallToolResult, ContentBlock, JsonObject, MetaObject, Resource, Tool, ToolAnnotations,
};
use serde_json::{Value, json};
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::ToolBinding;

use crate::pipeline::CallDetail;

/// The `_meta` keys of a tool result: the call's id, outcome, error code and audit objects.
pub const META_PREFIX: &str = "dev.toolplane/";

/// A tool of the snapshot as MCP lists it, under its provider-safe alias.
pub fn tool(binding: &ToolBinding) -> Tool {
    let d = &binding.descriptor;
    let mut tool = Tool::default();
    tool.name = binding.alias.to_string().into();
    tool.title = d.title().map(str::to_owned);
    tool.description = Some(d.description().to_owned().into());
    tool.input_schema = Arc::new(object(d.input_schema()));
    tool.output_schema = d.output_schema().map(|s| Arc::new(object(s)));
    let a = d.annotations();
    let mut annotations = ToolAnnotations::new();
    annotations.title = d.title().map(str::to_owned);
    annotations.read_only_hint = a.read_only_hint;
    annotations.destructive_hint = a.destructive_hint;
    annotations.idempotent_hint = a.idempotent_hint;
    annotations.open_world_hint = a.open_world_hint;
    if annotations != ToolAnnotations::new() {
        tool.annotations = Some(annotations);
    }
    let mut meta = JsonObject::new();
    meta.insert(
        format!("{META_PREFIX}toolId"),
        json!(binding.tool_id().to_string()),
    );
    tool.meta = Some(MetaObject(meta));
    tool
}

fn object(schema: &Value) -> JsonObject {
    match schema {
        Value::Object(map) => map.clone(),
        _ => JsonObject::new(),
    }
}

/// The URI `resources/read` answers for the stored object `path` of run `run`.
pub fn object_uri(run: &str, path: &str) -> String {
    format!("toolplane://runs/{run}/objects/{path}")
}

/// The run and object path of a `toolplane://runs/<run>/objects/<path>` URI.
pub fn parse_object_uri(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_prefix("toolplane://runs/")?;
    let (run, path) = rest.split_once("/objects/")?;
    (!run.is_empty() && !path.is_empty() && !run.contains('/')).then_some((run, path))
}

/// One call's result as MCP content. An error (a refusal of the gate, governance or the turn, or
/// a failed tool) is `isError: true` with the message as text and the error code in `_meta`.
pub fn call_result(
    run: &str,
    invocation: &str,
    result: &AgentToolResult,
    detail: &CallDetail,
) -> CallToolResult {
    let mut content = vec![ContentBlock::text(result.content.clone())];
    if !detail.readable_view_path.is_empty() {
        let mut link = Resource::new(
            object_uri(run, &detail.readable_view_path),
            detail.readable_view_path.clone(),
        );
        link.title = Some("the whole result".to_owned());
        link.mime_type = Some("text/plain".to_owned());
        content.push(ContentBlock::resource_link(link));
    }
    for r in &result.resource_refs {
        let mut link = Resource::new(r.uri.clone(), r.uri.clone());
        link.title = r.title.clone();
        content.push(ContentBlock::resource_link(link));
    }
    let mut out = CallToolResult::success(content);
    out.is_error = Some(result.is_error);
    if !result.is_error {
        out.structured_content = result.structured.clone();
    }
    let mut meta = meta(result, detail);
    meta.insert(format!("{META_PREFIX}runId"), json!(run));
    meta.insert(format!("{META_PREFIX}invocationId"), json!(invocation));
    out.meta = Some(MetaObject(meta));
    out
}

fn meta(result: &AgentToolResult, detail: &CallDetail) -> JsonObject {
    let mut m = JsonObject::new();
    let mut put = |key: &str, value: Value| {
        m.insert(format!("{META_PREFIX}{key}"), value);
    };
    put("callId", json!(detail.call_id));
    put("toolId", json!(detail.tool_id));
    put("outcome", json!(detail.outcome.as_str()));
    put("argsPath", json!(detail.args_path));
    put("resultPath", json!(detail.result_path));
    if let Some(code) = &result.error_code {
        put("errorCode", json!(code));
    }
    m
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn object_uris_round_trip_and_refuse_other_shapes() {
        let uri = object_uri("run-1", "tool-results/inv/call.txt");
        assert_eq!(
            parse_object_uri(&uri),
            Some(("run-1", "tool-results/inv/call.txt"))
        );
        assert_eq!(parse_object_uri("toolplane://runs//objects/a"), None);
        assert_eq!(parse_object_uri("toolplane://runs/a/objects/"), None);
        assert_eq!(parse_object_uri("file:///etc/passwd"), None);
        assert_eq!(parse_object_uri("toolplane://runs/a/b/objects/c"), None);
    }
}
