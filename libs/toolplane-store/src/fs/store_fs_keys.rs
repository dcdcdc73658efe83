//! How [`super::StoreFs`] names things in its store: the two key spaces, a path below the root as
//! its stored names, the escape of names the key grammar refuses, and store errors as the
//! `io::ErrorKind`s the `Fs` contract's callers branch on. Owns the key layout (see the module docs
//! of `store_fs`); must never produce a key outside `f/` and `d/`.

use std::{ffi::OsStr, io};

use crate::{Key, RESERVED_SEGMENT_PREFIX, StoreError};

/// Prefixes a stored name that starts with itself or with the reserved prefix.
const ESCAPE: char = '%';

/// The two key spaces.
#[derive(Clone, Copy)]
pub(super) enum Space {
    Files,
    Dirs,
}

impl Space {
    pub(super) fn tag(self) -> &'static str {
        match self {
            Space::Files => "f",
            Space::Dirs => "d",
        }
    }
}

/// A path below the root, as its stored (escaped) names.
pub(super) struct Node {
    pub(super) names: Vec<String>,
}

impl Node {
    pub(super) fn is_root(&self) -> bool {
        self.names.is_empty()
    }

    pub(super) fn key_at(space: Space, names: &[String]) -> io::Result<Key> {
        let key = if names.is_empty() {
            format!("{}/0", space.tag())
        } else {
            format!("{}/{}/{}", space.tag(), names.len(), names.join("/"))
        };
        Key::new(key).map_err(|e| match e {
            StoreError::InvalidKey { reason, .. } => invalid_input(format!(
                "the path can not be stored ({reason}): it is too long or has a refused name"
            )),
            other => store_err(other),
        })
    }

    pub(super) fn key(&self, space: Space) -> io::Result<Key> {
        Node::key_at(space, &self.names)
    }

    /// The key of the parent folder, or `None` for a child of the root (which always exists).
    pub(super) fn parent_dir_key(&self) -> io::Result<Option<Key>> {
        match self.names.split_last() {
            Some((_, parent)) if !parent.is_empty() => Node::key_at(Space::Dirs, parent).map(Some),
            _ => Ok(None),
        }
    }

    /// The prefix whose keys are exactly this folder's children in `space`.
    pub(super) fn children(&self, space: Space) -> io::Result<Key> {
        let key = if self.names.is_empty() {
            format!("{}/1", space.tag())
        } else {
            format!(
                "{}/{}/{}",
                space.tag(),
                self.names.len() + 1,
                self.names.join("/")
            )
        };
        Key::new(key).map_err(|_| invalid_input("the path is too long to be stored"))
    }
}

pub(super) fn invalid_input(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.into())
}

/// A store failure as the `io::ErrorKind` the `Fs` contract's callers branch on.
pub(super) fn store_err(e: StoreError) -> io::Error {
    // A refused key is the caller's path to shorten: said without the key, which would show the
    // store's layout (and reach a model through the workspace's tools).
    if let StoreError::InvalidKey { reason, .. } = &e {
        return invalid_input(format!("the path can not be stored ({reason})"));
    }
    let kind = match &e {
        StoreError::AlreadyExists { .. } => io::ErrorKind::AlreadyExists,
        StoreError::TooLarge { .. } => io::ErrorKind::FileTooLarge,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

/// The stored form of one path name.
pub(super) fn encode(name: &OsStr) -> io::Result<String> {
    let name = name
        .to_str()
        .ok_or_else(|| invalid_input("a name that is not UTF-8 can not be stored"))?;
    if name.starts_with(ESCAPE) || name.starts_with(RESERVED_SEGMENT_PREFIX) {
        Ok(format!("{ESCAPE}{name}"))
    } else {
        Ok(name.to_owned())
    }
}

pub(super) fn decode(name: &str) -> &str {
    name.strip_prefix(ESCAPE).unwrap_or(name)
}
