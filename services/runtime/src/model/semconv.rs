//! How a model call is named in the OpenTelemetry GenAI semantic conventions: the provider's
//! well-known `gen_ai.provider.name` and the `server.address`/`server.port` an endpoint is
//! called on; and the `gen_ai.tool.type` of the tools a model calls (docs/deploy.md, "Traces").
//! Pure: no call is made here.

use toolplane_core::ToolId;
use toolplane_core::id::Provider;
use toolplane_core::profile::ModelKind;

use super::provider::Endpoint;

/// `gen_ai.provider.name` of an endpoint: the conventions' well-known value for its kind
/// (`openai`, `anthropic`, `gcp.gemini`, or `gcp.vertex_ai` for a Vertex AI host), and the custom
/// `toolplane.scripted` for the in-process scripted provider. An OpenAI-compatible server (vLLM,
/// Ollama, …) is reported as `openai`, the API it speaks, as OpenAI's own instrumentations do.
pub fn provider_name(endpoint: &Endpoint) -> &'static str {
    match endpoint.kind {
        ModelKind::OpenaiCompatible => "openai",
        ModelKind::Anthropic => "anthropic",
        ModelKind::Gemini => match server(endpoint) {
            Some((host, _)) if host.ends_with("aiplatform.googleapis.com") => "gcp.vertex_ai",
            _ => "gcp.gemini",
        },
        ModelKind::Scripted => "toolplane.scripted",
    }
}

/// `server.address` and `server.port` of the endpoint's base URL (the scheme's default port when
/// the URL names none); `None` for the scripted provider, which connects nowhere.
pub fn server(endpoint: &Endpoint) -> Option<(String, u16)> {
    if endpoint.kind == ModelKind::Scripted {
        return None;
    }
    let url = reqwest::Url::parse(&endpoint.base_url).ok()?;
    let host = url
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']');
    Some((host.to_owned(), url.port_or_known_default()?))
}

/// `gen_ai.tool.type` of a tool: `function` for an external host's tool (`ext/…`), which the
/// caller's side executes; `extension` for what the plane executes itself on the agent's side —
/// builtins, MCP servers' tools and delegation to other agents.
pub fn tool_type(tool: &ToolId) -> &'static str {
    match tool.provider() {
        Provider::Ext(_) => "function",
        Provider::Builtin | Provider::Mcp(_) | Provider::Agent(_) => "extension",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use serde_json::Map;
    use toolplane_model::ProviderFormat;

    use super::*;

    fn endpoint(kind: ModelKind, base_url: &str) -> Endpoint {
        Endpoint {
            kind,
            base_url: base_url.into(),
            model: "m".into(),
            api_key: None,
            api_key_env: None,
            timeout: Duration::from_secs(1),
            max_retries: 0,
            max_output_tokens: None,
            temperature: None,
            extra_body: Map::new(),
            headers: Vec::new(),
            script: None,
            format: ProviderFormat::OpenAiChat,
            context_budget_tokens: None,
        }
    }

    #[test]
    fn each_kind_has_its_well_known_provider_name_and_server() {
        let cases = [
            (
                ModelKind::OpenaiCompatible,
                "https://api.openai.com/v1",
                "openai",
                Some(("api.openai.com", 443)),
            ),
            (
                ModelKind::OpenaiCompatible,
                "http://127.0.0.1:8000/v1",
                "openai",
                Some(("127.0.0.1", 8000)),
            ),
            (
                ModelKind::Anthropic,
                "https://api.anthropic.com",
                "anthropic",
                Some(("api.anthropic.com", 443)),
            ),
            (
                ModelKind::Gemini,
                "https://generativelanguage.googleapis.com",
                "gcp.gemini",
                Some(("generativelanguage.googleapis.com", 443)),
            ),
            (
                ModelKind::Gemini,
                "https://europe-west4-aiplatform.googleapis.com/v1/projects/p",
                "gcp.vertex_ai",
                Some(("europe-west4-aiplatform.googleapis.com", 443)),
            ),
            (
                ModelKind::OpenaiCompatible,
                "http://[::1]:9/v1",
                "openai",
                Some(("::1", 9)),
            ),
            (ModelKind::Scripted, "", "toolplane.scripted", None),
        ];
        for (kind, url, provider, srv) in cases {
            let e = endpoint(kind, url);
            assert_eq!(provider_name(&e), provider, "{url}");
            assert_eq!(
                server(&e).as_ref().map(|(h, p)| (h.as_str(), *p)),
                srv,
                "{url}"
            );
        }
    }

    #[test]
    fn host_tools_are_functions_and_the_planes_own_are_extensions() {
        for (id, want) in [
            ("ext/crm:lookup_customer", "function"),
            ("builtin:workspace.read_file", "extension"),
            (
                "mcp/0b6c1f9e-2f0b-4c1e-9a57-3d1c2b4a5e6f:search",
                "extension",
            ),
            ("agent/reviewer:run", "extension"),
        ] {
            assert_eq!(tool_type(&ToolId::parse(id).unwrap()), want, "{id}");
        }
    }
}
