//! The runtime over its in-memory ports (`support`), over real sockets and as a spawned binary, and
//! the layer table its modules import by. One test binary, one module per area: each former
//! `tests/<area>.rs` binary linked the crate and its dependencies once more; one binary links them
//! once (README.md, "CI time").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod approvals;
mod cells;
mod exposure;
mod host_turns;
mod layering;
mod mcp_hosts;
mod ownership;
mod resume;
mod runtime_alone;
mod shared_store;
mod takeover;
mod tls_flags;
mod tool_search;
