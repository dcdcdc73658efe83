//! The tool-call pipeline: for each decoded call of a turn, one at a time —
//! [`admit`] (the turn's order, the arguments, the gate) → [`govern`] (governance, then the cycle
//! check) → [`execute`] (the call's executor, the result's identity) → [`record`] (large-result
//! view, audit objects, journal records) — and after the turn, [`turn_end`] (terminal tools, the
//! round limit, the next turn) and [`publish`] (the one auto-publish).
//!
//! A call that needs a person is held after governance ([`hold`]): the turn answers its other
//! calls and keeps the held ones, collected by the host (`CollectToolResults`) or by the
//! runtime-driven loop once decided — both through [`collect`].
//!
//! Host-driven `ExecuteToolCalls` ([`host`]) and the runtime-driven loop both run turns through
//! [`run_turn`], so the two modes cannot drift apart. The invocation's lock is held by the caller
//! for the whole turn: calls of one invocation never interleave.
//!
//! Durability: a call's audit objects (arguments, result, readable view) are put first and its
//! journal records appended after them in one group, so one call costs one group commit; a record
//! never names an object that could be missing.

pub mod admit;
mod catalogs;
pub mod collect;
pub mod execute;
pub mod govern;
pub mod hold;
pub mod host;
pub mod publish;
pub mod record;
pub mod turn_end;

use std::time::Instant;

use serde_json::Value;
use toolplane_core::builtin;
use toolplane_core::cycle::CycleVerdict;
use toolplane_core::error::{self as codes, AGENT_TOOL_AFTER_FINISH};
use toolplane_core::invocation::{ToolArguments, ToolInvocation};
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::ToolBinding;

use crate::context::Runtime;
use crate::context::ports::Outcome;
use crate::error::RuntimeError;
use crate::state::{Failure, HeldCall, Invocation, InvocationInner};
use crate::tools::{Dispatched, Effect, HandoffRequest};
use govern::Governed;
use hold::Hold;
use record::CallRecord;

pub use host::{Awaiting, HostCalls, HostTurn};
pub use record::{PREVIEW_CHARS, call_file};
pub use turn_end::{HandedOff, TurnEnd, ensure_open};

/// What one call produced, for the response's `ToolCallDetail`.
#[derive(Debug, Clone)]
pub struct CallDetail {
    pub call_id: String,
    pub tool_id: String,
    pub alias: String,
    pub outcome: Outcome,
    pub elapsed_ms: u64,
    pub args_path: String,
    pub result_path: String,
    pub readable_view_path: String,
}

/// How a turn ended the invocation, if it did.
#[derive(Debug, Clone, PartialEq)]
pub enum Terminal {
    Finished,
    Returned,
    HandedOff(Box<HandoffRequest>),
    Failed(Failure),
}

#[derive(Debug, Default)]
pub struct TurnOutcome {
    pub results: Vec<AgentToolResult>,
    pub details: Vec<CallDetail>,
    pub terminal: Option<Terminal>,
    /// The calls held for a decision (their places in `results` hold placeholders).
    pub held: Vec<HeldCall>,
    /// The last successful write or patch of the turn (the auto-publish candidate).
    pub last_mutation: Option<String>,
}

/// What the turn has seen so far that decides later calls and the turn's end.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// A finishing tool succeeded: later calls of the turn are not run.
    pub(crate) terminal_done: bool,
    /// The last successful write or patch of the turn (the auto-publish candidate).
    pub(crate) last_mutation: Option<String>,
}

/// A call's answer, and the failure that stops the invocation when it must.
struct Decided {
    d: Dispatched,
    stop: Option<Failure>,
    /// The call is held under this approval, with the cycle detector's verdict.
    held: Option<(String, CycleVerdict)>,
}

impl Decided {
    fn answer(result: AgentToolResult) -> Self {
        Decided {
            d: Dispatched::not_sent(result),
            stop: None,
            held: None,
        }
    }

    /// A result known without running the call (an interrupted turn's call its old driver
    /// journalled).
    fn known(result: AgentToolResult) -> Self {
        Decided {
            d: Dispatched::known(result, crate::tools::Effect::None),
            stop: None,
            held: None,
        }
    }
}

/// Runs one turn's decoded calls, made for `cell` (the caller's cell; governance's Zone layer
/// denies every call when it is not the run's). A provider-contract violation found by the gate
/// ends the turn with an error (the invocation fails); everything else becomes a result.
///
/// Beside the calls, the catalog is asked whether an MCP server the snapshot binds has a newer
/// tool list; a change not yet told is journalled after the calls ([`catalogs`]).
pub async fn run_turn(
    rt: &Runtime,
    inv: &Invocation,
    inner: &mut InvocationInner,
    calls: Vec<ToolInvocation>,
    cell: &str,
) -> Result<TurnOutcome, RuntimeError> {
    let watched = catalogs::Watched {
        cell: inv.run.cell.clone(),
        invocation_id: inv.id.clone(),
        snapshot: std::sync::Arc::clone(&inner.snapshot),
        allow: inner.profile.tools.allow.clone(),
        deny: inner.profile.tools.deny.clone(),
    };
    let (out, changes) = tokio::join!(
        run_calls(rt, inv, inner, calls, cell),
        catalogs::changes(rt, watched)
    );
    let out = out?;
    if !changes.is_empty() && !inv.run.is_cancelled() {
        // The record only informs; a journal that refuses it fails no turn.
        if let Err(e) = rt
            .append(&inv.run, inv.run.epoch(), Vec::new(), changes)
            .await
        {
            tracing::warn!(invocation = %inv.id, error = %e, "mcp_catalog_changed not journalled");
        }
    }
    if out.terminal.is_some() {
        rt.told_catalogs.forget(&inv.id);
    }
    Ok(out)
}

/// The turn's calls, one at a time.
async fn run_calls(
    rt: &Runtime,
    inv: &Invocation,
    inner: &mut InvocationInner,
    calls: Vec<ToolInvocation>,
    cell: &str,
) -> Result<TurnOutcome, RuntimeError> {
    let mut out = TurnOutcome::default();
    let mut progress = Progress::default();
    let last = calls.len().saturating_sub(1);
    for (index, call) in calls.iter().enumerate() {
        let started = Instant::now();
        let Some(binding) = inner.snapshot.binding(&call.tool_id).cloned() else {
            return Err(RuntimeError::new(
                codes::MODEL_UNKNOWN_TOOL_ALIAS,
                format!("`{}` is not in this invocation's snapshot", call.tool_id),
            ));
        };
        let mut rec = CallRecord::new(inv, inner, &binding, call);
        let refusal = admit::in_order(&binding, call, progress.terminal_done, index == last)
            .or_else(|| admit::after_held(&binding, call, !out.held.is_empty()));
        let Decided { mut d, stop, held } = match (refusal, admit::recovered(inner, call)) {
            (Some(refusal), _) => Decided::answer(refusal),
            (None, Some(known)) => Decided::known(known),
            (None, None) => match admit::outcome_unknown(inner, &binding, call) {
                Some(unknown) => Decided::answer(unknown),
                None => decide(rt, inv, inner, &binding, call, cell, &mut rec).await?,
            },
        };
        if let Some((approval_id, verdict)) = held {
            out.held.push(HeldCall {
                index,
                approval_id,
                verdict,
            });
            out.results.push(d.result);
            continue;
        }
        let detail = record::store(rt, inv, inner, &binding, call, rec, &mut d, started).await?;
        // Tasks this call delegated start only now that their registration is journalled.
        rt.launch_pending(&inv.run);
        progress.note(call, &d.result);
        if !d.result.is_error {
            match d.effect {
                Effect::Finished => out.terminal = Some(Terminal::Finished),
                Effect::Returned => out.terminal = Some(Terminal::Returned),
                Effect::HandedOff(request) => out.terminal = Some(Terminal::HandedOff(request)),
                _ => {}
            }
        }
        out.details.push(detail);
        out.results.push(d.result);
        if let Some(fail) = stop {
            // Every call of the turn gets an answer (providers refuse a history with an unanswered
            // call); the ones after the stop were not run.
            for rest in &calls[index + 1..] {
                out.results.push(AgentToolResult::error(
                    rest,
                    AGENT_TOOL_AFTER_FINISH,
                    format!("not run: {}", fail.message),
                ));
            }
            out.terminal = Some(Terminal::Failed(fail));
            break;
        }
    }
    out.last_mutation = progress.last_mutation;
    // A cancelled run publishes nothing more; a turn with held calls publishes once collected.
    if out.terminal.is_none() && out.held.is_empty() && !inv.run.is_cancelled() {
        publish::auto_publish(rt, inv, inner, out.last_mutation.clone()).await?;
    }
    Ok(out)
}

/// Admit → govern → execute for a call in its place in the turn.
async fn decide(
    rt: &Runtime,
    inv: &Invocation,
    inner: &mut InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    cell: &str,
    rec: &mut CallRecord,
) -> Result<Decided, RuntimeError> {
    let args = match admit::admit(rt, &inv.run, inner, binding, call)? {
        Ok(args) => args,
        Err(refusal) => {
            // The first call the run's budget refuses tells the journal the budget is used up.
            rec.events.extend(inv.run.budget_exhausted_event(&inv.id));
            return Ok(Decided::answer(refusal));
        }
    };
    let verdict = match govern::govern(rt, inv, inner, binding, call, args, cell, rec) {
        Governed::Denied(result) => return Ok(Decided::answer(result)),
        Governed::Stopped(failure, result) => {
            return Ok(Decided {
                d: Dispatched::not_sent(result),
                stop: Some(failure),
                held: None,
            });
        }
        Governed::Allowed(verdict) => verdict,
    };
    match hold::hold(rt, inv, inner, binding, call, args, rec).await? {
        Hold::Run => {}
        Hold::Answered(result) => {
            return Ok(Decided {
                d: Dispatched::known(result, crate::tools::Effect::None),
                stop: None,
                held: None,
            });
        }
        Hold::Refused(result) => return Ok(Decided::answer(result)),
        Hold::Held(approval_id) => {
            let placeholder = AgentToolResult::error(
                call,
                codes::POLICY_APPROVAL_DENIED,
                "held for approval".to_owned(),
            );
            return Ok(Decided {
                d: Dispatched::not_sent(placeholder),
                stop: None,
                held: Some((approval_id, verdict)),
            });
        }
    }
    let d = execute::execute(rt, inv, inner, binding, call, args, verdict, rec).await?;
    Ok(Decided {
        d,
        stop: None,
        held: None,
    })
}

impl Progress {
    /// Notes a call's success: a finishing tool, or a write the turn may auto-publish.
    pub(crate) fn note(&mut self, call: &ToolInvocation, result: &AgentToolResult) {
        if result.is_error {
            return;
        }
        if builtin::is_terminal(&call.tool_id) {
            self.terminal_done = true;
        }
        if (call.tool_id.is_builtin(builtin::WORKSPACE_WRITE_FILE)
            || call.tool_id.is_builtin(builtin::WORKSPACE_APPLY_PATCH))
            && let ToolArguments::Object { value: args } = &call.arguments
            && let Some(p) = args.get("path").and_then(Value::as_str)
        {
            self.last_mutation = Some(p.to_owned());
        }
    }
}
