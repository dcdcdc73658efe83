//! A held turn as the runtime's store keeps it: everything a host-driven invocation with calls
//! held for approval needs to be rebuilt by a later process — its snapshot, profile, format,
//! current turn contract and round, what its gate and cycle detector have counted, the tools its
//! searches found, its run's budget, and the held turn itself (its calls, the results so far and
//! the calls still held). Data only; writing, reading and rebuilding are the layers above.

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
    pub snapshot: InvocationToolSnapshot,
    pub profile: Profile,
    pub format: ProviderFormat,
    pub turn: ToolTurnContract,
    pub round: u32,
    pub gate: GateUsage,
    pub cycle: CycleDetector,
    pub found: Vec<(ToolId, u32)>,
    pub run_budget: RunBudget,
    pub held: HeldTurn,
}

impl HeldRecord {
    /// The record of `inv` with `held` as its held turn (the turn may be partly collected).
    pub fn of(inv: &Invocation, inner: &InvocationInner, held: &HeldTurn) -> HeldRecord {
        HeldRecord {
            invocation_id: inv.id.clone(),
            run_id: inv.run.id.clone(),
            cell_id: inv.run.cell.clone(),
            created_ms: inv.created_ms,
            snapshot_path: inv.snapshot_path.clone(),
            profile_version: inv.profile_version,
            snapshot: inner.snapshot.as_ref().clone(),
            profile: inner.profile.clone(),
            format: inner.format,
            turn: inner.turn.clone(),
            round: inner.round,
            gate: inner.gate.usage(),
            cycle: inner.cycle.clone(),
            found: inner.found.clone(),
            run_budget: inv.run.with_budget(|b| b.clone()),
            held: held.clone(),
        }
    }

    /// The invocation's state as it was when the record was written: open, its turn held.
    pub fn inner(&self) -> InvocationInner {
        InvocationInner {
            gate: ToolRequestGate::restored(&self.snapshot, &self.gate),
            snapshot: Arc::new(self.snapshot.clone()),
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
            held: Some(self.held.clone()),
        }
    }
}
