//! The serving layer: graceful serve, auth, TLS and panics as a client sees them.
//! One test binary, one module per area: each former `tests/<area>.rs` binary linked the crate and
//! its dependencies once more; one binary links them once (README.md, "CI time").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod auth;
mod panics;
mod serve;
mod tls;
