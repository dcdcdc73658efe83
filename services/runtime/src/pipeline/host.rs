//! Host-driven turns (`ExecuteToolCalls`): the host's provider-native calls are checked against
//! the current turn and format, decoded through this turn's aliases, run through the same
//! pipeline as the runtime's own loop, and answered as provider-native result messages.
//!
//! The host may change the tool choice of the next turn with the calls; a turn without calls (a
//! text answer the choice allows) keeps the same turn current and uses up no round.

use std::sync::Arc;

use serde_json::{Value, json};
use toolplane_core::error::{self as codes, ErrorClass};
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::turn::{ToolChoice, ToolTurnContract};
use toolplane_model::ProviderFormat;

use super::turn_end::{HandedOff, TurnEnd, ensure_open};
use super::{TurnOutcome, run_turn};
use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::lifecycle::check_epoch;
use crate::state::{
    AuditObject, Event, Failure, HeldCall, HeldTurn, Invocation, InvocationInner, InvocationStatus,
    Task, TurnStage, turn_id,
};
use crate::tools::agents::take_injections;

/// The answer to one host-driven turn.
#[derive(Debug)]
pub struct HostTurn {
    pub outcome: TurnOutcome,
    pub result_messages: Value,
    pub status: InvocationStatus,
    pub next_turn_id: Option<String>,
    /// The next turn's tool choice as its provider request field (`tool_choice`, `toolConfig`),
    /// JSON text, when there is a next turn that advertises tools.
    pub next_choice: Option<String>,
    pub failure: Option<Failure>,
    /// The invocation that took the run over, when this turn handed off.
    pub handoff: Option<HandedOff>,
    /// Finished delegated tasks whose results go into the next model request.
    pub injected: Vec<Task>,
    /// Calls held for a decision: while not empty the turn is not over (no result messages, no
    /// next turn) and the host collects it with `CollectToolResults`.
    pub awaiting: Vec<Awaiting>,
}

/// A call of a host-driven turn held for a decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Awaiting {
    pub call_id: String,
    pub tool_id: String,
    pub approval_id: String,
}

/// One host-driven turn's request.
#[derive(Debug)]
pub struct HostCalls<'a> {
    /// The turn the calls answer.
    pub turn: &'a str,
    pub format: ProviderFormat,
    /// The provider-native assistant turn.
    pub calls: &'a Value,
    pub epoch: Option<u64>,
    /// The complete model response, stored for audit.
    pub model_response: Option<String>,
    /// The tool choice of the next turn; `None` keeps the current one.
    pub next_choice: Option<ToolChoice>,
    /// The cell the calls are made for: the caller's, from its credential; `None` is the run's
    /// own cell (authentication off). Governance's Zone layer refuses every call of a turn made
    /// for another cell than the run's.
    pub cell: Option<&'a str>,
}

impl Runtime {
    /// One host-driven turn without a change of tool choice; see [`Runtime::execute_host_calls`].
    pub async fn execute_host_turn(
        &self,
        inv: &Arc<Invocation>,
        turn: &str,
        format: ProviderFormat,
        calls: &Value,
        epoch: Option<u64>,
        model_response: Option<String>,
    ) -> Result<HostTurn, RuntimeError> {
        let req = HostCalls {
            turn,
            format,
            calls,
            epoch,
            model_response,
            next_choice: None,
            cell: None,
        };
        self.execute_host_calls(inv, req).await
    }

    /// One host-driven turn: check the next tool choice, decode the provider-native calls through
    /// this turn's aliases, run them, encode the results, and advance the turn — unless there were
    /// no calls, which keeps the turn current.
    pub async fn execute_host_calls(
        &self,
        inv: &Arc<Invocation>,
        req: HostCalls<'_>,
    ) -> Result<HostTurn, RuntimeError> {
        let format = req.format;
        inv.touch();
        check_epoch(&inv.run, req.epoch)?;
        let mut inner = inv.inner.lock().await;
        if inner.status == InvocationStatus::HandedOff {
            return self
                .calls_after_handoff(inv, &inner, format, req.calls)
                .await;
        }
        accepts(inv, &inner, req.turn, format)?;
        if let Some(choice) = &req.next_choice {
            checked_choice(&inner, choice)?;
        }
        if let Some(body) = req.model_response {
            self.store_model_response(inv, inner.round, body).await?;
        }
        let calls = self
            .decode_or_fail(inv, &mut inner, format, req.calls)
            .await?;
        let cell = req.cell.unwrap_or(&inv.run.cell);
        if self.checkpoints_on() && !calls.is_empty() {
            let turn = HeldTurn::running(inner.round, calls.clone(), None);
            self.checkpoint(inv, &mut inner, TurnStage::Running, &turn)
                .await;
        }
        let outcome = self.run_calls(inv, &mut inner, &calls, cell).await?;
        if !outcome.held.is_empty() {
            let answer = hold_turn(&mut inner, calls, outcome, req.next_choice);
            if let Some(held) = &inner.held {
                self.keep_held(inv, &inner, held).await;
            }
            return Ok(answer);
        }
        let result_messages = Value::Array(toolplane_model::encode_results(
            format,
            &inner.turn,
            &calls,
            &outcome.results,
        )?);
        let end = if calls.is_empty() {
            TurnEnd {
                status: InvocationStatus::Open,
                failure: None,
                handoff: None,
            }
        } else {
            self.after_turn(inv, &mut inner, &outcome).await?
        };
        self.answer(
            inv,
            &mut inner,
            outcome,
            result_messages,
            end,
            req.next_choice,
        )
        .await
    }

    /// The host's calls decoded through the current turn; a call the contract refuses fails the
    /// invocation.
    async fn decode_or_fail(
        &self,
        inv: &Arc<Invocation>,
        inner: &mut InvocationInner,
        format: ProviderFormat,
        calls: &Value,
    ) -> Result<Vec<ToolInvocation>, RuntimeError> {
        match toolplane_model::decode_calls(format, &inner.turn, calls) {
            Ok(d) => Ok(d.invocations),
            Err(e) => {
                let failure = Failure {
                    code: e.code.as_str().into(),
                    message: e.message.clone(),
                    retryable: false,
                };
                self.fail_invocation(inv, inner, failure).await?;
                Err(e.into())
            }
        }
    }

    /// Runs the turn's calls for `cell` (the caller's), or journals a turn without calls (which
    /// runs nothing).
    async fn run_calls(
        &self,
        inv: &Arc<Invocation>,
        inner: &mut InvocationInner,
        calls: &[ToolInvocation],
        cell: &str,
    ) -> Result<TurnOutcome, RuntimeError> {
        if calls.is_empty() {
            self.turn_without_calls(inv, inner).await?;
            return Ok(TurnOutcome::default());
        }
        self.run_or_fail(inv, inner, calls.to_vec(), cell).await
    }

    /// The answer to the host: while the invocation stays open, the next turn (under the host's
    /// new choice, if it sent one) and the results of finished delegated tasks.
    pub(crate) async fn answer(
        &self,
        inv: &Arc<Invocation>,
        inner: &mut InvocationInner,
        outcome: TurnOutcome,
        result_messages: Value,
        end: TurnEnd,
        next_choice: Option<ToolChoice>,
    ) -> Result<HostTurn, RuntimeError> {
        let open = end.status == InvocationStatus::Open;
        // A turn taken over as interrupted is over once answered.
        inner.interrupted = None;
        let (next_choice, injected) = if open {
            let choice = self.next_turn(inv, inner, next_choice).await?;
            if self.checkpoints_on() {
                let between = HeldTurn::between(inner.round, None);
                self.checkpoint(inv, inner, TurnStage::Between, &between)
                    .await;
            }
            (choice, take_injections(self, inv).await?)
        } else {
            (None, Vec::new())
        };
        Ok(HostTurn {
            outcome,
            result_messages,
            status: end.status,
            next_turn_id: open.then(|| turn_id(&inv.id, inner.round)),
            next_choice,
            failure: end.failure,
            handoff: end.handoff,
            injected,
            awaiting: Vec::new(),
        })
    }

    /// Runs the turn's calls; an error fails the invocation (retryable when the system failed).
    async fn run_or_fail(
        &self,
        inv: &Arc<Invocation>,
        inner: &mut InvocationInner,
        calls: Vec<ToolInvocation>,
        cell: &str,
    ) -> Result<TurnOutcome, RuntimeError> {
        match run_turn(self, inv, inner, calls, cell).await {
            Ok(o) => Ok(o),
            Err(e) => {
                let retryable = e.code().class() == ErrorClass::System;
                let failure = Failure {
                    code: e.code().as_str().into(),
                    message: e.0.message.clone(),
                    retryable,
                };
                self.fail_invocation(inv, inner, failure).await?;
                Err(e)
            }
        }
    }

    /// A turn without calls: journalled; the turn stays current and no round is used.
    async fn turn_without_calls(
        &self,
        inv: &Invocation,
        inner: &InvocationInner,
    ) -> Result<(), RuntimeError> {
        let ev = Event::new(
            "turn_without_calls",
            json!({"invocationId": inv.id, "round": inner.round, "choice": inner.turn.choice()}),
        )
        .inv(&inv.id);
        self.append(&inv.run, inv.run.epoch(), Vec::new(), vec![ev])
            .await
    }

    /// The next turn under the host's new choice, if it sent one: its tool choice as the provider
    /// request field, without the tools the host already has.
    async fn next_turn(
        &self,
        inv: &Invocation,
        inner: &mut InvocationInner,
        choice: Option<ToolChoice>,
    ) -> Result<Option<String>, RuntimeError> {
        if let Some(choice) = choice {
            self.change_choice(inv, inner, choice).await?;
        }
        Ok(toolplane_model::encode_tool_choice(
            inner.format,
            &inner.turn,
            &inner.snapshot,
        )?)
    }

    /// Replaces the current turn's tool choice (the turn the response returns) and journals the
    /// new contract.
    async fn change_choice(
        &self,
        inv: &Invocation,
        inner: &mut InvocationInner,
        choice: ToolChoice,
    ) -> Result<(), RuntimeError> {
        inner.turn = checked_choice(inner, &choice)?;
        let ev = Event::new(
            "tool_choice_changed",
            json!({"invocationId": inv.id, "round": inner.round, "choice": choice, "contract": inner.turn}),
        )
        .inv(&inv.id);
        self.append(&inv.run, inv.run.epoch(), Vec::new(), vec![ev])
            .await
    }

    /// Calls sent to an invocation that handed the run off: none runs, each is answered with
    /// `agent.tool_after_finish` so the host's conversation stays well-formed.
    async fn calls_after_handoff(
        &self,
        inv: &Arc<Invocation>,
        inner: &InvocationInner,
        format: ProviderFormat,
        calls: &Value,
    ) -> Result<HostTurn, RuntimeError> {
        let decoded = toolplane_model::decode_calls(format, &inner.turn, calls)?;
        let active = inv.run.with(|r| r.active_invocation_id.clone());
        let mut outcome = TurnOutcome::default();
        let mut events = Vec::new();
        for call in &decoded.invocations {
            outcome.results.push(toolplane_core::result::AgentToolResult::error(
                call,
                codes::AGENT_TOOL_AFTER_FINISH,
                format!("you handed the run off (it is now invocation `{active}`); calls after a handoff are not run"),
            ));
            events.push(
                Event::new(
                    "tool_call_failed",
                    json!({"round": inner.round, "invocationId": inv.id, "callId": call.call_id, "toolId": call.tool_id.to_string(), "isError": true, "errorCode": codes::AGENT_TOOL_AFTER_FINISH.as_str(), "outcome": "not_sent"}),
                )
                .inv(&inv.id)
                .warn(),
            );
        }
        if !events.is_empty() {
            self.append(&inv.run, inv.run.epoch(), Vec::new(), events)
                .await?;
        }
        let result_messages = Value::Array(toolplane_model::encode_results(
            format,
            &inner.turn,
            &decoded.invocations,
            &outcome.results,
        )?);
        Ok(HostTurn {
            outcome,
            result_messages,
            status: InvocationStatus::HandedOff,
            next_turn_id: None,
            next_choice: None,
            failure: None,
            handoff: None,
            injected: Vec::new(),
            awaiting: Vec::new(),
        })
    }

    /// Stores the model response the host sent with its calls, journalled with its path.
    async fn store_model_response(
        &self,
        inv: &Invocation,
        round: u32,
        body: String,
    ) -> Result<(), RuntimeError> {
        let path = crate::state::response_path(&inv.id, round, inv.run.epoch());
        let object = AuditObject {
            path: path.clone(),
            content: body.into_bytes(),
            content_type: "application/json",
        };
        let ev = Event::new(
            "model_response_stored",
            json!({"invocationId": inv.id, "round": round, "path": path}),
        )
        .inv(&inv.id);
        self.append(&inv.run, inv.run.epoch(), vec![object], vec![ev])
            .await?;
        Ok(())
    }
}

/// Whether the invocation takes calls for `turn` in `format` now: open, its run not cancelled,
/// the current turn, the invocation's format.
fn accepts(
    inv: &Invocation,
    inner: &InvocationInner,
    turn: &str,
    format: ProviderFormat,
) -> Result<(), RuntimeError> {
    ensure_open(inner, &inv.id)?;
    if let Some(held) = &inner.held {
        return Err(RuntimeError::new(
            codes::RUNTIME_APPROVAL_PENDING,
            format!(
                "turn `{}` has {} call(s) held for approval; collect them with CollectToolResults first",
                turn_id(&inv.id, held.round),
                held.held.len()
            ),
        ));
    }
    if inv.run.is_cancelled() {
        return Err(RuntimeError::new(
            codes::RUNTIME_INVOCATION_NOT_OPEN,
            format!("the run of invocation {} was cancelled", inv.id),
        ));
    }
    let current = turn_id(&inv.id, inner.round);
    if turn != current {
        let e = RuntimeError::new(
            codes::RUNTIME_STALE_TURN,
            format!("calls are for turn `{turn}` but the current turn is `{current}`"),
        );
        return Err(e);
    }
    if format != inner.format {
        return Err(RuntimeError::invalid(format!(
            "the invocation speaks {}, the calls are {}",
            inner.format.as_str(),
            format.as_str()
        )));
    }
    Ok(())
}

/// The contract of the current round under `choice`, if the choice is valid for the invocation: a
/// specific choice must name a tool of the snapshot, and a choice needing a call needs a tool.
fn checked_choice(
    inner: &InvocationInner,
    choice: &ToolChoice,
) -> Result<ToolTurnContract, RuntimeError> {
    let invalid = |e: toolplane_core::error::CoreError| {
        RuntimeError::invalid(format!("next_tool_choice: {}", e.message))
    };
    let turn =
        ToolTurnContract::advertised(&inner.snapshot, inner.round, choice.clone(), &inner.found)
            .map_err(invalid)?;
    toolplane_model::encode_tools(inner.format, &turn, &inner.snapshot).map_err(invalid)?;
    Ok(turn)
}

/// Keeps a turn with held calls in the invocation and answers with the calls that ran: no result
/// messages and no next turn until the host collects the turn.
fn hold_turn(
    inner: &mut InvocationInner,
    calls: Vec<ToolInvocation>,
    mut outcome: TurnOutcome,
    next_choice: Option<ToolChoice>,
) -> HostTurn {
    let held = std::mem::take(&mut outcome.held);
    let awaiting = awaiting_of(&calls, &held);
    let results = std::mem::take(&mut outcome.results);
    outcome.results = results
        .iter()
        .enumerate()
        .filter(|(i, _)| !held.iter().any(|h| h.index == *i))
        .map(|(_, r)| r.clone())
        .collect();
    inner.held = Some(HeldTurn {
        round: inner.round,
        calls,
        results,
        held,
        last_mutation: outcome.last_mutation.take(),
        next_choice,
        conversation: None,
    });
    HostTurn {
        outcome,
        result_messages: Value::Array(Vec::new()),
        status: InvocationStatus::Open,
        next_turn_id: None,
        next_choice: None,
        failure: None,
        handoff: None,
        injected: Vec::new(),
        awaiting,
    }
}

/// The held calls as the host sees them.
pub fn awaiting_of(calls: &[ToolInvocation], held: &[HeldCall]) -> Vec<Awaiting> {
    held.iter()
        .filter_map(|h| {
            let call = calls.get(h.index)?;
            Some(Awaiting {
                call_id: call.call_id.clone(),
                tool_id: call.tool_id.to_string(),
                approval_id: h.approval_id.clone(),
            })
        })
        .collect()
}
