//! `agent.handoff`: the run passes to another agent, which goes on from a brief; carried out after
//! the turn (the pipeline's turn end opens the target's invocation).

use serde_json::{Map, Value, json};
use toolplane_core::Profile;
use toolplane_core::error::{
    AGENT_CHILDREN_UNFINISHED, AGENT_HANDOFF_DEPTH_EXCEEDED, AGENT_NO_MODEL, AGENT_NOT_ALLOWED,
    AGENT_UNAVAILABLE,
};
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;

use super::{Purpose, await_alias, brief_arg, check_target, depth_of, refused, string_arg};
use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::model::provider::Endpoint;
use crate::state::{Driver, Event, Invocation, InvocationInner};
use crate::tools::{Dispatched, Effect};

/// A handoff the turn asked for; carried out after the turn by the pipeline's turn end.
#[derive(Debug, Clone, PartialEq)]
pub struct HandoffRequest {
    pub target: Profile,
    pub brief: String,
    pub depth: u32,
    /// The target's own model endpoint, when a runtime-driven run hands off to an agent that has
    /// one.
    pub endpoint: Option<Endpoint>,
}

/// `agent.handoff`.
pub async fn handoff(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Dispatched, RuntimeError> {
    let agent_id = string_arg(args, "agentId");
    let checked_brief = brief_arg(args, "brief", call);
    if !inner.profile.delegation.can_handoff {
        return Ok(refused(
            call,
            AGENT_UNAVAILABLE,
            "this agent may not hand the run off",
        ));
    }
    let brief = match checked_brief {
        Ok(b) => b,
        Err(refusal) => return Ok(*refusal),
    };
    if let Some(refusal) = children_unfinished(inv, inner, call) {
        return Ok(refusal);
    }
    let Some(target) = rt.profile_in(&inv.run.cell, agent_id).await? else {
        return Ok(refused(
            call,
            AGENT_NOT_ALLOWED,
            format!("there is no agent `{agent_id}`; agent_list shows the ones you can call"),
        ));
    };
    if let Err((code, why)) = check_target(&inner.profile, &target, Purpose::Handoff) {
        return Ok(refused(call, code, why));
    }
    let endpoint = match target_endpoint(rt, inv, &target, call) {
        Ok(e) => e,
        Err(refusal) => return Ok(*refusal),
    };
    let depth = depth_of(&inner.snapshot.exit_policy) + 1;
    if depth > target.delegation.max_handoff_depth {
        return Ok(refused(
            call,
            AGENT_HANDOFF_DEPTH_EXCEEDED,
            format!(
                "this would be handoff number {depth} in the chain; `{}` accepts at most {}",
                target.id, target.delegation.max_handoff_depth
            ),
        ));
    }
    let mut d = Dispatched::known(
        AgentToolResult::ok(
            call,
            format!(
                "Handed the run to `{}`. Your work ends with this turn.",
                target.id
            ),
        )
        .with_structured(json!({"agentId": target.id, "depth": depth})),
        Effect::HandedOff(Box::new(HandoffRequest {
            target: target.clone(),
            brief: brief.to_owned(),
            depth,
            endpoint,
        })),
    );
    d.events.push(
        Event::new(
            "agent_handoff_requested",
            json!({"invocationId": inv.id, "callId": call.call_id, "targetProfileId": target.id, "depth": depth, "briefChars": brief.chars().count()}),
        )
        .inv(&inv.id),
    );
    Ok(d)
}

/// The model endpoint a runtime-driven run goes on on: the target's own, when it has one.
fn target_endpoint(
    rt: &Runtime,
    inv: &Invocation,
    target: &Profile,
    call: &ToolInvocation,
) -> Result<Option<Endpoint>, Box<Dispatched>> {
    // A runtime-driven run goes on on the target's own model endpoint when it has one: resolved
    // here, once, and one it could not use is refused, so the model can choose again, rather than
    // the run going on on this agent's.
    let endpoint = match inv.driver {
        Driver::Runtime => match rt.endpoint_of(target) {
            None => None,
            Some(Ok(e)) => Some(e),
            Some(Err(why)) => {
                return Err(Box::new(refused(
                    call,
                    AGENT_NO_MODEL,
                    format!(
                        "`{}` cannot take the run: its model endpoint is unusable: {why}",
                        target.id
                    ),
                )));
            }
        },
        _ => None,
    };
    Ok(endpoint)
}

/// The refusal of a handoff while the caller's delegated tasks still run.
fn children_unfinished(
    inv: &Invocation,
    inner: &InvocationInner,
    call: &ToolInvocation,
) -> Option<Dispatched> {
    let unfinished = inv.run.agents.unfinished_of(&inv.id);
    if !unfinished.is_empty() {
        let await_alias = await_alias(inner);
        return Some(refused(
            call,
            AGENT_CHILDREN_UNFINISHED,
            format!(
                "your delegated tasks {} are still running; call `{await_alias}` first, then hand off",
                unfinished
                    .iter()
                    .map(|t| format!("`{}`", t.task_id))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    None
}
