//! Fitting a provider-native history into a context budget.
//!
//! The runtime-driven loop keeps the conversation in the provider's own shape (the messages,
//! items or contents [`crate::decode_calls`] and [`crate::encode_results`] produce). Before each
//! model request it asks [`fit`] whether the request would exceed its budget and, if so, for a
//! smaller history:
//!
//! 1. **Large tool results are externalised**, oldest first: a result's text of at least
//!    [`Budget::min_externalise_chars`] characters whose full copy is stored (a
//!    [`StoredResult`] names where) is replaced by a short note naming that path and the read
//!    tool. The call stays, and so does its answer: only the answer's text shrinks.
//! 2. **The oldest turns are dropped**, if that was not enough: whole units — an assistant turn
//!    together with the results that answer its calls — from the oldest on, and a one-line user
//!    note says how many were removed. The first entry (the run's first user message) and the
//!    newest unit are never dropped; the system prompt and tools are not part of the history.
//!
//! The order of what is kept never changes, a call is never kept without its result (or a result
//! without its call), and the outcome fits the budget whenever the first message, the newest unit
//! (its results externalised) and the note fit. Tokens are estimated, not counted: the JSON text
//! of each entry, in bytes, divided by four ([`estimate_tokens`]) — providers' tokenizers differ
//! and the plane has none; for English text and code this over-counts slightly.
//!
//! Pure: no IO, no clock; the caller journals the [`Trim`] it gets back.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::{Value, json};

use crate::format::ProviderFormat;

/// Where the full text of one call's result is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResult {
    /// The call id, as the history carries it.
    pub call_id: String,
    /// The path the model can read the full result at.
    pub path: String,
    /// A digest of the text the history carries for this result, to find answers that carry no
    /// id (Gemini calls whose id the plane synthesised).
    content_digest: u64,
}

impl StoredResult {
    /// A stored result whose model-facing text (what [`crate::encode_results`] sent) is `content`.
    pub fn new(call_id: impl Into<String>, path: impl Into<String>, content: &str) -> Self {
        StoredResult {
            call_id: call_id.into(),
            path: path.into(),
            content_digest: digest(content),
        }
    }
}

/// What a request may use and what is known about the history.
#[derive(Debug, Clone, Copy)]
pub struct Budget<'a> {
    /// The most tokens one request may carry.
    pub max_tokens: u64,
    /// Tokens every request carries besides the history: the system prompt and the tools.
    pub fixed_tokens: u64,
    /// Results that may be externalised, with where they are stored.
    pub stored: &'a [StoredResult],
    /// Results shorter than this many characters are never externalised.
    pub min_externalise_chars: usize,
    /// The tool the model reads a stored result with (its alias), named in the note.
    pub read_tool: Option<&'a str>,
}

/// One externalised result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Externalised {
    /// The call id; empty for an answer that carries none.
    pub call_id: String,
    pub path: String,
    /// Characters removed from the history.
    pub chars: usize,
}

/// A trimmed history and what was done to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Trim {
    pub history: Vec<Value>,
    /// Estimated tokens of the request before and after (history plus the fixed part).
    pub before_tokens: u64,
    pub after_tokens: u64,
    pub externalised: Vec<Externalised>,
    /// History entries removed (the note added in their place not counted).
    pub dropped_entries: usize,
    /// Units removed: assistant turns with their results, and user messages.
    pub dropped_turns: usize,
    /// Whether the request now fits its budget.
    pub fits: bool,
}

/// Tokens of a JSON value, estimated: its JSON text in bytes divided by four, rounded up.
pub fn estimate_tokens(value: &Value) -> u64 {
    let bytes = serde_json::to_string(value).map(|s| s.len()).unwrap_or(0);
    text_tokens(bytes)
}

/// Tokens of a text, estimated the same way.
pub fn estimate_text_tokens(text: &str) -> u64 {
    text_tokens(text.len())
}

fn text_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

fn digest(text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// The trimmed history when a request carrying `history` would exceed the budget; `None` when it
/// fits as it is.
pub fn fit(format: ProviderFormat, history: &[Value], budget: &Budget<'_>) -> Option<Trim> {
    let mut sizes: Vec<u64> = history.iter().map(estimate_tokens).collect();
    let before = budget.fixed_tokens + sizes.iter().sum::<u64>();
    if before <= budget.max_tokens {
        return None;
    }
    let mut items = history.to_vec();
    let mut total = before;
    let externalised = externalise(format, &mut items, &mut sizes, &mut total, budget);

    let mut dropped_entries = 0;
    let mut dropped_turns = 0;
    if total > budget.max_tokens && items.len() > 1 {
        let units = units(format, &items[1..]);
        // `suffix[k]`: tokens of the units from `k` on.
        let mut suffix = vec![0u64; units.len() + 1];
        for (k, u) in units.iter().enumerate().rev() {
            suffix[k] = suffix[k + 1] + sizes[1 + u.start..1 + u.end].iter().sum::<u64>();
        }
        let head = budget.fixed_tokens + sizes[0];
        let mut k = 0;
        let mut note_tokens = 0;
        // The newest unit is always kept.
        while k + 1 < units.len() && head + note_tokens + suffix[k] > budget.max_tokens {
            k += 1;
            note_tokens = estimate_tokens(&dropped_note(format, k));
        }
        if k > 0 {
            let cut = 1 + units[k].start;
            dropped_entries = cut - 1;
            dropped_turns = k;
            let mut kept = Vec::with_capacity(items.len() - dropped_entries + 1);
            let mut rest = items.split_off(cut);
            kept.push(items.swap_remove(0));
            kept.push(dropped_note(format, k));
            kept.append(&mut rest);
            items = kept;
        }
        total = head + note_tokens + suffix[k];
    }
    Some(Trim {
        history: items,
        before_tokens: before,
        after_tokens: total,
        externalised,
        dropped_entries,
        dropped_turns,
        fits: total <= budget.max_tokens,
    })
}

/// Replaces large stored results by notes, oldest first, until the request fits.
fn externalise(
    format: ProviderFormat,
    items: &mut [Value],
    sizes: &mut [u64],
    total: &mut u64,
    budget: &Budget<'_>,
) -> Vec<Externalised> {
    let mut done = Vec::new();
    for i in 0..items.len() {
        let mut slot = 0;
        while *total > budget.max_tokens {
            let Some(text) = result_text(format, &mut items[i], slot) else {
                break;
            };
            slot += 1;
            let chars = text.chars().count();
            if chars < budget.min_externalise_chars {
                continue;
            }
            let call_id = result_call_id(format, &items[i], slot - 1);
            let text = match result_text(format, &mut items[i], slot - 1) {
                Some(t) => t,
                None => break,
            };
            let found = match &call_id {
                Some(id) => budget.stored.iter().find(|s| &s.call_id == id),
                None => {
                    let d = digest(text);
                    budget.stored.iter().find(|s| s.content_digest == d)
                }
            };
            let Some(found) = found else { continue };
            *text = externalised_note(&found.path, chars, budget.read_tool);
            let new = estimate_tokens(&items[i]);
            *total = *total - sizes[i] + new;
            sizes[i] = new;
            done.push(Externalised {
                call_id: call_id.unwrap_or_default(),
                path: found.path.clone(),
                chars,
            });
        }
        if *total <= budget.max_tokens {
            break;
        }
    }
    done
}

fn externalised_note(path: &str, chars: usize, read_tool: Option<&str>) -> String {
    let read = read_tool
        .map(|t| format!(" Read it with `{t}` if you need it again."))
        .unwrap_or_default();
    format!(
        "[This tool result ({chars} characters) was removed from the conversation to fit the context window. It is stored in full in `{path}` (its `result.content`).{read}]"
    )
}

/// The user note that stands for dropped turns.
fn dropped_note(format: ProviderFormat, turns: usize) -> Value {
    let text = format!(
        "[{turns} earlier turn(s) of this conversation were removed to fit the context window. Their tool results are still stored under `tool-results/`.]"
    );
    crate::user_message(format, &text)
}

/// What a history entry is, for keeping calls with their results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The assistant's output: a message, a content, or Responses output items.
    Assistant,
    /// The answers to the preceding assistant turn's calls.
    Results,
    /// Anything else: a user message.
    User,
}

fn role(format: ProviderFormat, item: &Value) -> Role {
    let r = item.get("role").and_then(Value::as_str);
    let has = |list: &str, pred: &dyn Fn(&Value) -> bool| {
        item.get(list)
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(pred))
    };
    match format {
        ProviderFormat::OpenAiChat => match r {
            Some("assistant") => Role::Assistant,
            Some("tool") => Role::Results,
            _ => Role::User,
        },
        ProviderFormat::OpenAiResponses => match (item.get("type").and_then(Value::as_str), r) {
            (Some("function_call_output"), _) => Role::Results,
            (_, Some("user" | "system" | "developer")) => Role::User,
            _ => Role::Assistant,
        },
        ProviderFormat::AnthropicMessages => match r {
            Some("assistant") => Role::Assistant,
            _ if has("content", &|b| b.get("type") == Some(&json!("tool_result"))) => Role::Results,
            _ => Role::User,
        },
        ProviderFormat::Gemini => match r {
            Some("model") => Role::Assistant,
            _ if has("parts", &|p| p.get("functionResponse").is_some()) => Role::Results,
            _ => Role::User,
        },
    }
}

/// The history split into units that are kept or dropped whole, as index ranges.
fn units(format: ProviderFormat, items: &[Value]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    // The role the current unit may still grow by.
    let mut open: Option<Role> = None;
    for (i, item) in items.iter().enumerate() {
        let r = role(format, item);
        let extends = matches!(
            (open, r),
            (Some(Role::Assistant), Role::Assistant | Role::Results)
                | (Some(Role::Results), Role::Results)
        );
        match out.last_mut() {
            Some(last) if extends => last.end = i + 1,
            _ => out.push(i..i + 1),
        }
        open = match r {
            Role::User => None,
            other => Some(other),
        };
    }
    out
}

/// The text of the `slot`-th result in a history entry, if there is one.
fn result_text(format: ProviderFormat, item: &mut Value, slot: usize) -> Option<&mut String> {
    let text = match format {
        ProviderFormat::OpenAiChat => {
            if slot > 0 || item.get("role")? != "tool" {
                return None;
            }
            item.get_mut("content")?
        }
        ProviderFormat::OpenAiResponses => {
            if slot > 0 || item.get("type")? != "function_call_output" {
                return None;
            }
            item.get_mut("output")?
        }
        ProviderFormat::AnthropicMessages => item
            .get_mut("content")?
            .as_array_mut()?
            .iter_mut()
            .filter(|b| b.get("type") == Some(&json!("tool_result")))
            .nth(slot)?
            .get_mut("content")?,
        ProviderFormat::Gemini => {
            let response = item
                .get_mut("parts")?
                .as_array_mut()?
                .iter_mut()
                .filter_map(|p| p.get_mut("functionResponse"))
                .nth(slot)?
                .get_mut("response")?
                .as_object_mut()?;
            if response.contains_key("output") {
                response.get_mut("output")?
            } else {
                response.get_mut("error")?
            }
        }
    };
    match text {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// The call id the `slot`-th result in a history entry answers, if it carries one.
fn result_call_id(format: ProviderFormat, item: &Value, slot: usize) -> Option<String> {
    let id = match format {
        ProviderFormat::OpenAiChat => item.get("tool_call_id"),
        ProviderFormat::OpenAiResponses => item.get("call_id"),
        ProviderFormat::AnthropicMessages => item
            .get("content")?
            .as_array()?
            .iter()
            .filter(|b| b.get("type") == Some(&json!("tool_result")))
            .nth(slot)?
            .get("tool_use_id"),
        ProviderFormat::Gemini => item
            .get("parts")?
            .as_array()?
            .iter()
            .filter_map(|p| p.get("functionResponse"))
            .nth(slot)?
            .get("id"),
    };
    id?.as_str().map(str::to_owned)
}
