//! A turn's end: a finishing tool ends the invocation and the run, `task.return` ends a child,
//! a handoff opens the target's invocation, a stop fails the invocation; otherwise the round limit
//! is enforced and the next turn's contract opens.

use std::sync::Arc;

use serde_json::json;
use toolplane_core::Profile;
use toolplane_core::error as codes;
use toolplane_core::snapshot::ExitPolicy;
use toolplane_core::turn::{ToolChoice, ToolTurnContract};

use super::{Terminal, TurnOutcome};
use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::lifecycle::Opened;
use crate::model::provider::Endpoint;
use crate::state::{Event, Failure, Invocation, InvocationInner, InvocationStatus};
use crate::tools::HandoffRequest;

/// A handoff carried out: the target's new invocation and the brief it starts from.
#[derive(Debug)]
pub struct HandedOff {
    pub opened: Opened,
    pub brief: String,
    pub target: Profile,
    /// The target's own model endpoint (runtime-driven runs, targets that have one).
    pub endpoint: Option<Endpoint>,
}

/// How a turn left its invocation.
#[derive(Debug)]
pub struct TurnEnd {
    pub status: InvocationStatus,
    pub failure: Option<Failure>,
    pub handoff: Option<HandedOff>,
}

/// Whether an invocation may take more calls.
pub fn ensure_open(inner: &InvocationInner, id: &str) -> Result<(), RuntimeError> {
    if inner.status == InvocationStatus::Open {
        Ok(())
    } else {
        Err(RuntimeError::new(
            codes::RUNTIME_INVOCATION_NOT_OPEN,
            format!("invocation {id} is {:?}", inner.status).to_lowercase(),
        ))
    }
}

impl Runtime {
    /// Applies a turn's end: terminal tools end the invocation (and the run for a root), the round
    /// limit is enforced, otherwise the next turn opens.
    pub async fn after_turn(
        &self,
        inv: &Arc<Invocation>,
        inner: &mut InvocationInner,
        outcome: &TurnOutcome,
    ) -> Result<TurnEnd, RuntimeError> {
        let ended = |status, failure| TurnEnd {
            status,
            failure,
            handoff: None,
        };
        match &outcome.terminal {
            Some(Terminal::Finished) => {
                // Whatever this agent delegated and did not wait for ends with it.
                inv.run.agents.cancel_and_wait(Some(&inv.id)).await;
                self.end_invocation(inv, inner, InvocationStatus::Finished, None)
                    .await?;
                self.finish_run(&inv.run).await?;
                return Ok(ended(InvocationStatus::Finished, None));
            }
            Some(Terminal::Returned) => {
                self.end_invocation(inv, inner, InvocationStatus::Returned, None)
                    .await?;
                return Ok(ended(InvocationStatus::Returned, None));
            }
            Some(Terminal::HandedOff(request)) => {
                self.end_invocation(inv, inner, InvocationStatus::HandedOff, None)
                    .await?;
                let handoff = self.open_handoff(inv, inner, request).await?;
                return Ok(TurnEnd {
                    status: InvocationStatus::HandedOff,
                    failure: None,
                    handoff: Some(handoff),
                });
            }
            Some(Terminal::Failed(f)) => {
                self.fail_invocation(inv, inner, f.clone()).await?;
                return Ok(ended(InvocationStatus::Failed, Some(f.clone())));
            }
            None => {}
        }
        if inner.round >= inner.snapshot.max_rounds {
            let f = Failure {
                code: codes::AGENT_MAX_TOOL_ROUNDS_EXCEEDED.as_str().into(),
                message: format!(
                    "the invocation used all {} rounds without finishing",
                    inner.snapshot.max_rounds
                ),
                retryable: true,
            };
            self.fail_invocation(inv, inner, f.clone()).await?;
            return Ok(ended(InvocationStatus::Failed, Some(f)));
        }
        inner.round += 1;
        let choice = inner.turn.choice().clone();
        inner.turn =
            ToolTurnContract::advertised(&inner.snapshot, inner.round, choice, &inner.found)?;
        Ok(ended(InvocationStatus::Open, None))
    }

    /// Opens the handoff target's invocation: same run, same driver, the target's own snapshot.
    async fn open_handoff(
        &self,
        inv: &Arc<Invocation>,
        inner: &InvocationInner,
        request: &HandoffRequest,
    ) -> Result<HandedOff, RuntimeError> {
        // A runtime-driven target talks to its own model endpoint when it has one.
        let format = request
            .endpoint
            .as_ref()
            .map_or(inner.format, Endpoint::format);
        let opened = self
            .open_invocation(
                &inv.run,
                &request.target.id,
                ExitPolicy::Handoff {
                    from_invocation_id: inv.id.clone(),
                    depth: request.depth,
                },
                format,
                ToolChoice::Auto,
                inv.driver,
            )
            .await?;
        let mut ev = Event::new(
            "agent_handoff_accepted",
            json!({"fromInvocationId": inv.id, "invocationId": opened.invocation.id, "profileId": request.target.id, "depth": request.depth}),
        )
        .inv(&opened.invocation.id);
        ev.related.push(inv.id.clone());
        self.append(&inv.run, inv.run.epoch(), Vec::new(), vec![ev])
            .await?;
        Ok(HandedOff {
            opened,
            brief: request.brief.clone(),
            target: request.target.clone(),
            endpoint: request.endpoint.clone(),
        })
    }
}
