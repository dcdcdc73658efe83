//! Lexical path normalisation for governance: what a path-like string names once `.`, `..`, empty
//! segments and `\` separators are resolved, without asking any filesystem. Owns the one answer to
//! "which path does this string mean"; must never touch the filesystem or follow links (the
//! executor that opens the path is the one that can, and the workspace refuses such paths outright).
//!
//! Rules check what a path *means*, so `a/../secret` is `secret` and `/srv/work/../../etc/passwd`
//! is `/etc/passwd`. A relative path that climbs above its start keeps its leading `..` segments
//! (`../../etc/passwd`); joined to a working directory it resolves like any other. Percent-encoded
//! forms (`%2e%2e/`, `%2F`) are decoded as a second reading, since many tools decode them.
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

/// Most characters of a path a message repeats.
const SHOWN_CHARS: usize = 120;

/// A path as a refusal's message shows it: its first 120 characters, with `…` where it was cut,
/// so a message names what was refused without repeating a megabyte of a model's input.
pub fn shown(raw: &str) -> String {
    let mut out: String = raw.chars().take(SHOWN_CHARS).collect();
    if out.len() < raw.len() {
        out.push('…');
    }
    out
}

/// The readings of one path-like string a rule must consider: the string normalised as written
/// and, when it holds percent escapes, its decoded form normalised as well.
pub fn readings(raw: &str) -> Vec<String> {
    let mut out = vec![normalize(raw)];
    if raw.contains('%')
        && let Some(decoded) = percent_decode(raw)
    {
        let n = normalize(&decoded);
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// `raw` with `\` read as `/`, empty and `.` segments dropped and `..` segments applied. An
/// absolute path stays absolute and never climbs above `/`; a relative one keeps the `..` it cannot
/// apply. Never empty: the empty path and `.` are `.`.
pub fn normalize(raw: &str) -> String {
    let unified = raw.replace('\\', "/");
    let absolute = unified.starts_with('/');
    let mut segments: Vec<&str> = Vec::new();
    for seg in unified.split('/') {
        match seg {
            "" | "." => {}
            ".." => match segments.last() {
                Some(&last) if last != ".." => {
                    segments.pop();
                }
                _ if absolute => {}
                _ => segments.push(".."),
            },
            s => segments.push(s),
        }
    }
    let joined = segments.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// Whether `raw` is already what [`normalize`] makes of it and names no `..`: not empty, no `\`, no
/// empty, `.` or `..` segment, no trailing `/` (but `/` itself). Such a string can be matched as
/// written, without building its normalised copy.
pub fn is_normal(raw: &str) -> bool {
    if raw == "/" {
        return true;
    }
    let body = raw.strip_prefix('/').unwrap_or(raw);
    !body.is_empty()
        && !raw.contains('\\')
        && body.split('/').all(|seg| !matches!(seg, "" | "." | ".."))
}

/// `path` resolved against `work_dir` when it is relative and a working directory is known.
pub fn absolutize(path: &str, work_dir: &str) -> String {
    // `\` reads as `/` (see `normalize`), so `\etc\passwd` is absolute too.
    if path.starts_with(['/', '\\']) || work_dir.is_empty() {
        normalize(path)
    } else {
        normalize(&format!("{work_dir}/{path}"))
    }
}

/// Whether `path` is `base` or below it, segment-wise, both normalised.
pub fn is_under(path: &str, base: &str) -> bool {
    let base = normalize(base);
    if base == "/" || base == "." {
        return true;
    }
    path == base
        || path
            .strip_prefix(base.as_str())
            .is_some_and(|rest| rest.starts_with('/'))
}

/// `%XX` escapes decoded; `None` when the result is not UTF-8 (then only the raw reading counts).
fn percent_decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some((&first, after)) = rest.split_first() {
        let escaped = (first == b'%')
            .then(|| after.get(..2))
            .flatten()
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match escaped {
            Some(b) => {
                out.push(b);
                rest = after.get(2..).unwrap_or_default();
            }
            None => {
                out.push(first);
                rest = after;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn normalizes_as_a_shell_would_read_the_path() {
        for (raw, want) in [
            ("a/../secret", "secret"),
            ("./a//b/./c/", "a/b/c"),
            ("/srv/work/../../etc/passwd", "/etc/passwd"),
            ("/../../etc", "/etc"),
            ("../../etc/passwd", "../../etc/passwd"),
            ("a/../../b", "../b"),
            ("", "."),
            (".", "."),
            ("/", "/"),
            ("a\\..\\secret", "secret"),
        ] {
            assert_eq!(normalize(raw), want, "{raw}");
        }
        assert_eq!(absolutize("../../etc/passwd", "/srv/work"), "/etc/passwd");
        assert_eq!(absolutize("notes/a", "/srv/work/"), "/srv/work/notes/a");
        // Absolute with `\` as its separator: not joined to the working directory.
        assert_eq!(absolutize("\\etc\\passwd", "/srv/work"), "/etc/passwd");
        assert_eq!(
            readings("%2e%2e/%2e%2e/etc%2Fpasswd"),
            ["%2e%2e/%2e%2e/etc%2Fpasswd", "../../etc/passwd"]
        );
        assert_eq!(readings("100%"), ["100%"]);
    }

    #[test]
    fn strings_needing_no_normalisation_are_recognised() {
        for normal in [
            "/",
            "/etc/passwd",
            "a/b.txt",
            "notes",
            ".ssh/id",
            "a/.b",
            "x..y/z",
        ] {
            assert!(is_normal(normal), "{normal}");
        }
        for not in [
            "", ".", "./a", "a/./b", "a//b", "a/", "/etc/", "a/../b", "../a", "//x", "a\\b",
        ] {
            assert!(!is_normal(not), "{not}");
        }
    }

    #[test]
    fn under_is_segment_wise() {
        assert!(is_under("/srv/work/a", "/srv/work"));
        assert!(is_under("/srv/work", "/srv/work/"));
        assert!(!is_under("/srv/workshop/a", "/srv/work"));
        assert!(is_under("/anything", "/"));
    }

    proptest! {
        /// Normalising twice changes nothing, no `.` or empty segment survives, and `..` only
        /// ever leads a relative result.
        #[test]
        fn normalization_is_idempotent_and_clean(raw in "[a-z./\\\\%]{0,40}") {
            let once = normalize(&raw);
            prop_assert_eq!(normalize(&once), once.clone());
            let body = once.strip_prefix('/').unwrap_or(&once);
            if once != "." && once != "/" {
                let segs: Vec<&str> = body.split('/').collect();
                prop_assert!(segs.iter().all(|s| !s.is_empty() && *s != "."));
                let first_real = segs.iter().position(|s| *s != "..").unwrap_or(segs.len());
                prop_assert!(segs[first_real..].iter().all(|s| *s != ".."));
                prop_assert!(!once.starts_with('/') || first_real == 0);
            }
        }

        /// A string taken as normal needs no normalisation: matching it as written is matching
        /// what it means.
        #[test]
        fn a_normal_string_is_its_own_normal_form(raw in "[a-z./\\\\%]{0,40}") {
            if is_normal(&raw) {
                prop_assert_eq!(normalize(&raw), raw.clone());
                prop_assert!(!raw.split('/').any(|s| s == ".."));
            }
        }

        /// Whatever a path climbs through, an absolute result stays under `/` and never holds
        /// `..`: a rule on `/etc/**` sees `/etc/…` however it was spelled.
        #[test]
        fn climbing_cannot_hide_a_path(prefix in "(/[a-z]{1,3}){0,4}", ups in 0usize..6) {
            let raw = format!("{prefix}{}/etc/passwd", "/..".repeat(ups));
            let n = normalize(&format!("/{raw}"));
            prop_assert!(n.ends_with("/etc/passwd"));
            prop_assert!(!n.contains(".."));
        }
    }
}
