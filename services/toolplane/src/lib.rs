//! The `toolplane` CLI as a library: [`plane`] composes the four services in one process (each on
//! its own loopback port, over real gRPC, with embedded storage), which `toolplane up` and the
//! end-to-end tests both use.

pub mod cli;
pub mod client;
pub mod commands;
pub mod convert;
pub mod demo;
pub mod demo_mcp;
pub mod error;
pub mod output;
pub mod plane;
pub mod timeline;
pub mod up;
