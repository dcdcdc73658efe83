//! What the catalog stores and where: profiles, external tool host registrations and the
//! platform and user policy documents, each a JSON record under the store namespace `catalog/`.
//!
//! ```text
//! cells/<cell>/profiles/<profile-id>     ProfileRecord
//! cells/<cell>/hosts/<host-id>           HostRecord
//! cells/<cell>/policy/platform           PolicyRecord
//! cells/<cell>/policy/users/<sha256>     PolicyRecord (the actor id is inside)
//! ```
//!
//! Owns the record shapes, the keys, and the versioned writes: every write is a read, a check
//! of the caller's expected version, and a compare-and-swap on the bytes read, retried when
//! another writer got there first. It must never hold a write that skipped the CAS.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use toolplane_core::category::Category;
use toolplane_core::descriptor::ToolDescriptor;
use toolplane_store::{Key, Precondition, Store, StoreError, Version};

use crate::cell::{ActorId, CellId};
use crate::error::{CatalogCode, CatalogError};

/// How many times a write re-reads and retries after losing a compare-and-swap race.
const CAS_ATTEMPTS: usize = 16;

/// Milliseconds since the Unix epoch.
pub fn now_unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Hex SHA-256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Version::of(bytes).as_str().to_owned()
}

/// Where a profile came from when it was loaded from the start-up directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SourceFile {
    pub path: String,
    /// Hex SHA-256 of the file's bytes when it was loaded.
    pub sha256: String,
}

/// A stored profile: the document as written, with its version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProfileRecord {
    pub cell_id: String,
    pub profile_id: String,
    /// Starts at 1, increases by one on every write.
    pub version: u64,
    pub updated_at_unix_ms: i64,
    /// The document exactly as its author wrote it (it parsed and validated when written).
    pub profile_json: String,
    /// Set when the last write came from a start-up profile file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_file: Option<SourceFile>,
}

/// An external tool host's executor endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Endpoint {
    pub url: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub timeout_ms: u64,
    #[serde(default)]
    pub max_concurrent_calls: u32,
}

/// One tool of a registration, with what the host declared about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegisteredTool {
    pub descriptor: ToolDescriptor,
    /// The declared category (the second level of the category fallback); `None` lets the
    /// fallback decide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<Category>,
    #[serde(default)]
    pub progress_aware: bool,
}

/// A stored external tool host registration: its whole tool set, replaced atomically.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostRecord {
    pub cell_id: String,
    pub host_id: String,
    pub display_name: String,
    pub endpoint: Endpoint,
    pub tools: Vec<RegisteredTool>,
    /// Starts at 1, increases by one on every registration of the host.
    pub generation: u64,
    pub registered_at_unix_ms: i64,
}

/// A stored platform or user policy document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyRecord {
    /// Starts at 1, increases by one on every write.
    pub version: u64,
    pub updated_at_unix_ms: i64,
    /// The document exactly as written.
    pub policy_json: String,
    /// The actor, for user policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<String>,
}

/// A record's key within the catalog's namespace.
fn key(path: String) -> Result<Key, CatalogError> {
    Key::new(path).map_err(CatalogError::from)
}

pub fn profiles_prefix(cell: &CellId) -> Result<Key, CatalogError> {
    key(format!("cells/{cell}/profiles"))
}
pub fn profile_key(cell: &CellId, id: &str) -> Result<Key, CatalogError> {
    key(format!("cells/{cell}/profiles/{id}"))
}
pub fn hosts_prefix(cell: &CellId) -> Result<Key, CatalogError> {
    key(format!("cells/{cell}/hosts"))
}
pub fn host_key(cell: &CellId, id: &str) -> Result<Key, CatalogError> {
    key(format!("cells/{cell}/hosts/{id}"))
}
/// The cell's write marker: rewritten after every write of a registration or profile, so a
/// replica sharing the store sees with one `head` whether its assembled catalog is current.
pub fn generation_key(cell: &CellId) -> Result<Key, CatalogError> {
    key(format!("cells/{cell}/generation"))
}
pub fn platform_policy_key(cell: &CellId) -> Result<Key, CatalogError> {
    key(format!("cells/{cell}/policy/platform"))
}
pub fn user_policy_key(cell: &CellId, actor: &ActorId) -> Result<Key, CatalogError> {
    key(format!("cells/{cell}/policy/users/{}", actor.key_segment()))
}

/// The catalog's view of the store (already namespaced to `catalog/`).
#[derive(Debug, Clone)]
pub struct Records {
    store: Arc<dyn Store>,
}

/// What a versioned update decided.
#[derive(Debug)]
pub enum Update<T> {
    /// Write this value.
    Write(T),
    /// Leave the record as it is and return this.
    Keep(Option<T>),
}

impl Records {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Records { store }
    }

    /// Reads and parses one record with its store version.
    pub async fn get<T: DeserializeOwned>(
        &self,
        key: &Key,
    ) -> Result<Option<(Version, T)>, CatalogError> {
        match self.store.get(key).await? {
            None => Ok(None),
            Some(obj) => {
                let value = parse_record(key, &obj.bytes)?;
                Ok(Some((obj.version, value)))
            }
        }
    }

    /// The version of a record, without reading it.
    pub async fn head(&self, key: &Key) -> Result<Option<Version>, CatalogError> {
        Ok(self.store.head(key).await?)
    }

    /// Rewrites a marker (a decimal counter) with the next count, so its version changes. A
    /// lost race is as good as a win: the marker changed after the caller's write either way.
    pub async fn touch(&self, key: &Key) -> Result<(), CatalogError> {
        let (expected, count) = match self.store.get(key).await? {
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
        match self.store.put_cas(key, bytes, expected).await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == "store.conflict" => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Every key directly or deeper below `prefix`, in order, read a page at a time, stopping
    /// after `max` keys.
    pub async fn keys(&self, prefix: &Key, max: usize) -> Result<Vec<Key>, CatalogError> {
        Ok(toolplane_store::keys_below(self.store.as_ref(), prefix, max).await?)
    }

    /// One page of keys below `prefix`, after `start_after`.
    pub async fn page(
        &self,
        prefix: &Key,
        start_after: Option<&Key>,
        limit: usize,
    ) -> Result<(Vec<Key>, Option<Key>), CatalogError> {
        let page = self.store.list(Some(prefix), start_after, limit).await?;
        Ok((page.keys, page.next_start_after))
    }

    /// Read, decide, compare-and-swap; on a lost race, read again and decide again. `decide`
    /// sees the current value and checks the caller's expected version itself, so a retry
    /// re-checks it against what is stored now.
    pub async fn update<T, F>(&self, key: &Key, mut decide: F) -> Result<Option<T>, CatalogError>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(Option<T>) -> Result<Update<T>, CatalogError>,
    {
        let mut lost = None;
        for _ in 0..CAS_ATTEMPTS {
            let current = self.get::<T>(key).await?;
            let (precondition, value) = match current {
                Some((version, value)) => (Precondition::Version(version), Some(value)),
                None => (Precondition::Absent, None),
            };
            let next = match decide(value)? {
                Update::Keep(v) => return Ok(v),
                Update::Write(next) => next,
            };
            let bytes = serde_json::to_vec(&next).map_err(|e| {
                CatalogError::new(
                    CatalogCode::CorruptRecord,
                    format!("{key}: cannot encode: {e}"),
                )
            })?;
            match self.store.put_cas(key, bytes, precondition).await {
                Ok(_) => return Ok(Some(next)),
                Err(e @ StoreError::Conflict { .. }) => lost = Some(e),
                Err(e) => return Err(e.into()),
            }
        }
        Err(contended(key, lost))
    }

    /// Read, decide, delete at the version read; on a lost race, read and decide again.
    /// `decide` returns whether to delete.
    pub async fn delete<T, F>(&self, key: &Key, mut decide: F) -> Result<Option<T>, CatalogError>
    where
        T: DeserializeOwned,
        F: FnMut(&T) -> Result<bool, CatalogError>,
    {
        let mut lost = None;
        for _ in 0..CAS_ATTEMPTS {
            let Some((version, value)) = self.get::<T>(key).await? else {
                return Ok(None);
            };
            if !decide(&value)? {
                return Ok(None);
            }
            match self.store.delete(key, Some(&version)).await {
                Ok(_) => return Ok(Some(value)),
                Err(e @ StoreError::Conflict { .. }) => lost = Some(e),
                Err(e) => return Err(e.into()),
            }
        }
        Err(contended(key, lost))
    }
}

/// Every attempt lost its compare-and-swap race: the last conflict, as the store reported it.
fn contended(key: &Key, lost: Option<StoreError>) -> CatalogError {
    CatalogError::Store(lost.unwrap_or_else(|| StoreError::Conflict {
        key: key.clone(),
        expected: Precondition::Absent,
        current: None,
    }))
}

fn parse_record<T: DeserializeOwned>(key: &Key, bytes: &[u8]) -> Result<T, CatalogError> {
    serde_json::from_slice(bytes).map_err(|e| {
        CatalogError::new(
            CatalogCode::CorruptRecord,
            format!("{key}: stored record is not readable: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use toolplane_store::{MemoryStore, StoreOptions};

    use super::*;

    #[tokio::test]
    async fn concurrent_updates_lose_nothing() {
        let records = Records::new(Arc::new(MemoryStore::new(StoreOptions::default())));
        let key = key("cells/default/policy/platform".into()).unwrap();
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let r = records.clone();
            let k = key.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    r.update::<PolicyRecord, _>(&k, |cur| {
                        let version = cur.map_or(0, |c| c.version) + 1;
                        Ok(Update::Write(PolicyRecord {
                            version,
                            updated_at_unix_ms: 0,
                            policy_json: "{}".into(),
                            actor_id: None,
                        }))
                    })
                    .await
                    .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let (_, rec) = records.get::<PolicyRecord>(&key).await.unwrap().unwrap();
        assert_eq!(rec.version, 80, "every increment survived the races");
    }
}
