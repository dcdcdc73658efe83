//! The text search query parser and matcher (`normalize_query`, `Matcher`, `score_text`, `hunks`)
//! on an arbitrary query and text (the first line of the input is the query).
//!
//! Invariants: a normalised query has between 1 and `MAX_TERMS` distinct, non-empty terms that
//! all occur in its phrase; the prefilter answers like the automaton; a text has line hits
//! exactly when it matches, in increasing line order within the text's lines; scores are finite
//! and not negative; hunks are ordered and hold their hit lines.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolplane_text::query::MAX_TERMS;
use toolplane_text::{Matcher, hunks, line_count, normalize_query, score_text};

fuzz_target!(|data: &str| {
    let (raw, text) = data.split_once('\n').unwrap_or((data, ""));
    let Ok(query) = normalize_query(raw) else {
        return;
    };
    assert!(
        !query.terms.is_empty() && query.terms.len() <= MAX_TERMS,
        "{raw:?}"
    );
    for (i, t) in query.terms.iter().enumerate() {
        assert!(
            !t.is_empty() && query.phrase.contains(t.as_str()),
            "{raw:?}: {t:?}"
        );
        assert!(!query.terms[..i].contains(t), "{raw:?}: {t:?} twice");
    }
    let terms = query.terms.len();
    let matcher = Matcher::new(query);
    let bytes = text.as_bytes();
    assert_eq!(
        matcher.is_match_bytes(bytes),
        matcher.is_match_by_automaton(bytes),
        "prefilter and automaton disagree on {raw:?} in {text:?}"
    );
    let hits = matcher.line_hits(text);
    assert_eq!(
        !hits.is_empty(),
        matcher.is_match(text),
        "{raw:?} in {text:?}"
    );
    let total = line_count(text);
    for (i, h) in hits.iter().enumerate() {
        assert!(
            h.line >= 1 && h.line <= total.max(1),
            "{h:?} of {total} lines"
        );
        assert!(i == 0 || hits[i - 1].line < h.line);
        assert_eq!(h.term_counts.len(), terms);
    }
    let score = score_text(&matcher, text);
    assert!(score.is_finite() && score >= 0.0);
    assert_eq!(score > 0.0, !hits.is_empty());
    let grouped = hunks(&hits, 2, total, terms);
    let mut last_end = 0;
    for h in &grouped {
        assert!(
            h.start_line > last_end && h.start_line <= h.end_line,
            "{grouped:?}"
        );
        assert!(
            h.hit_lines
                .iter()
                .all(|l| (h.start_line..=h.end_line).contains(l))
        );
        last_end = h.end_line;
    }
});
