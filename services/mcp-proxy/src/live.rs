//! Live catalogs: a registration's cached tool list follows the server without an operator's
//! `RefreshServer`.
//!
//! Two things make the supervisor rediscover a server's tools: the server's
//! `notifications/tools/list_changed` (the connection's client wakes [`LiveState::list_changed`]),
//! and a connection that has not been listed yet — every new connection, after a crash, a restart
//! or a reconnect, is listed once, since the server may have come back with other tools. A
//! discovery that finds a changed list gives the cached catalog the next version
//! ([`crate::catalog::LiveCatalog::versioned_after`]); listings carry it, the catalog service pulls
//! it, and a snapshot compiled afterwards names it on its MCP bindings. Snapshots compiled before
//! keep the tools they froze (docs/mcp-proxy.md, "Live catalogs").

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use crate::connection::{Connection, ConnectionHooks};
use crate::proxy::{McpProxy, Server};
use crate::raw_listing::RawListing;

/// Why a supervisor rediscovers a server's tools (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A connection that has not been listed yet.
    Connected,
    /// The server sent `notifications/tools/list_changed`.
    ListChanged,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Trigger::Connected => "connected",
            Trigger::ListChanged => "tools/list_changed",
        }
    }
}

/// A registration's part in keeping its catalog live.
#[derive(Debug, Default)]
pub struct LiveState {
    hooks: ConnectionHooks,
    /// The `seq` the last connection got.
    connections: AtomicU64,
    /// The `seq` of the connection the last discovery listed (0: none yet).
    listed: AtomicU64,
}

impl LiveState {
    /// What the next connection reports to: its `notifications/tools/list_changed` and its raw
    /// listings.
    pub fn hooks(&self) -> &ConnectionHooks {
        &self.hooks
    }

    /// Numbers a new connection.
    pub fn number(&self, conn: &mut Connection) {
        conn.seq = self.connections.fetch_add(1, Ordering::SeqCst) + 1;
    }

    /// Remembers that `conn` was listed (successfully or not: a failed listing is not retried
    /// in a loop; the next change, reconnect or refresh lists again).
    pub fn listed(&self, conn: &Connection) {
        self.listed.store(conn.seq, Ordering::SeqCst);
    }

    /// `conn` has not been listed yet.
    pub fn unlisted(&self, conn: &Connection) -> bool {
        self.listed.load(Ordering::SeqCst) != conn.seq
    }

    /// Woken by the server's `notifications/tools/list_changed`.
    pub fn list_changed(&self) -> &Arc<Notify> {
        &self.hooks.list_changed
    }

    /// The raw listing fields of the current connection.
    pub fn raw_listing(&self) -> &RawListing {
        &self.hooks.raw_listing
    }
}

impl McpProxy {
    /// Rediscovers `server`'s tools for the supervisor, logging what changed.
    pub(crate) async fn rediscover(&self, server: &Arc<Server>, trigger: Trigger) {
        let before = server.cached().map(|c| c.version());
        match self.refresh_server(server).await {
            Ok(outcome) => {
                let after = server.cached().map(|c| c.version());
                if after != before {
                    let reg = server.registration();
                    tracing::info!(
                        server_id = %reg.server_id,
                        display_name = %reg.display_name,
                        trigger = trigger.as_str(),
                        catalog_version = after.unwrap_or_default(),
                        added = ?outcome.added,
                        removed = ?outcome.removed,
                        "mcp tool list changed"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, trigger = trigger.as_str(), "mcp rediscovery failed");
            }
        }
    }
}
