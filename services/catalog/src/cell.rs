//! Identifiers a request scopes itself by: the cell (tenant) and the actor.
//!
//! Owns their validation and how they become store keys. A cell id is a store key segment as is;
//! an actor id may be any printable text (an email, a UUID, a subject claim), so its key is the
//! hex SHA-256 of the id and the record keeps the id itself.

use std::fmt;

use sha2::{Digest, Sha256};
use toolplane_core::id::valid_segment;

use crate::error::CatalogError;

/// The cell a request without `cell_id` acts in.
pub const DEFAULT_CELL: &str = "default";
/// Longest actor id accepted, in bytes.
pub const MAX_ACTOR_ID_BYTES: usize = 256;

/// A validated cell id: lowercase letters, digits, `-`, `_`, `.`, at most 64 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CellId(String);

impl CellId {
    /// Parses a request's cell id; empty selects [`DEFAULT_CELL`].
    pub fn parse(s: &str) -> Result<CellId, CatalogError> {
        if s.is_empty() {
            return Ok(CellId(DEFAULT_CELL.to_owned()));
        }
        valid_segment(s).map_err(|why| {
            CatalogError::invalid_request(format!("cell id `{}`: {why}", shown(s)))
        })?;
        Ok(CellId(s.to_owned()))
    }

    pub fn default_cell() -> CellId {
        CellId(DEFAULT_CELL.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CellId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A validated actor id: 1 to 256 bytes, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ActorId(String);

impl ActorId {
    pub fn parse(s: &str) -> Result<ActorId, CatalogError> {
        if s.is_empty() {
            return Err(CatalogError::invalid_request("actor id is empty"));
        }
        if s.len() > MAX_ACTOR_ID_BYTES || s.chars().any(char::is_control) {
            return Err(CatalogError::invalid_request(format!(
                "actor id `{}` is over {MAX_ACTOR_ID_BYTES} bytes or has control characters",
                shown(s)
            )));
        }
        Ok(ActorId(s.to_owned()))
    }

    /// Parses an optional actor id: empty means none.
    pub fn parse_optional(s: &str) -> Result<Option<ActorId>, CatalogError> {
        if s.is_empty() {
            Ok(None)
        } else {
            ActorId::parse(s).map(Some)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The store key segment: hex SHA-256 of the id.
    pub fn key_segment(&self) -> String {
        let digest = Sha256::digest(self.0.as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A profile or host id as it appears in requests: the core's segment rule.
pub fn parse_segment(what: &str, s: &str) -> Result<String, CatalogError> {
    valid_segment(s)
        .map_err(|why| CatalogError::invalid_request(format!("{what} `{}`: {why}", shown(s))))?;
    Ok(s.to_owned())
}

/// At most 80 characters of user input, for error messages.
pub fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(80).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_default_and_validate() {
        assert_eq!(CellId::parse("").unwrap().as_str(), "default");
        assert_eq!(CellId::parse("team-a").unwrap().as_str(), "team-a");
        for bad in ["Team", "a/b", "..", ".x", &"x".repeat(65)] {
            assert_eq!(
                CellId::parse(bad).unwrap_err().code(),
                "catalog.invalid_request"
            );
        }
    }

    #[test]
    fn actors_hash_to_stable_keys() {
        let a = ActorId::parse("alice@example.com").unwrap();
        assert_eq!(a.key_segment().len(), 64);
        assert_eq!(
            a.key_segment(),
            ActorId::parse("alice@example.com").unwrap().key_segment()
        );
        assert!(ActorId::parse("a\nb").is_err());
        assert!(ActorId::parse_optional("").unwrap().is_none());
    }
}
