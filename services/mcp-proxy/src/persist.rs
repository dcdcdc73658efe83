//! The proxy's durable state in its store namespace (`mcp-proxy/`): one registration record and
//! one cached catalog per server, both JSON with a format version.
//!
//! Keys: `servers/<cell>/<server id>/registration.json` and `…/catalog.json`, and the marker
//! `generation` every registration write rewrites (`crate::replicas`). Writes are
//! compare-and-swap against the version this process last saw, so two processes sharing a store
//! cannot silently overwrite each other. This module owns key layout and (de)serialization; it
//! never decides what to store.

use std::sync::Arc;

use toolplane_store::{Key, Precondition, Store, StoreError, Version};

use crate::catalog::{CATALOG_FORMAT, CachedCatalog};
use crate::error::{MCP_STORE_FAILED, ProxyError};
use crate::registration::{REGISTRATION_FORMAT, Registration};

const REGISTRATION: &str = "registration.json";
const CATALOG: &str = "catalog.json";
const GENERATION: &str = "generation";

/// The proxy's view of its namespace.
#[derive(Debug, Clone)]
pub struct Persist {
    store: Arc<dyn Store>,
}

/// A record that was listed but could not be read.
#[derive(Debug, Clone)]
pub struct Unreadable {
    pub key: String,
    pub reason: String,
}

/// One stored server: its registration and, when readable, its catalog (each with its version).
pub type StoredServer = (Registration, Version, Option<(CachedCatalog, Version)>);

/// Everything loaded at start.
#[derive(Debug, Default)]
pub struct Loaded {
    pub servers: Vec<StoredServer>,
    pub unreadable: Vec<Unreadable>,
}

fn key(cell: &str, server_id: &str, file: &str) -> Result<Key, ProxyError> {
    Key::new(format!("servers/{cell}/{server_id}/{file}")).map_err(ProxyError::from)
}

impl Persist {
    /// `store` is already the proxy's namespace.
    pub fn new(store: Arc<dyn Store>) -> Persist {
        Persist { store }
    }

    /// The proxy's namespace, shared with its admin audit (`crate::audit`).
    pub(crate) fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.store)
    }

    /// Writes a registration; `expected` is the version last read (`None` for a new one).
    pub async fn put_registration(
        &self,
        reg: &Registration,
        expected: Option<&Version>,
    ) -> Result<Version, ProxyError> {
        let bytes = serde_json::to_vec_pretty(reg).map_err(|e| {
            ProxyError::new(MCP_STORE_FAILED, format!("serialize registration: {e}"))
        })?;
        self.put(
            key(&reg.cell_id, &reg.server_id, REGISTRATION)?,
            bytes,
            expected,
        )
        .await
    }

    pub async fn put_catalog(
        &self,
        cell: &str,
        server_id: &str,
        catalog: &CachedCatalog,
        expected: Option<&Version>,
    ) -> Result<Version, ProxyError> {
        let bytes = serde_json::to_vec(catalog)
            .map_err(|e| ProxyError::new(MCP_STORE_FAILED, format!("serialize catalog: {e}")))?;
        let key = key(cell, server_id, CATALOG)?;
        let pre = match expected {
            Some(v) => Precondition::Version(v.clone()),
            None => Precondition::Absent,
        };
        match self.store.put_cas(&key, bytes.clone(), pre).await {
            Ok(v) => Ok(v),
            // Another replica listed the same server since this one last read the catalog: both
            // listings are valid, the later write wins (one retry against the version it wrote).
            Err(StoreError::Conflict { current, .. }) => {
                let pre = match current {
                    Some(v) => Precondition::Version(v),
                    None => Precondition::Absent,
                };
                Ok(self.store.put_cas(&key, bytes, pre).await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn put(
        &self,
        key: Key,
        bytes: Vec<u8>,
        expected: Option<&Version>,
    ) -> Result<Version, ProxyError> {
        let pre = match expected {
            Some(v) => Precondition::Version(v.clone()),
            None => Precondition::Absent,
        };
        match self.store.put_cas(&key, bytes.clone(), pre).await {
            Ok(v) => Ok(v),
            // Equal bytes have equal versions: a conflict whose current version is what we meant
            // to write is a write that already happened (a retry).
            Err(StoreError::Conflict {
                current: Some(current),
                ..
            }) if current == Version::of(&bytes) => Ok(current),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes a server's records.
    pub async fn delete_server(&self, cell: &str, server_id: &str) -> Result<(), ProxyError> {
        self.store
            .delete(&key(cell, server_id, CATALOG)?, None)
            .await?;
        self.store
            .delete(&key(cell, server_id, REGISTRATION)?, None)
            .await?;
        Ok(())
    }

    /// Loads every registration and its catalog. A record that cannot be read is reported, not
    /// fatal: the rest of the proxy keeps working.
    pub async fn load(&self) -> Result<Loaded, ProxyError> {
        let prefix = Key::new("servers")?;
        let mut keys = Vec::new();
        let mut after: Option<Key> = None;
        loop {
            let page = self.store.list(Some(&prefix), after.as_ref(), 1000).await?;
            keys.extend(page.keys);
            match page.next_start_after {
                Some(k) => after = Some(k),
                None => break,
            }
        }
        let mut loaded = Loaded::default();
        for k in keys.iter().filter(|k| k.as_str().ends_with(REGISTRATION)) {
            let Some(obj) = self.store.get(k).await? else {
                continue;
            };
            let reg = match serde_json::from_slice::<Registration>(&obj.bytes) {
                Ok(r) if r.format == REGISTRATION_FORMAT => r,
                Ok(r) => {
                    loaded.unreadable.push(Unreadable {
                        key: k.to_string(),
                        reason: format!("unknown registration format {}", r.format),
                    });
                    continue;
                }
                Err(e) => {
                    loaded.unreadable.push(Unreadable {
                        key: k.to_string(),
                        reason: e.to_string(),
                    });
                    continue;
                }
            };
            let catalog_key = key(&reg.cell_id, &reg.server_id, CATALOG)?;
            let catalog = match self.store.get(&catalog_key).await? {
                None => None,
                Some(obj) => match serde_json::from_slice::<CachedCatalog>(&obj.bytes) {
                    Ok(c) if c.format == CATALOG_FORMAT => Some((c, obj.version)),
                    Ok(_) | Err(_) => {
                        // A catalog of another format or a damaged one is dropped: the server
                        // lists as not cached until the next refresh rewrites it.
                        loaded.unreadable.push(Unreadable {
                            key: catalog_key.to_string(),
                            reason: "catalog unreadable; refresh the server".to_owned(),
                        });
                        None
                    }
                },
            };
            loaded.servers.push((reg, obj.version, catalog));
        }
        Ok(loaded)
    }

    /// The version of the marker every registration write rewrites (`crate::replicas`).
    pub async fn generation(&self) -> Result<Option<Version>, ProxyError> {
        Ok(self.store.head(&Key::new(GENERATION)?).await?)
    }

    /// Rewrites the marker with a count one past the stored one. A conflict means another
    /// process rewrote it at the same time, which moves it just as well.
    pub async fn touch_generation(&self) -> Result<(), ProxyError> {
        let key = Key::new(GENERATION)?;
        let (expected, count) = match self.store.get(&key).await? {
            Some(obj) => {
                let count = std::str::from_utf8(&obj.bytes)
                    .ok()
                    .and_then(|text| text.parse::<u64>().ok())
                    .unwrap_or(0);
                (Precondition::Version(obj.version), count)
            }
            None => (Precondition::Absent, 0),
        };
        let bytes = count.wrapping_add(1).to_string().into_bytes();
        match self.store.put_cas(&key, bytes, expected).await {
            Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The stored version of a server's catalog, if any (for a CAS after a dropped catalog).
    pub async fn catalog_version(
        &self,
        cell: &str,
        server_id: &str,
    ) -> Result<Option<Version>, ProxyError> {
        Ok(self.store.head(&key(cell, server_id, CATALOG)?).await?)
    }
}
