//! A runtime-driven turn with calls held for a person. The loop keeps the turn in its invocation
//! exactly as a host-driven turn is kept — its calls, the results of the calls that already ran,
//! the held calls — together with the conversation the loop needs to go on ([`Conversation`]),
//! and writes both to the runtime's store: that is the one write the loop makes for a restart,
//! and it is made only when a turn is held, never per call or per model request. Then it waits
//! for the decisions (or its stop) and settles the turn through the same steps as
//! `CollectToolResults`: an approved call is marked started before it runs, so it runs at most
//! once, also across a restart (docs/approvals.md, "Restarts").

use std::sync::Arc;
use std::time::Duration;

use toolplane_core::invocation::ToolInvocation;

use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::pipeline::TurnOutcome;
use crate::state::{Conversation, Decision, HeldTurn, Invocation, InvocationInner, Stop};

/// Longest one wait for decisions lasts before it looks again (a stop ends it at once).
const WAIT_STEP: Duration = Duration::from_secs(30);

/// Keeps the turn whose calls `outcome` holds in the invocation, with `conversation`, and writes
/// it to the store. A failed write is logged: the turn is still held in this process, only not
/// across a restart.
pub(super) async fn park(
    rt: &Runtime,
    inv: &Invocation,
    inner: &mut InvocationInner,
    calls: Vec<ToolInvocation>,
    outcome: &mut TurnOutcome,
    conversation: Conversation,
) {
    let turn = HeldTurn {
        round: inner.round,
        calls,
        results: std::mem::take(&mut outcome.results),
        held: std::mem::take(&mut outcome.held),
        last_mutation: outcome.last_mutation.take(),
        next_choice: None,
        conversation: Some(conversation),
    };
    rt.keep_held(inv, inner, &turn).await;
    inner.held = Some(turn);
}

/// Waits until every held call of the invocation's held turn is decided (expiring overdue ones
/// as their rules say), then runs or answers them in call order. The turn's calls and every
/// call's result; `None` when the loop was stopped first (the calls still held lapse and never
/// run).
pub(super) async fn settle(
    rt: &Runtime,
    inv: &Arc<Invocation>,
    inner: &mut InvocationInner,
    stop: &Stop,
) -> Result<Option<(Vec<ToolInvocation>, TurnOutcome)>, RuntimeError> {
    let Some(waiting) = inner.held.as_ref().map(|h| h.held.clone()) else {
        return Ok(None);
    };
    loop {
        let pending = tokio::select! {
            p = rt.wait_decisions(&waiting, WAIT_STEP) => p,
            () = stop.wait() => waiting.clone(),
        };
        if pending.is_empty() {
            break;
        }
        if stop.is_set() {
            let reason = if inv.run.is_cancelled() {
                "the run was cancelled"
            } else {
                "the task was stopped"
            };
            for h in &pending {
                let lapse = Decision::Lapse {
                    reason: reason.to_owned(),
                };
                // Already decided meanwhile: nothing to lapse.
                let _ = rt.apply(&h.approval_id, lapse).await;
            }
            inner.held = None;
            if !inv.run.lease_lost() {
                rt.forget_held(&inv.run.cell, &inv.run.id, &inv.id).await;
            }
            return Ok(None);
        }
    }
    let Some(turn) = inner.held.take() else {
        return Ok(None);
    };
    let calls = turn.calls.clone();
    let outcome = rt.run_held(inv, inner, turn).await?;
    // In cluster mode the loop's next checkpoint replaces the record.
    if !rt.checkpoints_on() {
        rt.forget_held(&inv.run.cell, &inv.run.id, &inv.id).await;
    }
    Ok(Some((calls, outcome)))
}
