//! A cheap test that rules a path form out before the never-path glob set runs. Every glob needs
//! some literal text in any path it matches (`**/.ssh/**` needs `.ssh`, `/etc/**` needs `/etc`,
//! `**/*.pem` needs `.pem`), so a form that holds none of those texts matches no glob, and most
//! strings of a call (free text, ordinary file names) are answered by one literal search instead
//! of the whole glob set. Owns reading the text a glob requires; must only ever answer "cannot
//! match" when no glob can: a glob in which no required text can be told turns the prefilter off.
// Parses configuration and untrusted input: no indexing, slicing or arithmetic that can panic
// (docs/limits.md, "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use regex::{Regex, RegexBuilder};

use super::MAX_PATTERN_PROGRAM;

/// Tells path forms no glob can match from those the glob set must decide.
#[derive(Debug, Default)]
pub(super) struct GlobPrefilter {
    /// The required text of every glob, as one alternation of literals (searched with the
    /// `regex` crate's literal engines); `None` when some glob requires no text the prefilter
    /// can tell, or there are no globs.
    needles: Option<Regex>,
}

impl GlobPrefilter {
    /// The prefilter of `globs` (glob syntax as `HardlineRules` compiles it: `\` escapes, `*`
    /// within a segment, `**` across segments).
    pub(super) fn new<'a>(globs: impl IntoIterator<Item = &'a str>) -> Self {
        let mut alternation = String::new();
        for glob in globs {
            let Some(literal) = required_literal(glob) else {
                return GlobPrefilter::default();
            };
            if !alternation.is_empty() {
                alternation.push('|');
            }
            alternation.push_str(&regex::escape(&literal));
        }
        if alternation.is_empty() {
            return GlobPrefilter::default();
        }
        // A set of literals too large to compile only costs the shortcut, never a rule.
        let needles = RegexBuilder::new(&alternation)
            .size_limit(MAX_PATTERN_PROGRAM)
            .dfa_size_limit(MAX_PATTERN_PROGRAM)
            .build()
            .ok();
        GlobPrefilter { needles }
    }

    /// Whether some glob could match `form`: `false` only when `form` holds none of the texts the
    /// globs require.
    pub(super) fn may_match(&self, form: &str) -> bool {
        self.needles.as_ref().is_none_or(|n| n.is_match(form))
    }

    /// Whether the prefilter can rule anything out (for tests).
    #[cfg(test)]
    pub(super) fn is_on(&self) -> bool {
        self.needles.is_some()
    }
}

/// The longest text that every path matching `glob` holds, or `None` when none can be told.
///
/// The glob is read up to its first class (`[…]`) or alternation (`{…}`), whose alternatives
/// require nothing in particular; before that, the runs of literal characters between wildcards
/// (`\x` is the literal `x`) are each required. A `/` next to a `*` is dropped from its run:
/// `**/` and `/**` match their slash only sometimes (`**/.ssh/**` matches `.ssh/id`).
pub(super) fn required_literal(glob: &str) -> Option<String> {
    let mut best = String::new();
    let mut run = String::new();
    let mut after_star = false;
    let mut chars = glob.chars();
    loop {
        let c = chars.next();
        let ends_run = match c {
            Some('\\') => match chars.next() {
                Some(escaped) => {
                    run.push(escaped);
                    false
                }
                None => true,
            },
            Some('*' | '?' | '[' | '{' | '}' | ',') | None => true,
            Some(other) => {
                run.push(other);
                false
            }
        };
        if !ends_run {
            continue;
        }
        let mut text = run.as_str();
        if after_star {
            text = text.trim_start_matches('/');
        }
        if c == Some('*') {
            text = text.trim_end_matches('/');
        }
        if text.len() > best.len() {
            best = text.to_owned();
        }
        run.clear();
        after_star = c == Some('*');
        if matches!(c, None | Some('[' | '{')) {
            break;
        }
    }
    (!best.is_empty()).then_some(best)
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]
mod tests {
    use globset::GlobBuilder;
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_glob_requires_its_longest_literal_run() {
        for (glob, want) in [
            ("/etc/**", Some("/etc")),
            ("**/.ssh/**", Some(".ssh")),
            ("**/*.pem", Some(".pem")),
            ("persist/secrets/**", Some("persist/secrets")),
            ("/var/run/docker.sock", Some("/var/run/docker.sock")),
            ("src/**/secret/*.key", Some("secret")),
            ("a/*/bcd", Some("bcd")),
            (r"a\*b/c", Some("a*b/c")),
            ("ab[xy]cdef", Some("ab")),
            ("key{s,}/abcdef", Some("key")),
            ("a?bc", Some("bc")),
            ("**", None),
            ("*", None),
            ("{a,b}", None),
            ("[ab]c", None),
            ("", None),
        ] {
            assert_eq!(required_literal(glob).as_deref(), want, "{glob}");
        }
    }

    #[test]
    fn one_glob_without_a_literal_turns_the_prefilter_off() {
        let on = GlobPrefilter::new(["/etc/**", "**/.ssh/**"]);
        assert!(on.is_on());
        assert!(!on.may_match("src/main.rs"));
        assert!(on.may_match(".ssh/id_rsa"));
        assert!(on.may_match("/etc"));
        let off = GlobPrefilter::new(["/etc/**", "**/*"]);
        assert!(!off.is_on());
        assert!(off.may_match("src/main.rs"));
        assert!(!GlobPrefilter::new([]).is_on());
    }

    fn glob_matches(glob: &str, path: &str) -> Option<bool> {
        let g = GlobBuilder::new(glob)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .ok()?;
        Some(g.compile_matcher().is_match(path))
    }

    proptest! {
        /// The prefilter never rules out a path a glob matches, whatever the glob's wildcards,
        /// classes, alternations and escapes.
        #[test]
        fn never_rules_out_a_match(
            glob in r"[a./*?\\{},\[\]!]{0,12}",
            path in r"[a./]{0,12}",
        ) {
            if let Some(true) = glob_matches(&glob, &path) {
                prop_assert!(GlobPrefilter::new([glob.as_str()]).may_match(&path), "{glob} {path}");
            }
        }

        /// The same over paths built to match: a glob's literal parts with wildcards filled in.
        #[test]
        fn never_rules_out_a_match_of_a_segmented_glob(
            parts in proptest::collection::vec(r"(\*\*|\*|\?|a|\.b|cd)", 1..5),
            fill in r"[a./]{0,6}",
        ) {
            let glob = parts.join("/");
            for path in [
                glob.replace("**", &fill).replace(['*', '?'], "a"),
                glob.replace("**/", "").replace("/**", "").replace(['*', '?'], "a"),
                format!("{fill}/{}", glob.replace("**/", "").replace(['*', '?'], "x")),
            ] {
                if let Some(true) = glob_matches(&glob, &path) {
                    prop_assert!(
                        GlobPrefilter::new([glob.as_str()]).may_match(&path),
                        "{glob} {path}"
                    );
                }
            }
        }
    }
}
