//! The tokens a provider says a response cost, read from the whole response where each format
//! reports them:
//!
//! | format | field | input | output |
//! | --- | --- | --- | --- |
//! | OpenAI Chat Completions | `usage` | `prompt_tokens` | `completion_tokens` (reasoning included) |
//! | OpenAI Responses | `usage` | `input_tokens` | `output_tokens` (reasoning included) |
//! | Anthropic Messages | `usage` | `input_tokens` + `cache_creation_input_tokens` + `cache_read_input_tokens` | `output_tokens` |
//! | Gemini | `usageMetadata` | `promptTokenCount` + `toolUsePromptTokenCount` | `candidatesTokenCount` + `thoughtsTokenCount` |
//!
//! A response without that field (a server that reports nothing, or only the assistant part of a
//! response) has no usage; nothing is estimated here. A count that is not a non-negative integer
//! is read as 0.

use serde::Serialize;
use serde_json::Value;

use crate::ProviderFormat;

/// Tokens one model response cost, as its provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// The request's tokens, cached ones included.
    pub input_tokens: u64,
    /// The response's tokens, reasoning included.
    pub output_tokens: u64,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// The usage `response` reports in `format`'s own field, if it has one.
pub fn reported(format: ProviderFormat, response: &Value) -> Option<Usage> {
    let (field, input, output): (&str, &[&str], &[&str]) = match format {
        ProviderFormat::OpenAiChat => ("usage", &["prompt_tokens"], &["completion_tokens"]),
        ProviderFormat::OpenAiResponses => ("usage", &["input_tokens"], &["output_tokens"]),
        ProviderFormat::AnthropicMessages => (
            "usage",
            &[
                "input_tokens",
                "cache_creation_input_tokens",
                "cache_read_input_tokens",
            ],
            &["output_tokens"],
        ),
        ProviderFormat::Gemini => (
            "usageMetadata",
            &["promptTokenCount", "toolUsePromptTokenCount"],
            &["candidatesTokenCount", "thoughtsTokenCount"],
        ),
    };
    let counts = response.get(field)?.as_object()?;
    let sum = |keys: &[&str]| -> u64 {
        keys.iter()
            .filter_map(|k| counts.get(*k).and_then(Value::as_u64))
            .fold(0, u64::saturating_add)
    };
    Some(Usage {
        input_tokens: sum(input),
        output_tokens: sum(output),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_format_reads_its_own_field() {
        let cases = [
            (
                ProviderFormat::OpenAiChat,
                json!({"choices": [], "usage": {"prompt_tokens": 400, "completion_tokens": 100, "total_tokens": 500}}),
                Some((400, 100)),
            ),
            (
                ProviderFormat::OpenAiResponses,
                json!({"output": [], "usage": {"input_tokens": 30, "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 5}}}),
                Some((30, 7)),
            ),
            (
                ProviderFormat::AnthropicMessages,
                json!({"content": [], "usage": {"input_tokens": 10, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 30, "output_tokens": 4}}),
                Some((60, 4)),
            ),
            (
                ProviderFormat::Gemini,
                json!({"candidates": [], "usageMetadata": {"promptTokenCount": 12, "toolUsePromptTokenCount": 3, "candidatesTokenCount": 8, "thoughtsTokenCount": 2, "totalTokenCount": 25}}),
                Some((15, 10)),
            ),
            // No usage reported, or only the assistant part of a response.
            (
                ProviderFormat::OpenAiChat,
                json!({"role": "assistant", "content": "hi"}),
                None,
            ),
            (
                ProviderFormat::Gemini,
                json!({"usage": {"prompt_tokens": 1}}),
                None,
            ),
            // Counts that are not integers count as nothing.
            (
                ProviderFormat::OpenAiChat,
                json!({"usage": {"prompt_tokens": "many", "completion_tokens": -3}}),
                Some((0, 0)),
            ),
        ];
        for (format, response, want) in cases {
            let got = reported(format, &response).map(|u| (u.input_tokens, u.output_tokens));
            assert_eq!(got, want, "{format}: {response}");
        }
    }

    #[test]
    fn the_total_adds_input_and_output_without_overflowing() {
        let u = Usage {
            input_tokens: u64::MAX,
            output_tokens: 1,
        };
        assert_eq!(u.total(), u64::MAX);
    }
}
