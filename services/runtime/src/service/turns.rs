//! The answer to a host-driven turn, `ExecuteToolCallsResponse`: what `ExecuteToolCalls` and
//! `CollectToolResults` both return.

use serde_json::Value;
use toolplane_model::ProviderFormat;
use toolplane_proto::v1 as pb;

use super::{budget_pb, handoff_pb, inv_status_pb};
use crate::convert;
use crate::convert::peers::outcome_pb;
use crate::convert::runs::{failure_pb, task_pb};
use crate::model::provider::user_message;
use crate::pipeline::HostTurn;
use crate::state::Invocation;
use crate::tools::agents::injection_text;

/// The response for one host-driven turn of `inv`.
pub async fn host_turn_pb(
    inv: &Invocation,
    format: ProviderFormat,
    turn: HostTurn,
) -> pb::ExecuteToolCallsResponse {
    let handoff = match &turn.handoff {
        Some(h) => Some(handoff_pb(h).await),
        None => None,
    };
    let injected_messages_json = if turn.injected.is_empty() {
        "[]".to_owned()
    } else {
        Value::Array(vec![user_message(format, &injection_text(&turn.injected))]).to_string()
    };
    let inner = inv.inner.lock().await;
    pb::ExecuteToolCallsResponse {
        result_messages_json: turn.result_messages.to_string(),
        results: turn
            .outcome
            .results
            .iter()
            .map(convert::result_pb)
            .collect(),
        next_turn: turn
            .next_turn_id
            .as_ref()
            .map(|id| convert::turn_pb(&inner.turn, id, turn.next_choice.clone())),
        state: inv_status_pb(turn.status),
        injected_child_results: turn.injected.iter().map(task_pb).collect(),
        injected_messages_json,
        calls: turn
            .outcome
            .details
            .iter()
            .map(|d| pb::ToolCallDetail {
                call_id: d.call_id.clone(),
                tool_id: d.tool_id.clone(),
                alias: d.alias.clone(),
                outcome: outcome_pb(d.outcome),
                elapsed_ms: d.elapsed_ms,
                args_path: d.args_path.clone(),
                result_path: d.result_path.clone(),
                readable_view_path: d.readable_view_path.clone(),
            })
            .collect(),
        budget: Some(budget_pb(&inner)),
        handoff,
        failure: turn.failure.as_ref().map(failure_pb),
        awaiting: turn
            .awaiting
            .iter()
            .map(|a| pb::HeldCall {
                call_id: a.call_id.clone(),
                tool_id: a.tool_id.clone(),
                approval_id: a.approval_id.clone(),
            })
            .collect(),
    }
}
