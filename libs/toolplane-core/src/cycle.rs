//! The cycle detector: it stops an invocation that is stuck in a loop of tool calls, and leaves
//! alone one that is exploring.
//!
//! It keeps two streaks over the invocation's calls, in order:
//! - the **identical-call streak** counts the same tool called with the same arguments (the same
//!   fingerprint of their JSON) in a row. Repeating a call unchanged is the clearest sign of a loop:
//!   the answer will not change, so the thresholds are low (warn at 3, stop at 5). Another tool or
//!   other arguments start it again at 1.
//! - the **same-tool streak** counts one tool called in a row whatever its arguments, for a tool
//!   called without end. A call with new arguments is usually progress, so the thresholds are much
//!   higher (warn at 30, stop at 60, under a third of the default call budget of 200), and for two
//!   kinds of tools new arguments do not count like a repeat at all: the streak is halved
//!   (`streak / 2 + 1`), so it stays at 1 or 2 however long the run of new arguments:
//!   - exploration tools (reading, searching, listing): reading twenty different files in a row is
//!     how an agent learns a repository; the invocation's call budget bounds it;
//!   - progress-aware tools (write, patch, delegate, plus a profile's `tools.extraProgressAware`):
//!     new content is progress.
//!
//!   A call that repeats the previous arguments adds 1, and another tool starts it again at 1.
//!
//! A call's verdict is the worse of the two: at a warn threshold the runtime appends a note to the
//! tool result, at a stop threshold it stops the invocation (`agent.cycle_detected`); both are
//! journalled (`cycle_detected`) with the streak that reached the threshold. A profile sets the
//! four thresholds in `tools.cycle` (docs/profiles.md).
//!
//! Streaks see consecutive calls only: a model alternating between two calls (read `a`, read `b`,
//! read `a`, …) is not caught here; the invocation's call and round budgets bound it. Counting
//! repeats within a window would catch it, but would also count the re-read that checks a file
//! after each edit, which is progress.

use serde::{Deserialize, Serialize};

use crate::category::Category;
use crate::error::{CoreError, PROFILE_INVALID_LIMIT};
use crate::id::ToolId;

/// Largest threshold a profile may set.
pub const MAX_CYCLE_THRESHOLD: u32 = 10_000;

/// The detector's thresholds (a profile's `tools.cycle`; absent keys keep their defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct CycleThresholds {
    /// Identical calls in a row that add a warning to the result (default 3).
    pub identical_warn: u32,
    /// Identical calls in a row that stop the invocation (default 5).
    pub identical_stop: u32,
    /// Same-tool streak that adds a warning to the result (default 30).
    pub same_tool_warn: u32,
    /// Same-tool streak that stops the invocation (default 60).
    pub same_tool_stop: u32,
}

impl Default for CycleThresholds {
    fn default() -> Self {
        CycleThresholds {
            identical_warn: 3,
            identical_stop: 5,
            same_tool_warn: 30,
            same_tool_stop: 60,
        }
    }
}

impl CycleThresholds {
    pub fn is_default(&self) -> bool {
        *self == CycleThresholds::default()
    }

    /// Every threshold is 1 to [`MAX_CYCLE_THRESHOLD`], and a warning comes no later than its
    /// stop (equal means the streak stops without a warning first).
    pub fn validate(&self) -> Result<(), CoreError> {
        let pairs = [
            ("identical", self.identical_warn, self.identical_stop),
            ("sameTool", self.same_tool_warn, self.same_tool_stop),
        ];
        for (name, warn, stop) in pairs {
            for (key, value) in [("Warn", warn), ("Stop", stop)] {
                if value == 0 || value > MAX_CYCLE_THRESHOLD {
                    return Err(CoreError::new(
                        PROFILE_INVALID_LIMIT,
                        format!(
                            "tools.cycle.{name}{key} is {value}, not between 1 and {MAX_CYCLE_THRESHOLD}"
                        ),
                    ));
                }
            }
            if warn > stop {
                return Err(CoreError::new(
                    PROFILE_INVALID_LIMIT,
                    format!(
                        "tools.cycle.{name}Warn ({warn}) is over tools.cycle.{name}Stop ({stop})"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The detector's verdict on one call; `streak` is the streak that reached the threshold (the
/// longer one when the call is fine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum CycleVerdict {
    Ok { streak: u32 },
    Warn { streak: u32 },
    Stop { streak: u32 },
}

/// The state of one invocation's detector (serialisable, so a held turn can keep it across a
/// restart).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CycleDetector {
    thresholds: CycleThresholds,
    last: Option<(ToolId, u64)>,
    identical: u32,
    same_tool: u32,
}

impl CycleDetector {
    pub fn new(thresholds: CycleThresholds) -> Self {
        CycleDetector {
            thresholds,
            ..CycleDetector::default()
        }
    }

    /// Observes one call. `arguments_fingerprint` identifies the call's arguments (a hash of their
    /// JSON); `progress_aware` comes from the binding.
    pub fn observe(
        &mut self,
        tool: &ToolId,
        category: Category,
        progress_aware: bool,
        arguments_fingerprint: u64,
    ) -> CycleVerdict {
        let same_tool = self.last.as_ref().is_some_and(|(t, _)| t == tool);
        let same_args = same_tool
            && self
                .last
                .as_ref()
                .is_some_and(|(_, fp)| *fp == arguments_fingerprint);
        self.identical = if same_args { self.identical + 1 } else { 1 };
        let new_arguments_are_progress = progress_aware || category == Category::Exploration;
        self.same_tool = if !same_tool {
            1
        } else if !same_args && new_arguments_are_progress {
            self.same_tool / 2 + 1
        } else {
            self.same_tool + 1
        };
        self.last = Some((tool.clone(), arguments_fingerprint));
        let t = &self.thresholds;
        let identical = (self.identical, t.identical_warn, t.identical_stop);
        let same = (self.same_tool, t.same_tool_warn, t.same_tool_stop);
        let reached = |(streak, _, stop): (u32, u32, u32)| streak >= stop;
        let warned = |(streak, warn, _): (u32, u32, u32)| streak >= warn;
        if let Some((streak, ..)) = [identical, same].into_iter().find(|s| reached(*s)) {
            CycleVerdict::Stop { streak }
        } else if let Some((streak, ..)) = [identical, same].into_iter().find(|s| warned(*s)) {
            CycleVerdict::Warn { streak }
        } else {
            CycleVerdict::Ok {
                streak: self.identical.max(self.same_tool),
            }
        }
    }

    /// The identical-call streak after the last call.
    pub fn identical_streak(&self) -> u32 {
        self.identical
    }

    /// The same-tool streak after the last call.
    pub fn same_tool_streak(&self) -> u32 {
        self.same_tool
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
    use proptest::prelude::*;

    use super::*;
    use crate::error::PROFILE_INVALID_LIMIT;

    fn id(s: &str) -> ToolId {
        ToolId::parse(s).unwrap()
    }

    fn read() -> ToolId {
        id("builtin:workspace.read_file")
    }

    /// The verdicts of `calls` `(tool, category, progress_aware, fingerprint)` in order.
    fn run(t: CycleThresholds, calls: &[(ToolId, Category, bool, u64)]) -> Vec<CycleVerdict> {
        let mut d = CycleDetector::new(t);
        calls
            .iter()
            .map(|(tool, cat, pa, fp)| d.observe(tool, *cat, *pa, *fp))
            .collect()
    }

    fn first_stop(verdicts: &[CycleVerdict]) -> Option<usize> {
        verdicts
            .iter()
            .position(|v| matches!(v, CycleVerdict::Stop { .. }))
    }

    #[test]
    fn identical_calls_warn_at_3_and_stop_at_5_for_every_kind_of_tool() {
        for (tool, cat, pa) in [
            (read(), Category::Exploration, false),
            (id("ext/h:send"), Category::Action, false),
            (id("builtin:workspace.write_file"), Category::Action, true),
        ] {
            let calls = vec![(tool.clone(), cat, pa, 7); 5];
            let v = run(CycleThresholds::default(), &calls);
            assert_eq!(
                v,
                [
                    CycleVerdict::Ok { streak: 1 },
                    CycleVerdict::Ok { streak: 2 },
                    CycleVerdict::Warn { streak: 3 },
                    CycleVerdict::Warn { streak: 4 },
                    CycleVerdict::Stop { streak: 5 },
                ],
                "{tool}"
            );
        }
    }

    #[test]
    fn twenty_different_reads_in_a_row_are_fine() {
        let calls: Vec<_> = (0..20u64)
            .map(|i| (read(), Category::Exploration, false, i))
            .collect();
        let v = run(CycleThresholds::default(), &calls);
        assert!(
            v.iter().all(|v| matches!(v, CycleVerdict::Ok { .. })),
            "{v:?}"
        );
    }

    #[test]
    fn one_action_tool_with_ever_new_arguments_stops_only_at_the_same_tool_threshold() {
        let send = id("ext/h:send");
        let calls: Vec<_> = (0..60u64)
            .map(|i| (send.clone(), Category::Action, false, i))
            .collect();
        let v = run(CycleThresholds::default(), &calls);
        assert_eq!(v[28], CycleVerdict::Ok { streak: 29 });
        assert_eq!(v[29], CycleVerdict::Warn { streak: 30 });
        assert_eq!(first_stop(&v), Some(59));
        assert_eq!(v[59], CycleVerdict::Stop { streak: 60 });
    }

    #[test]
    fn another_tool_or_new_arguments_start_the_identical_streak_again() {
        let a = id("ext/h:a");
        let b = id("ext/h:b");
        let mut d = CycleDetector::new(CycleThresholds::default());
        for _ in 0..4 {
            d.observe(&a, Category::Action, false, 1);
        }
        assert_eq!(d.identical_streak(), 4);
        d.observe(&a, Category::Action, false, 2);
        assert_eq!((d.identical_streak(), d.same_tool_streak()), (1, 5));
        assert_eq!(
            d.observe(&b, Category::Action, false, 2),
            CycleVerdict::Ok { streak: 1 }
        );
        assert_eq!((d.identical_streak(), d.same_tool_streak()), (1, 1));
    }

    #[test]
    fn progress_aware_tools_halve_the_same_tool_streak_on_new_arguments() {
        let w = id("builtin:workspace.write_file");
        let mut d = CycleDetector::new(CycleThresholds::default());
        // Four identical writes build the streak up; new content halves it.
        for _ in 0..4 {
            d.observe(&w, Category::Action, true, 99);
        }
        assert_eq!(d.same_tool_streak(), 4);
        d.observe(&w, Category::Action, true, 100);
        assert_eq!(d.same_tool_streak(), 3, "4 / 2 + 1");
        // Two hundred writes with different content never warn.
        for i in 0..200u64 {
            let v = d.observe(&w, Category::Action, true, i);
            assert!(matches!(v, CycleVerdict::Ok { .. }), "{i}: {v:?}");
        }
        assert!(d.same_tool_streak() <= 2);
        // The same tool with new arguments, when neither progress-aware nor exploration, counts.
        let s = id("ext/h:send");
        let mut d = CycleDetector::new(CycleThresholds::default());
        for i in 0..10u64 {
            d.observe(&s, Category::Action, false, i);
        }
        assert_eq!(d.same_tool_streak(), 10);
    }

    #[test]
    fn a_profiles_thresholds_apply() {
        let t = CycleThresholds {
            identical_warn: 2,
            identical_stop: 2,
            same_tool_warn: 4,
            same_tool_stop: 6,
        };
        let twice = vec![(read(), Category::Exploration, false, 1); 2];
        assert_eq!(run(t, &twice)[1], CycleVerdict::Stop { streak: 2 });
        let send = id("ext/h:send");
        let calls: Vec<_> = (0..6u64)
            .map(|i| (send.clone(), Category::Action, false, i))
            .collect();
        let v = run(t, &calls);
        assert_eq!(v[3], CycleVerdict::Warn { streak: 4 });
        assert_eq!(first_stop(&v), Some(5));
    }

    #[test]
    fn thresholds_are_validated() {
        assert!(CycleThresholds::default().validate().is_ok());
        let d = CycleThresholds::default();
        for bad in [
            CycleThresholds {
                identical_warn: 0,
                ..d
            },
            CycleThresholds {
                same_tool_stop: MAX_CYCLE_THRESHOLD + 1,
                ..d
            },
            CycleThresholds {
                identical_warn: 6,
                identical_stop: 5,
                ..d
            },
            CycleThresholds {
                same_tool_warn: 61,
                ..d
            },
        ] {
            assert_eq!(
                bad.validate().unwrap_err().code,
                PROFILE_INVALID_LIMIT,
                "{bad:?}"
            );
        }
    }

    proptest! {
        /// Exploring never stops: N distinct reads in a row, N up to 500, stay `Ok`.
        #[test]
        fn an_exploration_of_distinct_arguments_never_stops(n in 1usize..=500, seed in any::<u64>()) {
            let calls: Vec<_> = (0..n as u64)
                .map(|i| (read(), Category::Exploration, false, seed.wrapping_add(i)))
                .collect();
            let v = run(CycleThresholds::default(), &calls);
            let all_ok = v.iter().all(|v| matches!(v, CycleVerdict::Ok { .. }));
            prop_assert!(all_ok, "{:?}", v);
        }

        /// Any tool called with the same arguments stops at exactly the identical threshold,
        /// whatever came before it.
        #[test]
        fn identical_calls_stop_at_the_threshold(
            before in prop::collection::vec((0u8..3, 0u64..4), 0..40),
            stop in 2u32..12,
            progress_aware in any::<bool>(),
        ) {
            let t = CycleThresholds { identical_warn: 1, identical_stop: stop, same_tool_warn: 10_000, same_tool_stop: 10_000 };
            let tools = [read(), id("ext/h:send"), id("builtin:workspace.write_file")];
            let mut d = CycleDetector::new(t);
            for (tool, fp) in &before {
                d.observe(&tools[*tool as usize], Category::Action, false, *fp);
            }
            // A call unlike anything before starts the streak.
            let tool = id("ext/h:loop");
            let verdicts: Vec<_> = (0..stop).map(|_| d.observe(&tool, Category::Action, progress_aware, 1_000)).collect();
            prop_assert_eq!(first_stop(&verdicts), Some(stop as usize - 1));
            prop_assert_eq!(verdicts[stop as usize - 1], CycleVerdict::Stop { streak: stop });
        }
    }
}
