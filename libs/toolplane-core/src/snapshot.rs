//! The invocation tool snapshot and its compiler.
//!
//! A snapshot is compiled once when an invocation opens, from the resolved profile, the policy
//! layers, the exit policy and the catalog, and then never recomputed: every later step (turns,
//! decoding, the gate, dispatch) reads the snapshot only. Each binding records its executor, so
//! dispatch never re-reads the catalog. The runtime persists it create-only as
//! `input/invocations/<id>/tool_snapshot.json` with [`SNAPSHOT_SCHEMA_VERSION`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::alias::{self, ModelAlias};
use crate::builtin::{self, BuiltinExecutor};
use crate::catalog::{CatalogEntry, OmitReason, ToolCatalog, ToolOrigin, ToolSource};
use crate::category::{self, Category};
use crate::descriptor::ToolDescriptor;
use crate::error::{CoreError, TOOL_INVALID_DESCRIPTOR};
use crate::id::ToolId;
use crate::policy::{self, DeniedCallMode, PolicyLayers};
use crate::profile::Profile;

/// Version of the persisted snapshot document.
pub const SNAPSHOT_SCHEMA_VERSION: u32 = 1;

/// Who executes a binding's calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Executor {
    /// The runtime itself (agent control, task.return, commit, finish, dice).
    RuntimeControl,
    /// The workspace service's `ToolExecutor`.
    Workspace,
    /// The mcp-proxy's `ToolExecutor`, for one registration.
    McpProxy { registration_id: String },
    /// An external host's `ToolExecutor` endpoint (SDK tools, plugins, extensions, adapters,
    /// per-run tools).
    External { host_id: String, endpoint: String },
    /// A sub-agent offered as a tool: the runtime delegates and awaits.
    SubAgent { profile_id: String },
}

/// How an invocation ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExitPolicy {
    /// A root invocation: ends with `workspace.finish` (or handoff).
    Root,
    /// A return-mode child: loses commit, finish and delegation, gains `task.return`.
    ReturnToParent {
        parent_invocation_id: String,
        task_id: String,
    },
    /// An invocation that took over a run by handoff; compiled from the target profile.
    Handoff {
        from_invocation_id: String,
        depth: u32,
    },
}

/// One tool as an invocation sees it: frozen descriptor, alias, executor and limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolBinding {
    /// Shared with the catalog entry it was compiled from (copied only when overridden).
    pub descriptor: Arc<ToolDescriptor>,
    pub alias: ModelAlias,
    pub source: ToolSource,
    pub executor: Executor,
    pub category: Category,
    /// Calls this tool may make per invocation; `None` = only the total applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_calls: Option<u32>,
    pub approval_required: bool,
    /// Which rule asked for approval (shown on the approval card); `None` without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_rule: Option<String>,
    pub progress_aware: bool,
    /// The MCP server display name, for MCP bindings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    /// For MCP bindings: the version of the server's cached tool list the binding was frozen
    /// from (it increases each time the server's list changes; docs/mcp-proxy.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_catalog_version: Option<u64>,
}

impl ToolBinding {
    pub fn tool_id(&self) -> &ToolId {
        self.descriptor.id()
    }
}

/// A tool the profile selected but the snapshot leaves out, with why (a `tool_omitted` event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OmittedTool {
    /// The tool id, or the selector when no tool matched it.
    pub tool: String,
    pub reason: OmitReason,
}

/// The roots the invocation's workspace tools may touch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceRoots {
    pub visible: Vec<String>,
    pub writable: Vec<String>,
    pub message_artifact_root: String,
}

/// The immutable tool surface of one invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvocationToolSnapshot {
    pub schema_version: u32,
    /// Equal to the invocation id within a run.
    pub snapshot_id: String,
    pub run_id: String,
    pub invocation_id: String,
    pub profile_id: String,
    pub exit_policy: ExitPolicy,
    /// In advertisement order.
    pub bindings: Vec<ToolBinding>,
    pub max_calls_per_invocation: u32,
    pub max_rounds: u32,
    pub mcp_result_inline_char_limit: u32,
    pub denied_call_mode: DeniedCallMode,
    pub workspace: WorkspaceRoots,
    pub omitted: Vec<OmittedTool>,
    /// Tool search: the tools advertised from the first turn; the others wait to be found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<SnapshotSearch>,
}

/// The tool-search plan of a snapshot whose profile turns search on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotSearch {
    /// Advertised from the first turn: the profile's core selectors, the terminal tools,
    /// `tools.search` and `task.return`; in binding order.
    pub core: Vec<ToolId>,
    /// Most tools one search returns by default.
    pub max_results: u32,
    /// Most tools searches may add to the advertised set.
    pub max_found: u32,
}

/// Everything the compiler reads.
#[derive(Debug, Clone, Copy)]
pub struct CompileRequest<'a> {
    pub run_id: &'a str,
    pub invocation_id: &'a str,
    pub profile: &'a Profile,
    pub layers: PolicyLayers<'a>,
    pub exit_policy: &'a ExitPolicy,
    pub catalog: &'a ToolCatalog,
}

/// A compact summary for the journal (`context_assembled`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotSummary {
    pub snapshot_id: String,
    pub schema_version: u32,
    pub profile_id: String,
    pub tools: Vec<SummaryTool>,
    pub omitted: usize,
    pub max_calls_per_invocation: u32,
    pub max_rounds: u32,
    /// The version of each bound MCP server's cached tool list (by registration id) that the
    /// snapshot was compiled from; a later invocation of the run naming a higher version saw the
    /// server's tools change.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_catalogs: std::collections::BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryTool {
    pub tool_id: ToolId,
    pub alias: ModelAlias,
}

impl InvocationToolSnapshot {
    /// Compiles a snapshot: allow order is advertisement order (a selector expands in catalog
    /// order), deny beats allow, overrides and limits are applied, unusable tools are omitted with a
    /// diagnostic, the exit policy is applied, and aliases are frozen.
    pub fn compile(req: CompileRequest<'_>) -> Result<InvocationToolSnapshot, CoreError> {
        let profile = req.profile;
        let return_child = matches!(req.exit_policy, ExitPolicy::ReturnToParent { .. });
        // Catalog positions already considered: a tool selected twice is bound once, at its first
        // selector.
        let mut seen = vec![false; req.catalog.len()];
        let mut chosen: Vec<(&CatalogEntry, policy::ToolDecision)> = Vec::new();
        let mut omitted = Vec::new();

        for sel in &profile.tools.allow {
            let mut matched_any = false;
            let candidates = req.catalog.select_positions(sel);
            for (pos, entry) in candidates {
                matched_any = true;
                if builtin::is_runtime_only(entry.id()) || std::mem::replace(&mut seen[pos], true) {
                    continue;
                }
                if return_child && builtin::removed_for_return_child(entry.id()) {
                    omitted.push(OmittedTool {
                        tool: entry.id().to_string(),
                        reason: OmitReason::RemovedByExitPolicy,
                    });
                    continue;
                }
                if let Some(setting) = delegation_switch(entry.id(), profile) {
                    omitted.push(OmittedTool {
                        tool: entry.id().to_string(),
                        reason: OmitReason::Denied {
                            layer: "delegation".into(),
                            selector: format!("{setting} is false"),
                        },
                    });
                    continue;
                }
                let decision = policy::resolve(entry, profile, &req.layers, true);
                match (&decision.reason, entry.usable_descriptor()) {
                    (None, Some(_)) => chosen.push((entry, decision)),
                    (Some(reason), _) => omitted.push(OmittedTool {
                        tool: entry.id().to_string(),
                        reason: reason.clone(),
                    }),
                    (None, None) => omitted.push(OmittedTool {
                        tool: entry.id().to_string(),
                        reason: OmitReason::NotCached,
                    }),
                }
            }
            if !matched_any && sel.is_single_tool() {
                omitted.push(OmittedTool {
                    tool: sel.to_string(),
                    reason: OmitReason::Missing,
                });
            }
        }

        let task_return = if return_child {
            let d = builtin::descriptor(builtin::TASK_RETURN).ok_or_else(|| {
                CoreError::new(
                    TOOL_INVALID_DESCRIPTOR,
                    "the task.return descriptor is missing",
                )
            })?;
            Some(d)
        } else {
            None
        };

        let search_tool = match &profile.tools.search {
            Some(_) => Some(builtin::descriptor(builtin::TOOLS_SEARCH).ok_or_else(|| {
                CoreError::new(
                    TOOL_INVALID_DESCRIPTOR,
                    "the tools.search descriptor is missing",
                )
            })?),
            None => None,
        };
        let alias_input = chosen
            .iter()
            .map(|(e, _)| (e.id(), e.origin().server_name()))
            .chain(task_return.iter().map(|d| (d.id(), None)))
            .chain(search_tool.iter().map(|d| (d.id(), None)));
        let aliases = alias::assign(alias_input);

        let mut bindings = Vec::with_capacity(aliases.len());
        let mut aliases = aliases.into_iter();
        for (entry, decision) in &chosen {
            let Some(alias) = aliases.next() else { break };
            let Some(executor) = executor_for(entry) else {
                omitted.push(OmittedTool {
                    tool: entry.id().to_string(),
                    reason: OmitReason::Missing,
                });
                continue;
            };
            // `usable_descriptor` was checked when the entry was chosen.
            let Some(base) = entry.usable_descriptor_arc() else {
                continue;
            };
            let mut descriptor = Arc::clone(base);
            if let Some(text) = profile
                .override_for(entry)
                .and_then(|o| o.description.clone())
            {
                descriptor = Arc::new(descriptor.as_ref().clone().with_description(text)?);
            }
            bindings.push(ToolBinding {
                category: category::resolve(
                    entry.id(),
                    descriptor.annotations(),
                    &profile.tools.extra_categories,
                ),
                progress_aware: builtin::is_progress_aware(entry.id())
                    || profile.tools.extra_progress_aware.contains(entry.id()),
                alias,
                source: entry.source(),
                executor,
                max_calls: decision.budget,
                approval_required: decision.approval_required,
                approval_rule: decision.approval_rule.clone(),
                server_name: entry.origin().server_name().map(str::to_owned),
                mcp_catalog_version: entry.catalog_version(),
                descriptor,
            });
        }
        for d in task_return.into_iter().chain(search_tool) {
            let Some(alias) = aliases.next() else { break };
            bindings.push(ToolBinding {
                category: if d.id().is_builtin(builtin::TOOLS_SEARCH) {
                    Category::Exploration
                } else {
                    Category::Action
                },
                progress_aware: false,
                alias,
                source: ToolSource::Builtin,
                executor: Executor::RuntimeControl,
                max_calls: None,
                approval_required: false,
                approval_rule: None,
                server_name: None,
                mcp_catalog_version: None,
                descriptor: Arc::new(d.clone()),
            });
        }
        let search = profile.tools.search.as_ref().map(|plan| SnapshotSearch {
            core: bindings
                .iter()
                .map(ToolBinding::tool_id)
                .filter(|id| {
                    builtin::is_terminal(id)
                        || builtin::is_runtime_only(id)
                        || chosen
                            .iter()
                            .find(|(e, _)| e.id() == *id)
                            .is_some_and(|(e, _)| plan.core.iter().any(|sel| sel.matches(e)))
                })
                .cloned()
                .collect(),
            max_results: plan.max_results,
            max_found: plan.max_found,
        });

        let w = &profile.workspace;
        Ok(InvocationToolSnapshot {
            schema_version: SNAPSHOT_SCHEMA_VERSION,
            snapshot_id: req.invocation_id.to_owned(),
            run_id: req.run_id.to_owned(),
            invocation_id: req.invocation_id.to_owned(),
            profile_id: profile.id.clone(),
            exit_policy: req.exit_policy.clone(),
            bindings,
            max_calls_per_invocation: req.layers.max_calls_per_invocation(profile),
            max_rounds: profile.tools.max_rounds,
            mcp_result_inline_char_limit: profile.tools.mcp_result_inline_char_limit,
            denied_call_mode: req.layers.denied_call_mode(),
            workspace: WorkspaceRoots {
                visible: w.visible_roots.clone(),
                writable: w.writable_roots.clone(),
                message_artifact_root: w.message_artifact_root.clone(),
            },
            omitted,
            search,
        })
    }

    /// The binding of a tool, if the snapshot has it.
    pub fn binding(&self, id: &ToolId) -> Option<&ToolBinding> {
        self.bindings.iter().find(|b| b.tool_id() == id)
    }

    /// The binding of a builtin by native name.
    pub fn builtin(&self, native: &str) -> Option<&ToolBinding> {
        self.bindings
            .iter()
            .find(|b| b.tool_id().is_builtin(native))
    }

    pub fn summary(&self) -> SnapshotSummary {
        SnapshotSummary {
            snapshot_id: self.snapshot_id.clone(),
            schema_version: self.schema_version,
            profile_id: self.profile_id.clone(),
            tools: self
                .bindings
                .iter()
                .map(|b| SummaryTool {
                    tool_id: b.tool_id().clone(),
                    alias: b.alias.clone(),
                })
                .collect(),
            omitted: self.omitted.len(),
            max_calls_per_invocation: self.max_calls_per_invocation,
            max_rounds: self.max_rounds,
            mcp_catalogs: self
                .bindings
                .iter()
                .filter_map(|b| match (b.tool_id().provider(), b.mcp_catalog_version) {
                    (crate::id::Provider::Mcp(server), Some(v)) => Some((server.clone(), v)),
                    _ => None,
                })
                .collect(),
        }
    }

    /// Parses a persisted snapshot, refusing other schema versions.
    pub fn from_json(text: &str) -> Result<InvocationToolSnapshot, CoreError> {
        let snap: InvocationToolSnapshot = serde_json::from_str(text).map_err(|e| {
            CoreError::new(
                TOOL_INVALID_DESCRIPTOR,
                format!("snapshot is not readable: {e}"),
            )
        })?;
        if snap.schema_version != SNAPSHOT_SCHEMA_VERSION {
            return Err(CoreError::new(
                TOOL_INVALID_DESCRIPTOR,
                format!(
                    "snapshot schema version {} is not {SNAPSHOT_SCHEMA_VERSION}",
                    snap.schema_version
                ),
            ));
        }
        Ok(snap)
    }
}

/// The profile switch that keeps a delegation tool out of the snapshot, if it is off: delegating
/// and awaiting need `canDelegate`, handing off needs `canHandoff`, listing needs either.
fn delegation_switch(id: &ToolId, profile: &Profile) -> Option<&'static str> {
    let d = &profile.delegation;
    if (id.is_builtin(builtin::AGENT_DELEGATE) || id.is_builtin(builtin::AGENT_AWAIT))
        && !d.can_delegate
    {
        Some("delegation.canDelegate")
    } else if id.is_builtin(builtin::AGENT_HANDOFF) && !d.can_handoff {
        Some("delegation.canHandoff")
    } else if id.is_builtin(builtin::AGENT_LIST) && !d.can_delegate && !d.can_handoff {
        Some("delegation.canDelegate and delegation.canHandoff")
    } else {
        None
    }
}

fn executor_for(entry: &CatalogEntry) -> Option<Executor> {
    Some(match entry.origin() {
        ToolOrigin::Builtin => match builtin::executor_of(entry.id().native())? {
            BuiltinExecutor::RuntimeControl => Executor::RuntimeControl,
            BuiltinExecutor::Workspace => Executor::Workspace,
        },
        ToolOrigin::Mcp {
            registration_id, ..
        } => Executor::McpProxy {
            registration_id: registration_id.clone(),
        },
        ToolOrigin::External { host_id, endpoint } | ToolOrigin::RunSpec { host_id, endpoint } => {
            Executor::External {
                host_id: host_id.clone(),
                endpoint: endpoint.clone(),
            }
        }
        ToolOrigin::Adapter { adapter, endpoint } => Executor::External {
            host_id: adapter.clone(),
            endpoint: endpoint.clone(),
        },
        ToolOrigin::SubAgent { profile_id } => Executor::SubAgent {
            profile_id: profile_id.clone(),
        },
    })
}
