//! Governance and the cycle check for an admitted call: the hardline, sandbox and zone rules over
//! the run's roots and paths (a denial is a result, or fails the run when the policy says so), then
//! the invocation's cycle detector (a warning is appended to the result, a stop ends the
//! invocation).

use serde_json::{Map, Value, json};
use toolplane_core::category;
use toolplane_core::cycle::{self, CycleVerdict};
use toolplane_core::error::{AGENT_CYCLE_DETECTED, POLICY_DENIED};
use toolplane_core::governance::{self, GovernanceContext};
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::policy::DeniedCallMode;
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::ToolBinding;

use super::record::CallRecord;
use crate::context::Runtime;
use crate::state::{Event, Failure, Invocation, InvocationInner};

/// What governance and the cycle check decided.
#[derive(Debug)]
pub enum Governed {
    /// The call runs; the cycle detector's verdict goes with it (a warning to append).
    Allowed(CycleVerdict),
    /// Denied by policy: the denial is the call's result.
    Denied(AgentToolResult),
    /// The invocation stops (a policy that fails the run, or a cycle): the failure and the
    /// call's result.
    Stopped(Failure, AgentToolResult),
}

/// Governs one admitted call made for `cell` (the caller's cell; see [`check`]).
#[allow(clippy::too_many_arguments)]
pub fn govern(
    rt: &Runtime,
    inv: &Invocation,
    inner: &mut InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    args: &Map<String, Value>,
    cell: &str,
    rec: &mut CallRecord,
) -> Governed {
    match check(rt, inv, inner, binding, call, args, cell) {
        Some(Err(fail)) => {
            let result = AgentToolResult::error(call, POLICY_DENIED, fail.message.clone());
            return Governed::Stopped(fail, result);
        }
        Some(Ok(denied)) => return Governed::Denied(denied),
        None => {}
    }
    let verdict = observe_cycle(inner, binding, call, args);
    if let CycleVerdict::Stop { streak } = verdict {
        rec.events.push(Event::new("cycle_detected", json!({"invocationId": inv.id, "toolId": call.tool_id.to_string(), "streak": streak, "verdict": "stop"})).inv(&inv.id).warn());
        let message = format!(
            "`{}` was called {streak} times in a row; the invocation is stopped to break the loop",
            binding.alias
        );
        let failure = Failure {
            code: AGENT_CYCLE_DETECTED.as_str().into(),
            message: message.clone(),
            retryable: true,
        };
        return Governed::Stopped(
            failure,
            AgentToolResult::error(call, AGENT_CYCLE_DETECTED, message),
        );
    }
    Governed::Allowed(verdict)
}

/// Governance (Hardline → Sandbox → Zone). `None` lets the call run; `Some(Ok(result))` is a
/// policy-denied result; `Some(Err(failure))` fails the run (the policy's `fail_run` mode).
/// Zone compares the run's cell with `call_cell`, the cell of whoever the call is made for (the
/// caller of `ExecuteToolCalls`; the run's own cell for the calls of the runtime's loop).
fn check(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    args: &Map<String, Value>,
    call_cell: &str,
) -> Option<Result<AgentToolResult, Failure>> {
    let denial = inv.run.with(|record| {
        let ctx = GovernanceContext {
            run_cell: &record.cell_id,
            call_cell,
            visible_roots: &inner.snapshot.workspace.visible,
            writable_roots: &inner.snapshot.workspace.writable,
            allow_paths: &record.allow_paths,
            deny_paths: &record.deny_paths,
            work_dir: &record.work_dir,
        };
        governance::check(&rt.cfg.hardline, &ctx, binding.descriptor.id(), args).err()
    })?;
    let message =
        format!("denied by {:?} governance: {}", denial.layer, denial.reason).to_lowercase();
    Some(match inner.snapshot.denied_call_mode {
        DeniedCallMode::Result => Ok(AgentToolResult::error(call, POLICY_DENIED, message)
            .with_structured(json!({"layer": denial.layer, "reason": denial.reason}))),
        DeniedCallMode::FailRun => Err(Failure {
            code: POLICY_DENIED.as_str().into(),
            message,
            retryable: false,
        }),
    })
}

fn observe_cycle(
    inner: &mut InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> CycleVerdict {
    let args_text = Value::Object(args.clone()).to_string();
    let cat = category::resolve_call(
        &call.tool_id,
        binding.descriptor.annotations(),
        &inner.profile.tools.extra_categories,
        Some(&Value::Object(args.clone())),
    );
    inner.cycle.observe(
        &call.tool_id,
        cat,
        binding.progress_aware,
        cycle::fingerprint(&args_text),
    )
}
