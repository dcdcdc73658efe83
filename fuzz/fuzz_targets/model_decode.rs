//! Every provider's tool-call decoder (`decode_calls_json`) on arbitrary response bodies, through a
//! fixed turn of three tools. The first byte picks the format (OpenAI chat, OpenAI Responses,
//! Anthropic Messages, Gemini) and the tool choice; the rest is the body.
//!
//! Invariants: a decoded turn names only tools advertised this turn, with distinct non-empty
//! call ids, within the per-turn limit and the choice's call count; its assistant text is within
//! `MAX_ASSISTANT_TEXT_BYTES`; decoding the same body again gives the same turn.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use toolplane_core::turn::{MAX_CALLS_PER_TURN, ToolTurnContract};
use toolplane_model::{MAX_ASSISTANT_TEXT_BYTES, ProviderFormat, decode_calls_json};

const GH: &str = "0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60";

fn contract(choice: u8) -> ToolTurnContract {
    let choice = match choice % 4 {
        0 => json!({"mode": "auto"}),
        1 => json!({"mode": "none"}),
        2 => json!({"mode": "required"}),
        _ => json!({"mode": "specific", "toolId": format!("mcp/{GH}:create_issue")}),
    };
    serde_json::from_value(json!({
        "invocationId": "inv-1",
        "turn": 2,
        "choice": choice,
        "tools": [
            {"toolId": "builtin:dice.roll", "alias": "dice_roll"},
            {"toolId": format!("mcp/{GH}:create_issue"), "alias": "mcp__github__create_issue"},
            {"toolId": format!("mcp/{GH}:ping"), "alias": "mcp__github__ping"}
        ]
    }))
    .unwrap_or_else(|e| panic!("the fixed contract: {e}"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let Ok(body) = std::str::from_utf8(body) else {
        return;
    };
    let format = ProviderFormat::ALL[usize::from(selector % 4)];
    let contract = contract(selector / 4);
    let Ok(turn) = decode_calls_json(format, &contract, body) else {
        return;
    };
    assert!(turn.invocations.len() <= MAX_CALLS_PER_TURN);
    assert!(contract.check_call_count(turn.invocations.len()).is_ok());
    for (i, inv) in turn.invocations.iter().enumerate() {
        assert!(contract.contains(&inv.tool_id), "{format}: {}", inv.tool_id);
        assert!(!inv.call_id.is_empty(), "{format}: empty call id");
        assert!(
            turn.invocations[..i]
                .iter()
                .all(|o| o.call_id != inv.call_id)
        );
    }
    if let Some(text) = &turn.assistant_text {
        assert!(text.len() <= MAX_ASSISTANT_TEXT_BYTES);
    }
    let again = decode_calls_json(format, &contract, body);
    assert_eq!(
        again.as_ref().ok(),
        Some(&turn),
        "{format}: decoding is not deterministic"
    );
});
