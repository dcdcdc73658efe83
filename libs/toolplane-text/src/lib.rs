//! toolplane-text: the text rules every model-facing search and read shares.
//!
//! - [`query`]: one query normalisation for `workspace.search_files`, `chat.search` and
//!   `skill.search`, the matcher that finds its terms, and the score that ranks hits.
//! - [`window`]: 1-based `start_line` / `line_count` windows with a character budget and a
//!   continuation (`next_start_line`) instead of a second, character-based paging protocol.
//! - [`rank`]: BM25F ranking of a catalog's tools for a model's tool search.
//! - [`utf8`]: whether bytes are text a model may read, and character-safe truncation.
//!
//! This crate is pure: no IO, no async runtime, no knowledge of which tool calls it.

pub mod query;
pub mod rank;
pub mod utf8;
pub mod window;

pub use query::{Hunk, LineHit, Matcher, Query, QueryError, hunks, normalize_query, score_text};
pub use rank::{Ranked, ToolFields, ToolIndex, Weights};
pub use utf8::{NotText, char_len, check_text, truncate_chars};
pub use window::{Window, WindowError, WindowRequest, line_count, window};
