//! The filesystem backend's in-process key locks.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use tokio::sync::OwnedMutexGuard;

use super::lock;
use crate::Key;

/// In-process per-key mutexes for CAS and delete, so concurrent writers of one key wait on an
/// async mutex instead of each parking a blocking thread on the cross-process `flock`.
#[derive(Debug, Default)]
pub(super) struct KeyLocks {
    table: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

pub(super) struct KeyLockGuard<'a> {
    locks: &'a KeyLocks,
    key: Key,
    guard: Option<OwnedMutexGuard<()>>,
}

impl KeyLocks {
    /// Whether no key has an entry: none is held or awaited.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        lock(&self.table).is_empty()
    }

    pub(super) async fn lock(&self, key: &Key) -> KeyLockGuard<'_> {
        let mutex = Arc::clone(lock(&self.table).entry(key.clone()).or_default());
        let guard = mutex.lock_owned().await;
        KeyLockGuard {
            locks: self,
            key: key.clone(),
            guard: Some(guard),
        }
    }
}

impl Drop for KeyLockGuard<'_> {
    fn drop(&mut self) {
        let mut table = lock(&self.locks.table);
        drop(self.guard.take());
        // Waiters clone the Arc under the table lock, so a count of one (the table's) means
        // nobody holds or awaits this key: drop the entry to keep the table small. (A waiter
        // whose future was dropped may leave one entry behind until the key's next use.)
        if table
            .get(&self.key)
            .is_some_and(|mutex| Arc::strong_count(mutex) == 1)
        {
            table.remove(&self.key);
        }
    }
}
