//! The catalog's page tokens (`query::PageToken::decode`), as callers send them back over gRPC
//! and HTTP.
//!
//! Invariants: an accepted token re-encodes to itself when it is in the form the service issues
//! (lowercase hex of a canonical offset), and in every case its encoding decodes back to the same
//! cursor; a resumed page never starts past the end of the listing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolplane_catalog::query::PageToken;

/// The text a token's hex stands for, when it is hex of UTF-8.
fn unhex(token: &str) -> Option<String> {
    let bytes = token.as_bytes();
    let digits: Option<Vec<u8>> = bytes
        .chunks_exact(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect();
    String::from_utf8(digits?).ok()
}

fuzz_target!(|token: &str| {
    let Ok(Some(t)) = PageToken::decode(token) else {
        return;
    };
    let encoded = t.encode();
    assert_eq!(
        PageToken::decode(&encoded).ok(),
        Some(Some(t.clone())),
        "{token:?}"
    );
    let canonical = token.bytes().all(|b| !b.is_ascii_uppercase())
        && unhex(token).is_some_and(|raw| {
            raw.split_once(':')
                .is_some_and(|(offset, _)| offset == t.offset.to_string())
        });
    if canonical {
        assert_eq!(encoded, token);
    }
    let ids = ["a", "b", "c", "d"];
    assert!(PageToken::start(Some(&t), ids.iter().copied()) <= ids.len());
});
