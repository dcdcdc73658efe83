//! Tool fields that rmcp's `Tool` drops, read from the raw `tools/list` responses.
//!
//! rmcp's `Tool` keeps a tool's name, title, description, schemas, annotations, icons and
//! `_meta`, and silently drops `execution` — where a server says that a tool runs only as an MCP
//! task (`execution.taskSupport: "required"`). A tool listed without that fact looks usable and
//! every call of it fails (`-32601 … requires task augmentation`). The stdio transport, which
//! reads the server's lines itself, hands each line that can be a listing to
//! [`RawListing::observe`], and so does the streamable HTTP client
//! ([`crate::http_listing::ListingClient`]) with the raw `tools/list` responses; discovery puts
//! the recorded `execution` back into each tool's JSON ([`RawListing::restore`]) before the
//! catalog builder reads it, so such a tool is listed unusable with `mcp.task_required`
//! (docs/mcp-proxy.md, "MCP tasks").

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};

/// Most tools whose `execution` is remembered between two discoveries (a server listing more is
/// cut at the registration's tool limit, which is at most this, anyway).
const MAX_REMEMBERED: usize = 50_000;

/// The `execution.taskSupport` of every tool a connection's listings named, shared between the
/// transport that reads the lines and the discovery that builds the catalog.
#[derive(Debug, Clone, Default)]
pub struct RawListing {
    task_support: Arc<Mutex<HashMap<String, String>>>,
}

impl RawListing {
    /// Forgets what earlier listings said: called when a discovery starts.
    pub fn begin(&self) {
        self.map().clear();
    }

    /// Records the `execution.taskSupport` of each tool of `line` when it is a `tools/list`
    /// response. Lines that cannot be one (no `"inputSchema"` in them) are not parsed.
    pub fn observe(&self, line: &[u8]) {
        const NEEDLE: &[u8] = b"\"inputSchema\"";
        if !line.windows(NEEDLE.len()).any(|w| w == NEEDLE) {
            return;
        }
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let Some(tools) = message
            .get("result")
            .and_then(|r| r.get("tools"))
            .and_then(Value::as_array)
        else {
            return;
        };
        let mut map = self.map();
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let support = tool
                .get("execution")
                .and_then(|e| e.get("taskSupport"))
                .and_then(Value::as_str);
            match support {
                Some(s) if map.len() < MAX_REMEMBERED || map.contains_key(name) => {
                    map.insert(name.to_owned(), s.to_owned());
                }
                Some(_) => {}
                None => {
                    map.remove(name);
                }
            }
        }
    }

    /// Puts the recorded `execution` back into a listed tool's JSON when rmcp dropped it.
    pub fn restore(&self, tool: &mut Value) {
        if tool.get("execution").is_some() {
            return;
        }
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            return;
        };
        let support = self.map().get(name).cloned();
        if let (Some(support), Some(object)) = (support, tool.as_object_mut()) {
            object.insert("execution".to_owned(), json!({"taskSupport": support}));
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.task_support
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_listing_line_restores_what_rmcp_drops() {
        let raw = RawListing::default();
        raw.observe(br#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"research","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}},{"name":"echo","inputSchema":{"type":"object"}}]}}"#);
        // A call result that merely mentions the word is not a listing.
        raw.observe(br#"{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"\"inputSchema\""}]}}"#);
        let mut research = json!({"name": "research", "inputSchema": {"type": "object"}});
        raw.restore(&mut research);
        assert_eq!(research["execution"]["taskSupport"], "required");
        let mut echo = json!({"name": "echo", "inputSchema": {"type": "object"}});
        raw.restore(&mut echo);
        assert!(echo.get("execution").is_none());

        // A later listing without the field clears it; a new discovery forgets everything.
        raw.observe(br#"{"jsonrpc":"2.0","id":5,"result":{"tools":[{"name":"research","inputSchema":{"type":"object"}}]}}"#);
        let mut again = json!({"name": "research", "inputSchema": {"type": "object"}});
        raw.restore(&mut again);
        assert!(again.get("execution").is_none());
        raw.observe(br#"{"jsonrpc":"2.0","id":6,"result":{"tools":[{"name":"x","inputSchema":{},"execution":{"taskSupport":"required"}}]}}"#);
        raw.begin();
        let mut x = json!({"name": "x"});
        raw.restore(&mut x);
        assert!(x.get("execution").is_none());
    }
}
