//! toolplane-store: the storage every toolplane service keeps its state through.
//!
//! One trait, [`Store`], with create-only puts, compare-and-swap puts, ordered paged listing and
//! namespaced views; backends [`FsStore`] (local filesystem, atomic and durable),
//! [`MemoryStore`], with the cargo feature `s3` `S3Store` (an S3-compatible bucket), with the
//! feature `postgres` `PgStore` (a PostgreSQL table), and [`RoutedStore`], which sends the keys
//! under some prefixes to one backend and the rest to another; one [`conformance`] suite that
//! every backend, present and future, passes; and [`testing`] tools (a simulated crash filesystem and a recorder) that prove the filesystem
//! backend's fsync ordering.
//!
//! This crate must never know which service stores what: services pick their own namespace and
//! keys. Errors are one enum, [`StoreError`], whose messages start with a stable `store.*` code.

mod config;
pub mod conformance;
mod error;
pub mod fs;
mod key;
mod memory;
mod namespace;
mod object;
#[cfg(feature = "postgres")]
mod postgres;
mod routed;
#[cfg(feature = "s3")]
mod s3;
mod store;
pub mod testing;

pub use config::{PG_PASSWORD_ENV, S3_ACCESS_KEY_ENV, S3_SECRET_KEY_ENV, StoreConfig};
pub use error::StoreError;
pub use fs::FsStore;
pub use key::{Key, MAX_KEY_BYTES, MAX_SEGMENT_BYTES, RESERVED_SEGMENT_PREFIX};
pub use memory::MemoryStore;
pub use namespace::Namespaced;
pub use object::{Object, Precondition, Version};
#[cfg(feature = "postgres")]
pub use postgres::{PgConfig, PgStore};
pub use routed::RoutedStore;
#[cfg(feature = "s3")]
pub use s3::{S3Config, S3Store};
pub use store::{
    DEFAULT_MAX_OBJECT_BYTES, ListPage, MAX_LIST_LIMIT, Store, StoreExt, StoreOptions, keys_below,
};
