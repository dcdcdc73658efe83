//! Shared helpers for this crate's integration tests: stores that clean up after themselves.

#![allow(dead_code)]

use std::{path::Path, sync::Arc};

use async_trait::async_trait;
use tempfile::TempDir;
use toolplane_store::{
    FsStore, Key, ListPage, Object, Precondition, Store, StoreError, StoreOptions, Version,
};

/// An [`FsStore`] in a temp directory that is removed with it.
#[derive(Debug)]
pub struct TempFsStore {
    pub store: FsStore,
    pub dir: TempDir,
}

impl TempFsStore {
    pub async fn open(options: StoreOptions) -> TempFsStore {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path().join("store"), options)
            .await
            .unwrap();
        TempFsStore { store, dir }
    }

    pub fn root(&self) -> &Path {
        self.store.root()
    }
}

#[async_trait]
impl Store for TempFsStore {
    async fn put_create(&self, key: &Key, bytes: Vec<u8>) -> Result<Version, StoreError> {
        self.store.put_create(key, bytes).await
    }

    async fn put_cas(
        &self,
        key: &Key,
        bytes: Vec<u8>,
        expected: Precondition,
    ) -> Result<Version, StoreError> {
        self.store.put_cas(key, bytes, expected).await
    }

    async fn get(&self, key: &Key) -> Result<Option<Object>, StoreError> {
        self.store.get(key).await
    }

    async fn head(&self, key: &Key) -> Result<Option<Version>, StoreError> {
        self.store.head(key).await
    }

    async fn list(
        &self,
        prefix: Option<&Key>,
        start_after: Option<&Key>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.store.list(prefix, start_after, limit).await
    }

    async fn delete(&self, key: &Key, expected: Option<&Version>) -> Result<bool, StoreError> {
        self.store.delete(key, expected).await
    }
}

pub fn key(key: &str) -> Key {
    Key::new(key).unwrap()
}

/// Options for the store under a namespace view: the create-only prefixes move under it.
pub fn options_under(namespace: &str, options: StoreOptions) -> StoreOptions {
    let ns = key(namespace);
    StoreOptions {
        create_only_prefixes: options
            .create_only_prefixes
            .iter()
            .map(|prefix| ns.join(prefix).unwrap())
            .collect(),
        ..options
    }
}

pub fn arc(store: impl Store + 'static) -> Arc<dyn Store> {
    Arc::new(store)
}
