//! The crate's one error type. Owns the stable `store.*` codes every backend reports; must never
//! grow a variant whose meaning depends on the backend, so callers can branch on the type instead
//! of matching strings.

use std::{io, path::PathBuf};

use crate::{Key, Precondition, Version};

/// Everything a store operation can fail with. The `Display` text starts with the stable code
/// returned by [`StoreError::code`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A key (or namespace) did not pass [`Key::new`]'s rules.
    #[error("store.invalid_key: {reason}: {key:?}")]
    InvalidKey {
        /// The refused key, truncated to a readable length.
        key: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// `put_create` found the key already present; nothing was written.
    #[error("store.already_exists: {key}")]
    AlreadyExists { key: Key },
    /// A compare-and-swap precondition did not hold; nothing was written.
    #[error("store.conflict: {key}: expected {expected}, found {}", describe_current(current.as_ref()))]
    Conflict {
        key: Key,
        expected: Precondition,
        /// The version present when the precondition was checked (`None`: the key was absent).
        current: Option<Version>,
    },
    /// Keys form a tree: a key can not be an object and, at the same time, have keys below it.
    #[error("store.key_collision: {key}: {reason}")]
    KeyCollision { key: Key, reason: &'static str },
    /// `put_cas` or `delete` on a key under a prefix the store was configured as create-only.
    #[error("store.create_only: {key}: under create-only prefix {prefix}")]
    CreateOnly { key: Key, prefix: Key },
    /// The object is larger than the store's configured limit; nothing was written.
    #[error("store.too_large: {key}: {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge { key: Key, size: u64, limit: u64 },
    /// A path inside the store root is a symlink or another file type the store never creates.
    /// It is never followed: this is a system failure, not something a caller can retry away.
    #[error("store.escape: {what}: {}", path.display())]
    Escape { path: PathBuf, what: &'static str },
    /// The backend's IO failed.
    #[error("store.io: {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

fn describe_current(current: Option<&Version>) -> String {
    match current {
        Some(version) => format!("version {version}"),
        None => "absent".to_owned(),
    }
}

impl StoreError {
    /// The stable `namespace.snake_case` code, for the services' error tables.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::InvalidKey { .. } => "store.invalid_key",
            StoreError::AlreadyExists { .. } => "store.already_exists",
            StoreError::Conflict { .. } => "store.conflict",
            StoreError::KeyCollision { .. } => "store.key_collision",
            StoreError::CreateOnly { .. } => "store.create_only",
            StoreError::TooLarge { .. } => "store.too_large",
            StoreError::Escape { .. } => "store.escape",
            StoreError::Io { .. } => "store.io",
        }
    }

    /// True for failures of the system under the store (IO, a symlink planted in the root), as
    /// opposed to outcomes of the caller's request (exists, conflict, bad key, too large).
    pub fn is_system_failure(&self) -> bool {
        matches!(self, StoreError::Escape { .. } | StoreError::Io { .. })
    }

    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> StoreError {
        StoreError::Io {
            what: what.into(),
            source,
        }
    }
}
