//! Runtime-control tools, executed by the runtime itself: `dice.roll`, `workspace.commit`,
//! `workspace.finish`, the agent tools (`agent.*`, `task.return`, in `agents`) and `tools.search`
//! (in `search`).
//!
//! `workspace.commit` reads nothing itself: the workspace service publishes the file into the chat
//! store. `workspace.finish` enforces the foreground commit rule and marks the invocation
//! finished; the run's end (persist promotion, `run_completed`) happens after the turn.

use serde_json::{Map, Value, json};
use toolplane_core::builtin;
use toolplane_core::dice::DiceRoll;
use toolplane_core::error as codes;
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;

use super::{Dispatched, Effect, agents};
use crate::context::Runtime;
use crate::context::ports::{PortErrorKind, RunScope};
use crate::error::RuntimeError;
use crate::state::{Invocation, InvocationInner, RunMode};

fn done(result: AgentToolResult, effect: Effect) -> Result<Dispatched, RuntimeError> {
    Ok(Dispatched::known(result, effect))
}

pub async fn execute(
    rt: &Runtime,
    inv: &Invocation,
    inner: &mut InvocationInner,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Dispatched, RuntimeError> {
    let native = call.tool_id.native();
    match native {
        builtin::DICE_ROLL => dice(call, args),
        builtin::WORKSPACE_COMMIT => commit_tool(rt, inv, inner, call, args).await,
        builtin::WORKSPACE_FINISH => finish(inv, inner, call, args),
        builtin::TASK_RETURN => agents::task_return(inv, inner, call, args),
        builtin::AGENT_LIST => agents::list(rt, inv, inner, call, args).await,
        builtin::AGENT_DELEGATE => agents::delegate(rt, inv, inner, call, args).await,
        builtin::AGENT_AWAIT => agents::wait(rt, inv, call, args).await,
        builtin::AGENT_HANDOFF => agents::handoff(rt, inv, inner, call, args).await,
        builtin::TOOLS_SEARCH => Ok(super::search::search(inv, inner, call, args)),
        // Answered by a person before it gets here (pipeline `hold`); never run.
        builtin::ASK_USER => done(
            AgentToolResult::error(
                call,
                codes::TOOL_QUESTION_TIMEOUT,
                "the question got no answer".to_owned(),
            ),
            Effect::None,
        ),
        other => Err(RuntimeError::new(
            codes::TOOL_RESULT_IDENTITY_MISMATCH,
            format!("`{other}` is not a runtime-control tool"),
        )),
    }
}

/// `dice.roll`.
fn dice(call: &ToolInvocation, args: &Map<String, Value>) -> Result<Dispatched, RuntimeError> {
    let notation = args.get("notation").and_then(Value::as_str).unwrap_or("");
    match DiceRoll::parse(notation) {
        Ok(roll) => {
            let outcome = roll.roll(|sides| rand::random_range(1..=sides));
            let structured = serde_json::to_value(&outcome).unwrap_or(Value::Null);
            done(
                AgentToolResult::ok(call, outcome.describe()).with_structured(structured),
                Effect::None,
            )
        }
        Err(e) => done(AgentToolResult::from_error(call, &e), Effect::None),
    }
}

/// `workspace.commit`.
async fn commit_tool(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Dispatched, RuntimeError> {
    let root = inner.snapshot.workspace.message_artifact_root.clone();
    let path = args
        .get("path")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{root}main.md"));
    let append = args.get("mode").and_then(Value::as_str) == Some("append");
    match commit(rt, inv, &path, append).await? {
        Ok((message_id, chars)) => {
            inv.run.update(|r| r.committed = true);
            rt.persist_run(&inv.run).await?;
            let text = format!(
                "Committed `{path}` to the chat message ({chars} characters). You can keep revising and commit again; when everything is done, call `{}`.",
                inner
                    .snapshot
                    .builtin(builtin::WORKSPACE_FINISH)
                    .map(|b| b.alias.to_string())
                    .unwrap_or_else(|| "workspace_finish".into())
            );
            done(
                AgentToolResult::ok(call, text).with_structured(json!({"path": path, "messageId": message_id, "mode": if append { "append" } else { "replace" }})),
                Effect::Committed { path, message_id, auto: false },
            )
        }
        Err(refused) => {
            let mut r = AgentToolResult::ok(call, refused.message);
            r.is_error = true;
            r.error_code = Some(refused.code);
            done(r, Effect::None)
        }
    }
}

/// `workspace.finish`: a foreground run must have committed its answer first.
fn finish(
    inv: &Invocation,
    inner: &InvocationInner,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Dispatched, RuntimeError> {
    let record = inv.run.snapshot();
    if record.mode == RunMode::Foreground && !record.committed {
        let commit = inner
            .snapshot
            .builtin(builtin::WORKSPACE_COMMIT)
            .map(|b| b.alias.to_string())
            .unwrap_or_else(|| "workspace_commit".into());
        return done(
            AgentToolResult::error(
                call,
                codes::WORKSPACE_COMMIT_REQUIRED,
                format!(
                    "this run's answer has not been committed yet: call `{commit}` first, then finish"
                ),
            ),
            Effect::None,
        );
    }
    let summary = args
        .get("summary")
        .and_then(Value::as_str)
        .unwrap_or_default();
    done(
        AgentToolResult::ok(call, "Finished. The run is wrapping up.")
            .with_structured(json!({"summary": summary})),
        Effect::Finished,
    )
}

/// A commit the workspace refused for a reason the model can fix (missing file, a directory, not
/// text, empty): its code and message.
#[derive(Debug, Clone)]
pub struct CommitRefused {
    pub code: String,
    pub message: String,
}

/// Publishes a workspace file into the run's chat message. Returns the message id and the number of
/// characters committed, or the workspace's recoverable refusal; unavailability is a system failure.
pub async fn commit(
    rt: &Runtime,
    inv: &Invocation,
    path: &str,
    append: bool,
) -> Result<Result<(String, usize), CommitRefused>, RuntimeError> {
    let record = inv.run.snapshot();
    let scope = RunScope {
        run_id: record.run_id.clone(),
        cell_id: record.cell_id.clone(),
        epoch: record.epoch,
    };
    match rt
        .ports
        .workspace
        .commit_run_message(&scope, path, append)
        .await
    {
        Ok(m) => Ok(Ok((m.message_id, m.content.chars().count()))),
        Err(e) => match e.kind {
            PortErrorKind::Unavailable | PortErrorKind::Broken => Err(RuntimeError::dependency(
                format!("committing `{path}` failed: {}", e.message),
            )),
            _ => {
                let code = e.code().unwrap_or("workspace.commit_failed").to_owned();
                let message = e
                    .message
                    .split_once(": ")
                    .map(|(_, m)| m)
                    .unwrap_or(&e.message);
                Ok(Err(CommitRefused {
                    code,
                    message: format!("cannot commit `{path}`: {message}"),
                }))
            }
        },
    }
}
