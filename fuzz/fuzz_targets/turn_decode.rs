//! The turn contract's `decode`: arbitrary raw tool calls (names, call ids, argument text or JSON)
//! through a fixed turn of three tools, under both call-id policies and every tool choice.
//!
//! Invariants: a decoded turn has as many invocations as calls, each naming a tool advertised
//! this turn under the alias the call used, with distinct non-empty call ids of at most
//! `MAX_CALL_ID_LEN` bytes; the choice's call count holds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use toolplane_core::turn::{
    CallIdPolicy, MAX_CALL_ID_LEN, MAX_CALLS_PER_TURN, RawArguments, RawToolCall, ToolTurnContract,
};

fn contract(choice: u8) -> ToolTurnContract {
    let choice = match choice % 4 {
        0 => json!({"mode": "none"}),
        1 => json!({"mode": "auto"}),
        2 => json!({"mode": "required"}),
        _ => json!({"mode": "specific", "toolId": "builtin:dice.roll"}),
    };
    serde_json::from_value(json!({
        "invocationId": "inv-1",
        "turn": 2,
        "choice": choice,
        "tools": [
            {"toolId": "builtin:dice.roll", "alias": "dice_roll"},
            {"toolId": "mcp/0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60:create_issue",
             "alias": "mcp__github__create_issue"},
            {"toolId": "ext/crm-host:lookup", "alias": "ext__crm-host__lookup"}
        ]
    }))
    .unwrap_or_else(|e| panic!("the fixed contract: {e}"))
}

// The input: a flags byte (tool choice, call-id policy, whether arguments that parse as JSON are
// sent as a value), then one call per line as `call id<TAB>name<TAB>arguments`, or
// `name<TAB>arguments` / `name` for a call without an id. A name `#<n>` is the turn's n-th alias.
fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Ok(rest) = std::str::from_utf8(rest) else {
        return;
    };
    let contract = contract(flags);
    let as_value = flags & 0x10 != 0;
    let alias = |name: &str| match name.strip_prefix('#').and_then(|n| n.parse::<usize>().ok()) {
        Some(i) => contract.tools()[i % contract.tools().len()]
            .alias
            .to_string(),
        None => name.to_owned(),
    };
    let calls: Vec<RawToolCall> = rest
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.splitn(3, '\t').collect();
            let (call_id, name, args) = match fields.as_slice() {
                [id, name, args] => (Some((*id).to_owned()), *name, *args),
                [name, args] => (None, *name, *args),
                _ => (None, line, ""),
            };
            let arguments = match serde_json::from_str(args) {
                Ok(v) if as_value => RawArguments::Value(v),
                _ => RawArguments::Text(args.to_owned()),
            };
            RawToolCall {
                call_id,
                name: alias(name),
                arguments,
                provider_metadata: None,
            }
        })
        .collect();
    let names: Vec<String> = calls.iter().map(|c| c.name.clone()).collect();
    let policy = if flags & 0x20 != 0 {
        CallIdPolicy::SynthesiseMissing
    } else {
        CallIdPolicy::Required
    };
    let Ok(decoded) = contract.decode(calls, policy) else {
        return;
    };
    assert_eq!(decoded.len(), names.len());
    assert!(decoded.len() <= MAX_CALLS_PER_TURN);
    assert!(contract.check_call_count(decoded.len()).is_ok());
    for (i, (inv, name)) in decoded.iter().zip(&names).enumerate() {
        assert!(contract.contains(&inv.tool_id), "{}", inv.tool_id);
        assert_eq!(
            contract.alias_of(&inv.tool_id).map(|a| a.as_str()),
            Some(name.as_str())
        );
        assert!(!inv.call_id.is_empty() && inv.call_id.len() <= MAX_CALL_ID_LEN);
        assert!(
            decoded[..i].iter().all(|o| o.call_id != inv.call_id),
            "{}",
            inv.call_id
        );
    }
});
