//! Page tokens: opaque to callers, validated on the way back (docs/errors.md, "Page tokens").
//!
//! A token is the unpadded base64url of `v1\n<listing>\n<cursor>`: the format version, the
//! listing that issued it (`runtime.runs`, `catalog.tools`, …) and the service's own cursor. A
//! token that is not canonical base64url, is over [`MAX_TOKEN_LEN`], names another version or
//! another listing is refused as [`CODE`]; the service then checks its cursor.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The stable code of a refused page token (an `INVALID_ARGUMENT` naming field `page_token`).
pub const CODE: &str = "request.invalid_page_token";

/// The longest token accepted.
pub const MAX_TOKEN_LEN: usize = 2048;

const VERSION: &str = "v1";

/// A token this listing did not issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPageToken {
    pub listing: &'static str,
}

impl std::fmt::Display for InvalidPageToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the page token was not issued by {}", self.listing)
    }
}

impl std::error::Error for InvalidPageToken {}

/// The token for `cursor` in `listing`.
pub fn encode(listing: &str, cursor: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{VERSION}\n{listing}\n{cursor}"))
}

/// The cursor of a token `listing` issued; `None` for the empty token (the first page).
pub fn decode(listing: &'static str, token: &str) -> Result<Option<String>, InvalidPageToken> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = InvalidPageToken { listing };
    if token.len() > MAX_TOKEN_LEN {
        return Err(bad);
    }
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad.clone())?;
    let text = String::from_utf8(bytes).map_err(|_| bad.clone())?;
    let mut parts = text.splitn(3, '\n');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(VERSION), Some(issuer), Some(cursor)) if issuer == listing => {
            Ok(Some(cursor.to_owned()))
        }
        _ => Err(bad),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_token_round_trips_only_in_its_own_listing() {
        let token = encode("runtime.runs", "50");
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_eq!(
            decode("runtime.runs", &token).unwrap().as_deref(),
            Some("50")
        );
        assert!(decode("runtime.invocations", &token).is_err());
        assert_eq!(decode("runtime.runs", "").unwrap(), None);
    }

    #[test]
    fn tokens_not_issued_here_are_refused() {
        for token in [
            "50",
            "not a token",
            "=====",
            &URL_SAFE_NO_PAD.encode("v2\nruntime.runs\n50"),
            &URL_SAFE_NO_PAD.encode("runtime.runs\n50"),
            &URL_SAFE_NO_PAD.encode([0xff, 0xfe]),
            &"A".repeat(MAX_TOKEN_LEN + 1),
        ] {
            assert!(decode("runtime.runs", token).is_err(), "{token:?}");
        }
    }
}
