//! The one query normalisation of `workspace.search_files`, `chat.search` and `skill.search`,
//! the matcher that finds a query's terms in text, and the score that ranks hits.
//! Owns the rules; must never know where the text came from.
//!
//! Normalisation: a query holding letters, digits or `_` is split into lowercase word terms (runs
//! of letters, digits and `_`); a non-empty query whose split yields no term (pure punctuation or
//! symbols, `=>`, `::`, `#`) keeps its trimmed text and takes its whitespace-separated pieces as
//! literal terms. So symbol fragments are searchable while word queries keep their recall and
//! ranking. Matching folds ASCII case only; other scripts match as written (lowercased).
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

/// Most terms a query keeps (extra terms are ignored, in order).
pub const MAX_TERMS: usize = 32;
/// Most bytes of query text considered.
pub const MAX_QUERY_BYTES: usize = 1024;

/// Why a query is unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryError {
    /// Empty or only whitespace.
    Empty,
    /// Longer than [`MAX_QUERY_BYTES`].
    TooLong { bytes: usize },
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueryError::Empty => f.write_str("query is empty"),
            QueryError::TooLong { bytes } => write!(
                f,
                "query is {bytes} bytes, more than the limit of {MAX_QUERY_BYTES}"
            ),
        }
    }
}

/// A normalised query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The trimmed query, lowercased: a hit on it as a whole scores a phrase bonus.
    pub phrase: String,
    /// Distinct terms, lowercased, in first-seen order.
    pub terms: Vec<String>,
    /// The terms are literal pieces of a symbol-only query rather than words.
    pub literal: bool,
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Normalises a model's query.
pub fn normalize_query(raw: &str) -> Result<Query, QueryError> {
    if raw.len() > MAX_QUERY_BYTES {
        return Err(QueryError::TooLong { bytes: raw.len() });
    }
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(QueryError::Empty);
    }
    let phrase = trimmed.to_lowercase();
    let mut terms: Vec<String> = Vec::new();
    for word in phrase.split(|c: char| !is_word_char(c)) {
        if !word.is_empty() && !terms.iter().any(|t| t == word) {
            terms.push(word.to_owned());
        }
    }
    let literal = terms.is_empty();
    if literal {
        for piece in phrase.split_whitespace() {
            if !terms.iter().any(|t| t == piece) {
                terms.push(piece.to_owned());
            }
        }
    }
    terms.truncate(MAX_TERMS);
    Ok(Query {
        phrase,
        terms,
        literal,
    })
}

/// Finds a query's terms (and its phrase) in text; build once per search, use on every file.
#[derive(Debug, Clone)]
pub struct Matcher {
    query: Query,
    /// Pattern `i < terms.len()` is term `i`; the last pattern, when present, is the phrase.
    /// `None` only if the automaton could not be built (far beyond MAX_TERMS patterns); it then
    /// matches nothing rather than panicking.
    automaton: Option<AhoCorasick>,
    phrase_pattern: Option<usize>,
    /// A faster answer to "does any term occur" (see [`Prefilter`]); `None` when the terms do not
    /// suit it, and the automaton answers.
    prefilter: Option<Prefilter>,
}

/// Most SIMD patterns the prefilter takes (case variants of the terms' prefixes).
const PREFILTER_PATTERNS: usize = 64;
/// Bytes of each term's prefix the prefilter looks for.
const PREFILTER_PREFIX: usize = 3;

/// Whether any term occurs, answered with a SIMD (Teddy) search for the ASCII case variants of the
/// terms' first bytes and a check of the whole term at each candidate. Case-insensitive search in
/// the automaton can only look for a term's first byte, which common letters make slow; the
/// prefixes' variants are few and selective. The answer is the automaton's: a term occurs at a
/// position exactly when its case-folded bytes are there (ASCII folding only), and every phrase
/// holds its terms, so looking for the terms alone suffices.
#[derive(Debug, Clone)]
struct Prefilter {
    searcher: aho_corasick::packed::Searcher,
    /// Per pattern: the terms (bytes) whose prefix it is.
    owners: Vec<Vec<usize>>,
    terms: Vec<Vec<u8>>,
}

impl Prefilter {
    fn new(terms: &[String]) -> Option<Prefilter> {
        // One prefix length for all terms, so two patterns can never both match at a position
        // (the searcher reports one pattern per position).
        let len = terms
            .iter()
            .map(|t| t.len().min(PREFILTER_PREFIX))
            .min()
            .filter(|&n| n > 0)?;
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut owners: Vec<Vec<usize>> = Vec::new();
        for (i, term) in terms.iter().enumerate() {
            let prefix = term.as_bytes().get(..len)?;
            let mut variants: Vec<Vec<u8>> = vec![Vec::with_capacity(len)];
            for &b in prefix {
                let cases: &[u8] = if b.is_ascii_alphabetic() {
                    &[b.to_ascii_lowercase(), b.to_ascii_uppercase()]
                } else {
                    std::slice::from_ref(&b)
                };
                variants = variants
                    .into_iter()
                    .flat_map(|v| {
                        cases.iter().map(move |&c| {
                            let mut next = v.clone();
                            next.push(c);
                            next
                        })
                    })
                    .collect();
            }
            for variant in variants {
                match patterns.iter().position(|p| *p == variant) {
                    Some(at) => owners.get_mut(at)?.push(i),
                    None => {
                        patterns.push(variant);
                        owners.push(vec![i]);
                    }
                }
            }
            if patterns.len() > PREFILTER_PATTERNS {
                return None;
            }
        }
        let mut builder = aho_corasick::packed::Config::new()
            .match_kind(aho_corasick::packed::MatchKind::LeftmostFirst)
            .builder();
        for p in &patterns {
            builder.add(p);
        }
        Some(Prefilter {
            searcher: builder.build()?,
            owners,
            terms: terms.iter().map(|t| t.as_bytes().to_vec()).collect(),
        })
    }

    fn is_match(&self, haystack: &[u8]) -> bool {
        let mut at = 0;
        while at < haystack.len() {
            let Some(m) = self
                .searcher
                .find_in(haystack, aho_corasick::Span::from(at..haystack.len()))
            else {
                return false;
            };
            let start = m.start();
            let found = self
                .owners
                .get(m.pattern().as_usize())
                .into_iter()
                .flatten()
                .filter_map(|&t| self.terms.get(t))
                .any(|term| {
                    haystack
                        .get(start..start.saturating_add(term.len()))
                        .is_some_and(|h| h.eq_ignore_ascii_case(term))
                });
            if found {
                return true;
            }
            at = start.saturating_add(1);
        }
        false
    }
}

/// One line with hits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineHit {
    /// 1-based line number.
    pub line: u64,
    /// Occurrences of each term on the line (indexed like `Query::terms`).
    pub term_counts: Vec<u32>,
    /// The whole phrase occurs on the line.
    pub phrase: bool,
}

impl Matcher {
    /// Builds the matcher for `query`.
    pub fn new(query: Query) -> Matcher {
        let mut patterns: Vec<&str> = query.terms.iter().map(String::as_str).collect();
        let phrase_pattern = (query.terms.len() > 1 || query.terms.first() != Some(&query.phrase))
            .then_some(patterns.len());
        if phrase_pattern.is_some() {
            patterns.push(&query.phrase);
        }
        // Overlapping search so a phrase hit does not hide the term hits inside it; the
        // patterns are few and short, so the standard semantics stay cheap.
        let automaton = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(&patterns);
        Matcher {
            prefilter: Prefilter::new(&query.terms),
            query,
            automaton: automaton.ok(),
            phrase_pattern,
        }
    }

    /// The normalised query.
    pub fn query(&self) -> &Query {
        &self.query
    }

    /// Whether `text` holds any term at all (a quick filter before [`Matcher::line_hits`]).
    pub fn is_match(&self, text: &str) -> bool {
        self.is_match_bytes(text.as_bytes())
    }

    /// [`Matcher::is_match`] on raw bytes, before they are known to be text (a scan's
    /// prefilter); the same answer as on the decoded text.
    pub fn is_match_bytes(&self, bytes: &[u8]) -> bool {
        let Some(automaton) = &self.automaton else {
            return false;
        };
        match &self.prefilter {
            Some(prefilter) => prefilter.is_match(bytes),
            None => automaton.is_match(bytes),
        }
    }

    /// [`Matcher::is_match_bytes`] by the automaton alone (the prefilter's reference).
    pub fn is_match_by_automaton(&self, bytes: &[u8]) -> bool {
        self.automaton.as_ref().is_some_and(|a| a.is_match(bytes))
    }

    /// Every line of `text` holding a term, in line order.
    pub fn line_hits(&self, text: &str) -> Vec<LineHit> {
        let bytes = text.as_bytes();
        let mut hits: Vec<LineHit> = Vec::new();
        let Some(automaton) = &self.automaton else {
            return hits;
        };
        let mut line = 1u64;
        let mut counted_to = 0usize;
        for m in automaton.find_overlapping_iter(text) {
            let start = m.start();
            if start > counted_to {
                let newlines = bytes
                    .get(counted_to..start)
                    .map_or(0, |b| memchr::memchr_iter(b'\n', b).count());
                line = line.saturating_add(newlines as u64);
                counted_to = start;
            }
            if hits.last().map(|h| h.line) != Some(line) {
                hits.push(LineHit {
                    line,
                    term_counts: vec![0; self.query.terms.len()],
                    phrase: false,
                });
            }
            if let Some(hit) = hits.last_mut() {
                let pattern = m.pattern().as_usize();
                if Some(pattern) == self.phrase_pattern {
                    hit.phrase = true;
                } else if let Some(count) = hit.term_counts.get_mut(pattern) {
                    *count = count.saturating_add(1);
                }
            }
        }
        hits
    }
}

/// The score of a stretch of text whose term occurrences are `term_counts`: matched terms weigh
/// most (so covering more of the query wins), repetitions add with diminishing returns, and the
/// whole phrase adds a bonus. Zero when nothing matched.
pub fn score_counts(term_counts: &[u32], phrase: bool) -> f64 {
    let total = term_counts.len().max(1) as f64;
    let mut matched = 0usize;
    let mut frequency = 0.0;
    for &count in term_counts {
        if count > 0 {
            matched = matched.saturating_add(1);
            frequency += (1.0 + f64::from(count)).ln();
        }
    }
    if matched == 0 && !phrase {
        return 0.0;
    }
    let coverage = matched as f64 / total;
    let score = 10.0 * coverage + frequency + if phrase { 5.0 } else { 0.0 };
    (score * 1000.0).round() / 1000.0
}

/// Scores a whole text (a chat message, a short entry) against the matcher.
pub fn score_text(matcher: &Matcher, text: &str) -> f64 {
    let hits = matcher.line_hits(text);
    let (counts, phrase) = merge(&hits, matcher.query().terms.len());
    score_counts(&counts, phrase)
}

fn merge(hits: &[LineHit], terms: usize) -> (Vec<u32>, bool) {
    let mut counts = vec![0u32; terms];
    let mut phrase = false;
    for hit in hits {
        for (total, count) in counts.iter_mut().zip(&hit.term_counts) {
            *total = total.saturating_add(*count);
        }
        phrase |= hit.phrase;
    }
    (counts, phrase)
}

/// A run of nearby hit lines with context, as one search result.
#[derive(Debug, Clone, PartialEq)]
pub struct Hunk {
    /// 1-based first line (context included).
    pub start_line: u64,
    /// 1-based last line, inclusive (context included).
    pub end_line: u64,
    /// Lines of the hunk that hold hits.
    pub hit_lines: Vec<u64>,
    /// Score of the hunk.
    pub score: f64,
}

/// Groups hit lines into hunks: lines whose context windows (`context` lines either side) touch
/// join one hunk. `total_lines` bounds the context.
pub fn hunks(hits: &[LineHit], context: u64, total_lines: u64, terms: usize) -> Vec<Hunk> {
    let mut out: Vec<Hunk> = Vec::new();
    let mut members: Vec<&LineHit> = Vec::new();
    let flush = |members: &mut Vec<&LineHit>, out: &mut Vec<Hunk>| {
        if let (Some(first), Some(last)) = (members.first(), members.last()) {
            let owned: Vec<LineHit> = members.iter().map(|h| (*h).clone()).collect();
            let (counts, phrase) = merge(&owned, terms);
            out.push(Hunk {
                start_line: first.line.saturating_sub(context).max(1),
                end_line: last.line.saturating_add(context).min(total_lines.max(1)),
                hit_lines: members.iter().map(|h| h.line).collect(),
                score: score_counts(&counts, phrase),
            });
        }
        members.clear();
    };
    for hit in hits {
        if let Some(last) = members.last()
            && hit.line
                > last
                    .line
                    .saturating_add(context.saturating_mul(2))
                    .saturating_add(1)
        {
            flush(&mut members, &mut out);
        }
        members.push(hit);
    }
    flush(&mut members, &mut out);
    out
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn word_queries_split_into_terms() {
        let q = normalize_query("  Foo bar, foo_baz! ").unwrap();
        assert_eq!(q.terms, vec!["foo", "bar", "foo_baz"]);
        assert!(!q.literal);
        assert_eq!(q.phrase, "foo bar, foo_baz!");
    }

    #[test]
    fn symbol_queries_become_literal_terms() {
        let q = normalize_query(" => :: ").unwrap();
        assert_eq!(q.terms, vec!["=>", "::"]);
        assert!(q.literal);
        assert_eq!(normalize_query("   "), Err(QueryError::Empty));
        assert!(matches!(
            normalize_query(&"x".repeat(2000)),
            Err(QueryError::TooLong { .. })
        ));
    }

    #[test]
    fn finds_lines_and_ranks_coverage_first() {
        let m = Matcher::new(normalize_query("alpha beta").unwrap());
        let text = "nothing\nALPHA here\nalpha beta together\nbeta\n";
        let hits = m.line_hits(text);
        assert_eq!(
            hits.iter().map(|h| h.line).collect::<Vec<_>>(),
            vec![2, 3, 4]
        );
        assert!(hits[1].phrase);
        let one = score_counts(&hits[0].term_counts, hits[0].phrase);
        let both = score_counts(&hits[1].term_counts, hits[1].phrase);
        assert!(both > one, "{both} > {one}");
        let hunks = hunks(&hits, 0, 4, 2);
        assert_eq!(hunks.len(), 1, "adjacent lines join");
        let apart = hunks_of(&m, "alpha\n\n\n\n\nbeta\n", 1);
        assert_eq!(apart.len(), 2);
        assert_eq!((apart[0].start_line, apart[0].end_line), (1, 2));
    }

    fn hunks_of(m: &Matcher, text: &str, context: u64) -> Vec<Hunk> {
        hunks(
            &m.line_hits(text),
            context,
            crate::line_count(text),
            m.query().terms.len(),
        )
    }

    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn word_queries_get_the_simd_prefilter() {
        for q in ["quixotic", "alpha beta", "=> ab"] {
            let m = Matcher::new(normalize_query(q).unwrap());
            assert!(m.prefilter.is_some(), "{q}");
        }
        let m = Matcher::new(normalize_query("quixotic").unwrap());
        let mut text = "quartz quick quixoti ".repeat(200);
        assert!(!m.is_match(&text));
        text.push_str("QuIxOtIc");
        assert!(m.is_match(&text));
    }

    #[test]
    fn symbol_fragments_are_found() {
        let m = Matcher::new(normalize_query("=>").unwrap());
        assert_eq!(m.line_hits("a\nx => y\n")[0].line, 2);
        assert!(score_text(&m, "x => y") > 0.0);
        assert_eq!(score_text(&m, "nothing"), 0.0);
    }

    proptest! {
        // The prefilter answers exactly as the automaton, whatever the case, the bytes and the
        // terms (shared prefixes, short terms, symbols, non-ASCII).
        #[test]
        fn prefilter_agrees_with_the_automaton(
            text in proptest::collection::vec(prop_oneof![
                Just(b'a'), Just(b'A'), Just(b'b'), Just(b'B'), Just(b'c'), Just(b'='), Just(b'>'),
                Just(b' '), Just(b'\n'), Just(0xc3), Just(0xa9), any::<u8>()
            ], 0..400),
            q in prop_oneof![
                "[abcAB]{1,4}( [abc]{1,5}){0,3}",
                Just("=>".to_owned()),
                Just("=> ab".to_owned()),
                Just("é ab".to_owned()),
            ],
        ) {
            let m = Matcher::new(normalize_query(&q).unwrap());
            prop_assert_eq!(m.is_match_bytes(&text), m.is_match_by_automaton(&text));
        }

        // Every line the matcher reports holds a term, and every line holding a term is reported.
        #[test]
        fn line_hits_are_exact(lines in proptest::collection::vec("[a-cA-C =>]{0,10}", 0..30), q in "[a-c]{1,2}( [a-c]{1,2})?") {
            let text = lines.join("\n");
            let m = Matcher::new(normalize_query(&q).unwrap());
            let reported: Vec<u64> = m.line_hits(&text).iter().map(|h| h.line).collect();
            let expected: Vec<u64> = text.split('\n').enumerate().filter(|(_, l)| {
                let l = l.to_ascii_lowercase();
                m.query().terms.iter().any(|t| l.contains(t.as_str()))
            }).map(|(i, _)| i as u64 + 1).collect();
            prop_assert_eq!(reported, expected);
        }
    }
}
