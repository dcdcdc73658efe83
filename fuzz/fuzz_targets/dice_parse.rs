//! `dice.roll` notation (`DiceRoll::parse`) and rolling with an arbitrary die (its faces are the
//! input's bytes).
//!
//! Invariants: an accepted roll is within the limits, its display parses back to the same roll,
//! and a roll's total is the sum of in-range dice plus the modifier.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolplane_core::dice::{DiceRoll, MAX_DICE, MAX_MODIFIER, MAX_SIDES};

fuzz_target!(|text: &str| {
    // The die's faces come from the input's own bytes: arbitrary, in and out of range.
    let faces: Vec<u32> = text.bytes().map(u32::from).collect();
    let Ok(roll) = DiceRoll::parse(text) else {
        return;
    };
    assert!((1..=MAX_DICE).contains(&roll.count), "{roll:?}");
    assert!((2..=MAX_SIDES).contains(&roll.sides), "{roll:?}");
    assert!(roll.modifier.abs() <= MAX_MODIFIER, "{roll:?}");
    assert_eq!(
        DiceRoll::parse(&roll.to_string()).ok(),
        Some(roll),
        "{text:?}"
    );
    let mut faces = faces.into_iter().cycle();
    let outcome = roll.roll(|_| faces.next().unwrap_or(0));
    assert_eq!(outcome.rolls.len() as u32, roll.count);
    assert!(outcome.rolls.iter().all(|&r| (1..=roll.sides).contains(&r)));
    let sum: i64 = outcome.rolls.iter().map(|&r| i64::from(r)).sum();
    assert_eq!(outcome.total, sum + roll.modifier);
    let _ = outcome.describe();
});
