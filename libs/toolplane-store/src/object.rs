//! Stored values and their versions. Owns how a version is derived from bytes (hex SHA-256) and
//! what a compare-and-swap precondition means; must never depend on a backend.

use std::fmt;

use sha2::{Digest, Sha256};

/// An object's version: the lowercase hex SHA-256 of its bytes on the local backends.
///
/// Treat it as an opaque tag: compare with `==`, pass back in a [`Precondition`]. Equal bytes have
/// equal versions, so a value that returns to earlier bytes returns to the earlier version; for
/// state that is the whole point (the state *is* the same).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version(String);

impl Version {
    /// The version of `bytes`: hex SHA-256.
    pub fn of(bytes: &[u8]) -> Version {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let digest = Sha256::digest(bytes);
        let mut hex = String::with_capacity(digest.len() * 2);
        for byte in digest.iter() {
            hex.push(char::from(HEX[usize::from(byte >> 4)]));
            hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        Version(hex)
    }

    /// A version read back from somewhere (a record, a request). Not validated: a version that no
    /// backend produced simply never matches.
    pub fn new(tag: impl Into<String>) -> Version {
        Version(tag.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Version({})", self.0)
    }
}

/// What `put_cas` requires of the current state before it writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// The key must not exist.
    Absent,
    /// The key must exist with exactly this version.
    Version(Version),
}

impl Precondition {
    /// Whether `current` satisfies this precondition.
    pub fn holds_for(&self, current: Option<&Version>) -> bool {
        match (self, current) {
            (Precondition::Absent, None) => true,
            (Precondition::Version(want), Some(have)) => want == have,
            _ => false,
        }
    }
}

impl fmt::Display for Precondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Precondition::Absent => f.write_str("absent"),
            Precondition::Version(version) => write!(f, "version {version}"),
        }
    }
}

/// An object's bytes with the version they had when read.
#[derive(Clone, PartialEq, Eq)]
pub struct Object {
    pub bytes: Vec<u8>,
    pub version: Version,
}

impl Object {
    /// Wraps `bytes` with their version.
    pub fn new(bytes: Vec<u8>) -> Object {
        let version = Version::of(&bytes);
        Object { bytes, version }
    }
}

impl fmt::Debug for Object {
    // Objects can be megabytes; a debug dump shows the size, not the bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object")
            .field("len", &self.bytes.len())
            .field("version", &self.version)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_is_hex_sha256() {
        assert_eq!(
            Version::of(b"").as_str(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            Version::of(b"abc").as_str(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn preconditions() {
        let v = Version::of(b"x");
        assert!(Precondition::Absent.holds_for(None));
        assert!(!Precondition::Absent.holds_for(Some(&v)));
        assert!(Precondition::Version(v.clone()).holds_for(Some(&v)));
        assert!(!Precondition::Version(v.clone()).holds_for(Some(&Version::of(b"y"))));
        assert!(!Precondition::Version(v).holds_for(None));
    }
}
