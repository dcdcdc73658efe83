//! Resuming after a restart or a takeover: a run whose active invocation had a turn held for
//! approval is rebuilt from that turn's record in the runtime's store — the invocation open, its
//! turn still held, its gate, cycle detector and the run's budget where they stopped — so
//! `ListApprovals`, `DecideApproval` and `CollectToolResults` go on exactly as before the restart.
//! In cluster mode the record is also the invocation's checkpoint between turns and while a turn
//! runs (`state::TurnStage`), rebuilt the same way: between turns, the next turn is awaited; a
//! running turn is kept as interrupted (its calls' outcomes unknown). A
//! runtime-driven run's record also keeps the loop's conversation; the loop itself is started
//! again by the layer above (`runloop::resume`). The run's delegated tasks are read back from
//! its journal (`tasks`); one still running at the stop is failed as interrupted. Nothing else
//! of the run is rebuilt: pending approvals outside that turn lapse.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Value, json};
use toolplane_core::builtin;
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::InvocationToolSnapshot;

use super::runs::scope_of;
use crate::context::Runtime;
use crate::state::{
    ApprovalState, Decision, Driver, Event, HeldRecord, Invocation, Run, RunRecord, RunStatus,
    TurnStage, turn_id,
};

/// How many of a journal's last records are read for an interrupted turn's results: more than
/// one turn's calls write.
const RECOVER_WINDOW: u64 = 2_000;

/// Why an approval outside the rebuilt turn lapses.
const LAPSED: &str = "the runtime restarted while the call was held, and only the held turn of a run's active invocation is kept across a restart";

impl Runtime {
    /// The invocation snapshot of a stored record: its own (a held turn's), else the one the
    /// run's workspace keeps at the record's `snapshot_path` (a checkpoint's). `None` (logged)
    /// when it cannot be read.
    async fn snapshot_of(
        &self,
        r: &HeldRecord,
        record: &RunRecord,
    ) -> Option<InvocationToolSnapshot> {
        if let Some(s) = &r.snapshot {
            return Some(s.clone());
        }
        let read = self
            .ports
            .workspace
            .get_object(&scope_of(record), &r.snapshot_path)
            .await;
        let parsed = match read {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).map_err(|e| e.to_string()),
            Ok(None) => Err("it is not stored".to_owned()),
            Err(e) => Err(e.message),
        };
        parsed
            .inspect_err(|e| {
                tracing::warn!(invocation = %r.invocation_id, error = %e, "the invocation's snapshot cannot be read back; it cannot be rebuilt");
            })
            .ok()
    }

    /// The results of an interrupted turn's calls that the old driver journalled before it
    /// stopped (`tool_call_completed` / `tool_call_failed` of the turn's round, read back from
    /// their `resultPath`), by call id. A finishing call (finish, return, handoff) is not among
    /// them: its effect is more than its result. The turn's records are the journal's last, so
    /// only its last [`RECOVER_WINDOW`] records are read.
    async fn recovered_results(
        &self,
        run: &Run,
        r: &HeldRecord,
    ) -> HashMap<String, AgentToolResult> {
        let mut out = HashMap::new();
        let calls: HashSet<&str> = r
            .held
            .calls
            .iter()
            .filter(|c| !builtin::is_terminal(&c.tool_id))
            .map(|c| c.call_id.as_str())
            .collect();
        if calls.is_empty() {
            return out;
        }
        let scope = scope_of(&run.snapshot());
        let end = self.last_seq(run).await;
        let mut from = end.saturating_sub(RECOVER_WINDOW) + 1;
        loop {
            let Ok(page) = self
                .ports
                .workspace
                .read_journal(&run.id, &run.cell, from, 1000)
                .await
            else {
                return out;
            };
            for rec in &page.records {
                if rec.invocation_id != r.invocation_id
                    || !matches!(
                        rec.kind.as_str(),
                        "tool_call_completed" | "tool_call_failed"
                    )
                {
                    continue;
                }
                let Ok(p) = serde_json::from_str::<Value>(&rec.payload_json) else {
                    continue;
                };
                let (Some(id), Some(path)) = (p["callId"].as_str(), p["resultPath"].as_str())
                else {
                    continue;
                };
                if p["round"] != r.held.round || !calls.contains(id) {
                    continue;
                }
                let stored = self.ports.workspace.get_object(&scope, path).await;
                if let Ok(Some(bytes)) = stored
                    && let Ok(audit) = serde_json::from_slice::<Value>(&bytes)
                    && let Ok(result) =
                        serde_json::from_value::<AgentToolResult>(audit["result"].clone())
                {
                    out.insert(id.to_owned(), result);
                }
            }
            if page.at_end || page.records.is_empty() {
                return out;
            }
            from = page.next_seq;
        }
    }

    /// Rebuilds `run`'s held turn, if it has one to resume; false when the run cannot resume
    /// (then it is failed as interrupted, as before). A runtime-driven run resumes only when its
    /// record keeps the loop's conversation.
    pub async fn resume_held(&self, run: &Arc<Run>) -> bool {
        let record = run.snapshot();
        if record.status != RunStatus::Running || record.active_invocation_id.is_empty() {
            return false;
        }
        let Some(r) = self
            .held_of_run(&record.cell_id, &record.run_id)
            .await
            .into_iter()
            .find(|r| r.invocation_id == record.active_invocation_id)
        else {
            return false;
        };
        let runtime_driven = r.held.conversation.is_some();
        if runtime_driven != (record.driver == Driver::Runtime) {
            return false;
        }
        let Some(snapshot) = self.snapshot_of(&r, &record).await else {
            return false;
        };
        run.with_budget(|b| *b = r.run_budget.clone());
        let mut inner = r.inner(snapshot);
        if r.stage == TurnStage::Running {
            inner.recovered = self.recovered_results(run, &r).await;
        }
        let mut inv = Invocation::new(
            r.invocation_id.clone(),
            Arc::clone(run),
            record.driver,
            r.snapshot_path.clone(),
            r.profile_version,
            inner,
        );
        inv.created_ms = r.created_ms;
        self.insert_invocation(Arc::new(inv));
        let kept: HashSet<&str> = if r.stage == TurnStage::Held {
            r.held.held.iter().map(|h| h.approval_id.as_str()).collect()
        } else {
            HashSet::new()
        };
        let others = self.approvals.list(|a| {
            a.run_id == run.id && a.state == ApprovalState::Pending && !kept.contains(a.id.as_str())
        });
        for a in others {
            let lapse = Decision::Lapse {
                reason: LAPSED.to_owned(),
            };
            let _ = self.apply(&a.id, lapse).await;
        }
        let mut events = self.restore_tasks(run).await;
        let ev = Event::new(
            "agent_invocation_restored",
            json!({"invocationId": r.invocation_id, "round": r.held.round, "turnId": turn_id(&r.invocation_id, r.held.round), "stage": r.stage, "awaiting": kept}),
        )
        .inv(&r.invocation_id);
        events.insert(0, ev);
        if let Err(e) = self.append(run, run.epoch(), Vec::new(), events).await {
            tracing::warn!(run = %run.id, error = %e, "journalling a restored invocation failed");
        }
        true
    }
}
