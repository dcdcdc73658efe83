//! The runtime-driven loop (ARCHITECTURE "Flows" 2): `StartRun` creates the run and drives its
//! owner — the root invocation, then each handoff target — against a model endpoint until it
//! finishes, fails, runs out of rounds or is cancelled; delegated children run through the same
//! [`drive_invocation`] — the same turn pipeline as host-driven calls, plus what only a loop owner can do:
//! model calls with retries, stored response bodies, and drift recovery (seed 000 §7.0).

use std::sync::Arc;

use serde_json::{Value, json};
use toolplane_core::builtin;
use toolplane_core::error::{self as codes, ErrorClass};
use toolplane_core::snapshot::ExitPolicy;
use toolplane_core::turn::{ToolChoice, ToolTurnContract};
use toolplane_proto::v1 as pb;
use tracing::Instrument;

use crate::agents::Stop;
use crate::error::RuntimeError;
use crate::journal::{AuditObject, Event};
use crate::provider::{Endpoint, ModelClient, user_message};
use crate::runtime::{HandedOff, NewRun, Runtime, TurnEnd};
use crate::state::{Driver, Failure, Invocation, InvocationStatus, Run, RunStatus};

mod trim;

/// Validates the spec, creates the run and starts driving it in the background.
pub async fn start(rt: Arc<Runtime>, spec: pb::RunSpec) -> Result<Arc<Run>, RuntimeError> {
    let endpoint = match &spec.model {
        Some(m) => Some(
            Endpoint::from_pb(m, rt.cfg.model_timeout, rt.cfg.model_max_retries)
                .map_err(RuntimeError::invalid)?,
        ),
        None => None,
    };
    if spec.initial_user_message.trim().is_empty() {
        return Err(RuntimeError::invalid(
            "a run spec needs an initial user message",
        ));
    }
    // A run that could never open its first invocation is refused before anything is created.
    if spec.profile_id.is_empty() {
        return Err(RuntimeError::invalid("a run spec needs a profile id"));
    }
    let Some(profile) = crate::agents::profile_in(&rt, &spec.cell_id, &spec.profile_id).await?
    else {
        return Err(RuntimeError::not_found(format!(
            "no profile `{}` in cell `{}`",
            spec.profile_id,
            if spec.cell_id.is_empty() {
                "default"
            } else {
                &spec.cell_id
            }
        )));
    };
    // The model endpoint: the spec's, else the profile's, resolved now so that a run with no
    // usable model is refused before it exists and the first invocation opens in its format.
    let endpoint = match endpoint {
        Some(e) => e,
        None => rt
            .endpoint_of(&profile)
            .ok_or_else(|| {
                RuntimeError::invalid(format!(
                    "profile `{}` has no model endpoint and the run spec names none: name one in the spec (`toolplane run start --base-url … --model …`, `OPENAI_BASE_URL`, or `--script`) or give the profile a `model`",
                    profile.id
                ))
            })?
            .map_err(|e| {
                RuntimeError::invalid(format!(
                    "profile `{}`'s model endpoint cannot be used: {e}",
                    profile.id
                ))
            })?,
    };
    let roots = spec.roots.clone().unwrap_or_default();
    let chat = spec.chat.clone().unwrap_or_default();
    let run = rt
        .create_run(NewRun {
            run_id: spec.run_id.clone(),
            cell_id: spec.cell_id.clone(),
            actor_id: spec.actor_id.clone(),
            session_id: spec.session_id.clone(),
            chat_id: chat.chat_id,
            message_id: chat.message_id,
            background: spec.mode == pb::RunMode::Background as i32,
            profile_id: spec.profile_id.clone(),
            visible_roots: roots.visible,
            writable_roots: roots.writable,
            run_tools: spec.tools.clone(),
            plan_node_policy_json: spec.plan_node_policy_json.clone(),
            world_info_json: spec.world_info_activation_json.clone(),
            labels: spec.labels.clone().into_iter().collect(),
            allow_paths: spec.allow_paths.clone(),
            deny_paths: spec.deny_paths.clone(),
            work_dir: spec.work_dir.clone(),
            system_prompt: spec.system_prompt.clone(),
            initial_user_message: spec.initial_user_message.clone(),
            driver: Some(Driver::Runtime),
        })
        .await?;
    let max_rounds = spec.max_rounds;
    let driven = run.clone();
    tokio::spawn(async move {
        if let Err(e) = drive(&rt, &driven, endpoint, max_rounds).await {
            tracing::warn!(run = %driven.id, error = %e, "run loop failed");
            let retryable = e.code().class() == ErrorClass::System;
            let failure = Failure {
                code: e.code().as_str().into(),
                message: e.0.message.clone(),
                retryable,
            };
            let status = if driven.snapshot().committed {
                RunStatus::PartialSuccess
            } else {
                RunStatus::Failed
            };
            if let Err(e2) = rt.end_run(&driven, status, Some(failure)).await {
                tracing::warn!(run = %driven.id, error = %e2, "recording the run's failure failed");
            }
        }
    });
    Ok(run)
}

/// How a driven invocation ended.
#[derive(Debug)]
pub enum LoopEnd {
    /// `workspace.finish`: the run has finished.
    Finished,
    /// `task.return`: the child's result is in its invocation.
    Returned,
    /// `agent.handoff`: the target's invocation owns the run now.
    HandedOff(Box<HandedOff>),
    /// The invocation failed; for a root this fails the run.
    Failed(Failure),
    /// The run was cancelled, or the task's parent finished.
    Cancelled,
    /// Closed from outside (the run ended meanwhile).
    Closed,
}

/// Drives the run's owner to the run's end, following handoffs. An `Err` is a system failure the
/// caller records.
async fn drive(
    rt: &Runtime,
    run: &Arc<Run>,
    endpoint: Endpoint,
    spec_rounds: u32,
) -> Result<(), RuntimeError> {
    let record = run.snapshot();
    let opened = rt
        .open_invocation(
            run,
            &record.profile_id,
            ExitPolicy::Root,
            endpoint.format(),
            ToolChoice::Auto,
            Driver::Runtime,
        )
        .await?;
    let mut inv = opened.invocation;
    let mut client = ModelClient::new(endpoint).map_err(RuntimeError::invalid)?;
    let mut system = system_prompt(&inv, &record.system_prompt).await;
    let mut history: Vec<Value> = vec![user_message(
        client.endpoint().format(),
        &record.initial_user_message,
    )];
    let stop = Stop::run(Arc::clone(run));

    loop {
        let end =
            drive_invocation(rt, run, &inv, &client, &system, history, spec_rounds, &stop).await?;
        match end {
            LoopEnd::Failed(failure) => return end_failed(rt, run, failure).await,
            LoopEnd::HandedOff(h) => {
                // The target runs on its own model endpoint when it has one, else on the run's.
                if let Some(e) = h.endpoint
                    && let Ok(c) = ModelClient::new(e)
                {
                    client = c;
                }
                inv = h.opened.invocation;
                let format = inv.inner.lock().await.format;
                if format != client.endpoint().format() {
                    return Err(RuntimeError::invalid(
                        "the handoff target's invocation speaks a different format than its model endpoint",
                    ));
                }
                system = system_prompt(&inv, &record.system_prompt).await;
                history = vec![user_message(
                    format,
                    &format!(
                        "Another agent handed this run over to you. Its brief:\n\n{}",
                        h.brief
                    ),
                )];
            }
            _ => return Ok(()),
        }
    }
}

/// Drives one invocation on a model endpoint until it ends: model call, tool turn, repeat. Used
/// for the run's owner and for delegated children alike; what an end means is the caller's to
/// decide. Finished children of this invocation are injected into its next model request.
#[allow(clippy::too_many_arguments)]
pub async fn drive_invocation(
    rt: &Runtime,
    run: &Arc<Run>,
    inv: &Arc<Invocation>,
    client: &ModelClient,
    system: &str,
    mut history: Vec<Value>,
    spec_rounds: u32,
    stop: &Stop,
) -> Result<LoopEnd, RuntimeError> {
    let format = client.endpoint().format();
    // Where each result in the history is stored, for externalising it when over budget.
    let mut results_stored = Vec::new();
    loop {
        if stop.is_set() {
            return Ok(LoopEnd::Cancelled);
        }
        let mut inner = inv.inner.lock().await;
        if inner.status != InvocationStatus::Open {
            return Ok(LoopEnd::Closed);
        }
        let injected = crate::agents::take_injections(rt, inv).await?;
        if !injected.is_empty() {
            history.push(user_message(
                format,
                &crate::agents::injection_text(&injected),
            ));
        }
        let round = inner.round;
        let max_rounds = if spec_rounds > 0 {
            spec_rounds.min(inner.snapshot.max_rounds)
        } else {
            inner.snapshot.max_rounds
        };
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
        let path = format!("model-responses/{}/round-{round}.json", inv.id);
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
                run.journal
                    .append(&rt.peers, run.epoch(), vec![stored], vec![stored_event])
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
        run.journal
            .append(&rt.peers, run.epoch(), vec![stored], vec![stored_event, Event::new("model_completed", json!({"invocationId": inv.id, "round": round, "toolCalls": decoded.invocations.len(), "textChars": decoded.assistant_text.as_ref().map(|t| t.chars().count()).unwrap_or(0)})).inv(&inv.id)])
            .await?;
        history.extend(decoded.history.iter().cloned());

        if decoded.invocations.is_empty() {
            // Drift: the model answered in text instead of calling its closing tool.
            let text = decoded.assistant_text.clone().unwrap_or_default();
            let captured = capture_direct_output(rt, inv, &inner, &text).await?;
            run.journal
                .append(&rt.peers, run.epoch(), Vec::new(), vec![Event::new("direct_output_captured", json!({"invocationId": inv.id, "round": round, "path": captured, "chars": text.chars().count()})).inv(&inv.id)])
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
            run.journal
                .append(&rt.peers, run.epoch(), Vec::new(), vec![Event::new("drift_recovery_attempted", json!({"invocationId": inv.id, "round": round, "capturedPath": captured})).inv(&inv.id).warn()])
                .await?;
            history.push(user_message(format, &nudge));
            inner.round += 1;
            let choice = inner.turn.choice().clone();
            inner.turn = ToolTurnContract::all(&inner.snapshot, inner.round, choice)?;
            continue;
        }

        let calls = decoded.invocations.clone();
        let outcome = crate::pipeline::run_turn(rt, inv, &mut inner, decoded.invocations).await?;
        history.extend(toolplane_model::encode_results(
            format,
            &inner.turn,
            &calls,
            &outcome.results,
        )?);
        results_stored.extend(trim::stored_results(inv, &calls, &outcome.results));
        let end = if round >= max_rounds && outcome.terminal.is_none() {
            let f = Failure {
                code: codes::AGENT_MAX_TOOL_ROUNDS_EXCEEDED.as_str().into(),
                message: format!("the invocation used all {max_rounds} rounds without finishing"),
                retryable: true,
            };
            rt.fail_invocation(inv, &mut inner, f.clone()).await?;
            TurnEnd {
                status: InvocationStatus::Failed,
                failure: Some(f),
                handoff: None,
            }
        } else {
            rt.after_turn(inv, &mut inner, &outcome).await?
        };
        return Ok(match end.status {
            InvocationStatus::Open => continue,
            InvocationStatus::Failed => LoopEnd::Failed(end.failure.unwrap_or(Failure {
                code: codes::RUNTIME_INTERRUPTED.as_str().into(),
                message: "the invocation failed".into(),
                retryable: true,
            })),
            InvocationStatus::Finished => LoopEnd::Finished,
            InvocationStatus::Returned => LoopEnd::Returned,
            InvocationStatus::HandedOff => match end.handoff {
                Some(h) => LoopEnd::HandedOff(Box::new(h)),
                None => LoopEnd::Closed,
            },
            InvocationStatus::Cancelled => LoopEnd::Cancelled,
            InvocationStatus::Closed => LoopEnd::Closed,
        });
    }
}

async fn end_failed(rt: &Runtime, run: &Run, failure: Failure) -> Result<(), RuntimeError> {
    let status = if run.snapshot().committed {
        RunStatus::PartialSuccess
    } else {
        RunStatus::Failed
    };
    rt.end_run(run, status, Some(failure)).await
}

/// Model calls with timeouts and retries on retryable failures, each attempt journalled. The inner
/// `Err` is a run failure (`model.call_failed`).
#[allow(clippy::too_many_arguments)]
async fn call_with_retries(
    rt: &Runtime,
    run: &Run,
    inv: &Invocation,
    client: &ModelClient,
    system: &str,
    history: &[Value],
    tools: &serde_json::Map<String, Value>,
    round: u32,
    stop: &Stop,
    request_created: Event,
) -> Result<Result<String, Failure>, RuntimeError> {
    let retries = client.endpoint().max_retries;
    let mut backoff = rt.cfg.model_retry_backoff;
    let mut first = Some(request_created);
    for attempt in 1..=retries + 1 {
        let mut events: Vec<Event> = first.take().into_iter().collect();
        events.push(Event::new("model_call_attempt_started", json!({"invocationId": inv.id, "round": round, "attempt": attempt, "model": client.endpoint().model})).inv(&inv.id));
        run.journal
            .append(&rt.peers, run.epoch(), Vec::new(), events)
            .await?;
        let provider = provider_label(client);
        let span = tracing::info_span!(
            "chat",
            otel.name = %format!("chat {}", client.endpoint().model),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = provider,
            gen_ai.request.model = %client.endpoint().model,
            run.id = %run.id,
            invocation.id = %inv.id,
            cell.id = %run.cell,
            toolplane.round = round,
            toolplane.attempt = attempt,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let started = std::time::Instant::now();
        let result = tokio::select! {
            r = client.call(system, history, tools, round).instrument(span.clone()) => r,
            () = stop.wait() => return Ok(Err(Failure { code: codes::RUNTIME_CANCELLED.as_str().into(), message: "cancelled during a model call".into(), retryable: true })),
        };
        rt.metrics
            .model_call(provider, result.is_ok(), started.elapsed().as_secs_f64());
        if let Err(e) = &result {
            span.record(
                "error.type",
                e.status
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "transport".into()),
            );
            span.record("otel.status_code", "ERROR");
        }
        match result {
            Ok(body) => return Ok(Ok(body)),
            Err(e) => {
                run.journal
                    .append(&rt.peers, run.epoch(), Vec::new(), vec![Event::new("model_call_attempt_failed", json!({"invocationId": inv.id, "round": round, "attempt": attempt, "status": e.status, "retryable": e.retryable, "message": e.message})).inv(&inv.id).warn()])
                    .await?;
                if !e.retryable || attempt > retries {
                    return Ok(Err(Failure {
                        code: codes::MODEL_CALL_FAILED.as_str().into(),
                        message: e.message,
                        retryable: true,
                    }));
                }
                rt.metrics.model_retry(provider);
                run.journal
                    .append(&rt.peers, run.epoch(), Vec::new(), vec![Event::new("model_call_retry_scheduled", json!({"invocationId": inv.id, "round": round, "attempt": attempt + 1, "delayMs": backoff.as_millis() as u64})).inv(&inv.id)])
                    .await?;
                tokio::time::sleep(backoff).await;
                backoff = backoff.saturating_mul(2);
            }
        }
    }
    Ok(Err(Failure {
        code: codes::MODEL_CALL_FAILED.as_str().into(),
        message: "no attempt was made".into(),
        retryable: true,
    }))
}

/// The `provider` label of model-call metrics and spans.
fn provider_label(client: &ModelClient) -> &'static str {
    match client.endpoint().kind {
        toolplane_core::profile::ModelKind::Scripted => "scripted",
        _ => client.endpoint().format().as_str(),
    }
}

/// The system prompt: the spec's, the profile's instructions, and how to end the run.
async fn system_prompt(inv: &Invocation, spec_prompt: &str) -> String {
    let inner = inv.inner.lock().await;
    let mut parts = Vec::new();
    if !spec_prompt.trim().is_empty() {
        parts.push(spec_prompt.trim().to_owned());
    }
    if let Some(i) = &inner.profile.instructions {
        parts.push(i.clone());
    }
    let commit = inner
        .snapshot
        .builtin(builtin::WORKSPACE_COMMIT)
        .map(|b| b.alias.to_string());
    let finish = inner
        .snapshot
        .builtin(builtin::WORKSPACE_FINISH)
        .map(|b| b.alias.to_string());
    if let (Some(c), Some(f)) = (commit, finish) {
        parts.push(format!(
            "Work in your workspace with your tools. Put your answer in {}main.md, publish it with `{c}`, and end with `{f}`. Do not answer in plain text.",
            inner.snapshot.workspace.message_artifact_root
        ));
    }
    parts.join("\n\n")
}

/// Captures a drifting answer into the artifact root's `direct_output.md` (appended, so nothing is
/// lost across several drifts). Returns the path.
async fn capture_direct_output(
    rt: &Runtime,
    inv: &Invocation,
    inner: &crate::state::InvocationInner,
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
    let req = crate::pipeline::execute_request(inv, inner, &call, rt.cfg.executor_timeout);
    let resp = rt
        .peers
        .workspace_executor()
        .execute(req)
        .await
        .map_err(|s| {
            RuntimeError::dependency(format!("capturing direct output: {}", s.message()))
        })?;
    if let Some(r) = resp.into_inner().result
        && r.is_error
    {
        tracing::warn!(invocation = %inv.id, error = %r.content, "capturing direct output was refused");
    }
    Ok(path)
}

fn drift_nudge(inner: &crate::state::InvocationInner, captured: &str) -> String {
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
