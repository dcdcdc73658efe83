//! Collecting a turn whose calls were held — by the host (`CollectToolResults`), or by the
//! runtime-driven loop through [`Runtime::wait_decisions`] and [`Runtime::run_held`]: waits a
//! bounded time for every held call's decision; then, in call order, an approved call is marked started
//! in the runtime's store (so it runs at most once, also across a restart) and run through the
//! same execute → record steps as any call, a denied or expired one gets its refusal, an answered
//! question its answer. The turn then ends as any turn does: effects, the auto-publish, the turn's
//! end, and one answer with every call's result message.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use toolplane_core::error as codes;
use toolplane_core::invocation::ToolArguments;

use super::hold::{self, Hold};
use super::host::awaiting_of;
use super::record::{self, CallRecord};
use super::{Progress, Terminal, TurnOutcome, execute, publish};
use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::lifecycle::check_epoch;
use crate::state::{
    ApprovalState, HeldCall, HeldRecord, HeldTurn, Invocation, InvocationInner, turn_id,
};
use crate::tools::{Dispatched, Effect};

use super::HostTurn;
use super::turn_end::ensure_open;

/// Longest a collect waits for decisions.
pub const MAX_COLLECT_WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

impl Runtime {
    /// Collects the held turn `turn` of a host-driven invocation; see the module docs.
    pub async fn collect_host_calls(
        &self,
        inv: &Arc<Invocation>,
        turn: &str,
        wait: Duration,
        epoch: Option<u64>,
    ) -> Result<HostTurn, RuntimeError> {
        inv.touch();
        check_epoch(&inv.run, epoch)?;
        let mut inner = inv.inner.lock().await;
        ensure_open(&inner, &inv.id)?;
        let Some(held) = inner.held.as_ref() else {
            return Err(RuntimeError::invalid(format!(
                "invocation {} has no calls held for approval",
                inv.id
            )));
        };
        let current = turn_id(&inv.id, held.round);
        if turn != current {
            return Err(RuntimeError::invalid(format!(
                "the held turn is `{current}`, not `{turn}`"
            )));
        }
        let pending = self
            .wait_decisions(&held.held, wait.min(MAX_COLLECT_WAIT))
            .await;
        if !pending.is_empty() {
            return Ok(still_held(held, &pending));
        }
        let Some(held) = inner.held.take() else {
            return Err(RuntimeError::invalid("no held turn".to_owned()));
        };
        let format = inner.format;
        let next_choice = held.next_choice.clone();
        let calls = held.calls.clone();
        let outcome = self.run_held(inv, &mut inner, held).await?;
        let result_messages = Value::Array(toolplane_model::encode_results(
            format,
            &inner.turn,
            &calls,
            &outcome.results,
        )?);
        let end = self.after_turn(inv, &mut inner, &outcome).await?;
        let answer = self
            .answer(inv, &mut inner, outcome, result_messages, end, next_choice)
            .await;
        // In cluster mode the answer replaced the held turn's record with the checkpoint after it.
        if !self.checkpoints_on() {
            self.forget_held(&inv.run.cell, &inv.run.id, &inv.id).await;
        }
        answer
    }

    /// Writes the invocation's held turn to the store so a restarted runtime can rebuild it. A
    /// failed write is logged: the turn is still held in this process, only not across a restart.
    pub(crate) async fn keep_held(
        &self,
        inv: &Invocation,
        inner: &InvocationInner,
        held: &HeldTurn,
    ) {
        let record = HeldRecord::of(inv, inner, held);
        if let Err(e) = self.persist_held(&record, None).await {
            if e.code() == toolplane_core::error::RUNTIME_LEASE_LOST {
                self.lose_run(&inv.run, &e.0.message);
                return;
            }
            tracing::warn!(invocation = %inv.id, error = %e, "the held turn was not saved; it will not survive a restart");
        }
    }

    /// Waits up to `wait` until no held call is pending (expiring overdue ones); the calls
    /// still pending.
    pub(crate) async fn wait_decisions(&self, held: &[HeldCall], wait: Duration) -> Vec<HeldCall> {
        let deadline = Instant::now() + wait;
        loop {
            let changed = self.approvals.changed();
            let mut pending = Vec::new();
            for h in held {
                let state = self
                    .expire_if_overdue(&h.approval_id)
                    .await
                    .map(|a| a.state);
                if state == Some(ApprovalState::Pending) {
                    pending.push(h.clone());
                }
            }
            let now = Instant::now();
            if pending.is_empty() || now >= deadline {
                return pending;
            }
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep(POLL.min(deadline - now)) => {}
            }
        }
    }

    /// Runs or answers every held call of the turn, in call order, and ends the turn's effects.
    pub(crate) async fn run_held(
        &self,
        inv: &Arc<Invocation>,
        inner: &mut InvocationInner,
        held: HeldTurn,
    ) -> Result<TurnOutcome, RuntimeError> {
        // What is left of the turn, saved after each call so a restart neither loses a result
        // nor asks about a call again.
        let mut left = held.clone();
        let mut out = TurnOutcome {
            results: held.results,
            ..TurnOutcome::default()
        };
        let mut progress = Progress {
            terminal_done: false,
            last_mutation: held.last_mutation,
        };
        for h in &held.held {
            let Some(call) = held.calls.get(h.index) else {
                continue;
            };
            let Some(binding) = inner.snapshot.binding(&call.tool_id).cloned() else {
                continue;
            };
            let started = Instant::now();
            let mut rec = CallRecord::resumed(inv, inner, &binding, call);
            let Some(approval) = self.approvals.get(&h.approval_id) else {
                continue;
            };
            let mut d = match hold::resolve(&approval, call) {
                Hold::Run => match self.start_once(&h.approval_id).await? {
                    false => Dispatched::not_sent(toolplane_core::result::AgentToolResult::error(
                        call,
                        codes::POLICY_APPROVAL_DENIED,
                        "the call was already started once; it is not run again".to_owned(),
                    )),
                    true => {
                        let args = match &call.arguments {
                            ToolArguments::Object { value } => value.clone(),
                            ToolArguments::Invalid { .. } => Default::default(),
                        };
                        execute::execute(
                            self, inv, inner, &binding, call, &args, h.verdict, &mut rec,
                        )
                        .await?
                    }
                },
                Hold::Answered(result) => Dispatched::known(result, Effect::None),
                Hold::Refused(result) => Dispatched::not_sent(result),
                Hold::Held(_) => Dispatched::not_sent(result_or_placeholder(call)),
            };
            let detail =
                record::store(self, inv, inner, &binding, call, rec, &mut d, started).await?;
            self.launch_pending(&inv.run);
            progress.note(call, &d.result);
            if !d.result.is_error {
                match d.effect {
                    Effect::Finished => out.terminal = Some(Terminal::Finished),
                    Effect::Returned => out.terminal = Some(Terminal::Returned),
                    Effect::HandedOff(request) => out.terminal = Some(Terminal::HandedOff(request)),
                    _ => {}
                }
            }
            out.details.push(detail);
            if let Some(slot) = left.results.get_mut(h.index) {
                *slot = d.result.clone();
            }
            left.held.retain(|x| x.approval_id != h.approval_id);
            self.keep_held(inv, inner, &left).await;
            if let Some(slot) = out.results.get_mut(h.index) {
                *slot = d.result;
            }
        }
        if out.terminal.is_none() && !inv.run.is_cancelled() {
            publish::auto_publish(self, inv, inner, progress.last_mutation).await?;
        }
        Ok(out)
    }

    /// Marks an approved call started, durably, before it runs: false when it already was.
    async fn start_once(&self, approval_id: &str) -> Result<bool, RuntimeError> {
        match self.approvals.mark_started(approval_id) {
            Some(a) => {
                self.persist_approval(&a).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

fn result_or_placeholder(
    call: &toolplane_core::invocation::ToolInvocation,
) -> toolplane_core::result::AgentToolResult {
    toolplane_core::result::AgentToolResult::error(
        call,
        codes::POLICY_APPROVAL_DENIED,
        "the call was not run".to_owned(),
    )
}

/// The answer while calls are still held: nothing more ran.
fn still_held(held: &HeldTurn, pending: &[HeldCall]) -> HostTurn {
    HostTurn {
        outcome: TurnOutcome::default(),
        result_messages: Value::Array(Vec::new()),
        status: crate::state::InvocationStatus::Open,
        next_turn_id: None,
        next_choice: None,
        failure: None,
        handoff: None,
        injected: Vec::new(),
        awaiting: awaiting_of(&held.calls, pending),
    }
}
