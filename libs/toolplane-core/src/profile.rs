//! Agent profiles: which tools an agent may use and under which limits.
//!
//! A profile is parsed from JSON with every unknown field rejected and every limit validated:
//! a profile that parses is a profile the compiler can use. `tools.allow` is required; its order is
//! the advertisement order; `[]` means no tools and `*` means every tool. A tool that is not allowed
//! is invisible. `docs/profiles.md` explains every field with an example.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::builtin;
use crate::catalog::ToolCatalog;
use crate::category::Category;
use crate::cycle::CycleThresholds;
use crate::error::{
    CoreError, PROFILE_INVALID, PROFILE_INVALID_LIMIT, PROFILE_INVALID_SELECTOR,
    PROFILE_RUNTIME_ONLY_TOOL,
};
use crate::id::{ToolId, valid_segment};
use crate::run_budget::RunBudgetLimits;
use crate::selector::ToolSelector;

/// The visible/writable roots a run workspace can have; a profile may only narrow them.
pub const ROOT_UNIVERSE: [&str; 5] = ["output/", "scratch/", "plan/", "summaries/", "persist/"];

/// Largest profile document accepted, in bytes.
pub const MAX_PROFILE_BYTES: usize = 256 * 1024;
/// Most selectors in one allow or deny list.
pub const MAX_SELECTORS: usize = 1000;

pub const DEFAULT_MAX_CALLS_PER_INVOCATION: u32 = 200;
pub const DEFAULT_MAX_ROUNDS: u32 = 50;
pub const DEFAULT_MCP_RESULT_INLINE_CHAR_LIMIT: u32 = 50_000;
pub const DEFAULT_SKILL_READ_CHARS_PER_CALL: u32 = 20_000;
pub const DEFAULT_SKILL_READ_CHARS_PER_RUN: u32 = 200_000;
pub const DEFAULT_MAX_HANDOFF_DEPTH: u32 = 3;
pub const DEFAULT_MAX_CONCURRENT_CHILDREN: u32 = 4;

/// A parsed, validated agent profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profile {
    /// Stable id: lowercase letters, digits, `-`, `_`, `.`; at most 64 bytes.
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the agent is for; shown by `agent.list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Extra system instructions for the agent's model (runtime-driven runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    pub tools: ToolPolicy,
    #[serde(default)]
    pub workspace: WorkspacePolicy,
    #[serde(default)]
    pub skills: SkillPolicy,
    #[serde(default)]
    pub delegation: DelegationPolicy,
    /// The model endpoint the runtime calls when it drives this agent (needed for delegated
    /// children and handoff targets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelEndpoint>,
    /// The budget of a whole run this profile is the root of: its invocations, handoff targets
    /// and delegated children together. Absent limits are no limit.
    #[serde(default, skip_serializing_if = "RunBudgetLimits::is_unlimited")]
    pub run_budget: RunBudgetLimits,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolPolicy {
    /// Required. Ordered selectors; order is advertisement order.
    pub allow: Vec<ToolSelector>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<ToolSelector>,
    /// Tools whose calls are held for a person's approval before they run (docs/approvals.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval_required: Vec<ToolSelector>,
    /// Total calls one invocation may make.
    #[serde(default = "default_max_calls")]
    pub max_calls_per_invocation: u32,
    /// Calls each tool may make per invocation; absent = only the total applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_calls_per_tool: Option<u32>,
    /// Model rounds (model call + its tool calls) one invocation may take.
    #[serde(default = "default_max_rounds")]
    pub max_rounds: u32,
    /// Per-tool overrides keyed by a single-tool selector (an exact id or `mcp:<server>/<tool>`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, ToolOverride>,
    /// Results longer than this many characters are stored as a readable file and previewed.
    #[serde(default = "default_inline_limit")]
    pub mcp_result_inline_char_limit: u32,
    /// The consumer's extra categories (second level of the category fallback).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_categories: BTreeMap<ToolId, Category>,
    /// Extra progress-aware tools for the cycle detector.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_progress_aware: Vec<ToolId>,
    /// The cycle detector's thresholds; absent keys keep the defaults.
    #[serde(default, skip_serializing_if = "CycleThresholds::is_default")]
    pub cycle: CycleThresholds,
    /// Tool search: advertise only a core set and `tools.search`; tools the model finds are
    /// advertised from its next turn on. Absent: every allowed tool is advertised every turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<ToolSearchPolicy>,
}

/// How an invocation advertises a large tool set (docs/catalog.md, "Tool search"). The snapshot
/// still holds every allowed tool and the gate is unchanged: a tool not yet advertised is refused
/// like any tool the turn did not advertise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSearchPolicy {
    /// Selectors of the tools advertised from the first turn (terminal tools always are).
    #[serde(default)]
    pub core: Vec<ToolSelector>,
    /// Most tools one search returns when the model asks for no number.
    #[serde(default = "default_search_results")]
    pub max_results: u32,
    /// Most tools searches may add to an invocation's advertised set.
    #[serde(default = "default_search_found")]
    pub max_found: u32,
}

fn default_search_results() -> u32 {
    5
}

fn default_search_found() -> u32 {
    64
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolOverride {
    /// Replaces the tool's description for this agent's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Calls this tool may make per invocation (overrides `maxCallsPerTool`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_calls: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkspacePolicy {
    /// Roots the agent can see; a subset of `output/ scratch/ plan/ summaries/ persist/`.
    #[serde(default = "all_roots")]
    pub visible_roots: Vec<String>,
    /// Roots the agent can write; a subset of the visible roots.
    #[serde(default = "all_roots")]
    pub writable_roots: Vec<String>,
    /// Where message artifacts live (the default commit target and auto-publish root).
    #[serde(default = "default_artifact_root")]
    pub message_artifact_root: String,
}

impl Default for WorkspacePolicy {
    fn default() -> Self {
        WorkspacePolicy {
            visible_roots: all_roots(),
            writable_roots: all_roots(),
            message_artifact_root: default_artifact_root(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SkillPolicy {
    /// Skill names the agent can see; `["*"]` for all installed skills.
    #[serde(default)]
    pub visible: Vec<String>,
    /// Skill names hidden even when `visible` includes them.
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default = "default_skill_per_call")]
    pub max_read_chars_per_call: u32,
    #[serde(default = "default_skill_per_run")]
    pub max_read_chars_per_run: u32,
}

impl Default for SkillPolicy {
    fn default() -> Self {
        SkillPolicy {
            visible: Vec::new(),
            deny: Vec::new(),
            max_read_chars_per_call: DEFAULT_SKILL_READ_CHARS_PER_CALL,
            max_read_chars_per_run: DEFAULT_SKILL_READ_CHARS_PER_RUN,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DelegationPolicy {
    /// This agent may delegate to others.
    #[serde(default)]
    pub can_delegate: bool,
    /// This agent may hand the run off to another agent.
    #[serde(default)]
    pub can_handoff: bool,
    /// Profiles this agent may delegate or hand off to; `["*"]` for any callable profile.
    #[serde(default)]
    pub targets: Vec<String>,
    /// Other agents may delegate to this one.
    #[serde(default)]
    pub callable: bool,
    /// Other agents may hand off to this one.
    #[serde(default)]
    pub allow_as_handoff_target: bool,
    /// Profiles allowed to call this one; empty = any.
    #[serde(default)]
    pub allowed_callers: Vec<String>,
    #[serde(default = "default_handoff_depth")]
    pub max_handoff_depth: u32,
    /// Delegated children of one invocation running at once.
    #[serde(default = "default_children")]
    pub max_concurrent_children: u32,
    /// Offer this agent in the catalog as the tool `agent/<id>:run`.
    #[serde(default)]
    pub callable_as_tool: bool,
}

impl Default for DelegationPolicy {
    fn default() -> Self {
        DelegationPolicy {
            can_delegate: false,
            can_handoff: false,
            targets: Vec::new(),
            callable: false,
            allow_as_handoff_target: false,
            allowed_callers: Vec::new(),
            max_handoff_depth: DEFAULT_MAX_HANDOFF_DEPTH,
            max_concurrent_children: DEFAULT_MAX_CONCURRENT_CHILDREN,
            callable_as_tool: false,
        }
    }
}

/// Which wire protocol a model endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// OpenAI Chat Completions and compatible servers (vLLM, Ollama, llama.cpp).
    OpenaiCompatible,
    Anthropic,
    Gemini,
    /// A file of scripted model turns, for offline runs and tests.
    Scripted,
}

/// The names `model.providerFormat` accepts (the provider wire formats' stable names).
pub const MODEL_FORMATS: [&str; 4] = [
    "openai_chat",
    "openai_responses",
    "anthropic_messages",
    "gemini",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelEndpoint {
    pub kind: ModelKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Name of the environment variable holding the API key (the key itself is never stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Path of the script for `scripted` endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// The wire format (`openai_chat`, `openai_responses`, `anthropic_messages`, `gemini`);
    /// absent = the kind's native one. Which kinds speak which formats is the runtime's rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_format: Option<String>,
    /// The most tokens (estimated) one request may carry before the history is trimmed; absent =
    /// the runtime's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_budget_tokens: Option<u32>,
}

fn default_max_calls() -> u32 {
    DEFAULT_MAX_CALLS_PER_INVOCATION
}
fn default_max_rounds() -> u32 {
    DEFAULT_MAX_ROUNDS
}
fn default_inline_limit() -> u32 {
    DEFAULT_MCP_RESULT_INLINE_CHAR_LIMIT
}
fn all_roots() -> Vec<String> {
    ROOT_UNIVERSE.iter().map(|r| (*r).to_owned()).collect()
}
fn default_artifact_root() -> String {
    "output/".to_owned()
}
fn default_skill_per_call() -> u32 {
    DEFAULT_SKILL_READ_CHARS_PER_CALL
}
fn default_skill_per_run() -> u32 {
    DEFAULT_SKILL_READ_CHARS_PER_RUN
}
fn default_handoff_depth() -> u32 {
    DEFAULT_MAX_HANDOFF_DEPTH
}
fn default_children() -> u32 {
    DEFAULT_MAX_CONCURRENT_CHILDREN
}

/// A warning about a profile that is valid but may not do what its author meant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileWarning {
    pub selector: String,
    pub message: String,
}

impl Profile {
    /// Parses and validates a profile document.
    pub fn from_json(text: &str) -> Result<Profile, CoreError> {
        if text.len() > MAX_PROFILE_BYTES {
            return Err(CoreError::new(
                PROFILE_INVALID,
                format!("profile is {} bytes, over {MAX_PROFILE_BYTES}", text.len()),
            ));
        }
        let profile: Profile = serde_json::from_str(text).map_err(|e| {
            // Selector errors surface through serde; keep their own code.
            let msg = e.to_string();
            let code = if msg.contains(PROFILE_INVALID_SELECTOR.as_str()) {
                PROFILE_INVALID_SELECTOR
            } else {
                PROFILE_INVALID
            };
            CoreError::new(code, msg)
        })?;
        profile.validate()?;
        Ok(profile)
    }

    /// Checks every rule a parsed profile must meet.
    pub fn validate(&self) -> Result<(), CoreError> {
        valid_segment(&self.id)
            .map_err(|why| CoreError::new(PROFILE_INVALID, format!("id `{}`: {why}", self.id)))?;
        let t = &self.tools;
        for (name, list) in [("tools.allow", &t.allow), ("tools.deny", &t.deny)] {
            if list.len() > MAX_SELECTORS {
                return Err(CoreError::new(
                    PROFILE_INVALID_LIMIT,
                    format!("{name} has {} selectors, over {MAX_SELECTORS}", list.len()),
                ));
            }
        }
        for sel in &t.allow {
            if let ToolSelector::Exact(id) = sel
                && builtin::is_runtime_only(id)
            {
                return Err(CoreError::new(
                    PROFILE_RUNTIME_ONLY_TOOL,
                    format!(
                        "`{id}` is injected by the runtime (return-mode children, tool search) and cannot be allowed in a profile"
                    ),
                ));
            }
        }
        limit(
            "tools.maxCallsPerInvocation",
            t.max_calls_per_invocation,
            10_000,
        )?;
        limit("tools.maxRounds", t.max_rounds, 1_000)?;
        limit(
            "tools.mcpResultInlineCharLimit",
            t.mcp_result_inline_char_limit,
            10_000_000,
        )?;
        if let Some(n) = t.max_calls_per_tool {
            limit("tools.maxCallsPerTool", n, 10_000)?;
        }
        t.cycle.validate()?;
        if let Some(search) = &t.search {
            if search.core.len() > MAX_SELECTORS {
                return Err(CoreError::new(
                    PROFILE_INVALID_LIMIT,
                    format!(
                        "tools.search.core has {} selectors, over {MAX_SELECTORS}",
                        search.core.len()
                    ),
                ));
            }
            limit("tools.search.maxResults", search.max_results, 20)?;
            limit("tools.search.maxFound", search.max_found, 1_000)?;
        }
        self.run_budget
            .validate("runBudget")
            .map_err(|why| CoreError::new(PROFILE_INVALID_LIMIT, why))?;
        for (key, o) in &t.overrides {
            let sel = ToolSelector::parse(key)?;
            if !sel.is_single_tool() {
                return Err(CoreError::new(
                    PROFILE_INVALID_SELECTOR,
                    format!(
                        "tools.overrides key `{key}` must name one tool (an exact id or mcp:<server>/<tool>)"
                    ),
                ));
            }
            if let Some(n) = o.max_calls {
                limit(&format!("tools.overrides[{key}].maxCalls"), n, 10_000)?;
            }
            if o.description
                .as_ref()
                .is_some_and(|d| d.len() > crate::descriptor::MAX_DESCRIPTION_LEN)
            {
                return Err(CoreError::new(
                    PROFILE_INVALID_LIMIT,
                    format!("tools.overrides[{key}].description is too long"),
                ));
            }
        }
        let w = &self.workspace;
        for root in w.visible_roots.iter().chain(&w.writable_roots) {
            if !ROOT_UNIVERSE.contains(&root.as_str()) {
                return Err(CoreError::new(
                    PROFILE_INVALID,
                    format!(
                        "workspace root `{root}` is not one of {}",
                        ROOT_UNIVERSE.join(" ")
                    ),
                ));
            }
        }
        if let Some(root) = w
            .writable_roots
            .iter()
            .find(|r| !w.visible_roots.contains(r))
        {
            return Err(CoreError::new(
                PROFILE_INVALID,
                format!("writable root `{root}` is not visible"),
            ));
        }
        if !w
            .visible_roots
            .iter()
            .any(|r| w.message_artifact_root.starts_with(r.as_str()))
        {
            return Err(CoreError::new(
                PROFILE_INVALID,
                format!(
                    "messageArtifactRoot `{}` is not under a visible root",
                    w.message_artifact_root
                ),
            ));
        }
        limit(
            "skills.maxReadCharsPerCall",
            self.skills.max_read_chars_per_call,
            10_000_000,
        )?;
        limit(
            "skills.maxReadCharsPerRun",
            self.skills.max_read_chars_per_run,
            100_000_000,
        )?;
        limit(
            "delegation.maxHandoffDepth",
            self.delegation.max_handoff_depth,
            32,
        )?;
        limit(
            "delegation.maxConcurrentChildren",
            self.delegation.max_concurrent_children,
            64,
        )?;
        for target in self
            .delegation
            .targets
            .iter()
            .chain(&self.delegation.allowed_callers)
        {
            if target != "*" {
                valid_segment(target).map_err(|why| {
                    CoreError::new(
                        PROFILE_INVALID,
                        format!("delegation profile id `{target}`: {why}"),
                    )
                })?;
            }
        }
        if let Some(m) = &self.model {
            if m.kind == ModelKind::Scripted && m.script.is_none() {
                return Err(CoreError::new(
                    PROFILE_INVALID,
                    "model.script is required for a scripted endpoint",
                ));
            }
            if m.kind != ModelKind::Scripted && m.base_url.is_none() {
                return Err(CoreError::new(PROFILE_INVALID, "model.baseUrl is required"));
            }
            if let Some(t) = m.timeout_ms {
                limit("model.timeoutMs", t, 3_600_000)?;
            }
            if let Some(t) = m.context_budget_tokens {
                limit("model.contextBudgetTokens", t, 100_000_000)?;
            }
            if let Some(f) = &m.provider_format
                && !MODEL_FORMATS.contains(&f.as_str())
            {
                return Err(CoreError::new(
                    PROFILE_INVALID,
                    format!(
                        "model.providerFormat `{}` is not one of {}",
                        f.chars().take(64).collect::<String>(),
                        MODEL_FORMATS.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Warnings against a catalog: allow/deny selectors that match nothing yet. Tools may appear
    /// later (an MCP server registered after the profile), so these are warnings, not errors.
    pub fn warnings(&self, catalog: &ToolCatalog) -> Vec<ProfileWarning> {
        let mut out = Vec::new();
        let override_keys: Vec<ToolSelector> = self
            .tools
            .overrides
            .keys()
            .filter_map(|k| ToolSelector::parse(k).ok())
            .collect();
        let all = self
            .tools
            .allow
            .iter()
            .chain(&self.tools.deny)
            .chain(&override_keys);
        let mut seen = BTreeSet::new();
        for sel in all {
            if matches!(sel, ToolSelector::All) || !seen.insert(sel.to_string()) {
                continue;
            }
            if !catalog.entries().iter().any(|e| sel.matches(e)) {
                out.push(ProfileWarning {
                    selector: sel.to_string(),
                    message: "matches no tool in the catalog yet".into(),
                });
            }
        }
        out
    }

    /// The per-tool override for a tool, if a single-tool selector names it.
    pub fn override_for(&self, entry: &crate::catalog::CatalogEntry) -> Option<&ToolOverride> {
        self.tools
            .overrides
            .iter()
            .find(|(k, _)| ToolSelector::parse(k).is_ok_and(|s| s.matches(entry)))
            .map(|(_, o)| o)
    }
}

fn limit(name: &str, value: u32, max: u32) -> Result<(), CoreError> {
    if value == 0 {
        return Err(CoreError::new(
            PROFILE_INVALID_LIMIT,
            format!("{name} must be at least 1"),
        ));
    }
    if value > max {
        return Err(CoreError::new(
            PROFILE_INVALID_LIMIT,
            format!("{name} is {value}, over the maximum {max}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn code(text: &str) -> ErrorCode {
        Profile::from_json(text).unwrap_err().code
    }

    #[test]
    fn minimal_profile_gets_defaults() {
        let p = Profile::from_json(r#"{"id":"writer","tools":{"allow":["builtin:workspace.*"]}}"#)
            .unwrap();
        assert_eq!(
            p.tools.max_calls_per_invocation,
            DEFAULT_MAX_CALLS_PER_INVOCATION
        );
        assert_eq!(p.tools.mcp_result_inline_char_limit, 50_000);
        assert_eq!(p.workspace.visible_roots.len(), 5);
        let round: Profile = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(round, p);
    }

    #[test]
    fn a_run_budget_is_read_and_its_limits_checked() {
        let p = Profile::from_json(
            r#"{"id":"a","tools":{"allow":[]},"runBudget":{"maxToolCalls":500,"maxModelTokens":2000000}}"#,
        )
        .unwrap();
        assert_eq!(p.run_budget.max_tool_calls, Some(500));
        assert_eq!(p.run_budget.max_model_tokens, Some(2_000_000));
        for bad in [
            r#"{"id":"a","tools":{"allow":[]},"runBudget":{"maxToolCalls":0}}"#,
            r#"{"id":"a","tools":{"allow":[]},"runBudget":{"maxModelTokens":0}}"#,
        ] {
            assert_eq!(
                Profile::from_json(bad).unwrap_err().code,
                PROFILE_INVALID_LIMIT
            );
        }
        let typo = r#"{"id":"a","tools":{"allow":[]},"runBudget":{"maxCalls":5}}"#;
        assert_eq!(Profile::from_json(typo).unwrap_err().code, PROFILE_INVALID);
    }

    #[test]
    fn a_model_endpoint_names_its_format_and_context_budget() {
        let p = Profile::from_json(r#"{"id":"a","tools":{"allow":[]},"model":{"kind":"openai-compatible","baseUrl":"http://h/v1","providerFormat":"openai_responses","contextBudgetTokens":32000}}"#).unwrap();
        let m = p.model.unwrap();
        assert_eq!(m.provider_format.as_deref(), Some("openai_responses"));
        assert_eq!(m.context_budget_tokens, Some(32_000));
    }

    #[test]
    fn bad_profiles_get_coded_errors() {
        let cases = [
            (r#"{"id":"a"}"#, PROFILE_INVALID),
            (r#"{"id":"a","tools":{}}"#, PROFILE_INVALID),
            (
                r#"{"id":"a","tools":{"allow":[]},"colour":"red"}"#,
                PROFILE_INVALID,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"maxCalls":3}}"#,
                PROFILE_INVALID,
            ),
            (r#"{"id":"A b","tools":{"allow":[]}}"#, PROFILE_INVALID),
            (
                r#"{"id":"a","tools":{"allow":["nope"]}}"#,
                PROFILE_INVALID_SELECTOR,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"maxCallsPerInvocation":0}}"#,
                PROFILE_INVALID_LIMIT,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"maxRounds":0}}"#,
                PROFILE_INVALID_LIMIT,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"maxCallsPerTool":0}}"#,
                PROFILE_INVALID_LIMIT,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"mcpResultInlineCharLimit":0}}"#,
                PROFILE_INVALID_LIMIT,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"maxCallsPerInvocation":99999999}}"#,
                PROFILE_INVALID_LIMIT,
            ),
            (
                r#"{"id":"a","tools":{"allow":["builtin:task.return"]}}"#,
                PROFILE_RUNTIME_ONLY_TOOL,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"overrides":{"builtin:*":{"maxCalls":1}}}}"#,
                PROFILE_INVALID_SELECTOR,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"overrides":{"builtin:dice.roll":{"maxCalls":0}}}}"#,
                PROFILE_INVALID_LIMIT,
            ),
            (
                r#"{"id":"a","tools":{"allow":[]},"workspace":{"visibleRoots":["/etc/"]}}"#,
                PROFILE_INVALID,
            ),
            (
                r#"{"id":"a","tools":{"allow":[]},"workspace":{"visibleRoots":["output/"],"writableRoots":["plan/"]}}"#,
                PROFILE_INVALID,
            ),
            (
                r#"{"id":"a","tools":{"allow":[]},"skills":{"maxReadCharsPerRun":0}}"#,
                PROFILE_INVALID_LIMIT,
            ),
            (
                r#"{"id":"a","tools":{"allow":[]},"model":{"kind":"openai-compatible"}}"#,
                PROFILE_INVALID,
            ),
            (
                r#"{"id":"a","tools":{"allow":[]},"model":{"kind":"scripted"}}"#,
                PROFILE_INVALID,
            ),
            (
                r#"{"id":"a","tools":{"allow":[]},"model":{"kind":"gemini","baseUrl":"http://h","providerFormat":"vertex"}}"#,
                PROFILE_INVALID,
            ),
            (
                r#"{"id":"a","tools":{"allow":[]},"model":{"kind":"gemini","baseUrl":"http://h","contextBudgetTokens":0}}"#,
                PROFILE_INVALID_LIMIT,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"cycle":{"identicalStop":0}}}"#,
                PROFILE_INVALID_LIMIT,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"cycle":{"sameToolStop":10001}}}"#,
                PROFILE_INVALID_LIMIT,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"cycle":{"identicalWarn":6}}}"#,
                PROFILE_INVALID_LIMIT,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"cycle":{"identicalWarn":-1}}}"#,
                PROFILE_INVALID,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"cycle":{"explorationStop":40}}}"#,
                PROFILE_INVALID,
            ),
            (
                r#"{"id":"a","tools":{"allow":[],"cycle":5}}"#,
                PROFILE_INVALID,
            ),
            ("not json", PROFILE_INVALID),
        ];
        for (text, want) in cases {
            assert_eq!(code(text), want, "{text}");
        }
    }

    #[test]
    fn cycle_thresholds_are_optional_per_key() {
        let p = Profile::from_json(r#"{"id":"a","tools":{"allow":[]}}"#).unwrap();
        assert_eq!(p.tools.cycle, CycleThresholds::default());
        assert!(!serde_json::to_string(&p).unwrap().contains("cycle"));
        let p = Profile::from_json(
            r#"{"id":"a","tools":{"allow":[],"cycle":{"identicalStop":8,"sameToolWarn":100,"sameToolStop":200}}}"#,
        )
        .unwrap();
        assert_eq!(
            p.tools.cycle,
            CycleThresholds {
                identical_warn: 3,
                identical_stop: 8,
                same_tool_warn: 100,
                same_tool_stop: 200,
            }
        );
        let round: Profile = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(round, p);
        // Warn equal to stop: the streak stops without a warning first.
        assert!(
            Profile::from_json(
                r#"{"id":"a","tools":{"allow":[],"cycle":{"identicalWarn":4,"identicalStop":4}}}"#
            )
            .is_ok()
        );
    }

    #[test]
    fn warnings_name_selectors_that_match_nothing() {
        let catalog = ToolCatalog::new(builtin::descriptors().into_iter().map(|d| {
            crate::catalog::CatalogEntry::usable(crate::catalog::ToolOrigin::Builtin, d).unwrap()
        }))
        .unwrap();
        let p = Profile::from_json(r#"{"id":"a","tools":{"allow":["builtin:workspace.*","mcp:github/*","*"],"deny":["ext/x:y"]}}"#).unwrap();
        let w: Vec<String> = p
            .warnings(&catalog)
            .into_iter()
            .map(|w| w.selector)
            .collect();
        assert_eq!(w, ["mcp:github/*", "ext/x:y"]);
    }
}
