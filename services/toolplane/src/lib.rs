//! The `toolplane` CLI as a library. [`plane`] composes the four services in one process (each on
//! its own loopback port, over real gRPC, with embedded storage), which `toolplane up` and the
//! end-to-end tests both use; [`up`] and [`demo`] (with the bundled [`demo_mcp`] server) are
//! `toolplane up [--demo]`; [`cli`] and [`commands`] are the admin and user commands against a
//! running plane, over the gRPC clients of [`client`], printed by [`output`] and [`timeline`];
//! [`error`] holds the CLI's stable codes.

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
