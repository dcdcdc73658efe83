//! The MCP catalog versions each running invocation has been told of (`mcp_catalog_changed`,
//! docs/journal.md), so that one change is journalled once per invocation, not at every turn.
//!
//! Holds only invocations that were told of a change, a version per server; it never decides
//! whether a list changed (`toolplane_core::mcp_change` does).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// Per invocation id, per MCP registration id: the last version reported to it.
#[derive(Debug, Default)]
pub struct ToldCatalogs {
    told: Mutex<HashMap<String, BTreeMap<String, u64>>>,
}

impl ToldCatalogs {
    /// The version of `server`'s list last reported to invocation `invocation_id`, if any.
    pub fn told(&self, invocation_id: &str, server: &str) -> Option<u64> {
        super::lock(&self.told)
            .get(invocation_id)
            .and_then(|m| m.get(server).copied())
    }

    /// Remembers that invocation `invocation_id` was told of `server`'s list at `version`.
    pub fn tell(&self, invocation_id: &str, server: &str, version: u64) {
        super::lock(&self.told)
            .entry(invocation_id.to_owned())
            .or_default()
            .insert(server.to_owned(), version);
    }

    /// Forgets what invocation `invocation_id` was told (it ended).
    pub fn forget(&self, invocation_id: &str) {
        super::lock(&self.told).remove(invocation_id);
    }
}
