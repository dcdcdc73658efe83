//! Namespaced views. Owns the mapping between a service's keys and the shared store's keys; must
//! never let a key of one namespace reach another (every key is a whole-segment child of the
//! prefix, and `Key` forbids `..`).

use std::sync::Arc;

use async_trait::async_trait;

use crate::{Key, ListPage, Object, Precondition, Store, StoreError, Version};

/// A [`Store`] that prefixes every key with `prefix/` and strips it again from listed keys and
/// from the keys errors carry, so a service sees only its own keys.
#[derive(Debug, Clone)]
pub struct Namespaced {
    inner: Arc<dyn Store>,
    prefix: Key,
}

impl Namespaced {
    pub fn new(inner: Arc<dyn Store>, prefix: Key) -> Namespaced {
        Namespaced { inner, prefix }
    }

    pub fn prefix(&self) -> &Key {
        &self.prefix
    }

    fn full(&self, key: &Key) -> Result<Key, StoreError> {
        self.prefix.join(key)
    }

    /// The caller's key for a key of the inner store (unchanged if it lies outside the
    /// namespace, as a create-only prefix configured above it may).
    fn local(&self, key: Key) -> Key {
        key.strip_prefix(&self.prefix).unwrap_or(key)
    }

    fn local_error(&self, error: StoreError) -> StoreError {
        match error {
            StoreError::AlreadyExists { key } => StoreError::AlreadyExists {
                key: self.local(key),
            },
            StoreError::Conflict {
                key,
                expected,
                current,
            } => StoreError::Conflict {
                key: self.local(key),
                expected,
                current,
            },
            StoreError::KeyCollision { key, reason } => StoreError::KeyCollision {
                key: self.local(key),
                reason,
            },
            StoreError::CreateOnly { key, prefix } => StoreError::CreateOnly {
                key: self.local(key),
                prefix: self.local(prefix),
            },
            StoreError::TooLarge { key, size, limit } => StoreError::TooLarge {
                key: self.local(key),
                size,
                limit,
            },
            other => other,
        }
    }
}

#[async_trait]
impl Store for Namespaced {
    async fn put_create(&self, key: &Key, bytes: Vec<u8>) -> Result<Version, StoreError> {
        self.inner
            .put_create(&self.full(key)?, bytes)
            .await
            .map_err(|e| self.local_error(e))
    }

    async fn put_cas(
        &self,
        key: &Key,
        bytes: Vec<u8>,
        expected: Precondition,
    ) -> Result<Version, StoreError> {
        self.inner
            .put_cas(&self.full(key)?, bytes, expected)
            .await
            .map_err(|e| self.local_error(e))
    }

    async fn get(&self, key: &Key) -> Result<Option<Object>, StoreError> {
        self.inner
            .get(&self.full(key)?)
            .await
            .map_err(|e| self.local_error(e))
    }

    async fn head(&self, key: &Key) -> Result<Option<Version>, StoreError> {
        self.inner
            .head(&self.full(key)?)
            .await
            .map_err(|e| self.local_error(e))
    }

    async fn list(
        &self,
        prefix: Option<&Key>,
        start_after: Option<&Key>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let prefix = match prefix {
            Some(prefix) => self.full(prefix)?,
            None => self.prefix.clone(),
        };
        // A `start_after` too long to prefix is greater than every key that fits, so the page
        // is empty; no need to fail the call.
        let start_after = match start_after.map(|key| self.full(key)).transpose() {
            Ok(start_after) => start_after,
            Err(_) => return Ok(ListPage::default()),
        };
        let page = self
            .inner
            .list(Some(&prefix), start_after.as_ref(), limit)
            .await
            .map_err(|e| self.local_error(e))?;
        Ok(ListPage {
            // The inner store lists only keys below the prefix, so every key strips.
            keys: page
                .keys
                .iter()
                .filter_map(|key| key.strip_prefix(&self.prefix))
                .collect(),
            next_start_after: page
                .next_start_after
                .and_then(|key| key.strip_prefix(&self.prefix)),
        })
    }

    async fn delete(&self, key: &Key, expected: Option<&Version>) -> Result<bool, StoreError> {
        self.inner
            .delete(&self.full(key)?, expected)
            .await
            .map_err(|e| self.local_error(e))
    }
}
