//! Tool selectors (`ToolSelector::parse`) as profiles and policies name tools.
//!
//! Invariants: an accepted selector displays as text that parses back to the same selector, and
//! that text displays the same again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolplane_core::selector::ToolSelector;

fuzz_target!(|text: &str| {
    let Ok(selector) = ToolSelector::parse(text) else {
        return;
    };
    let shown = selector.to_string();
    match ToolSelector::parse(&shown) {
        Ok(back) => {
            assert_eq!(back, selector, "{text:?} shown as {shown:?}");
            assert_eq!(back.to_string(), shown);
        }
        Err(e) => panic!("{text:?} is accepted but its display {shown:?} is not: {e}"),
    }
});
