//! Ranking a catalog's tools against a model's search: BM25F over each tool's name, title,
//! description and parameter names, with English stemming and a small table of verb and noun
//! synonyms, so "remove a ticket" finds `delete_issue`.
//!
//! The index is built once per tool set (a snapshot's allowed tools) and is immutable; a search
//! reads it without allocating per tool. Scores are comparable only within one index.
//!
//! Words: runs of letters and digits, split again at `camelCase` and `snake_case` boundaries,
//! lowercased, stop words dropped, stemmed (Porter2, English). A query is read the same way; each
//! of its words also matches its synonyms at half weight.
// Parses untrusted input (the model's query): no indexing, slicing or integer arithmetic that can
// panic (docs/limits.md, "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use std::collections::HashMap;

use rust_stemmers::{Algorithm, Stemmer};

use crate::query::{MAX_QUERY_BYTES, MAX_TERMS, QueryError};

/// Longest word kept, in bytes; longer runs (hashes, base64) are not words a search needs.
pub const MAX_WORD_BYTES: usize = 64;
/// Most words read from one field of a tool (a description longer than this is cut).
pub const MAX_FIELD_WORDS: usize = 512;

/// The text of one tool that ranking reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolFields<'a> {
    /// The tool's id or alias, e.g. `github/create_issue`.
    pub name: &'a str,
    /// Its human title, when it has one.
    pub title: &'a str,
    /// Its description.
    pub description: &'a str,
    /// Its parameter names, space-separated or in any form the word splitter reads.
    pub params: &'a str,
}

/// Field weights and BM25 constants. The defaults favour a word in the name over one in the
/// description: a tool is mostly known by what it is called.
#[derive(Debug, Clone, Copy)]
pub struct Weights {
    pub name: f32,
    pub title: f32,
    pub description: f32,
    pub params: f32,
    /// Saturation of repeated words.
    pub k1: f32,
    /// Length normalisation (0: none, 1: full).
    pub b: f32,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            name: 3.0,
            title: 2.0,
            description: 1.0,
            params: 0.5,
            k1: 1.2,
            b: 0.75,
        }
    }
}

/// One hit: the tool's position in the slice the index was built from, and its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ranked {
    pub index: usize,
    pub score: f32,
}

/// An immutable BM25F index over a set of tools.
pub struct ToolIndex {
    /// Word → position in `postings`.
    words: HashMap<String, usize>,
    /// Per word: (tool, saturating-ready weighted frequency) pairs, and the word's idf.
    postings: Vec<Posting>,
    tools: usize,
    k1: f32,
    stemmer: Stemmer,
    /// [`SYNONYMS`], stemmed once.
    synonyms: Vec<Vec<String>>,
}

struct Posting {
    idf: f32,
    hits: Vec<(u32, f32)>,
}

const FIELDS: usize = 4;

impl ToolIndex {
    /// Builds the index with the default weights.
    pub fn build<'a>(tools: impl IntoIterator<Item = ToolFields<'a>>) -> ToolIndex {
        ToolIndex::with_weights(tools, Weights::default())
    }

    /// Builds the index: every tool's fields split into stemmed words, counted per field, and the
    /// fields' frequencies combined with their weights and length normalisation (BM25F).
    pub fn with_weights<'a>(
        tools: impl IntoIterator<Item = ToolFields<'a>>,
        weights: Weights,
    ) -> ToolIndex {
        let stemmer = Stemmer::create(Algorithm::English);
        let field_weights = [
            weights.name,
            weights.title,
            weights.description,
            weights.params,
        ];
        // Per tool: each field's word counts and length.
        let mut docs: Vec<[(HashMap<String, u32>, u32); FIELDS]> = Vec::new();
        let mut total_len = [0f64; FIELDS];
        for tool in tools {
            let texts = [tool.name, tool.title, tool.description, tool.params];
            let fields = texts.map(|text| {
                let mut counts: HashMap<String, u32> = HashMap::new();
                let mut len = 0u32;
                for_each_word(text, &stemmer, MAX_FIELD_WORDS, |w| {
                    let c = counts.entry(w).or_insert(0);
                    *c = c.saturating_add(1);
                    len = len.saturating_add(1);
                });
                (counts, len)
            });
            for (sum, (_, len)) in total_len.iter_mut().zip(fields.iter()) {
                *sum += f64::from(*len);
            }
            docs.push(fields);
        }
        let n = docs.len();
        let avg = total_len.map(|sum| {
            if n == 0 {
                1.0
            } else {
                (sum / n as f64).max(1.0)
            }
        });

        let mut words: HashMap<String, usize> = HashMap::new();
        let mut hits: Vec<Vec<(u32, f32)>> = Vec::new();
        for (doc, fields) in docs.into_iter().enumerate() {
            let Ok(doc) = u32::try_from(doc) else { break };
            let mut combined: HashMap<String, f32> = HashMap::new();
            for ((counts, len), (weight, avg_len)) in
                fields.into_iter().zip(field_weights.iter().zip(avg.iter()))
            {
                let norm = (1.0 - weights.b) + weights.b * (f64::from(len) / avg_len) as f32;
                for (word, tf) in counts {
                    *combined.entry(word).or_insert(0.0) += weight * tf as f32 / norm;
                }
            }
            for (word, tf) in combined {
                let next = hits.len();
                let slot = *words.entry(word).or_insert(next);
                if slot == next {
                    hits.push(Vec::new());
                }
                if let Some(list) = hits.get_mut(slot) {
                    list.push((doc, tf));
                }
            }
        }
        let postings = hits
            .into_iter()
            .map(|hits| {
                let df = hits.len() as f32;
                let idf = (1.0 + (n as f32 - df + 0.5) / (df + 0.5)).ln();
                Posting { idf, hits }
            })
            .collect();
        ToolIndex {
            words,
            postings,
            tools: n,
            k1: weights.k1,
            synonyms: SYNONYMS
                .iter()
                .map(|group| group.iter().map(|w| stemmer.stem(w).into_owned()).collect())
                .collect(),
            stemmer,
        }
    }

    /// How many tools the index holds.
    pub fn len(&self) -> usize {
        self.tools
    }

    /// Whether the index holds no tool.
    pub fn is_empty(&self) -> bool {
        self.tools == 0
    }

    /// The `limit` best tools for `query`, best first; tools that share no word with the query
    /// (or its synonyms) are never returned. Ties keep the catalog's order.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<Ranked>, QueryError> {
        if query.len() > MAX_QUERY_BYTES {
            return Err(QueryError::TooLong { bytes: query.len() });
        }
        let mut terms: Vec<(String, f32)> = Vec::new();
        for_each_word(query, &self.stemmer, MAX_TERMS, |w| {
            add_term(&mut terms, w, 1.0)
        });
        if terms.is_empty() {
            return Err(QueryError::Empty);
        }
        let originals: Vec<String> = terms.iter().map(|(w, _)| w.clone()).collect();
        for word in &originals {
            for synonym in synonyms(word, &self.synonyms) {
                add_term(&mut terms, synonym, SYNONYM_WEIGHT);
            }
        }

        let mut scores = vec![0f32; self.tools];
        for (word, weight) in &terms {
            let Some(posting) = self.words.get(word).and_then(|&i| self.postings.get(i)) else {
                continue;
            };
            for &(doc, tf) in &posting.hits {
                if let Some(score) = usize::try_from(doc).ok().and_then(|d| scores.get_mut(d)) {
                    *score += weight * posting.idf * tf * (self.k1 + 1.0) / (tf + self.k1);
                }
            }
        }
        let mut ranked: Vec<Ranked> = scores
            .into_iter()
            .enumerate()
            .filter(|(_, s)| *s > 0.0)
            .map(|(index, score)| Ranked { index, score })
            .collect();
        let by_score = |a: &Ranked, b: &Ranked| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.index.cmp(&b.index))
        };
        if ranked.len() > limit && limit > 0 {
            ranked.select_nth_unstable_by(limit.saturating_sub(1), by_score);
            ranked.truncate(limit);
        }
        ranked.sort_by(by_score);
        ranked.truncate(limit);
        Ok(ranked)
    }
}

impl std::fmt::Debug for ToolIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolIndex")
            .field("tools", &self.tools)
            .field("words", &self.words.len())
            .finish()
    }
}

/// Weight of a synonym relative to the word the query wrote.
const SYNONYM_WEIGHT: f32 = 0.5;

fn add_term(terms: &mut Vec<(String, f32)>, word: String, weight: f32) {
    match terms.iter_mut().find(|(w, _)| *w == word) {
        Some((_, w)) => *w = w.max(weight),
        None => terms.push((word, weight)),
    }
}

/// Words tools and tasks are written in that mean the same thing for finding a tool. Each group
/// is stemmed like any other word before use.
const SYNONYMS: &[&[&str]] = &[
    &["create", "add", "new", "make", "insert", "open", "file"],
    &["delete", "remove", "erase", "destroy", "drop", "purge"],
    &["list", "enumerate", "all", "browse"],
    &[
        "get", "fetch", "retrieve", "read", "view", "show", "look", "describe",
    ],
    &["update", "edit", "modify", "change", "rename", "patch"],
    &["search", "find", "lookup", "query", "locate", "look"],
    &["send", "post", "publish", "notify", "message", "dm"],
    &["run", "execute", "invoke", "start", "launch", "trigger"],
    &["stop", "cancel", "halt", "abort", "terminate", "kill"],
    &["upload", "put", "store", "save", "write", "attach"],
    &["download", "export", "pull"],
    &["issue", "ticket", "bug"],
    &["repository", "repo", "project"],
    &["document", "doc", "page", "file"],
    &["email", "mail", "inbox"],
    &["user", "member", "person", "account", "people"],
    &["event", "meeting", "appointment", "calendar", "schedule"],
    &["image", "picture", "photo", "screenshot"],
    &["folder", "directory", "dir"],
    &["comment", "reply", "note"],
    &["payment", "charge", "pay"],
    &["customer", "client"],
];

fn synonyms(word: &str, groups: &[Vec<String>]) -> Vec<String> {
    let mut out = Vec::new();
    for stems in groups {
        if stems.iter().any(|s| s == word) {
            out.extend(stems.iter().filter(|s| *s != word).cloned());
        }
    }
    out
}

/// Words that say nothing about which tool is meant.
const STOP_WORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "of",
    "to",
    "in",
    "on",
    "for",
    "and",
    "or",
    "with",
    "by",
    "from",
    "at",
    "as",
    "is",
    "it",
    "its",
    "this",
    "that",
    "these",
    "be",
    "are",
    "into",
    "about",
    "my",
    "me",
    "i",
    "you",
    "your",
    "our",
    "we",
    "please",
    "can",
    "some",
    "any",
    "which",
    "what",
    "using",
    "via",
    "tool",
    "given",
    "specified",
    "returns",
];

/// Splits `text` into stemmed, lowercased words (at most `max`), calling `f` for each.
fn for_each_word(text: &str, stemmer: &Stemmer, max: usize, mut f: impl FnMut(String)) {
    let mut seen = 0usize;
    let mut word = String::new();
    let mut prev: Option<char> = None;
    let mut flush = |word: &mut String, seen: &mut usize| {
        if !word.is_empty()
            && *seen < max
            && word.len() <= MAX_WORD_BYTES
            && !STOP_WORDS.contains(&word.as_str())
        {
            f(stemmer.stem(word).into_owned());
            *seen = seen.saturating_add(1);
        }
        word.clear();
    };
    for c in text.chars() {
        if !c.is_alphanumeric() {
            flush(&mut word, &mut seen);
            prev = None;
            continue;
        }
        // `createIssue` → create, issue; `v2Api` keeps `v2`.
        if c.is_uppercase() && prev.is_some_and(|p| p.is_lowercase()) {
            flush(&mut word, &mut seen);
        }
        word.extend(c.to_lowercase());
        prev = Some(c);
        if seen >= max {
            return;
        }
    }
    flush(&mut word, &mut seen);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool<'a>(name: &'a str, description: &'a str) -> ToolFields<'a> {
        ToolFields {
            name,
            description,
            ..ToolFields::default()
        }
    }

    fn words(text: &str) -> Vec<String> {
        let stemmer = Stemmer::create(Algorithm::English);
        let mut out = Vec::new();
        for_each_word(text, &stemmer, 100, |w| out.push(w));
        out
    }

    #[test]
    fn words_split_at_case_and_separators_and_are_stemmed() {
        assert_eq!(
            words("github/create_issue createPullRequest listing the Files"),
            [
                "github", "creat", "issu", "creat", "pull", "request", "list", "file"
            ]
        );
    }

    #[test]
    fn the_name_outweighs_a_passing_mention() {
        let tools = [
            tool(
                "notes/append",
                "Appends text; can also delete the last line.",
            ),
            tool("files/delete", "Removes a file."),
        ];
        let index = ToolIndex::build(tools);
        let hits = index.search("delete", 5).unwrap();
        assert_eq!(hits.first().map(|h| h.index), Some(1));
        assert_eq!(hits.len(), 2);
    }

    #[test]
    fn synonyms_find_tools_written_in_other_words() {
        let tools = [
            tool("tracker/delete_issue", "Deletes an issue."),
            tool("tracker/create_issue", "Creates an issue."),
        ];
        let index = ToolIndex::build(tools);
        let hits = index.search("remove a ticket", 5).unwrap();
        assert_eq!(hits.first().map(|h| h.index), Some(0));
    }

    #[test]
    fn tools_sharing_no_word_are_not_returned_and_limit_holds() {
        let tools = [
            tool("a/x", "alpha"),
            tool("b/y", "beta"),
            tool("c/z", "alpha beta"),
        ];
        let index = ToolIndex::build(tools);
        assert_eq!(index.search("gamma", 5).unwrap(), []);
        let hits = index.search("alpha beta", 1).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits.first().map(|h| h.index), Some(2));
    }

    #[test]
    fn empty_and_oversized_queries_are_refused() {
        let index = ToolIndex::build([tool("a/x", "alpha")]);
        assert_eq!(index.search(" the  of ", 5), Err(QueryError::Empty));
        let long = "a".repeat(MAX_QUERY_BYTES + 1);
        assert!(matches!(
            index.search(&long, 5),
            Err(QueryError::TooLong { .. })
        ));
    }
}
