//! `worldinfo.read_activated`: the index of the run's activated world-info entries
//! without arguments, their text with `entries`. Owns the activation document's normalised shape;
//! must never expose more than the entries the run captured.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolplane_text::{WindowRequest, char_len, line_count, window};

use super::{Call, ToolOutput, args::Args};
use crate::{error::WsError, tree::Read};

/// Where the activation lives in the run tree (hidden runtime storage).
pub const ACTIVATION_PATH: &str = "input/worldinfo_activation.json";

/// One activated entry, normalised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(rename = "ref")]
    pub reference: String,
    pub name: String,
    pub book: String,
    pub position: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub uid: Value,
}

/// The stored activation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Activation {
    pub entries: Vec<Entry>,
    #[serde(default)]
    pub timestamp_ms: i64,
}

fn text_of(v: &Value, keys: &[&str]) -> String {
    keys.iter()
        .find_map(|k| v.get(*k))
        .map(|x| match x {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        })
        .unwrap_or_default()
}

/// Normalises a host's activation JSON (`{"entries": [...]}` or a bare array; entries with
/// `content` and optional `ref`, `uid`, `name`/`comment`, `book`/`world`, `position`).
pub fn normalize(json_text: &str) -> Result<Activation, WsError> {
    let value: Value = serde_json::from_str(json_text)
        .map_err(|e| WsError::invalid_request(format!("activation_json is not JSON: {e}")))?;
    let list = match &value {
        Value::Array(a) => a.clone(),
        Value::Object(o) => o
            .get("entries")
            .and_then(Value::as_array)
            .cloned()
            .ok_or_else(|| WsError::invalid_request("activation_json needs an entries array"))?,
        _ => {
            return Err(WsError::invalid_request(
                "activation_json must be an object with entries",
            ));
        }
    };
    let mut entries: Vec<Entry> = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let content = e
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| WsError::invalid_request(format!("entry {i} has no content string")))?;
        let mut reference = text_of(e, &["ref"]);
        if reference.is_empty() {
            reference = format!("wi{}", i + 1);
        }
        if entries.iter().any(|x| x.reference == reference) {
            return Err(WsError::invalid_request(format!(
                "entry ref {reference} is used twice"
            )));
        }
        entries.push(Entry {
            reference,
            name: text_of(e, &["name", "comment", "title"]),
            book: text_of(e, &["book", "world"]),
            position: text_of(e, &["position"]),
            content: content.to_owned(),
            uid: e.get("uid").cloned().unwrap_or(Value::Null),
        });
    }
    let timestamp_ms = value
        .get("timestampMs")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    Ok(Activation {
        entries,
        timestamp_ms,
    })
}

// Long: the index and the entries views share the loaded activation and its budget.
pub async fn read_activated(call: &Call<'_>, args: Args) -> Result<ToolOutput, WsError> {
    let base = call.ws.tree().run_dir(&call.ctx.cell, &call.ctx.run_id);
    let key = (call.ctx.cell.clone(), call.ctx.run_id.clone());
    let bytes = match call.ws.log().object_bytes(&key, ACTIVATION_PATH).await? {
        Some(b) => Some(b.as_ref().clone()),
        None => match call
            .ws
            .blocking(move |tree| tree.read(&base, ACTIVATION_PATH))
            .await?
        {
            Read::File(b) => Some(b),
            _ => None,
        },
    };
    let activation: Activation = match bytes {
        Some(b) => serde_json::from_slice(&b)
            .map_err(|e| WsError::io(format!("corrupt world-info activation: {e}")))?,
        None => Activation::default(),
    };
    let Some(requests) = args.array("entries").filter(|a| !a.is_empty()) else {
        let mut content = if activation.entries.is_empty() {
            "No world-info entries were activated for this run.".to_owned()
        } else {
            format!("{} activated entries:", activation.entries.len())
        };
        for e in &activation.entries {
            content.push_str(&format!(
                "\n- {}: {} ({}; {}; {} lines, {} chars)",
                e.reference,
                if e.name.is_empty() {
                    "(unnamed)"
                } else {
                    &e.name
                },
                if e.book.is_empty() {
                    "no book"
                } else {
                    &e.book
                },
                if e.position.is_empty() {
                    "no position"
                } else {
                    &e.position
                },
                line_count(&e.content),
                char_len(&e.content)
            ));
        }
        return Ok(ToolOutput {
            content,
            structured: json!({"entries": activation.entries.iter().map(|e| json!({"ref": e.reference, "name": e.name, "book": e.book, "position": e.position, "lines": line_count(&e.content), "chars": char_len(&e.content), "uid": e.uid})).collect::<Vec<_>>(), "timestampMs": activation.timestamp_ms}),
            refs: activation
                .entries
                .iter()
                .map(|e| format!("worldinfo:{}", e.reference))
                .collect(),
        });
    };
    let mut budget = call.ws.limits().max_chat_read_chars;
    let mut content = String::new();
    let mut out = Vec::new();
    for r in requests {
        let reference = r.get("ref").and_then(Value::as_str).unwrap_or("");
        let Some(entry) = activation.entries.iter().find(|e| e.reference == reference) else {
            return Err(WsError::tool(
                "worldinfo.entry_not_found",
                format!(
                    "no activated entry has ref {reference:?}; call worldinfo_read_activated without arguments for the index"
                ),
            ));
        };
        let w = window(
            &entry.content,
            WindowRequest {
                start_line: r.get("start_line").and_then(Value::as_u64),
                line_count: r.get("line_count").and_then(Value::as_u64),
                max_chars: budget.max(1),
                max_line_chars: call.ws.limits().max_line_chars,
            },
        )
        .map_err(|e| WsError::tool("worldinfo.invalid_range", format!("{reference}: {e}")))?;
        budget = budget.saturating_sub(char_len(&w.content));
        content.push_str(&format!(
            "## {} {}\n{}",
            entry.reference, entry.name, w.content
        ));
        if !content.ends_with('\n') {
            content.push('\n');
        }
        if let Some(next) = w.next_start_line {
            content.push_str(&format!(
                "[lines {}-{} of {}; continue with start_line={next}]\n",
                w.start_line, w.end_line, w.total_lines
            ));
        }
        content.push('\n');
        out.push(json!({"ref": entry.reference, "startLine": w.start_line, "endLine": w.end_line, "totalLines": w.total_lines, "nextStartLine": w.next_start_line, "uid": entry.uid}));
        if budget == 0 {
            break;
        }
    }
    Ok(ToolOutput {
        content: content.trim_end().to_owned(),
        refs: out
            .iter()
            .filter_map(|o| o.get("ref").and_then(Value::as_str))
            .map(|r| format!("worldinfo:{r}"))
            .collect(),
        structured: json!({"entries": out}),
    })
}
