//! Decoding and encoding through the turn contract, in every provider format: each S4 fail-fast
//! case, Gemini's synthesised ids, malformed provider JSON, the input limits, and the pairing of
//! results with calls.
// Test code: a panic with its message is the failure report, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use expect_test::{Expect, expect};
use serde_json::{Value, json};
use toolplane_core::error::{
    ErrorClass, ErrorCode, MODEL_CANONICAL_TOOL_NAME, MODEL_DUPLICATE_CALL_ID,
    MODEL_MALFORMED_RESPONSE, MODEL_MISSING_CALL_ID, MODEL_TOOL_CALL_REQUIRED,
    MODEL_TOOL_CHOICE_VIOLATED, MODEL_UNKNOWN_TOOL_ALIAS, TOOL_RESULT_IDENTITY_MISMATCH,
};
use toolplane_core::id::ToolId;
use toolplane_core::invocation::ToolArguments;
use toolplane_core::result::AgentToolResult;
use toolplane_core::turn::{MAX_CALLS_PER_TURN, ToolChoice, ToolTurnContract};
use toolplane_model::{
    DecodedTurn, MAX_ASSISTANT_TEXT_BYTES, MAX_RESPONSE_BYTES, MAX_RESPONSE_ITEMS, ProviderFormat,
    decode_calls, decode_calls_json, encode_results, encode_tool_choice, encode_tools,
};

const GEMINI: ProviderFormat = ProviderFormat::Gemini;

/// Decodes a sample in both shapes a caller may hand over (whole response, assistant part); both
/// must agree.
fn decode_both(
    format: ProviderFormat,
    turn: &ToolTurnContract,
    s: &Sample,
) -> Result<DecodedTurn, ErrorCode> {
    let whole = decode_calls(format, turn, &whole_response(format, s)).map_err(|e| e.code);
    let part = decode_calls(format, turn, &assistant_part(format, s)).map_err(|e| e.code);
    match (&whole, &part) {
        // Metadata may differ: the whole Gemini sample carries a thought signature.
        (Ok(w), Ok(p)) => {
            let strip = |t: &DecodedTurn| {
                t.invocations
                    .iter()
                    .map(|i| (i.call_id.clone(), i.tool_id.clone(), i.arguments.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(strip(w), strip(p), "{format}");
        }
        _ => assert_eq!(
            whole.as_ref().err(),
            part.as_ref().err(),
            "{format}: whole and part decode differently"
        ),
    }
    whole
}

fn ids(turn: &DecodedTurn) -> Vec<&str> {
    turn.invocations
        .iter()
        .map(|i| i.call_id.as_str())
        .collect()
}

#[test]
fn every_s4_violation_fails_fast_in_every_format() {
    let snap = snapshot();
    let turn = contract(&snap, ToolChoice::Auto);
    let canonical_mcp = create_issue_id().to_string();
    let args = || json!({"notation": "d6"});
    type Want = Result<Vec<&'static str>, ErrorCode>;
    // (case, calls, want for OpenAI / Anthropic, want for Gemini)
    let cases: Vec<(&str, Vec<SampleCall>, Want, Want)> = vec![
        (
            "unknown alias",
            vec![call(Some("c1"), "shell_exec", args())],
            Err(MODEL_UNKNOWN_TOOL_ALIAS),
            Err(MODEL_UNKNOWN_TOOL_ALIAS),
        ),
        (
            "another invocation's alias",
            vec![call(Some("c1"), "workspace_read_file", args())],
            Err(MODEL_UNKNOWN_TOOL_ALIAS),
            Err(MODEL_UNKNOWN_TOOL_ALIAS),
        ),
        (
            "canonical builtin id",
            vec![call(Some("c1"), "builtin:dice.roll", args())],
            Err(MODEL_CANONICAL_TOOL_NAME),
            Err(MODEL_CANONICAL_TOOL_NAME),
        ),
        (
            "builtin native name",
            vec![call(Some("c1"), "dice.roll", args())],
            Err(MODEL_CANONICAL_TOOL_NAME),
            Err(MODEL_CANONICAL_TOOL_NAME),
        ),
        (
            "canonical mcp id",
            vec![call(Some("c1"), &canonical_mcp, args())],
            Err(MODEL_CANONICAL_TOOL_NAME),
            Err(MODEL_CANONICAL_TOOL_NAME),
        ),
        (
            "mcp native name",
            vec![call(Some("c1"), "create_issue", args())],
            Err(MODEL_CANONICAL_TOOL_NAME),
            Err(MODEL_CANONICAL_TOOL_NAME),
        ),
        (
            "an unknown name after a good call fails the whole turn",
            vec![
                call(Some("c1"), "dice_roll", args()),
                call(Some("c2"), "dice_rol", args()),
            ],
            Err(MODEL_UNKNOWN_TOOL_ALIAS),
            Err(MODEL_UNKNOWN_TOOL_ALIAS),
        ),
        (
            "missing call id",
            vec![call(None, "dice_roll", args())],
            Err(MODEL_MISSING_CALL_ID),
            Ok(vec!["2:0"]),
        ),
        (
            "empty call id",
            vec![call(Some(""), "dice_roll", args())],
            Err(MODEL_MISSING_CALL_ID),
            Ok(vec!["2:0"]),
        ),
        (
            "one id missing of two",
            vec![
                call(Some("g1"), "dice_roll", args()),
                call(None, "mcp__github__ping", json!({})),
            ],
            Err(MODEL_MISSING_CALL_ID),
            Ok(vec!["g1", "2:1"]),
        ),
        (
            "duplicate call id",
            vec![
                call(Some("c1"), "dice_roll", args()),
                call(Some("c1"), "mcp__github__ping", json!({})),
            ],
            Err(MODEL_DUPLICATE_CALL_ID),
            Err(MODEL_DUPLICATE_CALL_ID),
        ),
        (
            "a provided id equal to a synthesised one",
            vec![
                call(Some("2:1"), "dice_roll", args()),
                call(None, "dice_roll", args()),
            ],
            Err(MODEL_MISSING_CALL_ID),
            Err(MODEL_DUPLICATE_CALL_ID),
        ),
        (
            "call id over 256 bytes",
            vec![call(Some(&"x".repeat(257)), "dice_roll", args())],
            Err(MODEL_MISSING_CALL_ID),
            Err(MODEL_MISSING_CALL_ID),
        ),
    ];
    for (name, calls, want, want_gemini) in cases {
        let s = sample(Some("text"), calls);
        for format in ProviderFormat::ALL {
            let want = if format == GEMINI {
                &want_gemini
            } else {
                &want
            };
            let got = decode_both(format, &turn, &s);
            match (want, &got) {
                (Ok(want_ids), Ok(turn)) => assert_eq!(&ids(turn), want_ids, "{format}: {name}"),
                (Err(code), Err(got)) => {
                    assert_eq!(got, code, "{format}: {name}");
                    assert_eq!(
                        got.class(),
                        ErrorClass::ProviderContract,
                        "{format}: {name}"
                    );
                }
                _ => panic!(
                    "{format}: {name}: want {want:?}, got {:?}",
                    got.map(|t| t.invocations)
                ),
            }
        }
    }
}

#[test]
fn gemini_marks_synthesised_ids_and_answers_them_without_an_id() {
    let snap = snapshot();
    let turn = contract(&snap, ToolChoice::Auto);
    let s = sample(
        None,
        vec![
            call(Some("fc-7"), "dice_roll", json!({"notation": "d6"})),
            call(None, "mcp__github__ping", json!({})),
        ],
    );
    let decoded = decode_calls(GEMINI, &turn, &assistant_part(GEMINI, &s)).unwrap();
    assert_eq!(ids(&decoded), ["fc-7", "2:1"]);
    assert_eq!(decoded.invocations[0].provider_metadata, None);
    assert_eq!(
        decoded.invocations[1].provider_metadata,
        Some(json!({"callIdSynthesised": true}))
    );
    let results = results_for(&decoded.invocations);
    let out = encode_results(GEMINI, &turn, &decoded.invocations, &results).unwrap();
    let parts = out[0]["parts"].as_array().unwrap();
    assert_eq!(parts[0]["functionResponse"]["id"], json!("fc-7"));
    assert!(
        parts[1]["functionResponse"].get("id").is_none(),
        "a synthesised id must not be sent to gemini: {}",
        parts[1]
    );
}

#[test]
fn tool_choice_is_enforced_on_the_decoded_turn() {
    let snap = snapshot();
    let with_call = sample(None, vec![call(Some("c1"), "dice_roll", json!({}))]);
    let text_only = sample(Some("I am done."), vec![]);
    for format in ProviderFormat::ALL {
        let none = contract(&snap, ToolChoice::None);
        assert_eq!(
            decode_both(format, &none, &with_call).unwrap_err(),
            MODEL_TOOL_CHOICE_VIOLATED,
            "{format}"
        );
        let decoded = decode_both(format, &none, &text_only).unwrap();
        assert_eq!(
            decoded.assistant_text.as_deref(),
            Some("I am done."),
            "{format}"
        );
        for choice in [
            ToolChoice::Required,
            ToolChoice::Specific(create_issue_id()),
        ] {
            let turn = contract(&snap, choice);
            assert_eq!(
                decode_both(format, &turn, &text_only).unwrap_err(),
                MODEL_TOOL_CALL_REQUIRED,
                "{format}"
            );
        }
    }
}

#[test]
fn more_calls_than_a_turn_allows_are_refused() {
    let snap = snapshot();
    let turn = contract(&snap, ToolChoice::Auto);
    let calls = (0..=MAX_CALLS_PER_TURN)
        .map(|i| call(Some(&format!("c{i}")), "mcp__github__ping", json!({})))
        .collect();
    let s = sample(None, calls);
    for format in ProviderFormat::ALL {
        assert_eq!(
            decode_both(format, &turn, &s).unwrap_err(),
            MODEL_TOOL_CHOICE_VIOLATED,
            "{format}"
        );
    }
}

#[test]
fn bad_arguments_are_kept_for_a_recoverable_result_not_refused() {
    let snap = snapshot();
    let turn = contract(&snap, ToolChoice::Auto);
    // Chat and Responses send arguments as text; the others as values.
    let text = |format| match format {
        ProviderFormat::OpenAiChat => json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "dice_roll", "arguments": "{\"notation\": "}}
        ]}),
        _ => {
            json!([{"type": "function_call", "call_id": "c1", "name": "dice_roll", "arguments": "[1, 2]"}])
        }
    };
    for (format, response) in [
        (ProviderFormat::OpenAiChat, text(ProviderFormat::OpenAiChat)),
        (
            ProviderFormat::OpenAiResponses,
            text(ProviderFormat::OpenAiResponses),
        ),
        (
            ProviderFormat::AnthropicMessages,
            json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": "c1", "name": "dice_roll", "input": "d6"}
            ]}),
        ),
        (
            GEMINI,
            json!({"role": "model", "parts": [{"functionCall": {"name": "dice_roll", "args": [1]}}]}),
        ),
    ] {
        let decoded = decode_calls(format, &turn, &response).unwrap();
        assert!(
            matches!(
                decoded.invocations[0].arguments,
                ToolArguments::Invalid { .. }
            ),
            "{format}: {:?}",
            decoded.invocations[0].arguments
        );
    }
}

/// Every malformed shape of one format, rendered as the error messages a person would read.
fn check_malformed(format: ProviderFormat, cases: &[(&str, Value)], expected: Expect) {
    let snap = snapshot();
    let turn = contract(&snap, ToolChoice::Auto);
    let mut lines = Vec::new();
    for (name, response) in cases {
        let err = decode_calls(format, &turn, response)
            .map(|t| t.invocations)
            .expect_err(name);
        assert_eq!(err.code, MODEL_MALFORMED_RESPONSE, "{name}: {err}");
        assert_eq!(err.class(), ErrorClass::ProviderContract);
        lines.push(format!("{name}: {err}"));
    }
    expected.assert_eq(&lines.join("\n"));
}

#[test]
fn malformed_openai_chat() {
    let tc = |call: Value| json!({"role": "assistant", "tool_calls": [call]});
    check_malformed(
        ProviderFormat::OpenAiChat,
        &[
            ("not an object", json!([])),
            ("neither shape", json!({"id": "x"})),
            ("no choices", json!({"choices": []})),
            (
                "two choices",
                json!({"choices": [{"message": {"role": "assistant"}}, {"message": {"role": "assistant"}}]}),
            ),
            ("choice without message", json!({"choices": [{"index": 0}]})),
            ("user message", json!({"role": "user", "content": "hi"})),
            (
                "legacy function call",
                json!({"role": "assistant", "function_call": {"name": "dice_roll", "arguments": "{}"}}),
            ),
            (
                "content is a number",
                json!({"role": "assistant", "content": 3}),
            ),
            (
                "text part without text",
                json!({"role": "assistant", "content": [{"type": "text"}]}),
            ),
            (
                "tool_calls is an object",
                json!({"role": "assistant", "tool_calls": {}}),
            ),
            ("tool call is a string", tc(json!("dice_roll"))),
            (
                "custom tool call",
                tc(json!({"id": "c1", "type": "custom", "custom": {"name": "x", "input": ""}})),
            ),
            (
                "function missing",
                tc(json!({"id": "c1", "type": "function"})),
            ),
            (
                "name missing",
                tc(json!({"id": "c1", "type": "function", "function": {"arguments": "{}"}})),
            ),
            (
                "id is a number",
                tc(json!({"id": 7, "type": "function", "function": {"name": "dice_roll"}})),
            ),
            (
                "arguments is a number",
                tc(
                    json!({"id": "c1", "type": "function", "function": {"name": "dice_roll", "arguments": 1}}),
                ),
            ),
        ],
        expect![[r#"
            not an object: model.malformed_response: openai_chat response: `$` is an array, not an object
            neither shape: model.malformed_response: openai_chat response: `$` is neither a chat.completion (no `choices`) nor an assistant message (no `role`)
            no choices: model.malformed_response: openai_chat response: `$.choices` is empty
            two choices: model.malformed_response: openai_chat response: `$.choices` has 2 entries; the plane decodes exactly one (request n=1)
            choice without message: model.malformed_response: openai_chat response: `$.choices[0].message` is missing
            user message: model.malformed_response: openai_chat response: `$.role` is `user`, not `assistant`
            legacy function call: model.malformed_response: openai_chat response: `$.function_call` is a legacy function call; the plane advertises tools, not functions
            content is a number: model.malformed_response: openai_chat response: `$.content` is a number, not a string or an array
            text part without text: model.malformed_response: openai_chat response: `$.content[0].text` is missing
            tool_calls is an object: model.malformed_response: openai_chat response: `$.tool_calls` is an object, not an array
            tool call is a string: model.malformed_response: openai_chat response: `$.tool_calls[0]` is a string, not an object
            custom tool call: model.malformed_response: openai_chat response: `$.tool_calls[0].type` is `custom`; only function tool calls are decoded
            function missing: model.malformed_response: openai_chat response: `$.tool_calls[0].function` is missing
            name missing: model.malformed_response: openai_chat response: `$.tool_calls[0].function.name` is missing
            id is a number: model.malformed_response: openai_chat response: `$.tool_calls[0].id` is a number, not a string
            arguments is a number: model.malformed_response: openai_chat response: `$.tool_calls[0].function.arguments` is a number, not json text"#]],
    );
}

#[test]
fn malformed_openai_responses() {
    check_malformed(
        ProviderFormat::OpenAiResponses,
        &[
            ("a string", json!("output")),
            (
                "no output",
                json!({"object": "response", "status": "completed"}),
            ),
            (
                "failed response",
                json!({"object": "response", "status": "failed", "error": {"code": "server_error", "message": "boom"}, "output": []}),
            ),
            ("output is an object", json!({"output": {}})),
            ("item without type", json!([{"name": "dice_roll"}])),
            (
                "function call without name",
                json!([{"type": "function_call", "call_id": "c1", "arguments": "{}"}]),
            ),
            (
                "arguments is an object",
                json!([{"type": "function_call", "call_id": "c1", "name": "dice_roll", "arguments": {}}]),
            ),
            (
                "custom tool call",
                json!([{"type": "custom_tool_call", "call_id": "c1", "name": "x", "input": ""}]),
            ),
            (
                "output_text without text",
                json!([{"type": "message", "role": "assistant", "content": [{"type": "output_text"}]}]),
            ),
        ],
        expect![[r#"
            a string: model.malformed_response: openai_responses response: `$` is a string, not an object
            no output: model.malformed_response: openai_responses response: `$.output` is missing
            failed response: model.malformed_response: openai_responses response: `$.error` is set: {"code":"server_error","message":"boom"}
            output is an object: model.malformed_response: openai_responses response: `$.output` is an object, not an array
            item without type: model.malformed_response: openai_responses response: `$[0].type` is missing
            function call without name: model.malformed_response: openai_responses response: `$[0].name` is missing
            arguments is an object: model.malformed_response: openai_responses response: `$[0].arguments` is an object, not a string
            custom tool call: model.malformed_response: openai_responses response: `$[0].type` is `custom_tool_call`; only function tool calls are decoded
            output_text without text: model.malformed_response: openai_responses response: `$[0].content[0].text` is missing"#]],
    );
}

#[test]
fn malformed_anthropic_messages() {
    check_malformed(
        ProviderFormat::AnthropicMessages,
        &[
            (
                "error response",
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ),
            ("no role", json!({"type": "message", "content": []})),
            ("user message", json!({"role": "user", "content": "hi"})),
            ("no content", json!({"role": "assistant"})),
            (
                "content is a number",
                json!({"role": "assistant", "content": 1}),
            ),
            (
                "block without type",
                json!({"role": "assistant", "content": [{"text": "x"}]}),
            ),
            (
                "text block without text",
                json!({"role": "assistant", "content": [{"type": "text"}]}),
            ),
            (
                "tool_use without name",
                json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "input": {}}]}),
            ),
        ],
        expect![[r#"
            error response: model.malformed_response: anthropic_messages response: `$` is an error: {"type":"overloaded_error","message":"Overloaded"}
            no role: model.malformed_response: anthropic_messages response: `$.role` is missing
            user message: model.malformed_response: anthropic_messages response: `$.role` is `user`, not `assistant`
            no content: model.malformed_response: anthropic_messages response: `$.content` is missing
            content is a number: model.malformed_response: anthropic_messages response: `$.content` is a number, not a string or an array
            block without type: model.malformed_response: anthropic_messages response: `$.content[0].type` is missing
            text block without text: model.malformed_response: anthropic_messages response: `$.content[0].text` is missing
            tool_use without name: model.malformed_response: anthropic_messages response: `$.content[0].name` is missing"#]],
    );
}

#[test]
fn malformed_gemini() {
    check_malformed(
        GEMINI,
        &[
            ("not an object", json!("text")),
            ("neither shape", json!({"modelVersion": "gemini-2.5-flash"})),
            (
                "blocked prompt",
                json!({"promptFeedback": {"blockReason": "SAFETY"}, "modelVersion": "gemini-2.5-flash"}),
            ),
            ("no candidates", json!({"candidates": []})),
            (
                "two candidates",
                json!({"candidates": [{"content": {"parts": []}}, {"content": {"parts": []}}]}),
            ),
            (
                "user content",
                json!({"role": "user", "parts": [{"text": "hi"}]}),
            ),
            ("parts is an object", json!({"role": "model", "parts": {}})),
            (
                "function call without name",
                json!({"role": "model", "parts": [{"functionCall": {"args": {}}}]}),
            ),
            (
                "thought signature is a number",
                json!({"role": "model", "parts": [{"functionCall": {"name": "dice_roll"}, "thoughtSignature": 1}]}),
            ),
        ],
        expect![[r#"
            not an object: model.malformed_response: gemini response: `$` is a string, not an object
            neither shape: model.malformed_response: gemini response: `$` is neither a GenerateContentResponse (no `candidates`) nor a Content (no `parts`)
            blocked prompt: model.malformed_response: gemini response: `$.candidates` is missing: the prompt was blocked (SAFETY)
            no candidates: model.malformed_response: gemini response: `$.candidates` is empty
            two candidates: model.malformed_response: gemini response: `$.candidates` has 2 entries; the plane decodes exactly one (request candidateCount=1)
            user content: model.malformed_response: gemini response: `$.role` is `user`, not `model`
            parts is an object: model.malformed_response: gemini response: `$.parts` is an object, not an array
            function call without name: model.malformed_response: gemini response: `$.parts[0].functionCall.name` is missing
            thought signature is a number: model.malformed_response: gemini response: `$.parts[0].thoughtSignature` is a number, not a string"#]],
    );
}

#[test]
fn a_candidate_without_content_is_an_empty_turn() {
    let snap = snapshot();
    let turn = contract(&snap, ToolChoice::Auto);
    let response = json!({"candidates": [{"finishReason": "SAFETY", "index": 0}]});
    let decoded = decode_calls(GEMINI, &turn, &response).unwrap();
    assert!(decoded.invocations.is_empty() && decoded.assistant_text.is_none());
    assert!(decoded.history.is_empty());
    let required = contract(&snap, ToolChoice::Required);
    assert_eq!(
        decode_calls(GEMINI, &required, &response).unwrap_err().code,
        MODEL_TOOL_CALL_REQUIRED
    );
}

#[test]
fn inputs_over_the_limits_are_refused() {
    let snap = snapshot();
    let turn = contract(&snap, ToolChoice::Auto);
    let too_many = MAX_RESPONSE_ITEMS + 1;
    let many_parts: Vec<Value> = (0..too_many).map(|_| json!({"text": "."})).collect();
    let many_blocks: Vec<Value> = (0..too_many)
        .map(|_| json!({"type": "text", "text": "."}))
        .collect();
    let half = "a".repeat(MAX_ASSISTANT_TEXT_BYTES / 2 + 1);
    let cases = [
        (
            GEMINI,
            json!({"role": "model", "parts": many_parts}),
            "over the limit of 1024",
        ),
        (
            ProviderFormat::AnthropicMessages,
            json!({"role": "assistant", "content": many_blocks}),
            "over the limit of 1024",
        ),
        (
            ProviderFormat::OpenAiResponses,
            json!([{"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": half}, {"type": "output_text", "text": half}
            ]}]),
            "assistant text is over the 4194304-byte limit",
        ),
        (
            ProviderFormat::OpenAiChat,
            json!({"role": "assistant", "content": "a".repeat(MAX_ASSISTANT_TEXT_BYTES + 1)}),
            "assistant text is over the 4194304-byte limit",
        ),
    ];
    for (format, response, message) in cases {
        let err = decode_calls(format, &turn, &response).unwrap_err();
        assert_eq!(err.code, MODEL_MALFORMED_RESPONSE, "{format}");
        assert!(err.message.contains(message), "{format}: {err}");
    }
    // Exactly at the text limit is fine.
    let at_limit = json!({"role": "assistant", "content": "a".repeat(MAX_ASSISTANT_TEXT_BYTES)});
    assert!(decode_calls(ProviderFormat::OpenAiChat, &turn, &at_limit).is_ok());
}

#[test]
fn response_bodies_are_size_checked_before_parsing() {
    let snap = snapshot();
    let turn = contract(&snap, ToolChoice::Auto);
    for format in ProviderFormat::ALL {
        let body = whole_response(format, &standard(format)).to_string();
        let decoded = decode_calls_json(format, &turn, &body).unwrap();
        assert_eq!(decoded.invocations.len(), 2, "{format}");

        let err = decode_calls_json(format, &turn, "{\"choices\": [").unwrap_err();
        assert_eq!(err.code, MODEL_MALFORMED_RESPONSE);
        assert!(err.message.contains("not valid json"), "{err}");
    }
    let huge = " ".repeat(MAX_RESPONSE_BYTES + 1);
    let err = decode_calls_json(ProviderFormat::OpenAiChat, &turn, &huge).unwrap_err();
    assert_eq!(err.code, MODEL_MALFORMED_RESPONSE);
    assert!(
        err.message.contains("over the 16777216-byte limit"),
        "{err}"
    );
}

/// What goes back into the history decodes to the same turn: nothing the provider needs (ids,
/// thought signatures, item ids) is lost on the way.
#[test]
fn history_decodes_to_the_same_turn() {
    let snap = snapshot();
    let turn = contract(&snap, ToolChoice::Auto);
    for format in ProviderFormat::ALL {
        let first =
            decode_calls(format, &turn, &whole_response(format, &standard(format))).unwrap();
        let history = match format {
            ProviderFormat::OpenAiResponses => Value::Array(first.history.clone()),
            _ => {
                assert_eq!(first.history.len(), 1, "{format}");
                first.history[0].clone()
            }
        };
        let again = decode_calls(format, &turn, &history).unwrap();
        assert_eq!(again.invocations, first.invocations, "{format}");
        assert_eq!(again.assistant_text, first.assistant_text, "{format}");
        assert_eq!(again.history, first.history, "{format}");
    }
}

#[test]
fn results_carry_model_content_only() {
    let snap = snapshot();
    let turn = contract(&snap, ToolChoice::Auto);
    for format in ProviderFormat::ALL {
        let decoded =
            decode_calls(format, &turn, &whole_response(format, &standard(format))).unwrap();
        let results = results_for(&decoded.invocations);
        let text = serde_json::to_string(
            &encode_results(format, &turn, &decoded.invocations, &results).unwrap(),
        )
        .unwrap();
        for internal in [
            "STRUCTURED",
            "tool.invalid_arguments",
            "workspace:scratch",
            "structured",
        ] {
            assert!(
                !text.contains(internal),
                "{format} leaks {internal}: {text}"
            );
        }
        assert!(text.contains("## Tool error"), "{format}: {text}");
        assert!(
            text.contains("3d6+4: 4 + 2 + 6 + 4 = 16"),
            "{format}: {text}"
        );
    }
}

#[test]
fn results_are_paired_with_calls_and_written_in_call_order() {
    let snap = snapshot();
    let turn = contract(&snap, ToolChoice::Auto);
    let format = ProviderFormat::OpenAiChat;
    let decoded = decode_calls(format, &turn, &whole_response(format, &standard(format))).unwrap();
    let calls = &decoded.invocations;
    let mut results = results_for(calls);
    results.reverse();
    let out = encode_results(format, &turn, calls, &results).unwrap();
    let order: Vec<&Value> = out.iter().map(|m| &m["tool_call_id"]).collect();
    assert_eq!(order, [&json!("call_7Gx2"), &json!("call_Q9d1")]);
    for f in ProviderFormat::ALL {
        assert_eq!(
            encode_results(f, &turn, &[], &[]).unwrap(),
            Vec::<Value>::new()
        );
    }

    let ok = |c| AgentToolResult::ok(c, "x");
    let mut wrong_tool = ok(&calls[1]);
    wrong_tool.tool_id = ToolId::builtin("dice.roll").unwrap();
    let mut stray = ok(&calls[1]);
    stray.call_id = "call_elsewhere".into();
    let dice_only = ToolTurnContract::subset(
        &snap,
        TURN,
        ToolChoice::Auto,
        &[ToolId::builtin("dice.roll").unwrap()],
    )
    .unwrap();
    let cases: Vec<(&str, &ToolTurnContract, Vec<AgentToolResult>, &str)> = vec![
        (
            "a call without a result",
            &turn,
            vec![ok(&calls[0])],
            "has no result",
        ),
        (
            "a result for no call",
            &turn,
            vec![ok(&calls[0]), ok(&calls[1]), stray],
            "answers no call",
        ),
        (
            "two results for one call",
            &turn,
            vec![ok(&calls[0]), ok(&calls[0]), ok(&calls[1])],
            "two results answer",
        ),
        (
            "a result naming another tool",
            &turn,
            vec![ok(&calls[0]), wrong_tool],
            "does not match call",
        ),
        (
            "a call the turn did not advertise",
            &dice_only,
            vec![ok(&calls[0]), ok(&calls[1])],
            "did not advertise",
        ),
    ];
    for (name, contract, results, message) in cases {
        for f in ProviderFormat::ALL {
            let err = encode_results(f, contract, calls, &results).unwrap_err();
            assert_eq!(err.code, TOOL_RESULT_IDENTITY_MISMATCH, "{f}: {name}");
            assert!(err.message.contains(message), "{f}: {name}: {err}");
        }
    }
}

#[test]
fn tools_follow_the_turn_not_the_snapshot() {
    let snap = snapshot();
    let only_ping = ToolTurnContract::subset(
        &snap,
        TURN,
        ToolChoice::Auto,
        &[ToolId::parse(&format!("mcp/{GH}:ping")).unwrap()],
    )
    .unwrap();
    for format in ProviderFormat::ALL {
        let fields = encode_tools(format, &only_ping, &snap).unwrap();
        let text = serde_json::to_string(&fields).unwrap();
        assert!(text.contains("mcp__github__ping"), "{format}");
        assert!(!text.contains("dice_roll"), "{format}: {text}");
        // Titles are for people; no provider field carries them.
        let all = encode_tools(format, &contract(&snap, ToolChoice::Auto), &snap).unwrap();
        assert!(
            !serde_json::to_string(&all)
                .unwrap()
                .contains("title is for people")
        );
    }
}

#[test]
fn tools_refuse_impossible_requests() {
    let snap = snapshot();
    let none: &[ToolId] = &[];
    for format in ProviderFormat::ALL {
        for choice in [ToolChoice::None, ToolChoice::Auto] {
            let empty = ToolTurnContract::subset(&snap, TURN, choice, none).unwrap();
            assert!(
                encode_tools(format, &empty, &snap).unwrap().is_empty(),
                "{format}"
            );
        }
        let required = ToolTurnContract::subset(&snap, TURN, ToolChoice::Required, none).unwrap();
        assert_eq!(
            encode_tools(format, &required, &snap).unwrap_err().code,
            MODEL_TOOL_CALL_REQUIRED
        );
        // A contract of another invocation never advertises through this snapshot.
        let other = snapshot_for("inv-2");
        let foreign = contract(&other, ToolChoice::Auto);
        let err = encode_tools(format, &foreign, &snap).unwrap_err();
        assert_eq!(err.code, MODEL_UNKNOWN_TOOL_ALIAS, "{format}");
        // The choice alone refuses what the whole encoding refuses.
        assert_eq!(
            encode_tool_choice(format, &required, &snap)
                .unwrap_err()
                .code,
            MODEL_TOOL_CALL_REQUIRED
        );
        let err = encode_tool_choice(format, &foreign, &snap).unwrap_err();
        assert_eq!(err.code, MODEL_UNKNOWN_TOOL_ALIAS, "{format}");
    }
}

#[test]
fn the_choice_alone_is_the_choice_field_of_the_whole_encoding() {
    let snap = snapshot();
    let none: &[ToolId] = &[];
    let ping = ToolId::parse(&format!("mcp/{GH}:ping")).unwrap();
    for format in ProviderFormat::ALL {
        for choice in [
            ToolChoice::None,
            ToolChoice::Auto,
            ToolChoice::Required,
            ToolChoice::Specific(ping.clone()),
        ] {
            let turn = contract(&snap, choice.clone());
            let fields = encode_tools(format, &turn, &snap).unwrap();
            let field = fields
                .get("tool_choice")
                .or_else(|| fields.get("toolConfig"))
                .map(ToString::to_string);
            assert!(field.is_some(), "{format} {choice:?}");
            assert_eq!(
                encode_tool_choice(format, &turn, &snap).unwrap(),
                field,
                "{format} {choice:?}"
            );
        }
        let empty = ToolTurnContract::subset(&snap, TURN, ToolChoice::Auto, none).unwrap();
        assert_eq!(encode_tool_choice(format, &empty, &snap).unwrap(), None);
    }
}
