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
