//! The console's server-rendered fragments: the runs of a cell, one run's header, and the cards
//! of pending approvals and questions. Pure functions from the runtime's records to HTML; every
//! value goes through [`esc`]. Whether the decide buttons appear is the caller's role, passed in
//! (the routes enforce it again).

use std::fmt::Write as _;

use serde_json::Value;

use super::html::{cut, duration, esc, utc};
use crate::state::{Approval, ApprovalKind, Driver, RunMode, RunRecord, RunStatus};

/// Longest argument value shown on a card, in characters (the card is summarised already).
const CARD_VALUE_CHARS: usize = 400;

/// The CSS class of a run state's badge.
fn status_class(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Created | RunStatus::Running => "st-running",
        RunStatus::Completed => "st-ok",
        RunStatus::PartialSuccess | RunStatus::Cancelling | RunStatus::Cancelled => "st-warn",
        RunStatus::Failed => "st-error",
    }
}

fn mode(r: &RunRecord) -> String {
    let mode = match r.mode {
        RunMode::Foreground => "foreground",
        RunMode::Background => "background",
    };
    let driver = match r.driver {
        Driver::Host => "host-driven",
        Driver::Runtime => "runtime-driven",
    };
    format!("{mode} · {driver}")
}

/// How long a run has taken: until its last update when it ended, until `now` otherwise.
fn run_duration(r: &RunRecord, now: i64) -> String {
    let end = if r.status.is_terminal() {
        r.updated_ms
    } else {
        now
    };
    duration(end - r.created_ms)
}

fn badge(s: RunStatus) -> String {
    format!(
        r#"<span class="badge {}">{}</span>"#,
        status_class(s),
        esc(&s.as_str().replace('_', " "))
    )
}

/// The runs table, newest first, each with its count of pending approvals.
pub fn runs(runs: &[RunRecord], pending: &[Approval], now: i64) -> String {
    let total = pending.len();
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<div class="bar"><h1>Runs</h1><span class="pending-total{}" data-testid="pending-total">{total} waiting for a decision</span></div>"#,
        if total > 0 { " hot" } else { "" }
    );
    if runs.is_empty() {
        out.push_str(r#"<p class="empty">No runs in this cell yet.</p>"#);
        return out;
    }
    out.push_str(
        r#"<table class="runs"><thead><tr><th>Run</th><th>Profile</th><th>State</th><th>Started (UTC)</th><th>Duration</th><th>Mode</th><th>Pending</th></tr></thead><tbody>"#,
    );
    for r in runs {
        let waiting = pending.iter().filter(|a| a.run_id == r.run_id).count();
        let pending_cell = if waiting > 0 {
            format!(r#"<span class="badge st-hold">{waiting}</span>"#)
        } else {
            String::new()
        };
        let _ = write!(
            out,
            r##"<tr><td data-label="Run"><a class="mono" href="#/run/{id}">{id}</a></td><td data-label="Profile">{profile}</td><td data-label="State">{state}</td><td data-label="Started">{started}</td><td data-label="Duration">{took}</td><td data-label="Mode">{mode}</td><td data-label="Pending">{pending_cell}</td></tr>"##,
            id = esc(&r.run_id),
            profile = esc(&r.profile_id),
            state = badge(r.status),
            started = utc(r.created_ms),
            took = run_duration(r, now),
            mode = esc(&mode(r)),
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// One run's header: its facts, its failure if any, and its pending cards.
pub fn run_head(r: &RunRecord, pending: &[Approval], can_decide: bool, now: i64) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<div class="bar"><a href="#/" class="back">← Runs</a><h1 class="mono">{id}</h1>{state}</div><dl class="facts"><div><dt>Profile</dt><dd>{profile}</dd></div><div><dt>Started (UTC)</dt><dd>{started}</dd></div><div><dt>Duration</dt><dd>{took}</dd></div><div><dt>Mode</dt><dd>{mode}</dd></div><div><dt>Chat</dt><dd class="mono">{chat}</dd></div></dl>"##,
        id = esc(&r.run_id),
        state = badge(r.status),
        profile = esc(&r.profile_id),
        started = utc(r.created_ms),
        took = run_duration(r, now),
        mode = esc(&mode(r)),
        chat = esc(&r.chat_id),
    );
    if let Some(f) = &r.failure {
        let _ = write!(
            out,
            r#"<p class="failure"><code>{}</code> {}</p>"#,
            esc(&f.code),
            esc(&cut(&f.message, 2000))
        );
    }
    out.push_str(&cards(pending, can_decide, false));
    out
}

/// The cards of pending approvals and questions; `with_run` links each to its run.
pub fn cards(pending: &[Approval], can_decide: bool, with_run: bool) -> String {
    if pending.is_empty() {
        return String::new();
    }
    let mut out = String::from(r#"<section class="cards">"#);
    for a in pending {
        out.push_str(&card(a, can_decide, with_run));
    }
    out.push_str("</section>");
    out
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// An argument value as one line of text.
fn value_text(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    cut(&text, CARD_VALUE_CHARS)
}

fn card(a: &Approval, can_decide: bool, with_run: bool) -> String {
    let c = &a.card;
    let id = esc(&a.id);
    let question = a.kind == ApprovalKind::Question;
    let mut out = format!(
        r#"<article class="card {}" data-approval="{id}"><header><span class="badge st-hold">{}</span><strong class="mono">{}</strong><span class="muted">{}</span></header>"#,
        if question { "question" } else { "approval" },
        if question {
            "question"
        } else {
            "needs approval"
        },
        esc(&a.alias),
        esc(s(c, "toolSource")),
    );
    if with_run {
        let _ = write!(
            out,
            r##"<p class="muted">run <a class="mono" href="#/run/{run}">{run}</a></p>"##,
            run = esc(&a.run_id)
        );
    }
    if question {
        let _ = write!(out, r#"<p class="ask">{}</p>"#, esc(s(c, "question")));
    } else {
        out.push_str(&arguments(c.get("arguments")));
        out.push_str(&hints(c.get("hints")));
        let _ = write!(
            out,
            r#"<p class="muted">asked by rule: {}</p>"#,
            esc(s(c, "rule"))
        );
    }
    if !can_decide {
        out.push_str(r#"<p class="muted">Your role can see this but not decide.</p></article>"#);
        return out;
    }
    if question {
        let choices: Vec<&str> = c
            .get("choices")
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        out.push_str(r#"<div class="actions">"#);
        for choice in choices {
            let _ = write!(
                out,
                r#"<button class="choice" data-answer="{id}" data-value="{v}">{v}</button>"#,
                v = esc(choice)
            );
        }
        let _ = write!(
            out,
            r#"</div><form class="answer" data-answer-form="{id}"><input name="answer" placeholder="Type an answer" aria-label="answer" maxlength="16000"><button type="submit" class="primary">Send answer</button><button type="button" class="deny" data-decide="{id}" data-approve="false">Decline</button></form>"#
        );
    } else {
        let _ = write!(
            out,
            r#"<div class="actions"><button class="primary approve" data-decide="{id}" data-approve="true">Approve</button><input name="reason" placeholder="Reason (optional)" aria-label="reason" maxlength="16000"><button class="deny" data-decide="{id}" data-approve="false">Deny</button><label class="remember"><input type="checkbox" name="remember"> for the rest of this run</label></div>"#
        );
    }
    out.push_str(r#"<p class="error" hidden></p></article>"#);
    out
}

/// The card's argument summary as a key/value list.
fn arguments(args: Option<&Value>) -> String {
    let Some(Value::Object(map)) = args else {
        return String::new();
    };
    if map.is_empty() {
        return r#"<p class="muted">no arguments</p>"#.to_owned();
    }
    let mut out = String::from(r#"<dl class="args">"#);
    for (k, v) in map {
        let _ = write!(
            out,
            "<div><dt>{}</dt><dd>{}</dd></div>",
            esc(k),
            esc(&value_text(v))
        );
    }
    out.push_str("</dl>");
    out
}

/// The tool's side-effect hints that are set, as chips.
fn hints(h: Option<&Value>) -> String {
    let Some(h) = h else {
        return String::new();
    };
    let mut out = String::new();
    for (key, yes, no) in [
        ("destructive", "destructive", "not destructive"),
        ("readOnly", "read-only", "writes"),
        ("idempotent", "idempotent", "not idempotent"),
        ("openWorld", "open world", "closed world"),
    ] {
        if let Some(b) = h.get(key).and_then(Value::as_bool) {
            let class = if key == "destructive" && b {
                "chip danger"
            } else {
                "chip"
            };
            let _ = write!(
                out,
                r#"<span class="{class}">{}</span>"#,
                if b { yes } else { no }
            );
        }
    }
    if out.is_empty() {
        out
    } else {
        format!(r#"<p class="chips">{out}</p>"#)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::state::ApprovalState;

    fn approval(kind: ApprovalKind, card: Value) -> Approval {
        Approval {
            id: "ap-1".into(),
            cell_id: "default".into(),
            run_id: "r-1".into(),
            invocation_id: "i-1".into(),
            round: 1,
            call_id: "c1".into(),
            alias: "mcp__gh__delete_repo".into(),
            tool_id: "mcp/x:delete_repo".into(),
            kind,
            state: ApprovalState::Pending,
            card,
            decided_by: String::new(),
            reason: String::new(),
            answer: String::new(),
            created_ms: 0,
            decided_ms: 0,
            expires_ms: 0,
            approve_on_timeout: false,
            remember_for_run: false,
            started: false,
        }
    }

    #[test]
    fn a_card_escapes_its_arguments_and_only_deciders_get_buttons() {
        let a = approval(
            ApprovalKind::ToolCall,
            json!({"toolSource": "mcp:gh", "rule": "annotation:destructive",
                   "arguments": {"repo": "<img src=x onerror=alert(1)>"},
                   "hints": {"destructive": true, "readOnly": null}}),
        );
        let agent = cards(std::slice::from_ref(&a), true, true);
        assert!(
            agent.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{agent}"
        );
        assert!(!agent.contains("<img"), "{agent}");
        assert!(agent.contains(r#"data-decide="ap-1" data-approve="true""#));
        assert!(agent.contains(r#"data-decide="ap-1" data-approve="false""#));
        assert!(agent.contains(r#"<span class="chip danger">destructive</span>"#));
        assert!(agent.contains(r##"href="#/run/r-1""##));
        let reader = cards(&[a], false, false);
        assert!(!reader.contains("data-decide"), "{reader}");
        assert!(reader.contains("can see this but not decide"));
    }

    #[test]
    fn a_question_offers_its_choices_an_answer_field_and_decline() {
        let q = approval(
            ApprovalKind::Question,
            json!({"question": "Ship it?", "choices": ["yes", "\"no\""]}),
        );
        let html = cards(&[q], true, false);
        assert!(html.contains("<p class=\"ask\">Ship it?</p>"), "{html}");
        assert!(html.contains(r#"data-answer="ap-1" data-value="yes""#));
        assert!(html.contains(r#"data-value="&quot;no&quot;""#), "{html}");
        assert!(html.contains(r#"data-answer-form="ap-1""#));
        assert!(html.contains(r#"data-decide="ap-1" data-approve="false">Decline"#));
    }
}
