//! The tool request gate.
//!
//! Every decoded call passes the gate before it may run: it must belong to this invocation's
//! snapshot and to the current turn, respect the turn's tool choice, and fit the frozen budgets.
//! The check and the reservation are one step taken through `&mut self`, so the gate has a single
//! owner and two calls of one invocation can never interleave between check and reserve (the
//! runtime processes an invocation's calls one at a time). Snapshot, turn and choice failures are
//! provider-contract violations; an exhausted budget is a recoverable result for the model.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{
    AGENT_TOOL_BUDGET_EXHAUSTED, CoreError, MODEL_TOOL_CHOICE_VIOLATED, MODEL_UNKNOWN_TOOL_ALIAS,
};
use crate::id::ToolId;
use crate::invocation::ToolInvocation;
use crate::snapshot::InvocationToolSnapshot;
use crate::turn::{ToolChoice, ToolTurnContract};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ToolBudget {
    limit: Option<u32>,
    used: u32,
}

/// Budgets and membership of one invocation.
#[derive(Debug, Clone)]
pub struct ToolRequestGate {
    invocation_id: String,
    total_limit: u32,
    used_total: u32,
    /// Tool id → position in `budgets`; shared, since it never changes after compile.
    index: Arc<HashMap<ToolId, usize>>,
    budgets: Vec<ToolBudget>,
}

/// What a gate has reserved so far: the invocation's calls, and each binding's in the snapshot's
/// order. Kept with a turn that outlives the process (a held turn), so a gate rebuilt from the same
/// snapshot goes on counting where it stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateUsage {
    pub total: u32,
    pub per_tool: Vec<u32>,
}

/// What a successful check reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// Calls of the invocation so far, this one included.
    pub invocation_calls: u32,
    /// Calls of this tool so far, this one included.
    pub tool_calls: u32,
}

impl ToolRequestGate {
    pub fn new(snapshot: &InvocationToolSnapshot) -> Self {
        ToolRequestGate {
            invocation_id: snapshot.invocation_id.clone(),
            total_limit: snapshot.max_calls_per_invocation,
            used_total: 0,
            index: Arc::new(
                snapshot
                    .bindings
                    .iter()
                    .enumerate()
                    .map(|(i, b)| (b.tool_id().clone(), i))
                    .collect(),
            ),
            budgets: snapshot
                .bindings
                .iter()
                .map(|b| ToolBudget {
                    limit: b.max_calls,
                    used: 0,
                })
                .collect(),
        }
    }

    /// The gate of `snapshot` with `usage` already reserved (see [`GateUsage`]); counts for
    /// bindings the snapshot does not have are ignored.
    pub fn restored(snapshot: &InvocationToolSnapshot, usage: &GateUsage) -> Self {
        let mut gate = ToolRequestGate::new(snapshot);
        gate.used_total = usage.total;
        for (budget, used) in gate.budgets.iter_mut().zip(&usage.per_tool) {
            budget.used = *used;
        }
        gate
    }

    /// What the gate has reserved so far.
    pub fn usage(&self) -> GateUsage {
        GateUsage {
            total: self.used_total,
            per_tool: self.budgets.iter().map(|b| b.used).collect(),
        }
    }

    /// Checks one call against snapshot, turn, choice and budgets, and reserves its budget.
    pub fn check_and_reserve(
        &mut self,
        turn: &ToolTurnContract,
        call: &ToolInvocation,
    ) -> Result<Reservation, CoreError> {
        self.check_and_reserve_within(turn, call, || Ok(()))
    }

    /// [`ToolRequestGate::check_and_reserve`] inside a budget beyond the invocation (the run's):
    /// `outer` is asked once every check of this gate has passed, and reserves the call there; the
    /// call is reserved here only when it agrees. So a contract violation is still found first,
    /// and a call the outer budget refuses takes nothing from this invocation's budgets.
    pub fn check_and_reserve_within(
        &mut self,
        turn: &ToolTurnContract,
        call: &ToolInvocation,
        outer: impl FnOnce() -> Result<(), CoreError>,
    ) -> Result<Reservation, CoreError> {
        let tool = &call.tool_id;
        if turn.invocation_id() != self.invocation_id {
            return Err(CoreError::new(
                MODEL_UNKNOWN_TOOL_ALIAS,
                format!(
                    "turn {} belongs to invocation {}, not {}",
                    turn.turn(),
                    turn.invocation_id(),
                    self.invocation_id
                ),
            ));
        }
        let Some(budget) = self
            .index
            .get(tool)
            .copied()
            .and_then(|i| self.budgets.get_mut(i))
        else {
            return Err(CoreError::new(
                MODEL_UNKNOWN_TOOL_ALIAS,
                format!(
                    "`{tool}` is not in invocation {}'s snapshot",
                    self.invocation_id
                ),
            ));
        };
        if !turn.contains(tool) {
            return Err(CoreError::new(
                MODEL_UNKNOWN_TOOL_ALIAS,
                format!("`{tool}` was not advertised in turn {}", turn.turn()),
            ));
        }
        match turn.choice() {
            ToolChoice::None => {
                return Err(CoreError::new(
                    MODEL_TOOL_CHOICE_VIOLATED,
                    format!("turn {} allowed no tool calls", turn.turn()),
                ));
            }
            ToolChoice::Specific(only) if only != tool => {
                return Err(CoreError::new(
                    MODEL_TOOL_CHOICE_VIOLATED,
                    format!(
                        "turn {} allowed only `{only}`, the model called `{tool}`",
                        turn.turn()
                    ),
                ));
            }
            _ => {}
        }
        if self.used_total >= self.total_limit {
            return Err(CoreError::new(
                AGENT_TOOL_BUDGET_EXHAUSTED,
                format!(
                    "this invocation has used all {} of its tool calls; finish with what you have",
                    self.total_limit
                ),
            ));
        }
        if let Some(limit) = budget.limit
            && budget.used >= limit
        {
            return Err(CoreError::new(
                AGENT_TOOL_BUDGET_EXHAUSTED,
                format!(
                    "`{tool}` has used all {limit} of its calls in this invocation; use another approach"
                ),
            ));
        }
        outer()?;
        budget.used += 1;
        self.used_total += 1;
        Ok(Reservation {
            invocation_calls: self.used_total,
            tool_calls: budget.used,
        })
    }

    pub fn used_total(&self) -> u32 {
        self.used_total
    }

    pub fn remaining_total(&self) -> u32 {
        self.total_limit.saturating_sub(self.used_total)
    }
}
