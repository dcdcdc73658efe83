//! The catalog's page tokens (`query::PageToken::decode`), as callers send them back over gRPC
//! and HTTP.
//!
//! Invariants: an accepted token re-encodes to itself when it is in the form the service issues
//! (the base64url of a cursor with a canonical offset), and in every case its encoding decodes
//! back to the same cursor; a resumed page never starts past the end of the listing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolplane_catalog::query::PageToken;

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
    let canonical = toolplane_proto::page_token::decode(PageToken::LISTING, token)
        .ok()
        .flatten()
        .is_some_and(|cursor| {
            cursor
                .split_once(':')
                .is_some_and(|(offset, _)| offset == t.offset.to_string())
        });
    if canonical {
        assert_eq!(encoded, token);
    }
    let ids = ["a", "b", "c", "d"];
    assert!(PageToken::start(Some(&t), ids.iter().copied()) <= ids.len());
});
