//! Replicas sharing one store: every write of a registration (upsert, deregister, state,
//! permission) rewrites the marker `generation` in the proxy's namespace, and before a handler
//! reads registrations [`McpProxy::catch_up`] compares the marker's version with the one this
//! process last loaded at (one `head`). When it moved, the stored registrations and cached
//! catalogs are re-read and applied: new servers are added with their own supervisor (and stdio
//! child), changed ones replaced, removed ones stopped. Each replica keeps its own connections
//! (docs/deploy.md, "Scaling out"). Run epochs are shared through the store as well
//! (`crate::fence`), read on every fenced call once the proxy is told its store is shared.

use std::collections::HashSet;
use std::sync::{Arc, PoisonError};

use tokio::sync::Semaphore;

use crate::catalog::LiveCatalog;
use crate::persist::StoredServer;
use crate::proxy::{ConnStatus, McpProxy, Server};

impl McpProxy {
    /// Declares whether other processes write this proxy's store (`StoreConfig::is_shared`): then
    /// every call carrying a run epoch reads the run's fence record instead of trusting this
    /// process's copy (docs/mcp-proxy.md, "Fencing").
    pub fn set_shared_store(&self, shared: bool) {
        self.inner.fence.set_shared(shared);
    }

    /// Rewrites the marker after a registration write, so other replicas reload before their
    /// next answer. This process reloads too (its seen version no longer matches), which finds
    /// nothing new to apply.
    pub(crate) async fn mark_written(&self) {
        if let Err(e) = self.inner.persist.touch_generation().await {
            tracing::warn!(error = %e, "the mcp-proxy generation marker could not be rewritten; other replicas sharing the store do not see this write until they restart");
        }
    }

    /// Reloads registrations written by another replica since they were last read. A store that
    /// cannot answer leaves the proxy as it is.
    pub async fn catch_up(&self) {
        let Ok(now) = self.inner.persist.generation().await else {
            return;
        };
        if now == *self.seen_generation() {
            return;
        }
        let _guard = self.inner.admin.lock().await;
        let Ok(now) = self.inner.persist.generation().await else {
            return;
        };
        if now == *self.seen_generation() {
            return;
        }
        let loaded = match self.inner.persist.load().await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "reloading mcp-proxy registrations failed");
                return;
            }
        };
        let mut stored = HashSet::new();
        for entry in loaded.servers {
            stored.insert((entry.0.cell_id.clone(), entry.0.server_id.clone()));
            self.apply(entry).await;
        }
        let gone: Vec<Arc<Server>> = {
            let mut servers = self.servers_mut();
            let mut gone = Vec::new();
            for (cell, in_cell) in servers.iter_mut() {
                let ids: Vec<String> = in_cell
                    .keys()
                    .filter(|id| !stored.contains(&(cell.clone(), (*id).clone())))
                    .cloned()
                    .collect();
                for id in ids {
                    gone.extend(in_cell.remove(&id));
                }
            }
            servers.retain(|_, in_cell| !in_cell.is_empty());
            gone
        };
        for server in gone {
            tracing::info!(server_id = %server.registration().server_id, "mcp server deregistered through another replica");
            server.removed.cancel();
            if let Some(conn) = server.conn.lock().await.take() {
                conn.close().await;
            }
        }
        *self.seen_generation() = now;
    }

    /// Adds a stored server this process does not have, or brings one it has up to date.
    async fn apply(&self, (reg, version, catalog): StoredServer) {
        let Some(server) = self.find(&reg.cell_id, &reg.server_id) else {
            let limits = self.limits_of(&reg);
            let (cell, id) = (reg.cell_id.clone(), reg.server_id.clone());
            let server = Arc::new(Server::new(reg, Some(version), catalog, &limits));
            self.servers_mut()
                .entry(cell)
                .or_default()
                .insert(id, Arc::clone(&server));
            self.spawn_supervisor(server);
            return;
        };
        if let Some((catalog, v)) = catalog {
            let mut known = server
                .catalog_version
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if known.as_ref() != Some(&v) {
                let live = LiveCatalog::new(&reg.server_id, catalog);
                *server
                    .catalog
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(live));
                *known = Some(v);
            }
        }
        let same = server
            .reg_version
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            == Some(&version);
        if same {
            return;
        }
        let old = server.registration();
        let reconnect = reg.transport != old.transport || reg.limits != old.limits;
        let limits = self.limits_of(&reg);
        *server
            .reg_version
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(version);
        *server.reg.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(reg);
        if reconnect {
            *server
                .permits
                .write()
                .unwrap_or_else(PoisonError::into_inner) = Arc::new(Semaphore::new(
                usize::try_from(limits.max_concurrent_calls).unwrap_or(16),
            ));
            if let Some(conn) = server.conn.lock().await.take() {
                conn.close().await;
            }
            server.set_health(ConnStatus::Disconnected, None);
        }
        server.changed.notify_one();
    }
}
