//! `dice.roll` notation: `d6`, `1d20`, `3d6+4`, `2d10-1`.
//!
//! Parsing and totalling are pure; the caller supplies the random source, so rolls are testable
//! and the runtime decides where randomness comes from.
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use serde::{Deserialize, Serialize};

use crate::error::{CoreError, TOOL_INVALID_ARGUMENTS};

/// Most dice in one roll.
pub const MAX_DICE: u32 = 100;
/// Most sides of one die.
pub const MAX_SIDES: u32 = 1000;
/// Largest modifier, either sign.
pub const MAX_MODIFIER: i64 = 10_000;

/// A parsed roll: `count` dice of `sides` sides plus `modifier`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiceRoll {
    pub count: u32,
    pub sides: u32,
    pub modifier: i64,
}

/// The outcome of a roll.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiceOutcome {
    pub notation: String,
    pub rolls: Vec<u32>,
    pub modifier: i64,
    pub total: i64,
}

impl DiceRoll {
    /// Parses `[count]d<sides>[+|-<modifier>]`, ignoring spaces and case.
    pub fn parse(notation: &str) -> Result<DiceRoll, CoreError> {
        let err = |why: &str| {
            CoreError::new(
                TOOL_INVALID_ARGUMENTS,
                format!(
                    "`{}` is not dice notation: {why}; try \"d6\", \"1d20\" or \"3d6+4\"",
                    notation.chars().take(40).collect::<String>()
                ),
            )
        };
        let s: String = notation
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .to_ascii_lowercase();
        let Some((count, rest)) = s.split_once('d') else {
            return Err(err("missing `d`"));
        };
        let count: u32 = if count.is_empty() {
            1
        } else {
            count.parse().map_err(|_| err("bad dice count"))?
        };
        let (sides, modifier) = match rest.find(['+', '-']) {
            Some(i) => {
                // Digits only after the sign, bounded before it is applied: `+-5` is not a
                // modifier, and no value can overflow on negation.
                let (sides, signed) = rest
                    .split_at_checked(i)
                    .ok_or_else(|| err("bad modifier"))?;
                let negative = signed.starts_with('-');
                let digits = signed.get(1..).unwrap_or_default();
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err("bad modifier"));
                }
                let m: i64 = match digits.parse() {
                    Ok(m) if m <= MAX_MODIFIER => m,
                    _ => return Err(err("the modifier is at most 10000")),
                };
                (sides, if negative { m.saturating_neg() } else { m })
            }
            None => (rest, 0),
        };
        let sides: u32 = sides.parse().map_err(|_| err("bad number of sides"))?;
        if count == 0 || count > MAX_DICE {
            return Err(err("between 1 and 100 dice"));
        }
        if !(2..=MAX_SIDES).contains(&sides) {
            return Err(err("dice have 2 to 1000 sides"));
        }
        Ok(DiceRoll {
            count,
            sides,
            modifier,
        })
    }

    /// Rolls with `die(sides)` returning a value in `1..=sides`.
    pub fn roll(&self, mut die: impl FnMut(u32) -> u32) -> DiceOutcome {
        let rolls: Vec<u32> = (0..self.count)
            .map(|_| die(self.sides).clamp(1, self.sides))
            .collect();
        let total = rolls
            .iter()
            .fold(0i64, |sum, &r| sum.saturating_add(i64::from(r)))
            .saturating_add(self.modifier);
        DiceOutcome {
            notation: self.to_string(),
            rolls,
            modifier: self.modifier,
            total,
        }
    }
}

impl std::fmt::Display for DiceRoll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}d{}", self.count, self.sides)?;
        match self.modifier {
            0 => Ok(()),
            m if m > 0 => write!(f, "+{m}"),
            m => write!(f, "{m}"),
        }
    }
}

impl DiceOutcome {
    /// What the model reads: `3d6+4: [2, 5, 6] + 4 = 17`.
    pub fn describe(&self) -> String {
        let rolls = self
            .rolls
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        match self.modifier {
            0 => format!("{}: [{rolls}] = {}", self.notation, self.total),
            m if m > 0 => format!("{}: [{rolls}] + {m} = {}", self.notation, self.total),
            m => format!(
                "{}: [{rolls}] - {} = {}",
                self.notation,
                m.unsigned_abs(),
                self.total
            ),
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_notation() {
        assert_eq!(
            DiceRoll::parse("d6").unwrap(),
            DiceRoll {
                count: 1,
                sides: 6,
                modifier: 0
            }
        );
        assert_eq!(
            DiceRoll::parse("1d20").unwrap(),
            DiceRoll {
                count: 1,
                sides: 20,
                modifier: 0
            }
        );
        assert_eq!(
            DiceRoll::parse("3d6+4").unwrap(),
            DiceRoll {
                count: 3,
                sides: 6,
                modifier: 4
            }
        );
        assert_eq!(
            DiceRoll::parse(" 2D10 - 1 ").unwrap(),
            DiceRoll {
                count: 2,
                sides: 10,
                modifier: -1
            }
        );
        for bad in [
            "",
            "6",
            "d",
            "0d6",
            "101d6",
            "d1",
            "d1001",
            "3d6+",
            "3d6+x",
            "xd6",
            "3d6+99999",
            "d6--9223372036854775808",
            "d6-9223372036854775808",
            "d6+99999999999999999999",
            "d6+-5",
            "d6++5",
            "d6+5+5",
            "\u{e9}d6",
            "d6\u{e9}",
        ] {
            assert_eq!(
                DiceRoll::parse(bad).unwrap_err().code,
                TOOL_INVALID_ARGUMENTS,
                "{bad}"
            );
        }
    }

    proptest::proptest! {
        /// Whatever the model sends, parsing answers (a roll or a recoverable error) and a parsed
        /// roll's total stays within its bounds.
        #[test]
        fn any_notation_parses_or_is_refused(notation in ".{0,40}", extreme in proptest::num::i64::ANY) {
            for text in [notation.clone(), format!("d6+{extreme}"), format!("d6-{extreme}"), format!("2d8{extreme}")] {
                if let Ok(roll) = DiceRoll::parse(&text) {
                    proptest::prop_assert!(roll.modifier.abs() <= MAX_MODIFIER);
                    let out = roll.roll(|sides| sides);
                    proptest::prop_assert!(out.total <= i64::from(MAX_DICE * MAX_SIDES) + MAX_MODIFIER);
                }
            }
        }
    }

    #[test]
    fn rolls_and_describes() {
        let mut seq = [2u32, 5, 6].into_iter();
        let out = DiceRoll::parse("3d6+4")
            .unwrap()
            .roll(|_| seq.next().unwrap());
        assert_eq!(out.total, 17);
        assert_eq!(out.describe(), "3d6+4: [2, 5, 6] + 4 = 17");
        let out = DiceRoll::parse("d20-3").unwrap().roll(|_| 50);
        assert_eq!(out.rolls, [20], "out-of-range dice are clamped");
        assert_eq!(out.describe(), "1d20-3: [20] - 3 = 17");
    }
}
