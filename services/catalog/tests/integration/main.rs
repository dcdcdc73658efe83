//! The catalog service over real sockets and as a spawned binary.
//! One test binary, one module per area: each former `tests/<area>.rs` binary linked the crate and
//! its dependencies once more; one binary links them once (README.md, "CI time").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod admin_audit;
mod cells;
mod exposure;
mod hosts;
mod listing;
mod mcp_proxy;
mod profiles;
mod replicas;
mod tls_flags;
mod tokens;
