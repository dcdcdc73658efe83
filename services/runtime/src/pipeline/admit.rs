//! Admission: whether a call may run at all in its place in the turn — a finishing tool must be
//! the turn's last call and nothing runs after one, the arguments must be a JSON object, and the
//! gate must accept the call against the turn contract, the invocation's budgets and the run's
//! (shared by all its invocations and children, docs/runtime.md "Run budgets"), and the
//! arguments of a tool the plane does not execute itself (MCP, external hosts, sub-agents) must
//! match its input schema. The schema is checked after the gate, so a call with wrong arguments
//! counts against the budgets like any call the gate let through (as a builtin's does, which its
//! executor checks): a model that keeps sending them is bounded by those budgets.

use serde_json::{Map, Value, json};
use toolplane_core::builtin;
use toolplane_core::error::{
    AGENT_TOOL_AFTER_FINISH, ErrorClass, TOOL_INVALID_ARGUMENTS, TOOL_OUTCOME_UNKNOWN,
};
use toolplane_core::id::Provider;
use toolplane_core::invocation::{ToolArguments, ToolInvocation};
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::ToolBinding;

use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::state::{InvocationInner, Run};

/// The refusal of a call out of order: after a finishing tool succeeded in this turn, or a
/// finishing tool that is not the turn's last call.
pub fn in_order(
    binding: &ToolBinding,
    call: &ToolInvocation,
    terminal_done: bool,
    is_last: bool,
) -> Option<AgentToolResult> {
    if terminal_done {
        return Some(AgentToolResult::error(
            call,
            AGENT_TOOL_AFTER_FINISH,
            "a finishing tool was already called in this turn; calls after it are not run"
                .to_owned(),
        ));
    }
    if builtin::is_terminal(&call.tool_id) && !is_last {
        return Some(AgentToolResult::error(
            call,
            AGENT_TOOL_AFTER_FINISH,
            format!(
                "`{}` ends your work, so it must be the last call of a turn; call it again next turn after your other calls",
                binding.alias
            ),
        ));
    }
    None
}

/// The stored result of a call of an interrupted turn that its old driver journalled before it
/// stopped: not run again, and not unknown either.
pub fn recovered(inner: &InvocationInner, call: &ToolInvocation) -> Option<AgentToolResult> {
    if !inner.outcome_unknown(&call.call_id) {
        return None;
    }
    inner.recovered.get(&call.call_id).cloned()
}

/// The answer to a call whose outcome is unknown: it was running when the runtime that drove the
/// run stopped, and this runtime took the run over (docs/runtime.md, "Taking a run over"). It is
/// not run again — it may have taken effect — unless its tool says running it again is harmless
/// (MCP's `idempotentHint` or `readOnlyHint`), or it is `workspace.finish`.
pub fn outcome_unknown(
    inner: &InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
) -> Option<AgentToolResult> {
    if !inner.outcome_unknown(&call.call_id) {
        return None;
    }
    let hints = binding.descriptor.annotations();
    if hints.idempotent_hint == Some(true) || hints.read_only_hint == Some(true) {
        return None;
    }
    // `workspace.finish` only decides the invocation's end (the end itself is journalled after
    // it): running it again is harmless.
    if call.tool_id.is_builtin(builtin::WORKSPACE_FINISH) {
        return None;
    }
    Some(AgentToolResult::error(
        call,
        TOOL_OUTCOME_UNKNOWN,
        format!(
            "`{}` was running when the runtime driving this run stopped; whether it took effect is unknown, so it was not run again. Check its effect before calling it again.",
            binding.alias
        ),
    ))
}

/// The refusal of a finishing tool after a call of the same turn was held for approval: the turn
/// cannot end while a call of it waits.
pub fn after_held(
    binding: &ToolBinding,
    call: &ToolInvocation,
    held_before: bool,
) -> Option<AgentToolResult> {
    (held_before && builtin::is_terminal(&call.tool_id)).then(|| {
        AgentToolResult::error(
            call,
            AGENT_TOOL_AFTER_FINISH,
            format!(
                "`{}` was not run: an earlier call of this turn waits for approval; call it again next turn",
                binding.alias
            ),
        )
    })
}

/// The call's arguments once the gate reserved the call; the refusal the model sees otherwise.
/// A provider-contract violation is an error: the turn ends and the invocation fails.
pub fn admit<'c>(
    rt: &Runtime,
    run: &Run,
    inner: &mut InvocationInner,
    binding: &ToolBinding,
    call: &'c ToolInvocation,
) -> Result<Result<&'c Map<String, Value>, AgentToolResult>, RuntimeError> {
    let args = match &call.arguments {
        ToolArguments::Invalid { reason, .. } => {
            return Ok(Err(AgentToolResult::error(
                call,
                TOOL_INVALID_ARGUMENTS,
                format!(
                    "{reason}; send the arguments as one JSON object matching the tool's schema"
                ),
            )));
        }
        ToolArguments::Object { value } => value,
    };
    let within_run = || run.with_budget(|b| b.reserve_call(&call.tool_id));
    match inner
        .gate
        .check_and_reserve_within(&inner.turn, call, within_run)
    {
        Err(e) if e.class() == ErrorClass::ProviderContract => {
            rt.metrics.gate_refusal(e.code.as_str());
            Err(e.into())
        }
        Err(e) => {
            rt.metrics.gate_refusal(e.code.as_str());
            Ok(Err(AgentToolResult::from_error(call, &e)))
        }
        Ok(_) => Ok(match check_schema(inner, binding, call, args) {
            Some(refusal) => Err(refusal),
            None => Ok(args),
        }),
    }
}

/// The refusal of arguments that break the tool's input schema, listing where. Builtins are left
/// to their executors, whose own checks give more specific advice.
fn check_schema(
    inner: &mut InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Option<AgentToolResult> {
    if matches!(call.tool_id.provider(), Provider::Builtin) {
        return None;
    }
    let violations = inner
        .schemas
        .check_arguments(&binding.descriptor, &Value::Object(args.clone()))
        .err()?;
    Some(
        AgentToolResult::error(
            call,
            TOOL_INVALID_ARGUMENTS,
            format!(
                "the arguments do not match `{}`'s input schema:\n{}\nfix these and call it again",
                binding.alias,
                violations.summary()
            ),
        )
        .with_structured(json!({"violations": violations.violations, "total": violations.total})),
    )
}
