//! The model port over HTTP: [`ModelClient`] (OpenAI-compatible, Anthropic, Gemini and the
//! in-process scripted provider) as the runtime's [`ModelCall`].

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use async_trait::async_trait;
use serde_json::{Map, Value};
use toolplane_core::egress::EgressPolicy;

use crate::context::ports::{ModelCall, Models};
use crate::metrics::RuntimeMetrics;
use crate::model::provider::{CallError, Endpoint, ModelClient};

/// Model clients over HTTP, one per invocation, under the egress policy of the run's cell. The
/// HTTP client underneath is one per cell for the process's life (the policy of a cell does not
/// change while the runtime runs), so every invocation of a cell reuses its pooled connections while
/// each cell keeps its own checking resolver and redirect rule (docs/egress.md).
#[derive(Debug, Default)]
pub struct HttpModels {
    egress: EgressPolicy,
    shared: Mutex<HashMap<String, reqwest::Client>>,
    metrics: OnceLock<RuntimeMetrics>,
}

impl HttpModels {
    pub fn new(egress: EgressPolicy) -> Self {
        HttpModels {
            egress,
            shared: Mutex::new(HashMap::new()),
            metrics: OnceLock::new(),
        }
    }

    /// Records every model call of the clients made from now on into `metrics` (the
    /// `gen_ai.client.*` histograms).
    pub fn record_into(&self, metrics: RuntimeMetrics) {
        let _ = self.metrics.set(metrics);
    }

    /// The cell's shared HTTP client, built on first use.
    fn http(&self, cell: &str, egress: &EgressPolicy) -> Result<reqwest::Client, String> {
        let mut shared = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(http) = shared.get(cell) {
            return Ok(http.clone());
        }
        let http = ModelClient::http_for(egress)?;
        shared.insert(cell.to_owned(), http.clone());
        Ok(http)
    }
}

impl Models for HttpModels {
    fn client(&self, cell: &str, endpoint: Endpoint) -> Result<Box<dyn ModelCall>, String> {
        let egress = self.egress.for_cell(cell);
        // Refused before a client is built for a cell that may never reach anything.
        endpoint.check_egress(&egress)?;
        let http = self.http(cell, &egress)?;
        Ok(Box::new(Measured {
            client: ModelClient::with_http(endpoint, &egress, http)?,
            metrics: self.metrics.get().cloned(),
        }))
    }
}

/// A model client whose attempts are recorded in the runtime's GenAI metrics.
#[derive(Debug)]
struct Measured {
    client: ModelClient,
    metrics: Option<RuntimeMetrics>,
}

#[async_trait]
impl ModelCall for Measured {
    fn endpoint(&self) -> &Endpoint {
        self.client.endpoint()
    }

    fn resumable_endpoint(&self) -> Endpoint {
        self.client.resumable_endpoint()
    }

    async fn call(
        &self,
        system: &str,
        history: &[Value],
        tools: &Map<String, Value>,
        round: u32,
    ) -> Result<String, CallError> {
        let started = std::time::Instant::now();
        let result = self.client.call(system, history, tools, round).await;
        if let Some(m) = &self.metrics {
            m.gen_ai_call(
                self.client.endpoint(),
                result.as_ref().map(String::as_str),
                started.elapsed().as_secs_f64(),
            );
        }
        result
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::time::Duration;

    use toolplane_core::egress::PrivateNetworks;
    use toolplane_core::profile::ModelEndpoint as ProfileEndpoint;

    use super::*;
    use crate::model::provider::Endpoint;

    fn endpoint(base_url: &str) -> Endpoint {
        let e: ProfileEndpoint = serde_json::from_value(
            serde_json::json!({"kind": "openai-compatible", "baseUrl": base_url, "model": "m"}),
        )
        .unwrap();
        Endpoint::from_profile(&e, Duration::from_secs(5), 0).unwrap()
    }

    fn deployed(cidrs: &[&str]) -> EgressPolicy {
        EgressPolicy {
            private_networks: PrivateNetworks::Deny,
            allowed_cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            ..Default::default()
        }
    }

    /// Per-cell egress: a run of cell `a` gets a model client for an internal endpoint its cell
    /// allows; a run of cell `b` is refused the same endpoint (docs/egress.md, "Per cell").
    #[test]
    fn a_cell_reaches_the_model_endpoint_its_own_egress_allows() {
        let mut egress = deployed(&[]);
        egress.cells.insert(
            "a".into(),
            toolplane_core::egress::CellEgress {
                allowed_cidrs: vec!["10.0.3.0/24".parse().unwrap()],
                ..Default::default()
            },
        );
        let models = HttpModels::new(egress);
        let url = "http://10.0.3.7/v1";
        models.client("a", endpoint(url)).unwrap();
        for cell in ["b", "default"] {
            let err = models.client(cell, endpoint(url)).err().unwrap();
            assert!(err.starts_with("model.egress_denied: "), "{cell}: {err}");
        }
    }
}
