//! The MCP result projection (`projection::project`): what the model reads of an arbitrary
//! `CallToolResult` an MCP server sent.
//!
//! Invariants: `isError` and `structuredContent` come through as sent; the text of every text
//! block is in the content unless it repeats the structured content; `_meta` never reaches the
//! model; the content is never empty.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use toolplane_mcp_proxy::projection::project;

const MARKER: &str = "host-only-meta-7f3a";

fuzz_target!(|text: &str| {
    let Ok(mut result) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let _ = project(&result);
    let Some(obj) = result.as_object_mut() else {
        return;
    };
    if !text.contains(MARKER) {
        obj.insert("_meta".into(), json!({ "secret": MARKER }));
    }
    let p = project(&result);
    assert!(!p.content.is_empty());
    assert_eq!(
        p.is_error,
        result
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    );
    let structured = result.get("structuredContent").filter(|v| !v.is_null());
    assert_eq!(p.structured.as_ref(), structured);
    if !text.contains(MARKER) {
        assert!(
            !p.content.contains(MARKER),
            "_meta reached the model: {text}"
        );
    }
    let blocks = result.get("content").and_then(Value::as_array);
    for block in blocks.into_iter().flatten() {
        if block.get("type").and_then(Value::as_str) != Some("text") {
            continue;
        }
        let t = block.get("text").and_then(Value::as_str).unwrap_or("");
        let repeats =
            structured.is_some_and(|s| serde_json::from_str::<Value>(t).is_ok_and(|v| &v == s));
        if !repeats {
            assert!(p.content.contains(t), "text block {t:?} lost from {text}");
        }
    }
});
