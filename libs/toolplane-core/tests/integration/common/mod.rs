//! Catalog and profile fixtures shared by the core's table tests.
#![allow(dead_code)]

use serde_json::json;
use toolplane_core::Profile;
use toolplane_core::builtin;
use toolplane_core::catalog::{CatalogEntry, McpPermission, OmitReason, ToolCatalog, ToolOrigin};
use toolplane_core::descriptor::ToolDescriptor;
use toolplane_core::id::ToolId;
use toolplane_core::policy::PolicyLayers;
use toolplane_core::snapshot::{CompileRequest, ExitPolicy, InvocationToolSnapshot};

pub const GH: &str = "0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60";
pub const DOCS: &str = "1c7e4b63-7d2f-4a8b-8b8f-3e2e9d5c6f71";

pub fn mcp_origin(uuid: &str, server: &str, permission: McpPermission) -> ToolOrigin {
    ToolOrigin::Mcp {
        registration_id: uuid.into(),
        server_name: server.into(),
        permission,
    }
}

pub fn mcp_tool(uuid: &str, server: &str, native: &str) -> CatalogEntry {
    let id = ToolId::parse(&format!("mcp/{uuid}:{native}")).unwrap();
    let d = ToolDescriptor::new(
        id,
        format!("{native} on {server}"),
        json!({"type": "object"}),
    )
    .unwrap();
    CatalogEntry::usable(mcp_origin(uuid, server, McpPermission::Allow), d).unwrap()
}

/// Builtins, a GitHub-like server (one tool paused-off, one with a bad schema), a docs server and
/// an external host.
pub fn catalog() -> ToolCatalog {
    let mut entries: Vec<CatalogEntry> = builtin::descriptors()
        .into_iter()
        .map(|d| CatalogEntry::usable(ToolOrigin::Builtin, d).unwrap())
        .collect();
    entries.push(mcp_tool(GH, "github", "create_issue"));
    entries.push(mcp_tool(GH, "github", "list_issues"));
    entries.push(
        CatalogEntry::unusable(
            ToolId::parse(&format!("mcp/{GH}:delete_repo")).unwrap(),
            mcp_origin(GH, "github", McpPermission::Off),
            OmitReason::PermissionOff,
            None,
        )
        .unwrap(),
    );
    entries.push(
        CatalogEntry::unusable(
            ToolId::parse(&format!("mcp/{GH}:weird")).unwrap(),
            mcp_origin(GH, "github", McpPermission::Allow),
            OmitReason::NonObjectSchema {
                detail: "type is array".into(),
            },
            None,
        )
        .unwrap(),
    );
    entries.push(mcp_tool(DOCS, "docs", "search"));
    let ext = ToolDescriptor::new(
        ToolId::parse("ext/crm:lookup").unwrap(),
        "look up a customer",
        json!({"type": "object"}),
    )
    .unwrap();
    entries.push(
        CatalogEntry::usable(
            ToolOrigin::External {
                host_id: "crm".into(),
                endpoint: "http://127.0.0.1:9".into(),
            },
            ext,
        )
        .unwrap(),
    );
    ToolCatalog::new(entries).unwrap()
}

pub fn profile(tools: serde_json::Value) -> Profile {
    Profile::from_json(&json!({"id": "agent", "tools": tools}).to_string()).unwrap()
}

pub fn compile(
    profile: &Profile,
    exit: ExitPolicy,
    layers: PolicyLayers<'_>,
) -> InvocationToolSnapshot {
    let catalog = catalog();
    InvocationToolSnapshot::compile(CompileRequest {
        run_id: "run-1",
        invocation_id: "inv-1",
        profile,
        layers,
        exit_policy: &exit,
        catalog: &catalog,
    })
    .unwrap()
}

pub fn ids(s: &InvocationToolSnapshot) -> Vec<String> {
    s.bindings.iter().map(|b| b.tool_id().to_string()).collect()
}

pub fn aliases(s: &InvocationToolSnapshot) -> Vec<String> {
    s.bindings.iter().map(|b| b.alias.to_string()).collect()
}
