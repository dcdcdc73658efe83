//! Driving one invocation on a model endpoint: the model call (with retries, each attempt
//! journalled), the stored response, the provider-native history, drift recovery when the model
//! answers in text, and the tool turn through the same pipeline as host-driven calls. Used for a
//! run's owner and for delegated children alike.

use std::sync::Arc;

use serde_json::{Value, json};
use toolplane_core::builtin;
use toolplane_core::error as codes;
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::run_budget::Exhausted;
use toolplane_core::snapshot::ExitPolicy;
use toolplane_core::turn::ToolTurnContract;
use toolplane_model::context::StoredResult;
use toolplane_model::{DecodedTurn, ProviderFormat};

use super::{LoopEnd, held};
use crate::context::Runtime;
use crate::context::ports::{ExecuteCall, ModelCall, ToolHost};
use crate::error::RuntimeError;
use crate::model::provider::user_message;
use crate::pipeline::{TurnEnd, TurnOutcome, run_turn};
use crate::state::{
    AuditObject, Conversation, Event, Failure, HeldTurn, Invocation, InvocationInner,
    InvocationStatus, Run, Stop, TurnStage,
};
use crate::tools::agents::{injection_text, take_injections};
use crate::tools::executors::tool_context;

use super::model_call::call_with_retries;
use super::trim;

/// Drives one invocation on a model endpoint until it ends: model call, tool turn, repeat. Used
/// for the run's owner and for delegated children alike; what an end means is the caller's to
/// decide. Finished children of this invocation are injected into its next model request.
// Longer than 80 lines: one round — injections, model call, stored response, history, drift, turn —
// reads as one sequence, and the history handling stays in one place.
#[allow(clippy::too_many_arguments)]
pub async fn drive_invocation(
    rt: &Runtime,
    run: &Arc<Run>,
    inv: &Arc<Invocation>,
    client: &dyn ModelCall,
    system: &str,
    mut history: Vec<Value>,
    spec_rounds: u32,
    stop: &Stop,
) -> Result<LoopEnd, RuntimeError> {
    let format = client.endpoint().format();
    // Where each result in the history is stored, for externalising it when over budget.
    let mut results_stored = Vec::new();
    // The conversation as a checkpoint keeps it (cluster mode; docs/runtime.md "Taking a run
    // over"), and the round the last checkpoint between turns was written for.
    let conversation = |history: &[Value]| Conversation {
        endpoint: super::resume::stored_endpoint(&client.resumable_endpoint()),
        system: system.to_owned(),
        history: history.to_vec(),
        spec_rounds,
    };
    let mut checkpointed: Option<u32> = None;
    loop {
        if stop.is_set() {
            return Ok(LoopEnd::Cancelled);
        }
        let mut inner = inv.inner.lock().await;
        if inner.status != InvocationStatus::Open {
            return Ok(LoopEnd::Closed);
        }
        let round = inner.round;
        let max_rounds = max_rounds(&inner, spec_rounds);
        // A turn held for a person (by this loop, or before a restart) is settled first; a turn
        // that was running when the run was taken over is run again (its calls whose outcome is
        // unknown answered as such).
        let settled = if inner.held.is_some() {
            let Some(settled) = held::settle(rt, inv, &mut inner, stop).await? else {
                return Ok(LoopEnd::Cancelled);
            };
            Some(settled)
        } else if let Some(turn) = inner.interrupted.take() {
            let calls = turn.calls;
            let mut outcome = run_turn(rt, inv, &mut inner, calls.clone(), &inv.run.cell).await?;
            if !outcome.held.is_empty() {
                let conversation = conversation(&history);
                held::park(rt, inv, &mut inner, calls, &mut outcome, conversation).await;
                continue;
            }
            Some((calls, outcome))
        } else {
            None
        };
        if let Some((calls, outcome)) = settled {
            let turn = EndedTurn {
                calls: &calls,
                outcome,
                round,
                max_rounds,
            };
            match end_turn(
                rt,
                inv,
                &mut inner,
                format,
                turn,
                &mut history,
                &mut results_stored,
            )
            .await?
            {
                Some(end) => return Ok(end),
                None => continue,
            }
        }
        if let Some(failure) = budget_used_up(rt, run, inv, &mut inner).await? {
            return Ok(LoopEnd::Failed(failure));
        }
        if rt.checkpoints_on() && checkpointed != Some(round) {
            let between = HeldTurn::between(round, Some(conversation(&history)));
            rt.checkpoint(inv, &mut inner, TurnStage::Between, &between)
                .await;
            checkpointed = Some(round);
        }
        let injected = take_injections(rt, inv).await?;
        if !injected.is_empty() {
            history.push(user_message(format, &injection_text(&injected)));
        }
        let tools = toolplane_model::encode_tools(format, &inner.turn, &inner.snapshot)?;
        trim::fit_history(
            rt,
            run,
            inv,
            &inner,
            client,
            system,
            &tools,
            &mut history,
            &results_stored,
        )
        .await?;
        // Journalled with the first attempt's start, in one group.
        let request_created = Event::new("model_request_created", json!({"invocationId": inv.id, "round": round, "snapshotId": inner.snapshot.snapshot_id, "snapshotPath": inv.snapshot_path, "contract": inner.turn, "messages": history.len()})).inv(&inv.id);
        let body = match call_with_retries(
            rt,
            run,
            inv,
            client,
            system,
            &history,
            &tools,
            round,
            stop,
            request_created,
        )
        .await?
        {
            Ok(body) => body,
            Err(failure) => {
                if stop.is_set() {
                    return Ok(LoopEnd::Cancelled);
                }
                rt.fail_invocation(inv, &mut inner, failure.clone()).await?;
                return Ok(LoopEnd::Failed(failure));
            }
        };
        let path = crate::state::response_path(&inv.id, round, inv.run.epoch());
        let stored = AuditObject {
            path: path.clone(),
            content: body.clone().into_bytes(),
            content_type: "application/json",
        };
        let stored_event = Event::new(
            "model_response_stored",
            json!({"invocationId": inv.id, "round": round, "path": path, "bytes": body.len()}),
        )
        .inv(&inv.id);
        // The stored body and its records go in one group with `model_completed`.
        let decoded = match toolplane_model::decode_calls_json(format, &inner.turn, &body) {
            Ok(d) => d,
            Err(e) => {
                rt.append(run, run.epoch(), vec![stored], vec![stored_event])
                    .await?;
                let failure = Failure {
                    code: e.code.as_str().into(),
                    message: e.message.clone(),
                    retryable: true,
                };
                rt.fail_invocation(inv, &mut inner, failure.clone()).await?;
                return Ok(LoopEnd::Failed(failure));
            }
        };
        let mut events = vec![stored_event];
        events.extend(completed(run, inv, round, &decoded));
        rt.append(run, run.epoch(), vec![stored], events).await?;
        history.extend(decoded.history.iter().cloned());

        if decoded.invocations.is_empty() {
            // Drift: the model answered in text instead of calling its closing tool.
            let text = decoded.assistant_text.clone().unwrap_or_default();
            let captured = capture_direct_output(rt, inv, &inner, &text).await?;
            rt.append(run, run.epoch(), Vec::new(), vec![Event::new("direct_output_captured", json!({"invocationId": inv.id, "round": round, "path": captured, "chars": text.chars().count()})).inv(&inv.id)])
                .await?;
            if round >= max_rounds {
                let failure = Failure {
                    code: codes::MODEL_TOOL_CALL_REQUIRED.as_str().into(),
                    message:
                        "the model answered without calling its closing tool and no rounds are left"
                            .into(),
                    retryable: true,
                };
                rt.fail_invocation(inv, &mut inner, failure.clone()).await?;
                return Ok(LoopEnd::Failed(failure));
            }
            let nudge = drift_nudge(&inner, &captured);
            rt.append(
                run,
                run.epoch(),
                Vec::new(),
                vec![
                    Event::new(
                        "drift_recovery_attempted",
                        json!({"invocationId": inv.id, "round": round, "capturedPath": captured}),
                    )
                    .inv(&inv.id)
                    .warn(),
                ],
            )
            .await?;
            history.push(user_message(format, &nudge));
            inner.round += 1;
            let choice = inner.turn.choice().clone();
            inner.turn =
                ToolTurnContract::advertised(&inner.snapshot, inner.round, choice, &inner.found)?;
            continue;
        }

        let calls = decoded.invocations.clone();
        if rt.checkpoints_on() {
            let running = HeldTurn::running(round, calls.clone(), Some(conversation(&history)));
            rt.checkpoint(inv, &mut inner, TurnStage::Running, &running)
                .await;
        }
        let mut outcome = run_turn(rt, inv, &mut inner, decoded.invocations, &inv.run.cell).await?;
        if !outcome.held.is_empty() {
            held::park(
                rt,
                inv,
                &mut inner,
                calls,
                &mut outcome,
                conversation(&history),
            )
            .await;
            continue;
        }
        let turn = EndedTurn {
            calls: &calls,
            outcome,
            round,
            max_rounds,
        };
        match end_turn(
            rt,
            inv,
            &mut inner,
            format,
            turn,
            &mut history,
            &mut results_stored,
        )
        .await?
        {
            Some(end) => return Ok(end),
            None => continue,
        }
    }
}

/// The rounds the invocation may use: the snapshot's, narrowed by the run spec's (0: none).
fn max_rounds(inner: &InvocationInner, spec_rounds: u32) -> u32 {
    if spec_rounds > 0 {
        spec_rounds.min(inner.snapshot.max_rounds)
    } else {
        inner.snapshot.max_rounds
    }
}

/// A turn whose every call has its result.
struct EndedTurn<'a> {
    calls: &'a [ToolInvocation],
    outcome: TurnOutcome,
    round: u32,
    max_rounds: u32,
}

/// Puts a turn's results into the history and ends the turn: the round limit, then the turn's
/// effects. `None` while the invocation stays open.
async fn end_turn(
    rt: &Runtime,
    inv: &Arc<Invocation>,
    inner: &mut InvocationInner,
    format: ProviderFormat,
    turn: EndedTurn<'_>,
    history: &mut Vec<Value>,
    results_stored: &mut Vec<StoredResult>,
) -> Result<Option<LoopEnd>, RuntimeError> {
    let EndedTurn {
        calls,
        outcome,
        round,
        max_rounds,
    } = turn;
    history.extend(toolplane_model::encode_results(
        format,
        &inner.turn,
        calls,
        &outcome.results,
    )?);
    results_stored.extend(trim::stored_results(inv, calls, &outcome.results));
    let end = if round >= max_rounds && outcome.terminal.is_none() {
        let f = Failure {
            code: codes::AGENT_MAX_TOOL_ROUNDS_EXCEEDED.as_str().into(),
            message: format!("the invocation used all {max_rounds} rounds without finishing"),
            retryable: true,
        };
        rt.fail_invocation(inv, inner, f.clone()).await?;
        TurnEnd {
            status: InvocationStatus::Failed,
            failure: Some(f),
            handoff: None,
        }
    } else {
        rt.after_turn(inv, inner, &outcome).await?
    };
    Ok(match end.status {
        InvocationStatus::Open => None,
        InvocationStatus::Failed => Some(LoopEnd::Failed(end.failure.unwrap_or(Failure {
            code: codes::RUNTIME_INTERRUPTED.as_str().into(),
            message: "the invocation failed".into(),
            retryable: true,
        }))),
        InvocationStatus::Finished => Some(LoopEnd::Finished),
        InvocationStatus::Returned => Some(LoopEnd::Returned),
        InvocationStatus::HandedOff => Some(match end.handoff {
            Some(h) => LoopEnd::HandedOff(Box::new(h)),
            None => LoopEnd::Closed,
        }),
        InvocationStatus::Cancelled => Some(LoopEnd::Cancelled),
        InvocationStatus::Closed => Some(LoopEnd::Closed),
    })
}

/// Ends the invocation before its next model request when the run's budget is used up: a call
/// was refused for the run's calls, or the tokens the provider reported reached the run's limit.
/// Every invocation of the run — the owner and each delegated child — stops this way.
async fn budget_used_up(
    rt: &Runtime,
    run: &Run,
    inv: &Invocation,
    inner: &mut InvocationInner,
) -> Result<Option<Failure>, RuntimeError> {
    let Some((what, limits, calls, tokens)) = run.with_budget(|b| {
        b.exhausted()
            .map(|e| (e, b.limits(), b.calls_used(), b.tokens_used()))
    }) else {
        return Ok(None);
    };
    let message = match what {
        Exhausted::ToolCalls => format!(
            "the run used all {} of its tool calls (its invocations and delegated tasks together)",
            limits.max_tool_calls.unwrap_or(calls)
        ),
        Exhausted::ModelTokens => format!(
            "the run's model responses reported {tokens} tokens, its budget is {}",
            limits.max_model_tokens.unwrap_or(tokens)
        ),
    };
    if let Some(ev) = run.budget_exhausted_event(&inv.id) {
        rt.append(run, run.epoch(), Vec::new(), vec![ev]).await?;
    }
    let failure = Failure {
        code: codes::AGENT_RUN_BUDGET_EXHAUSTED.as_str().into(),
        message,
        retryable: false,
    };
    rt.fail_invocation(inv, inner, failure.clone()).await?;
    Ok(Some(failure))
}

/// `model_completed` with the tokens the response reported, charged to the run's budget, and
/// `run_budget_exhausted` when they used it up.
fn completed(run: &Run, inv: &Invocation, round: u32, decoded: &DecodedTurn) -> Vec<Event> {
    let run_tokens = decoded
        .usage
        .map(|u| run.with_budget(|b| b.charge_tokens(u.total())));
    let text_chars = decoded
        .assistant_text
        .as_ref()
        .map(|t| t.chars().count())
        .unwrap_or(0);
    let mut events = vec![
        Event::new(
            "model_completed",
            json!({"invocationId": inv.id, "round": round, "toolCalls": decoded.invocations.len(), "textChars": text_chars, "usage": decoded.usage.map(|u| json!({"inputTokens": u.input_tokens, "outputTokens": u.output_tokens, "totalTokens": u.total()})), "runTokensUsed": run_tokens}),
        )
        .inv(&inv.id),
    ];
    events.extend(run.budget_exhausted_event(&inv.id));
    events
}

/// Captures a drifting answer into the artifact root's `direct_output.md` (appended, so nothing is
/// lost across several drifts). Returns the path.
async fn capture_direct_output(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    text: &str,
) -> Result<String, RuntimeError> {
    let path = format!(
        "{}direct_output.md",
        inner.snapshot.workspace.message_artifact_root
    );
    if text.is_empty() {
        return Ok(path);
    }
    let call = toolplane_core::ToolInvocation {
        call_id: format!("direct-output-{}", inner.round),
        tool_id: toolplane_core::ToolId::builtin(builtin::WORKSPACE_WRITE_FILE)?,
        arguments: toolplane_core::invocation::ToolArguments::from_value(
            json!({"path": path, "content": format!("{text}\n"), "mode": "append"}),
        ),
        provider_metadata: None,
    };
    let timeout = rt.cfg.executor_timeout;
    let request = ExecuteCall {
        context: tool_context(inv, inner, timeout),
        call: &call,
        request_timeout: timeout + std::time::Duration::from_secs(1),
        tool_timeout_ms: None,
    };
    let executed = rt
        .ports
        .tools
        .execute(ToolHost::Workspace, request)
        .await?
        .map_err(|e| RuntimeError::dependency(format!("capturing direct output: {}", e.message)))?;
    if let Ok(r) = &executed.result
        && r.is_error
    {
        tracing::warn!(invocation = %inv.id, error = %r.content, "capturing direct output was refused");
    }
    Ok(path)
}

fn drift_nudge(inner: &InvocationInner, captured: &str) -> String {
    let alias = |n: &str| inner.snapshot.builtin(n).map(|b| format!("`{}`", b.alias));
    let close = match (
        &inner.snapshot.exit_policy,
        alias(builtin::WORKSPACE_COMMIT),
        alias(builtin::WORKSPACE_FINISH),
        alias(builtin::TASK_RETURN),
    ) {
        (ExitPolicy::ReturnToParent { .. }, _, _, Some(r)) => {
            format!("return your result with {r}")
        }
        (_, Some(c), Some(f), _) => format!(
            "commit your answer with {c} (your text was saved to `{captured}`; commit that path or write the final answer first), then call {f}"
        ),
        (_, _, Some(f), _) => format!("call {f}"),
        _ => "use your tools".into(),
    };
    format!("You answered in plain text, but this run ends only through tools. Please {close}.")
}
