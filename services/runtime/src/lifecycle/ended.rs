//! A run's end found in its journal: a driver that stopped between journalling a run's end (or
//! beginning its finish) and saving the run's terminal record leaves a record that says running.
//! A runtime that takes such a run over, or restarts over it, reads the journal's last record and
//! finishes the run from there instead of driving it again (docs/runtime.md, "Taking a run
//! over"): a run has exactly one end.

use std::sync::Arc;

use serde_json::Value;
use toolplane_core::builtin;

use crate::context::Runtime;
use crate::context::ports::StoredRecord;
use crate::error::RuntimeError;
use crate::state::{Failure, InvocationStatus, Run, RunStatus};

/// The end a run's journal already holds as its last record (its driver journalled the end and
/// stopped before saving the run's record): the status and failure to finish the record with.
pub fn journalled_end(last: &StoredRecord) -> Option<(RunStatus, Option<Failure>)> {
    let status = match last.kind.as_str() {
        "run_completed" => RunStatus::Completed,
        "run_partial_success" => RunStatus::PartialSuccess,
        "run_cancelled" => RunStatus::Cancelled,
        "run_failed" => RunStatus::Failed,
        _ => return None,
    };
    let failure = serde_json::from_str::<Value>(&last.payload_json)
        .ok()
        .and_then(|p| serde_json::from_value::<Failure>(p["failure"].clone()).ok());
    Some((status, failure))
}

/// How far a run's finish got when its driver stopped, read from the journal's last records, when
/// no end was journalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finishing {
    /// The active invocation's `workspace.finish` call completed: the invocation is still to end
    /// as finished, then the run's commit.
    Invocation,
    /// The active invocation finished, or the run's commit began: the commit is still to do (or
    /// to do again).
    Commit,
    /// The changes were committed: only the end is left.
    End,
}

/// The finish a run's journal shows under way (see [`Finishing`]): `tail` is the journal's last
/// records, oldest first; `active` the run's active invocation.
pub fn finishing(tail: &[StoredRecord], active: &str) -> Option<Finishing> {
    let last = tail.last()?;
    let payload = || serde_json::from_str::<Value>(&last.payload_json).unwrap_or(Value::Null);
    let of_active = !active.is_empty() && last.invocation_id == active;
    match last.kind.as_str() {
        "agent_invocation_completed" => {
            (of_active && payload()["status"] == "finished").then_some(Finishing::Commit)
        }
        "agent_loop_finished" | "commit_started" => Some(Finishing::Commit),
        "persistent_changes_committed" => Some(Finishing::End),
        // The records of the active invocation's last call: a finish that completed.
        _ if of_active => finished_call(tail, active).then_some(Finishing::Invocation),
        _ => None,
    }
}

/// Whether the journal's last call of invocation `active` is a `workspace.finish` that completed
/// (its records, and the effects written with them, are the journal's last).
fn finished_call(tail: &[StoredRecord], active: &str) -> bool {
    tail.iter()
        .rev()
        .take_while(|r| r.invocation_id == active && r.kind != "tool_call_requested")
        .any(|r| {
            r.kind == "tool_call_completed"
                && serde_json::from_str::<Value>(&r.payload_json)
                    .is_ok_and(|p| p["toolId"] == builtin::WORKSPACE_FINISH)
        })
}

impl Runtime {
    /// Ends a run (restarted over its own store) that its driver was ending when it stopped, from
    /// the journal's last records `tail`: true when the journal shows such an end (a failure to
    /// complete it is logged).
    pub async fn end_from_journal(&self, run: &Arc<Run>, tail: &[StoredRecord]) -> bool {
        let active = run.with(|r| r.active_invocation_id.clone());
        let ended = if let Some((status, failure)) = tail.last().and_then(journalled_end) {
            self.finish_journalled_end(run, status, failure).await
        } else if let Some(step) = finishing(tail, &active) {
            self.complete_finish(run, step).await
        } else {
            return false;
        };
        if let Err(e) = ended {
            tracing::warn!(run = %run.id, error = %e, "ending the run from its journal failed");
        }
        true
    }

    /// Completes a finish its driver began and did not end (see [`finishing`]).
    pub async fn complete_finish(
        &self,
        run: &Arc<Run>,
        step: Finishing,
    ) -> Result<(), RuntimeError> {
        tracing::info!(run = %run.id, ?step, "completing the run's finish its driver began");
        match step {
            Finishing::Invocation => {
                // The invocation is rebuilt from its checkpoint to be ended as finished.
                let active = run.with(|r| r.active_invocation_id.clone());
                if self.resume_held(run).await
                    && let Ok(inv) = self.invocation(&active)
                {
                    let mut inner = inv.inner.lock().await;
                    self.end_invocation(&inv, &mut inner, InvocationStatus::Finished, None)
                        .await?;
                }
                self.finish_run(run).await
            }
            Finishing::Commit => self.finish_run(run).await,
            Finishing::End => self.end_run(run, RunStatus::Completed, None).await,
        }
    }

    /// Saves the end the run's journal already holds (see [`journalled_end`]) as its record,
    /// without journalling anything: the workspace sealed, its checkpoints removed.
    pub async fn finish_journalled_end(
        &self,
        run: &Run,
        status: RunStatus,
        failure: Option<Failure>,
    ) -> Result<(), RuntimeError> {
        run.begin_end();
        self.save_end(run, status, failure).await?;
        tracing::info!(run = %run.id, status = status.as_str(), "the run's journal already held its end");
        Ok(())
    }
}
