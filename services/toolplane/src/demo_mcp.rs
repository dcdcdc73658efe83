//! The demo's bundled MCP server, served over stdio by the hidden `toolplane demo-mcp-server`
//! subcommand so that `toolplane up --demo` needs nothing installed: the mcp-proxy starts it
//! through the binary's own path like any other stdio server. Two small text tools, written for
//! a model to call. It must never write anything but MCP messages to stdout.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt as _};
use serde_json::{Value, json};

/// Largest text the tools accept, in characters.
const MAX_TEXT_CHARS: usize = 1_000_000;

/// The demo server: `word_count {text}` and `title_case {text}`.
#[derive(Debug, Clone)]
pub struct DemoServer {
    tools: Arc<Vec<Tool>>,
}

fn text_schema(description: &str) -> Arc<JsonObject> {
    let schema = json!({
        "type": "object",
        "properties": {"text": {"type": "string", "description": description}},
        "required": ["text"],
        "additionalProperties": false
    });
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

impl Default for DemoServer {
    fn default() -> Self {
        let mut word_count = Tool::new(
            "word_count",
            "Count the words, lines and characters of a text. Use it to check the length of a draft.",
            text_schema("The text to count."),
        );
        word_count.title = Some("Count words".to_owned());
        word_count.annotations = Some(ToolAnnotations::new().read_only(true).open_world(false));
        let mut title_case = Tool::new(
            "title_case",
            "Return the text with the first letter of every word in upper case, e.g. for a heading.",
            text_schema("The text to convert."),
        );
        title_case.title = Some("Title case".to_owned());
        title_case.annotations = Some(ToolAnnotations::new().read_only(true).open_world(false));
        DemoServer {
            tools: Arc::new(vec![word_count, title_case]),
        }
    }
}

/// Words, lines and characters of `text`: the facts `word_count` answers with.
pub fn count(text: &str) -> (usize, usize, usize) {
    (
        text.split_whitespace().count(),
        text.lines().count(),
        text.chars().count(),
    )
}

/// Every word's first letter in upper case, the rest kept.
pub fn title_case(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at_word_start = true;
    for c in text.chars() {
        if at_word_start && c.is_alphabetic() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        at_word_start = c.is_whitespace();
    }
    out
}

fn text_argument(request: &CallToolRequestParams) -> Result<String, ErrorData> {
    let text = request
        .arguments
        .as_ref()
        .and_then(|a| a.get("text"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ErrorData::invalid_params(Cow::Borrowed("`text` (a string) is required"), None)
        })?;
    if text.chars().count() > MAX_TEXT_CHARS {
        return Err(ErrorData::invalid_params(
            Cow::Owned(format!("`text` is longer than {MAX_TEXT_CHARS} characters")),
            None,
        ));
    }
    Ok(text.to_owned())
}

impl ServerHandler for DemoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("toolplane-demo", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let result = match request.name.as_ref() {
            "word_count" => {
                let text = text_argument(&request)?;
                let (words, lines, chars) = count(&text);
                let mut result = CallToolResult::success(vec![ContentBlock::text(format!(
                    "{words} words, {lines} lines, {chars} characters"
                ))]);
                result.structured_content =
                    Some(json!({"words": words, "lines": lines, "characters": chars}));
                result
            }
            "title_case" => {
                let text = text_argument(&request)?;
                CallToolResult::success(vec![ContentBlock::text(title_case(&text))])
            }
            other => {
                return Err(ErrorData::invalid_params(
                    Cow::Owned(format!("unknown tool `{other}`")),
                    None,
                ));
            }
        };
        Ok(result.into())
    }
}

/// Serves the demo server over stdin / stdout until the client closes stdin.
pub async fn serve_stdio() -> Result<(), String> {
    let server = DemoServer::default()
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("demo mcp server handshake failed: {e}"))?;
    server
        .waiting()
        .await
        .map_err(|e| format!("demo mcp server failed: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_title_case() {
        assert_eq!(count("one two\nthree"), (3, 2, 13));
        assert_eq!(count(""), (0, 0, 0));
        assert_eq!(title_case("hello wide  world-x é"), "Hello Wide  World-x É");
    }
}
