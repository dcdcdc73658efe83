//! Profile documents (`Profile::from_json`) as a caller sends them.
//!
//! Invariants: an accepted profile validates, and its own serialisation parses back to the same
//! profile.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolplane_core::Profile;

fuzz_target!(|text: &str| {
    let Ok(profile) = Profile::from_json(text) else {
        return;
    };
    assert!(profile.validate().is_ok());
    let again = serde_json::to_string(&profile).unwrap_or_else(|e| panic!("serialise: {e}"));
    match Profile::from_json(&again) {
        Ok(back) => assert_eq!(back, profile, "{again}"),
        Err(e) => panic!("a valid profile's own JSON is refused: {e}\n{again}"),
    }
});
