//! Calls that leave the runtime: the workspace's tools, MCP tools through the mcp-proxy and
//! external hosts, each sent through the tool-hosts port with the [`ToolContext`] every executor
//! receives. A cancel of the run, or of the call by its client ([`call_cancel`]), drops a call in
//! flight, the workspace's included; a host that does not answer in time is a timeout whose
//! outcome is unknown.

use std::time::Duration;

use serde_json::Value;
use toolplane_core::builtin;
use toolplane_core::error::{self as codes, TOOL_EXECUTOR_UNAVAILABLE};
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::{Executor, ToolBinding};

use super::{Dispatched, Effect, call_cancel};
use crate::context::Runtime;
use crate::context::journal::lease_lost;
use crate::context::ports::{ExecuteCall, Executed, Outcome, PortErrorKind, ToolContext, ToolHost};
use crate::error::RuntimeError;
use crate::lifecycle::lease::refused_as_stale;
use crate::state::{Invocation, InvocationInner, now_ms};

/// The margin a request gets on the wire beyond the tool's own limit.
const WIRE_MARGIN: Duration = Duration::from_secs(1);

/// The context every executor receives with a call.
pub fn tool_context(inv: &Invocation, inner: &InvocationInner, timeout: Duration) -> ToolContext {
    let deadline = now_ms() + i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX / 2);
    inv.run.with(|record| ToolContext {
        cell_id: record.cell_id.clone(),
        actor_id: record.actor_id.clone(),
        run_id: record.run_id.clone(),
        session_id: record.session_id.clone(),
        invocation_id: inv.id.clone(),
        agent_id: inner.snapshot.profile_id.clone(),
        work_dir: record.work_dir.clone(),
        allow_paths: record.allow_paths.clone(),
        deny_paths: record.deny_paths.clone(),
        epoch: record.epoch,
        deadline_unix_ms: deadline,
        round: inner.round,
    })
}

/// A call to the workspace service's own tools, which the runtime cannot do without: a failure
/// of the service is a system failure, but a call the connection lost (a replica went away) is
/// the model's to know about, as `tool.outcome_unknown`.
pub async fn on_workspace(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    call: &ToolInvocation,
) -> Result<Dispatched, RuntimeError> {
    let timeout = rt.cfg.executor_timeout;
    let request = ExecuteCall {
        context: tool_context(inv, inner, timeout),
        call,
        request_timeout: timeout + WIRE_MARGIN,
        tool_timeout_ms: None,
    };
    // A cancel of the run drops the request, as for any other host: the cancel does not wait for
    // a slow workspace tool (a search over a large tree), and the call is answered and journalled
    // as cancelled. The workspace commits its writes atomically, so a dropped write either
    // happened whole or not at all; which one is unknown here.
    let stop = call_cancel::stop(inv);
    let answered = tokio::select! {
        r = rt.ports.tools.execute(ToolHost::Workspace, request) => r?,
        () = stop.wait() => {
            return Ok(Dispatched::cancelled(
                call,
                &format!("{} while the workspace tool ran; whether it took effect is unknown", call_cancel::who(inv)),
                Outcome::Unknown,
            ));
        }
    };
    match answered {
        Ok(executed) => from_executed(call, executed),
        // The workspace saw a newer epoch of the run: another runtime drives it now.
        Err(e) if rt.cfg.cluster.leases && refused_as_stale(&e) => {
            rt.lose_run(&inv.run, &e.message);
            Err(lease_lost(&inv.run))
        }
        // The replica that had the call went away (docs/runtime.md, "Workspace replicas"): whether
        // it took effect is unknown, and a tool call is never sent again.
        Err(e) if e.kind == PortErrorKind::Unavailable => Ok(Dispatched {
            outcome: Outcome::Unknown,
            ..Dispatched::known(
                AgentToolResult::error(
                    call,
                    codes::TOOL_OUTCOME_UNKNOWN,
                    "the workspace went away while the call ran; whether it took effect is unknown",
                ),
                Effect::None,
            )
        }),
        Err(e) => Err(RuntimeError::dependency(format!(
            "the workspace service failed `{}`: {}",
            call.tool_id, e.message
        ))),
    }
}

/// A call to an MCP tool (through the mcp-proxy) or an external host: a host that fails is the
/// model's to work around, answered with a result that says whether anything was sent.
pub async fn on_host(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
) -> Result<Dispatched, RuntimeError> {
    let timeout = rt.cfg.executor_timeout;
    let request = ExecuteCall {
        context: tool_context(inv, inner, timeout),
        call,
        request_timeout: timeout + WIRE_MARGIN,
        tool_timeout_ms: Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
    };
    let host = match &binding.executor {
        Executor::External { host_id, endpoint } => ToolHost::External { host_id, endpoint },
        _ => ToolHost::McpProxy,
    };
    let sent = tokio::time::timeout(timeout + WIRE_MARGIN, rt.ports.tools.execute(host, request));
    // A cancel of the run, or of the call by its client, drops the request: the mcp-proxy (or the
    // host) sees its caller go and tells the server to stop (`notifications/cancelled`), and the
    // call is answered and journalled as cancelled.
    let stop = call_cancel::stop(inv);
    let response = tokio::select! {
        r = sent => r,
        () = stop.wait() => {
            return Ok(Dispatched::cancelled(
                call,
                &format!("{} while the call ran; the tool's host was told to stop, and whether the call took effect is unknown", call_cancel::who(inv)),
                Outcome::Unknown,
            ));
        }
    };
    let Ok(answered) = response else {
        return Ok(failed(
            call,
            Outcome::Unknown,
            codes::TOOL_TIMEOUT,
            format!(
                "the tool did not answer within {} s; the outcome is unknown",
                timeout.as_secs()
            ),
        ));
    };
    match answered? {
        Ok(executed) => from_executed(call, executed),
        // The mcp-proxy saw a newer epoch of the run: another runtime drives it now, and this one
        // stops (docs/runtime.md, "Run ownership"); nothing was sent.
        Err(e) if rt.cfg.cluster.leases && refused_as_stale(&e) => {
            rt.lose_run(&inv.run, &e.message);
            Err(lease_lost(&inv.run))
        }
        Err(e) => {
            let (outcome, what) = if e.kind == PortErrorKind::Unavailable {
                (Outcome::NotSent, "nothing was sent")
            } else {
                (
                    Outcome::Unknown,
                    "the outcome is unknown and the call is not retried",
                )
            };
            Ok(failed(
                call,
                outcome,
                TOOL_EXECUTOR_UNAVAILABLE,
                format!(
                    "the tool's host could not run the call ({what}): {}",
                    e.message
                ),
            ))
        }
    }
}

/// A host call that failed: the model's error result, with what is known of whether it was sent.
fn failed(
    call: &ToolInvocation,
    outcome: Outcome,
    code: codes::ErrorCode,
    message: String,
) -> Dispatched {
    Dispatched {
        outcome,
        ..Dispatched::known(AgentToolResult::error(call, code, message), Effect::None)
    }
}

/// A host's answer as the call's result and effect; an answer without a readable result is a
/// broken executor.
fn from_executed(call: &ToolInvocation, e: Executed) -> Result<Dispatched, RuntimeError> {
    let result = e
        .result
        .map_err(|m| RuntimeError::new(codes::TOOL_RESULT_IDENTITY_MISMATCH, m))?;
    let effect = if result.is_error {
        Effect::None
    } else if call.tool_id.is_builtin(builtin::WORKSPACE_WRITE_FILE) {
        Effect::Wrote {
            path: path_arg(call),
            kind: "workspace_file_written",
        }
    } else if call.tool_id.is_builtin(builtin::WORKSPACE_APPLY_PATCH) {
        Effect::Wrote {
            path: path_arg(call),
            kind: "workspace_patch_applied",
        }
    } else {
        Effect::None
    };
    Ok(Dispatched {
        result,
        outcome: e.outcome,
        raw: e.raw,
        effect,
        objects: Vec::new(),
        events: Vec::new(),
    })
}

fn path_arg(call: &ToolInvocation) -> String {
    call.arguments
        .as_object()
        .and_then(|a| a.get("path"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}
