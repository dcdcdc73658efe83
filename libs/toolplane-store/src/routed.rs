//! A store over two backends, chosen by key. Owns which backend a key lives in and the merge of
//! their listings; must never copy or move objects between them, and assumes each backend is
//! used only through this router (so the two hold disjoint keys).
//!
//! The cluster layout is the reason (docs/storage.md, "Routing"): durable create-only bytes in an
//! S3 bucket, the small mutable records (written with `put_cas` or deleted) in PostgreSQL, whose
//! conditional writes are atomic.

use std::sync::Arc;

use async_trait::async_trait;

use crate::{Key, ListPage, Object, Precondition, Store, StoreError, Version, store::clamp_limit};

/// A [`Store`] that keeps keys at or below any of `record_prefixes` in `records` and every other
/// key in `bytes`.
///
/// Keys form a tree across both: a key that is a strict ancestor of a record prefix (`svc` for
/// the prefix `svc/state`) can never be an object (`store.key_collision`), since keys below it
/// may live in the other backend. Every other collision lies within one backend, which refuses
/// it. Each verb is exactly as atomic as the backend its key routes to.
#[derive(Debug, Clone)]
pub struct RoutedStore {
    bytes: Arc<dyn Store>,
    records: Arc<dyn Store>,
    record_prefixes: Vec<Key>,
}

impl RoutedStore {
    pub fn new(
        bytes: Arc<dyn Store>,
        records: Arc<dyn Store>,
        record_prefixes: Vec<Key>,
    ) -> RoutedStore {
        RoutedStore {
            bytes,
            records,
            record_prefixes,
        }
    }

    fn is_record(&self, key: &Key) -> bool {
        self.record_prefixes
            .iter()
            .any(|prefix| key.is_at_or_below(prefix))
    }

    /// The backend for a key that is to become an object.
    fn for_write(&self, key: &Key) -> Result<&Arc<dyn Store>, StoreError> {
        if self
            .record_prefixes
            .iter()
            .any(|prefix| prefix.is_below(key))
        {
            return Err(StoreError::KeyCollision {
                key: key.clone(),
                reason: "a record prefix lies below the key",
            });
        }
        Ok(self.backend(key))
    }

    fn backend(&self, key: &Key) -> &Arc<dyn Store> {
        if self.is_record(key) {
            &self.records
        } else {
            &self.bytes
        }
    }
}

#[async_trait]
impl Store for RoutedStore {
    async fn put_create(&self, key: &Key, bytes: Vec<u8>) -> Result<Version, StoreError> {
        self.for_write(key)?.put_create(key, bytes).await
    }

    async fn put_cas(
        &self,
        key: &Key,
        bytes: Vec<u8>,
        expected: Precondition,
    ) -> Result<Version, StoreError> {
        self.for_write(key)?.put_cas(key, bytes, expected).await
    }

    async fn get(&self, key: &Key) -> Result<Option<Object>, StoreError> {
        self.backend(key).get(key).await
    }

    async fn head(&self, key: &Key) -> Result<Option<Version>, StoreError> {
        self.backend(key).head(key).await
    }

    async fn list(
        &self,
        prefix: Option<&Key>,
        start_after: Option<&Key>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        if let Some(prefix) = prefix {
            let records_below = self
                .record_prefixes
                .iter()
                .any(|record| record.is_below(prefix));
            if self.is_record(prefix) {
                return self.records.list(Some(prefix), start_after, limit).await;
            }
            if !records_below {
                return self.bytes.list(Some(prefix), start_after, limit).await;
            }
        }
        // Both backends may hold keys here: the first `limit` of their union after `start_after`
        // are among the first `limit` of each.
        let limit = clamp_limit(limit);
        let bytes = self.bytes.list(prefix, start_after, limit).await?;
        let records = self.records.list(prefix, start_after, limit).await?;
        let more_behind = bytes.next_start_after.is_some() || records.next_start_after.is_some();
        let mut keys = bytes.keys;
        keys.extend(records.keys);
        keys.sort_unstable();
        let more = more_behind || keys.len() > limit;
        keys.truncate(limit);
        let next_start_after = if more { keys.last().cloned() } else { None };
        Ok(ListPage {
            keys,
            next_start_after,
        })
    }

    async fn delete(&self, key: &Key, expected: Option<&Version>) -> Result<bool, StoreError> {
        self.backend(key).delete(key, expected).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryStore, StoreOptions};

    fn key(k: &str) -> Key {
        Key::new(k).unwrap()
    }

    fn stores() -> (Arc<dyn Store>, Arc<dyn Store>, RoutedStore) {
        let bytes: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
        let records: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
        let routed = RoutedStore::new(
            Arc::clone(&bytes),
            Arc::clone(&records),
            vec![key("svc/state"), key("leases")],
        );
        (bytes, records, routed)
    }

    #[tokio::test]
    async fn keys_go_to_their_backend_and_list_merges_both() {
        let (bytes, records, routed) = stores();
        for k in ["svc/audit/1", "svc/state/run", "leases", "svc/z", "a"] {
            routed.put_create(&key(k), k.into()).await.unwrap();
        }
        let listed =
            |store: Arc<dyn Store>| async move { store.list(None, None, 100).await.unwrap().keys };
        assert_eq!(listed(records).await, [key("leases"), key("svc/state/run")]);
        assert_eq!(
            listed(bytes).await,
            [key("a"), key("svc/audit/1"), key("svc/z")]
        );
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let page = routed
                .list(Some(&key("svc")), after.as_ref(), 1)
                .await
                .unwrap();
            all.extend(page.keys);
            match page.next_start_after {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(
            all,
            [key("svc/audit/1"), key("svc/state/run"), key("svc/z")]
        );
        assert_eq!(
            routed
                .get(&key("svc/state/run"))
                .await
                .unwrap()
                .unwrap()
                .bytes,
            b"svc/state/run"
        );
    }

    #[tokio::test]
    async fn an_ancestor_of_a_record_prefix_is_never_an_object() {
        let (_, _, routed) = stores();
        let error = routed
            .put_create(&key("svc"), Vec::new())
            .await
            .unwrap_err();
        assert_eq!(error.code(), "store.key_collision", "{error}");
        let error = routed
            .put_cas(&key("svc"), Vec::new(), Precondition::Absent)
            .await
            .unwrap_err();
        assert_eq!(error.code(), "store.key_collision", "{error}");
    }
}
