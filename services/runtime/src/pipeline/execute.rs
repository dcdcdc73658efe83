//! Executing an admitted, governed call: `tool_call_started`, the executor (in a span after the
//! OpenTelemetry GenAI conventions), the tool metrics, the result's identity check and the cycle
//! warning appended to the result.

use std::time::Instant;

use serde_json::{Map, Value, json};
use toolplane_core::cycle::CycleVerdict;
use toolplane_core::error::TOOL_INVALID_RESULT;
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::{Executor, ToolBinding};
use tracing::Instrument;

use super::record::CallRecord;
use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::state::{Event, Invocation, InvocationInner};
use crate::tools::{self, Dispatched};

#[allow(clippy::too_many_arguments)]
pub async fn execute(
    rt: &Runtime,
    inv: &Invocation,
    inner: &mut InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    args: &Map<String, Value>,
    verdict: CycleVerdict,
    rec: &mut CallRecord,
) -> Result<Dispatched, RuntimeError> {
    rec.events
        .push(Event::new("tool_call_started", rec.base.clone()).inv(&inv.id));
    let span = tool_span(inv, binding, call);
    let executed = Instant::now();
    let mut d = tools::dispatch(rt, inv, inner, binding, call, args)
        .instrument(span.clone())
        .await?;
    record_call(rt, &span, call, &d, executed);
    d.result.verify_identity(call)?;
    check_structured(inner, binding, call, &mut d);
    if let CycleVerdict::Warn { streak } = verdict {
        rec.events.push(Event::new("cycle_detected", json!({"invocationId": inv.id, "toolId": call.tool_id.to_string(), "streak": streak, "verdict": "warn"})).inv(&inv.id).warn());
        d.result.content.push_str(&format!("\n\nNote: you have called `{}` {streak} times in a row. If you are not making progress, change your approach.", binding.alias));
    }
    Ok(d)
}

/// An MCP tool's structured result checked against the output schema it declared: a mismatch is a
/// recoverable `tool.invalid_result` (as the MCP specification asks of clients), naming where it
/// breaks and keeping what the server returned for the model to read.
fn check_structured(
    inner: &mut InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    d: &mut Dispatched,
) {
    if d.result.is_error || !matches!(binding.executor, Executor::McpProxy { .. }) {
        return;
    }
    let Some(structured) = &d.result.structured else {
        return;
    };
    let Err(violations) = inner
        .schemas
        .check_structured(&binding.descriptor, structured)
    else {
        return;
    };
    let message = format!(
        "`{}` returned a structured result that does not match its declared output schema:\n{}\n\n## Result as returned\n\n{}",
        binding.alias,
        violations.summary(),
        d.result.content
    );
    d.result = AgentToolResult::error(call, TOOL_INVALID_RESULT, message)
        .with_structured(json!({"violations": violations.violations, "total": violations.total}));
}

/// The call's span, after the OpenTelemetry GenAI conventions: `execute_tool {tool}` with the tool's
/// name and call id, and the run, invocation and cell it belongs to. Arguments and results stay
/// out of spans.
fn tool_span(inv: &Invocation, binding: &ToolBinding, call: &ToolInvocation) -> tracing::Span {
    tracing::info_span!(
        "execute_tool",
        otel.name = %format!("execute_tool {}", call.tool_id),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %call.tool_id,
        gen_ai.tool.call.id = %call.call_id,
        gen_ai.tool.type = crate::model::semconv::tool_type(&call.tool_id),
        toolplane.tool.alias = %binding.alias,
        run.id = %inv.run.id,
        invocation.id = %inv.id,
        cell.id = %inv.run.cell,
        toolplane.outcome = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Metrics and span fields of an executed call.
fn record_call(
    rt: &Runtime,
    span: &tracing::Span,
    call: &ToolInvocation,
    d: &Dispatched,
    started: Instant,
) {
    let tool = call.tool_id.to_string();
    let code = d.result.error_code.as_deref();
    rt.metrics.tool_call(
        &tool,
        call.tool_id.provider().kind(),
        code,
        started.elapsed().as_secs_f64(),
    );
    span.record("toolplane.outcome", d.outcome.as_str());
    if let Some(code) = code {
        span.record("error.type", code);
        span.record("otel.status_code", "ERROR");
    }
}
