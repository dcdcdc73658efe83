//! Model endpoints for the runtime-driven loop: OpenAI-compatible servers speaking Chat
//! Completions (also vLLM, Ollama, llama.cpp servers) or Responses, Anthropic Messages, Gemini
//! `generateContent`, and a scripted provider that replays a file of model turns for offline runs
//! and tests.
//!
//! A provider only moves bytes: request bodies are assembled from the provider-native history and
//! the turn's tool fields (`toolplane-model` owns the wire formats), and the response body is
//! returned as text for the caller to store and decode. Whether a failure is worth retrying is
//! decided here (timeouts, connection errors, 429 and 5xx are; other statuses are not), and so is
//! which wire format an endpoint speaks ([`resolve_format`]).
//!
//! This module is the client and its errors; the endpoint description lives in `endpoint`, request
//! bodies in `request`, the scripted provider in `script`, and they are re-exported here.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolplane_core::egress::EgressPolicy;
use toolplane_core::error::with_causes;
use toolplane_core::profile::ModelKind;
use toolplane_model::ProviderFormat;

use super::{request, script};

pub use super::endpoint::{Endpoint, check_api_key_env, check_script_path, resolve_format};
pub use super::script::parse_script;
pub use toolplane_model::user_message;

/// Largest response body accepted from a model endpoint; a body is read chunk by chunk and refused
/// as soon as it passes this, before it is all in memory.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// A failed model call.
#[derive(Debug, Clone)]
pub struct CallError {
    pub retryable: bool,
    pub status: Option<u16>,
    pub message: String,
    /// How long the endpoint asked to wait before the next attempt (`Retry-After`).
    pub retry_after: Option<Duration>,
}

/// A model client for one invocation.
#[derive(Debug)]
pub struct ModelClient {
    endpoint: Endpoint,
    http: reqwest::Client,
    script_pos: Mutex<usize>,
}

impl ModelClient {
    /// A client for `endpoint` whose connections and redirects follow `egress`: a base URL the
    /// policy refuses is refused here, before any call (`model.egress_denied`).
    pub fn new(endpoint: Endpoint, egress: &EgressPolicy) -> Result<Self, String> {
        Self::with_http(endpoint, egress, Self::http_for(egress)?)
    }

    /// A client for `endpoint` over `http`, a client [`Self::http_for`] built for `egress` (shared
    /// by every endpoint under that policy, so connections are reused across invocations).
    pub fn with_http(
        endpoint: Endpoint,
        egress: &EgressPolicy,
        http: reqwest::Client,
    ) -> Result<Self, String> {
        endpoint.check_egress(egress)?;
        Ok(ModelClient {
            endpoint,
            http,
            script_pos: Mutex::new(0),
        })
    }

    /// An HTTP client whose connections and redirects follow `egress`. Timeouts are per request
    /// (the endpoint's), so one client serves endpoints of any timeout.
    pub fn http_for(egress: &EgressPolicy) -> Result<reqwest::Client, String> {
        super::egress::apply(egress, reqwest::Client::builder())
            .build()
            .map_err(|e| format!("building the http client: {e}"))
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The endpoint a loop resumed after a restart goes on with: this one, and for a scripted
    /// model only the turns it has not played yet.
    pub fn resumable_endpoint(&self) -> Endpoint {
        let mut e = self.endpoint.clone();
        if let Some(turns) = e.script.as_mut() {
            let played = match self.script_pos.lock() {
                Ok(p) => *p,
                Err(p) => *p.into_inner(),
            };
            turns.drain(..played.min(turns.len()));
        }
        e
    }

    /// One attempt: the request body from the system prompt, the history and the turn's tool
    /// fields; returns the response body.
    pub async fn call(
        &self,
        system: &str,
        history: &[Value],
        tools: &Map<String, Value>,
        round: u32,
    ) -> Result<String, CallError> {
        let e = &self.endpoint;
        if e.kind == ModelKind::Scripted {
            let (body, delay) =
                script::next_turn(self.endpoint.script.as_deref(), &self.script_pos, round)?;
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            return Ok(body);
        }
        let (url, mut body) = request::request(e, system, history);
        if let Some(obj) = body.as_object_mut() {
            obj.extend(tools.clone());
            if let Some(t) = e.temperature {
                if e.format == ProviderFormat::Gemini {
                    // Gemini takes sampling settings in `generationConfig` only.
                    let config = obj.entry("generationConfig").or_insert_with(|| json!({}));
                    if let Some(c) = config.as_object_mut() {
                        c.insert("temperature".into(), json!(t));
                    }
                } else {
                    obj.insert("temperature".into(), json!(t));
                }
            }
            obj.extend(e.extra_body.clone());
        }
        let mut req = self.http.post(&url).timeout(e.timeout).json(&body);
        if let Some(key) = &e.api_key {
            req = match e.kind {
                ModelKind::Anthropic => req
                    .header("x-api-key", key)
                    .header("anthropic-version", "2023-06-01"),
                ModelKind::Gemini => req.header("x-goog-api-key", key),
                _ => req.bearer_auth(key),
            };
        } else if e.kind == ModelKind::Anthropic {
            req = req.header("anthropic-version", "2023-06-01");
        }
        for (k, v) in &e.headers {
            req = req.header(k, v);
        }
        let resp = req.send().await.map_err(|err| CallError {
            retryable: true,
            status: None,
            message: format!("request to {url} failed: {}", with_causes(&err)),
            retry_after: None,
        })?;
        let status = resp.status().as_u16();
        let retry_after = super::retry_after::from_headers(resp.headers());
        let bytes = super::body::read_capped(resp, status, MAX_RESPONSE_BYTES).await?;
        let text = String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        if !(200..300).contains(&status) {
            let retryable = status == 429 || status >= 500 || status == 408;
            let snippet: String = text.chars().take(300).collect();
            return Err(CallError {
                retryable,
                status: Some(status),
                message: format!("the model endpoint answered {status}: {snippet}"),
                retry_after,
            });
        }
        Ok(text)
    }
}
