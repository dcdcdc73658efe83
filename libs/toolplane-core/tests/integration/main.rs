//! The core's decisions as tables of cases: compiler, gates, tool search, MCP changes, emitted error codes.
//! One test binary, one module per area: each former `tests/<area>.rs` binary linked the crate and
//! its dependencies once more; one binary links them once (README.md, "CI time").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod compiler;
mod emitted_codes;
mod mcp_change;
mod tool_search;
mod turn_gate;
