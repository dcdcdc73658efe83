//! The scripted provider: a file of model turns replayed in order for offline runs and tests, each
//! turn answered as a Chat Completions response without any connection.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

use super::provider::CallError;

/// A script: `{"turns": [<assistant message>, …]}` or a bare array of turns. Each turn is an OpenAI
/// Chat Completions assistant message (`content`, `tool_calls`); call ids and `type` may be left
/// out and `arguments` may be an object — the scripted provider fills them in.
pub fn parse_script(text: &str) -> Result<Vec<Value>, String> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("the script is not valid json: {e}"))?;
    let turns = match v {
        Value::Array(t) => t,
        Value::Object(mut o) => match o.remove("turns") {
            Some(Value::Array(t)) => t,
            _ => return Err("the script needs a `turns` array".into()),
        },
        _ => return Err("the script must be an array of turns or an object with `turns`".into()),
    };
    if turns.is_empty() || turns.len() > 10_000 {
        return Err("a script has 1 to 10000 turns".into());
    }
    Ok(turns)
}

/// The next scripted turn and how long the scripted model "thinks" before answering (a turn's
/// optional `delayMs`, at most 60 s). A turn's optional `usage` (Chat Completions' `usage` object)
/// becomes the response's.
pub(super) fn next_turn(
    script: Option<&[Value]>,
    script_pos: &Mutex<usize>,
    round: u32,
) -> Result<(String, Option<Duration>), CallError> {
    let Some(turns) = script else {
        return Err(CallError {
            retryable: false,
            status: None,
            message: "no script".into(),
            retry_after: None,
        });
    };
    let mut pos = match script_pos.lock() {
        Ok(p) => p,
        Err(p) => p.into_inner(),
    };
    let Some(turn) = turns.get(*pos) else {
        return Err(CallError {
            retryable: false,
            status: None,
            message: format!(
                "the script ended after {} turns, before the run finished",
                turns.len()
            ),
            retry_after: None,
        });
    };
    *pos += 1;
    let delay = turn
        .get("delayMs")
        .and_then(Value::as_u64)
        .map(|ms| Duration::from_millis(ms.min(60_000)));
    let message = normalize_scripted_turn(turn, round);
    let mut body = json!({"id": format!("scripted-{round}"), "object": "chat.completion", "model": "scripted", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]});
    // A turn's `usage` is reported as the response's, as a provider would.
    if let Some(usage) = turn.get("usage") {
        body["usage"] = usage.clone();
    }
    let body = body.to_string();
    Ok((body, delay))
}

/// Fills in what script authors may leave out of an assistant message.
fn normalize_scripted_turn(turn: &Value, round: u32) -> Value {
    let mut m = match turn {
        Value::String(text) => json!({"role": "assistant", "content": text}),
        other => other.clone(),
    };
    if let Some(obj) = m.as_object_mut() {
        obj.remove("delayMs");
        obj.remove("usage");
        obj.entry("role").or_insert(json!("assistant"));
        obj.entry("content").or_insert(Value::Null);
        if let Some(Value::Array(calls)) = obj.get_mut("tool_calls") {
            for (i, c) in calls.iter_mut().enumerate() {
                if let Some(c) = c.as_object_mut() {
                    c.entry("id").or_insert(json!(format!("call_{round}_{i}")));
                    c.entry("type").or_insert(json!("function"));
                    if let Some(Value::Object(f)) = c.get_mut("function")
                        && let Some(args) = f.get("arguments")
                        && !args.is_string()
                    {
                        let text = args.to_string();
                        f.insert("arguments".into(), json!(text));
                    }
                }
            }
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripted_turns_are_completed() {
        let m = normalize_scripted_turn(
            &json!({"tool_calls": [{"function": {"name": "dice_roll", "arguments": {"notation": "d6"}}}]}),
            2,
        );
        assert_eq!(m["tool_calls"][0]["id"], "call_2_0");
        assert_eq!(m["tool_calls"][0]["type"], "function");
        assert_eq!(
            m["tool_calls"][0]["function"]["arguments"],
            "{\"notation\":\"d6\"}"
        );
        assert_eq!(
            normalize_scripted_turn(&json!("hello"), 1)["content"],
            "hello"
        );
        assert!(parse_script("[]").is_err());
        assert!(parse_script("{\"turns\": [\"x\"]}").is_ok());
    }
}
