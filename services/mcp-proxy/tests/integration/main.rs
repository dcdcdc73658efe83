//! The mcp-proxy over real sockets and as a spawned binary, against the fixture server and MCP
//! servers toolplane did not write. One test binary, one module per area: each former
//! `tests/<area>.rs` binary linked the crate and its dependencies once more; one binary links them
//! once (README.md, "CI time").
#![allow(clippy::unwrap_used, clippy::expect_used)]

// `common/process.rs` is also included by path by the crate's `benches/mcp_proxy.rs`.
mod common;

mod admin_audit;
mod binary;
mod cells;
mod egress;
mod exposure;
mod fencing;
mod fixture_failures;
mod live_catalog;
mod message_limits;
mod processes;
mod public_servers;
mod replicas;
mod secrets;
mod tls_flags;
