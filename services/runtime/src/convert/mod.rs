//! Conversions between `toolplane.v1` messages and the runtime's types: core types here, the
//! ports' types in [`peers`], runs and tasks in [`runs`]. With the service and the tonic
//! adapters (`peers`), the only place of the runtime that knows protobuf; everything else speaks
//! core and runtime types.

pub mod approvals;
pub mod peers;
pub mod runs;

use serde_json::Value;
use toolplane_core::catalog::{CatalogEntry, McpPermission, OmitReason, ToolOrigin};
use toolplane_core::descriptor::{ToolAnnotations, ToolDescriptor};
use toolplane_core::error::CoreError;
use toolplane_core::id::ToolId;
use toolplane_core::result::{AgentToolResult, ResourceRef};
use toolplane_core::snapshot::{Executor, ExitPolicy, InvocationToolSnapshot};
use toolplane_core::turn::{ToolChoice, ToolTurnContract};
use toolplane_core::{Category, ToolSource};
use toolplane_model::ProviderFormat;
use toolplane_proto::v1 as pb;

use crate::error::RuntimeError;
use crate::state::{Level, Record};

pub fn provider_format(v: i32) -> Result<ProviderFormat, RuntimeError> {
    match pb::ProviderFormat::try_from(v).unwrap_or(pb::ProviderFormat::Unspecified) {
        pb::ProviderFormat::OpenaiChat | pb::ProviderFormat::Unspecified => {
            Ok(ProviderFormat::OpenAiChat)
        }
        pb::ProviderFormat::OpenaiResponses => Ok(ProviderFormat::OpenAiResponses),
        pb::ProviderFormat::AnthropicMessages => Ok(ProviderFormat::AnthropicMessages),
        pb::ProviderFormat::Gemini => Ok(ProviderFormat::Gemini),
    }
}

pub fn provider_format_pb(f: ProviderFormat) -> i32 {
    match f {
        ProviderFormat::OpenAiChat => pb::ProviderFormat::OpenaiChat as i32,
        ProviderFormat::OpenAiResponses => pb::ProviderFormat::OpenaiResponses as i32,
        ProviderFormat::AnthropicMessages => pb::ProviderFormat::AnthropicMessages as i32,
        ProviderFormat::Gemini => pb::ProviderFormat::Gemini as i32,
    }
}

pub fn tool_choice(choice: Option<&pb::ToolChoice>) -> Result<ToolChoice, RuntimeError> {
    let Some(c) = choice else {
        return Ok(ToolChoice::Auto);
    };
    Ok(
        match pb::ToolChoiceMode::try_from(c.mode).unwrap_or(pb::ToolChoiceMode::Unspecified) {
            pb::ToolChoiceMode::Unspecified | pb::ToolChoiceMode::Auto => ToolChoice::Auto,
            pb::ToolChoiceMode::None => ToolChoice::None,
            pb::ToolChoiceMode::Required => ToolChoice::Required,
            pb::ToolChoiceMode::Specific => ToolChoice::Specific(ToolId::parse(&c.tool_id)?),
        },
    )
}

pub fn tool_choice_pb(c: &ToolChoice) -> pb::ToolChoice {
    let (mode, tool_id) = match c {
        ToolChoice::None => (pb::ToolChoiceMode::None, String::new()),
        ToolChoice::Auto => (pb::ToolChoiceMode::Auto, String::new()),
        ToolChoice::Required => (pb::ToolChoiceMode::Required, String::new()),
        ToolChoice::Specific(id) => (pb::ToolChoiceMode::Specific, id.to_string()),
    };
    pb::ToolChoice {
        mode: mode as i32,
        tool_id,
    }
}

pub fn turn_pb(
    turn: &ToolTurnContract,
    turn_id: &str,
    choice_json: Option<String>,
) -> pb::ToolTurn {
    pb::ToolTurn {
        turn_id: turn_id.to_owned(),
        round: turn.turn(),
        choice: Some(tool_choice_pb(turn.choice())),
        tool_choice_json: choice_json,
        tool_ids: turn.tools().iter().map(|t| t.tool_id.to_string()).collect(),
    }
}

pub fn exit_policy_pb(e: &ExitPolicy) -> i32 {
    match e {
        ExitPolicy::Root => pb::ExitPolicy::Root as i32,
        ExitPolicy::ReturnToParent { .. } => pb::ExitPolicy::ReturnChild as i32,
        ExitPolicy::Handoff { .. } => pb::ExitPolicy::Handoff as i32,
    }
}

fn source_pb(s: ToolSource) -> i32 {
    (match s {
        ToolSource::Builtin => pb::ToolSource::Builtin,
        ToolSource::Mcp => pb::ToolSource::Mcp,
        ToolSource::External => pb::ToolSource::External,
        ToolSource::SubAgent => pb::ToolSource::Agent,
        ToolSource::RunSpec => pb::ToolSource::Run,
        ToolSource::Adapter => pb::ToolSource::Adapter,
    }) as i32
}

fn category_pb(c: Category) -> i32 {
    (match c {
        Category::Exploration => pb::ToolCategory::Exploration,
        Category::Action => pb::ToolCategory::Action,
    }) as i32
}

fn executor_pb(e: &Executor) -> i32 {
    (match e {
        Executor::RuntimeControl | Executor::SubAgent { .. } => pb::ExecutorKind::Runtime,
        Executor::Workspace => pb::ExecutorKind::Workspace,
        Executor::McpProxy { .. } => pb::ExecutorKind::McpProxy,
        Executor::External { .. } => pb::ExecutorKind::External,
    }) as i32
}

pub fn snapshot_summary_pb(
    s: &InvocationToolSnapshot,
    path: &str,
    created_ms: i64,
    profile_version: u64,
) -> pb::SnapshotSummary {
    pb::SnapshotSummary {
        snapshot_id: s.snapshot_id.clone(),
        invocation_id: s.invocation_id.clone(),
        run_id: s.run_id.clone(),
        profile_id: s.profile_id.clone(),
        profile_version,
        schema_version: s.schema_version,
        exit_policy: exit_policy_pb(&s.exit_policy),
        bindings: s
            .bindings
            .iter()
            .map(|b| pb::ToolBindingSummary {
                tool_id: b.tool_id().to_string(),
                alias: b.alias.to_string(),
                executor: executor_pb(&b.executor),
                source: source_pb(b.source),
                category: category_pb(b.category),
                max_calls: b.max_calls,
                approval_required: b.approval_required,
            })
            .collect(),
        max_calls_per_invocation: Some(s.max_calls_per_invocation),
        max_rounds: Some(s.max_rounds),
        snapshot_path: path.to_owned(),
        created_at_unix_ms: created_ms,
    }
}

pub fn omissions_pb(s: &InvocationToolSnapshot) -> Vec<pb::ToolOmission> {
    s.omitted
        .iter()
        .map(|o| {
            let is_selector = ToolId::parse(&o.tool).is_err();
            pb::ToolOmission {
                tool_id: if is_selector {
                    String::new()
                } else {
                    o.tool.clone()
                },
                selector: if is_selector {
                    o.tool.clone()
                } else {
                    String::new()
                },
                diagnostic: Some(pb::Diagnostic {
                    code: format!("snapshot.{}", o.reason.kind()),
                    message: o.reason.describe(),
                    subject: o.tool.clone(),
                }),
            }
        })
        .collect()
}

pub fn result_pb(r: &AgentToolResult) -> pb::ToolResult {
    let class = r.error_class().map(|c| match c {
        toolplane_core::ErrorClass::Recoverable => pb::ErrorClass::Recoverable,
        toolplane_core::ErrorClass::PolicyDenied => pb::ErrorClass::PolicyDenied,
        toolplane_core::ErrorClass::ProviderContract => pb::ErrorClass::ProviderContract,
        toolplane_core::ErrorClass::System => pb::ErrorClass::System,
        toolplane_core::ErrorClass::InvalidInput => pb::ErrorClass::InvalidInput,
    });
    pb::ToolResult {
        call_id: r.call_id.clone(),
        tool_id: r.tool_id.to_string(),
        content: r.content.clone(),
        structured_json: r.structured.as_ref().map(Value::to_string),
        is_error: r.is_error,
        error_code: r.error_code.clone(),
        resource_refs: r
            .resource_refs
            .iter()
            .map(|x| pb::ResourceRef {
                uri: x.uri.clone(),
                title: x.title.clone(),
                mime_type: None,
            })
            .collect(),
        error_class: class.unwrap_or(if r.is_error {
            pb::ErrorClass::Recoverable
        } else {
            pb::ErrorClass::Unspecified
        }) as i32,
    }
}

/// An executor's answer as a core result. Unknown fields are dropped; a malformed tool id is an
/// identity mismatch the caller detects.
pub fn result_from_pb(r: pb::ToolResult) -> Result<AgentToolResult, CoreError> {
    Ok(AgentToolResult {
        call_id: r.call_id,
        tool_id: ToolId::parse(&r.tool_id)?,
        content: r.content,
        structured: r
            .structured_json
            .and_then(|s| serde_json::from_str(&s).ok()),
        is_error: r.is_error,
        error_code: r.error_code.filter(|c| !c.is_empty()),
        resource_refs: r
            .resource_refs
            .into_iter()
            .map(|x| ResourceRef {
                uri: x.uri,
                title: x.title,
            })
            .collect(),
    })
}

/// A catalog listing (from `ResolveProfile`) as a core catalog entry.
pub fn listing_to_entry(l: pb::ToolListing) -> Result<CatalogEntry, CoreError> {
    let d = l.descriptor.unwrap_or_default();
    let id = ToolId::parse(&d.id)?;
    let origin = match pb::ToolSource::try_from(l.source).unwrap_or(pb::ToolSource::Unspecified) {
        pb::ToolSource::Mcp => {
            let m = l.mcp.clone().unwrap_or_default();
            let permission = match pb::McpToolPermission::try_from(m.permission)
                .unwrap_or(pb::McpToolPermission::Off)
            {
                pb::McpToolPermission::Allow => McpPermission::Allow,
                pb::McpToolPermission::Ask => McpPermission::Ask,
                _ => McpPermission::Off,
            };
            let registration_id = match id.provider() {
                toolplane_core::Provider::Mcp(r) => r.clone(),
                _ => m.server_id.clone(),
            };
            ToolOrigin::Mcp {
                registration_id,
                server_name: m.server_display_name,
                permission,
            }
        }
        pb::ToolSource::External | pb::ToolSource::Run | pb::ToolSource::Adapter => {
            let e = l.external.clone().unwrap_or_default();
            let endpoint = e
                .endpoint
                .map(|x| x.url)
                .filter(|u| !u.is_empty())
                .unwrap_or(e.endpoint_url);
            ToolOrigin::External {
                host_id: e.host_id,
                endpoint,
            }
        }
        pb::ToolSource::Agent => match id.provider() {
            toolplane_core::Provider::Agent(p) => ToolOrigin::SubAgent {
                profile_id: p.clone(),
            },
            _ => ToolOrigin::Builtin,
        },
        _ => ToolOrigin::Builtin,
    };
    let descriptor = descriptor_from_pb(&d, id.clone());
    let version = l.mcp.as_ref().map_or(0, |m| m.catalog_version);
    if l.usable {
        return Ok(CatalogEntry::usable(origin, descriptor?)?.with_catalog_version(version));
    }
    let reason = l
        .diagnostics
        .first()
        .map(omit_reason)
        .unwrap_or(OmitReason::NotCached);
    Ok(CatalogEntry::unusable(id, origin, reason, descriptor.ok())?.with_catalog_version(version))
}

fn descriptor_from_pb(d: &pb::ToolDescriptor, id: ToolId) -> Result<ToolDescriptor, CoreError> {
    let schema: Value = serde_json::from_str(&d.input_schema_json).unwrap_or(Value::Null);
    let a = d.annotations.unwrap_or_default();
    ToolDescriptor::new(id, d.description.clone(), schema)?
        .with_title(d.title.clone())?
        .with_output_schema(
            d.output_schema_json
                .as_deref()
                .and_then(|s| serde_json::from_str(s).ok()),
        )
        .map(|x| {
            x.with_annotations(ToolAnnotations {
                read_only_hint: a.read_only_hint,
                destructive_hint: a.destructive_hint,
                idempotent_hint: a.idempotent_hint,
                open_world_hint: a.open_world_hint,
            })
        })
}

fn omit_reason(d: &pb::Diagnostic) -> OmitReason {
    let kind = d.code.rsplit('.').next().unwrap_or_default();
    match kind {
        "not_cached" => OmitReason::NotCached,
        "server_paused" | "paused" => OmitReason::ServerPaused,
        "permission_off" | "off" => OmitReason::PermissionOff,
        "non_object_schema" => OmitReason::NonObjectSchema {
            detail: d.message.clone(),
        },
        "no_model_endpoint" => OmitReason::NoModelEndpoint {
            profile_id: d.subject.clone(),
        },
        "task_required" => OmitReason::McpTaskRequired,
        _ => OmitReason::RegistrationCorrupt {
            detail: format!("{}: {}", d.code, d.message),
        },
    }
}

/// Per-run tools from a run spec as catalog entries under their host.
pub fn run_tools_to_entries(hosts: &[pb::RunToolHost]) -> Result<Vec<CatalogEntry>, CoreError> {
    let mut out = Vec::new();
    for h in hosts {
        let endpoint = h
            .endpoint
            .as_ref()
            .map(|e| e.url.clone())
            .unwrap_or_default();
        for t in &h.tools {
            let d = t.descriptor.clone().unwrap_or_default();
            let id = ToolId::parse_external(&d.id)?;
            let descriptor = descriptor_from_pb(&d, id)?;
            out.push(CatalogEntry::usable(
                ToolOrigin::RunSpec {
                    host_id: h.host_id.clone(),
                    endpoint: endpoint.clone(),
                },
                descriptor,
            )?);
        }
    }
    Ok(out)
}

pub fn journal_event_pb(e: &Record) -> pb::JournalEvent {
    pb::JournalEvent {
        seq: e.seq,
        id: e.id.clone(),
        run_id: e.run_id.clone(),
        timestamp_unix_ms: e.timestamp_ms,
        level: (match e.level {
            Level::Info => pb::JournalLevel::Info,
            Level::Warn => pb::JournalLevel::Warn,
            Level::Error => pb::JournalLevel::Error,
        }) as i32,
        r#type: e.kind.to_owned(),
        payload_json: e.payload.to_string(),
        causality: e
            .caused_by
            .clone()
            .map(|c| pb::JournalCausality { caused_by: c }),
        scope: Some(pb::JournalScope {
            invocation_id: e.invocation_id.clone().unwrap_or_default(),
            related_invocation_ids: e.related.clone(),
        }),
        // The workspace stamps each stored record with its append's epoch.
        epoch: 0,
    }
}
