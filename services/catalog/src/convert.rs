//! Proto ↔ domain conversion, in one place.
//!
//! Owns every mapping between `toolplane.v1` messages and the catalog's and core's types:
//! listings, sources, categories, diagnostics, registrations, hosts, profiles, policies, and the
//! mcp-proxy's cached tools. Validation of what arrives lives here too where it is about shape
//! (a tool id's provider, a schema's JSON); rules about state (versions, limits) live with the
//! handlers. Nothing else in the crate builds a proto message by hand.

use std::collections::BTreeMap;

use serde_json::Value;
use toolplane_core::catalog::{CatalogEntry, McpPermission, OmitReason, ToolOrigin, ToolSource};
use toolplane_core::category::Category;
use toolplane_core::descriptor::{ToolAnnotations, ToolDescriptor};
use toolplane_core::error::{TOOL_INVALID_DESCRIPTOR, TOOL_INVALID_ID, TOOL_INVALID_SCHEMA};
use toolplane_core::id::{Provider, ToolId};
use toolplane_core::{CoreError, Profile};
use toolplane_proto::v1 as pb;

use crate::error::{CatalogError, diag};
use crate::listing::{
    Diagnostic, McpFacts, McpServerState, PolicyDecision, SourceStatus, ToolListing, ToolOmission,
};
use crate::records::{Endpoint, HostRecord, PolicyRecord, ProfileRecord, RegisteredTool};
use crate::sources::{self, RawDescriptor, SourcedTool};

// ---- enums ----

pub fn source_to_proto(s: ToolSource) -> pb::ToolSource {
    match s {
        ToolSource::Builtin => pb::ToolSource::Builtin,
        ToolSource::Mcp => pb::ToolSource::Mcp,
        ToolSource::External => pb::ToolSource::External,
        ToolSource::Adapter => pb::ToolSource::Adapter,
        ToolSource::SubAgent => pb::ToolSource::Agent,
        ToolSource::RunSpec => pb::ToolSource::Run,
    }
}

/// A source filter value; UNSPECIFIED and unknown numbers match nothing and are ignored.
pub fn source_from_proto(v: i32) -> Option<ToolSource> {
    Some(match pb::ToolSource::try_from(v).ok()? {
        pb::ToolSource::Unspecified => return None,
        pb::ToolSource::Builtin => ToolSource::Builtin,
        pb::ToolSource::Mcp => ToolSource::Mcp,
        pb::ToolSource::External => ToolSource::External,
        pb::ToolSource::Agent => ToolSource::SubAgent,
        pb::ToolSource::Run => ToolSource::RunSpec,
        pb::ToolSource::Adapter => ToolSource::Adapter,
    })
}

pub fn category_to_proto(c: Category) -> pb::ToolCategory {
    match c {
        Category::Exploration => pb::ToolCategory::Exploration,
        Category::Action => pb::ToolCategory::Action,
    }
}

pub fn category_from_proto(v: i32) -> Option<Category> {
    match pb::ToolCategory::try_from(v).ok()? {
        pb::ToolCategory::Unspecified => None,
        pb::ToolCategory::Exploration => Some(Category::Exploration),
        pb::ToolCategory::Action => Some(Category::Action),
    }
}

fn permission_to_proto(p: McpPermission) -> pb::McpToolPermission {
    match p {
        McpPermission::Off => pb::McpToolPermission::Off,
        McpPermission::Ask => pb::McpToolPermission::Ask,
        McpPermission::Allow => pb::McpToolPermission::Allow,
    }
}

fn state_to_proto(s: McpServerState) -> pb::McpServerState {
    match s {
        McpServerState::Active => pb::McpServerState::Active,
        McpServerState::Paused => pb::McpServerState::Paused,
        McpServerState::Unknown => pb::McpServerState::Unspecified,
    }
}

// ---- listings ----

pub fn diagnostic_to_proto(d: &Diagnostic) -> pb::Diagnostic {
    pb::Diagnostic {
        code: d.code.clone(),
        message: d.message.clone(),
        subject: d.subject.clone(),
    }
}

fn annotations_to_proto(a: &ToolAnnotations) -> Option<pb::ToolAnnotations> {
    (*a != ToolAnnotations::default()).then_some(pb::ToolAnnotations {
        read_only_hint: a.read_only_hint,
        destructive_hint: a.destructive_hint,
        idempotent_hint: a.idempotent_hint,
        open_world_hint: a.open_world_hint,
    })
}

fn annotations_from_proto(a: Option<pb::ToolAnnotations>) -> ToolAnnotations {
    a.map(|a| ToolAnnotations {
        read_only_hint: a.read_only_hint,
        destructive_hint: a.destructive_hint,
        idempotent_hint: a.idempotent_hint,
        open_world_hint: a.open_world_hint,
    })
    .unwrap_or_default()
}

/// A schema as JSON text: a string value that is not JSON is returned as it came.
fn schema_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn endpoint_to_proto(e: &Endpoint) -> pb::ExecutorEndpoint {
    pb::ExecutorEndpoint {
        url: e.url.clone(),
        headers: e.headers.clone().into_iter().collect(),
        timeout_ms: e.timeout_ms,
        max_concurrent_calls: e.max_concurrent_calls,
    }
}

/// A listing as its proto message. `endpoint` (header values included) is set only for the
/// runtime's `ResolveProfile`.
pub fn listing_to_proto(l: &ToolListing, endpoint: Option<&Endpoint>) -> pb::ToolListing {
    pb::ToolListing {
        descriptor: Some(pb::ToolDescriptor {
            id: l.id.clone(),
            title: l.title.clone(),
            description: l.description.clone(),
            input_schema_json: schema_text(&l.input_schema),
            output_schema_json: l.output_schema.as_ref().map(schema_text),
            annotations: annotations_to_proto(&l.annotations),
        }),
        source: source_to_proto(l.source).into(),
        category: category_to_proto(l.category).into(),
        usable: l.usable,
        diagnostics: l.diagnostics.iter().map(diagnostic_to_proto).collect(),
        mcp: l.mcp.as_ref().map(|m| pb::McpToolStatus {
            server_id: m.server_id.clone(),
            server_display_name: m.server_display_name.clone(),
            native_name: m.native_name.clone(),
            server_state: state_to_proto(m.server_state).into(),
            permission: permission_to_proto(m.permission).into(),
            catalog_version: m.catalog_version,
        }),
        external: l.external.as_ref().map(|x| pb::ExternalToolOrigin {
            host_id: x.host_id.clone(),
            host_display_name: x.host_display_name.clone(),
            endpoint_url: x.endpoint_url.clone(),
            endpoint: endpoint.map(endpoint_to_proto),
        }),
        policy: l.policy.as_ref().map(policy_to_proto),
        progress_aware: l.progress_aware,
    }
}

fn policy_to_proto(p: &PolicyDecision) -> pb::ToolPolicyDecision {
    pb::ToolPolicyDecision {
        visible: p.visible,
        callable: p.callable,
        approval_required: p.approval_required,
        reason: p.reason.clone(),
        max_calls: p.max_calls,
    }
}

pub fn omission_to_proto(o: &ToolOmission) -> pb::ToolOmission {
    pb::ToolOmission {
        tool_id: o.tool_id.clone(),
        selector: o.selector.clone(),
        diagnostic: Some(diagnostic_to_proto(&o.diagnostic)),
    }
}

pub fn status_to_proto(s: &SourceStatus) -> pb::SourceStatus {
    pb::SourceStatus {
        source: source_to_proto(s.source).into(),
        available: s.available,
        tool_count: s.tool_count,
        usable_tool_count: s.usable_tool_count,
        refreshed_at_unix_ms: s.refreshed_at_unix_ms,
        diagnostics: s.diagnostics.iter().map(diagnostic_to_proto).collect(),
    }
}

// ---- registrations ----

fn parse_json(id: &ToolId, what: &str, text: &str) -> Result<Value, CoreError> {
    serde_json::from_str(text).map_err(|e| {
        CoreError::new(
            TOOL_INVALID_SCHEMA,
            format!("{id}: {what} schema is not JSON: {e}"),
        )
    })
}

/// One tool of an external host's registration. Its id must be `ext/<host_id>:<native>`: a
/// reserved provider (`builtin`, `mcp/…`, `agent/…`) is `tool.reserved_provider`, another host's
/// provider `tool.invalid_id`.
pub fn registration_from_proto(
    host_id: &str,
    r: pb::ToolRegistration,
) -> Result<RegisteredTool, CatalogError> {
    let d = r.descriptor.ok_or_else(|| {
        CatalogError::Core(CoreError::new(
            TOOL_INVALID_DESCRIPTOR,
            "a tool registration has no descriptor",
        ))
    })?;
    let id = ToolId::parse_external(&d.id)?;
    if id.provider() != &Provider::Ext(host_id.to_owned()) {
        return Err(CatalogError::Core(CoreError::new(
            TOOL_INVALID_ID,
            format!(
                "`{id}` does not belong to host `{host_id}`; register it as `ext/{host_id}:{}`",
                id.native()
            ),
        )));
    }
    if d.description.trim().is_empty() {
        return Err(CatalogError::Core(CoreError::new(
            TOOL_INVALID_DESCRIPTOR,
            format!(
                "{id}: the description is empty; the calling model reads it to decide when to use the tool"
            ),
        )));
    }
    let input = parse_json(&id, "input", &d.input_schema_json)?;
    let output = d
        .output_schema_json
        .as_deref()
        .map(|t| parse_json(&id, "output", t))
        .transpose()?;
    let descriptor = ToolDescriptor::new(id, d.description, input)?
        .with_title(d.title.filter(|t| !t.is_empty()))?
        .with_output_schema(output)?
        .with_annotations(annotations_from_proto(d.annotations));
    Ok(RegisteredTool {
        descriptor,
        category: category_from_proto(r.category),
        progress_aware: r.progress_aware,
    })
}

pub fn endpoint_from_proto(e: pb::ExecutorEndpoint) -> Endpoint {
    Endpoint {
        url: e.url,
        headers: e.headers.into_iter().collect::<BTreeMap<_, _>>(),
        timeout_ms: e.timeout_ms,
        max_concurrent_calls: e.max_concurrent_calls,
    }
}

/// A host as listings show it: header names are kept, header values never leave the catalog
/// through listings.
pub fn host_to_proto(h: &HostRecord) -> pb::ToolHost {
    pb::ToolHost {
        cell_id: h.cell_id.clone(),
        host_id: h.host_id.clone(),
        display_name: h.display_name.clone(),
        endpoint: Some(pb::ExecutorEndpoint {
            url: h.endpoint.url.clone(),
            headers: h
                .endpoint
                .headers
                .keys()
                .map(|k| (k.clone(), String::new()))
                .collect(),
            timeout_ms: h.endpoint.timeout_ms,
            max_concurrent_calls: h.endpoint.max_concurrent_calls,
        }),
        tool_ids: h
            .tools
            .iter()
            .map(|t| t.descriptor.id().to_string())
            .collect(),
        generation: h.generation,
        registered_at_unix_ms: h.registered_at_unix_ms,
    }
}

// ---- profiles and policies ----

pub fn profile_to_proto(r: &ProfileRecord, p: &Profile) -> pb::Profile {
    pb::Profile {
        cell_id: r.cell_id.clone(),
        profile_id: r.profile_id.clone(),
        profile_json: r.profile_json.clone(),
        version: r.version,
        display_name: p.name.clone().unwrap_or_default(),
        description: p.description.clone().unwrap_or_default(),
        updated_at_unix_ms: r.updated_at_unix_ms,
    }
}

/// A stored policy, or the empty policy (version 0) when none is stored.
pub fn policy_doc_to_proto(r: Option<&PolicyRecord>) -> pb::PolicyDocument {
    match r {
        Some(r) => pb::PolicyDocument {
            policy_json: r.policy_json.clone(),
            version: r.version,
            updated_at_unix_ms: r.updated_at_unix_ms,
        },
        None => pb::PolicyDocument {
            policy_json: "{}".to_owned(),
            version: 0,
            updated_at_unix_ms: 0,
        },
    }
}

// ---- the mcp-proxy's cached tools ----

fn reason_from_proxy(diagnostics: &[pb::Diagnostic]) -> OmitReason {
    for d in diagnostics {
        let detail = d.message.clone();
        match d.code.as_str() {
            diag::MCP_SERVER_PAUSED => return OmitReason::ServerPaused,
            diag::MCP_PERMISSION_OFF => return OmitReason::PermissionOff,
            diag::MCP_NO_CACHE | "mcp.not_cached" => return OmitReason::NotCached,
            diag::INVALID_SCHEMA | "mcp.tool_unusable" => {
                return OmitReason::NonObjectSchema { detail };
            }
            diag::MCP_REGISTRATION_CORRUPT => return OmitReason::RegistrationCorrupt { detail },
            diag::MCP_TASK_REQUIRED => return OmitReason::McpTaskRequired,
            _ => {}
        }
    }
    OmitReason::NotCached
}

/// One cached MCP tool as a catalog tool. The catalog re-derives usability from the facts
/// (server paused, permission OFF or unknown, schema not an object) and takes the proxy's
/// `usable = false` as final; a tool it cannot identify is left out with the returned
/// diagnostic.
pub fn mcp_tool_from_proto(t: pb::McpCachedTool) -> Result<SourcedTool, Diagnostic> {
    let Some(d) = t.descriptor else {
        return Err(Diagnostic::new(
            diag::INVALID_DESCRIPTOR,
            "the mcp-proxy sent a cached tool without a descriptor",
            "",
        ));
    };
    let id = ToolId::parse(&d.id)
        .map_err(|e| Diagnostic::new(diag::INVALID_DESCRIPTOR, e.to_string(), d.id.clone()))?;
    let Provider::Mcp(registration_id) = id.provider().clone() else {
        return Err(Diagnostic::new(
            diag::INVALID_DESCRIPTOR,
            "the mcp-proxy sent a tool whose id is not `mcp/<uuid>:<name>`",
            d.id.clone(),
        ));
    };
    let status = t.status.unwrap_or_default();
    let server_name = if status.server_display_name.is_empty() {
        registration_id.clone()
    } else {
        status.server_display_name.clone()
    };
    // An unknown permission is treated as OFF: fail closed.
    let permission = match pb::McpToolPermission::try_from(status.permission) {
        Ok(pb::McpToolPermission::Ask) => McpPermission::Ask,
        Ok(pb::McpToolPermission::Allow) => McpPermission::Allow,
        _ => McpPermission::Off,
    };
    let state = match pb::McpServerState::try_from(status.server_state) {
        Ok(pb::McpServerState::Active) => McpServerState::Active,
        Ok(pb::McpServerState::Paused) => McpServerState::Paused,
        _ => McpServerState::Unknown,
    };
    let input: Value = serde_json::from_str(&d.input_schema_json)
        .unwrap_or_else(|_| Value::String(d.input_schema_json.clone()));
    let output: Option<Value> = d
        .output_schema_json
        .as_deref()
        .map(|s| serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_owned())));
    let annotations = annotations_from_proto(d.annotations);
    let title = d.title.filter(|t| !t.is_empty());
    let built = ToolDescriptor::new(id.clone(), d.description.clone(), input.clone())
        .and_then(|x| x.with_title(title.clone()))
        .and_then(|x| x.with_output_schema(output.clone().filter(Value::is_object)))
        .map(|x| x.with_annotations(annotations.clone()));
    let origin = ToolOrigin::Mcp {
        registration_id: registration_id.clone(),
        server_name: server_name.clone(),
        permission,
    };
    let reason = if state == McpServerState::Paused {
        Some(OmitReason::ServerPaused)
    } else if permission == McpPermission::Off {
        Some(OmitReason::PermissionOff)
    } else if let Err(e) = &built {
        if e.code == TOOL_INVALID_SCHEMA {
            Some(OmitReason::NonObjectSchema {
                detail: e.message.clone(),
            })
        } else {
            return Err(Diagnostic::new(
                diag::INVALID_DESCRIPTOR,
                e.to_string(),
                id.to_string(),
            ));
        }
    } else if !t.usable {
        Some(reason_from_proxy(&t.diagnostics))
    } else {
        None
    };
    let (descriptor, raw) = match built {
        Ok(descriptor) => (Some(descriptor), None),
        Err(_) => (
            None,
            Some(RawDescriptor {
                title,
                description: d.description,
                input_schema: input,
                output_schema: output,
                annotations,
            }),
        ),
    };
    let entry = match (reason, descriptor) {
        (None, Some(descriptor)) => CatalogEntry::usable(origin, descriptor),
        (Some(reason), descriptor) => {
            CatalogEntry::unusable(id.clone(), origin, reason, descriptor)
        }
        // Unreachable: without a descriptor there is always a reason; keep the tool unusable.
        (None, None) => CatalogEntry::unusable(id.clone(), origin, OmitReason::NotCached, None),
    }
    .map_err(|e| Diagnostic::new(diag::INVALID_DESCRIPTOR, e.to_string(), id.to_string()))?;
    let mut notes: Vec<Diagnostic> = t
        .diagnostics
        .iter()
        .map(|d| Diagnostic::new(&d.code, d.message.clone(), d.subject.clone()))
        .collect();
    if permission == McpPermission::Ask && !notes.iter().any(|n| n.code == diag::MCP_PERMISSION_ASK)
    {
        notes.push(Diagnostic::new(
            diag::MCP_PERMISSION_ASK,
            "permission is ask: each call is held for approval before it runs",
            id.to_string(),
        ));
    }
    let facts = McpFacts {
        server_id: registration_id,
        server_display_name: server_name,
        native_name: if status.native_name.is_empty() {
            id.native().to_owned()
        } else {
            status.native_name
        },
        server_state: state,
        permission,
        catalog_version: status.catalog_version,
    };
    Ok(sources::mcp_tool(entry, raw, facts, notes))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const UUID: &str = "0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60";

    fn cached(
        state: pb::McpServerState,
        permission: pb::McpToolPermission,
        schema: &str,
        usable: bool,
    ) -> pb::McpCachedTool {
        pb::McpCachedTool {
            descriptor: Some(pb::ToolDescriptor {
                id: format!("mcp/{UUID}:echo"),
                title: None,
                description: "Echoes its input.".into(),
                input_schema_json: schema.into(),
                output_schema_json: None,
                annotations: None,
            }),
            status: Some(pb::McpToolStatus {
                server_id: UUID.into(),
                server_display_name: "everything".into(),
                native_name: "echo".into(),
                server_state: state.into(),
                permission: permission.into(),
                catalog_version: 0,
            }),
            usable,
            diagnostics: vec![],
        }
    }

    #[test]
    fn mcp_usability_is_derived_from_the_facts() {
        use pb::McpServerState::{Active, Paused};
        use pb::McpToolPermission::{Allow, Ask, Off, Unspecified};
        let obj = r#"{"type":"object"}"#;
        let cases = [
            (Active, Allow, obj, true, None),
            (Paused, Allow, obj, true, Some("server_paused")),
            (Active, Off, obj, true, Some("permission_off")),
            (Active, Unspecified, obj, true, Some("permission_off")),
            (
                Active,
                Allow,
                r#"{"type":"array"}"#,
                true,
                Some("non_object_schema"),
            ),
            (Active, Allow, "not json", true, Some("non_object_schema")),
            (Active, Allow, obj, false, Some("not_cached")),
            (Active, Ask, obj, true, None),
        ];
        for (state, perm, schema, usable, want) in cases {
            let tool = mcp_tool_from_proto(cached(state, perm, schema, usable)).unwrap();
            assert_eq!(
                tool.entry.unusable_reason().map(OmitReason::kind),
                want,
                "{state:?} {perm:?} {schema} {usable}"
            );
            assert_eq!(tool.entry.origin().server_name(), Some("everything"));
        }
        let ask = mcp_tool_from_proto(cached(Active, Ask, obj, true)).unwrap();
        assert_eq!(ask.notes[0].code, diag::MCP_PERMISSION_ASK);
        let bad = mcp_tool_from_proto(cached(Active, Allow, r#"{"type":"array"}"#, true)).unwrap();
        assert_eq!(
            bad.raw.unwrap().input_schema,
            serde_json::json!({"type": "array"})
        );
    }

    #[test]
    fn registrations_cannot_forge_or_borrow_providers() {
        let reg = |id: &str| pb::ToolRegistration {
            descriptor: Some(pb::ToolDescriptor {
                id: id.into(),
                title: None,
                description: "d".into(),
                input_schema_json: r#"{"type":"object"}"#.into(),
                output_schema_json: None,
                annotations: None,
            }),
            category: 0,
            progress_aware: false,
        };
        for (id, code) in [
            ("builtin:workspace.write_file", "tool.reserved_provider"),
            (&format!("mcp/{UUID}:x"), "tool.reserved_provider"),
            ("agent/root:run", "tool.reserved_provider"),
            ("ext/other:x", "tool.invalid_id"),
            ("crm:x", "tool.invalid_id"),
        ] {
            assert_eq!(
                registration_from_proto("crm", reg(id)).unwrap_err().code(),
                code,
                "{id}"
            );
        }
        assert!(registration_from_proto("crm", reg("ext/crm:lookup")).is_ok());
    }
}
