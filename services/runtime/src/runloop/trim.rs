//! The runtime-driven loop's context budget: before each model request the history is fitted to
//! the endpoint's budget by `toolplane_model::context::fit` (large tool results externalised to
//! their stored `tool-results/…` objects, then the oldest turns dropped) and every trim is
//! journalled as `history_trimmed`. The decision itself is the pure module's; this only supplies
//! the budget, what every request carries besides the history, and where results are stored.

use serde_json::{Map, Value, json};
use toolplane_core::builtin;
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_model::context::{self, Budget, StoredResult};

use crate::context::Runtime;
use crate::context::ports::ModelCall;
use crate::error::RuntimeError;
use crate::state::{Event, Invocation, InvocationInner, Run};

/// Results shorter than this many characters are never externalised: the note naming the stored
/// copy would save little.
pub const MIN_EXTERNALISE_CHARS: usize = 1_000;

/// Where each of a turn's results is stored (`tool-results/<invocation>/call_<hash>.json`), with
/// the text the history carries for it.
pub fn stored_results(
    inv: &Invocation,
    calls: &[ToolInvocation],
    results: &[AgentToolResult],
) -> Vec<StoredResult> {
    results
        .iter()
        .filter(|r| calls.iter().any(|c| c.call_id == r.call_id))
        .map(|r| {
            let path = format!(
                "tool-results/{}/{}.json",
                inv.id,
                crate::pipeline::call_file(&r.call_id)
            );
            StoredResult::new(r.call_id.clone(), path, &r.model_content())
        })
        .collect()
}

/// Fits `history` to the endpoint's budget for this round's request, journalling the trim.
#[allow(clippy::too_many_arguments)]
pub async fn fit_history(
    rt: &Runtime,
    run: &Run,
    inv: &Invocation,
    inner: &InvocationInner,
    client: &dyn ModelCall,
    system: &str,
    tools: &Map<String, Value>,
    history: &mut Vec<Value>,
    stored: &[StoredResult],
) -> Result<(), RuntimeError> {
    let max = client
        .endpoint()
        .context_budget_tokens
        .unwrap_or(rt.cfg.model_context_budget_tokens);
    if max == 0 {
        return Ok(());
    }
    let read_tool = inner
        .snapshot
        .builtin(builtin::WORKSPACE_READ_FILE)
        .map(|b| b.alias.to_string());
    let budget = Budget {
        max_tokens: u64::from(max),
        fixed_tokens: context::estimate_text_tokens(system)
            + context::estimate_tokens(&Value::Object(tools.clone())),
        stored,
        min_externalise_chars: MIN_EXTERNALISE_CHARS,
        read_tool: read_tool.as_deref(),
    };
    let Some(trim) = context::fit(client.endpoint().format(), history, &budget) else {
        return Ok(());
    };
    let externalised: Vec<Value> = trim
        .externalised
        .iter()
        .map(|x| json!({"callId": x.call_id, "path": x.path, "chars": x.chars}))
        .collect();
    let mut event = Event::new(
        "history_trimmed",
        json!({"invocationId": inv.id, "round": inner.round, "budgetTokens": max, "beforeTokens": trim.before_tokens, "afterTokens": trim.after_tokens, "fits": trim.fits, "externalised": externalised, "droppedEntries": trim.dropped_entries, "droppedTurns": trim.dropped_turns, "entries": trim.history.len()}),
    )
    .inv(&inv.id);
    if !trim.fits {
        event = event.warn();
    }
    *history = trim.history;
    rt.append(run, run.epoch(), Vec::new(), vec![event]).await?;
    Ok(())
}
