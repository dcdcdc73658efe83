//! A held turn as the runtime's store keeps it: everything a host-driven invocation with calls
//! held for approval needs to be rebuilt by a later process — its snapshot, profile, format,
//! current turn contract and round, what its gate and cycle detector have counted, the tools its
//! searches found, its run's budget, and the held turn itself (its calls, the results so far and
//! the calls still held). Data only; writing, reading and rebuilding are the layers above.
//!
//! In cluster mode the same record is the invocation's **checkpoint** for a takeover by another
//! runtime (docs/runtime.md, "Taking a run over"): written when a turn starts running
//! ([`TurnStage::Running`]: its calls, whose outcomes are unknown until the turn ends) and when it
//! ended ([`TurnStage::Between`]: the state the next turn starts from), besides when it is held.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use toolplane_core::Profile;
use toolplane_core::cycle::CycleDetector;
use toolplane_core::gate::{GateUsage, ToolRequestGate};
use toolplane_core::id::ToolId;
use toolplane_core::run_budget::RunBudget;
use toolplane_core::snapshot::InvocationToolSnapshot;
use toolplane_core::turn::ToolTurnContract;
use toolplane_model::ProviderFormat;

use super::invocation::{HeldTurn, Invocation, InvocationInner, InvocationStatus};

/// One invocation's held turn, stored under `held/<cell>/<run>/<invocation>.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldRecord {
    pub invocation_id: String,
    pub run_id: String,
    pub cell_id: String,
    pub created_ms: i64,
    pub snapshot_path: String,
    pub profile_version: u64,
    /// Kept in a held turn's record; a checkpoint leaves it out (it is written twice per turn)
    /// and the invocation's snapshot is read back from the run's workspace (`snapshot_path`)
    /// when the record is rebuilt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<InvocationToolSnapshot>,
    pub profile: Profile,
    pub format: ProviderFormat,
    pub turn: ToolTurnContract,
    pub round: u32,
    pub gate: GateUsage,
    pub cycle: CycleDetector,
    pub found: Vec<(ToolId, u32)>,
    pub run_budget: RunBudget,
    pub held: HeldTurn,
    /// What `held` is; records written before checkpoints existed are held turns.
    #[serde(default)]
    pub stage: TurnStage,
    /// The run's lease epoch of the runtime that wrote the record: a record of a newer epoch is
    /// never overwritten by an older driver.
    #[serde(default)]
    pub epoch: u64,
}

/// What a stored invocation record's turn is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStage {
    /// Calls held for a decision.
    #[default]
    Held,
    /// A turn whose calls were running: the state is the one before the turn.
    Running,
    /// No turn in progress: the state is the one the next turn starts from (`held` has no
    /// calls; a runtime-driven invocation's conversation is complete up to its last results).
    Between,
}

impl HeldRecord {
    /// The record of `inv` with `held` as its held turn (the turn may be partly collected).
    pub fn of(inv: &Invocation, inner: &InvocationInner, held: &HeldTurn) -> HeldRecord {
        HeldRecord::at(inv, inner, held, TurnStage::Held)
    }

    /// The record of `inv` with `turn` at `stage`.
    pub fn at(
        inv: &Invocation,
        inner: &InvocationInner,
        turn: &HeldTurn,
        stage: TurnStage,
    ) -> HeldRecord {
        let held = turn;
        HeldRecord {
            invocation_id: inv.id.clone(),
            run_id: inv.run.id.clone(),
            cell_id: inv.run.cell.clone(),
            created_ms: inv.created_ms,
            snapshot_path: inv.snapshot_path.clone(),
            profile_version: inv.profile_version,
            snapshot: (stage == TurnStage::Held).then(|| inner.snapshot.as_ref().clone()),
            profile: inner.profile.clone(),
            format: inner.format,
            turn: inner.turn.clone(),
            round: inner.round,
            gate: inner.gate.usage(),
            cycle: inner.cycle.clone(),
            found: inner.found.clone(),
            run_budget: inv.run.with_budget(|b| b.clone()),
            held: held.clone(),
            stage,
            epoch: inv.run.epoch(),
        }
    }

    /// The invocation's state as it was when the record was written: open, its turn held, or
    /// its running turn kept as interrupted (its calls' outcomes unknown), or between turns;
    /// `snapshot` is the record's own, else the one read back from the workspace.
    pub fn inner(&self, snapshot: InvocationToolSnapshot) -> InvocationInner {
        let snapshot = self.snapshot.clone().unwrap_or(snapshot);
        let (held, interrupted, unknown_outcome) = match self.stage {
            TurnStage::Held => (Some(self.held.clone()), None, None),
            TurnStage::Running => {
                let ids = self.held.calls.iter().map(|c| c.call_id.clone()).collect();
                (None, Some(self.held.clone()), Some((self.held.round, ids)))
            }
            TurnStage::Between => (None, None, None),
        };
        InvocationInner {
            gate: ToolRequestGate::restored(&snapshot, &self.gate),
            snapshot: Arc::new(snapshot),
            profile: self.profile.clone(),
            format: self.format,
            turn: self.turn.clone(),
            round: self.round,
            cycle: self.cycle.clone(),
            schemas: Default::default(),
            status: InvocationStatus::Open,
            failure: None,
            ended_ms: 0,
            returned: None,
            found: self.found.clone(),
            search_index: None,
            held,
            interrupted,
            unknown_outcome,
            recovered: Default::default(),
            conversation: self.held.conversation.clone(),
            checkpoint_version: None,
        }
    }
}
