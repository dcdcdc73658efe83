//! The model wire formats: snapshots, the decode contract, the context budget and the SDK fixtures.
//! One test binary, one module per area: each former `tests/<area>.rs` binary linked the crate and
//! its dependencies once more; one binary links them once (README.md, "CI time").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod context_budget;
mod decode_contract;
mod sdk_fixtures;
mod wire_snapshots;
