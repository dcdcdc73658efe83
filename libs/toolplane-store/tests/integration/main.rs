//! The storage backends against one conformance suite and their own protocols (filesystem, PostgreSQL, S3).
//! One test binary, one module per area: each former `tests/<area>.rs` binary linked the crate and
//! its dependencies once more; one binary links them once (README.md, "CI time").
#![allow(clippy::unwrap_used, clippy::expect_used)]

// Kept at its path: other crates' tests include it with `#[path]`.
mod common;
#[path = "../pg_server/mod.rs"]
mod pg_server;
mod races;
mod s3_server;

mod conformance;
mod fs_crash;
mod fs_protocol;
mod postgres;
mod s3;
mod store_fs;
