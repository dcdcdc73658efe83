//! A run's journal as a timeline a person reads: one line per event that matters (each tool call
//! with its alias, duration, outcome and error code; model rounds; commits; the run's end), with
//! the audit paths of each call when asked. Records that only repeat what another line says
//! (`tool_call_requested`, `tool_result_stored`, …) are shown with `all`. It reads journal
//! records; it never decides anything about the run.

use serde_json::Value;
use toolplane_proto::v1 as pb;

use crate::convert::{level_name, parse_json_text};

/// Renders journal events, in order, into timeline lines.
#[derive(Debug, Default)]
pub struct Timeline {
    /// Show every record, also those another line already covers.
    pub all: bool,
    /// Show each tool call's audit paths (arguments, result, readable view).
    pub audit: bool,
    start_ms: Option<i64>,
}

/// Width of the alias column; longer aliases push the rest of the line right.
const ALIAS_WIDTH: usize = 30;

fn s<'a>(p: &'a Value, key: &str) -> &'a str {
    p.get(key).and_then(Value::as_str).unwrap_or("")
}

fn n(p: &Value, key: &str) -> u64 {
    p.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn short(id: &str) -> &str {
    // Ids are ASCII (uuids, `r-…`): cutting at a byte index is safe, but check anyway.
    id.get(..8).filter(|_| id.len() > 12).unwrap_or(id)
}

fn failure_text(f: &Value) -> String {
    let code = s(f, "code");
    let message = s(f, "message");
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

impl Timeline {
    pub fn new(all: bool, audit: bool) -> Timeline {
        Timeline {
            all,
            audit,
            start_ms: None,
        }
    }

    /// The lines for one event (none for a record that another line already covers).
    pub fn render(&mut self, e: &pb::JournalEvent) -> Vec<String> {
        let start = *self.start_ms.get_or_insert(e.timestamp_unix_ms);
        let offset = (e.timestamp_unix_ms - start).max(0) as f64 / 1000.0;
        let p = parse_json_text(&e.payload_json);
        let Some((kind, text, extra)) = self.describe(&e.r#type, &p, e.level) else {
            return Vec::new();
        };
        let mut lines = vec![
            format!("{:>9}  {kind:<9} {text}", format!("+{offset:.3}s"))
                .trim_end()
                .to_owned(),
        ];
        lines.extend(
            extra
                .into_iter()
                .map(|x| format!("{:>9}  {:<9} {x}", "", "")),
        );
        lines
    }

    /// (kind column, text, continuation lines), or None to leave the record out.
    fn describe(
        &self,
        kind: &str,
        p: &Value,
        level: i32,
    ) -> Option<(&'static str, String, Vec<String>)> {
        let all = self.all;
        let one = |k: &'static str, t: String| Some((k, t, Vec::new()));
        match kind {
            "run_created" => one(
                "run",
                format!(
                    "created: profile {}, {}-driven, {}, chat {}",
                    s(p, "profileId"),
                    s(p, "driver"),
                    s(p, "mode"),
                    s(p, "chatId")
                ),
            ),
            "status_changed" => one("status", format!("{} → {}", s(p, "from"), s(p, "to"))),
            "workspace_initialized" if all => {
                let roots = |k: &str| {
                    p.get(k)
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_str)
                                .collect::<Vec<_>>()
                                .join(" ")
                        })
                        .unwrap_or_default()
                };
                one(
                    "workspace",
                    format!(
                        "visible {} · writable {}",
                        roots("visibleRoots"),
                        roots("writableRoots")
                    ),
                )
            }
            "context_assembled" => {
                let snapshot = p.get("snapshot").cloned().unwrap_or(Value::Null);
                let tools = snapshot
                    .get("tools")
                    .and_then(Value::as_array)
                    .map(Vec::len)
                    .unwrap_or(0);
                let omitted = n(&snapshot, "omitted");
                let mut extra = Vec::new();
                if self.audit {
                    extra.push(format!("snapshot {}", s(p, "snapshotPath")));
                }
                Some((
                    "context",
                    format!(
                        "{tools} tools bound, {omitted} omitted (invocation {})",
                        short(s(p, "invocationId"))
                    ),
                    extra,
                ))
            }
            "agent_invocation_created" => one(
                "agent",
                format!(
                    "invocation {} opened: profile {}, {}",
                    short(s(p, "invocationId")),
                    s(p, "profileId"),
                    s(p, "providerFormat")
                ),
            ),
            "agent_invocation_completed" => one(
                "agent",
                format!(
                    "invocation {} {} after {} rounds, {} calls",
                    short(s(p, "invocationId")),
                    s(p, "status"),
                    n(p, "rounds"),
                    n(p, "calls")
                ),
            ),
            "agent_invocation_failed" => one(
                "agent",
                format!(
                    "invocation {} failed after {} rounds: {}",
                    short(s(p, "invocationId")),
                    n(p, "rounds"),
                    failure_text(p.get("failure").unwrap_or(&Value::Null))
                ),
            ),
            "agent_invocation_cancelled"
            | "agent_invocation_transferred"
            | "agent_invocation_closed" => one(
                "agent",
                format!(
                    "invocation {} {}",
                    short(s(p, "invocationId")),
                    kind.trim_start_matches("agent_invocation_")
                ),
            ),
            "model_completed" => {
                let calls = n(p, "toolCalls");
                let chars = n(p, "textChars");
                let mut text = format!(
                    "round {}: {calls} tool call{}",
                    n(p, "round"),
                    if calls == 1 { "" } else { "s" }
                );
                if chars > 0 {
                    text.push_str(&format!(", {chars} characters of text"));
                }
                one("model", text)
            }
            "model_call_attempt_failed" => one(
                "model",
                format!(
                    "round {} attempt {} failed{}: {}",
                    n(p, "round"),
                    n(p, "attempt"),
                    p.get("status")
                        .and_then(Value::as_u64)
                        .map(|x| format!(" (HTTP {x})"))
                        .unwrap_or_default(),
                    s(p, "message")
                ),
            ),
            "model_call_retry_scheduled" => one(
                "model",
                format!(
                    "retrying (attempt {}) in {} ms",
                    n(p, "attempt"),
                    n(p, "delayMs")
                ),
            ),
            "direct_output_captured" => one(
                "drift",
                format!(
                    "plain-text reply kept in {} ({} characters)",
                    s(p, "path"),
                    n(p, "chars")
                ),
            ),
            "drift_recovery_attempted" => one(
                "drift",
                "reminded the model to close through its tools".to_owned(),
            ),
            "tool_call_completed" | "tool_call_failed" => Some(self.tool_line(p)),
            "tool_result_readable_view_stored" => one(
                "view",
                format!(
                    "large result readable at {} ({} characters)",
                    s(p, "path"),
                    n(p, "chars")
                ),
            ),
            "tool_omitted" => one(
                "omitted",
                format!(
                    "{} ({}){}",
                    s(p, "tool"),
                    s(p, "reason"),
                    Some(s(p, "detail"))
                        .filter(|d| !d.is_empty())
                        .map(|d| format!(": {d}"))
                        .unwrap_or_default()
                ),
            ),
            "tool_call_awaiting_approval" => one(
                "held",
                if s(p, "kind") == "question" {
                    format!(
                        "{} asks: {} (answer with `toolplane answer {} TEXT`)",
                        s(p, "alias"),
                        p.get("card").map_or("", |c| s(c, "question")),
                        s(p, "approvalId")
                    )
                } else {
                    format!(
                        "{} waits for approval {} ({})",
                        s(p, "alias"),
                        s(p, "approvalId"),
                        p.get("card").map_or("", |c| s(c, "rule"))
                    )
                },
            ),
            "tool_call_approved" | "tool_call_denied" | "question_answered" => one(
                "decided",
                format!(
                    "{} {} by {}{}",
                    s(p, "alias"),
                    match kind {
                        "tool_call_approved" => "approved",
                        "tool_call_denied" => "denied",
                        _ => "answered",
                    },
                    s(p, "decidedBy"),
                    Some(s(p, "reason"))
                        .filter(|r| !r.is_empty())
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default()
                ),
            ),
            "cycle_detected" => one(
                "cycle",
                format!(
                    "{} called {} times in a row: {}",
                    s(p, "toolId"),
                    n(p, "streak"),
                    s(p, "verdict")
                ),
            ),
            "chat_message_committed" => {
                if p.get("skipped").and_then(Value::as_bool) == Some(true) {
                    one(
                        "commit",
                        format!(
                            "auto-publish of {} skipped: {}",
                            s(p, "path"),
                            s(p, "errorCode")
                        ),
                    )
                } else {
                    let auto = if p.get("auto").and_then(Value::as_bool) == Some(true) {
                        " (auto-publish)"
                    } else {
                        ""
                    };
                    one(
                        "commit",
                        format!(
                            "{} → chat message {}{auto}",
                            s(p, "path"),
                            short(s(p, "messageId"))
                        ),
                    )
                }
            }
            "persistent_changes_committed" => {
                let changed = p
                    .get("changedPaths")
                    .and_then(Value::as_array)
                    .map(Vec::len)
                    .unwrap_or(0);
                if changed == 0 && !all {
                    return None;
                }
                one(
                    "persist",
                    format!(
                        "{changed} persist/ files promoted (version {})",
                        n(p, "persistVersion")
                    ),
                )
            }
            "persistent_changes_commit_failed" => one(
                "persist",
                format!(
                    "promotion failed: {}",
                    failure_text(p.get("failure").unwrap_or(&Value::Null))
                ),
            ),
            "run_completed" => one("run", "completed".to_owned()),
            "run_partial_success" => one(
                "run",
                format!(
                    "partial success: {}",
                    failure_text(p.get("failure").unwrap_or(&Value::Null))
                ),
            ),
            "run_failed" => one(
                "run",
                format!(
                    "failed: {}",
                    failure_text(p.get("failure").unwrap_or(&Value::Null))
                ),
            ),
            "run_cancel_requested" => one("run", format!("cancel requested: {}", s(p, "reason"))),
            "run_cancelled" => one("run", "cancelled".to_owned()),
            _ if all => {
                let payload = p.to_string();
                let payload = if payload.chars().count() > 160 {
                    format!("{}…", payload.chars().take(160).collect::<String>())
                } else {
                    payload
                };
                one(
                    if level_name(level) == "info" {
                        "event"
                    } else {
                        "event!"
                    },
                    format!("{kind} {payload}"),
                )
            }
            _ => None,
        }
    }

    fn tool_line(&self, p: &Value) -> (&'static str, String, Vec<String>) {
        let is_error = p.get("isError").and_then(Value::as_bool).unwrap_or(false);
        let alias = s(p, "alias");
        let alias = if alias.is_empty() {
            s(p, "toolId")
        } else {
            alias
        };
        let elapsed = p
            .get("elapsedMs")
            .and_then(Value::as_u64)
            .map(|ms| format!("{ms} ms"))
            .unwrap_or_else(|| "-".to_owned());
        let outcome = s(p, "outcome");
        let mut text = format!(
            "{alias:<ALIAS_WIDTH$} {:<5} {elapsed:>7}  {outcome}",
            if is_error { "error" } else { "ok" }
        );
        if is_error {
            text.push_str("  ");
            text.push_str(s(p, "errorCode"));
        }
        let mut extra = Vec::new();
        if self.audit {
            let mut paths = Vec::new();
            for (label, key) in [
                ("args", "argsPath"),
                ("result", "resultPath"),
                ("view", "readableViewPath"),
            ] {
                let path = s(p, key);
                if !path.is_empty() {
                    paths.push(format!("{label} {path}"));
                }
            }
            if !paths.is_empty() {
                extra.push(paths.join("  "));
            }
        }
        ("tool", text.trim_end().to_owned(), extra)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(seq: u64, ms: i64, kind: &str, payload: Value) -> pb::JournalEvent {
        pb::JournalEvent {
            seq,
            timestamp_unix_ms: ms,
            r#type: kind.into(),
            payload_json: payload.to_string(),
            ..Default::default()
        }
    }

    fn render(t: &mut Timeline, events: &[pb::JournalEvent]) -> String {
        events
            .iter()
            .flat_map(|e| t.render(e))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn sample() -> Vec<pb::JournalEvent> {
        vec![
            event(
                1,
                1_000,
                "run_created",
                json!({"profileId": "demo", "driver": "runtime", "mode": "foreground", "chatId": "demo"}),
            ),
            event(
                2,
                1_010,
                "tool_call_requested",
                json!({"alias": "workspace_write_file"}),
            ),
            event(
                3,
                1_020,
                "tool_call_completed",
                json!({"alias": "workspace_write_file", "toolId": "builtin:workspace.write_file", "isError": false, "errorCode": null, "elapsedMs": 4, "outcome": "known", "argsPath": "tool-args/i1/call_ab.json", "resultPath": "tool-results/i1/call_ab.json"}),
            ),
            event(
                4,
                1_030,
                "tool_call_failed",
                json!({"alias": "workspace_finish", "isError": true, "errorCode": "workspace.commit_required", "elapsedMs": 1, "outcome": "known", "argsPath": "tool-args/i1/call_cd.json", "resultPath": "tool-results/i1/call_cd.json"}),
            ),
            event(
                5,
                2_500,
                "run_failed",
                json!({"failure": {"code": "model.call_failed", "message": "model.call_failed: the script ended after 2 turns, before the run finished"}}),
            ),
        ]
    }

    #[test]
    fn tool_calls_show_alias_duration_outcome_and_code() {
        let mut t = Timeline::new(false, false);
        let expected = [
            "  +0.000s  run       created: profile demo, runtime-driven, foreground, chat demo",
            "  +0.020s  tool      workspace_write_file           ok       4 ms  known",
            "  +0.030s  tool      workspace_finish               error    1 ms  known  workspace.commit_required",
            "  +1.500s  run       failed: model.call_failed: the script ended after 2 turns, before the run finished",
        ]
        .join("\n");
        assert_eq!(render(&mut t, &sample()), expected);
    }

    #[test]
    fn audit_paths_follow_each_call_and_all_shows_every_record() {
        let mut t = Timeline::new(true, true);
        let out = render(&mut t, &sample());
        assert!(out.contains("\n                     args tool-args/i1/call_ab.json  result tool-results/i1/call_ab.json\n"), "{out}");
        assert!(
            out.contains("event     tool_call_requested {\"alias\":\"workspace_write_file\"}"),
            "{out}"
        );
    }
}
