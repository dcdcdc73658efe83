//! Plain-text tool descriptions for prompts (`DescribeTools`, `GET /tools/descriptions`).
//!
//! Owns the text form: a header line with the canonical id and title, the description, and the
//! arguments read off the JSON Schema (type, whether required, bounds, allowed values, nested
//! items). It never invents facts the schema does not state and never shows aliases, which
//! belong to an invocation.

use std::fmt::Write;

use serde_json::Value;

/// Deepest nesting of arguments rendered.
const MAX_DEPTH: usize = 4;
/// Most properties rendered per object.
const MAX_PROPERTIES: usize = 100;

/// One tool to describe.
#[derive(Debug, Clone, Copy)]
pub struct Describe<'a> {
    pub id: &'a str,
    pub title: Option<&'a str>,
    pub description: &'a str,
    pub input_schema: &'a Value,
}

/// The description and argument summary of one tool (without its header line).
pub fn tool_text(d: &Describe<'_>) -> String {
    let mut out = String::new();
    let description = d.description.trim();
    if !description.is_empty() {
        out.push_str(description);
        out.push('\n');
    }
    let mut args = String::new();
    properties(&mut args, d.input_schema, 0);
    if args.is_empty() {
        out.push_str("Arguments: none.");
    } else {
        out.push_str("Arguments:\n");
        out.push_str(args.trim_end());
    }
    out
}

/// The header line of one tool: `<id> — <title>`, or the id alone.
pub fn header(d: &Describe<'_>) -> String {
    match d.title.map(str::trim).filter(|t| !t.is_empty()) {
        Some(title) => format!("{} — {title}", d.id),
        None => d.id.to_owned(),
    }
}

/// Every tool's block (header, description, arguments), separated by blank lines.
pub fn render(tools: &[Describe<'_>]) -> String {
    let mut out = String::new();
    for (i, d) in tools.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&header(d));
        out.push('\n');
        out.push_str(&tool_text(d));
        out.push('\n');
    }
    out
}

fn properties(out: &mut String, schema: &Value, depth: usize) {
    if depth >= MAX_DEPTH {
        return;
    }
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let indent = "  ".repeat(depth);
    for (name, prop) in props.iter().take(MAX_PROPERTIES) {
        let mut facts = vec![type_of(prop)];
        if required.contains(&name.as_str()) {
            facts.push("required".to_owned());
        }
        facts.extend(bounds(prop));
        if let Some(values) = prop.get("enum").and_then(Value::as_array) {
            let list: Vec<String> = values.iter().map(Value::to_string).collect();
            facts.push(format!("one of {}", list.join(", ")));
        }
        if let Some(default) = prop.get("default") {
            facts.push(format!("default {default}"));
        }
        let _ = write!(out, "{indent}- {name} ({})", facts.join(", "));
        match prop
            .get("description")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|d| !d.is_empty())
        {
            Some(desc) => {
                let _ = writeln!(out, ": {}", one_line(desc));
            }
            None => out.push('\n'),
        }
        // Objects and arrays of objects list their own fields one level deeper.
        let nested = if prop.get("properties").is_some() {
            Some(prop)
        } else {
            prop.get("items").filter(|i| i.get("properties").is_some())
        };
        if let Some(nested) = nested {
            properties(out, nested, depth + 1);
        }
    }
    if props.len() > MAX_PROPERTIES {
        let _ = writeln!(
            out,
            "{indent}- … {} more arguments",
            props.len() - MAX_PROPERTIES
        );
    }
}

fn type_name(schema: &Value) -> String {
    match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ if schema.get("properties").is_some() => "object".to_owned(),
        _ if schema.get("enum").is_some() => "value".to_owned(),
        _ => "any".to_owned(),
    }
}

fn type_of(schema: &Value) -> String {
    let t = type_name(schema);
    if t == "array" {
        match schema.get("items") {
            Some(items) => {
                let inner = type_name(items);
                if inner == "any" {
                    "array".to_owned()
                } else {
                    format!("array of {inner}s")
                }
            }
            None => "array".to_owned(),
        }
    } else {
        t
    }
}

fn bounds(schema: &Value) -> Vec<String> {
    let pairs = [
        ("minimum", "maximum", ""),
        ("minLength", "maxLength", " characters"),
        ("minItems", "maxItems", " items"),
    ];
    let mut out = Vec::new();
    for (lo, hi, unit) in pairs {
        match (schema.get(lo), schema.get(hi)) {
            (Some(a), Some(b)) => out.push(format!("{a} to {b}{unit}")),
            (Some(a), None) => out.push(format!("at least {a}{unit}")),
            (None, Some(b)) => out.push(format!("at most {b}{unit}")),
            (None, None) => {}
        }
    }
    out
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use expect_test::expect;
    use serde_json::json;

    use super::*;

    #[test]
    fn renders_arguments_from_the_schema() {
        let schema = json!({"type": "object", "properties": {
            "messages": {"type": "array", "minItems": 1, "maxItems": 20, "items": {"type": "object", "properties": {
                "index": {"type": "integer", "minimum": 0, "description": "Message index,\n 0-based."}
            }, "required": ["index"]}},
            "mode": {"type": "string", "enum": ["replace", "append"], "default": "replace"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "anything": {}
        }, "required": ["messages"]});
        let text = render(&[
            Describe {
                id: "ext/h:read",
                title: Some("Read"),
                description: "Reads things.",
                input_schema: &schema,
            },
            Describe {
                id: "ext/h:ping",
                title: None,
                description: "",
                input_schema: &json!({"type": "object"}),
            },
        ]);
        expect![[r#"
            ext/h:read — Read
            Reads things.
            Arguments:
            - messages (array of objects, required, 1 to 20 items)
              - index (integer, required, at least 0): Message index, 0-based.
            - mode (string, one of "replace", "append", default "replace")
            - tags (array of strings)
            - anything (any)

            ext/h:ping
            Arguments: none.
        "#]]
        .assert_eq(&text);
    }
}
