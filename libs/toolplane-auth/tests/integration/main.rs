//! Authentication and authorisation as a service sees them: tokens, JWTs, the gRPC and HTTP layers, transport identities.
//! One test binary, one module per area: each former `tests/<area>.rs` binary linked the crate and
//! its dependencies once more; one binary links them once (README.md, "CI time").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod bootstrap;
mod grpc_layer;
mod http_layer;
mod jwks_reload;
mod transport_caller;
