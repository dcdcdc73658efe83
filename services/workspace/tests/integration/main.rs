//! The workspace service over real sockets and as a spawned binary.
//! One test binary, one module per area: each former `tests/<area>.rs` binary linked the crate and
//! its dependencies once more; one binary links them once (README.md, "CI time").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
// The PostgreSQL server of toolplane-store's tests, for the shared-store journal and run trees
// over PostgreSQL.
#[path = "../../../../libs/toolplane-store/tests/pg_server/mod.rs"]
mod pg_server;
// The S3-compatible server of toolplane-store's tests (s3s-fs), for a routed store: the bytes in
// S3, the records in PostgreSQL.
#[path = "../../../../libs/toolplane-store/tests/integration/s3_server/mod.rs"]
mod s3_server;

mod admin_audit;
mod cells;
mod durability;
mod exposure;
mod kill;
mod leases;
mod search;
mod shared_log;
mod shared_log_race;
mod storage;
mod store_tree;
mod tls_flags;
mod tools;
mod write_limits;
