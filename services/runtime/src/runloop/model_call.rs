//! One model request of the runtime-driven loop: each attempt journalled and traced (a `chat`
//! span after the OpenTelemetry GenAI conventions, the model-call metrics), retried on retryable
//! failures by the [`RetryPolicy`], and given up on a cancel of the run.

use serde_json::{Value, json};
use toolplane_core::error as codes;
use toolplane_model::ProviderFormat;
use tracing::Instrument;

use super::retry::{NextAttempt, RetryPolicy};
use crate::context::Runtime;
use crate::context::ports::ModelCall;
use crate::error::RuntimeError;
use crate::model::provider::Endpoint;
use crate::model::semconv;
use crate::state::{Event, Failure, Invocation, Run, Stop};

/// Model calls with timeouts and retries on retryable failures ([`RetryPolicy`]), each attempt
/// journalled. The inner `Err` is a run failure (`model.call_failed`).
#[allow(clippy::too_many_arguments)]
pub(super) async fn call_with_retries(
    rt: &Runtime,
    run: &Run,
    inv: &Invocation,
    client: &dyn ModelCall,
    system: &str,
    history: &[Value],
    tools: &serde_json::Map<String, Value>,
    round: u32,
    stop: &Stop,
    request_created: Event,
) -> Result<Result<String, Failure>, RuntimeError> {
    let endpoint = client.endpoint();
    let mut policy = RetryPolicy::new(
        rt.cfg.model_retry_backoff,
        endpoint.max_retries,
        endpoint.timeout,
    );
    let mut first = Some(request_created);
    let mut attempt: u32 = 0;
    loop {
        attempt += 1;
        let mut events: Vec<Event> = first.take().into_iter().collect();
        events.push(Event::new("model_call_attempt_started", json!({"invocationId": inv.id, "round": round, "attempt": attempt, "model": client.endpoint().model})).inv(&inv.id));
        rt.append(run, run.epoch(), Vec::new(), events).await?;
        let provider = provider_label(client);
        let span = chat_span(client.endpoint(), run, inv, round, attempt);
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
            Ok(body) => {
                record_response(&span, client.endpoint().format(), &body);
                return Ok(Ok(body));
            }
            Err(e) => {
                rt.append(run, run.epoch(), Vec::new(), vec![Event::new("model_call_attempt_failed", json!({"invocationId": inv.id, "round": round, "attempt": attempt, "status": e.status, "retryable": e.retryable, "message": e.message})).inv(&inv.id).warn()])
                    .await?;
                let wait = match policy.next(&e) {
                    NextAttempt::After(wait) => wait,
                    NextAttempt::GiveUp(why) => {
                        return Ok(Err(Failure {
                            code: codes::MODEL_CALL_FAILED.as_str().into(),
                            message: match why {
                                Some(why) => format!("{}; {why}", e.message),
                                None => e.message,
                            },
                            retryable: true,
                        }));
                    }
                };
                rt.metrics.model_retry(provider);
                rt.append(run, run.epoch(), Vec::new(), vec![Event::new("model_call_retry_scheduled", json!({"invocationId": inv.id, "round": round, "attempt": attempt + 1, "delayMs": u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), "retryAfterMs": e.retry_after.map(|r| u64::try_from(r.as_millis()).unwrap_or(u64::MAX))})).inv(&inv.id)])
                    .await?;
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = stop.wait() => return Ok(Err(Failure { code: codes::RUNTIME_CANCELLED.as_str().into(), message: "cancelled while waiting to retry a model call".into(), retryable: true })),
                }
            }
        }
    }
}

/// One model call attempt's span, after the OpenTelemetry GenAI conventions: `chat {model}` with
/// the provider, the requested model and the server called; what the response reports about
/// itself is recorded by [`record_response`].
fn chat_span(
    endpoint: &Endpoint,
    run: &Run,
    inv: &Invocation,
    round: u32,
    attempt: u32,
) -> tracing::Span {
    let server = semconv::server(endpoint);
    tracing::info_span!(
        "chat",
        otel.name = %format!("chat {}", endpoint.model),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = semconv::provider_name(endpoint),
        gen_ai.request.model = %endpoint.model,
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.response.id = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        server.address = server.as_ref().map(|(host, _)| host.as_str()),
        server.port = server.as_ref().map(|(_, port)| i64::from(*port)),
        run.id = %run.id,
        invocation.id = %inv.id,
        cell.id = %run.cell,
        toolplane.round = round,
        toolplane.attempt = attempt,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// The response's id, model, finish reasons and token usage on its `chat` span. A body that is
/// not JSON records nothing here; decoding reports it.
fn record_response(span: &tracing::Span, format: ProviderFormat, body: &str) {
    let Ok(response) = serde_json::from_str::<Value>(body) else {
        return;
    };
    let facts = toolplane_model::response::facts(format, &response);
    if let Some(id) = &facts.id {
        span.record("gen_ai.response.id", id.as_str());
    }
    if let Some(model) = &facts.model {
        span.record("gen_ai.response.model", model.as_str());
    }
    if let Some(usage) = facts.usage {
        span.record("gen_ai.usage.input_tokens", usage.input_tokens);
        span.record("gen_ai.usage.output_tokens", usage.output_tokens);
    }
    if !facts.finish_reasons.is_empty() {
        toolplane_telemetry::set_string_array(
            span,
            "gen_ai.response.finish_reasons",
            &facts.finish_reasons,
        );
    }
}

/// The `provider` label of model-call metrics (kept as the wire format's name, which the
/// dashboard groups by; spans carry the conventions' `gen_ai.provider.name`).
fn provider_label(client: &dyn ModelCall) -> &'static str {
    match client.endpoint().kind {
        toolplane_core::profile::ModelKind::Scripted => "scripted",
        _ => client.endpoint().format().as_str(),
    }
}
