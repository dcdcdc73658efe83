//! Request building: the URL and JSON body of one model call in the endpoint's wire format, from
//! the system prompt and the provider-native history (the turn's tool fields are added by the
//! client).

use serde_json::{Value, json};
use toolplane_model::ProviderFormat;

use super::endpoint::Endpoint;

/// The request URL and body (without the tool fields) in the endpoint's format.
pub(super) fn request(e: &Endpoint, system: &str, history: &[Value]) -> (String, Value) {
    match e.format {
        ProviderFormat::AnthropicMessages => {
            let mut b = json!({"model": e.model, "max_tokens": e.max_output_tokens.unwrap_or(4096), "messages": history});
            if !system.is_empty() {
                b["system"] = json!(system);
            }
            (format!("{}/v1/messages", e.base_url), b)
        }
        ProviderFormat::Gemini => {
            let mut b = json!({"contents": history});
            if !system.is_empty() {
                b["systemInstruction"] = json!({"parts": [{"text": system}]});
            }
            if let Some(n) = e.max_output_tokens {
                b["generationConfig"] = json!({"maxOutputTokens": n});
            }
            (
                format!("{}/v1beta/models/{}:generateContent", e.base_url, e.model),
                b,
            )
        }
        // The base URL is the OpenAI-style one that ends in `/v1`, as for Chat Completions.
        ProviderFormat::OpenAiResponses => {
            let mut b = json!({"model": e.model, "input": history});
            if !system.is_empty() {
                b["instructions"] = json!(system);
            }
            if let Some(n) = e.max_output_tokens {
                b["max_output_tokens"] = json!(n);
            }
            (format!("{}/responses", e.base_url), b)
        }
        ProviderFormat::OpenAiChat => {
            let mut messages = Vec::with_capacity(history.len() + 1);
            if !system.is_empty() {
                messages.push(json!({"role": "system", "content": system}));
            }
            messages.extend(history.iter().cloned());
            let mut b = json!({"model": e.model, "messages": messages});
            if let Some(n) = e.max_output_tokens {
                b["max_tokens"] = json!(n);
            }
            (format!("{}/chat/completions", e.base_url), b)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use toolplane_core::profile::ModelEndpoint as ProfileEndpoint;
    use toolplane_model::user_message;

    #[test]
    fn a_responses_request_carries_input_instructions_and_max_output_tokens() {
        let p: ProfileEndpoint = serde_json::from_value(json!({"kind": "openai-compatible", "baseUrl": "http://127.0.0.1:1/v1", "model": "m", "providerFormat": "openai_responses"})).unwrap();
        let mut e = Endpoint::from_profile(&p, Duration::from_secs(1), 0).unwrap();
        e.max_output_tokens = Some(256);
        let history = vec![user_message(ProviderFormat::OpenAiResponses, "hi")];
        let (url, body) = request(&e, "be brief", &history);
        assert_eq!(url, "http://127.0.0.1:1/v1/responses");
        assert_eq!(
            body,
            json!({"model": "m", "input": [{"role": "user", "content": "hi"}], "instructions": "be brief", "max_output_tokens": 256})
        );
    }
}
