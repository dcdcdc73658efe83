//! Lexical path normalisation (`lexpath::normalize`, `readings`, `absolutize`, `is_under`) on
//! arbitrary path-like strings (the first line; the second is the working directory).
//!
//! Invariants: a normalised path normalises to itself, is never empty, keeps whether it is
//! absolute, holds no `\`, empty or `.` segment, and `..` only as leading segments of a relative
//! path; the first reading is the normalised string; an absolutised path is absolute when its
//! working directory is, and every path is under itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolplane_core::lexpath;

fuzz_target!(|data: &str| {
    let (raw, work_dir) = data.split_once('\n').unwrap_or((data, ""));
    let n = lexpath::normalize(raw);
    assert_eq!(lexpath::normalize(&n), n, "{raw:?}");
    assert!(!n.is_empty());
    assert!(!n.contains('\\'), "{raw:?} -> {n:?}");
    let absolute = raw.replace('\\', "/").starts_with('/');
    assert_eq!(n.starts_with('/'), absolute, "{raw:?} -> {n:?}");
    if n != "/" && n != "." {
        let body = n.strip_prefix('/').unwrap_or(&n);
        let segments: Vec<&str> = body.split('/').collect();
        assert!(
            segments.iter().all(|s| !s.is_empty() && *s != "."),
            "{raw:?} -> {n:?}"
        );
        let climbs = segments.iter().take_while(|s| **s == "..").count();
        assert!(
            segments[climbs..].iter().all(|s| *s != ".."),
            "{raw:?} -> {n:?}"
        );
        assert!(!absolute || climbs == 0, "{raw:?} -> {n:?}");
    }
    let readings = lexpath::readings(raw);
    assert_eq!(readings.first(), Some(&n));
    for r in &readings {
        assert_eq!(&lexpath::normalize(r), r);
    }
    let abs = lexpath::absolutize(raw, work_dir);
    if work_dir.replace('\\', "/").starts_with('/') || absolute {
        assert!(abs.starts_with('/'), "{raw:?} in {work_dir:?} -> {abs:?}");
    }
    assert!(lexpath::is_under(&n, &n), "{n:?}");
});
