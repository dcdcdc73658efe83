//! What a whole model response says about itself, for telemetry: its id, the model that answered,
//! why each generation stopped, and the tokens it cost ([`crate::usage`]). Read from each
//! format's own fields:
//!
//! | format | id | model | finish reasons |
//! | --- | --- | --- | --- |
//! | OpenAI Chat Completions | `id` | `model` | each `choices[].finish_reason` |
//! | OpenAI Responses | `id` | `model` | `incomplete_details.reason`, else `status` |
//! | Anthropic Messages | `id` | `model` | `stop_reason` |
//! | Gemini | `responseId` | `modelVersion` | each `candidates[].finishReason` |
//!
//! Values are the provider's own (`stop`, `tool_calls`, `end_turn`, `STOP`, …), not normalised:
//! the OpenTelemetry GenAI conventions record what the provider reported. A field that is missing
//! or not a string is left out; nothing is guessed.

use serde_json::Value;

use crate::ProviderFormat;
use crate::usage::{self, Usage};

/// The facts one response reports about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseFacts {
    /// The provider's id of the response.
    pub id: Option<String>,
    /// The model that produced the response (may differ from the requested alias).
    pub model: Option<String>,
    /// Why each generation stopped, in the order of the generations.
    pub finish_reasons: Vec<String>,
    /// The tokens the response cost, when it reports them.
    pub usage: Option<Usage>,
}

/// The facts `response` reports in `format`'s own fields.
pub fn facts(format: ProviderFormat, response: &Value) -> ResponseFacts {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let each = |list: &str, key: &str| -> Vec<String> {
        response
            .get(list)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| text(i.get(key)))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let (id, model, finish_reasons) = match format {
        ProviderFormat::OpenAiChat => (
            text(response.get("id")),
            text(response.get("model")),
            each("choices", "finish_reason"),
        ),
        ProviderFormat::OpenAiResponses => (
            text(response.get("id")),
            text(response.get("model")),
            text(response.pointer("/incomplete_details/reason"))
                .or_else(|| text(response.get("status")))
                .into_iter()
                .collect(),
        ),
        ProviderFormat::AnthropicMessages => (
            text(response.get("id")),
            text(response.get("model")),
            text(response.get("stop_reason")).into_iter().collect(),
        ),
        ProviderFormat::Gemini => (
            text(response.get("responseId")),
            text(response.get("modelVersion")),
            each("candidates", "finishReason"),
        ),
    };
    ResponseFacts {
        id,
        model,
        finish_reasons,
        usage: usage::reported(format, response),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_format_reports_its_id_model_and_finish_reasons() {
        let cases = [
            (
                ProviderFormat::OpenAiChat,
                json!({"id": "chatcmpl-1", "model": "gpt-4o-2024-08-06", "choices": [{"finish_reason": "tool_calls"}, {"finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}),
                (
                    Some("chatcmpl-1"),
                    Some("gpt-4o-2024-08-06"),
                    vec!["tool_calls", "stop"],
                    Some((5, 2)),
                ),
            ),
            (
                ProviderFormat::OpenAiResponses,
                json!({"id": "resp_1", "model": "gpt-5", "status": "completed", "output": []}),
                (Some("resp_1"), Some("gpt-5"), vec!["completed"], None),
            ),
            (
                ProviderFormat::OpenAiResponses,
                json!({"id": "resp_2", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}),
                (Some("resp_2"), None, vec!["max_output_tokens"], None),
            ),
            (
                ProviderFormat::AnthropicMessages,
                json!({"id": "msg_1", "model": "claude-sonnet-4-5", "stop_reason": "tool_use", "content": []}),
                (
                    Some("msg_1"),
                    Some("claude-sonnet-4-5"),
                    vec!["tool_use"],
                    None,
                ),
            ),
            (
                ProviderFormat::Gemini,
                json!({"responseId": "g-1", "modelVersion": "gemini-2.5-flash", "candidates": [{"finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1}}),
                (
                    Some("g-1"),
                    Some("gemini-2.5-flash"),
                    vec!["STOP"],
                    Some((3, 1)),
                ),
            ),
            // Nothing reported, or not strings: nothing recorded.
            (
                ProviderFormat::OpenAiChat,
                json!({"id": 7, "choices": [{"finish_reason": null}]}),
                (None, None, vec![], None),
            ),
            (
                ProviderFormat::Gemini,
                json!({"id": "not-gemini's-field", "candidates": "none"}),
                (None, None, vec![], None),
            ),
        ];
        for (format, response, (id, model, reasons, usage)) in cases {
            let got = facts(format, &response);
            assert_eq!(got.id.as_deref(), id, "{format}: {response}");
            assert_eq!(got.model.as_deref(), model, "{format}: {response}");
            assert_eq!(got.finish_reasons, reasons, "{format}: {response}");
            assert_eq!(
                got.usage.map(|u| (u.input_tokens, u.output_tokens)),
                usage,
                "{format}: {response}"
            );
        }
    }
}
