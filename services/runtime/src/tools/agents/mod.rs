//! Agents calling agents: `agent.list`, `agent.delegate`, `agent.await`, `task.return`,
//! `agent.handoff` and sub-agents offered as tools.
//!
//! A delegated task is a return-mode child invocation of the target profile: its own snapshot
//! (commit, finish and delegation removed, `task.return` injected), an empty read-state, the
//! target's budgets, driven by the runtime on the target's model endpoint. Every run keeps a
//! book of its tasks (`state::tasks`); the `children` layer starts each task in the background, at
//! most `delegation.maxConcurrentChildren` of one parent at a time, so the parent never blocks on
//! `agent.delegate` — host-driven or runtime-driven alike. A finished task's result reaches the
//! parent once: through `agent.await`, or injected into the parent's next model request
//! (runtime-driven) or next `ExecuteToolCalls` response (host-driven).
//!
//! A child's snapshot never holds the tools it must not use (commit, finish, `agent.*`, sub-agent
//! tools: the core's compiler removes them), so the handlers here do not check for children.
//!
//! Owns the policy checks between a caller and a target and what each tool answers; the turn
//! pipeline records the calls, and the `children` layer drives the tasks.

mod delegate;
mod handoff;
mod list;
mod task_return;

use serde_json::{Map, Value};
use toolplane_core::Profile;
use toolplane_core::error::{AGENT_NO_MODEL, AGENT_NOT_ALLOWED, ErrorCode, TOOL_INVALID_ARGUMENTS};
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::ExitPolicy;

use super::{Dispatched, Effect};
use crate::state::InvocationInner;
pub use delegate::{capsule, delegate, injection_text, run_sub_agent, take_injections, wait};
pub use handoff::{HandoffRequest, handoff};
pub use list::list;
pub use task_return::task_return;

/// Most delegated tasks one run may hold.
pub const MAX_TASKS_PER_RUN: usize = 1000;
/// Longest task brief or handoff brief.
pub const MAX_BRIEF_BYTES: usize = 64 * 1024;
/// Longest `task.return` summary.
pub const MAX_SUMMARY_BYTES: usize = 256 * 1024;

/// Which relation `agent.list` and the checks are about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Delegate,
    Handoff,
}

/// Whether `caller` may delegate (or hand off) to `target`: the caller's targets, the target's
/// callable policy and allowed callers, and for delegation a model endpoint.
pub fn check_target(
    caller: &Profile,
    target: &Profile,
    purpose: Purpose,
) -> Result<(), (ErrorCode, String)> {
    let d = &caller.delegation;
    let id = &target.id;
    if !d.targets.iter().any(|t| t == "*" || t == id) {
        return Err((
            AGENT_NOT_ALLOWED,
            format!("`{id}` is not among the agents you may call"),
        ));
    }
    let t = &target.delegation;
    if !t.callable {
        return Err((
            AGENT_NOT_ALLOWED,
            format!("`{id}` does not take work from other agents"),
        ));
    }
    if purpose == Purpose::Handoff && !t.allow_as_handoff_target {
        return Err((
            AGENT_NOT_ALLOWED,
            format!("`{id}` does not accept handoffs"),
        ));
    }
    if !t.allowed_callers.is_empty() && !t.allowed_callers.iter().any(|c| c == &caller.id) {
        return Err((
            AGENT_NOT_ALLOWED,
            format!(
                "`{id}` accepts work only from {}",
                t.allowed_callers
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if purpose == Purpose::Delegate && target.model.is_none() {
        return Err((
            AGENT_NO_MODEL,
            format!("`{id}` has no model endpoint, so it cannot run delegated work"),
        ));
    }
    Ok(())
}

fn refused(call: &ToolInvocation, code: ErrorCode, message: impl Into<String>) -> Dispatched {
    Dispatched::known(AgentToolResult::error(call, code, message), Effect::None)
}

fn string_arg<'a>(args: &'a Map<String, Value>, name: &str) -> &'a str {
    args.get(name).and_then(Value::as_str).unwrap_or("").trim()
}

/// The brief argument `name`, or the refusal when it is empty or too long.
fn brief_arg<'a>(
    args: &'a Map<String, Value>,
    name: &str,
    call: &ToolInvocation,
) -> Result<&'a str, Box<Dispatched>> {
    let brief = string_arg(args, name);
    if brief.is_empty() || brief.len() > MAX_BRIEF_BYTES {
        return Err(Box::new(refused(
            call,
            TOOL_INVALID_ARGUMENTS,
            format!("{name} must be a brief of 1 to {MAX_BRIEF_BYTES} bytes"),
        )));
    }
    Ok(brief)
}

/// The alias `agent.await` has in this invocation, for messages that tell the model to call it.
fn await_alias(inner: &InvocationInner) -> String {
    inner
        .snapshot
        .builtin(toolplane_core::builtin::AGENT_AWAIT)
        .map(|b| b.alias.to_string())
        .unwrap_or_else(|| "agent_await".into())
}

fn depth_of(exit: &ExitPolicy) -> u32 {
    match exit {
        ExitPolicy::Handoff { depth, .. } => *depth,
        _ => 0,
    }
}
