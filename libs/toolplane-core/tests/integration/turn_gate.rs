//! Table tests of turn decoding and the request gate: every fail-fast case, choice
//! violations, and the exact boundaries of the total and per-tool budgets.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test fixtures fail loudly

use crate::common;

use common::*;
use serde_json::json;
use toolplane_core::error::{
    AGENT_TOOL_BUDGET_EXHAUSTED, ErrorClass, ErrorCode, MODEL_CANONICAL_TOOL_NAME,
    MODEL_DUPLICATE_CALL_ID, MODEL_MISSING_CALL_ID, MODEL_TOOL_CALL_REQUIRED,
    MODEL_TOOL_CHOICE_VIOLATED, MODEL_UNKNOWN_TOOL_ALIAS,
};
use toolplane_core::gate::ToolRequestGate;
use toolplane_core::id::ToolId;
use toolplane_core::invocation::ToolArguments;
use toolplane_core::policy::PolicyLayers;
use toolplane_core::snapshot::{CompileRequest, ExitPolicy, InvocationToolSnapshot};
use toolplane_core::turn::{CallIdPolicy, RawArguments, RawToolCall, ToolChoice, ToolTurnContract};

fn snapshot(tools: serde_json::Value) -> InvocationToolSnapshot {
    compile(&profile(tools), ExitPolicy::Root, PolicyLayers::default())
}

fn call(id: Option<&str>, name: &str) -> RawToolCall {
    RawToolCall {
        call_id: id.map(str::to_owned),
        name: name.into(),
        arguments: RawArguments::Text("{}".into()),
        provider_metadata: None,
    }
}

fn decode_err(contract: &ToolTurnContract, calls: Vec<RawToolCall>) -> ErrorCode {
    contract
        .decode(calls, CallIdPolicy::Required)
        .unwrap_err()
        .code
}

#[test]
fn decoding_fails_fast_on_every_contract_violation() {
    let s = snapshot(json!({"allow": ["builtin:dice.roll", "mcp:docs/search"]}));
    let turn = ToolTurnContract::all(&s, 1, ToolChoice::Auto).unwrap();
    let cases: Vec<(&str, Vec<RawToolCall>, ErrorCode)> = vec![
        (
            "unknown alias",
            vec![call(Some("a"), "shell_exec")],
            MODEL_UNKNOWN_TOOL_ALIAS,
        ),
        (
            "alias of a tool not in this snapshot",
            vec![call(Some("a"), "workspace_read_file")],
            MODEL_UNKNOWN_TOOL_ALIAS,
        ),
        (
            "canonical id",
            vec![call(Some("a"), "builtin:dice.roll")],
            MODEL_CANONICAL_TOOL_NAME,
        ),
        (
            "native name",
            vec![call(Some("a"), "dice.roll")],
            MODEL_CANONICAL_TOOL_NAME,
        ),
        (
            "mcp native name",
            vec![call(Some("a"), "search")],
            MODEL_CANONICAL_TOOL_NAME,
        ),
        (
            "missing call id",
            vec![call(None, "dice_roll")],
            MODEL_MISSING_CALL_ID,
        ),
        (
            "empty call id",
            vec![call(Some(""), "dice_roll")],
            MODEL_MISSING_CALL_ID,
        ),
        (
            "duplicate call id",
            vec![
                call(Some("c"), "dice_roll"),
                call(Some("c"), "mcp__docs__search"),
            ],
            MODEL_DUPLICATE_CALL_ID,
        ),
        (
            "huge call id",
            vec![call(Some(&"x".repeat(300)), "dice_roll")],
            MODEL_MISSING_CALL_ID,
        ),
    ];
    for (name, calls, want) in cases {
        assert_eq!(decode_err(&turn, calls), want, "{name}");
        assert_eq!(want.class(), ErrorClass::ProviderContract, "{name}");
    }
}

#[test]
fn an_unknown_alias_names_the_advertised_one_it_most_likely_meant() {
    let s = snapshot(
        json!({"allow": ["builtin:dice.roll", "builtin:workspace.read_file", "builtin:workspace.write_file", "mcp:github/*"]}),
    );
    let turn = ToolTurnContract::all(&s, 1, ToolChoice::Auto).unwrap();
    let message = |name: &str| {
        let e = turn
            .decode(vec![call(Some("a"), name)], CallIdPolicy::Required)
            .unwrap_err();
        assert_eq!(e.code, MODEL_UNKNOWN_TOOL_ALIAS, "{name}");
        e.message
    };
    // `-` for `_` and case, as a hand-written script or a model gets them wrong.
    for name in ["dice-roll", "Dice_Roll"] {
        let m = message(name);
        assert!(m.ends_with("(did you mean `dice_roll`?)"), "{m}");
    }
    // A typo within two edits.
    let m = message("workspace_raed_file");
    assert!(m.ends_with("(did you mean `workspace_read_file`?)"), "{m}");
    let m = message("mcp__github__list_issue");
    assert!(
        m.ends_with("(did you mean `mcp__github__list_issues`?)"),
        "{m}"
    );
    // Nothing close, or a name too short to guess from: no guess.
    for name in ["shell_exec".to_owned(), "x".repeat(500), "ls".to_owned()] {
        assert!(!message(&name).contains("did you mean"), "{name}");
    }
}

#[test]
fn another_invocations_alias_is_unknown_here() {
    let mine = snapshot(json!({"allow": ["builtin:dice.roll"]}));
    let other = snapshot(json!({"allow": ["mcp:docs/search"]}));
    let other_turn = ToolTurnContract::all(&other, 1, ToolChoice::Auto).unwrap();
    let alias = other_turn.tools()[0].alias.to_string();
    let turn = ToolTurnContract::all(&mine, 1, ToolChoice::Auto).unwrap();
    assert_eq!(
        decode_err(&turn, vec![call(Some("a"), &alias)]),
        MODEL_UNKNOWN_TOOL_ALIAS
    );
}

#[test]
fn gemini_calls_without_ids_get_synthesised_ids() {
    let s = snapshot(json!({"allow": ["builtin:dice.roll"]}));
    let turn = ToolTurnContract::all(&s, 3, ToolChoice::Auto).unwrap();
    let calls = turn
        .decode(
            vec![call(None, "dice_roll"), call(None, "dice_roll")],
            CallIdPolicy::SynthesiseMissing,
        )
        .unwrap();
    assert_eq!(
        calls.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(),
        ["3:0", "3:1"]
    );
}

#[test]
fn bad_arguments_are_kept_for_a_recoverable_result() {
    let s = snapshot(json!({"allow": ["builtin:dice.roll"]}));
    let turn = ToolTurnContract::all(&s, 1, ToolChoice::Auto).unwrap();
    let mut c = call(Some("a"), "dice_roll");
    c.arguments = RawArguments::Text("{not json".into());
    let decoded = turn.decode(vec![c], CallIdPolicy::Required).unwrap();
    assert!(
        matches!(&decoded[0].arguments, ToolArguments::Invalid { raw, .. } if raw == "{not json")
    );
}

#[test]
fn choice_violations() {
    let s = snapshot(json!({"allow": ["builtin:dice.roll", "mcp:docs/search"]}));
    let dice = ToolId::builtin("dice.roll").unwrap();
    let none = ToolTurnContract::all(&s, 1, ToolChoice::None).unwrap();
    assert_eq!(
        decode_err(&none, vec![call(Some("a"), "dice_roll")]),
        MODEL_TOOL_CHOICE_VIOLATED
    );
    assert!(none.decode(vec![], CallIdPolicy::Required).is_ok());
    let required = ToolTurnContract::all(&s, 1, ToolChoice::Required).unwrap();
    assert_eq!(decode_err(&required, vec![]), MODEL_TOOL_CALL_REQUIRED);
    let specific = ToolTurnContract::all(&s, 1, ToolChoice::Specific(dice.clone())).unwrap();
    assert_eq!(decode_err(&specific, vec![]), MODEL_TOOL_CALL_REQUIRED);
    // The gate refuses another tool under a specific choice.
    let calls = specific
        .decode(
            vec![call(Some("a"), "mcp__docs__search")],
            CallIdPolicy::Required,
        )
        .unwrap();
    let mut gate = ToolRequestGate::new(&s);
    assert_eq!(
        gate.check_and_reserve(&specific, &calls[0])
            .unwrap_err()
            .code,
        MODEL_TOOL_CHOICE_VIOLATED
    );
    assert_eq!(gate.used_total(), 0, "a refused call reserves nothing");
    // A specific tool must be advertised.
    let only_search = ToolTurnContract::subset(
        &s,
        1,
        ToolChoice::Auto,
        &[ToolId::parse(&format!("mcp/{DOCS}:search")).unwrap()],
    )
    .unwrap();
    assert_eq!(
        decode_err(&only_search, vec![call(Some("a"), "dice_roll")]),
        MODEL_UNKNOWN_TOOL_ALIAS
    );
    assert!(ToolTurnContract::subset(&s, 1, ToolChoice::Specific(dice), &[]).is_err());
}

#[test]
fn gate_refuses_calls_outside_the_turn_or_snapshot() {
    let s = snapshot(json!({"allow": ["builtin:dice.roll", "mcp:docs/search"]}));
    let all = ToolTurnContract::all(&s, 1, ToolChoice::Auto).unwrap();
    let calls = all
        .decode(
            vec![call(Some("a"), "mcp__docs__search")],
            CallIdPolicy::Required,
        )
        .unwrap();
    let dice_only = ToolTurnContract::subset(
        &s,
        2,
        ToolChoice::Auto,
        &[ToolId::builtin("dice.roll").unwrap()],
    )
    .unwrap();
    let mut gate = ToolRequestGate::new(&s);
    assert_eq!(
        gate.check_and_reserve(&dice_only, &calls[0])
            .unwrap_err()
            .code,
        MODEL_UNKNOWN_TOOL_ALIAS
    );
    // A turn of another invocation is refused even for the same tool.
    let other_snapshot = {
        let catalog = catalog();
        let p = profile(json!({"allow": ["builtin:dice.roll", "mcp:docs/search"]}));
        InvocationToolSnapshot::compile(CompileRequest {
            run_id: "run-1",
            invocation_id: "inv-2",
            profile: &p,
            layers: PolicyLayers::default(),
            exit_policy: &ExitPolicy::Root,
            catalog: &catalog,
        })
        .unwrap()
    };
    let other_turn = ToolTurnContract::all(&other_snapshot, 1, ToolChoice::Auto).unwrap();
    assert_eq!(
        gate.check_and_reserve(&other_turn, &calls[0])
            .unwrap_err()
            .code,
        MODEL_UNKNOWN_TOOL_ALIAS
    );
}

/// The boundaries of both budgets: exactly `limit` calls pass, the next is refused with a
/// recoverable code, and refusals consume nothing.
#[test]
fn budget_boundaries() {
    struct Case {
        total: u32,
        per_tool: Option<u32>,
        dice_calls: u32,
        search_calls: u32,
        dice_passed: u32,
        search_passed: u32,
    }
    let cases = [
        Case {
            total: 3,
            per_tool: None,
            dice_calls: 5,
            search_calls: 0,
            dice_passed: 3,
            search_passed: 0,
        },
        Case {
            total: 10,
            per_tool: Some(2),
            dice_calls: 5,
            search_calls: 5,
            dice_passed: 2,
            search_passed: 2,
        },
        Case {
            total: 3,
            per_tool: Some(2),
            dice_calls: 3,
            search_calls: 3,
            dice_passed: 2,
            search_passed: 1,
        },
        Case {
            total: 1,
            per_tool: Some(5),
            dice_calls: 1,
            search_calls: 1,
            dice_passed: 1,
            search_passed: 0,
        },
    ];
    for (i, c) in cases.into_iter().enumerate() {
        let mut tools = json!({"allow": ["builtin:dice.roll", "mcp:docs/search"], "maxCallsPerInvocation": c.total});
        if let Some(n) = c.per_tool {
            tools["maxCallsPerTool"] = json!(n);
        }
        let s = snapshot(tools);
        let turn = ToolTurnContract::all(&s, 1, ToolChoice::Auto).unwrap();
        let mut gate = ToolRequestGate::new(&s);
        let mut passed = [0u32; 2];
        let plan = std::iter::repeat_n(0, c.dice_calls as usize)
            .chain(std::iter::repeat_n(1, c.search_calls as usize));
        for (n, which) in plan.enumerate() {
            let alias = if which == 0 {
                "dice_roll"
            } else {
                "mcp__docs__search"
            };
            let decoded = turn
                .decode(
                    vec![call(Some(&format!("c{n}")), alias)],
                    CallIdPolicy::Required,
                )
                .unwrap();
            match gate.check_and_reserve(&turn, &decoded[0]) {
                Ok(r) => {
                    passed[which] += 1;
                    assert_eq!(r.invocation_calls, passed[0] + passed[1], "case {i}");
                }
                Err(e) => {
                    assert_eq!(e.code, AGENT_TOOL_BUDGET_EXHAUSTED, "case {i}");
                    assert_eq!(e.class(), ErrorClass::Recoverable);
                }
            }
        }
        assert_eq!(passed, [c.dice_passed, c.search_passed], "case {i}");
        assert_eq!(
            gate.used_total(),
            c.dice_passed + c.search_passed,
            "case {i}"
        );
    }
}

/// A budget beyond the invocation (the run's) is asked only after the gate's own checks, and a
/// call it refuses takes nothing from the invocation's budget; a contract violation is still the
/// gate's answer, whatever the outer budget would say.
#[test]
fn an_outer_budget_refuses_after_the_gates_checks_and_consumes_nothing() {
    let s = snapshot(json!({"allow": ["builtin:dice.roll"], "maxCallsPerInvocation": 5}));
    let turn = ToolTurnContract::all(&s, 1, ToolChoice::Auto).unwrap();
    let calls = turn
        .decode(vec![call(Some("a"), "dice_roll")], CallIdPolicy::Required)
        .unwrap();
    let mut gate = ToolRequestGate::new(&s);
    let outer = || {
        Err(toolplane_core::error::CoreError::new(
            toolplane_core::error::AGENT_RUN_BUDGET_EXHAUSTED,
            "the run's calls are used up",
        ))
    };
    let e = gate
        .check_and_reserve_within(&turn, &calls[0], outer)
        .unwrap_err();
    assert_eq!(e.code, toolplane_core::error::AGENT_RUN_BUDGET_EXHAUSTED);
    assert_eq!(e.class(), ErrorClass::Recoverable);
    assert_eq!(gate.used_total(), 0);
    assert!(
        gate.check_and_reserve_within(&turn, &calls[0], || Ok(()))
            .is_ok()
    );
    assert_eq!(gate.used_total(), 1);

    let none = ToolTurnContract::all(&s, 2, ToolChoice::None).unwrap();
    let mut asked = false;
    let e = gate
        .check_and_reserve_within(&none, &calls[0], || {
            asked = true;
            Ok(())
        })
        .unwrap_err();
    assert_eq!(e.code, MODEL_TOOL_CHOICE_VIOLATED);
    assert!(
        !asked,
        "the outer budget is not asked about a call the gate refuses"
    );
}

/// A gate rebuilt from the same snapshot with the usage of another goes on counting where that
/// one stopped: a tool's used-up budget stays used up, and the total carries over.
#[test]
fn a_restored_gate_keeps_what_was_reserved() {
    let s = snapshot(
        json!({"allow": ["builtin:dice.roll", "mcp:docs/search"], "maxCallsPerInvocation": 4, "maxCallsPerTool": 2}),
    );
    let turn = ToolTurnContract::all(&s, 1, ToolChoice::Auto).unwrap();
    let dice = |n: usize| {
        turn.decode(
            vec![call(Some(&format!("d{n}")), "dice_roll")],
            CallIdPolicy::Required,
        )
        .unwrap()
        .remove(0)
    };
    let mut gate = ToolRequestGate::new(&s);
    gate.check_and_reserve(&turn, &dice(0)).unwrap();
    gate.check_and_reserve(&turn, &dice(1)).unwrap();
    let usage = gate.usage();
    assert_eq!(usage.total, 2);
    let text = serde_json::to_string(&usage).unwrap();
    let mut restored = ToolRequestGate::restored(&s, &serde_json::from_str(&text).unwrap());
    assert_eq!(restored.used_total(), 2);
    let e = restored.check_and_reserve(&turn, &dice(2)).unwrap_err();
    assert_eq!(e.code, AGENT_TOOL_BUDGET_EXHAUSTED);
    let search = turn
        .decode(
            vec![call(Some("s"), "mcp__docs__search")],
            CallIdPolicy::Required,
        )
        .unwrap()
        .remove(0);
    let r = restored.check_and_reserve(&turn, &search).unwrap();
    assert_eq!(r.invocation_calls, 3, "the total carried over");
}
