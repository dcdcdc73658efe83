//! What a change of an MCP server's tool list means to an invocation that is already running.
//!
//! An invocation's snapshot is frozen when it opens: it keeps its tools when the server's list
//! changes, and the next invocation gets the new list. [`catalog_change`] compares the snapshot
//! with the server's tools as the catalog lists them now and says what changed for the profile
//! (the `mcp_catalog_changed` journal record; docs/journal.md). It decides only; the runtime reads
//! the listing and writes the record.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::catalog::{CatalogEntry, ToolOrigin};
use crate::id::{Provider, ToolId};
use crate::selector::ToolSelector;
use crate::snapshot::InvocationToolSnapshot;

/// A newer version of one MCP server's tool list than the one an invocation knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogChange {
    /// The registration id (`mcp/<server_id>`).
    pub server_id: String,
    /// The registration's display name, as the snapshot's bindings name it.
    pub server_name: String,
    /// The version the invocation's snapshot was compiled from.
    pub snapshot_version: u64,
    /// The version the invocation knew before this change: the snapshot's, or the one an
    /// earlier change of the same invocation reported.
    pub previous_version: u64,
    /// The version the catalog lists now: the next invocation's snapshot is compiled from it.
    pub version: u64,
    /// Tools of the server the catalog now lists usable and the profile's allow list selects
    /// (its deny list aside) that the snapshot does not bind.
    pub added: Vec<ToolId>,
    /// Tools of the server the snapshot binds that the catalog no longer lists, or lists as
    /// unusable.
    pub removed: Vec<ToolId>,
}

/// The registration ids of the MCP servers `snapshot` binds tools of, with the version of each
/// server's list it was compiled from (as `context_assembled` records them).
pub fn snapshot_servers(snapshot: &InvocationToolSnapshot) -> BTreeMap<String, u64> {
    snapshot
        .bindings
        .iter()
        .filter_map(|b| match (b.tool_id().provider(), b.mcp_catalog_version) {
            (Provider::Mcp(server), Some(v)) => Some((server.clone(), v)),
            _ => None,
        })
        .collect()
}

/// The change of server `server_id`'s list since version `known`, judged from `listed` (the
/// server's tools as the catalog lists them now, unusable ones included) and the profile's
/// `allow` and `deny` selectors; `None` when the catalog lists no newer version (or no tool of
/// the server, whose version then cannot be told).
pub fn catalog_change(
    snapshot: &InvocationToolSnapshot,
    (allow, deny): (&[ToolSelector], &[ToolSelector]),
    server_id: &str,
    known: u64,
    listed: &[CatalogEntry],
) -> Option<CatalogChange> {
    let of_server = |id: &ToolId| matches!(id.provider(), Provider::Mcp(s) if s == server_id);
    let listed: Vec<&CatalogEntry> = listed.iter().filter(|e| of_server(e.id())).collect();
    let version = listed.iter().filter_map(|e| e.catalog_version()).max()?;
    if version <= known {
        return None;
    }
    let bound: Vec<&ToolId> = snapshot
        .bindings
        .iter()
        .map(|b| b.tool_id())
        .filter(|id| of_server(id))
        .collect();
    let snapshot_version = snapshot
        .bindings
        .iter()
        .filter(|b| of_server(b.tool_id()))
        .find_map(|b| b.mcp_catalog_version)
        .unwrap_or(0);
    let server_name = snapshot
        .bindings
        .iter()
        .filter(|b| of_server(b.tool_id()))
        .find_map(|b| b.server_name.clone())
        .or_else(|| {
            listed.iter().find_map(|e| match e.origin() {
                ToolOrigin::Mcp { server_name, .. } => Some(server_name.clone()),
                _ => None,
            })
        })
        .unwrap_or_default();
    let offered = |e: &&&CatalogEntry| {
        e.usable_descriptor().is_some()
            && allow.iter().any(|s| s.matches(e))
            && !deny.iter().any(|s| s.matches(e))
    };
    let added = listed
        .iter()
        .filter(offered)
        .map(|e| e.id())
        .filter(|id| !bound.contains(id))
        .cloned()
        .collect();
    let removed = bound
        .into_iter()
        .filter(|id| {
            !listed
                .iter()
                .any(|e| e.id() == *id && e.usable_descriptor().is_some())
        })
        .cloned()
        .collect();
    Some(CatalogChange {
        server_id: server_id.to_owned(),
        server_name,
        snapshot_version,
        previous_version: known,
        version,
        added,
        removed,
    })
}
