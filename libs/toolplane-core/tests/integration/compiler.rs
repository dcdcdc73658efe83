//! Table tests of the snapshot compiler: deny over allow, allow and selector
//! order, return-mode child rules, handoff, omitted tools with their reasons.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test fixtures fail loudly

use crate::common;

use common::*;
use expect_test::expect;
use serde_json::json;
use toolplane_core::catalog::OmitReason;
use toolplane_core::policy::{PlatformPolicy, PolicyLayers, UserPolicy};
use toolplane_core::selector::ToolSelector;
use toolplane_core::snapshot::{Executor, ExitPolicy, InvocationToolSnapshot};

fn root() -> ExitPolicy {
    ExitPolicy::Root
}

fn child() -> ExitPolicy {
    ExitPolicy::ReturnToParent {
        parent_invocation_id: "inv-0".into(),
        task_id: "task-1".into(),
    }
}

fn omitted(s: &InvocationToolSnapshot) -> Vec<String> {
    s.omitted
        .iter()
        .map(|o| format!("{} ({})", o.tool, o.reason.kind()))
        .collect()
}

#[test]
fn allow_order_is_advertisement_order_and_selectors_expand_in_catalog_order() {
    let p = profile(
        json!({"allow": ["builtin:dice.roll", "mcp:github/*", "builtin:workspace.read_file", "builtin:workspace.*"]}),
    );
    let s = compile(&p, root(), PolicyLayers::default());
    expect![[r#"
        [
            "dice_roll",
            "mcp__github__create_issue",
            "mcp__github__list_issues",
            "workspace_read_file",
            "workspace_list_files",
            "workspace_search_files",
            "workspace_write_file",
            "workspace_apply_patch",
            "workspace_commit",
            "workspace_finish",
        ]
    "#]]
    .assert_debug_eq(&aliases(&s));
    // The two unusable github tools are omitted with their reasons, once each.
    assert_eq!(
        omitted(&s),
        [
            format!("mcp/{GH}:delete_repo (permission_off)"),
            format!("mcp/{GH}:weird (non_object_schema)")
        ]
    );
}

#[test]
fn deny_beats_allow_and_not_allowed_is_invisible() {
    let p = profile(
        json!({"allow": ["builtin:workspace.*", "mcp:docs/search"], "deny": ["builtin:workspace.write_file", "builtin:workspace.apply_patch"]}),
    );
    let s = compile(&p, root(), PolicyLayers::default());
    let got = ids(&s);
    assert!(
        !got.iter()
            .any(|id| id.contains("write_file") || id.contains("apply_patch"))
    );
    assert!(got.contains(&"builtin:workspace.read_file".to_owned()));
    assert!(
        !got.iter().any(|id| id.contains("dice")),
        "not allowed = invisible"
    );
    assert!(!got.iter().any(|id| id.contains("create_issue")));
    assert!(omitted(&s).contains(&"builtin:workspace.write_file (denied)".to_owned()));
}

#[test]
fn empty_allow_means_no_tools_and_star_means_all_usable() {
    let none = compile(
        &profile(json!({"allow": []})),
        root(),
        PolicyLayers::default(),
    );
    assert!(none.bindings.is_empty());
    let all = compile(
        &profile(json!({"allow": ["*"]})),
        root(),
        PolicyLayers::default(),
    );
    // 20 builtins minus the runtime-only task.return and the four agent tools (delegation is off
    // by default), 3 usable MCP tools, 1 external tool.
    assert_eq!(all.bindings.len(), 15 + 3 + 1);
    assert!(all.builtin("task.return").is_none());
    assert!(omitted(&all).contains(&"builtin:agent.delegate (denied)".to_owned()));

    // Each switch brings in exactly its tools.
    let mut delegating = profile(json!({"allow": ["*"]}));
    delegating.delegation.can_delegate = true;
    let s = compile(&delegating, root(), PolicyLayers::default());
    assert!(s.builtin("agent.delegate").is_some() && s.builtin("agent.await").is_some());
    assert!(s.builtin("agent.list").is_some() && s.builtin("agent.handoff").is_none());
    let mut handing_off = profile(json!({"allow": ["*"]}));
    handing_off.delegation.can_handoff = true;
    let s = compile(&handing_off, root(), PolicyLayers::default());
    assert!(s.builtin("agent.handoff").is_some() && s.builtin("agent.list").is_some());
    assert!(s.builtin("agent.delegate").is_none());
    handing_off.delegation.can_delegate = true;
    let s = compile(&handing_off, root(), PolicyLayers::default());
    assert_eq!(s.bindings.len(), 19 + 3 + 1);
}

#[test]
fn bindings_record_their_executor_and_limits() {
    let p = profile(json!({
        "allow": ["builtin:workspace.read_file", "builtin:workspace.finish", "mcp:docs/search", "ext/crm:lookup"],
        "maxCallsPerTool": 5,
        "overrides": {"mcp:docs/search": {"maxCalls": 2, "description": "Search the product docs."}}
    }));
    let s = compile(&p, root(), PolicyLayers::default());
    let executors: Vec<&Executor> = s.bindings.iter().map(|b| &b.executor).collect();
    assert_eq!(
        executors,
        [
            &Executor::Workspace,
            &Executor::RuntimeControl,
            &Executor::McpProxy {
                registration_id: DOCS.into()
            },
            &Executor::External {
                host_id: "crm".into(),
                endpoint: "http://127.0.0.1:9".into()
            },
        ]
    );
    let search = &s.bindings[2];
    assert_eq!(search.max_calls, Some(2));
    assert_eq!(search.descriptor.description(), "Search the product docs.");
    assert_eq!(s.bindings[0].max_calls, Some(5));
    assert!(s.bindings.iter().all(|b| !b.approval_required));
}

#[test]
fn return_mode_child_loses_control_tools_and_gains_task_return() {
    let p = profile(json!({"allow": ["builtin:*"]}));
    let s = compile(&p, child(), PolicyLayers::default());
    let got = ids(&s);
    for gone in [
        "workspace.commit",
        "workspace.finish",
        "agent.delegate",
        "agent.handoff",
        "agent.await",
        "agent.list",
    ] {
        assert!(
            !got.contains(&format!("builtin:{gone}")),
            "{gone} must be removed"
        );
        assert!(omitted(&s).contains(&format!("builtin:{gone} (removed_by_exit_policy)")));
    }
    assert_eq!(
        got.last().map(String::as_str),
        Some("builtin:task.return"),
        "task.return is injected last"
    );
    assert_eq!(
        s.bindings.last().map(|b| b.alias.as_str()),
        Some("task_return")
    );
    // A root invocation of the same profile never gets task.return, even with `*`.
    let root = compile(&p, root(), PolicyLayers::default());
    assert!(root.builtin("task.return").is_none());
    assert!(root.builtin("workspace.finish").is_some());
}

#[test]
fn handoff_is_compiled_from_the_target_profile_like_a_root() {
    let target =
        profile(json!({"allow": ["builtin:workspace.read_file", "builtin:workspace.finish"]}));
    let s = compile(
        &target,
        ExitPolicy::Handoff {
            from_invocation_id: "inv-0".into(),
            depth: 1,
        },
        PolicyLayers::default(),
    );
    assert_eq!(
        ids(&s),
        ["builtin:workspace.read_file", "builtin:workspace.finish"]
    );
    assert_eq!(
        s.exit_policy,
        ExitPolicy::Handoff {
            from_invocation_id: "inv-0".into(),
            depth: 1
        }
    );
}

#[test]
fn missing_exact_tools_are_diagnosed_and_policy_layers_apply() {
    let p = profile(
        json!({"allow": ["ext/crm:nope", "mcp:jira/create", "builtin:dice.roll", "builtin:workspace.read_file"]}),
    );
    let platform = PlatformPolicy {
        disabled_tools: vec![ToolSelector::parse("builtin:dice.roll").unwrap()],
        ..Default::default()
    };
    let user = UserPolicy {
        approval_required: vec![ToolSelector::parse("builtin:workspace.*").unwrap()],
        ..Default::default()
    };
    let s = compile(
        &p,
        root(),
        PolicyLayers {
            user: Some(&user),
            platform: Some(&platform),
            plan_node: None,
        },
    );
    assert_eq!(ids(&s), ["builtin:workspace.read_file"]);
    assert!(s.bindings[0].approval_required);
    assert_eq!(
        s.omitted
            .iter()
            .map(|o| (&*o.tool, o.reason.clone()))
            .collect::<Vec<_>>(),
        [
            ("ext/crm:nope", OmitReason::Missing),
            ("mcp:jira/create", OmitReason::Missing),
            (
                "builtin:dice.roll",
                OmitReason::DisabledByPlatform {
                    selector: "builtin:dice.roll".into()
                }
            ),
        ]
    );
}

#[test]
fn snapshot_round_trips_with_its_schema_version() {
    let s = compile(
        &profile(json!({"allow": ["*"]})),
        root(),
        PolicyLayers::default(),
    );
    let text = serde_json::to_string(&s).unwrap();
    let back = InvocationToolSnapshot::from_json(&text).unwrap();
    assert_eq!(back, s);
    let other = text.replacen("\"schemaVersion\":1", "\"schemaVersion\":2", 1);
    assert!(InvocationToolSnapshot::from_json(&other).is_err());
    let summary = s.summary();
    assert_eq!(summary.tools.len(), s.bindings.len());
}
