//! One run's journal as the console's live timeline: each record that matters becomes one HTML
//! row (tool calls with alias, duration, outcome and error code, with their arguments and result
//! from the audit objects; model rounds; held calls and decisions; the run's end), indented by
//! the depth of the invocation that wrote it so sub-agents nest under their parent. Reads
//! records; decides nothing about the run. Every value goes through [`esc`].

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::html::{cut, duration, esc};
use crate::context::ports::StoredRecord;

/// Deepest indentation the page draws; deeper sub-agents share it.
const MAX_DEPTH: u32 = 4;

/// The audit objects of a tool call, already read and cut to size.
#[derive(Debug, Default, Clone)]
pub struct CallObjects {
    pub args: Option<String>,
    pub result: Option<String>,
}

/// Renders a run's records in order; remembers when the run started and how deep each
/// invocation is.
#[derive(Debug, Default)]
pub struct Timeline {
    start_ms: Option<i64>,
    depth: HashMap<String, u32>,
}

fn s<'a>(p: &'a Value, key: &str) -> &'a str {
    p.get(key).and_then(Value::as_str).unwrap_or("")
}

fn n(p: &Value, key: &str) -> u64 {
    p.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn short(id: &str) -> &str {
    id.get(..8).filter(|_| id.len() > 12).unwrap_or(id)
}

fn failure_text(f: Option<&Value>) -> String {
    let f = f.unwrap_or(&Value::Null);
    let (code, message) = (s(f, "code"), s(f, "message"));
    let message = message
        .strip_prefix(code)
        .map(|m| m.trim_start_matches([':', ' ']))
        .unwrap_or(message);
    match (code.is_empty(), message.is_empty()) {
        (true, _) => message.to_owned(),
        (false, true) => code.to_owned(),
        (false, false) => format!("{code}: {message}"),
    }
}

/// Whether a record is a tool call's end, whose audit objects the row shows.
pub fn is_call_end(kind: &str) -> bool {
    kind == "tool_call_completed" || kind == "tool_call_failed"
}

/// What a row says: (class, label, text).
type Line = (&'static str, &'static str, String);

impl Timeline {
    /// The row for `rec`, or `None` for a record another row already covers.
    pub fn row(&mut self, rec: &StoredRecord, objects: &CallObjects) -> Option<String> {
        let start = *self.start_ms.get_or_insert(rec.timestamp_ms);
        let p: Value = serde_json::from_str(&rec.payload_json).unwrap_or(Value::Null);
        self.track(&rec.kind, &p);
        let depth = self.depth_of(&rec.invocation_id, &p);
        let (class, label, text) = describe(&rec.kind, &p)?;
        let offset = (rec.timestamp_ms - start).max(0) as f64 / 1000.0;
        let mut out = format!(
            r#"<li class="ev {class} d{depth}" data-kind="{kind}" data-seq="{seq}" data-call="{call}"><span class="at">+{offset:.3}s</span><span class="label">{label}</span><span class="text">{text}</span>"#,
            kind = esc(&rec.kind),
            seq = rec.seq,
            call = esc(s(&p, "callId")),
            text = esc(&text),
        );
        if is_call_end(&rec.kind) {
            for (what, body) in [("arguments", &objects.args), ("result", &objects.result)] {
                if let Some(body) = body {
                    let _ = write!(
                        out,
                        r#"<details class="{what}"><summary>{what}</summary><pre>{}</pre></details>"#,
                        esc(body)
                    );
                }
            }
        }
        out.push_str("</li>");
        Some(out)
    }

    /// Learns each invocation's depth as it opens: a child one level under its parent.
    fn track(&mut self, kind: &str, p: &Value) {
        if kind != "agent_invocation_created" {
            return;
        }
        let exit = p.get("exitPolicy").unwrap_or(&Value::Null);
        let parent = match s(exit, "kind") {
            "return_to_parent" => s(exit, "parent_invocation_id"),
            _ => "",
        };
        let depth = if parent.is_empty() {
            0
        } else {
            self.depth.get(parent).copied().unwrap_or(0) + 1
        };
        self.depth
            .insert(s(p, "invocationId").to_owned(), depth.min(MAX_DEPTH));
    }

    fn depth_of(&self, invocation_id: &str, p: &Value) -> u32 {
        let id = if invocation_id.is_empty() {
            s(p, "invocationId")
        } else {
            invocation_id
        };
        self.depth.get(id).copied().unwrap_or(0)
    }
}

/// The row of one record kind; `None` leaves it out. One arm per kind: a table of cases, kept
/// whole rather than split to stay under the usual length.
fn describe(kind: &str, p: &Value) -> Option<Line> {
    let line = match kind {
        "run_created" => (
            "k-run",
            "run",
            format!(
                "created: profile {}, {}-driven, {}",
                s(p, "profileId"),
                s(p, "driver"),
                s(p, "mode")
            ),
        ),
        "status_changed" => (
            "k-run",
            "status",
            format!("{} → {}", s(p, "from"), s(p, "to")),
        ),
        "agent_invocation_created" => (
            "k-agent",
            "agent",
            format!(
                "invocation {} opened: profile {}",
                short(s(p, "invocationId")),
                s(p, "profileId")
            ),
        ),
        "agent_invocation_completed" => (
            "k-agent",
            "agent",
            format!(
                "invocation {} {} after {} rounds, {} calls",
                short(s(p, "invocationId")),
                s(p, "status"),
                n(p, "rounds"),
                n(p, "calls")
            ),
        ),
        "agent_invocation_failed" => (
            "k-agent bad",
            "agent",
            format!(
                "invocation {} failed: {}",
                short(s(p, "invocationId")),
                failure_text(p.get("failure"))
            ),
        ),
        "agent_task_started" => (
            "k-agent",
            "sub-agent",
            format!(
                "task {} started: profile {}",
                short(s(p, "taskId")),
                s(p, "profileId")
            ),
        ),
        "model_completed" => {
            let calls = n(p, "toolCalls");
            (
                "k-model",
                "model",
                format!(
                    "round {}: {calls} tool call{}",
                    n(p, "round"),
                    if calls == 1 { "" } else { "s" }
                ),
            )
        }
        "model_call_attempt_failed" => (
            "k-model bad",
            "model",
            format!(
                "round {} attempt {} failed: {}",
                n(p, "round"),
                n(p, "attempt"),
                s(p, "message")
            ),
        ),
        "tool_call_started" => ("k-tool running", "call", format!("{} started", alias(p))),
        "tool_call_completed" | "tool_call_failed" => tool_line(p),
        "tool_call_awaiting_approval" => {
            let card = p.get("card").unwrap_or(&Value::Null);
            let text = if s(p, "kind") == "question" {
                format!("{} asks: {}", alias(p), s(card, "question"))
            } else {
                format!("{} waits for approval ({})", alias(p), s(card, "rule"))
            };
            ("k-hold", "held", text)
        }
        "tool_call_approved" | "tool_call_denied" | "question_answered" => {
            let (class, verb) = match kind {
                "tool_call_approved" => ("k-decided ok", "approved"),
                "tool_call_denied" => ("k-decided bad", "denied"),
                _ => ("k-decided ok", "answered"),
            };
            let why = [s(p, "reason"), s(p, "answer")]
                .into_iter()
                .find(|t| !t.is_empty())
                .map(|t| format!(": {}", cut(t, 300)))
                .unwrap_or_default();
            (
                class,
                "decided",
                format!("{} {verb} by {}{why}", alias(p), s(p, "decidedBy")),
            )
        }
        "cycle_detected" => (
            "k-warn",
            "cycle",
            format!(
                "{} called {} times in a row: {}",
                s(p, "toolId"),
                n(p, "streak"),
                s(p, "verdict")
            ),
        ),
        "chat_message_committed" if p.get("skipped").and_then(Value::as_bool) != Some(true) => (
            "k-run",
            "commit",
            format!(
                "{} → chat message {}",
                s(p, "path"),
                short(s(p, "messageId"))
            ),
        ),
        "run_completed" => ("k-end ok", "run", "completed".to_owned()),
        "run_partial_success" => (
            "k-end warn",
            "run",
            format!("partial success: {}", failure_text(p.get("failure"))),
        ),
        "run_failed" => (
            "k-end bad",
            "run",
            format!("failed: {}", failure_text(p.get("failure"))),
        ),
        "run_cancel_requested" => (
            "k-end warn",
            "run",
            format!("cancel requested: {}", s(p, "reason")),
        ),
        "run_cancelled" => ("k-end warn", "run", "cancelled".to_owned()),
        _ => return None,
    };
    Some(line)
}

fn alias(p: &Value) -> &str {
    match s(p, "alias") {
        "" => s(p, "toolId"),
        a => a,
    }
}

fn tool_line(p: &Value) -> Line {
    let is_error = p.get("isError").and_then(Value::as_bool).unwrap_or(false);
    let elapsed = p
        .get("elapsedMs")
        .and_then(Value::as_i64)
        .map(duration)
        .unwrap_or_else(|| "-".to_owned());
    let mut text = format!(
        "{} · {} · {elapsed} · {}",
        alias(p),
        if is_error { "error" } else { "ok" },
        s(p, "outcome")
    );
    if is_error {
        let _ = write!(text, " · {}", s(p, "errorCode"));
    }
    (
        if is_error { "k-tool bad" } else { "k-tool ok" },
        "tool",
        text,
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::context::ports::StoredLevel;

    fn rec(seq: u64, kind: &str, inv: &str, payload: Value) -> StoredRecord {
        StoredRecord {
            seq,
            id: format!("e{seq}"),
            run_id: "r1".into(),
            timestamp_ms: 1_000 + seq as i64 * 250,
            level: StoredLevel::Info,
            kind: kind.into(),
            payload_json: payload.to_string(),
            caused_by: None,
            invocation_id: inv.into(),
            related: Vec::new(),
        }
    }

    #[test]
    fn hostile_journal_content_is_escaped_in_rows_and_audit_objects() {
        let mut t = Timeline::default();
        let row = t
            .row(
                &rec(
                    1,
                    "tool_call_failed",
                    "i1",
                    json!({"alias": "<img src=x onerror=alert(1)>", "callId": "\"><script>", "isError": true, "errorCode": "tool.x", "elapsedMs": 12, "outcome": "known"}),
                ),
                &CallObjects {
                    args: Some("<script>alert(2)</script>".into()),
                    result: Some("</pre><b>".into()),
                },
            )
            .unwrap();
        assert!(!row.contains("<img"), "{row}");
        assert!(!row.contains("<script"), "{row}");
        assert!(!row.contains("</pre><b>"), "{row}");
        assert!(
            row.contains("&lt;img src=x onerror=alert(1)&gt; · error · 12 ms · known · tool.x")
        );
        assert!(
            row.contains(r#"data-call="&quot;&gt;&lt;script&gt;""#),
            "{row}"
        );
    }

    #[test]
    fn sub_agents_nest_under_their_parent_and_covered_records_are_left_out() {
        let mut t = Timeline::default();
        let none = CallObjects::default();
        let root =
            json!({"invocationId": "root", "profileId": "lead", "exitPolicy": {"kind": "root"}});
        let child = json!({"invocationId": "child", "profileId": "helper", "exitPolicy": {"kind": "return_to_parent", "parent_invocation_id": "root", "task_id": "t1"}});
        assert!(
            t.row(&rec(1, "agent_invocation_created", "root", root), &none)
                .unwrap()
                .contains(" d0\"")
        );
        assert!(
            t.row(&rec(2, "agent_invocation_created", "child", child), &none)
                .unwrap()
                .contains(" d1\"")
        );
        let call =
            json!({"alias": "dice_roll", "callId": "c1", "elapsedMs": 3, "outcome": "known"});
        let row = t
            .row(&rec(3, "tool_call_completed", "child", call), &none)
            .unwrap();
        assert!(row.contains(r#"class="ev k-tool ok d1""#), "{row}");
        assert!(row.contains("+0.500s"), "{row}");
        assert!(
            t.row(&rec(4, "tool_result_stored", "child", json!({})), &none)
                .is_none()
        );
    }
}
