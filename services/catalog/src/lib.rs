//! The catalog service: the neutral descriptors of every tool source, the agent profiles, and
//! the platform and user policy layers, served over gRPC (`CatalogService`, `ProfileService`)
//! and read over HTTP (`GET /tools`, `GET /tools/descriptions`).
//!
//! Sources: the builtin tools declared in `toolplane_core::builtin`, the MCP tools cached by the
//! mcp-proxy, external tool hosts registered here with their `ToolExecutor` endpoint,
//! adapter-derived tools installed by an embedder, and sub-agents offered as tools by profiles.
//! Each cell's catalog is assembled from them with one rule for duplicate ids and one category
//! fallback, and every listing — plain or "what would this profile see" — reads it.
//!
//! The catalog owns descriptors, profiles and policies; it never owns aliases, budgets or
//! invocation state, and never executes a tool. `docs/catalog.md` describes the service.
//!
//! ```no_run
//! # async fn run() -> Result<(), toolplane_catalog::CatalogError> {
//! let running = toolplane_catalog::start(toolplane_catalog::CatalogConfig::ephemeral()).await?;
//! println!("grpc {} http {}", running.grpc_url(), running.http_url());
//! running.shutdown().await
//! # }
//! ```

pub mod assembly;
pub mod audit;
pub mod cell;
mod cells;
pub mod config;
pub mod convert;
pub mod describe;
pub mod error;
pub mod grpc;
pub mod hosts;
pub mod http;
pub mod listing;
pub mod mcp;
pub mod policies;
pub mod profiles;
pub mod query;
pub mod records;
pub mod server;
pub mod sources;
pub mod state;
pub mod tokens;
pub mod tools;

pub use config::{CatalogConfig, Limits, StoreConfig};
pub use error::{CatalogCode, CatalogError};
pub use server::{
    RunningCatalog, open_store, start, start_on, start_unwarmed, start_with_auth, start_with_store,
};
pub use sources::AdapterTools;
pub use state::Catalog;
