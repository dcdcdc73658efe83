//! `task.return`: a delegated child hands its result back, stored as
//! `agent-results/<child>.json` and `summaries/<child>-result.md`; the child ends after its turn.

use serde_json::{Map, Value, json};
use toolplane_core::error::{AGENT_UNAVAILABLE, TOOL_INVALID_ARGUMENTS};
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::ExitPolicy;

use super::{MAX_SUMMARY_BYTES, refused};
use crate::error::RuntimeError;
use crate::state::{AuditObject, Event, Invocation, InvocationInner, TaskResult, now_ms};
use crate::tools::{Dispatched, Effect};

/// `task.return`: the child's result, stored as `agent-results/<child>.json` and
/// `summaries/<child>-result.md`; the child ends after its turn.
pub fn task_return(
    inv: &Invocation,
    inner: &mut InvocationInner,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Dispatched, RuntimeError> {
    let ExitPolicy::ReturnToParent {
        task_id,
        parent_invocation_id,
    } = inner.snapshot.exit_policy.clone()
    else {
        return Ok(refused(
            call,
            AGENT_UNAVAILABLE,
            "only a delegated task returns a result; end your work with workspace.finish",
        ));
    };
    let (summary, artifacts, status) = match returned(call, args) {
        Ok(r) => r,
        Err(refusal) => return Ok(*refusal),
    };
    let result_path = format!("agent-results/{}.json", inv.id);
    let summary_path = format!("summaries/{}-result.md", inv.id);
    let result = TaskResult {
        summary: summary.to_owned(),
        artifacts,
        status: status.to_owned(),
        result_path: result_path.clone(),
        summary_path: summary_path.clone(),
    };
    let document = json!({
        "taskId": task_id,
        "parentInvocationId": parent_invocation_id,
        "childInvocationId": inv.id,
        "profileId": inner.profile.id,
        "status": status,
        "summary": result.summary,
        "artifacts": result.artifacts,
        "returnedAtUnixMs": now_ms(),
    });
    let markdown = format!(
        "# Result of {task_id} ({})\n\nStatus: {status}\n\n{}\n",
        inner.profile.id,
        summary.trim()
    );
    inner.returned = Some(result);
    let mut d = Dispatched::known(
        AgentToolResult::ok(
            call,
            "Returned your result. Your work on this task is done.",
        )
        .with_structured(
            json!({"resultPath": result_path, "summaryPath": summary_path, "status": status}),
        ),
        Effect::Returned,
    );
    d.objects = vec![
        AuditObject {
            path: result_path.clone(),
            content: serde_json::to_vec_pretty(&document).unwrap_or_default(),
            content_type: "application/json",
        },
        AuditObject {
            path: summary_path.clone(),
            content: markdown.into_bytes(),
            content_type: "text/markdown",
        },
    ];
    d.events.push(
        Event::new(
            "task_return_completed",
            json!({"invocationId": inv.id, "taskId": task_id, "status": status, "resultPath": result_path, "summaryPath": summary_path}),
        )
        .inv(&inv.id),
    );
    Ok(d)
}

/// What the child returns: its summary, its artifacts and whether it completed its task.
fn returned<'a>(
    call: &ToolInvocation,
    args: &'a Map<String, Value>,
) -> Result<(&'a str, Vec<String>, &'static str), Box<Dispatched>> {
    let summary = args.get("summary").and_then(Value::as_str).unwrap_or("");
    if summary.trim().is_empty() || summary.len() > MAX_SUMMARY_BYTES {
        return Err(Box::new(refused(
            call,
            TOOL_INVALID_ARGUMENTS,
            format!("summary must be 1 to {MAX_SUMMARY_BYTES} bytes of Markdown"),
        )));
    }
    let artifacts: Vec<String> = args
        .get("artifacts")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .take(50)
                .map(|p| p.chars().take(1024).collect())
                .collect()
        })
        .unwrap_or_default();
    let status = match args.get("status").and_then(Value::as_str) {
        None | Some("completed") => "completed",
        Some("failed") => "failed",
        Some(other) => {
            return Err(Box::new(refused(
                call,
                TOOL_INVALID_ARGUMENTS,
                format!("status `{other}` is neither completed nor failed"),
            )));
        }
    };
    Ok((summary, artifacts, status))
}
