//! Invocations: one agent's turn-by-turn work inside a run, with its frozen snapshot, gate, cycle
//! detector and current turn contract under one lock, so calls of one invocation are processed one
//! at a time (the gate has a single owner).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use toolplane_core::Profile;
use toolplane_core::cycle::{CycleDetector, CycleVerdict};
use toolplane_core::gate::ToolRequestGate;
use toolplane_core::id::ToolId;
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_core::schema::SnapshotSchemas;
use toolplane_core::snapshot::InvocationToolSnapshot;
use toolplane_core::tool_search::SnapshotToolSearch;
use toolplane_core::turn::ToolTurnContract;
use toolplane_model::ProviderFormat;

use super::journal::now_ms;
use super::run::{Driver, Failure, Run};
use super::tasks::TaskResult;

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
/// gate has a single owner).
#[derive(Debug)]
pub struct InvocationInner {
    pub snapshot: Arc<InvocationToolSnapshot>,
    pub profile: Profile,
    pub format: ProviderFormat,
    pub turn: ToolTurnContract,
    pub round: u32,
    pub gate: ToolRequestGate,
    pub cycle: CycleDetector,
    /// The snapshot's tools' schema checks, compiled on each tool's first call.
    pub schemas: SnapshotSchemas,
    pub status: InvocationStatus,
    pub failure: Option<Failure>,
    pub ended_ms: i64,
    /// What a delegated child handed back with `task.return`.
    pub returned: Option<TaskResult>,
    /// Tools `tools.search` found, with the round that found them: advertised from the next turn.
    pub found: Vec<(ToolId, u32)>,
    /// The snapshot's search index, built on the first search.
    pub search_index: Option<Arc<SnapshotToolSearch>>,
    /// A turn whose held calls wait for decisions (collected by the host, or settled by the
    /// runtime-driven loop).
    pub held: Option<HeldTurn>,
    /// A turn that was running when the runtime that drove it stopped, rebuilt by the runtime
    /// that took the run over: its calls' outcomes are unknown. A runtime-driven loop runs the
    /// turn again first; a host-driven turn waits for the host to send it again. Either way
    /// [`InvocationInner::unknown_outcome`] says which calls are not run again.
    pub interrupted: Option<HeldTurn>,
    /// Call ids (with their round) whose outcome is unknown after a takeover: the pipeline
    /// answers them with `tool.outcome_unknown` instead of running them, unless their tool is
    /// marked idempotent or read-only (docs/runtime.md, "Taking a run over").
    pub unknown_outcome: Option<(u32, Vec<String>)>,
    /// Results of those calls the old driver journalled before it stopped, by call id: their
    /// outcome is known after all, and the stored result is the answer.
    pub recovered: std::collections::HashMap<String, toolplane_core::result::AgentToolResult>,
    /// The conversation a rebuilt runtime-driven invocation goes on from (after a restart or a
    /// takeover), taken by the loop when it starts again.
    pub conversation: Option<Conversation>,
    /// The store version of the invocation's last checkpoint (cluster mode), so the next one is
    /// one compare-and-swap.
    pub checkpoint_version: Option<toolplane_store::Version>,
}

impl InvocationInner {
    /// Whether call `call_id` of the current round has an unknown outcome (see
    /// [`InvocationInner::unknown_outcome`]).
    pub fn outcome_unknown(&self, call_id: &str) -> bool {
        self.unknown_outcome
            .as_ref()
            .is_some_and(|(round, ids)| *round == self.round && ids.iter().any(|i| i == call_id))
    }
}

/// A turn with calls held for approval: its calls, the results so far (the held calls' places
/// hold placeholders) and what collecting it needs — by the host (`CollectToolResults`) or, for a
/// runtime-driven turn, by the loop itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldTurn {
    pub round: u32,
    pub calls: Vec<ToolInvocation>,
    pub results: Vec<AgentToolResult>,
    pub held: Vec<HeldCall>,
    /// The last successful write of the turn (the auto-publish candidate).
    pub last_mutation: Option<String>,
    /// The host's tool choice for the next turn, applied when the turn is collected.
    pub next_choice: Option<toolplane_core::turn::ToolChoice>,
    /// A runtime-driven turn: what the loop needs to go on once the turn is settled, also after
    /// a restart. `None` for a host-driven turn (the host keeps its own conversation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Conversation>,
}

impl HeldTurn {
    /// A turn whose `calls` are about to run (a checkpoint's [`super::TurnStage::Running`]).
    pub fn running(
        round: u32,
        calls: Vec<ToolInvocation>,
        conversation: Option<Conversation>,
    ) -> HeldTurn {
        HeldTurn {
            round,
            calls,
            results: Vec::new(),
            held: Vec::new(),
            last_mutation: None,
            next_choice: None,
            conversation,
        }
    }

    /// No turn: the state between two turns (a checkpoint's [`super::TurnStage::Between`]).
    pub fn between(round: u32, conversation: Option<Conversation>) -> HeldTurn {
        HeldTurn::running(round, Vec::new(), conversation)
    }
}

/// A runtime-driven loop's conversation at a held turn: the model endpoint (without its key; the
/// key's variable is read again), the system prompt, the provider-native history up to and with
/// the assistant message whose calls are held, and the run spec's round limit.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Conversation {
    pub endpoint: serde_json::Value,
    pub system: String,
    pub history: Vec<serde_json::Value>,
    pub spec_rounds: u32,
}

/// One held call of a turn: its place, its approval and the cycle detector's verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldCall {
    pub index: usize,
    pub approval_id: String,
    pub verdict: CycleVerdict,
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
            created_ms: now_ms(),
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
