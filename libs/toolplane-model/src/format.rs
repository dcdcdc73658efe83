//! `ProviderFormat`: which of the four wire formats a request speaks.
//!
//! It owns the stable names (`openai_chat`, `openai_responses`, `anthropic_messages`, `gemini`)
//! used in configuration, run specs and the gRPC API, and the one per-provider fact the core turn
//! contract needs: whether missing call ids are synthesised. It never guesses a format from a
//! response body.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use toolplane_core::turn::CallIdPolicy;

/// A provider wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderFormat {
    /// OpenAI Chat Completions (`POST /v1/chat/completions`), also spoken by vLLM, Ollama and
    /// llama.cpp.
    #[serde(rename = "openai_chat")]
    OpenAiChat,
    /// OpenAI Responses (`POST /v1/responses`).
    #[serde(rename = "openai_responses")]
    OpenAiResponses,
    /// Anthropic Messages (`POST /v1/messages`).
    AnthropicMessages,
    /// Gemini `generateContent` (REST JSON, camelCase).
    Gemini,
}

/// A format name that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown provider format `{0}`; expected openai_chat, openai_responses, anthropic_messages or gemini"
)]
pub struct UnknownProviderFormat(pub String);

impl ProviderFormat {
    /// Every format, in documentation order.
    pub const ALL: [ProviderFormat; 4] = [
        ProviderFormat::OpenAiChat,
        ProviderFormat::OpenAiResponses,
        ProviderFormat::AnthropicMessages,
        ProviderFormat::Gemini,
    ];

    /// Parses a stable name. Names are exact (lowercase, no aliases) so that a configuration
    /// means one thing everywhere.
    pub fn parse(name: &str) -> Result<ProviderFormat, UnknownProviderFormat> {
        ProviderFormat::ALL
            .into_iter()
            .find(|f| f.as_str() == name)
            .ok_or_else(|| UnknownProviderFormat(name.chars().take(64).collect()))
    }

    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderFormat::OpenAiChat => "openai_chat",
            ProviderFormat::OpenAiResponses => "openai_responses",
            ProviderFormat::AnthropicMessages => "anthropic_messages",
            ProviderFormat::Gemini => "gemini",
        }
    }

    /// How the turn contract treats calls without an id: Gemini often omits them, so its calls
    /// get synthesised `<turn>:<index>` ids; every other provider always sends one, and a missing
    /// id is a contract violation.
    pub fn call_id_policy(self) -> CallIdPolicy {
        match self {
            ProviderFormat::Gemini => CallIdPolicy::SynthesiseMissing,
            _ => CallIdPolicy::Required,
        }
    }
}

impl fmt::Display for ProviderFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProviderFormat {
    type Err = UnknownProviderFormat;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ProviderFormat::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_parse_display_and_serde() {
        for f in ProviderFormat::ALL {
            assert_eq!(ProviderFormat::parse(f.as_str()), Ok(f));
            assert_eq!(f.to_string(), f.as_str());
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, format!("\"{}\"", f.as_str()));
            assert_eq!(serde_json::from_str::<ProviderFormat>(&json).unwrap(), f);
        }
    }

    #[test]
    fn unknown_names_are_refused_with_the_expected_list() {
        for bad in [
            "",
            "openai",
            "OpenAI_Chat",
            "anthropic",
            "gemini ",
            "vertex",
        ] {
            let err = ProviderFormat::parse(bad).unwrap_err();
            assert!(err.to_string().contains("expected openai_chat"), "{err}");
        }
    }

    #[test]
    fn only_gemini_synthesises_call_ids() {
        for f in ProviderFormat::ALL {
            let want = if f == ProviderFormat::Gemini {
                CallIdPolicy::SynthesiseMissing
            } else {
                CallIdPolicy::Required
            };
            assert_eq!(f.call_id_policy(), want, "{f}");
        }
    }
}
