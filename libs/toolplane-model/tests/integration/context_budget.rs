//! `context::fit` on histories of each provider's shape: large results are externalised before
//! anything is dropped, turns are dropped whole and oldest first, the first message stays, and
//! the outcome fits whenever it can.
// Test code: a panic with its message is the failure report, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Value, json};
use toolplane_model::ProviderFormat;
use toolplane_model::context::{Budget, StoredResult, estimate_tokens, fit};

/// One step of a conversation: an assistant turn calling tools whose results have these lengths,
/// or a user message of this length.
#[derive(Debug, Clone)]
enum Step {
    Calls(Vec<usize>),
    User(usize),
}

/// A history in `format`'s shape, and where each result is stored. Calls are `c<step>_<i>`;
/// Gemini calls carry no id when `gemini_ids` is false.
fn history(
    format: ProviderFormat,
    steps: &[Step],
    gemini_ids: bool,
) -> (Vec<Value>, Vec<StoredResult>) {
    let mut h = vec![toolplane_model::user_message(format, "Do the task.")];
    let mut stored = Vec::new();
    for (s, step) in steps.iter().enumerate() {
        match step {
            Step::User(n) => h.push(toolplane_model::user_message(format, &"u".repeat(*n))),
            Step::Calls(lens) => {
                let ids: Vec<String> = (0..lens.len()).map(|i| format!("c{s}_{i}")).collect();
                let texts: Vec<String> = lens
                    .iter()
                    .enumerate()
                    .map(|(i, n)| format!("{s}:{i}:{}", "r".repeat(*n)))
                    .collect();
                for (id, text) in ids.iter().zip(&texts) {
                    stored.push(StoredResult::new(
                        id.clone(),
                        format!("tool-results/inv/{id}.json"),
                        text,
                    ));
                }
                h.extend(turn(format, &ids, &texts, gemini_ids));
            }
        }
    }
    (h, stored)
}

fn turn(format: ProviderFormat, ids: &[String], texts: &[String], gemini_ids: bool) -> Vec<Value> {
    let pairs = || ids.iter().zip(texts);
    match format {
        ProviderFormat::OpenAiChat => {
            let calls: Vec<Value> = ids.iter().map(|id| json!({"id": id, "type": "function", "function": {"name": "read", "arguments": "{}"}})).collect();
            let mut out = vec![json!({"role": "assistant", "content": null, "tool_calls": calls})];
            out.extend(
                pairs().map(|(id, t)| json!({"role": "tool", "tool_call_id": id, "content": t})),
            );
            out
        }
        ProviderFormat::OpenAiResponses => {
            let mut out: Vec<Value> = ids.iter().map(|id| json!({"type": "function_call", "id": format!("fc_{id}"), "call_id": id, "name": "read", "arguments": "{}"})).collect();
            out.extend(pairs().map(
                |(id, t)| json!({"type": "function_call_output", "call_id": id, "output": t}),
            ));
            out
        }
        ProviderFormat::AnthropicMessages => {
            let uses: Vec<Value> = ids
                .iter()
                .map(|id| json!({"type": "tool_use", "id": id, "name": "read", "input": {}}))
                .collect();
            let results: Vec<Value> = pairs().map(|(id, t)| json!({"type": "tool_result", "tool_use_id": id, "content": t, "is_error": false})).collect();
            vec![
                json!({"role": "assistant", "content": uses}),
                json!({"role": "user", "content": results}),
            ]
        }
        ProviderFormat::Gemini => {
            let with_id = |mut v: Value, id: &str| {
                if gemini_ids {
                    v["id"] = json!(id);
                }
                v
            };
            let calls: Vec<Value> = ids
                .iter()
                .map(|id| json!({"functionCall": with_id(json!({"name": "read", "args": {}}), id)}))
                .collect();
            let results: Vec<Value> = pairs().map(|(id, t)| json!({"functionResponse": with_id(json!({"name": "read", "response": {"output": t}}), id)})).collect();
            vec![
                json!({"role": "model", "parts": calls}),
                json!({"role": "user", "parts": results}),
            ]
        }
    }
}

/// The call ids an entry makes (`calls`) or answers (`answers`). Id-less Gemini entries count
/// their parts instead.
fn ids(format: ProviderFormat, item: &Value) -> (Vec<String>, Vec<String>) {
    let s = |v: &Value| v.as_str().map(str::to_owned);
    match format {
        ProviderFormat::OpenAiChat => (
            item["tool_calls"]
                .as_array()
                .map(|a| a.iter().filter_map(|c| s(&c["id"])).collect())
                .unwrap_or_default(),
            s(&item["tool_call_id"]).into_iter().collect(),
        ),
        ProviderFormat::OpenAiResponses => match item["type"].as_str() {
            Some("function_call") => (s(&item["call_id"]).into_iter().collect(), vec![]),
            Some("function_call_output") => (vec![], s(&item["call_id"]).into_iter().collect()),
            _ => (vec![], vec![]),
        },
        ProviderFormat::AnthropicMessages => {
            let blocks = item["content"].as_array().cloned().unwrap_or_default();
            (
                blocks
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .filter_map(|b| s(&b["id"]))
                    .collect(),
                blocks
                    .iter()
                    .filter(|b| b["type"] == "tool_result")
                    .filter_map(|b| s(&b["tool_use_id"]))
                    .collect(),
            )
        }
        ProviderFormat::Gemini => {
            let parts = item["parts"].as_array().cloned().unwrap_or_default();
            (
                parts
                    .iter()
                    .filter_map(|p| s(&p["functionCall"]["id"]))
                    .collect(),
                parts
                    .iter()
                    .filter_map(|p| s(&p["functionResponse"]["id"]))
                    .collect(),
            )
        }
    }
}

/// An entry with its result texts blanked, to compare what was kept with what was there.
fn skeleton(item: &Value) -> Value {
    let mut v = item.clone();
    blank(&mut v);
    v
}

fn blank(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if matches!(k.as_str(), "content" | "output" | "error") && x.is_string() {
                    *x = json!("");
                } else {
                    blank(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(blank),
        _ => {}
    }
}

fn total(h: &[Value], fixed: u64) -> u64 {
    fixed + h.iter().map(estimate_tokens).sum::<u64>()
}

fn budget(max: u64, stored: &[StoredResult]) -> Budget<'_> {
    Budget {
        max_tokens: max,
        fixed_tokens: 100,
        stored,
        min_externalise_chars: 200,
        read_tool: Some("workspace_read_file"),
    }
}

fn is_note(item: &Value) -> bool {
    item.to_string()
        .contains("earlier turn(s) of this conversation were removed")
}

fn format_strategy() -> impl Strategy<Value = ProviderFormat> {
    prop::sample::select(ProviderFormat::ALL.to_vec())
}

fn steps_strategy() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        4 => prop::collection::vec(0usize..3000, 1..4).prop_map(Step::Calls),
        1 => (0usize..400).prop_map(Step::User),
    ];
    prop::collection::vec(step, 0..10)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn trimming_keeps_pairs_order_and_the_first_message_and_fits_when_it_can(
        format in format_strategy(),
        steps in steps_strategy(),
        max in 0u64..6000,
        gemini_ids in any::<bool>(),
    ) {
        let (h, stored) = history(format, &steps, gemini_ids);
        let b = budget(max, &stored);
        let Some(trim) = fit(format, &h, &b) else {
            prop_assert!(total(&h, 100) <= max, "None only when the history fits");
            return Ok(());
        };
        prop_assert!(trim.before_tokens > max);
        prop_assert_eq!(trim.before_tokens, total(&h, 100));
        prop_assert_eq!(trim.after_tokens, total(&trim.history, 100), "the reported estimate is the history's");
        prop_assert_eq!(trim.fits, trim.after_tokens <= max);
        prop_assert_eq!(&trim.history[0], &h[0], "the first message is kept as it is");

        // Order kept: the kept entries (the note aside) are a subsequence of the original.
        let original: Vec<Value> = h.iter().map(skeleton).collect();
        let mut at = 0;
        for item in trim.history.iter().filter(|i| !is_note(i)) {
            let sk = skeleton(item);
            let found = original[at..].iter().position(|o| *o == sk);
            prop_assert!(found.is_some(), "{} is not in order", item);
            at += found.unwrap() + 1;
        }
        prop_assert_eq!(trim.history.iter().filter(|i| is_note(i)).count(), usize::from(trim.dropped_turns > 0));
        prop_assert_eq!(trim.history.len(), h.len() - trim.dropped_entries + usize::from(trim.dropped_turns > 0));

        // Pairs never split.
        let (mut calls, mut answers) = (Vec::new(), Vec::new());
        for item in &trim.history {
            let (c, a) = ids(format, item);
            calls.extend(c);
            answers.extend(a);
        }
        if format == ProviderFormat::Gemini && !gemini_ids {
            let count = |key: &str| trim.history.iter().map(|i| i["parts"].as_array().map_or(0, |p| p.iter().filter(|p| p.get(key).is_some()).count())).sum::<usize>();
            prop_assert_eq!(count("functionCall"), count("functionResponse"));
        } else {
            prop_assert_eq!(&calls, &answers);
        }

        // Fits whenever it can: the smallest history `fit` can make is what a zero budget gives.
        let smallest = fit(format, &h, &budget(0, &stored)).unwrap();
        if smallest.after_tokens <= max {
            prop_assert!(trim.fits, "{} > {max} though {} was possible", trim.after_tokens, smallest.after_tokens);
        }
    }
}

#[test]
fn large_results_are_externalised_oldest_first_before_any_turn_is_dropped() {
    for format in ProviderFormat::ALL {
        let steps = [
            Step::Calls(vec![4000]),
            Step::Calls(vec![4000]),
            Step::Calls(vec![50]),
        ];
        let (h, stored) = history(format, &steps, true);
        let before = total(&h, 100);
        // Room for all but about one large result.
        let trim = fit(format, &h, &budget(before - 500, &stored)).unwrap();
        assert!(trim.fits, "{format}");
        assert_eq!(trim.dropped_turns, 0, "{format}");
        assert_eq!(trim.externalised.len(), 1, "{format}");
        assert_eq!(
            trim.externalised[0].call_id, "c0_0",
            "{format}: the oldest goes first"
        );
        assert_eq!(trim.externalised[0].path, "tool-results/inv/c0_0.json");
        let text = trim
            .history
            .iter()
            .map(Value::to_string)
            .collect::<String>();
        assert!(
            text.contains("stored in full in `tool-results/inv/c0_0.json`"),
            "{format}: {text}"
        );
        assert!(text.contains("workspace_read_file"), "{format}");
        assert!(
            text.contains(&"r".repeat(4000)),
            "{format}: the newer large result stays"
        );
        assert_eq!(trim.history.len(), h.len(), "{format}");
    }
}

#[test]
fn oldest_turns_are_dropped_whole_when_externalising_is_not_enough() {
    for format in ProviderFormat::ALL {
        // Small results cannot be externalised; only dropping helps.
        let steps = [
            Step::Calls(vec![150, 150]),
            Step::User(100),
            Step::Calls(vec![150]),
            Step::Calls(vec![150]),
        ];
        let (h, stored) = history(format, &steps, true);
        let one_turn = total(&turn(format, &["x".into()], &["y".repeat(150)], true), 0);
        let trim = fit(
            format,
            &h,
            &budget(100 + estimate_tokens(&h[0]) + one_turn + 80, &stored),
        )
        .unwrap();
        assert!(trim.fits, "{format}: {}", trim.after_tokens);
        assert!(trim.externalised.is_empty());
        assert_eq!(trim.dropped_turns, 3, "{format}");
        assert_eq!(
            trim.history.len(),
            2 + turn(format, &["x".into()], &["y".into()], true).len()
        );
        assert!(
            is_note(&trim.history[1]),
            "{format}: the note follows the first message"
        );
        let (last_calls, _) = ids(format, &trim.history[trim.history.len() - 2]);
        let (_, last_answers) = ids(format, trim.history.last().unwrap());
        assert_eq!(
            last_calls,
            vec!["c3_0".to_owned()],
            "{format}: the newest turn stays"
        );
        assert_eq!(last_answers, vec!["c3_0".to_owned()], "{format}");
    }
}

#[test]
fn gemini_answers_without_ids_are_found_by_their_text() {
    let (h, stored) = history(
        ProviderFormat::Gemini,
        &[Step::Calls(vec![5000]), Step::Calls(vec![10])],
        false,
    );
    let trim = fit(
        ProviderFormat::Gemini,
        &h,
        &budget(total(&h, 100) - 100, &stored),
    )
    .unwrap();
    assert_eq!(trim.externalised.len(), 1);
    assert_eq!(trim.externalised[0].path, "tool-results/inv/c0_0.json");
    assert_eq!(trim.externalised[0].call_id, "");
    assert!(
        trim.history[2]["parts"][0]["functionResponse"]["response"]["output"]
            .as_str()
            .unwrap()
            .contains("c0_0.json")
    );
}

#[test]
fn a_history_that_fits_is_left_alone() {
    let (h, stored) = history(ProviderFormat::OpenAiChat, &[Step::Calls(vec![5000])], true);
    assert!(
        fit(
            ProviderFormat::OpenAiChat,
            &h,
            &budget(total(&h, 100), &stored)
        )
        .is_none()
    );
}

#[test]
fn when_nothing_can_make_it_fit_the_first_message_and_the_newest_turn_remain() {
    for format in ProviderFormat::ALL {
        let (h, stored) = history(
            format,
            &[Step::Calls(vec![100]), Step::Calls(vec![100])],
            true,
        );
        let trim = fit(format, &h, &budget(10, &stored)).unwrap();
        assert!(!trim.fits);
        assert_eq!(trim.dropped_turns, 1, "{format}");
        assert_eq!(trim.history[0], h[0]);
        assert_eq!(trim.history.last(), h.last(), "{format}");
    }
}
