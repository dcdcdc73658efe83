//! What counts as text a model may read, and truncation that never splits a character. Must never
//! guess an encoding: anything that is not UTF-8 (or holds NUL bytes, the mark of a binary file) is
//! refused, so the caller can answer with a clear "not text" error.

/// Why bytes are not model-readable text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotText {
    /// Not valid UTF-8; `valid_up_to` bytes were.
    InvalidUtf8 { valid_up_to: usize },
    /// Holds a NUL byte at this offset.
    NulByte { offset: usize },
}

impl std::fmt::Display for NotText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotText::InvalidUtf8 { valid_up_to } => {
                write!(f, "not valid utf-8 after byte {valid_up_to}")
            }
            NotText::NulByte { offset } => write!(f, "holds a nul byte at offset {offset}"),
        }
    }
}

/// The bytes as text, if they are valid UTF-8 without NUL bytes.
pub fn check_text(bytes: &[u8]) -> Result<&str, NotText> {
    if let Some(offset) = memchr::memchr(0, bytes) {
        return Err(NotText::NulByte { offset });
    }
    std::str::from_utf8(bytes).map_err(|e| NotText::InvalidUtf8 {
        valid_up_to: e.valid_up_to(),
    })
}

/// Unicode scalar values in `text`: the unit of every character budget (never tokens, never
/// bytes).
pub fn char_len(text: &str) -> usize {
    text.chars().count()
}

/// The longest prefix of `text` with at most `max_chars` characters, and whether it was cut.
pub fn truncate_chars(text: &str, max_chars: usize) -> (&str, bool) {
    match text.char_indices().nth(max_chars) {
        Some((byte, _)) => (&text[..byte], true),
        None => (text, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_binary_and_invalid_utf8() {
        assert_eq!(check_text(b"ok\n"), Ok("ok\n"));
        assert_eq!(check_text(b"a\0b"), Err(NotText::NulByte { offset: 1 }));
        assert_eq!(
            check_text(&[b'a', 0xff, b'b']),
            Err(NotText::InvalidUtf8 { valid_up_to: 1 })
        );
    }

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate_chars("héllo", 2), ("hé", true));
        assert_eq!(truncate_chars("日本語", 3), ("日本語", false));
        assert_eq!(char_len("日本語"), 3);
    }
}
