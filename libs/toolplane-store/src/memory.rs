//! The in-memory backend, for tests and embedded use. Owns nothing durable: everything is gone
//! with the process. Must keep exactly the semantics of the durable backends (create-only, CAS,
//! key tree, ordering), because services test against it.

use std::{
    collections::BTreeMap,
    ops::Bound,
    sync::{Mutex, MutexGuard, PoisonError},
};

use async_trait::async_trait;

use crate::{
    Key, ListPage, Object, Precondition, Store, StoreError, StoreOptions, Version,
    store::clamp_limit,
};

/// A [`Store`] in a map behind one mutex. Every verb is one critical section, which makes it
/// atomic; none of them awaits while holding the lock.
#[derive(Debug, Default)]
pub struct MemoryStore {
    options: StoreOptions,
    objects: Mutex<BTreeMap<Key, Object>>,
}

impl MemoryStore {
    pub fn new(options: StoreOptions) -> MemoryStore {
        MemoryStore {
            options,
            objects: Mutex::new(BTreeMap::new()),
        }
    }

    fn objects(&self) -> MutexGuard<'_, BTreeMap<Key, Object>> {
        // A panic inside a critical section can not leave the map half-updated (each section
        // makes one insert or remove), so a poisoned lock still guards a consistent map.
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Why `key` can not be an object given the keys in `objects`, if it can not.
fn collision(objects: &BTreeMap<Key, Object>, key: &Key) -> Option<&'static str> {
    // Every ancestor of a valid key is itself a valid key, so `is_ok_and` only skips the impossible.
    if key
        .ancestors()
        .any(|ancestor| Key::new(ancestor).is_ok_and(|ancestor| objects.contains_key(&ancestor)))
    {
        return Some("an ancestor of the key is an object");
    }
    // Keys below `key` are exactly those starting with `key/`, contiguous from the first key
    // that sorts at or after `key/`.
    let subtree = format!("{key}/");
    let below = objects
        .range::<Key, _>((Bound::Excluded(key), Bound::Unbounded))
        .map(|(next, _)| next)
        .find(|next| next.as_str() >= subtree.as_str())
        .is_some_and(|next| next.is_below(key));
    below.then_some("keys exist below the key")
}

#[async_trait]
impl Store for MemoryStore {
    async fn put_create(&self, key: &Key, bytes: Vec<u8>) -> Result<Version, StoreError> {
        self.options.check_size(key, bytes.len())?;
        let mut objects = self.objects();
        if objects.contains_key(key) {
            return Err(StoreError::AlreadyExists { key: key.clone() });
        }
        if let Some(reason) = collision(&objects, key) {
            return Err(StoreError::KeyCollision {
                key: key.clone(),
                reason,
            });
        }
        let object = Object::new(bytes);
        let version = object.version.clone();
        objects.insert(key.clone(), object);
        Ok(version)
    }

    async fn put_cas(
        &self,
        key: &Key,
        bytes: Vec<u8>,
        expected: Precondition,
    ) -> Result<Version, StoreError> {
        self.options.check_mutable(key)?;
        self.options.check_size(key, bytes.len())?;
        let mut objects = self.objects();
        let current = objects.get(key).map(|object| object.version.clone());
        if !expected.holds_for(current.as_ref()) {
            return Err(StoreError::Conflict {
                key: key.clone(),
                expected,
                current,
            });
        }
        if current.is_none()
            && let Some(reason) = collision(&objects, key)
        {
            return Err(StoreError::KeyCollision {
                key: key.clone(),
                reason,
            });
        }
        let object = Object::new(bytes);
        let version = object.version.clone();
        objects.insert(key.clone(), object);
        Ok(version)
    }

    async fn get(&self, key: &Key) -> Result<Option<Object>, StoreError> {
        Ok(self.objects().get(key).cloned())
    }

    async fn head(&self, key: &Key) -> Result<Option<Version>, StoreError> {
        Ok(self.objects().get(key).map(|object| object.version.clone()))
    }

    async fn list(
        &self,
        prefix: Option<&Key>,
        start_after: Option<&Key>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let limit = clamp_limit(limit);
        let objects = self.objects();
        let lower = match start_after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Unbounded,
        };
        let mut keys: Vec<Key> = match prefix {
            None => objects
                .range::<Key, _>((lower, Bound::Unbounded))
                .map(|(key, _)| key)
                .take(limit + 1)
                .cloned()
                .collect(),
            Some(prefix) => {
                // Keys below `a` sort after `a` and after siblings such as `a-b` (since `-` < `/`),
                // and before `a0`; skip the siblings, stop at the first key past the subtree.
                let subtree = format!("{prefix}/");
                objects
                    .range::<Key, _>((lower, Bound::Unbounded))
                    .map(|(key, _)| key)
                    .skip_while(|key| !key.is_below(prefix) && key.as_str() < subtree.as_str())
                    .take_while(|key| key.is_below(prefix))
                    .take(limit + 1)
                    .cloned()
                    .collect()
            }
        };
        let more = keys.len() > limit;
        keys.truncate(limit);
        let next_start_after = if more { keys.last().cloned() } else { None };
        Ok(ListPage {
            keys,
            next_start_after,
        })
    }

    async fn delete(&self, key: &Key, expected: Option<&Version>) -> Result<bool, StoreError> {
        self.options.check_mutable(key)?;
        let mut objects = self.objects();
        let current = objects.get(key).map(|object| object.version.clone());
        if let Some(expected) = expected
            && current.as_ref() != Some(expected)
        {
            return Err(StoreError::Conflict {
                key: key.clone(),
                expected: Precondition::Version(expected.clone()),
                current,
            });
        }
        Ok(objects.remove(key).is_some())
    }
}
