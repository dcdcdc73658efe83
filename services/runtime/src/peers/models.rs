//! The model port over HTTP: [`ModelClient`] (OpenAI-compatible, Anthropic, Gemini and the
//! in-process scripted provider) as the runtime's [`ModelCall`].

use async_trait::async_trait;
use serde_json::{Map, Value};
use toolplane_core::egress::EgressPolicy;

use crate::context::ports::{ModelCall, Models};
use crate::model::provider::{CallError, Endpoint, ModelClient};

/// Model clients over HTTP, one per invocation, under the egress policy of the run's cell.
#[derive(Debug, Default)]
pub struct HttpModels {
    pub egress: EgressPolicy,
}

impl Models for HttpModels {
    fn client(&self, cell: &str, endpoint: Endpoint) -> Result<Box<dyn ModelCall>, String> {
        Ok(Box::new(ModelClient::new(
            endpoint,
            &self.egress.for_cell(cell),
        )?))
    }
}

#[async_trait]
impl ModelCall for ModelClient {
    fn endpoint(&self) -> &Endpoint {
        ModelClient::endpoint(self)
    }

    async fn call(
        &self,
        system: &str,
        history: &[Value],
        tools: &Map<String, Value>,
        round: u32,
    ) -> Result<String, CallError> {
        ModelClient::call(self, system, history, tools, round).await
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
        let models = HttpModels { egress };
        let url = "http://10.0.3.7/v1";
        models.client("a", endpoint(url)).unwrap();
        for cell in ["b", "default"] {
            let err = models.client(cell, endpoint(url)).err().unwrap();
            assert!(err.starts_with("model.egress_denied: "), "{cell}: {err}");
        }
    }
}
