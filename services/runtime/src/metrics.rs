//! The runtime's metrics (docs/deploy.md, "Metrics"), served as Prometheus text on its HTTP port's
//! `/metrics` (`toolplane_telemetry::metrics::MetricsServer`). The names and labels are the contract with the provisioned dashboard.

use std::sync::Arc;

use toolplane_core::error::{ErrorClass, ErrorCode};
use toolplane_telemetry::metrics::{Counter, Histogram, Registry};

/// The runtime's metric families.
#[derive(Debug, Clone)]
pub struct RuntimeMetrics {
    pub registry: Arc<Registry>,
    tool_calls: Counter,
    tool_call_duration: Histogram,
    gate_refusals: Counter,
    model_call_duration: Histogram,
    model_call_retries: Counter,
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
