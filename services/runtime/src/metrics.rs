//! The runtime's metrics (docs/deploy.md, "Metrics"), served as Prometheus text on its HTTP port's
//! `/metrics` (`toolplane_telemetry::metrics::MetricsServer`). The names and labels are the
//! contract with the provisioned dashboard; the model calls' `gen_ai.client.*` histograms are the
//! OpenTelemetry GenAI conventions' own.

use std::sync::Arc;

use toolplane_core::error::{ErrorClass, ErrorCode};
use toolplane_telemetry::metrics::{Counter, Histogram, Registry};

use crate::model::provider::{CallError, Endpoint};
use crate::model::semconv;

/// The bucket bounds the GenAI conventions advise for `gen_ai.client.token.usage`.
static TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
/// The bucket bounds (seconds) the GenAI conventions advise for `gen_ai.client.operation.duration`.
static DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// The runtime's metric families.
#[derive(Debug, Clone)]
pub struct RuntimeMetrics {
    pub registry: Arc<Registry>,
    tool_calls: Counter,
    tool_call_duration: Histogram,
    gate_refusals: Counter,
    model_call_duration: Histogram,
    model_call_retries: Counter,
    gen_ai_duration: Histogram,
    gen_ai_tokens: Histogram,
}

impl Default for RuntimeMetrics {
    fn default() -> Self {
        let registry = Arc::new(Registry::new());
        toolplane_telemetry::metrics::export(&registry, "toolplane-runtime");
        RuntimeMetrics {
            tool_calls: registry.counter(
                "toolplane_tool_calls_total",
                "Tool calls that passed the gate, by tool, source and outcome.",
                &["tool", "source", "outcome"],
            ),
            tool_call_duration: registry.histogram(
                "toolplane_tool_call_duration_seconds",
                "Time from the gate to the verified result of a tool call.",
                &["tool", "source"],
            ),
            gate_refusals: registry.counter(
                "toolplane_gate_refusals_total",
                "Calls the request gate refused, by the refusal's error code.",
                &["reason"],
            ),
            model_call_duration: registry.histogram(
                "toolplane_model_call_duration_seconds",
                "One model call attempt, by provider and outcome.",
                &["provider", "outcome"],
            ),
            model_call_retries: registry.counter(
                "toolplane_model_call_retries_total",
                "Model calls retried (408, 429, 5xx, connection errors), by provider.",
                &["provider"],
            ),
            gen_ai_duration: registry.histogram_with_buckets(
                "gen_ai.client.operation.duration",
                "GenAI operation duration.",
                &[
                    "gen_ai.operation.name",
                    "gen_ai.provider.name",
                    "gen_ai.request.model",
                    "gen_ai.response.model",
                    "server.address",
                    "error.type",
                ],
                "s",
                &DURATION_BUCKETS,
            ),
            gen_ai_tokens: registry.histogram_with_buckets(
                "gen_ai.client.token.usage",
                "Number of input and output tokens used.",
                &[
                    "gen_ai.operation.name",
                    "gen_ai.provider.name",
                    "gen_ai.request.model",
                    "gen_ai.response.model",
                    "server.address",
                    "gen_ai.token.type",
                ],
                "{token}",
                &TOKEN_BUCKETS,
            ),
            registry,
        }
    }
}

/// `ok`, or the class of a result's error code (`recoverable`, `policy_denied`, …).
pub fn outcome(error_code: Option<&str>) -> &'static str {
    match error_code {
        None => "ok",
        Some(code) => ErrorCode::lookup(code)
            .map(|c| c.class())
            .unwrap_or(ErrorClass::Recoverable)
            .as_str(),
    }
}

impl RuntimeMetrics {
    pub fn tool_call(&self, tool: &str, source: &str, error_code: Option<&str>, seconds: f64) {
        self.tool_calls.inc(&[tool, source, outcome(error_code)]);
        self.tool_call_duration.observe(&[tool, source], seconds);
    }

    pub fn gate_refusal(&self, reason: &str) {
        self.gate_refusals.inc(&[reason]);
    }

    pub fn model_call(&self, provider: &str, ok: bool, seconds: f64) {
        self.model_call_duration
            .observe(&[provider, if ok { "ok" } else { "error" }], seconds);
    }

    pub fn model_retry(&self, provider: &str) {
        self.model_call_retries.inc(&[provider]);
    }
}

impl RuntimeMetrics {
    /// One model call attempt (`chat`) after the GenAI conventions: its duration, with
    /// `error.type` (the HTTP status, or `transport`) when it failed, and the input and output
    /// tokens its response reports. An attribute the call does not have (a response model, a
    /// server for the scripted provider) is the empty string.
    pub fn gen_ai_call(&self, endpoint: &Endpoint, result: Result<&str, &CallError>, seconds: f64) {
        let provider = semconv::provider_name(endpoint);
        let server = semconv::server(endpoint)
            .map(|(host, _)| host)
            .unwrap_or_default();
        let (facts, error_type) = match result {
            Ok(body) => (
                serde_json::from_str::<serde_json::Value>(body)
                    .map(|v| toolplane_model::response::facts(endpoint.format(), &v))
                    .unwrap_or_default(),
                String::new(),
            ),
            Err(e) => (
                toolplane_model::response::ResponseFacts::default(),
                e.status
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "transport".into()),
            ),
        };
        let response_model = facts.model.as_deref().unwrap_or("");
        let (request_model, server) = (endpoint.model.as_str(), server.as_str());
        self.gen_ai_duration.observe(
            &[
                "chat",
                provider,
                request_model,
                response_model,
                server,
                &error_type,
            ],
            seconds,
        );
        if let Some(usage) = facts.usage {
            for (kind, n) in [
                ("input", usage.input_tokens),
                ("output", usage.output_tokens),
            ] {
                self.gen_ai_tokens.observe(
                    &[
                        "chat",
                        provider,
                        request_model,
                        response_model,
                        server,
                        kind,
                    ],
                    n as f64,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use toolplane_core::profile::ModelKind;
    use toolplane_model::ProviderFormat;

    use super::*;

    fn endpoint() -> Endpoint {
        Endpoint {
            kind: ModelKind::OpenaiCompatible,
            base_url: "http://127.0.0.1:8000/v1".into(),
            model: "alias".into(),
            api_key: None,
            api_key_env: None,
            timeout: Duration::from_secs(1),
            max_retries: 0,
            max_output_tokens: None,
            temperature: None,
            extra_body: serde_json::Map::new(),
            headers: Vec::new(),
            script: None,
            format: ProviderFormat::OpenAiChat,
            context_budget_tokens: None,
        }
    }

    #[test]
    fn a_model_call_records_its_duration_and_tokens_with_the_genai_attributes() {
        let m = RuntimeMetrics::default();
        let body = r#"{"id":"c1","model":"served-model","choices":[],"usage":{"prompt_tokens":400,"completion_tokens":100,"total_tokens":500}}"#;
        m.gen_ai_call(&endpoint(), Ok(body), 0.3);
        let failed = CallError {
            retryable: true,
            status: Some(429),
            message: "slow down".into(),
            retry_after: None,
        };
        m.gen_ai_call(&endpoint(), Err(&failed), 0.01);
        let text = m.registry.render();
        let labels = r#"gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="alias""#;
        for line in [
            format!(
                "gen_ai_client_operation_duration_seconds_count{{{labels},gen_ai_response_model=\"served-model\",server_address=\"127.0.0.1\",error_type=\"\"}} 1\n"
            ),
            format!(
                "gen_ai_client_operation_duration_seconds_count{{{labels},gen_ai_response_model=\"\",server_address=\"127.0.0.1\",error_type=\"429\"}} 1\n"
            ),
            format!(
                "gen_ai_client_token_usage_sum{{{labels},gen_ai_response_model=\"served-model\",server_address=\"127.0.0.1\",gen_ai_token_type=\"input\"}} 400.0\n"
            ),
            format!(
                "gen_ai_client_token_usage_sum{{{labels},gen_ai_response_model=\"served-model\",server_address=\"127.0.0.1\",gen_ai_token_type=\"output\"}} 100.0\n"
            ),
        ] {
            assert!(text.contains(&line), "{line} in\n{text}");
        }
    }
}
