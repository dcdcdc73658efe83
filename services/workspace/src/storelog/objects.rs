//! Audit objects on a shared store (`log/<cell>/<run>/obj/<path>`): create-only puts, reads and
//! listings, with a bounded cache of objects read (they are immutable, so a cached one is never
//! stale). Must never overwrite an object, nor accept one above or below another.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::Arc,
};

use toolplane_store::{Key, StoreError};

use super::{
    StoreLog,
    head::{decode_object, encode_object},
    lock, run_prefix,
};
use crate::{
    engine::now_ms,
    error::WsError,
    paths,
    wal::{LogObject, RunKey},
};

/// Bytes of audit objects kept in memory, over all runs.
const CACHED_OBJECT_BYTES: usize = 64 * 1024 * 1024;

/// Objects read or written, oldest first out.
#[derive(Debug, Default)]
pub(super) struct ObjectCache {
    map: HashMap<(RunKey, String), LogObject>,
    order: VecDeque<(RunKey, String)>,
    bytes: usize,
}

impl ObjectCache {
    fn insert(&mut self, key: &RunKey, object: LogObject) {
        let id = (key.clone(), object.path.clone());
        let size = usize::try_from(object.size).unwrap_or(usize::MAX);
        if size > CACHED_OBJECT_BYTES / 4 {
            return;
        }
        if self.map.insert(id.clone(), object).is_none() {
            self.order.push_back(id);
            self.bytes += size;
        }
        while self.bytes > CACHED_OBJECT_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.map.remove(&old) {
                self.bytes -= usize::try_from(gone.size).unwrap_or(0);
            }
        }
    }
}

fn objects_prefix(key: &RunKey) -> Result<Key, WsError> {
    Ok(Key::new(format!("{}/obj", run_prefix(key)))?)
}

fn object_key(key: &RunKey, path: &str) -> Result<Key, WsError> {
    Key::new(format!("{}/obj/{path}", run_prefix(key)))
        .map_err(|_| WsError::invalid_request(format!("{path} can not name an audit object")))
}

fn audit_exists(message: String) -> WsError {
    WsError::status(
        "workspace.audit_exists",
        tonic::Code::AlreadyExists,
        format!("{message}; audit objects are never overwritten"),
    )
}

fn object_of(path: &str, stored: &[u8]) -> Result<LogObject, WsError> {
    let (put_at, bytes) = decode_object(stored)?;
    Ok(LogObject::in_memory(
        path.to_owned(),
        Arc::new(bytes.to_vec()),
        put_at,
    ))
}

impl StoreLog {
    /// Creates an audit object; `Ok(false)` when the same bytes were there already and
    /// `allow_identical` is set.
    pub(super) async fn create_object(
        &self,
        key: &RunKey,
        path: &str,
        bytes: &[u8],
        put_at: i64,
        allow_identical: bool,
    ) -> Result<bool, WsError> {
        let okey = object_key(key, path)?;
        match self
            .store
            .put_create(&okey, encode_object(put_at, bytes))
            .await
        {
            Ok(_) => {
                let object =
                    LogObject::in_memory(path.to_owned(), Arc::new(bytes.to_vec()), put_at);
                lock(&self.objects).insert(key, object);
                Ok(true)
            }
            Err(StoreError::AlreadyExists { .. }) => {
                let same = match self.object_bytes(key, path).await? {
                    Some(found) => found.as_slice() == bytes,
                    None => false,
                };
                if same && allow_identical {
                    Ok(false)
                } else {
                    Err(audit_exists(format!("{path} exists")))
                }
            }
            Err(StoreError::KeyCollision { .. }) => Err(audit_exists(format!(
                "{path} is above or below another audit object"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// Stores an audit object create-only; `false` when an identical object already existed and
    /// `allow_identical` was set. Durable when this returns.
    pub async fn put_object(
        &self,
        key: &RunKey,
        path: &str,
        bytes: Vec<u8>,
        allow_identical: bool,
    ) -> Result<bool, WsError> {
        self.create_object(key, path, &bytes, now_ms(), allow_identical)
            .await
    }

    /// The audit object at `path` of a run, if the store holds one.
    pub async fn object(&self, key: &RunKey, path: &str) -> Result<Option<LogObject>, WsError> {
        if !paths::is_audit_path(path) {
            return Ok(None);
        }
        if let Some(found) = lock(&self.objects).map.get(&(key.clone(), path.to_owned())) {
            return Ok(Some(found.clone()));
        }
        // A path no key can name was never stored.
        let Ok(okey) = object_key(key, path) else {
            return Ok(None);
        };
        let Some(stored) = self.store.get(&okey).await? else {
            return Ok(None);
        };
        let object = object_of(path, &stored.bytes)?;
        lock(&self.objects).insert(key, object.clone());
        Ok(Some(object))
    }

    /// The bytes of the audit object at `path` of a run, if the store holds one.
    pub async fn object_bytes(
        &self,
        key: &RunKey,
        path: &str,
    ) -> Result<Option<Arc<Vec<u8>>>, WsError> {
        match self.object(key, path).await? {
            Some(object) => object.read().map(Some),
            None => Ok(None),
        }
    }

    /// The paths of a run's audit objects under a path prefix, in order: one listing of the
    /// run's object keys, no object read.
    async fn object_paths_under(&self, key: &RunKey, prefix: &str) -> Result<Vec<String>, WsError> {
        if !paths::may_hold_audit_paths(prefix) {
            return Ok(Vec::new());
        }
        let root = objects_prefix(key)?;
        // A run's objects are bounded by its journal's appends, so all of them are listed.
        Ok(
            toolplane_store::keys_below(self.store.as_ref(), &root, usize::MAX)
                .await?
                .iter()
                .filter_map(|k| k.strip_prefix(&root))
                .map(|rel| rel.as_str().to_owned())
                .filter(|rel| rel.starts_with(prefix))
                .collect(),
        )
    }

    /// The audit objects of a run under a path prefix, keyed (and ordered) by path: one listing
    /// of the run's objects. Objects in memory are handed out as they are; the others are read
    /// from the store only when a caller reads them ([`LogObject::read`], blocking: from the
    /// workspace's blocking threads), so a listing reads none, a page of objects only its own
    /// and a search only those it scans, each when it scans it.
    pub async fn objects_under(
        &self,
        key: &RunKey,
        prefix: &str,
    ) -> Result<BTreeMap<String, LogObject>, WsError> {
        let paths_found = self.object_paths_under(key, prefix).await?;
        let handle = tokio::runtime::Handle::current();
        let cache = lock(&self.objects);
        let mut out = BTreeMap::new();
        for path in paths_found {
            let object = match cache.map.get(&(key.clone(), path.clone())) {
                Some(cached) => cached.clone(),
                None => {
                    let (store, handle) = (Arc::clone(&self.store), handle.clone());
                    let (okey, at) = (object_key(key, &path)?, path.clone());
                    LogObject::later(
                        path.clone(),
                        Arc::new(move || {
                            let stored = handle.block_on(store.get(&okey))?.ok_or_else(|| {
                                WsError::io(format!("audit object {at} vanished"))
                            })?;
                            object_of(&at, &stored.bytes)
                        }),
                    )
                }
            };
            out.insert(path, object);
        }
        Ok(out)
    }
}
