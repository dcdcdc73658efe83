//! The approval book: calls held for a person's decision and `ask_user` questions waiting for an
//! answer, each an [`Approval`] record with its state, and the tools a run remembers as approved.
//! Data and transitions only: deciding is one compare-and-set on the record (a second decision
//! is refused), and waiters are woken through one [`tokio::sync::Notify`]. Persisting and
//! journalling are the layers above.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::journal::now_ms;

/// What an approval is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    ToolCall,
    Question,
}

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    Pending,
    Approved,
    Denied,
    Expired,
}

/// One held call or question, as stored (`approvals/<cell>/<id>.json` in the runtime's store).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    pub id: String,
    pub cell_id: String,
    pub run_id: String,
    pub invocation_id: String,
    pub round: u32,
    pub call_id: String,
    pub alias: String,
    pub tool_id: String,
    pub kind: ApprovalKind,
    pub state: ApprovalState,
    /// The card: `toolTitle`, `toolSource`, `arguments` (summarised), `hints`, `rule`, and for a
    /// question `question` and `choices`.
    pub card: Value,
    pub decided_by: String,
    pub reason: String,
    pub answer: String,
    pub created_ms: i64,
    pub decided_ms: i64,
    /// 0: never expires.
    pub expires_ms: i64,
    /// On expiry the call runs (true) or is denied (false).
    pub approve_on_timeout: bool,
    pub remember_for_run: bool,
    /// The approved call was started: it is never run again (set durably before it runs).
    #[serde(default)]
    pub started: bool,
}

/// A decision on a pending approval.
#[derive(Debug, Clone)]
pub enum Decision {
    Approve {
        by: String,
        reason: String,
        remember: bool,
    },
    Deny {
        by: String,
        reason: String,
    },
    Answer {
        by: String,
        answer: String,
    },
    Expire,
    /// The held call can no longer run (its run ended or was cancelled, or the runtime
    /// restarted under a run that cannot resume): expired, with why.
    Lapse {
        reason: String,
    },
}

impl Approval {
    /// Whether nobody decided before the deadline, at `now` (Unix ms).
    pub fn is_overdue(&self, now: i64) -> bool {
        self.state == ApprovalState::Pending && self.expires_ms > 0 && now >= self.expires_ms
    }

    /// Whether the held call runs: approved, or expired with the approve outcome.
    pub fn runs(&self) -> bool {
        self.state == ApprovalState::Approved
            || (self.state == ApprovalState::Expired && self.approve_on_timeout)
    }

    /// Applies `decision` to a pending approval; `Err` with the state it already has otherwise.
    pub fn decide(&mut self, decision: Decision) -> Result<(), ApprovalState> {
        if self.state != ApprovalState::Pending {
            return Err(self.state);
        }
        self.decided_ms = now_ms();
        match decision {
            Decision::Approve {
                by,
                reason,
                remember,
            } => {
                self.state = ApprovalState::Approved;
                self.decided_by = by;
                self.reason = reason;
                self.remember_for_run = remember;
            }
            Decision::Deny { by, reason } => {
                self.state = ApprovalState::Denied;
                self.decided_by = by;
                self.reason = reason;
            }
            Decision::Answer { by, answer } => {
                self.state = ApprovalState::Approved;
                self.decided_by = by;
                self.answer = answer;
            }
            Decision::Expire => {
                self.state = ApprovalState::Expired;
                self.decided_by = "timeout".into();
                self.reason = "nobody decided before the approval's timeout".into();
            }
            Decision::Lapse { reason } => {
                self.state = ApprovalState::Expired;
                self.approve_on_timeout = false;
                self.decided_by = "runtime".into();
                self.reason = reason;
            }
        }
        Ok(())
    }
}

/// Every approval the runtime knows, and the tools each run remembers as approved.
#[derive(Debug, Default)]
pub struct Approvals {
    book: Mutex<HashMap<String, Approval>>,
    remembered: Mutex<HashMap<String, HashSet<String>>>,
    changed: tokio::sync::Notify,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Approvals {
    /// Adds (or replaces) a record; remembered approvals of its run are noted.
    pub fn insert(&self, a: Approval) {
        if a.remember_for_run && a.state == ApprovalState::Approved {
            self.remember(&a.run_id, &a.tool_id);
        }
        lock(&self.book).insert(a.id.clone(), a);
        self.changed.notify_waiters();
    }

    pub fn get(&self, id: &str) -> Option<Approval> {
        lock(&self.book).get(id).cloned()
    }

    /// Decides `id` under the book's lock: the decided record, or the state it already had.
    /// `None` when there is no such approval.
    pub fn decide(&self, id: &str, decision: Decision) -> Option<Result<Approval, ApprovalState>> {
        let mut book = lock(&self.book);
        let a = book.get_mut(id)?;
        let out = a.decide(decision).map(|()| a.clone());
        drop(book);
        if let Ok(a) = &out {
            if a.remember_for_run && a.state == ApprovalState::Approved {
                self.remember(&a.run_id, &a.tool_id);
            }
            self.changed.notify_waiters();
        }
        Some(out)
    }

    /// Approvals that satisfy `keep`, newest first.
    pub fn list(&self, keep: impl Fn(&Approval) -> bool) -> Vec<Approval> {
        let mut v: Vec<Approval> = lock(&self.book)
            .values()
            .filter(|a| keep(a))
            .cloned()
            .collect();
        v.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(b.id.cmp(&a.id)));
        v
    }

    /// Whether later calls of `tool_id` in `run_id` were approved for the rest of the run.
    pub fn is_remembered(&self, run_id: &str, tool_id: &str) -> bool {
        lock(&self.remembered)
            .get(run_id)
            .is_some_and(|s| s.contains(tool_id))
    }

    fn remember(&self, run_id: &str, tool_id: &str) {
        lock(&self.remembered)
            .entry(run_id.to_owned())
            .or_default()
            .insert(tool_id.to_owned());
    }

    /// Marks an approved call as started; false when it already was.
    pub fn mark_started(&self, id: &str) -> Option<Approval> {
        let mut book = lock(&self.book);
        let a = book.get_mut(id)?;
        if a.started {
            return None;
        }
        a.started = true;
        Some(a.clone())
    }

    /// Resolves when any approval changes; take it before checking, then await it.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(id: &str) -> Approval {
        Approval {
            id: id.into(),
            cell_id: "default".into(),
            run_id: "r".into(),
            invocation_id: "i".into(),
            round: 1,
            call_id: "c".into(),
            alias: "dice_roll".into(),
            tool_id: "builtin:dice.roll".into(),
            kind: ApprovalKind::ToolCall,
            state: ApprovalState::Pending,
            card: Value::Null,
            decided_by: String::new(),
            reason: String::new(),
            answer: String::new(),
            created_ms: 1,
            decided_ms: 0,
            expires_ms: 0,
            approve_on_timeout: false,
            remember_for_run: false,
            started: false,
        }
    }

    #[test]
    fn a_decision_is_made_once_and_remembered_tools_skip_asking() {
        let book = Approvals::default();
        book.insert(pending("a"));
        let approve = Decision::Approve {
            by: "alice".into(),
            reason: "ok".into(),
            remember: true,
        };
        let decided = book.decide("a", approve.clone()).unwrap().unwrap();
        assert_eq!(decided.state, ApprovalState::Approved);
        assert!(decided.runs());
        let deny = Decision::Deny {
            by: "bob".into(),
            reason: "no".into(),
        };
        assert_eq!(book.decide("a", deny), Some(Err(ApprovalState::Approved)));
        assert!(book.decide("missing", approve).is_none());
        assert!(book.is_remembered("r", "builtin:dice.roll"));
        assert!(!book.is_remembered("other", "builtin:dice.roll"));
        assert!(book.mark_started("a").is_some());
        assert!(book.mark_started("a").is_none(), "started once");
    }

    #[test]
    fn an_expiry_runs_the_call_only_with_the_approve_outcome() {
        let mut a = pending("a");
        a.expires_ms = 10;
        assert!(a.is_overdue(10) && !a.is_overdue(9));
        a.decide(Decision::Expire).unwrap();
        assert_eq!(a.state, ApprovalState::Expired);
        assert!(!a.runs());
        let mut b = pending("b");
        b.approve_on_timeout = true;
        b.decide(Decision::Expire).unwrap();
        assert!(b.runs());
    }
}
