//! Running one admitted call: routing it to its executor by the snapshot's binding — the
//! runtime's own control tools, the agent tools, sub-agents, or a tool host through the ports —
//! and what the executor produced ([`Dispatched`]).
//!
//! Knows nothing of the gate, governance or the journal's call records: the pipeline above decides
//! whether a call runs and records what it did.

pub mod agents;
pub mod call_cancel;
pub mod control;
pub mod executors;
pub mod search;

use serde_json::{Map, Value};
use toolplane_core::error as codes;
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::{Executor, ToolBinding};

use crate::context::Runtime;
pub use crate::context::ports::Outcome;
use crate::error::RuntimeError;
use crate::state::{AuditObject, Event, Invocation, InvocationInner};
pub use agents::HandoffRequest;

/// What a call did beyond its result.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    None,
    Committed {
        path: String,
        message_id: String,
        auto: bool,
    },
    Wrote {
        path: String,
        kind: &'static str,
    },
    Finished,
    Returned,
    HandedOff(Box<HandoffRequest>),
}

/// What an executor produced.
#[derive(Debug)]
pub struct Dispatched {
    pub result: AgentToolResult,
    pub outcome: Outcome,
    pub raw: Option<String>,
    pub effect: Effect,
    /// Extra audit objects stored with the call (a returned task's result files).
    pub objects: Vec<AuditObject>,
    /// Extra journal records of the call (task and delegation events).
    pub events: Vec<Event>,
}

impl Dispatched {
    /// A result whose effects are known, from an executor inside the runtime.
    pub fn known(result: AgentToolResult, effect: Effect) -> Self {
        Dispatched {
            result,
            outcome: Outcome::Known,
            raw: None,
            effect,
            objects: Vec::new(),
            events: Vec::new(),
        }
    }

    /// A result of a call that was never sent to an executor.
    pub fn not_sent(result: AgentToolResult) -> Self {
        Dispatched {
            outcome: Outcome::NotSent,
            ..Dispatched::known(result, Effect::None)
        }
    }

    /// A call answered as cancelled with the run.
    pub fn cancelled(call: &ToolInvocation, message: &str, outcome: Outcome) -> Self {
        Dispatched {
            outcome,
            ..Dispatched::known(
                AgentToolResult::error(call, codes::TOOL_CANCELLED, message.to_owned()),
                Effect::None,
            )
        }
    }
}

/// Runs one call on the executor its binding names.
pub async fn dispatch(
    rt: &Runtime,
    inv: &Invocation,
    inner: &mut InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Dispatched, RuntimeError> {
    // A cancelled run starts no more calls; the rest of its turn is answered as not sent. So is a
    // call its client cancelled before it was sent.
    if inv.run.is_cancelled() || call_cancel::is_cancelled() {
        return Ok(Dispatched::cancelled(
            call,
            &format!("{} before the call was sent", call_cancel::who(inv)),
            Outcome::NotSent,
        ));
    }
    match &binding.executor {
        Executor::RuntimeControl => control::execute(rt, inv, inner, call, args).await,
        Executor::SubAgent { profile_id } => {
            agents::run_sub_agent(rt, inv, inner, call, args, profile_id).await
        }
        Executor::Workspace => executors::on_workspace(rt, inv, inner, call).await,
        Executor::McpProxy { .. } | Executor::External { .. } => {
            executors::on_host(rt, inv, inner, binding, call).await
        }
    }
}
