//! Provider wire formats: the one place that knows what OpenAI Chat
//! Completions, OpenAI Responses, Anthropic Messages and Gemini `generateContent` look like.
//!
//! Three conversions per provider, all through one turn's [`ToolTurnContract`]:
//! - **tools out** — [`encode_tools`]: the turn's tools (alias, description, input schema) and its
//!   typed tool choice as the request fields the provider expects;
//! - **calls in** — [`decode_calls`]: the provider's assistant output → canonical
//!   [`ToolInvocation`]s decoded through this turn's aliases only, plus the assistant text (for
//!   drift capture) and the assistant turn as it must go back into the history;
//! - **results out** — [`encode_results`]: [`AgentToolResult`]s as the provider's tool-result
//!   messages, carrying `model_content()` only.
//!
//! **Architecture invariant:** this crate does no IO and depends on no async runtime. It never
//! resolves a name outside the turn contract (no registry look-up, no guessing by native name, no
//! fallback ids except Gemini's synthesised `<turn>:<index>`), and it never puts `structured`,
//! `error_code` or `resource_refs` of a result into a provider message. Upper layers never see a
//! provider's JSON shape: they pick a [`ProviderFormat`] and call the façade below.
//!
//! The per-provider decisions (Gemini's `parametersJsonSchema`, the Responses `strict: false`,
//! ids synthesised only for Gemini, …) are documented in each provider module.

pub mod anthropic;
pub mod context;
pub mod format;
pub mod gemini;
pub mod openai_chat;
pub mod openai_responses;
pub mod response;
pub mod usage;
mod wire;

use serde_json::{Map, Value, json};
use toolplane_core::error::{CoreError, MODEL_MALFORMED_RESPONSE, MODEL_TOOL_CALL_REQUIRED};
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::InvocationToolSnapshot;
use toolplane_core::turn::ToolTurnContract;

pub use format::{ProviderFormat, UnknownProviderFormat};
pub use response::ResponseFacts;
pub use usage::Usage;
pub use wire::{MAX_ASSISTANT_TEXT_BYTES, MAX_RESPONSE_BYTES, MAX_RESPONSE_ITEMS};

/// One model turn decoded through its contract.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedTurn {
    /// The tool calls, in the order the model made them.
    pub invocations: Vec<ToolInvocation>,
    /// The assistant's visible text, joined in order; `None` when it wrote none. Reasoning
    /// (thinking blocks, Gemini thought parts, Responses reasoning items) is not included.
    pub assistant_text: Option<String>,
    /// The assistant turn as the next request must repeat it, in the provider's own shape: the
    /// message (OpenAI chat, Anthropic), the content (Gemini) or the output items (Responses). Kept
    /// verbatim where the provider needs it — Anthropic thinking signatures, Gemini thought
    /// signatures, Responses reasoning items — so nothing the provider asked back is lost.
    pub history: Vec<Value>,
    /// The tokens the response says it cost, when it is a whole response that reports them
    /// ([`usage`]).
    pub usage: Option<usage::Usage>,
}

/// The request fields that advertise a turn's tools and its tool choice, to merge into the
/// provider request body: `tools` + `tool_choice` (OpenAI, Anthropic) or `tools` + `toolConfig`
/// (Gemini). Empty when the turn advertises no tools and allows no call.
///
/// Fails when the contract does not belong to the snapshot (a turn tool without a binding) or
/// when the choice requires a call while no tool is advertised — the provider would refuse the
/// request either way.
pub fn encode_tools(
    format: ProviderFormat,
    contract: &ToolTurnContract,
    snapshot: &InvocationToolSnapshot,
) -> Result<Map<String, Value>, CoreError> {
    let tools = wire::advertised(contract, snapshot)?;
    let choice = wire::Choice::of(contract)?;
    if tools.is_empty() {
        return no_tools(contract, choice).map(|()| Map::new());
    }
    Ok(match format {
        ProviderFormat::OpenAiChat => openai_chat::request_fields(&tools, choice),
        ProviderFormat::OpenAiResponses => openai_responses::request_fields(&tools, choice),
        ProviderFormat::AnthropicMessages => anthropic::request_fields(&tools, choice),
        ProviderFormat::Gemini => gemini::request_fields(&tools, choice),
    })
}

/// The request field of a turn's tool choice alone, as [`encode_tools`] would put it — `tool_choice`
/// or `toolConfig` — encoded as JSON text; `None` when the turn advertises no tools and allows no
/// call. Fails as [`encode_tools`] does. For an answer that names the next turn's choice without
/// the tools, whose descriptions and schemas it would otherwise copy only to drop them.
pub fn encode_tool_choice(
    format: ProviderFormat,
    contract: &ToolTurnContract,
    snapshot: &InvocationToolSnapshot,
) -> Result<Option<String>, CoreError> {
    let advertised = wire::advertised(contract, snapshot)?.len();
    let choice = wire::Choice::of(contract)?;
    if advertised == 0 {
        return no_tools(contract, choice).map(|()| None);
    }
    let (_, value) = match format {
        ProviderFormat::OpenAiChat => openai_chat::choice_field(choice),
        ProviderFormat::OpenAiResponses => openai_responses::choice_field(choice),
        ProviderFormat::AnthropicMessages => anthropic::choice_field(choice),
        ProviderFormat::Gemini => gemini::choice_field(choice),
    };
    Ok(Some(value.to_string()))
}

/// A turn that advertises no tools is fine unless its choice requires a call.
fn no_tools(contract: &ToolTurnContract, choice: wire::Choice<'_>) -> Result<(), CoreError> {
    match choice {
        wire::Choice::None | wire::Choice::Auto => Ok(()),
        wire::Choice::Required | wire::Choice::Specific(_) => Err(CoreError::new(
            MODEL_TOOL_CALL_REQUIRED,
            format!(
                "turn {} requires a tool call but advertises no tools",
                contract.turn()
            ),
        )),
    }
}

/// Decodes the model's output for one turn.
///
/// `response` is either the provider's whole response (`chat.completion`, a Responses `response`,
/// an Anthropic `message`, a `GenerateContentResponse`) or just the assistant part (the chat
/// message, the Responses output array, an assistant message param, a Gemini `Content`). Shapes
/// that cannot be read, several choices or candidates, and inputs over the documented limits fail
/// with `model.malformed_response`; contract violations (unknown alias, canonical name,
/// missing or duplicate call id, the choice's call count) fail with their own
/// provider-contract codes. Nothing is partially decoded.
pub fn decode_calls(
    format: ProviderFormat,
    contract: &ToolTurnContract,
    response: &Value,
) -> Result<DecodedTurn, CoreError> {
    let parsed = match format {
        ProviderFormat::OpenAiChat => openai_chat::parse(response)?,
        ProviderFormat::OpenAiResponses => openai_responses::parse(response)?,
        ProviderFormat::AnthropicMessages => anthropic::parse(response)?,
        ProviderFormat::Gemini => gemini::parse(response)?,
    };
    let invocations = contract.decode(parsed.calls, format.call_id_policy())?;
    Ok(DecodedTurn {
        invocations,
        assistant_text: parsed.text.into_option(),
        history: parsed.history,
        usage: usage::reported(format, response),
    })
}

/// [`decode_calls`] on the response body as text, refusing bodies over [`MAX_RESPONSE_BYTES`]
/// before parsing them.
pub fn decode_calls_json(
    format: ProviderFormat,
    contract: &ToolTurnContract,
    body: &str,
) -> Result<DecodedTurn, CoreError> {
    if body.len() > MAX_RESPONSE_BYTES {
        return Err(CoreError::new(
            MODEL_MALFORMED_RESPONSE,
            format!(
                "{format} response is {} bytes, over the {MAX_RESPONSE_BYTES}-byte limit",
                body.len()
            ),
        ));
    }
    let value: Value = serde_json::from_str(body).map_err(|e| {
        CoreError::new(
            MODEL_MALFORMED_RESPONSE,
            format!("{format} response is not valid json: {e}"),
        )
    })?;
    decode_calls(format, contract, &value)
}

/// Encodes the results of one turn as the provider's tool-result messages, to append after the
/// assistant turn: one `tool` message per result (OpenAI chat), one `function_call_output` item
/// per result (Responses), one `user` message of `tool_result` blocks (Anthropic), one `user`
/// content of `functionResponse` parts (Gemini). Empty when there are no results.
///
/// `calls` are the turn's decoded invocations and `results` must answer each of them exactly once
/// (identity verified): providers refuse a history where a call has no answer, and
/// Gemini pairs answers to id-less calls by name and order, so results are written in call order
/// whatever order they came in. A result that answers no call of the turn, a call whose tool the
/// turn did not advertise, or a call left unanswered is a `tool.result_identity_mismatch`.
pub fn encode_results(
    format: ProviderFormat,
    contract: &ToolTurnContract,
    calls: &[ToolInvocation],
    results: &[AgentToolResult],
) -> Result<Vec<Value>, CoreError> {
    let answers = wire::pair_results(contract, calls, results)?;
    if answers.is_empty() {
        return Ok(Vec::new());
    }
    Ok(match format {
        ProviderFormat::OpenAiChat => openai_chat::results(&answers),
        ProviderFormat::OpenAiResponses => openai_responses::results(&answers),
        ProviderFormat::AnthropicMessages => anthropic::results(&answers),
        ProviderFormat::Gemini => gemini::results(&answers),
    })
}

/// A plain user message in the provider's history shape: `{"role": "user", "content": text}`
/// (OpenAI chat, Responses as an input message, Anthropic) or `{"role": "user", "parts":
/// [{"text": text}]}` (Gemini).
pub fn user_message(format: ProviderFormat, text: &str) -> Value {
    match format {
        ProviderFormat::Gemini => json!({"role": "user", "parts": [{"text": text}]}),
        _ => json!({"role": "user", "content": text}),
    }
}
