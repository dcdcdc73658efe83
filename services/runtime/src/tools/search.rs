//! `tools.search`: the model asks for tools its profile allows but the turn has not advertised
//! yet (docs/catalog.md, "Tool search"). The snapshot's index is built on the first search; the
//! tools found join the invocation's advertised set from the next turn on, up to the profile's
//! `maxFound`, and a `tools_found` record says which and why.

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use toolplane_core::error as codes;
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_core::tool_search::SnapshotToolSearch;

use super::{Dispatched, Effect};
use crate::state::{Event, Invocation, InvocationInner};

/// Longest description a search result shows per tool, in characters.
const DESCRIPTION_CHARS: usize = 200;

pub fn search(
    inv: &Invocation,
    inner: &mut InvocationInner,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Dispatched {
    let Some(plan) = inner.snapshot.search.clone() else {
        return refused(
            call,
            codes::TOOL_INVALID_ARGUMENTS,
            "tool search is not on for this agent".to_owned(),
        );
    };
    let query = args.get("query").and_then(Value::as_str).unwrap_or("");
    let limit = args
        .get("limit")
        .and_then(Value::as_u64)
        .map_or(plan.max_results, |n| u32::try_from(n).unwrap_or(u32::MAX))
        .clamp(1, 20);
    let room = usize::try_from(plan.max_found)
        .unwrap_or(usize::MAX)
        .saturating_sub(inner.found.len());
    if room == 0 {
        return refused(
            call,
            codes::AGENT_TOOL_BUDGET_EXHAUSTED,
            format!(
                "searches already added {} tools, the most this agent may add; use the tools you have",
                plan.max_found
            ),
        );
    }
    let index = inner
        .search_index
        .get_or_insert_with(|| Arc::new(SnapshotToolSearch::build(&inner.snapshot)))
        .clone();
    let turn = &inner.turn;
    let found = &inner.found;
    let hits = match index.search(query, (limit as usize).min(room), |id| {
        turn.contains(id) || found.iter().any(|(f, _)| f == id)
    }) {
        Ok(hits) => hits,
        Err(e) => return refused(call, codes::TOOL_INVALID_ARGUMENTS, format!("query: {e}")),
    };
    let round = inner.round;
    let mut listed = Vec::with_capacity(hits.len());
    for hit in &hits {
        let Some(b) = inner.snapshot.binding(&hit.tool_id) else {
            continue;
        };
        let description: String = b
            .descriptor
            .description()
            .chars()
            .take(DESCRIPTION_CHARS)
            .collect();
        listed.push(json!({
            "name": b.alias.to_string(),
            "title": b.descriptor.title(),
            "description": description,
        }));
        inner.found.push((hit.tool_id.clone(), round));
    }
    let text = answer_text(&listed);
    let ids: Vec<String> = hits.iter().map(|h| h.tool_id.to_string()).collect();
    let mut dispatched = Dispatched::known(
        AgentToolResult::ok(call, text).with_structured(json!({"tools": listed})),
        Effect::None,
    );
    dispatched.events.push(
        Event::new(
            "tools_found",
            json!({"invocationId": inv.id, "round": round, "query": query, "tools": ids}),
        )
        .inv(&inv.id),
    );
    dispatched
}

/// A search the model may correct: its error result, nothing found or recorded.
fn refused(call: &ToolInvocation, code: codes::ErrorCode, message: String) -> Dispatched {
    Dispatched::known(AgentToolResult::error(call, code, message), Effect::None)
}

/// The result's text: each tool found with its name and shortened description.
fn answer_text(listed: &[Value]) -> String {
    if listed.is_empty() {
        return "No tool you have not been shown matches; try other words, or use the tools you have."
            .to_owned();
    }
    let mut text = format!(
        "Found {} tool(s); you can call them from your next turn on:",
        listed.len()
    );
    for t in listed {
        let name = t.get("name").and_then(Value::as_str).unwrap_or("");
        let description = t.get("description").and_then(Value::as_str).unwrap_or("");
        let _ = write!(text, "\n- {name}: {description}");
    }
    text
}
