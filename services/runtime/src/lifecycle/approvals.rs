//! Deciding approvals: a person approves, denies or answers (`DecideApproval`, `AnswerQuestion`),
//! a timeout expires one, or the runtime lapses one whose call can no longer run. Each decision
//! is made once (a second is `runtime.approval_decided`), saved in the runtime's store and
//! journalled at once — `tool_call_approved`, `tool_call_denied` or `question_answered` — so
//! `WatchRun` shows it while the call is still to run. A sweep expires approvals at their
//! deadlines; lists and collects also see overdue approvals expired first.

use std::time::Duration;

use serde_json::{Value, json};
use toolplane_core::error::RUNTIME_APPROVAL_DECIDED;

use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::state::{Approval, ApprovalKind, ApprovalState, Decision, Event, now_ms};

/// The longest the expiry sweep sleeps between looks.
const SWEEP_AT_MOST: Duration = Duration::from_secs(1);

/// Which approvals a list asks for.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilter {
    /// Only this cell's; `None`: every cell (authentication off).
    pub cell: Option<String>,
    /// Only this run's; empty: every run.
    pub run_id: String,
    pub state: Option<ApprovalState>,
}

impl Runtime {
    /// Decides approval `id` for a caller of `cell` (`None`: any cell). An approval of another
    /// cell is answered like a missing one.
    pub async fn decide_approval(
        &self,
        id: &str,
        cell: Option<&str>,
        decision: Decision,
    ) -> Result<Approval, RuntimeError> {
        let Some(current) = self
            .approvals
            .get(id)
            .filter(|a| cell.is_none_or(|c| a.cell_id == c))
        else {
            return Err(RuntimeError::not_found(format!("no approval `{id}`")));
        };
        check_kind(&current, &decision)?;
        if current.is_overdue(now_ms()) {
            self.apply(id, Decision::Expire).await?;
        }
        self.apply(id, decision).await
    }

    /// Applies a decision, saves and journals it.
    pub async fn apply(&self, id: &str, decision: Decision) -> Result<Approval, RuntimeError> {
        let decided = match self.approvals.decide(id, decision) {
            None => return Err(RuntimeError::not_found(format!("no approval `{id}`"))),
            Some(Err(state)) => {
                return Err(RuntimeError::new(
                    RUNTIME_APPROVAL_DECIDED,
                    format!("approval `{id}` is already {}", state_str(state)),
                ));
            }
            Some(Ok(a)) => a,
        };
        self.persist_approval(&decided).await?;
        if let Ok(run) = self.run(&decided.run_id) {
            let ev = decision_event(&decided);
            if let Err(e) = self.append(&run, run.epoch(), Vec::new(), vec![ev]).await {
                // The run ended meanwhile; the decision stands in the store.
                tracing::warn!(approval = %decided.id, error = %e, "journalling a decision failed");
            }
        }
        Ok(decided)
    }

    /// Approvals matching `filter`, newest first; overdue ones are expired first.
    pub async fn list_approvals(&self, filter: &ApprovalFilter) -> Vec<Approval> {
        let now = now_ms();
        let matches = |a: &Approval| {
            filter.cell.as_deref().is_none_or(|c| a.cell_id == c)
                && (filter.run_id.is_empty() || a.run_id == filter.run_id)
        };
        for overdue in self.approvals.list(|a| matches(a) && a.is_overdue(now)) {
            let _ = self.apply(&overdue.id, Decision::Expire).await;
        }
        self.approvals
            .list(|a| matches(a) && filter.state.is_none_or(|s| a.state == s))
    }

    /// Expires approval `id` when it is overdue; the approval as it stands afterwards.
    pub async fn expire_if_overdue(&self, id: &str) -> Option<Approval> {
        let a = self.approvals.get(id)?;
        if a.is_overdue(now_ms()) {
            let _ = self.apply(id, Decision::Expire).await;
        }
        self.approvals.get(id)
    }

    /// Expires every overdue pending approval now; the earliest deadline still ahead (Unix ms).
    pub async fn expire_overdue(&self) -> Option<i64> {
        let now = now_ms();
        for overdue in self.approvals.list(|a| a.is_overdue(now)) {
            let _ = self.apply(&overdue.id, Decision::Expire).await;
        }
        self.approvals
            .list(|a| a.state == ApprovalState::Pending && a.expires_ms > 0)
            .iter()
            .map(|a| a.expires_ms)
            .min()
    }

    /// Expires approvals at their deadlines, for as long as it is polled: sleeps until the
    /// earliest deadline (at most [`SWEEP_AT_MOST`]), or until an approval changes. So an
    /// expiry is decided and journalled when it happens, whether or not anyone looks.
    pub async fn sweep_approvals(&self) {
        loop {
            let changed = self.approvals.changed();
            let next = self.expire_overdue().await;
            let wait = next.map_or(SWEEP_AT_MOST, |at| {
                let left = u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0);
                SWEEP_AT_MOST.min(Duration::from_millis(left.max(1)))
            });
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Lapses every pending approval of `run_id` (its run ended or cannot resume).
    pub async fn lapse_approvals(&self, run_id: &str, reason: &str) {
        let pending = self
            .approvals
            .list(|a| a.run_id == run_id && a.state == ApprovalState::Pending);
        for a in pending {
            let lapse = Decision::Lapse {
                reason: reason.to_owned(),
            };
            let _ = self.apply(&a.id, lapse).await;
        }
    }
}

/// Questions are answered (or denied), tool calls approved or denied.
fn check_kind(a: &Approval, decision: &Decision) -> Result<(), RuntimeError> {
    match (a.kind, decision) {
        (ApprovalKind::Question, Decision::Approve { .. }) => Err(RuntimeError::invalid(format!(
            "`{}` is a question: answer it (AnswerQuestion) or deny it",
            a.id
        ))),
        (ApprovalKind::ToolCall, Decision::Answer { .. }) => Err(RuntimeError::invalid(format!(
            "`{}` is a held tool call, not a question: approve or deny it",
            a.id
        ))),
        _ => Ok(()),
    }
}

pub fn state_str(s: ApprovalState) -> &'static str {
    match s {
        ApprovalState::Pending => "pending",
        ApprovalState::Approved => "approved",
        ApprovalState::Denied => "denied",
        ApprovalState::Expired => "expired",
    }
}

/// The journal record of a decision.
fn decision_event(a: &Approval) -> Event {
    let mut payload = json!({
        "invocationId": a.invocation_id,
        "round": a.round,
        "callId": a.call_id,
        "toolId": a.tool_id,
        "alias": a.alias,
        "approvalId": a.id,
        "kind": a.kind,
        "state": a.state,
        "decidedBy": a.decided_by,
        "reason": a.reason,
    });
    let kind = match (a.kind, a.state) {
        (ApprovalKind::Question, ApprovalState::Approved) => {
            payload["answer"] = Value::String(a.answer.clone());
            "question_answered"
        }
        _ if a.runs() => {
            payload["rememberForRun"] = json!(a.remember_for_run);
            payload["expired"] = json!(a.state == ApprovalState::Expired);
            "tool_call_approved"
        }
        _ => {
            payload["expired"] = json!(a.state == ApprovalState::Expired);
            "tool_call_denied"
        }
    };
    let ev = Event::new(kind, payload).inv(&a.invocation_id);
    if kind == "tool_call_denied" {
        ev.warn()
    } else {
        ev
    }
}
