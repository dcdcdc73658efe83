//! The MCP result projection: what the model reads of an MCP
//! `CallToolResult`.
//!
//! Text content is kept verbatim. Structured content becomes a `## Details` section (`## Error
//! details` when the result is an error) — unless a text block already is the same JSON, in which
//! case that text block is dropped so the model reads the data once. Non-text content the model
//! can act on (images, audio, resource links, binary resources) becomes one line each under
//! `## Notes`; text resources are inlined. `_meta` is host-only and never reaches the model. The
//! full result JSON is kept separately for audit by the caller. Pure: no IO.

use serde_json::Value;

/// What a result projects to.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    /// Model-facing Markdown.
    pub content: String,
    /// The structured content, for the runtime and UIs.
    pub structured: Option<Value>,
    /// The tool reported an error (`isError: true`).
    pub is_error: bool,
}

/// Projects one `CallToolResult` (as JSON) into model-facing Markdown.
pub fn project(result: &Value) -> Projection {
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let structured = result
        .get("structuredContent")
        .filter(|v| !v.is_null())
        .cloned();
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();

    let mut body: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for block in blocks {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "text" => {
                let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                if let Some(s) = &structured
                    && serde_json::from_str::<Value>(text).is_ok_and(|v| &v == s)
                {
                    continue;
                }
                body.push(text.to_owned());
            }
            "resource" => {
                let resource = block.get("resource").unwrap_or(&Value::Null);
                let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("");
                if let Some(text) = resource.get("text").and_then(Value::as_str) {
                    body.push(format!("Resource `{uri}`:\n\n{text}"));
                } else {
                    let mime = resource
                        .get("mimeType")
                        .and_then(Value::as_str)
                        .unwrap_or("application/octet-stream");
                    notes.push(format!("- Binary resource `{uri}` ({mime}) is not shown."));
                }
            }
            "resource_link" => {
                let uri = block.get("uri").and_then(Value::as_str).unwrap_or("");
                let name = block.get("name").and_then(Value::as_str).unwrap_or(uri);
                let mut line = format!("- Resource link `{name}`: {uri}");
                if let Some(d) = block.get("description").and_then(Value::as_str) {
                    line.push_str(&format!(" — {d}"));
                }
                notes.push(line);
            }
            "image" | "audio" => {
                let mime = block
                    .get("mimeType")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown type");
                let len = block
                    .get("data")
                    .and_then(Value::as_str)
                    .map_or(0, |d| d.len() / 4 * 3);
                notes.push(format!(
                    "- The tool returned an {kind} ({mime}, about {len} bytes) that is not shown."
                ));
            }
            other => notes.push(format!(
                "- The tool returned content of type `{}` that is not shown.",
                crate::registration::shown(other)
            )),
        }
    }

    let mut sections: Vec<String> = Vec::new();
    let text = body.join("\n\n");
    if !text.is_empty() {
        sections.push(text);
    }
    if let Some(s) = &structured {
        let heading = if is_error {
            "## Error details"
        } else {
            "## Details"
        };
        sections.push(format!("{heading}\n\n{}", render_json(s)));
    }
    if !notes.is_empty() {
        sections.push(format!("## Notes\n\n{}", notes.join("\n")));
    }
    let content = if sections.is_empty() {
        if is_error {
            "The tool reported an error without details.".to_owned()
        } else {
            "The tool returned no content.".to_owned()
        }
    } else {
        sections.join("\n\n")
    };
    Projection {
        content,
        structured,
        is_error,
    }
}

/// Structured data as Markdown: a fenced, pretty-printed JSON block (scalars inline). Pretty
/// printing indents every value by its depth, so deeply nested data (128 levels, the parser's
/// limit) could print at a hundred times its size; where the pretty form would take more than
/// twice the compact one plus 4 KiB, the compact form is shown instead, and the pretty form is
/// never built past that bound.
fn render_json(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(_) | Value::Bool(_) | Value::Null => v.to_string(),
        _ => {
            let compact = v.to_string();
            let cap = compact.len().saturating_mul(2).saturating_add(PRETTY_SLACK);
            let json = pretty_within(v, cap).unwrap_or(compact);
            format!("```json\n{json}\n```")
        }
    }
}

/// Bytes the pretty form of structured content may take beyond twice its compact form.
const PRETTY_SLACK: usize = 4096;

/// `v` pretty-printed, or `None` when that takes more than `cap` bytes (never allocating past
/// them).
fn pretty_within(v: &Value, cap: usize) -> Option<String> {
    struct Capped {
        out: Vec<u8>,
        cap: usize,
    }
    impl std::io::Write for Capped {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if buf.len() > self.cap.saturating_sub(self.out.len()) {
                return Err(std::io::Error::other("over the cap"));
            }
            self.out.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = Capped {
        out: Vec::new(),
        cap,
    };
    serde_json::to_writer_pretty(&mut w, v).ok()?;
    String::from_utf8(w.out).ok()
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use serde_json::json;

    use super::*;

    fn check(result: Value, expected: Expect) {
        let p = project(&result);
        expected.assert_eq(&format!("is_error={}\n{}", p.is_error, p.content));
    }

    #[test]
    fn text_is_kept_verbatim() {
        check(
            json!({"content": [{"type": "text", "text": "a\n  b"}, {"type": "text", "text": "c"}]}),
            expect![[r#"
                is_error=false
                a
                  b

                c"#]],
        );
    }

    #[test]
    fn structured_same_as_text_is_shown_once() {
        check(
            json!({
                "content": [{"type": "text", "text": "{\"unit\":\"C\",\"temperature\":21.5}"}],
                "structuredContent": {"temperature": 21.5, "unit": "C"}
            }),
            expect![[r#"
                is_error=false
                ## Details

                ```json
                {
                  "temperature": 21.5,
                  "unit": "C"
                }
                ```"#]],
        );
    }

    #[test]
    fn mixed_content_gets_details_and_notes_and_meta_is_hidden() {
        check(
            json!({
                "content": [
                    {"type": "text", "text": "Here is the report."},
                    {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
                    {"type": "resource", "resource": {"uri": "file:///r.txt", "text": "body"}},
                    {"type": "resource", "resource": {"uri": "file:///r.bin", "blob": "AA==", "mimeType": "application/zip"}},
                    {"type": "resource_link", "uri": "file:///x", "name": "x.md", "description": "the spec"}
                ],
                "structuredContent": {"rows": 3},
                "_meta": {"secret": "host only"}
            }),
            expect![[r#"
                is_error=false
                Here is the report.

                Resource `file:///r.txt`:

                body

                ## Details

                ```json
                {
                  "rows": 3
                }
                ```

                ## Notes

                - The tool returned an image (image/png, about 6 bytes) that is not shown.
                - Binary resource `file:///r.bin` (application/zip) is not shown.
                - Resource link `x.md`: file:///x — the spec"#]],
        );
    }

    /// Deeply nested structured content is shown compact rather than indented at every level:
    /// what the model gets stays within a small multiple of what the server sent.
    #[test]
    fn deeply_nested_details_print_within_twice_their_size() {
        let mut nested = json!(vec![0; 20_000]);
        for _ in 0..100 {
            nested = json!([nested]);
        }
        let compact = nested.to_string();
        let p = project(&json!({"structuredContent": {"rows": nested}}));
        assert!(
            p.content.len() < 2 * compact.len() + PRETTY_SLACK,
            "{} bytes for {} sent",
            p.content.len(),
            compact.len()
        );
        assert!(p.content.contains(&compact), "shown compact");
        // Shallow data is still pretty-printed.
        let p = project(&json!({"structuredContent": {"rows": [1, 2]}}));
        assert!(p.content.contains("\n    1,\n"), "{}", p.content);
    }

    #[test]
    fn errors_use_error_details() {
        check(
            json!({
                "content": [{"type": "text", "text": "the widget is broken"}],
                "structuredContent": {"reason": "broken"},
                "isError": true
            }),
            expect![[r#"
                is_error=true
                the widget is broken

                ## Error details

                ```json
                {
                  "reason": "broken"
                }
                ```"#]],
        );
        check(
            json!({"content": [], "isError": true}),
            expect![[r#"
                is_error=true
                The tool reported an error without details."#]],
        );
        check(
            json!({}),
            expect![[r#"
                is_error=false
                The tool returned no content."#]],
        );
    }
}
