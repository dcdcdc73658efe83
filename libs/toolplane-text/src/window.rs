//! 1-based line windows with continuation. Owns how a text is cut into the lines a
//! model addresses and how a window that would exceed its character budget becomes a successful
//! preview with `next_start_line`; must never page by characters (an over-long single line is cut
//! and marked, not split into character pages).
//!
//! Lines are separated by `\n`; a final `\n` ends the last line rather than starting an empty one,
//! so `"a\nb\n"` and `"a\nb"` both have two lines and an empty text has none.

use crate::utf8::{char_len, truncate_chars};

/// What the caller asked for, and the budgets it runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowRequest {
    /// 1-based first line; `None` starts at line 1.
    pub start_line: Option<u64>,
    /// Lines wanted; `None` reads to the end.
    pub line_count: Option<u64>,
    /// Most characters the window's content may hold (lines are whole except an over-long first
    /// line, which is cut and marked).
    pub max_chars: usize,
    /// Most characters of one line; longer lines are cut and marked even when the budget would
    /// hold them.
    pub max_line_chars: usize,
}

/// A window of lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// The lines, joined with `\n` (a trailing `\n` when the last returned line had one).
    pub content: String,
    /// 1-based first line returned (1 for an empty text).
    pub start_line: u64,
    /// 1-based last line returned, inclusive; `start_line - 1` when no line was returned.
    pub end_line: u64,
    /// Lines in the whole text.
    pub total_lines: u64,
    /// Where to continue when the window stopped before the requested end (budget) or, for an
    /// unbounded request, before the end of the text.
    pub next_start_line: Option<u64>,
    /// Lines that were cut because they alone exceed a limit.
    pub truncated_lines: Vec<u64>,
    /// The window stopped early because of the character budget.
    pub budget_exhausted: bool,
}

impl Window {
    /// The lines of the text that the window's content holds in full or in part.
    pub fn returned_lines(&self) -> u64 {
        self.end_line + 1 - self.start_line
    }
}

/// Why a window could not be cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowError {
    /// `start_line` or `line_count` is 0.
    ZeroArgument { name: &'static str },
    /// `start_line` is past the last line.
    StartPastEnd { start_line: u64, total_lines: u64 },
}

impl std::fmt::Display for WindowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WindowError::ZeroArgument { name } => write!(f, "{name} must be at least 1"),
            WindowError::StartPastEnd {
                start_line,
                total_lines,
            } => write!(
                f,
                "start_line {start_line} is past the end: the text has {total_lines} lines"
            ),
        }
    }
}

/// Number of lines in `text` under this module's rules.
pub fn line_count(text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    let newlines = memchr::memchr_iter(b'\n', text.as_bytes()).count() as u64;
    if text.ends_with('\n') {
        newlines
    } else {
        newlines + 1
    }
}

/// Cuts the requested window out of `text`.
pub fn window(text: &str, request: WindowRequest) -> Result<Window, WindowError> {
    let start = request.start_line.unwrap_or(1);
    if start == 0 {
        return Err(WindowError::ZeroArgument { name: "start_line" });
    }
    if request.line_count == Some(0) {
        return Err(WindowError::ZeroArgument { name: "line_count" });
    }
    let total = line_count(text);
    if start > total.max(1) {
        return Err(WindowError::StartPastEnd {
            start_line: start,
            total_lines: total,
        });
    }
    let wanted_end = match request.line_count {
        Some(n) => start.saturating_add(n - 1).min(total),
        None => total,
    };
    let mut out = Window {
        content: String::new(),
        start_line: start,
        end_line: start - 1,
        total_lines: total,
        next_start_line: None,
        truncated_lines: Vec::new(),
        budget_exhausted: false,
    };
    let mut used = 0usize;
    // `split_inclusive` keeps each line's `\n`, so the content is a verbatim slice of the text
    // (which is what a later exact-match patch needs).
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let number = i as u64 + 1;
        if number < start {
            continue;
        }
        if number > wanted_end {
            break;
        }
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        let body_chars = char_len(body);
        let line_chars = body_chars + newline.len();
        let first = number == start;
        if body_chars > request.max_line_chars || (first && line_chars > request.max_chars) {
            let keep = request
                .max_line_chars
                .min(request.max_chars.saturating_sub(used));
            if !first && keep < request.max_line_chars.min(64) {
                // Not enough room left for a useful cut: stop and let the next window start here.
                out.budget_exhausted = true;
                break;
            }
            let (cut, _) = truncate_chars(body, keep);
            out.content.push_str(cut);
            out.content.push_str(newline);
            used += char_len(cut) + newline.len();
            out.truncated_lines.push(number);
            out.end_line = number;
            continue;
        }
        if used + line_chars > request.max_chars {
            out.budget_exhausted = true;
            break;
        }
        out.content.push_str(line);
        used += line_chars;
        out.end_line = number;
    }
    if out.end_line < wanted_end {
        out.next_start_line = Some(out.end_line + 1);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(start: Option<u64>, count: Option<u64>, max_chars: usize) -> WindowRequest {
        WindowRequest {
            start_line: start,
            line_count: count,
            max_chars,
            max_line_chars: 1000,
        }
    }

    #[test]
    fn counts_lines_like_an_editor() {
        assert_eq!(line_count(""), 0);
        assert_eq!(line_count("a"), 1);
        assert_eq!(line_count("a\n"), 1);
        assert_eq!(line_count("a\nb"), 2);
        assert_eq!(line_count("\n\n"), 2);
    }

    #[test]
    fn whole_text_and_ranges() {
        let text = "one\ntwo\nthree\nfour\n";
        let w = window(text, req(None, None, 1000)).unwrap();
        assert_eq!((w.content.as_str(), w.start_line, w.end_line), (text, 1, 4));
        assert_eq!(w.next_start_line, None);
        let w = window(text, req(Some(2), Some(2), 1000)).unwrap();
        assert_eq!(w.content, "two\nthree\n");
        assert_eq!((w.end_line, w.total_lines, w.next_start_line), (3, 4, None));
        let w = window(text, req(Some(4), Some(10), 1000)).unwrap();
        assert_eq!(w.content, "four\n");
    }

    #[test]
    fn budget_turns_into_a_preview_with_continuation() {
        let text = "aaaa\nbbbb\ncccc\n";
        let w = window(text, req(None, None, 11)).unwrap();
        assert_eq!(w.content, "aaaa\nbbbb\n");
        assert_eq!(w.next_start_line, Some(3));
        assert!(w.budget_exhausted);
        let w = window(text, req(Some(3), None, 11)).unwrap();
        assert_eq!(w.content, "cccc\n");
        assert_eq!(w.next_start_line, None);
    }

    #[test]
    fn an_over_long_line_is_cut_and_marked() {
        let text = format!("{}\nshort\n", "x".repeat(50));
        let w = window(&text, req(None, None, 20)).unwrap();
        assert_eq!(w.content, format!("{}\n", "x".repeat(20)));
        assert_eq!(w.truncated_lines, vec![1]);
        assert_eq!(w.next_start_line, Some(2));
    }

    #[test]
    fn refuses_bad_ranges() {
        assert_eq!(
            window("a\n", req(Some(0), None, 10)),
            Err(WindowError::ZeroArgument { name: "start_line" })
        );
        assert_eq!(
            window("a\n", req(Some(3), None, 10)),
            Err(WindowError::StartPastEnd {
                start_line: 3,
                total_lines: 1
            })
        );
        let empty = window("", req(None, None, 10)).unwrap();
        assert_eq!(
            (empty.start_line, empty.end_line, empty.total_lines),
            (1, 0, 0)
        );
    }

    proptest! {
        // Reading a text window by window with the continuation reassembles it exactly.
        #[test]
        fn continuation_reassembles_the_text(lines in proptest::collection::vec("[a-zé日 ]{0,12}", 0..40), budget in 14usize..60) {
            let text = lines.join("\n");
            let mut next = Some(1);
            let mut out = String::new();
            let mut guard = 0;
            while let Some(start) = next {
                if text.is_empty() { break; }
                let w = window(&text, req(Some(start), None, budget)).unwrap();
                prop_assert!(w.truncated_lines.is_empty());
                prop_assert!(char_len(&w.content) <= budget);
                out.push_str(&w.content);
                next = w.next_start_line;
                guard += 1;
                prop_assert!(guard < 1000);
            }
            prop_assert_eq!(out, text);
        }
    }
}
