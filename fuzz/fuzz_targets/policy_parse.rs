//! Policy documents: the platform, user and plan-node policies and the Hardline configuration,
//! each parsed from the same arbitrary JSON text (the first byte picks which).
//!
//! Invariants: an accepted policy's own serialisation parses back to the same policy; accepted
//! Hardline rules serialise to the spec they were compiled from and compile again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde::de::DeserializeOwned;
use toolplane_core::governance::HardlineRules;
use toolplane_core::policy::{PlanNodePolicy, PlatformPolicy, UserPolicy};

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(text: &str) {
    let Ok(policy) = serde_json::from_str::<T>(text) else {
        return;
    };
    let again = serde_json::to_string(&policy).unwrap_or_else(|e| panic!("serialise: {e}"));
    match serde_json::from_str::<T>(&again) {
        Ok(back) => assert_eq!(back, policy, "{again}"),
        Err(e) => panic!("a policy's own JSON is refused: {e}\n{again}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, text)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    match which % 4 {
        0 => round_trip::<PlatformPolicy>(text),
        1 => round_trip::<UserPolicy>(text),
        2 => round_trip::<PlanNodePolicy>(text),
        _ => round_trip::<HardlineRules>(text),
    }
});
