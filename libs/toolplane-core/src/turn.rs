//! The tool turn contract: what one model call may request.
//!
//! A contract is derived from the snapshot for each model call: the tools advertised this turn, their
//! aliases and the typed tool choice. Provider calls are decoded through this turn's alias map
//! *only*. An unknown alias (including another invocation's), a canonical id or native name used
//! instead of an alias, a missing call id or a call id repeated within the turn is a
//! provider-contract violation: the invocation fails fast. The one exception: Gemini often omits
//! call ids, so its decoder asks for synthesised ids `<turn>:<index>`.
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::alias::{MAX_ALIAS_LEN, ModelAlias};
use crate::error::{
    CoreError, MODEL_CANONICAL_TOOL_NAME, MODEL_DUPLICATE_CALL_ID, MODEL_MISSING_CALL_ID,
    MODEL_TOOL_CALL_REQUIRED, MODEL_TOOL_CHOICE_VIOLATED, MODEL_UNKNOWN_TOOL_ALIAS,
};
use crate::id::ToolId;
use crate::invocation::{ToolArguments, ToolInvocation};
use crate::snapshot::InvocationToolSnapshot;

/// Longest call id accepted, in bytes.
pub const MAX_CALL_ID_LEN: usize = 256;
/// Most tool calls in one model turn.
pub const MAX_CALLS_PER_TURN: usize = 128;

/// The typed tool choice of a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", content = "toolId", rename_all = "snake_case")]
pub enum ToolChoice {
    /// No tool may be called.
    None,
    /// The model decides.
    Auto,
    /// At least one tool call is required.
    Required,
    /// Only this tool, and at least one call of it.
    Specific(ToolId),
}

/// One tool advertised in a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnTool {
    pub tool_id: ToolId,
    pub alias: ModelAlias,
    /// Why a tool outside the snapshot's search core is advertised: the turn whose
    /// `tools.search` found it. Absent for every tool when the profile has no tool search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_in_turn: Option<u32>,
}

/// A tool as a provider adapter advertises it: alias, description and schema.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelTool<'a> {
    pub alias: &'a ModelAlias,
    pub title: Option<&'a str>,
    pub description: &'a str,
    pub input_schema: &'a Value,
}

/// A tool call as a provider sent it, before decoding.
#[derive(Debug, Clone, PartialEq)]
pub struct RawToolCall {
    pub call_id: Option<String>,
    pub name: String,
    pub arguments: RawArguments,
    pub provider_metadata: Option<Value>,
}

/// Arguments as JSON text (OpenAI) or as a JSON value (Anthropic, Gemini).
#[derive(Debug, Clone, PartialEq)]
pub enum RawArguments {
    Text(String),
    Value(Value),
}

/// Whether missing call ids are a violation or get synthesised ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallIdPolicy {
    Required,
    /// Gemini: a call without an id gets `<turn>:<index>`.
    SynthesiseMissing,
}

/// The contract of one model call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "ContractRepr")]
pub struct ToolTurnContract {
    invocation_id: String,
    turn: u32,
    choice: ToolChoice,
    tools: Vec<TurnTool>,
    #[serde(skip)]
    by_alias: HashMap<String, usize>,
    #[serde(skip)]
    by_tool: HashMap<ToolId, usize>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContractRepr {
    invocation_id: String,
    turn: u32,
    choice: ToolChoice,
    tools: Vec<TurnTool>,
}

impl TryFrom<ContractRepr> for ToolTurnContract {
    type Error = CoreError;
    fn try_from(r: ContractRepr) -> Result<Self, CoreError> {
        ToolTurnContract::build(r.invocation_id, r.turn, r.choice, r.tools)
    }
}

impl ToolTurnContract {
    /// A contract advertising every binding of the snapshot (the production default).
    pub fn all(
        snapshot: &InvocationToolSnapshot,
        turn: u32,
        choice: ToolChoice,
    ) -> Result<Self, CoreError> {
        let tools = snapshot
            .bindings
            .iter()
            .map(|b| TurnTool {
                tool_id: b.tool_id().clone(),
                alias: b.alias.clone(),
                found_in_turn: None,
            })
            .collect();
        ToolTurnContract::build(snapshot.invocation_id.clone(), turn, choice, tools)
    }

    /// The contract of a turn: every binding of the snapshot, or, when the snapshot has a
    /// tool-search plan, its core and the tools searches found (each with the turn that found
    /// it), in binding order. Found ids the snapshot does not hold are ignored.
    pub fn advertised(
        snapshot: &InvocationToolSnapshot,
        turn: u32,
        choice: ToolChoice,
        found: &[(ToolId, u32)],
    ) -> Result<Self, CoreError> {
        let Some(search) = &snapshot.search else {
            return ToolTurnContract::all(snapshot, turn, choice);
        };
        let tools = snapshot
            .bindings
            .iter()
            .filter_map(|b| {
                let id = b.tool_id();
                let found_in_turn = if search.core.contains(id) {
                    None
                } else {
                    Some(found.iter().find(|(f, _)| f == id)?.1)
                };
                Some(TurnTool {
                    tool_id: id.clone(),
                    alias: b.alias.clone(),
                    found_in_turn,
                })
            })
            .collect();
        ToolTurnContract::build(snapshot.invocation_id.clone(), turn, choice, tools)
    }

    /// A contract advertising a subset of the snapshot; every id must be in it.
    pub fn subset(
        snapshot: &InvocationToolSnapshot,
        turn: u32,
        choice: ToolChoice,
        ids: &[ToolId],
    ) -> Result<Self, CoreError> {
        let mut tools = Vec::with_capacity(ids.len());
        for id in ids {
            let b = snapshot.binding(id).ok_or_else(|| {
                CoreError::new(
                    MODEL_UNKNOWN_TOOL_ALIAS,
                    format!("`{id}` is not in snapshot {}", snapshot.snapshot_id),
                )
            })?;
            tools.push(TurnTool {
                tool_id: id.clone(),
                alias: b.alias.clone(),
                found_in_turn: None,
            });
        }
        ToolTurnContract::build(snapshot.invocation_id.clone(), turn, choice, tools)
    }

    fn build(
        invocation_id: String,
        turn: u32,
        choice: ToolChoice,
        tools: Vec<TurnTool>,
    ) -> Result<Self, CoreError> {
        let mut by_alias = HashMap::with_capacity(tools.len());
        let mut by_tool = HashMap::with_capacity(tools.len());
        for (i, t) in tools.iter().enumerate() {
            by_tool.insert(t.tool_id.clone(), i);
            if by_alias.insert(t.alias.as_str().to_owned(), i).is_some() {
                return Err(CoreError::new(
                    MODEL_UNKNOWN_TOOL_ALIAS,
                    format!("alias `{}` appears twice in the turn", t.alias),
                ));
            }
        }
        if let ToolChoice::Specific(id) = &choice
            && !tools.iter().any(|t| &t.tool_id == id)
        {
            return Err(CoreError::new(
                MODEL_TOOL_CHOICE_VIOLATED,
                format!("the specific tool `{id}` is not advertised in this turn"),
            ));
        }
        Ok(ToolTurnContract {
            invocation_id,
            turn,
            choice,
            tools,
            by_alias,
            by_tool,
        })
    }

    pub fn invocation_id(&self) -> &str {
        &self.invocation_id
    }
    pub fn turn(&self) -> u32 {
        self.turn
    }
    pub fn choice(&self) -> &ToolChoice {
        &self.choice
    }
    pub fn tools(&self) -> &[TurnTool] {
        &self.tools
    }

    pub fn contains(&self, id: &ToolId) -> bool {
        self.by_tool.contains_key(id)
    }

    /// The alias of a tool in this turn.
    pub fn alias_of(&self, id: &ToolId) -> Option<&ModelAlias> {
        self.by_tool
            .get(id)
            .and_then(|&i| self.tools.get(i))
            .map(|t| &t.alias)
    }

    /// The tools to advertise to the provider, with the snapshot's frozen descriptors.
    pub fn model_tools<'s>(&self, snapshot: &'s InvocationToolSnapshot) -> Vec<ModelTool<'s>> {
        self.tools
            .iter()
            .filter_map(|t| snapshot.binding(&t.tool_id))
            .map(|b| ModelTool {
                alias: &b.alias,
                title: b.descriptor.title(),
                description: b.descriptor.description(),
                input_schema: b.descriptor.input_schema(),
            })
            .collect()
    }

    /// Decodes a turn's provider calls into canonical invocations, through this turn's aliases
    /// only. Any contract violation fails the whole turn; nothing is partially decoded.
    pub fn decode(
        &self,
        calls: Vec<RawToolCall>,
        ids: CallIdPolicy,
    ) -> Result<Vec<ToolInvocation>, CoreError> {
        if calls.len() > MAX_CALLS_PER_TURN {
            return Err(CoreError::new(
                MODEL_TOOL_CHOICE_VIOLATED,
                format!(
                    "{} tool calls in one turn, over the limit of {MAX_CALLS_PER_TURN}",
                    calls.len()
                ),
            ));
        }
        self.check_call_count(calls.len())?;
        let mut out: Vec<ToolInvocation> = Vec::with_capacity(calls.len());
        for (index, call) in calls.into_iter().enumerate() {
            let call_id = match call.call_id.filter(|id| !id.is_empty()) {
                Some(id) if id.len() > MAX_CALL_ID_LEN => {
                    return Err(CoreError::new(
                        MODEL_MISSING_CALL_ID,
                        format!("call {index} has a call id over {MAX_CALL_ID_LEN} bytes"),
                    ));
                }
                Some(id) => id,
                None if ids == CallIdPolicy::SynthesiseMissing => format!("{}:{index}", self.turn),
                None => {
                    return Err(CoreError::new(
                        MODEL_MISSING_CALL_ID,
                        format!("call {index} (`{}`) has no call id", shorten(&call.name)),
                    ));
                }
            };
            // A turn has few calls: a linear scan of the decoded ones beats hashing.
            if out.iter().any(|c| c.call_id == call_id) {
                return Err(CoreError::new(
                    MODEL_DUPLICATE_CALL_ID,
                    format!(
                        "call id `{}` appears twice in turn {}",
                        shorten(&call_id),
                        self.turn
                    ),
                ));
            }
            let tool_id = self.resolve_alias(&call.name)?;
            let arguments = match call.arguments {
                RawArguments::Text(t) => ToolArguments::from_text(&t),
                RawArguments::Value(v) => ToolArguments::from_value(v),
            };
            out.push(ToolInvocation {
                call_id,
                tool_id,
                arguments,
                provider_metadata: call.provider_metadata,
            });
        }
        Ok(out)
    }

    /// Checks the number of calls against the tool choice: `required` and `specific` need at least
    /// one call, `none` allows none.
    pub fn check_call_count(&self, n: usize) -> Result<(), CoreError> {
        match (&self.choice, n) {
            (ToolChoice::None, n) if n > 0 => Err(CoreError::new(
                MODEL_TOOL_CHOICE_VIOLATED,
                format!(
                    "turn {} allowed no tool calls, the model made {n}",
                    self.turn
                ),
            )),
            (ToolChoice::Required | ToolChoice::Specific(_), 0) => Err(CoreError::new(
                MODEL_TOOL_CALL_REQUIRED,
                format!(
                    "turn {} required a tool call and the model made none",
                    self.turn
                ),
            )),
            _ => Ok(()),
        }
    }

    fn resolve_alias(&self, name: &str) -> Result<ToolId, CoreError> {
        if let Some(t) = self.by_alias.get(name).and_then(|&i| self.tools.get(i)) {
            return Ok(t.tool_id.clone());
        }
        // The error path only: explain a canonical name, else report an unknown alias.
        if let Some(t) = self
            .tools
            .iter()
            .find(|t| t.tool_id.to_string() == name || t.tool_id.native() == name)
        {
            return Err(CoreError::new(
                MODEL_CANONICAL_TOOL_NAME,
                format!(
                    "the model called `{}` by its canonical name; this turn advertised it as `{}`",
                    shorten(name),
                    t.alias
                ),
            ));
        }
        let hint = self
            .closest_alias(name)
            .map(|a| format!(" (did you mean `{a}`?)"))
            .unwrap_or_default();
        Err(CoreError::new(
            MODEL_UNKNOWN_TOOL_ALIAS,
            format!(
                "the model called `{}`, which turn {} of invocation {} did not advertise{hint}",
                shorten(name),
                self.turn,
                self.invocation_id
            ),
        ))
    }

    /// The advertised alias a mistyped name most likely meant: the only one that is the same name
    /// up to case and `-` against `_` (`get_sum` for `get-sum`), else the only one within two edits
    /// (one for names under six characters, none under three). The error path only.
    fn closest_alias(&self, name: &str) -> Option<&str> {
        if name.len() > 2 * MAX_ALIAS_LEN {
            return None;
        }
        let fold = |s: &str| s.to_ascii_lowercase().replace('-', "_");
        let folded = fold(name);
        let aliases = || self.tools.iter().map(|t| t.alias.as_str());
        let same: Vec<&str> = aliases().filter(|a| fold(a) == folded).collect();
        let candidates: Vec<&str> = if same.is_empty() {
            // Two edits on a short name would suggest almost anything.
            let max = (folded.len() / 3).min(2);
            aliases()
                .filter(|a| edit_distance(&fold(a), &folded) <= max)
                .collect()
        } else {
            same
        };
        match candidates.as_slice() {
            [only] => Some(only),
            _ => None,
        }
    }
}

/// Levenshtein distance over bytes (aliases are ASCII).
// `row` has `b.len() + 1` entries and `j < b.len()`, so every index is in bounds; distances are at
// most `max(a.len(), b.len())`, so no sum overflows.
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

fn shorten(s: &str) -> String {
    let mut out: String = s.chars().take(80).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}
