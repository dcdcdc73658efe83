//! Workspace path parsing (`paths::parse`), the one parser of a model-supplied workspace path.
//!
//! Invariants: an accepted path is relative, within the byte and segment limits, has no empty,
//! `.`, `..` or whitespace-padded segment, no `\`, `%` or control character, parses to itself
//! (also with a trailing `/` where folders are allowed), and is at or below its own root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolplane_workspace::paths::{self, MAX_PATH_BYTES, MAX_SEGMENT_BYTES, MAX_SEGMENTS};

fuzz_target!(|raw: &str| {
    for allow_dir_slash in [false, true] {
        check(raw, allow_dir_slash);
    }
});

fn check(raw: &str, allow_dir_slash: bool) {
    let Ok(path) = paths::parse(raw, allow_dir_slash) else {
        return;
    };
    let s = path.as_str();
    assert!(!s.is_empty() && s.len() <= MAX_PATH_BYTES, "{raw:?}");
    assert!(!s.starts_with('/') && !s.ends_with('/'), "{raw:?} -> {s:?}");
    assert!(
        !s.chars().any(|c| c == '\\' || c == '%' || c.is_control()),
        "{s:?}"
    );
    let segments: Vec<&str> = path.segments().collect();
    assert!(segments.len() <= MAX_SEGMENTS, "{s:?}");
    for seg in &segments {
        assert!(!seg.is_empty() && *seg != "." && *seg != "..", "{s:?}");
        assert!(
            seg.len() <= MAX_SEGMENT_BYTES && seg.trim() == *seg,
            "{s:?}"
        );
    }
    assert_eq!(paths::parse(s, false).ok().as_ref(), Some(&path));
    if s.len() < MAX_PATH_BYTES {
        assert_eq!(
            paths::parse(&format!("{s}/"), true).ok().as_ref(),
            Some(&path)
        );
    }
    assert!(path.is_at_or_below(path.root()));
}
