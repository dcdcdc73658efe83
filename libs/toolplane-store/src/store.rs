//! The storage contract. Owns the semantics of every verb (documented on the trait's methods and
//! checked by [`crate::conformance`]) and the options every backend honours; must never know
//! which backend it runs on or which service uses it.

use std::{fmt, sync::Arc};

use async_trait::async_trait;

use crate::{Key, Object, Precondition, StoreError, Version, namespace::Namespaced};

/// Default limit on one object's size: 64 MiB.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 64 * 1024 * 1024;
/// The most keys one `list` call returns; larger limits are clamped to it (the S3 page size).
pub const MAX_LIST_LIMIT: usize = 1000;

/// Options every backend honours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// Objects larger than this are refused with `store.too_large` before anything is written.
    pub max_object_bytes: u64,
    /// Keys at or below these prefixes are create-only: `put_cas` and `delete` on them fail with
    /// `store.create_only`. Configure the audit prefixes here so a bug can not rewrite history.
    pub create_only_prefixes: Vec<Key>,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
            create_only_prefixes: Vec::new(),
        }
    }
}

impl StoreOptions {
    /// Refuses `size` bytes for `key` if over the limit.
    pub fn check_size(&self, key: &Key, size: usize) -> Result<(), StoreError> {
        let size = u64::try_from(size).unwrap_or(u64::MAX);
        if size > self.max_object_bytes {
            return Err(StoreError::TooLarge {
                key: key.clone(),
                size,
                limit: self.max_object_bytes,
            });
        }
        Ok(())
    }

    /// Refuses a mutation (`put_cas`, `delete`) of a key under a create-only prefix.
    pub fn check_mutable(&self, key: &Key) -> Result<(), StoreError> {
        match self
            .create_only_prefixes
            .iter()
            .find(|prefix| key.is_at_or_below(prefix))
        {
            Some(prefix) => Err(StoreError::CreateOnly {
                key: key.clone(),
                prefix: prefix.clone(),
            }),
            None => Ok(()),
        }
    }
}

/// One page of a `list` call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Keys in ascending byte order.
    pub keys: Vec<Key>,
    /// Pass as `start_after` to get the next page; `None` when no key followed this page at the
    /// time of the call.
    pub next_start_after: Option<Key>,
}

/// Durable key → bytes storage with create-only puts, compare-and-swap puts and ordered listing.
///
/// **Keys form a tree.** A key names either an object or a "directory" of keys below it, never
/// both: with `a/b` stored, putting `a` or `a/b/c` fails with `store.key_collision` (a filesystem
/// can not hold both, so no backend allows it). A directory disappears with its last key.
///
/// **Create-only objects are never deleted or replaced by services.** Audit objects (tool
/// arguments and results, snapshots, model responses, journal records) are written with
/// `put_create` and then only read. `put_cas` and `delete` are for mutable state only; the trait
/// can not tell the two apart, so backends can be configured with create-only prefixes
/// ([`StoreOptions::create_only_prefixes`]) that enforce the rule.
///
/// Every method is atomic with respect to the others, also across processes sharing a durable
/// backend. Once a writing method returns `Ok` on a durable backend, the write survives a crash
/// of the process and of the machine. If it returns `Err` or its future is dropped, the write
/// either happened completely or not at all; readers never see a partial object.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// Creates `key` with `bytes` if and only if it does not exist.
    ///
    /// Never overwrites: if the key exists, fails with `store.already_exists` and leaves it
    /// untouched. Of any number of concurrent creators of one key, exactly one succeeds. Returns
    /// the new object's version. Fails with `store.too_large` over the size limit and
    /// `store.key_collision` if the key would nest under, or over, another key.
    async fn put_create(&self, key: &Key, bytes: Vec<u8>) -> Result<Version, StoreError>;

    /// Replaces `key` with `bytes` if the current state matches `expected` (compare-and-swap).
    ///
    /// `Precondition::Absent` requires the key not to exist (and then never replaces an object a
    /// concurrent `put_create` made); `Precondition::Version(v)` requires its current version to be
    /// `v`. On a mismatch fails with `store.conflict` carrying the version found (`None` when
    /// absent) and writes nothing, so a read-modify-write loop re-reads and retries. Returns the
    /// new version. Fails with `store.create_only` under a create-only prefix.
    async fn put_cas(
        &self,
        key: &Key,
        bytes: Vec<u8>,
        expected: Precondition,
    ) -> Result<Version, StoreError>;

    /// The object at `key` with its version, or `None` if absent. Never returns a partial object.
    async fn get(&self, key: &Key) -> Result<Option<Object>, StoreError>;

    /// The version of `key`, or `None` if absent; what `get` would return without the bytes.
    async fn head(&self, key: &Key) -> Result<Option<Version>, StoreError>;

    /// Keys strictly below `prefix` (every key when `None`), at any depth, in ascending byte order,
    /// starting after `start_after` (which need not exist), at most `limit` of them.
    ///
    /// `limit` is clamped to `1..=MAX_LIST_LIMIT`, so a huge namespace is read a page at a time:
    /// pass the page's `next_start_after` back in until it is `None`. Paging is not a snapshot:
    /// keys created or deleted between calls may or may not appear, but every key that exists
    /// throughout the listing appears exactly once. `prefix` matches whole segments: `a` lists
    /// `a/b` but not `ab` and not `a` itself.
    async fn list(
        &self,
        prefix: Option<&Key>,
        start_after: Option<&Key>,
        limit: usize,
    ) -> Result<ListPage, StoreError>;

    /// Deletes `key`; returns whether it existed.
    ///
    /// Only for mutable (CAS-managed) state: services never delete create-only audit objects, and
    /// a key under a create-only prefix fails with `store.create_only`. With `expected` set, the
    /// key must exist at that version or the call fails with `store.conflict` and deletes nothing.
    async fn delete(&self, key: &Key, expected: Option<&Version>) -> Result<bool, StoreError>;
}

/// Conveniences on a shared store.
pub trait StoreExt {
    /// A view of this store in which every key is prefixed with `namespace/`; each service keeps
    /// its state in its own namespace. `namespace` must be a valid [`Key`] (it may have several
    /// segments).
    fn namespace(&self, namespace: &str) -> Result<Arc<dyn Store>, StoreError>;
}

impl StoreExt for Arc<dyn Store> {
    fn namespace(&self, namespace: &str) -> Result<Arc<dyn Store>, StoreError> {
        let prefix = Key::new(namespace)?;
        Ok(Arc::new(Namespaced::new(Arc::clone(self), prefix)))
    }
}

/// Every key strictly below `prefix`, in order, read a page at a time, stopping after `max` keys
/// (the rest are not read).
pub async fn keys_below(
    store: &dyn Store,
    prefix: &Key,
    max: usize,
) -> Result<Vec<Key>, StoreError> {
    let mut out = Vec::new();
    let mut after: Option<Key> = None;
    loop {
        let page = store
            .list(Some(prefix), after.as_ref(), MAX_LIST_LIMIT)
            .await?;
        out.extend(page.keys);
        if out.len() >= max {
            out.truncate(max);
            return Ok(out);
        }
        match page.next_start_after {
            Some(next) => after = Some(next),
            None => return Ok(out),
        }
    }
}

/// Clamps a caller's `limit` to `1..=MAX_LIST_LIMIT`.
pub(crate) fn clamp_limit(limit: usize) -> usize {
    limit.clamp(1, MAX_LIST_LIMIT)
}
