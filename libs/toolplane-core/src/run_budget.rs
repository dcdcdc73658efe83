//! A run's budget: the tool calls and model tokens of a whole run — its root, every handoff
//! target and every delegated child together — against the limits its profile and its creator
//! set. Each invocation's own budgets stay with the gate; this one is shared by all of them, so a
//! thousand children cannot each spend a full invocation budget.
//!
//! Pure bookkeeping: the runtime keeps one [`RunBudget`] per run behind a lock and asks it before
//! the gate reserves a call ([`RunBudget::reserve_call`]) and after each model response that
//! reports its usage ([`RunBudget::charge_tokens`]). The closing tools (`workspace.commit`,
//! `workspace.finish`, `task.return`) are never counted, so an agent can always wrap up.

use serde::{Deserialize, Serialize};

use crate::builtin;
use crate::error::{AGENT_RUN_BUDGET_EXHAUSTED, CoreError};
use crate::id::ToolId;

/// Most tool calls a run budget may allow.
pub const MAX_RUN_TOOL_CALLS: u32 = 10_000_000;
/// Most model tokens a run budget may allow.
pub const MAX_RUN_MODEL_TOKENS: u64 = 1_000_000_000_000;

/// The limits of a run's budget; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunBudgetLimits {
    /// Tool calls of the whole run (closing tools not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u32>,
    /// Model tokens (input and output, as the provider reports them) of the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_tokens: Option<u64>,
}

impl RunBudgetLimits {
    pub fn is_unlimited(&self) -> bool {
        self.max_tool_calls.is_none() && self.max_model_tokens.is_none()
    }

    /// The tighter of two limits for each resource: a run's creator may lower its profile's
    /// budget, never raise it.
    pub fn narrowest(self, other: RunBudgetLimits) -> RunBudgetLimits {
        fn min<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        RunBudgetLimits {
            max_tool_calls: min(self.max_tool_calls, other.max_tool_calls),
            max_model_tokens: min(self.max_model_tokens, other.max_model_tokens),
        }
    }

    /// Each limit is at least 1 and at most its maximum.
    pub fn validate(&self, field: &str) -> Result<(), String> {
        if let Some(n) = self.max_tool_calls
            && !(1..=MAX_RUN_TOOL_CALLS).contains(&n)
        {
            return Err(format!(
                "{field}.maxToolCalls is {n}, outside 1..={MAX_RUN_TOOL_CALLS}"
            ));
        }
        if let Some(n) = self.max_model_tokens
            && !(1..=MAX_RUN_MODEL_TOKENS).contains(&n)
        {
            return Err(format!(
                "{field}.maxModelTokens is {n}, outside 1..={MAX_RUN_MODEL_TOKENS}"
            ));
        }
        Ok(())
    }
}

/// Which part of a run's budget is used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Exhausted {
    /// A call was refused because the run's calls were used up.
    ToolCalls,
    /// The model tokens reported so far reached the limit.
    ModelTokens,
}

/// A run's budget and what the run has used of it (serialisable, so a held turn can keep it
/// across a restart).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunBudget {
    limits: RunBudgetLimits,
    calls_used: u32,
    tokens_used: u64,
    /// A call was refused for the run's call budget.
    calls_refused: bool,
    /// [`RunBudget::newly_exhausted`] has told of the exhaustion.
    told: bool,
}

impl RunBudget {
    pub fn new(limits: RunBudgetLimits) -> Self {
        RunBudget {
            limits,
            ..RunBudget::default()
        }
    }

    pub fn limits(&self) -> RunBudgetLimits {
        self.limits
    }

    /// Sets the limits, keeping what was used.
    pub fn set_limits(&mut self, limits: RunBudgetLimits) {
        self.limits = limits;
    }

    pub fn calls_used(&self) -> u32 {
        self.calls_used
    }

    pub fn tokens_used(&self) -> u64 {
        self.tokens_used
    }

    /// Counts one call of `tool` against the run, or refuses it (a recoverable result for the
    /// model) when the run's calls are used up. Closing tools pass uncounted.
    pub fn reserve_call(&mut self, tool: &ToolId) -> Result<(), CoreError> {
        if is_closing(tool) {
            return Ok(());
        }
        if let Some(limit) = self.limits.max_tool_calls
            && self.calls_used >= limit
        {
            self.calls_refused = true;
            return Err(CoreError::new(
                AGENT_RUN_BUDGET_EXHAUSTED,
                format!(
                    "the run (this agent, the agents it handed off to and every delegated task together) has used all {limit} of its tool calls; commit and finish, or return, with what you have"
                ),
            ));
        }
        self.calls_used += 1;
        Ok(())
    }

    /// Adds tokens a model response reported; returns the run's total.
    pub fn charge_tokens(&mut self, tokens: u64) -> u64 {
        self.tokens_used = self.tokens_used.saturating_add(tokens);
        self.tokens_used
    }

    /// What is used up, if anything: a model request made now would go over the budget.
    pub fn exhausted(&self) -> Option<Exhausted> {
        if self.calls_refused {
            return Some(Exhausted::ToolCalls);
        }
        match self.limits.max_model_tokens {
            Some(limit) if self.tokens_used >= limit => Some(Exhausted::ModelTokens),
            _ => None,
        }
    }
}

impl RunBudget {
    /// What is used up, the first time it is asked once the budget is used up; `None` before and
    /// after. The run journals its exhaustion once.
    pub fn newly_exhausted(&mut self) -> Option<Exhausted> {
        let e = self.exhausted()?;
        if self.told {
            return None;
        }
        self.told = true;
        Some(e)
    }
}

/// The tools that wrap a run or a task up; never counted against the run's calls.
fn is_closing(tool: &ToolId) -> bool {
    [
        builtin::WORKSPACE_COMMIT,
        builtin::WORKSPACE_FINISH,
        builtin::TASK_RETURN,
    ]
    .iter()
    .any(|name| tool.is_builtin(name))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn id(name: &str) -> ToolId {
        ToolId::builtin(name).unwrap()
    }

    fn limits(calls: Option<u32>, tokens: Option<u64>) -> RunBudgetLimits {
        RunBudgetLimits {
            max_tool_calls: calls,
            max_model_tokens: tokens,
        }
    }

    #[test]
    fn calls_over_the_limit_are_refused_and_mark_the_budget_used_up() {
        let mut b = RunBudget::new(limits(Some(2), None));
        let roll = id(builtin::DICE_ROLL);
        assert!(b.reserve_call(&roll).is_ok());
        assert!(b.reserve_call(&roll).is_ok());
        assert_eq!(b.exhausted(), None, "used exactly, nothing refused yet");
        let e = b.reserve_call(&roll).unwrap_err();
        assert_eq!(e.code, AGENT_RUN_BUDGET_EXHAUSTED);
        assert_eq!(b.calls_used(), 2);
        assert_eq!(b.exhausted(), Some(Exhausted::ToolCalls));
    }

    #[test]
    fn closing_tools_are_never_counted_or_refused() {
        let mut b = RunBudget::new(limits(Some(1), None));
        assert!(b.reserve_call(&id(builtin::DICE_ROLL)).is_ok());
        for closing in [
            builtin::WORKSPACE_COMMIT,
            builtin::WORKSPACE_FINISH,
            builtin::TASK_RETURN,
        ] {
            assert!(b.reserve_call(&id(closing)).is_ok(), "{closing}");
        }
        assert_eq!(b.calls_used(), 1);
        assert_eq!(b.exhausted(), None);
    }

    #[test]
    fn tokens_reaching_the_limit_use_the_budget_up() {
        let mut b = RunBudget::new(limits(None, Some(1000)));
        assert_eq!(b.charge_tokens(999), 999);
        assert_eq!(b.exhausted(), None);
        assert_eq!(b.newly_exhausted(), None);
        assert_eq!(b.charge_tokens(1), 1000);
        assert_eq!(b.exhausted(), Some(Exhausted::ModelTokens));
        assert_eq!(b.newly_exhausted(), Some(Exhausted::ModelTokens));
        assert_eq!(b.newly_exhausted(), None, "told once");
        assert_eq!(
            b.exhausted(),
            Some(Exhausted::ModelTokens),
            "and still used up"
        );
    }

    #[test]
    fn no_limits_never_run_out() {
        let mut b = RunBudget::new(RunBudgetLimits::default());
        for _ in 0..10_000 {
            b.reserve_call(&id(builtin::DICE_ROLL)).unwrap();
        }
        b.charge_tokens(u64::MAX);
        assert_eq!(b.exhausted(), None);
    }

    #[test]
    fn the_narrowest_limit_of_each_resource_wins() {
        let cases = [
            (limits(None, None), limits(None, None), limits(None, None)),
            (
                limits(Some(5), None),
                limits(None, Some(9)),
                limits(Some(5), Some(9)),
            ),
            (
                limits(Some(5), Some(9)),
                limits(Some(7), Some(3)),
                limits(Some(5), Some(3)),
            ),
        ];
        for (a, b, want) in cases {
            assert_eq!(a.narrowest(b), want);
            assert_eq!(b.narrowest(a), want);
        }
    }

    #[test]
    fn limits_of_zero_or_over_the_maximum_are_invalid() {
        assert!(limits(Some(0), None).validate("runBudget").is_err());
        assert!(limits(None, Some(0)).validate("runBudget").is_err());
        assert!(
            limits(Some(MAX_RUN_TOOL_CALLS + 1), None)
                .validate("runBudget")
                .is_err()
        );
        assert!(limits(Some(1), Some(1)).validate("runBudget").is_ok());
    }
}
