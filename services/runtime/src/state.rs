//! Runs and invocations: the runtime's own facts, kept in memory while active and persisted as
//! records in the runtime's store namespace so that a restart finds every run it was driving.
//!
//! A run record is written with compare-and-swap whenever its status changes; invocation state
//! (snapshot, gate, cycle detector, current turn) lives in memory only — after a restart an open
//! invocation cannot continue, and its run is failed as interrupted (docs/runtime.md).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use toolplane_core::Profile;
use toolplane_core::cycle::CycleDetector;
use toolplane_core::gate::ToolRequestGate;
use toolplane_core::policy::PlanNodePolicy;
use toolplane_core::snapshot::InvocationToolSnapshot;
use toolplane_core::turn::ToolTurnContract;
use toolplane_model::ProviderFormat;

use crate::journal::Journal;

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
    pub agents: crate::agents::RunAgents,
    cancelled: AtomicBool,
    ended: AtomicBool,
    pub cancel_notify: Notify,
}

impl Run {
    pub fn new(record: RunRecord, next_seq: u64) -> Self {
        Run {
            id: record.run_id.clone(),
            cell: record.cell_id.clone(),
            journal: Journal::new(&record.run_id, &record.cell_id, next_seq),
            record: Mutex::new(record),
            agents: crate::agents::RunAgents::default(),
            cancelled: AtomicBool::new(false),
            ended: AtomicBool::new(false),
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
        guard.updated_ms = crate::journal::now_ms();
        guard.clone()
    }

    pub fn epoch(&self) -> u64 {
        match self.record.lock() {
            Ok(r) => r.epoch,
            Err(p) => p.into_inner().epoch,
        }
    }

    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.cancel_notify.notify_waiters();
    }

    /// Claims the run's end; false when another caller already did.
    pub fn begin_end(&self) -> bool {
        !self.ended.swap(true, Ordering::SeqCst)
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvocationStatus {
    Open,
    Finished,
    HandedOff,
    Returned,
    Failed,
    Closed,
    Cancelled,
}

/// The mutable state of one invocation; one lock, so calls are processed one at a time (the
/// seed's single owner of the gate).
#[derive(Debug)]
pub struct InvocationInner {
    pub snapshot: Arc<InvocationToolSnapshot>,
    pub profile: Profile,
    pub format: ProviderFormat,
    pub turn: ToolTurnContract,
    pub round: u32,
    pub gate: ToolRequestGate,
    pub cycle: CycleDetector,
    pub status: InvocationStatus,
    pub failure: Option<Failure>,
    pub ended_ms: i64,
    /// What a delegated child handed back with `task.return`.
    pub returned: Option<crate::agents::TaskResult>,
}

#[derive(Debug)]
pub struct Invocation {
    pub id: String,
    pub run: Arc<Run>,
    pub driver: Driver,
    pub created_ms: i64,
    pub snapshot_path: String,
    pub profile_version: u64,
    pub inner: tokio::sync::Mutex<InvocationInner>,
    last_activity: Mutex<Instant>,
}

impl Invocation {
    pub fn new(
        id: String,
        run: Arc<Run>,
        driver: Driver,
        snapshot_path: String,
        profile_version: u64,
        inner: InvocationInner,
    ) -> Self {
        Invocation {
            id,
            run,
            driver,
            created_ms: crate::journal::now_ms(),
            snapshot_path,
            profile_version,
            inner: tokio::sync::Mutex::new(inner),
            last_activity: Mutex::new(Instant::now()),
        }
    }

    pub fn touch(&self) {
        if let Ok(mut t) = self.last_activity.lock() {
            *t = Instant::now();
        }
    }

    pub fn idle_for(&self) -> std::time::Duration {
        self.last_activity
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default()
    }
}

/// The turn id the host echoes back with its calls.
pub fn turn_id(invocation_id: &str, round: u32) -> String {
    format!("{invocation_id}:{round}")
}
