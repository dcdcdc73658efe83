//! The words of a string that Hardline reads as paths, for tools whose arguments toolplane cannot
//! read: each word that holds `/` or `\\`, or starts with `~` or `.` (`cat /etc/shadow`,
//! `cp ~/x .ssh/`). Owns how a string is split into words and the shortcut that leaves free text
//! unsplit; must never miss a word the split would find.
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use super::PathScope;

/// The path candidates in one string: the string itself and, for tools whose arguments toolplane
/// cannot read, each word of it that looks like a path (holds `/` or `\\`, or starts with `~` or
/// `.`). Free text rarely has such a word, so the string is split only when it could.
pub(super) fn path_words(s: &str, scope: PathScope) -> impl Iterator<Item = &str> {
    let words = (scope == PathScope::Everything && may_hold_path_word(s))
        .then(|| s.split(is_word_separator))
        .into_iter()
        .flatten()
        .filter(move |w| !w.is_empty() && *w != s)
        .filter(|w| {
            w.contains('/') || w.contains('\\') || w.starts_with('~') || w.starts_with('.')
        });
    std::iter::once(s).chain(words)
}

/// What separates the words of a string in which paths are looked for.
fn is_word_separator(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            ';' | '|' | '&' | '<' | '>' | '(' | ')' | '\'' | '"' | '`' | '=' | ','
        )
}

/// Whether some word of `s` could look like a path: `s` holds `/` or `\\`, or a `~` or `.` starts
/// it or follows a separator. Never false when [`path_words`] would find a word.
fn may_hold_path_word(s: &str) -> bool {
    let bytes = s.as_bytes();
    if bytes.iter().any(|b| matches!(b, b'/' | b'\\')) {
        return true;
    }
    // `~` and `.` are ASCII, so each position is a character boundary.
    bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| matches!(b, b'~' | b'.'))
        .any(|(at, _)| {
            s.get(..at)
                .and_then(|before| before.chars().next_back())
                .is_none_or(is_word_separator)
        })
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]
mod tests {
    use serde_json::{Map, Value, json};

    use super::super::{HardlineRules, PathScope};
    use super::*;

    fn rules(spec: Value) -> HardlineRules {
        serde_json::from_value(spec).unwrap()
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    /// Free text is split into words only when a word could look like a path; every separator,
    /// Unicode spaces included, still starts one.
    #[test]
    fn path_like_words_are_found_however_the_text_separates_them() {
        let r = rules(json!({"neverPaths": ["**/.env", "~*", "/etc/**"]}));
        let hit = |s: &str| {
            r.find_violation(&obj(json!({"q": s})), PathScope::Everything, "/srv/work")
                .is_some()
        };
        for s in [
            "load\u{00A0}.env now",
            "x=.env",
            "(.env)",
            "cat\u{3000}.env",
            "see ~backup",
            "a.b .env",
            "printf 'x' > /etc/hosts",
        ] {
            assert!(hit(s), "{s:?}");
        }
        for s in ["a.env", "the end.", "x~.env", "dot.env files", "etc/hosts"] {
            assert!(!hit(s), "{s:?}");
        }
    }

    proptest::proptest! {
        /// The shortcut never skips a string in which a path-like word would be found.
        #[test]
        fn the_word_shortcut_never_hides_a_word(s in "[a.~/\\\\ ,=;\u{00A0}\u{3000}é]{0,16}") {
            let words = s
                .split(is_word_separator)
                .filter(|w| !w.is_empty() && *w != s)
                .any(|w| w.contains(['/', '\\']) || w.starts_with(['~', '.']));
            proptest::prop_assert!(!words || may_hold_path_word(&s), "{s:?}");
        }
    }
}
