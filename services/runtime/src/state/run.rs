//! Runs: their persisted record, status, cancel flags and budget (shared by all the run's
//! invocations and children). A run record is written with
//! compare-and-swap whenever its status changes (`context`); invocation state lives in memory only
//! — after a restart an open invocation cannot continue, and its run is failed as interrupted
//! (docs/runtime.md).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::Notify;
use toolplane_core::policy::PlanNodePolicy;
use toolplane_core::run_budget::{RunBudget, RunBudgetLimits};

use super::journal::{Event, Journal, now_ms};
use super::tasks::RunAgents;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Created,
    Running,
    Completed,
    PartialSuccess,
    Failed,
    Cancelling,
    Cancelled,
}

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed
                | RunStatus::PartialSuccess
                | RunStatus::Failed
                | RunStatus::Cancelled
        )
    }
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Created => "created",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::PartialSuccess => "partial_success",
            RunStatus::Failed => "failed",
            RunStatus::Cancelling => "cancelling",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Driver {
    Host,
    Runtime,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunMode {
    Foreground,
    Background,
}

/// Why a run or invocation failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    pub code: String,
    pub message: String,
    pub retryable: bool,
}

/// The persisted facts of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub run_id: String,
    pub cell_id: String,
    pub actor_id: String,
    pub session_id: String,
    pub chat_id: String,
    pub message_id: Option<String>,
    pub mode: RunMode,
    pub profile_id: String,
    pub status: RunStatus,
    pub driver: Driver,
    pub root_invocation_id: String,
    pub active_invocation_id: String,
    pub epoch: u64,
    /// The lease holder driving the run (cluster mode) and the gRPC URL other runtimes reach it
    /// at (`[cluster] advertise`; empty: not reachable by them). Rewritten by a takeover.
    #[serde(default)]
    pub holder: String,
    #[serde(default)]
    pub holder_url: String,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub failure: Option<Failure>,
    /// At least one explicit `workspace.commit` succeeded (in this run, across a handoff chain).
    pub committed: bool,
    /// The one auto-publish before the first explicit commit has happened.
    pub auto_published: bool,
    pub labels: std::collections::BTreeMap<String, String>,
    /// Per-run tool hosts from the run spec, as protobuf-encoded JSON-free parts.
    pub run_tools: Vec<RunToolHostRecord>,
    pub plan_node_policy: Option<PlanNodePolicy>,
    pub visible_roots: Vec<String>,
    pub writable_roots: Vec<String>,
    /// `ToolContext` allow / deny paths and working directory, from the run's creator.
    #[serde(default)]
    pub allow_paths: Vec<String>,
    #[serde(default)]
    pub deny_paths: Vec<String>,
    #[serde(default)]
    pub work_dir: String,
    /// The run's first user message and system prompt (runtime-driven runs).
    #[serde(default)]
    pub system_prompt: String,
    #[serde(default)]
    pub initial_user_message: String,
    /// The budget the run's creator asked for (the root profile's narrows it).
    #[serde(default)]
    pub run_budget: RunBudgetLimits,
}

/// A per-run tool host, kept in the run record so invocations opened later see the same tools.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunToolHostRecord {
    pub host_id: String,
    pub endpoint: String,
    /// Each tool's descriptor as the catalog would store it (core serde form).
    pub descriptors: Vec<toolplane_core::ToolDescriptor>,
}

/// A run the runtime is driving or has driven since it started.
#[derive(Debug)]
pub struct Run {
    pub id: String,
    pub cell: String,
    pub record: Mutex<RunRecord>,
    pub journal: Journal,
    /// Delegated tasks and their scheduler.
    pub agents: RunAgents,
    /// The run's budget, shared by all its invocations and children; its limits are fixed when
    /// the root invocation opens.
    pub budget: Mutex<RunBudget>,
    cancelled: AtomicBool,
    ended: AtomicBool,
    /// Another holder took the run's lease: this runtime writes nothing more for the run.
    lease_lost: AtomicBool,
    pub cancel_notify: Notify,
}

impl Run {
    pub fn new(record: RunRecord, next_seq: u64) -> Self {
        Run {
            id: record.run_id.clone(),
            cell: record.cell_id.clone(),
            journal: Journal::new(&record.run_id, &record.cell_id, next_seq),
            budget: Mutex::new(RunBudget::new(record.run_budget)),
            record: Mutex::new(record),
            agents: RunAgents::default(),
            cancelled: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            lease_lost: AtomicBool::new(false),
            cancel_notify: Notify::new(),
        }
    }

    /// A copy of the record.
    pub fn snapshot(&self) -> RunRecord {
        match self.record.lock() {
            Ok(r) => r.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Reads the record under its lock without copying it.
    pub fn with<R>(&self, f: impl FnOnce(&RunRecord) -> R) -> R {
        match self.record.lock() {
            Ok(r) => f(&r),
            Err(p) => f(&p.into_inner()),
        }
    }

    /// Applies a change to the record and returns the new copy.
    pub fn update(&self, f: impl FnOnce(&mut RunRecord)) -> RunRecord {
        let mut guard = match self.record.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut guard);
        guard.updated_ms = now_ms();
        guard.clone()
    }

    pub fn epoch(&self) -> u64 {
        match self.record.lock() {
            Ok(r) => r.epoch,
            Err(p) => p.into_inner().epoch,
        }
    }

    /// Reads or changes the run's budget under its lock.
    pub fn with_budget<R>(&self, f: impl FnOnce(&mut RunBudget) -> R) -> R {
        match self.budget.lock() {
            Ok(mut b) => f(&mut b),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    /// The `run_budget_exhausted` record, the first time the run's budget is found used up
    /// (by a refused call or a model response of `invocation_id`); `None` otherwise.
    pub fn budget_exhausted_event(&self, invocation_id: &str) -> Option<Event> {
        self.with_budget(|b| {
            let what = b.newly_exhausted()?;
            let limits = b.limits();
            Some(
                Event::new(
                    "run_budget_exhausted",
                    json!({"invocationId": invocation_id, "exhausted": what, "maxToolCalls": limits.max_tool_calls, "maxModelTokens": limits.max_model_tokens, "callsUsed": b.calls_used(), "tokensUsed": b.tokens_used()}),
                )
                .inv(invocation_id)
                .warn(),
            )
        })
    }

    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.cancel_notify.notify_waiters();
    }

    /// Claims the run's end; false when another caller already did.
    pub fn begin_end(&self) -> bool {
        !self.ended.swap(true, Ordering::SeqCst)
    }

    /// Marks the run's lease lost; true the first time.
    pub fn lose_lease(&self) -> bool {
        !self.lease_lost.swap(true, Ordering::SeqCst)
    }

    pub fn lease_lost(&self) -> bool {
        self.lease_lost.load(Ordering::SeqCst)
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}
