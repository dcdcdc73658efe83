//! Holding a call for a person (docs/approvals.md): after governance, a call whose binding needs
//! approval — a policy's `approvalRequired`, a profile's `tools.approvalRequired`, an MCP
//! permission ASK — and every `ask_user` question becomes an approval with a card, saved and
//! journalled (`tool_call_awaiting_approval`) before anything runs. The call stays held in its
//! turn: a host-driven turn is collected by the host later (`CollectToolResults`), a
//! runtime-driven one by its loop, which waits for the decisions (runloop). A decision turns into
//! [`Hold::Run`] (the call runs), an answer, or a recoverable refusal the model reads.

use serde_json::{Map, Value, json};
use toolplane_core::builtin;
use toolplane_core::error::{
    POLICY_APPROVAL_DENIED, TOOL_INVALID_ARGUMENTS, TOOL_QUESTION_TIMEOUT,
};
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::{Executor, ToolBinding};

use super::record::CallRecord;
use crate::config::TimeoutOutcome;
use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::state::{
    Approval, ApprovalKind, ApprovalState, Event, Invocation, InvocationInner, now_ms,
};

/// String values longer than this are cut on the card.
const CARD_VALUE_CHARS: usize = 200;

/// What holding decided for a call.
#[derive(Debug)]
pub enum Hold {
    /// The call runs (no approval needed, remembered, approved, or expired with approve).
    Run,
    /// The call's result without running it: a question's answer (`known`) or a refusal.
    Answered(AgentToolResult),
    Refused(AgentToolResult),
    /// The call stays held under this approval until its turn is collected.
    Held(String),
}

/// Whether `call` needs a person first.
pub fn needs_hold(binding: &ToolBinding, call: &ToolInvocation) -> bool {
    binding.approval_required || call.tool_id.is_builtin(builtin::ASK_USER)
}

/// Holds the call when it needs a person; see the module docs.
pub async fn hold(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    args: &Map<String, Value>,
    rec: &mut CallRecord,
) -> Result<Hold, RuntimeError> {
    let question = call.tool_id.is_builtin(builtin::ASK_USER);
    if !needs_hold(binding, call) {
        return Ok(Hold::Run);
    }
    let tool = call.tool_id.to_string();
    if !question && rt.approvals.is_remembered(&inv.run.id, &tool) {
        let mut payload = rec.base.clone();
        payload["decidedBy"] = json!("remembered");
        payload["rememberForRun"] = json!(true);
        rec.events
            .push(Event::new("tool_call_approved", payload).inv(&inv.id));
        return Ok(Hold::Run);
    }
    let card = match card(binding, args, question) {
        Ok(card) => card,
        Err(refusal) => {
            return Ok(Hold::Refused(AgentToolResult::error(
                call,
                TOOL_INVALID_ARGUMENTS,
                refusal,
            )));
        }
    };
    let a = new_approval(rt, inv, inner, binding, call, card, question);
    rt.persist_approval(&a).await?;
    rt.approvals.insert(a.clone());
    let mut payload = rec.base.clone();
    payload["approvalId"] = json!(a.id);
    payload["kind"] = json!(a.kind);
    payload["card"] = a.card.clone();
    payload["expiresAtMs"] = json!(a.expires_ms);
    let mut events = std::mem::take(&mut rec.events);
    events.push(Event::new("tool_call_awaiting_approval", payload).inv(&inv.id));
    rt.append(&inv.run, inv.run.epoch(), Vec::new(), events)
        .await?;
    Ok(Hold::Held(a.id))
}

/// What a decided approval means for its call.
pub fn resolve(a: &Approval, call: &ToolInvocation) -> Hold {
    let question = a.kind == ApprovalKind::Question;
    if question && a.state == ApprovalState::Approved {
        return Hold::Answered(
            AgentToolResult::ok(call, a.answer.clone())
                .with_structured(json!({"answer": a.answer, "answeredBy": a.decided_by})),
        );
    }
    if !question && a.runs() {
        return Hold::Run;
    }
    if question && a.state == ApprovalState::Expired && a.decided_by == "timeout" {
        return Hold::Refused(AgentToolResult::error(
            call,
            TOOL_QUESTION_TIMEOUT,
            "nobody answered your question in time; go on without the answer, or ask again later"
                .to_owned(),
        ));
    }
    let why = if a.reason.is_empty() {
        "no reason given".to_owned()
    } else {
        a.reason.clone()
    };
    let what = if a.state == ApprovalState::Expired {
        format!("the approval lapsed ({why})")
    } else {
        format!("denied by {}: {why}", a.decided_by)
    };
    Hold::Refused(
        AgentToolResult::error(
            call,
            POLICY_APPROVAL_DENIED,
            format!("the call was not run: {what}. Do not repeat it unchanged; change your approach or ask the user"),
        )
        .with_structured(json!({"approvalId": a.id, "decidedBy": a.decided_by, "reason": a.reason, "state": a.state})),
    )
}

fn new_approval(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    card: Value,
    question: bool,
) -> Approval {
    let (timeout, outcome) = rt.cfg.approvals.timeout_for(binding);
    let created = now_ms();
    let expires = timeout.map_or(0, |t| {
        created.saturating_add(i64::try_from(t.as_millis()).unwrap_or(i64::MAX))
    });
    Approval {
        id: format!("apr-{}", uuid::Uuid::new_v4()),
        cell_id: inv.run.cell.clone(),
        run_id: inv.run.id.clone(),
        invocation_id: inv.id.clone(),
        round: inner.round,
        call_id: call.call_id.clone(),
        alias: binding.alias.to_string(),
        tool_id: call.tool_id.to_string(),
        kind: if question {
            ApprovalKind::Question
        } else {
            ApprovalKind::ToolCall
        },
        state: ApprovalState::Pending,
        card,
        decided_by: String::new(),
        reason: String::new(),
        answer: String::new(),
        created_ms: created,
        decided_ms: 0,
        expires_ms: expires,
        approve_on_timeout: !question && outcome == TimeoutOutcome::Approve,
        remember_for_run: false,
        started: false,
    }
}

/// The card a person decides on; for `ask_user`, the question and its choices (refused when
/// there is no question).
fn card(binding: &ToolBinding, args: &Map<String, Value>, question: bool) -> Result<Value, String> {
    let d = &binding.descriptor;
    let hints = d.annotations();
    let mut card = json!({
        "toolTitle": d.title().unwrap_or(d.id().native()),
        "toolSource": source(binding),
        "arguments": summarise(&Value::Object(args.clone()), d.input_schema(), None),
        "hints": {
            "readOnly": hints.read_only_hint,
            "destructive": hints.destructive_hint,
            "idempotent": hints.idempotent_hint,
            "openWorld": hints.open_world_hint,
        },
        "rule": binding.approval_rule.clone().unwrap_or_else(|| "ask_user".to_owned()),
    });
    if question {
        let q = args
            .get("question")
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim();
        if q.is_empty() {
            return Err("`question` must be a non-empty string".to_owned());
        }
        let choices: Vec<&str> = match args.get("choices") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
            Some(_) => return Err("`choices` must be an array of strings".to_owned()),
        };
        card["question"] = json!(q);
        card["choices"] = json!(choices);
    }
    Ok(card)
}

/// Where a tool comes from, for people: `builtin`, `mcp:<server>`, `ext/<host>`, `agent/<profile>`.
fn source(binding: &ToolBinding) -> String {
    match (&binding.executor, &binding.server_name) {
        (Executor::McpProxy { .. }, Some(server)) => format!("mcp:{server}"),
        _ => binding.tool_id().provider().to_string(),
    }
}

/// Keys whose values are never shown on a card.
fn looks_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "password",
        "passwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "authorization",
        "credential",
        "private_key",
    ]
    .iter()
    .any(|s| k.contains(s))
}

/// Whether the schema marks a property secret (`writeOnly`, `format: password`).
fn schema_secret(schema: Option<&Value>) -> bool {
    schema.is_some_and(|s| {
        s.get("writeOnly") == Some(&Value::Bool(true))
            || s.get("format").and_then(Value::as_str) == Some("password")
    })
}

/// The arguments as a person reads them: long strings cut, secret values hidden, at any depth.
fn summarise(v: &Value, schema: &Value, key: Option<&str>) -> Value {
    if key.is_some_and(looks_secret) || schema_secret(Some(schema)) {
        return json!("[hidden]");
    }
    match v {
        Value::String(s) if s.chars().count() > CARD_VALUE_CHARS => {
            let cut: String = s.chars().take(CARD_VALUE_CHARS).collect();
            json!(format!("{cut}… ({} characters)", s.chars().count()))
        }
        Value::Object(map) => {
            let props = schema.get("properties");
            Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        let sub = props.and_then(|p| p.get(k)).unwrap_or(&Value::Null);
                        (k.clone(), summarise(v, sub, Some(k)))
                    })
                    .collect(),
            )
        }
        Value::Array(items) => {
            let sub = schema.get("items").unwrap_or(&Value::Null);
            Value::Array(items.iter().map(|i| summarise(i, sub, None)).collect())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cards_cut_long_values_and_hide_secrets() {
        let schema = json!({"type": "object", "properties": {
            "pin": {"type": "string", "writeOnly": true},
            "nested": {"type": "object", "properties": {"pass": {"type": "string", "format": "password"}}}
        }});
        let args = json!({
            "title": "x".repeat(500),
            "api_key": "sk-123",
            "pin": "1234",
            "nested": {"pass": "p", "ok": 1, "Authorization": "Bearer t"},
            "list": ["short"]
        });
        let s = summarise(&args, &schema, None);
        let title = s["title"].as_str().unwrap();
        assert!(title.starts_with(&"x".repeat(200)) && title.ends_with("(500 characters)"));
        assert_eq!(s["api_key"], "[hidden]");
        assert_eq!(s["pin"], "[hidden]");
        assert_eq!(s["nested"]["pass"], "[hidden]");
        assert_eq!(s["nested"]["Authorization"], "[hidden]");
        assert_eq!(s["nested"]["ok"], 1);
        assert_eq!(s["list"], json!(["short"]));
        assert!(!s.to_string().contains("sk-123") && !s.to_string().contains("1234"));
    }
}
