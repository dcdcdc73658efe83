//! toolplane-mcp-proxy: real MCP servers behind the tool plane.
//!
//! The proxy owns MCP registrations (state, per-tool permission), their connections (rmcp
//! clients over stdio child processes or streamable HTTP), discovery into a cached catalog
//! (memory, then the store, kept live by [`live`]), execution with the rechecks right before sending, and the MCP result
//! projection (docs/mcp-proxy.md). It serves `toolplane.v1.McpProxyService` (administration and the
//! cached listings the catalog service pulls) and `toolplane.v1.ToolExecutor` (calls from the
//! runtime) on one port.
//!
//! Module map: [`registration`] (records and validation), [`catalog`] (the cached catalog and
//! usability), [`persist`] (store layout), [`stdio`], [`children`], [`egress`] and [`connection`]
//! (transports, process groups and allow-lists, the egress checks, sessions), [`proxy`] (state, supervisors, listings), [`execute`] (calls), [`fence`] (run epochs), [`projection`]
//! (model-facing Markdown), [`convert`] and [`grpc`] (the wire), [`server`] (serving), [`config`]
//! (the binary's settings), [`error`] (the code table).

pub mod audit;
pub mod catalog;
mod causes;
mod cells;
pub mod children;
pub mod config;
pub mod connection;
pub mod convert;
pub mod egress;
pub mod error;
pub mod execute;
mod fence;
pub mod grpc;
pub mod http_listing;
pub mod live;
pub mod persist;
pub mod projection;
pub mod proxy;
pub mod raw_listing;
pub mod registration;
mod replicas;
pub mod server;
pub mod stdio;

pub use error::ProxyError;
pub use proxy::{McpProxy, ProxySettings};
pub use server::{
    MAX_ADMIN_REQUEST_BYTES, MAX_EXECUTE_REQUEST_BYTES, routes, serve, start_on, start_on_with_tls,
};

/// The store namespace the proxy keeps its state in.
pub const STORE_NAMESPACE: &str = "mcp-proxy";
