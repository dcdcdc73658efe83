//! Host-driven turns (`ExecuteToolCalls`): the host's provider-native calls are checked against
//! the current turn and format, decoded through this turn's aliases, run through the same
//! pipeline as the runtime's own loop, and answered as provider-native result messages.

use std::sync::Arc;

use serde_json::{Value, json};
use toolplane_core::error::{self as codes, ErrorClass};
use toolplane_model::ProviderFormat;

use super::turn_end::{HandedOff, ensure_open};
use super::{TurnOutcome, run_turn};
use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::lifecycle::check_epoch;
use crate::state::{
    AuditObject, Event, Failure, Invocation, InvocationInner, InvocationStatus, Task, turn_id,
};
use crate::tools::agents::take_injections;

/// The answer to one host-driven turn.
#[derive(Debug)]
pub struct HostTurn {
    pub outcome: TurnOutcome,
    pub result_messages: Value,
    pub status: InvocationStatus,
    pub next_turn_id: Option<String>,
    pub failure: Option<Failure>,
    /// The invocation that took the run over, when this turn handed off.
    pub handoff: Option<HandedOff>,
    /// Finished delegated tasks whose results go into the next model request.
    pub injected: Vec<Task>,
}

impl Runtime {
    /// One host-driven turn: decode the provider-native calls through this turn's aliases, run them,
    /// encode the results, and advance the turn.
    pub async fn execute_host_turn(
        &self,
        inv: &Arc<Invocation>,
        turn: &str,
        format: ProviderFormat,
        calls: &Value,
        epoch: Option<u64>,
        model_response: Option<String>,
    ) -> Result<HostTurn, RuntimeError> {
        inv.touch();
        check_epoch(&inv.run, epoch)?;
        let mut inner = inv.inner.lock().await;
        if inner.status == InvocationStatus::HandedOff {
            return self.calls_after_handoff(inv, &inner, format, calls).await;
        }
        accepts(inv, &inner, turn, format)?;
        if let Some(body) = model_response {
            self.store_model_response(inv, inner.round, body).await?;
        }
        let decoded = match toolplane_model::decode_calls(format, &inner.turn, calls) {
            Ok(d) => d,
            Err(e) => {
                self.fail_invocation(
                    inv,
                    &mut inner,
                    Failure {
                        code: e.code.as_str().into(),
                        message: e.message.clone(),
                        retryable: false,
                    },
                )
                .await?;
                return Err(e.into());
            }
        };
        let calls = decoded.invocations.clone();
        let outcome = match run_turn(self, inv, &mut inner, decoded.invocations).await {
            Ok(o) => o,
            Err(e) => {
                let retryable = e.code().class() == ErrorClass::System;
                self.fail_invocation(
                    inv,
                    &mut inner,
                    Failure {
                        code: e.code().as_str().into(),
                        message: e.0.message.clone(),
                        retryable,
                    },
                )
                .await?;
                return Err(e);
            }
        };
        let result_messages = Value::Array(toolplane_model::encode_results(
            format,
            &inner.turn,
            &calls,
            &outcome.results,
        )?);
        let end = self.after_turn(inv, &mut inner, &outcome).await?;
        let open = end.status == InvocationStatus::Open;
        let injected = if open {
            take_injections(self, inv).await?
        } else {
            Vec::new()
        };
        Ok(HostTurn {
            outcome,
            result_messages,
            status: end.status,
            next_turn_id: open.then(|| turn_id(&inv.id, inner.round)),
            failure: end.failure,
            handoff: end.handoff,
            injected,
        })
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
            failure: None,
            handoff: None,
            injected: Vec::new(),
        })
    }

    /// Stores the model response the host sent with its calls, journalled with its path.
    async fn store_model_response(
        &self,
        inv: &Invocation,
        round: u32,
        body: String,
    ) -> Result<(), RuntimeError> {
        let path = format!("model-responses/{}/round-{round}.json", inv.id);
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
