//! Tells a running invocation that an MCP server it binds tools of has a newer tool list: one
//! `mcp_catalog_changed` record per change and invocation (docs/journal.md). The invocation keeps
//! its frozen snapshot; the record says what the next invocation will see instead.
//!
//! Read at each turn, beside the turn's calls, from the catalog's listing of the bound servers
//! (the versions the catalog lists are the ones the next snapshot is compiled from). It never
//! changes the snapshot and never fails a turn: a catalog that cannot answer is asked again at
//! the next turn.

use std::sync::Arc;

use serde_json::json;
use toolplane_core::catalog::CatalogEntry;
use toolplane_core::mcp_change::{catalog_change, snapshot_servers};
use toolplane_core::selector::ToolSelector;
use toolplane_core::snapshot::InvocationToolSnapshot;

use crate::context::Runtime;
use crate::state::Event;

/// What a turn needs to look for changes beside its calls (owned, so that the calls keep the
/// invocation's state to themselves meanwhile).
#[derive(Debug)]
pub(crate) struct Watched {
    pub(crate) cell: String,
    pub(crate) invocation_id: String,
    pub(crate) snapshot: Arc<InvocationToolSnapshot>,
    pub(crate) allow: Vec<ToolSelector>,
    pub(crate) deny: Vec<ToolSelector>,
}

/// The records of the changes of the snapshot's MCP servers' lists not yet told to the
/// invocation; each one told is remembered. Nothing is read for a snapshot without MCP tools.
pub(crate) async fn changes(rt: &Runtime, w: Watched) -> Vec<Event> {
    let servers = snapshot_servers(&w.snapshot);
    let mut events = Vec::new();
    for (server, frozen) in servers {
        let listed = match rt.ports.catalog.mcp_server_tools(&w.cell, &server).await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::debug!(server = %server, error = %e.message, "mcp catalog version not read");
                continue;
            }
        };
        let entries: Vec<CatalogEntry> = listed.into_iter().filter_map(|l| l.entry.ok()).collect();
        let known = rt
            .told_catalogs
            .told(&w.invocation_id, &server)
            .unwrap_or(frozen);
        let Some(change) =
            catalog_change(&w.snapshot, (&w.allow, &w.deny), &server, known, &entries)
        else {
            continue;
        };
        rt.told_catalogs
            .tell(&w.invocation_id, &server, change.version);
        let detail = format!(
            "the tools of mcp server `{}` changed (version {} → {}): this invocation keeps its snapshot (version {}); the next invocation is compiled from version {}",
            change.server_name,
            change.previous_version,
            change.version,
            change.snapshot_version,
            change.version
        );
        let mut payload = json!({"invocationId": w.invocation_id, "detail": detail});
        if let (Some(p), Ok(serde_json::Value::Object(c))) =
            (payload.as_object_mut(), serde_json::to_value(&change))
        {
            p.extend(c);
        }
        events.push(Event::new("mcp_catalog_changed", payload).inv(&w.invocation_id));
    }
    events
}
