//! The pure domain of toolplane.
//!
//! Everything about tools that can be decided without IO is decided here: tool identity and
//! descriptors, the catalog, categories, agent profiles and the policy layers, the immutable
//! invocation snapshot and its model aliases, the per-turn contract and decoding, the request
//! gate, tool results and their model-facing projection, the error taxonomy and the cycle
//! detector.
//!
//! **Architecture invariant:** this crate does no IO and depends on no async runtime, no tonic and
//! no protobuf. Services convert between their wire types and these types in their own
//! `convert` module.

pub mod alias;
pub mod builtin;
pub mod catalog;
pub mod category;
pub mod cycle;
pub mod descriptor;
pub mod dice;
pub mod egress;
pub mod envallow;
pub mod error;
pub mod gate;
pub mod governance;
pub mod hardline;
pub mod id;
pub mod invocation;
pub mod lexpath;
pub mod mcp_change;
pub mod policy;
pub mod profile;
pub mod result;
pub mod run_budget;
pub mod schema;
pub mod selector;
pub mod snapshot;
pub mod tool_search;
pub mod turn;

pub use alias::ModelAlias;
pub use catalog::{CatalogEntry, ToolCatalog, ToolOrigin, ToolSource};
pub use category::Category;
pub use descriptor::{ToolAnnotations, ToolDescriptor};
pub use error::{CoreError, ErrorClass, ErrorCode};
pub use id::{Provider, ToolId};
pub use invocation::ToolInvocation;
pub use profile::Profile;
pub use result::AgentToolResult;
pub use snapshot::{ExitPolicy, InvocationToolSnapshot, ToolBinding};
pub use turn::{ToolChoice, ToolTurnContract};
