//! Tool search through the runtime alone: with a profile's `tools.search`, the first turn
//! advertises only the core and `tools_search`; a tool the model found is refused this turn,
//! advertised from the next, journalled as found, and then runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use serde_json::json;
use support::{agent, alone, calls, host_turn};
use toolplane_core::error as codes;

fn crm(native: &str, description: &str) -> toolplane_core::descriptor::ToolDescriptor {
    toolplane_core::descriptor::ToolDescriptor::new(
        toolplane_core::ToolId::parse(&format!("ext/crm:{native}")).unwrap(),
        description,
        json!({"type": "object", "properties": {"query": {"type": "string"}}}),
    )
    .unwrap()
}

fn advertised(tools: &serde_json::Value) -> Vec<String> {
    tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_found_tool_is_advertised_from_the_next_turn_and_runs() {
    let a = alone().await;
    let origin = || toolplane_core::ToolOrigin::External {
        host_id: "crm".into(),
        endpoint: "http://crm.test".into(),
    };
    a.mem
        .add_tool(origin(), crm("lookup", "Look a customer up by name."), None);
    a.mem
        .add_tool(origin(), crm("refund", "Refund an order's payment."), None);
    a.mem.put_profile(agent(
        "clerk",
        json!({"tools": {
            "allow": ["ext/crm:*", "builtin:workspace.*"],
            "search": {"core": ["builtin:workspace.read_file"]}
        }}),
    ));
    let opened = a.host_run("ts1", "clerk").await;
    let first_tools = advertised(&opened.tools_json);
    assert!(
        first_tools.contains(&"tools_search".to_owned()),
        "{first_tools:?}"
    );
    assert!(first_tools.contains(&"workspace_read_file".to_owned()));
    assert!(
        !first_tools.iter().any(|t| t.contains("crm")),
        "{first_tools:?}"
    );

    let first = a
        .first_turn(
            &opened,
            &calls(&[(
                "c1",
                "tools_search",
                json!({"query": "refund the payment of an order"}),
            )]),
        )
        .await
        .unwrap();
    let found = &first.outcome.results[0];
    assert!(!found.is_error, "{}", found.content);
    assert!(
        found.content.contains("ext__crm__refund"),
        "{}",
        found.content
    );
    // What the host advertises next: the next turn's tools in its provider format.
    let next_tools = {
        let inner = opened.invocation.inner.lock().await;
        let fields =
            toolplane_model::encode_tools(inner.format, &inner.turn, &inner.snapshot).unwrap();
        advertised(&serde_json::Value::Object(fields))
    };
    assert!(
        next_tools.contains(&"ext__crm__refund".to_owned()),
        "{next_tools:?}"
    );
    assert!(!next_tools.contains(&"ext__crm__lookup".to_owned()));
    let journalled = a.mem.payloads("ts1", "tools_found");
    assert_eq!(journalled.len(), 1);
    assert_eq!(journalled[0]["tools"][0], "ext/crm:refund");

    let second = host_turn(
        &a.rt,
        &opened.invocation,
        first.next_turn_id.as_deref().unwrap(),
        &calls(&[("c2", "ext__crm__refund", json!({"query": "order 7"}))]),
    )
    .await
    .unwrap();
    assert!(
        !second.outcome.results[0].is_error,
        "{}",
        second.outcome.results[0].content
    );
    assert_eq!(a.mem.executed(), ["ext/crm:refund"]);

    // A tool nobody searched for is still refused like any name the turn did not advertise.
    let third = host_turn(
        &a.rt,
        &opened.invocation,
        second.next_turn_id.as_deref().unwrap(),
        &calls(&[("c3", "ext__crm__lookup", json!({"query": "acme"}))]),
    )
    .await;
    let refused = match third {
        Ok(t) => t.failure.map(|f| f.code),
        Err(e) => Some(e.code().as_str().to_owned()),
    };
    assert_eq!(
        refused.as_deref(),
        Some(codes::MODEL_UNKNOWN_TOOL_ALIAS.as_str())
    );
    assert_eq!(a.mem.executed(), ["ext/crm:refund"]);
}
