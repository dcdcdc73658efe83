//! The cycle detector (FEATURES E6; seed 004 "Progress-Aware 工具").
//!
//! It watches an invocation's calls for streaks that look like a loop:
//! - calling the same tool again continues the streak (`+1`); any other tool starts a new one;
//! - for a progress-aware tool (write, patch, plus a profile's `extraProgressAware`), a call whose
//!   arguments differ from the previous call's is progress, not repetition: the streak is halved
//!   (`streak /= 2`) before this call counts;
//! - an exploration streak (reading, searching) may run longer than an action streak before it
//!   warns and then stops, because looking around is cheap and usually purposeful.
//!
//! At the warn threshold the runtime appends a warning to the tool result; at the stop threshold it
//! stops the invocation. Both are journalled (`cycle_detected`).

use serde::{Deserialize, Serialize};

use crate::category::Category;
use crate::id::ToolId;

/// Thresholds per category. Defaults: exploration warns at 8 and stops at 16 calls in a streak;
/// action warns at 5 and stops at 10.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CycleThresholds {
    pub exploration_warn: u32,
    pub exploration_stop: u32,
    pub action_warn: u32,
    pub action_stop: u32,
}

impl Default for CycleThresholds {
    fn default() -> Self {
        CycleThresholds {
            exploration_warn: 8,
            exploration_stop: 16,
            action_warn: 5,
            action_stop: 10,
        }
    }
}

/// The detector's verdict on one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum CycleVerdict {
    Ok { streak: u32 },
    Warn { streak: u32 },
    Stop { streak: u32 },
}

/// The state of one invocation's detector.
#[derive(Debug, Clone, Default)]
pub struct CycleDetector {
    thresholds: CycleThresholds,
    last: Option<(ToolId, u64)>,
    streak: u32,
}

impl CycleDetector {
    pub fn new(thresholds: CycleThresholds) -> Self {
        CycleDetector {
            thresholds,
            last: None,
            streak: 0,
        }
    }

    /// Observes one call. `arguments_fingerprint` identifies the call's arguments (a hash of their
    /// canonical JSON); `progress_aware` comes from the binding.
    pub fn observe(
        &mut self,
        tool: &ToolId,
        category: Category,
        progress_aware: bool,
        arguments_fingerprint: u64,
    ) -> CycleVerdict {
        let same_tool = self.last.as_ref().is_some_and(|(t, _)| t == tool);
        let same_args = self
            .last
            .as_ref()
            .is_some_and(|(_, fp)| *fp == arguments_fingerprint);
        self.streak = if !same_tool {
            1
        } else if progress_aware && !same_args {
            self.streak / 2 + 1
        } else {
            self.streak + 1
        };
        self.last = Some((tool.clone(), arguments_fingerprint));
        let (warn, stop) = match category {
            Category::Exploration => (
                self.thresholds.exploration_warn,
                self.thresholds.exploration_stop,
            ),
            Category::Action => (self.thresholds.action_warn, self.thresholds.action_stop),
        };
        if self.streak >= stop {
            CycleVerdict::Stop {
                streak: self.streak,
            }
        } else if self.streak >= warn {
            CycleVerdict::Warn {
                streak: self.streak,
            }
        } else {
            CycleVerdict::Ok {
                streak: self.streak,
            }
        }
    }

    pub fn streak(&self) -> u32 {
        self.streak
    }
}

/// A stable fingerprint of a JSON value (FNV-1a over its serialisation). Object key order follows
/// the parsed document; providers send arguments in the model's own order, which is stable for
/// repeated identical calls.
pub fn fingerprint(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> ToolId {
        ToolId::parse(s).unwrap()
    }

    #[test]
    fn identical_action_calls_warn_then_stop() {
        let mut d = CycleDetector::new(CycleThresholds::default());
        let t = id("ext/h:send");
        let verdicts: Vec<CycleVerdict> = (0..10)
            .map(|_| d.observe(&t, Category::Action, false, 1))
            .collect();
        assert_eq!(verdicts[3], CycleVerdict::Ok { streak: 4 });
        assert_eq!(verdicts[4], CycleVerdict::Warn { streak: 5 });
        assert_eq!(verdicts[9], CycleVerdict::Stop { streak: 10 });
    }

    #[test]
    fn exploration_gets_more_room() {
        let mut d = CycleDetector::new(CycleThresholds::default());
        let t = id("builtin:workspace.read_file");
        for i in 1..8 {
            assert_eq!(
                d.observe(&t, Category::Exploration, false, 1),
                CycleVerdict::Ok { streak: i }
            );
        }
        assert_eq!(
            d.observe(&t, Category::Exploration, false, 1),
            CycleVerdict::Warn { streak: 8 }
        );
    }

    #[test]
    fn another_tool_resets() {
        let mut d = CycleDetector::new(CycleThresholds::default());
        let a = id("ext/h:a");
        let b = id("ext/h:b");
        for _ in 0..4 {
            d.observe(&a, Category::Action, false, 1);
        }
        assert_eq!(
            d.observe(&b, Category::Action, false, 1),
            CycleVerdict::Ok { streak: 1 }
        );
    }

    #[test]
    fn progress_aware_tools_halve_on_changed_arguments() {
        let mut d = CycleDetector::new(CycleThresholds::default());
        let w = id("builtin:workspace.write_file");
        // Twenty writes with different content never stop: the streak stays small.
        for i in 0..20u64 {
            let v = d.observe(&w, Category::Action, true, i);
            assert!(matches!(v, CycleVerdict::Ok { .. }), "{i}: {v:?}");
        }
        assert!(d.streak() <= 2);
        // The same write repeated is a loop even for a progress-aware tool.
        let mut last = CycleVerdict::Ok { streak: 0 };
        for _ in 0..10 {
            last = d.observe(&w, Category::Action, true, 99);
        }
        assert!(matches!(last, CycleVerdict::Stop { .. }), "{last:?}");
        // The same tool with changing arguments, when not progress-aware, keeps counting.
        let mut d = CycleDetector::new(CycleThresholds::default());
        let s = id("ext/h:send");
        let v: Vec<CycleVerdict> = (0..5u64)
            .map(|i| d.observe(&s, Category::Action, false, i))
            .collect();
        assert_eq!(v[4], CycleVerdict::Warn { streak: 5 });
    }
}
