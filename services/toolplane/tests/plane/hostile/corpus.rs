//! The hostile-input corpus as the suite reads it: the JSON files next to this module, their
//! generators, each case's expectation per provider format, and one assistant turn in each
//! provider's own shape.

use std::path::Path;

use serde_json::{Value, json};
use toolplane_proto::v1 as pb;

/// What a case must end with.
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// Every call's result is a success.
    Ok,
    /// Every call's result is an error result with this `error_code`.
    Result(String),
    /// The request is refused with this gRPC status, its message starting with this code.
    Status(tonic::Code, String),
}

/// The arguments of a call: a JSON value, or raw text (malformed JSON, duplicate keys, numbers
/// out of range) sent as the provider would carry it.
#[derive(Debug, Clone)]
pub enum Args {
    Value(Value),
    Text(String),
}

#[derive(Debug, Clone)]
pub struct Call {
    pub tool: String,
    pub args: Args,
}

#[derive(Debug)]
pub struct Case {
    /// The corpus file's stem; each file starts in a new run, so that one file's leftovers (large
    /// files, stored results) do not slow the next one's searches.
    pub file: String,
    /// `<file>: <name>`.
    pub name: String,
    pub setup: Vec<Call>,
    pub call: Call,
    /// Call ids of the turn, one call each; `None`: one call with a fresh id.
    pub call_ids: Option<Vec<String>>,
    /// The whole assistant turn as raw text, in place of the encoded calls.
    pub calls_json: Option<String>,
    pub expect: Value,
}

/// Expands the corpus's generators: `{"$repeat": s, "times": n}` is `s` repeated `n` times and
/// `{"$concat": [...]}` the concatenation of its (expanded) strings.
fn expand(v: &Value) -> Value {
    match v {
        Value::Object(m) if m.contains_key("$repeat") => {
            let s = m["$repeat"].as_str().unwrap();
            Value::String(s.repeat(usize::try_from(m["times"].as_u64().unwrap()).unwrap()))
        }
        Value::Object(m) if m.contains_key("$concat") => Value::String(
            m["$concat"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| expand(p).as_str().unwrap().to_owned())
                .collect(),
        ),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), expand(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(expand).collect()),
        other => other.clone(),
    }
}

fn text(v: &Value) -> String {
    expand(v)
        .as_str()
        .expect("a string or a generator")
        .to_owned()
}

fn call_of(default_tool: &str, v: &Value) -> Call {
    let tool = v.get("tool").map_or_else(|| default_tool.to_owned(), text);
    let args = match (v.get("args"), v.get("args_text")) {
        (_, Some(t)) => Args::Text(text(t)),
        (Some(a), None) => Args::Value(expand(a)),
        (None, None) => Args::Value(json!({})),
    };
    Call { tool, args }
}

pub fn corpus() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plane/hostile");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for file in files {
        let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let tool = doc["tool"].as_str().unwrap();
        for c in doc["cases"].as_array().unwrap() {
            cases.push(Case {
                file: stem.clone(),
                name: format!("{stem}: {}", c["name"].as_str().unwrap()),
                setup: c
                    .get("setup")
                    .and_then(Value::as_array)
                    .map(|s| s.iter().map(|x| call_of(tool, x)).collect())
                    .unwrap_or_default(),
                call: call_of(tool, c),
                call_ids: c.get("call_ids").map(|ids| match ids {
                    Value::Number(n) => (0..n.as_u64().unwrap())
                        .map(|i| format!("many_{i}"))
                        .collect(),
                    ids => ids.as_array().unwrap().iter().map(text).collect(),
                }),
                calls_json: c.get("calls_json").map(text),
                expect: c.clone(),
            });
        }
    }
    cases
}

fn code_named(name: &str) -> tonic::Code {
    match name {
        "INVALID_ARGUMENT" => tonic::Code::InvalidArgument,
        "FAILED_PRECONDITION" => tonic::Code::FailedPrecondition,
        "OUT_OF_RANGE" => tonic::Code::OutOfRange,
        "RESOURCE_EXHAUSTED" => tonic::Code::ResourceExhausted,
        other => panic!("unknown status {other} in the corpus"),
    }
}

impl Case {
    /// The expectation in `format`: the case's `expect` / `status`, or its `by_format` override.
    pub fn expect(&self, format: &str) -> Expect {
        let v = self
            .expect
            .get("by_format")
            .and_then(|b| b.get(format))
            .unwrap_or(&self.expect);
        let code = v["expect"].as_str().unwrap_or_else(|| {
            panic!("{}: no `expect`", self.name);
        });
        match (code, v.get("status").and_then(Value::as_str)) {
            ("ok", None) => Expect::Ok,
            (code, None) => Expect::Result(code.to_owned()),
            (code, Some(status)) => Expect::Status(code_named(status), code.to_owned()),
        }
    }
}

/// Stands for raw argument text in a value-carrying format until the body is serialised.
fn marker(i: usize) -> String {
    format!("@@hostile-raw-arguments-{i}@@")
}

/// One assistant turn calling `calls` (`(id, tool, args)`) in `format`, as JSON text. Raw argument
/// text goes in verbatim: as the `arguments` string of the OpenAI formats, and spliced into the
/// body where Anthropic and Gemini carry a JSON value.
pub fn turn_json(format: pb::ProviderFormat, calls: &[(String, &Call)]) -> String {
    let as_text = |a: &Args| match a {
        Args::Value(v) => v.to_string(),
        Args::Text(t) => t.clone(),
    };
    let as_value = |i: usize, a: &Args| match a {
        Args::Value(v) => v.clone(),
        Args::Text(_) => Value::String(marker(i)),
    };
    let body = match format {
        pb::ProviderFormat::OpenaiChat => json!({"role": "assistant", "content": null, "tool_calls": calls.iter().map(|(id, c)| json!({"id": id, "type": "function", "function": {"name": c.tool, "arguments": as_text(&c.args)}})).collect::<Vec<_>>()}),
        pb::ProviderFormat::OpenaiResponses => Value::Array(calls.iter().enumerate().map(|(i, (id, c))| json!({"type": "function_call", "id": format!("fc_{i}"), "call_id": id, "name": c.tool, "arguments": as_text(&c.args)})).collect()),
        pb::ProviderFormat::AnthropicMessages => json!({"role": "assistant", "content": calls.iter().enumerate().map(|(i, (id, c))| json!({"type": "tool_use", "id": id, "name": c.tool, "input": as_value(i, &c.args)})).collect::<Vec<_>>()}),
        _ => json!({"role": "model", "parts": calls.iter().enumerate().map(|(i, (id, c))| {
            let mut call = json!({"name": c.tool, "args": as_value(i, &c.args)});
            if !id.is_empty() {
                call["id"] = json!(id);
            }
            json!({"functionCall": call})
        }).collect::<Vec<_>>()}),
    };
    let mut out = body.to_string();
    if matches!(
        format,
        pb::ProviderFormat::AnthropicMessages | pb::ProviderFormat::Gemini
    ) {
        for (i, (_, c)) in calls.iter().enumerate() {
            if let Args::Text(t) = &c.args {
                out = out.replace(&format!("\"{}\"", marker(i)), t);
            }
        }
    }
    out
}
