//! Test support shared by every toolplane crate's integration tests.
//!
//! Servers started here bind `127.0.0.1:0` and talk over real sockets, never in-process channels,
//! so tests see what a client would. This crate owns only test plumbing; it must never become a
//! dependency of a production (non-dev) build.
//!
//! - [`spawn_routes`] / [`ServerHandle`]: serve any tonic services on a free loopback port and shut
//!   them down gracefully.
//! - [`echo`]: the bare tonic unary echo server and client, the baseline every benchmark compares
//!   against.
//! - [`binary`]: a service binary run once with given flags, for the start-up checks every
//!   service's binary shares.

pub mod binary;
pub mod echo;
#[cfg(feature = "mcp-fixture")]
pub mod mcp_fixture;
#[cfg(feature = "model-server")]
pub mod model_server;
mod server;

pub use echo::{connect_echo, spawn_echo_server};
pub use server::{ServerHandle, spawn_routes};

/// Failures of the test plumbing itself (binding, connecting, serving).
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// A loopback socket could not be bound or inspected.
    #[error("testkit.bind_failed: {0}")]
    Bind(#[from] std::io::Error),
    /// A server address did not make a valid URI.
    #[error("testkit.invalid_address: {0}")]
    InvalidAddress(String),
    /// A client could not connect, or a server stopped with a transport error.
    #[error("testkit.transport_failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// A spawned server task panicked or was cancelled.
    #[error("testkit.server_task_failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}
