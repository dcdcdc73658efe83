//! What a running invocation is told when its MCP server's tool list changes: the versions, and
//! the tools the next invocation of the same profile gains and loses.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test fixtures fail loudly

use crate::common;

use common::*;
use toolplane_core::Profile;
use toolplane_core::catalog::{CatalogEntry, McpPermission, OmitReason, ToolCatalog};
use toolplane_core::id::ToolId;
use toolplane_core::mcp_change::{catalog_change, snapshot_servers};
use toolplane_core::policy::PolicyLayers;
use toolplane_core::selector::ToolSelector;
use toolplane_core::snapshot::{CompileRequest, ExitPolicy, InvocationToolSnapshot};

fn gh(native: &str, version: u64) -> CatalogEntry {
    mcp_tool(GH, "github", native).with_catalog_version(version)
}

fn sel(p: &Profile) -> (&[ToolSelector], &[ToolSelector]) {
    (&p.tools.allow, &p.tools.deny)
}

fn id(native: &str) -> ToolId {
    ToolId::parse(&format!("mcp/{GH}:{native}")).unwrap()
}

fn snapshot(profile: &Profile, entries: Vec<CatalogEntry>) -> InvocationToolSnapshot {
    let catalog = ToolCatalog::new(entries).unwrap();
    InvocationToolSnapshot::compile(CompileRequest {
        run_id: "run-1",
        invocation_id: "inv-1",
        profile,
        layers: PolicyLayers::default(),
        exit_policy: &ExitPolicy::Root,
        catalog: &catalog,
    })
    .unwrap()
}

#[test]
fn a_newer_list_names_what_the_profile_gains_and_loses() {
    let p = profile(serde_json::json!({"allow": ["mcp:github"], "deny": ["mcp:github/secret"]}));
    let snap = snapshot(&p, vec![gh("alpha", 3), gh("beta", 3)]);
    assert_eq!(
        snapshot_servers(&snap).into_iter().collect::<Vec<_>>(),
        vec![(GH.to_owned(), 3)]
    );
    let now = vec![
        gh("alpha", 4),
        gh("gamma", 4),
        gh("secret", 4),
        CatalogEntry::unusable(
            id("paused"),
            mcp_origin(GH, "github", McpPermission::Off),
            OmitReason::PermissionOff,
            None,
        )
        .unwrap()
        .with_catalog_version(4),
        mcp_tool(DOCS, "docs", "search").with_catalog_version(9),
    ];
    let change = catalog_change(&snap, sel(&p), GH, 3, &now).unwrap();
    assert_eq!(change.server_name, "github");
    assert_eq!(
        (
            change.snapshot_version,
            change.previous_version,
            change.version
        ),
        (3, 3, 4)
    );
    assert_eq!(change.added, vec![id("gamma")]);
    assert_eq!(change.removed, vec![id("beta")]);
}

#[test]
fn the_same_version_or_an_empty_listing_is_no_change() {
    let p = profile(serde_json::json!({"allow": ["mcp:github"]}));
    let snap = snapshot(&p, vec![gh("alpha", 3)]);
    assert_eq!(
        catalog_change(&snap, sel(&p), GH, 3, &[gh("alpha", 3)]),
        None
    );
    // Already reported up to 5: version 5 again says nothing new.
    assert_eq!(
        catalog_change(&snap, sel(&p), GH, 5, &[gh("alpha", 5)]),
        None
    );
    assert_eq!(catalog_change(&snap, sel(&p), GH, 3, &[]), None);
    // Another server's tools do not tell this server's version.
    let docs = mcp_tool(DOCS, "docs", "search").with_catalog_version(9);
    assert_eq!(catalog_change(&snap, sel(&p), GH, 3, &[docs]), None);
}

#[test]
fn a_later_change_is_reported_from_the_version_last_known() {
    let p = profile(serde_json::json!({"allow": [format!("mcp/{GH}:alpha")]}));
    let snap = snapshot(&p, vec![gh("alpha", 2), gh("beta", 2)]);
    let change = catalog_change(&snap, sel(&p), GH, 4, &[gh("alpha", 6), gh("beta", 6)]).unwrap();
    assert_eq!(
        (
            change.snapshot_version,
            change.previous_version,
            change.version
        ),
        (2, 4, 6)
    );
    // beta was never allowed: it is neither gained nor lost.
    assert!(change.added.is_empty(), "{:?}", change.added);
    assert!(change.removed.is_empty(), "{:?}", change.removed);
}
