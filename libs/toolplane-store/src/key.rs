//! Object keys. Owns the one grammar every backend accepts, so a key that works on the memory
//! backend also works on a filesystem and an object store; must never let a key through that
//! could name a path outside the store or collide with a backend's own files.

use std::{fmt, str::FromStr};

use crate::StoreError;

/// The longest key, in bytes (the S3 limit, so keys stay portable).
pub const MAX_KEY_BYTES: usize = 1024;
/// The longest segment, in bytes (`NAME_MAX` on common filesystems).
pub const MAX_SEGMENT_BYTES: usize = 255;
/// Segments starting with this are reserved for a backend's own files (temp files, locks).
pub const RESERVED_SEGMENT_PREFIX: &str = ".toolplane";

/// How much of a refused key an error message repeats.
const REFUSED_KEY_ECHO_CHARS: usize = 120;

/// A validated, `/`-separated relative path naming one object.
///
/// Rules: non-empty; at most [`MAX_KEY_BYTES`] bytes; segments are separated by single `/`, so no
/// leading, trailing or doubled `/`; no segment is `.` or `..`, longer than
/// [`MAX_SEGMENT_BYTES`], or starts with [`RESERVED_SEGMENT_PREFIX`]; no NUL, backslash or other
/// control character anywhere. Keys order by their UTF-8 bytes, which is the order `list` returns.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct Key(String);

impl serde::Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl Key {
    /// Validates `key`; a bad key is a [`StoreError::InvalidKey`], never a panic.
    pub fn new(key: impl Into<String>) -> Result<Key, StoreError> {
        let key = key.into();
        match violation(&key) {
            None => Ok(Key(key)),
            Some(reason) => Err(StoreError::InvalidKey {
                key: key.chars().take(REFUSED_KEY_ECHO_CHARS).collect(),
                reason,
            }),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The `/`-separated segments, first to last.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The last segment.
    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// The key one level up, if there is one.
    pub fn parent(&self) -> Option<Key> {
        self.0
            .rsplit_once('/')
            .map(|(parent, _)| Key(parent.to_owned()))
    }

    /// `self/child`; fails only when the result would be longer than [`MAX_KEY_BYTES`].
    pub fn join(&self, child: &Key) -> Result<Key, StoreError> {
        Key::new(format!("{}/{}", self.0, child.0))
    }

    /// True when `self` lies strictly below `prefix` (`a/b` is below `a`; `a` and `ab` are not).
    pub fn is_below(&self, prefix: &Key) -> bool {
        self.0.len() > prefix.0.len()
            && self.0.starts_with(&prefix.0)
            && self.0.as_bytes()[prefix.0.len()] == b'/'
    }

    /// True when `self` is `prefix` or lies below it.
    pub fn is_at_or_below(&self, prefix: &Key) -> bool {
        self == prefix || self.is_below(prefix)
    }

    /// The rest of `self` below `prefix`, if `self` lies strictly below it.
    pub fn strip_prefix(&self, prefix: &Key) -> Option<Key> {
        if self.is_below(prefix) {
            Some(Key(self.0[prefix.0.len() + 1..].to_owned()))
        } else {
            None
        }
    }

    /// Keys that are a proper prefix of `self` by whole segments, shortest first.
    pub fn ancestors(&self) -> impl Iterator<Item = &str> {
        self.0.match_indices('/').map(|(at, _)| &self.0[..at])
    }
}

/// The first rule `key` breaks, if any.
fn violation(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        return Some("key is empty");
    }
    if key.len() > MAX_KEY_BYTES {
        return Some("key is longer than 1024 bytes");
    }
    if key.starts_with('/') {
        return Some("key starts with '/'");
    }
    if key.contains('\\') {
        return Some("key contains a backslash");
    }
    if key.contains('\0') {
        return Some("key contains NUL");
    }
    if key.chars().any(char::is_control) {
        return Some("key contains a control character");
    }
    for segment in key.split('/') {
        if segment.is_empty() {
            return Some("key has an empty segment");
        }
        if segment == "." || segment == ".." {
            return Some("key has a '.' or '..' segment");
        }
        if segment.len() > MAX_SEGMENT_BYTES {
            return Some("key has a segment longer than 255 bytes");
        }
        if segment.starts_with(RESERVED_SEGMENT_PREFIX) {
            return Some("key has a segment reserved for the store's own files");
        }
    }
    None
}

/// True when `name` could be one segment of a valid key (backends use it to skip foreign files).
pub(crate) fn is_valid_segment(name: &str) -> bool {
    !name.contains('/') && violation(name).is_none()
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?})", self.0)
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for Key {
    type Err = StoreError;

    fn from_str(key: &str) -> Result<Key, StoreError> {
        Key::new(key)
    }
}

impl TryFrom<&str> for Key {
    type Error = StoreError;

    fn try_from(key: &str) -> Result<Key, StoreError> {
        Key::new(key)
    }
}

impl TryFrom<String> for Key {
    type Error = StoreError;

    fn try_from(key: String) -> Result<Key, StoreError> {
        Key::new(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_every_rule_with_a_typed_error() {
        let long_segment = "x".repeat(MAX_SEGMENT_BYTES + 1);
        let long_key = ["y"; 600].join("/");
        let cases: &[(&str, &str)] = &[
            ("", "key is empty"),
            ("/a", "key starts with '/'"),
            ("a/", "key has an empty segment"),
            ("a//b", "key has an empty segment"),
            (".", "key has a '.' or '..' segment"),
            ("a/../b", "key has a '.' or '..' segment"),
            ("a/./b", "key has a '.' or '..' segment"),
            ("a\\b", "key contains a backslash"),
            ("a\0b", "key contains NUL"),
            ("a\nb", "key contains a control character"),
            (&long_segment, "key has a segment longer than 255 bytes"),
            (&long_key, "key is longer than 1024 bytes"),
            (
                ".toolplane/tmp",
                "key has a segment reserved for the store's own files",
            ),
            (
                "a/.toolplane-x",
                "key has a segment reserved for the store's own files",
            ),
        ];
        for (key, want) in cases {
            match Key::new(*key) {
                Err(StoreError::InvalidKey { reason, .. }) => assert_eq!(reason, *want, "{key:?}"),
                other => panic!("{key:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn accepts_ordinary_paths() {
        for key in [
            "a",
            "a/b/c",
            "runs/r-1/journal/000001",
            "..a",
            "a..",
            ".hidden",
            "ünï/cödé",
        ] {
            assert_eq!(Key::new(key).unwrap().as_str(), key);
        }
        let max = "z".repeat(MAX_SEGMENT_BYTES);
        assert!(Key::new(max).is_ok());
    }

    #[test]
    fn error_message_starts_with_code_and_truncates_the_key() {
        let err = Key::new(format!("/{}", "k".repeat(5000))).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("store.invalid_key: "), "{text}");
        assert!(text.len() < 300, "{text}");
        assert_eq!(err.code(), "store.invalid_key");
    }

    #[test]
    fn prefix_relations_are_by_whole_segments() {
        let a = Key::new("a").unwrap();
        let ab = Key::new("a/b").unwrap();
        let a_b = Key::new("ab").unwrap();
        assert!(ab.is_below(&a));
        assert!(!a_b.is_below(&a));
        assert!(!a.is_below(&a));
        assert!(a.is_at_or_below(&a));
        assert_eq!(ab.strip_prefix(&a), Some(Key::new("b").unwrap()));
        assert_eq!(a_b.strip_prefix(&a), None);
        assert_eq!(ab.parent(), Some(a.clone()));
        assert_eq!(a.parent(), None);
        assert_eq!(
            Key::new("x/y/z").unwrap().ancestors().collect::<Vec<_>>(),
            ["x", "x/y"]
        );
        assert_eq!(ab.name(), "b");
    }
}
