//! Recording a call: large external results become a readable view plus a preview, the call's
//! audit objects (arguments, result, view) and journal records (requested → started →
//! completed / failed, stored, effects) go to the journal in one group.

use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use toolplane_core::builtin;
use toolplane_core::invocation::{ToolArguments, ToolInvocation};
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::{Executor, ToolBinding};

use super::CallDetail;
use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::state::{AuditObject, Event, Invocation, InvocationInner};
use crate::tools::{Dispatched, Effect};

/// Characters of a large result the model sees inline.
pub const PREVIEW_CHARS: usize = 3_000;
/// Longest physical line of a readable view; longer lines are wrapped in the view only.
const VIEW_LINE_CHARS: usize = 2_000;

/// The audit file name of a call: `call_<first 8 bytes of sha256(call id) in hex>`.
pub fn call_file(call_id: &str) -> String {
    let digest = Sha256::digest(call_id.as_bytes());
    let mut name = String::from("call_");
    for b in &digest[..8] {
        name.push_str(&format!("{b:02x}"));
    }
    name
}

/// A call's audit paths and the records gathered for it while it goes through the pipeline.
#[derive(Debug)]
pub struct CallRecord {
    file: String,
    args_path: String,
    result_path: String,
    /// The fields every record of the call carries.
    pub base: Value,
    pub events: Vec<Event>,
}

impl CallRecord {
    /// A call just requested: its paths and its `tool_call_requested` record.
    pub fn new(
        inv: &Invocation,
        inner: &InvocationInner,
        binding: &ToolBinding,
        call: &ToolInvocation,
    ) -> Self {
        // A call taken over with its outcome unknown may already have audit objects under its
        // name (written by the runtime that stopped): its new ones are named after the call id
        // and the new epoch.
        let file = if inner.outcome_unknown(&call.call_id) {
            call_file(&format!("{}#epoch{}", call.call_id, inv.run.epoch()))
        } else {
            call_file(&call.call_id)
        };
        let base = json!({
            "round": inner.round,
            "invocationId": inv.id,
            "callId": call.call_id,
            "toolId": call.tool_id.to_string(),
            "snapshotId": inner.snapshot.snapshot_id,
            "alias": binding.alias.as_str(),
        });
        CallRecord {
            args_path: format!("tool-args/{}/{file}.json", inv.id),
            result_path: format!("tool-results/{}/{file}.json", inv.id),
            file,
            events: vec![Event::new("tool_call_requested", base.clone()).inv(&inv.id)],
            base,
        }
    }
}

impl CallRecord {
    /// A held call taken up again: its `tool_call_requested` is already journalled.
    pub fn resumed(
        inv: &Invocation,
        inner: &InvocationInner,
        binding: &ToolBinding,
        call: &ToolInvocation,
    ) -> Self {
        let mut rec = CallRecord::new(inv, inner, binding, call);
        rec.events.clear();
        rec
    }
}

/// Stores the call's audit objects and journal records in one group; a large result's content
/// becomes its preview. Returns the call's detail.
#[allow(clippy::too_many_arguments)]
pub async fn store(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    rec: CallRecord,
    d: &mut Dispatched,
    started: Instant,
) -> Result<CallDetail, RuntimeError> {
    let CallRecord {
        file,
        args_path,
        result_path,
        base,
        mut events,
    } = rec;
    let mut objects = Vec::with_capacity(3);
    let view_path = readable_view(
        inv,
        inner,
        binding,
        call,
        &file,
        d,
        &mut objects,
        &mut events,
    );
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    objects.append(&mut d.objects);
    objects.extend(audit_objects(
        binding,
        call,
        d,
        &args_path,
        &result_path,
        elapsed_ms,
    ));
    let mut done = base;
    if let Some(obj) = done.as_object_mut() {
        obj.insert("isError".into(), json!(d.result.is_error));
        obj.insert("errorCode".into(), json!(d.result.error_code));
        obj.insert("elapsedMs".into(), json!(elapsed_ms));
        obj.insert("outcome".into(), json!(d.outcome.as_str()));
        obj.insert("resourceRefs".into(), json!(d.result.resource_refs));
        obj.insert("argsPath".into(), json!(args_path));
        obj.insert("resultPath".into(), json!(result_path));
    }
    let kind = if d.result.is_error {
        "tool_call_failed"
    } else {
        "tool_call_completed"
    };
    events.push(Event::new(kind, done).inv(&inv.id));
    events.push(
        Event::new(
            "tool_result_stored",
            json!({"invocationId": inv.id, "callId": call.call_id, "path": result_path}),
        )
        .inv(&inv.id),
    );
    events.extend(effect_events(inv, &d.effect, call, &d.result));
    events.append(&mut d.events);
    rt.append(&inv.run, inv.run.epoch(), objects, events)
        .await?;
    Ok(CallDetail {
        call_id: call.call_id.clone(),
        tool_id: call.tool_id.to_string(),
        alias: binding.alias.to_string(),
        outcome: d.outcome,
        elapsed_ms,
        args_path,
        result_path,
        readable_view_path: view_path,
    })
}

/// Large external results become a readable view plus a preview: the view's path (empty when
/// the result is small), its object and its record.
#[allow(clippy::too_many_arguments)]
fn readable_view(
    inv: &Invocation,
    inner: &InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    file: &str,
    d: &mut Dispatched,
    objects: &mut Vec<AuditObject>,
    events: &mut Vec<Event>,
) -> String {
    let external = matches!(
        binding.executor,
        Executor::McpProxy { .. } | Executor::External { .. }
    );
    if !external
        || d.result.content.chars().count() <= inner.snapshot.mcp_result_inline_char_limit as usize
    {
        return String::new();
    }
    let view_path = format!("tool-results/{}/{file}.txt", inv.id);
    let full = d.result.model_content().into_owned();
    objects.push(AuditObject {
        path: view_path.clone(),
        content: wrap_long_lines(&full).into_bytes(),
        content_type: "text/plain",
    });
    d.result.content = large_preview(&full, &view_path, inner);
    events.push(Event::new("tool_result_readable_view_stored", json!({"invocationId": inv.id, "callId": call.call_id, "path": view_path, "chars": full.chars().count()})).inv(&inv.id));
    view_path
}

/// The call's arguments and result as audit objects.
fn audit_objects(
    binding: &ToolBinding,
    call: &ToolInvocation,
    d: &Dispatched,
    args_path: &str,
    result_path: &str,
    elapsed_ms: u64,
) -> [AuditObject; 2] {
    [
        AuditObject {
            path: args_path.to_owned(),
            content: serde_json::to_vec(&ArgsAudit {
                call_id: &call.call_id,
                tool_id: &call.tool_id,
                alias: binding.alias.as_str(),
                arguments: ArgsView::of(&call.arguments),
                provider_metadata: &call.provider_metadata,
            })
            .unwrap_or_default(),
            content_type: "application/json",
        },
        AuditObject {
            path: result_path.to_owned(),
            content: serde_json::to_vec(&ResultAudit {
                result: &d.result,
                outcome: d.outcome.as_str(),
                elapsed_ms,
                raw: d
                    .raw
                    .as_deref()
                    .and_then(|r| serde_json::from_str::<Value>(r).ok()),
            })
            .unwrap_or_default(),
            content_type: "application/json",
        },
    ]
}

/// The audit object of a call's arguments (`…/args.json`), serialized straight from the call: the
/// arguments are not copied into a JSON value first.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ArgsAudit<'a> {
    call_id: &'a str,
    tool_id: &'a toolplane_core::id::ToolId,
    alias: &'a str,
    arguments: ArgsView<'a>,
    provider_metadata: &'a Option<Value>,
}

/// A call's arguments as audited: the object, or the text that was not one and why.
#[derive(Serialize)]
#[serde(untagged)]
enum ArgsView<'a> {
    Object(&'a Map<String, Value>),
    Invalid { invalid: &'a str, reason: &'a str },
}

impl<'a> ArgsView<'a> {
    fn of(arguments: &'a ToolArguments) -> Self {
        match arguments {
            ToolArguments::Object { value } => ArgsView::Object(value),
            ToolArguments::Invalid { raw, reason } => ArgsView::Invalid {
                invalid: raw,
                reason,
            },
        }
    }
}

/// The audit object of a call's result (`…/result.json`), serialized straight from the result.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResultAudit<'a> {
    result: &'a AgentToolResult,
    outcome: &'a str,
    elapsed_ms: u64,
    raw: Option<Value>,
}

fn effect_events(
    inv: &Invocation,
    effect: &Effect,
    call: &ToolInvocation,
    result: &AgentToolResult,
) -> Vec<Event> {
    if result.is_error {
        return Vec::new();
    }
    match effect {
        Effect::Committed { path, message_id, auto } => vec![Event::new(
            "chat_message_committed",
            json!({"invocationId": inv.id, "callId": call.call_id, "path": path, "messageId": message_id, "auto": auto}),
        )
        .inv(&inv.id)],
        Effect::Wrote { path, kind } => vec![Event::new(kind, json!({"invocationId": inv.id, "callId": call.call_id, "path": path})).inv(&inv.id)],
        _ => Vec::new(),
    }
}

/// The preview the model gets for a large result: the first 3,000 characters, the view's path and
/// size, and how to read the rest with this snapshot's real aliases.
fn large_preview(full: &str, view_path: &str, inner: &InvocationInner) -> String {
    let total = full.chars().count();
    let preview: String = full.chars().take(PREVIEW_CHARS).collect();
    let read = inner
        .snapshot
        .builtin(builtin::WORKSPACE_READ_FILE)
        .map(|b| b.alias.to_string());
    let search = inner
        .snapshot
        .builtin(builtin::WORKSPACE_SEARCH_FILES)
        .map(|b| b.alias.to_string());
    let how = match (read, search) {
        (Some(r), Some(s)) => format!(
            "Read it in parts with `{r}` (path \"{view_path}\", start_line and line_count), or find what you need with `{s}`."
        ),
        (Some(r), None) => format!(
            "Read it in parts with `{r}` (path \"{view_path}\", start_line and line_count)."
        ),
        (None, Some(s)) => format!("Find what you need in it with `{s}` (path \"{view_path}\")."),
        (None, None) => "You cannot read it with your tools; the user can open it.".to_owned(),
    };
    format!(
        "{preview}\n\n[This result is {total} characters long; the first {PREVIEW_CHARS} are shown above. The full text is saved at `{view_path}`. {how}]"
    )
}

fn wrap_long_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / VIEW_LINE_CHARS);
    for line in text.split_inclusive('\n') {
        let mut count = 0;
        for c in line.chars() {
            if count == VIEW_LINE_CHARS && c != '\n' {
                out.push('\n');
                count = 0;
            }
            out.push(c);
            count += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_names_use_the_first_eight_bytes_of_the_call_id_digest() {
        // sha256("call_0") = 5c8f9a…; providers reuse ids like call_0, so paths are also scoped by
        // invocation.
        let name = call_file("call_0");
        assert_eq!(name.len(), "call_".len() + 16);
        assert!(name.chars().skip(5).all(|c| c.is_ascii_hexdigit()));
        assert_ne!(call_file("call_0"), call_file("call_1"));
        assert_eq!(call_file("call_0"), call_file("call_0"));
    }

    #[test]
    fn audit_objects_keep_their_documented_shape() {
        let tool_id = toolplane_core::ToolId::parse("builtin:workspace.write_file").unwrap();
        let object = ToolArguments::from_text(r#"{"path":"output/a.md","content":"x"}"#);
        let metadata = Some(json!({"thoughtSignature": "abc"}));
        let args = ArgsAudit {
            call_id: "call_1",
            tool_id: &tool_id,
            alias: "workspace_write_file",
            arguments: ArgsView::of(&object),
            provider_metadata: &metadata,
        };
        assert_eq!(
            String::from_utf8(serde_json::to_vec(&args).unwrap()).unwrap(),
            r#"{"callId":"call_1","toolId":"builtin:workspace.write_file","alias":"workspace_write_file","arguments":{"path":"output/a.md","content":"x"},"providerMetadata":{"thoughtSignature":"abc"}}"#
        );
        let invalid = ToolArguments::from_text("[1,");
        let ToolArguments::Invalid { reason, .. } = &invalid else {
            panic!("not an object")
        };
        let args = ArgsAudit {
            arguments: ArgsView::of(&invalid),
            provider_metadata: &None,
            ..args
        };
        assert_eq!(
            String::from_utf8(serde_json::to_vec(&args).unwrap()).unwrap(),
            format!(
                r#"{{"callId":"call_1","toolId":"builtin:workspace.write_file","alias":"workspace_write_file","arguments":{{"invalid":"[1,","reason":{}}},"providerMetadata":null}}"#,
                serde_json::to_string(reason).unwrap()
            )
        );

        let call = ToolInvocation {
            call_id: "call_1".into(),
            tool_id: tool_id.clone(),
            arguments: object,
            provider_metadata: None,
        };
        let result = AgentToolResult::ok(&call, "wrote output/a.md");
        let audit = ResultAudit {
            result: &result,
            outcome: "known",
            elapsed_ms: 3,
            raw: None,
        };
        assert_eq!(
            String::from_utf8(serde_json::to_vec(&audit).unwrap()).unwrap(),
            r#"{"result":{"callId":"call_1","toolId":"builtin:workspace.write_file","content":"wrote output/a.md","isError":false},"outcome":"known","elapsedMs":3,"raw":null}"#
        );
    }

    #[test]
    fn readable_views_wrap_only_overlong_lines() {
        let long = "x".repeat(VIEW_LINE_CHARS * 2 + 10);
        let text = format!("short\n{long}\nend");
        let wrapped = wrap_long_lines(&text);
        let lines: Vec<&str> = wrapped.lines().collect();
        assert_eq!(lines[0], "short");
        assert_eq!(lines[1].len(), VIEW_LINE_CHARS);
        assert_eq!(lines[3].len(), 10);
        assert_eq!(lines[4], "end");
        assert_eq!(
            wrapped.replace('\n', ""),
            text.replace('\n', ""),
            "nothing is lost"
        );
    }
}
