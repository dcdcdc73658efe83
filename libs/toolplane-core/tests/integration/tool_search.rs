//! Tool search in the snapshot and the turn contract: a profile with search advertises its core,
//! the terminal tools and `tools.search`; a tool found by a search is advertised from the next
//! turn with the turn that found it; the gate still refuses a tool the turn did not advertise.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test fixtures fail loudly

use crate::common;

use common::*;
use serde_json::json;
use toolplane_core::builtin;
use toolplane_core::error::MODEL_UNKNOWN_TOOL_ALIAS;
use toolplane_core::id::ToolId;
use toolplane_core::policy::PolicyLayers;
use toolplane_core::snapshot::ExitPolicy;
use toolplane_core::tool_search::SnapshotToolSearch;
use toolplane_core::turn::{CallIdPolicy, RawArguments, RawToolCall, ToolChoice, ToolTurnContract};

fn advertised(contract: &ToolTurnContract) -> Vec<String> {
    contract
        .tools()
        .iter()
        .map(|t| t.alias.to_string())
        .collect()
}

#[test]
fn search_advertises_the_core_then_what_the_model_found() {
    let p = profile(json!({
        "allow": ["builtin:*", "mcp:*"],
        "search": {"core": ["builtin:workspace.read_file"]}
    }));
    let s = compile(&p, ExitPolicy::Root, PolicyLayers::default());
    let search_id = ToolId::builtin(builtin::TOOLS_SEARCH).unwrap();
    assert!(s.binding(&search_id).is_some(), "tools.search is bound");

    let first = ToolTurnContract::advertised(&s, 1, ToolChoice::Auto, &[]).unwrap();
    let names = advertised(&first);
    assert!(names.contains(&"workspace_read_file".to_owned()));
    assert!(names.contains(&"tools_search".to_owned()));
    assert!(
        names.contains(&"workspace_finish".to_owned()),
        "terminal tools stay"
    );
    assert!(
        !names.iter().any(|n| n.contains("create_issue")),
        "{names:?}"
    );
    assert!(names.len() < s.bindings.len());

    let index = SnapshotToolSearch::build(&s);
    let found = index
        .search("open a new issue on github", 3, |id| first.contains(id))
        .unwrap();
    let top = found.first().expect("a hit").tool_id.clone();
    assert!(top.to_string().ends_with(":create_issue"), "{found:?}");

    // Calling the found tool this turn is refused like any tool not advertised.
    let alias = s.binding(&top).unwrap().alias.to_string();
    let call = RawToolCall {
        call_id: Some("c1".into()),
        name: alias.clone(),
        arguments: RawArguments::Text("{}".into()),
        provider_metadata: None,
    };
    let err = first
        .decode(vec![call.clone()], CallIdPolicy::Required)
        .unwrap_err();
    assert_eq!(err.code, MODEL_UNKNOWN_TOOL_ALIAS);

    // From the next turn on it is advertised, recording the turn whose search found it.
    let second =
        ToolTurnContract::advertised(&s, 2, ToolChoice::Auto, &[(top.clone(), 1)]).unwrap();
    assert!(advertised(&second).contains(&alias));
    let entry = second.tools().iter().find(|t| t.tool_id == top).unwrap();
    assert_eq!(entry.found_in_turn, Some(1));
    assert!(second.decode(vec![call], CallIdPolicy::Required).is_ok());
}

#[test]
fn without_search_every_tool_is_advertised_and_no_search_tool_is_bound() {
    let p = profile(json!({"allow": ["builtin:*", "mcp:*"]}));
    let s = compile(&p, ExitPolicy::Root, PolicyLayers::default());
    assert!(s.search.is_none());
    assert!(s.builtin(builtin::TOOLS_SEARCH).is_none());
    let contract = ToolTurnContract::advertised(&s, 1, ToolChoice::Auto, &[]).unwrap();
    assert_eq!(contract.tools().len(), s.bindings.len());
}

#[test]
fn search_limits_are_validated_and_the_tool_cannot_be_allowed_by_hand() {
    for bad in [
        json!({"allow": ["builtin:*"], "search": {"maxResults": 0}}),
        json!({"allow": ["builtin:*"], "search": {"maxResults": 21}}),
        json!({"allow": ["builtin:*"], "search": {"maxFound": 5000}}),
        json!({"allow": ["builtin:tools.search"]}),
    ] {
        let text = json!({"id": "agent", "tools": bad}).to_string();
        assert!(toolplane_core::Profile::from_json(&text).is_err(), "{bad}");
    }
}
