//! `/metrics` of the runtime, the workspace service and the mcp-proxy, scraped after known calls:
//! the counts match what was called, how it ended, and what the gate refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolplane_proto::v1 as pb;

/// `GET <base>/metrics` over a plain HTTP/1.0 connection: (content type, body).
async fn scrape(base: &str) -> (String, String) {
    let addr = base.trim_start_matches("http://");
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("content-type: "))
        .unwrap_or("")
        .to_owned();
    (content_type, body.to_owned())
}

fn value(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no series {series} in\n{body}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_service_counts_what_it_did() {
    let mut h = harness().await;
    let server = register_fixture(&mut h).await;
    h.put_profile(json!({
        "id": "counted",
        "tools": {"allow": ["builtin:workspace.*", "builtin:dice.roll", "mcp:fixture/echo", "mcp:fixture/fail"], "maxCallsPerInvocation": 6}
    }))
    .await;
    let run = h.create_run("counted", true).await;
    let opened = h.open(&run, pb::ProviderFormat::OpenaiChat).await;
    let inv = opened.invocation_id;
    let turn = opened.first_turn.unwrap().turn_id;
    let r = h
        .execute(
            &inv,
            &turn,
            pb::ProviderFormat::OpenaiChat,
            openai_calls(&[
                ("c1", "dice_roll", json!({"notation": "d6"})),
                ("c2", "dice_roll", json!({"notation": "2d8"})),
                (
                    "c3",
                    "workspace_read_file",
                    json!({"path": "output/missing.md"}),
                ),
                (
                    "c4",
                    "workspace_write_file",
                    json!({"path": "output/a.md", "content": "a\n"}),
                ),
                ("c5", "mcp__fixture__echo", json!({"text": "hi"})),
                ("c6", "mcp__fixture__fail", json!({})),
                ("c7", "dice_roll", json!({"notation": "d4"})),
            ]),
        )
        .await
        .unwrap();
    let codes: Vec<Option<&str>> = r.results.iter().map(|x| x.error_code.as_deref()).collect();
    assert_eq!(codes[..2], [None, None]);
    let missing = codes[2].unwrap().to_owned();
    assert_eq!(codes[3..5], [None, None]);
    assert_eq!(codes[5], Some("mcp.tool_error"));
    assert_eq!(codes[6], Some("agent.tool_budget_exhausted"));

    let [runtime, workspace, mcp] = h.plane.metrics_urls();
    let (content_type, body) = scrape(&runtime).await;
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let calls = |tool: &str, outcome: &str| {
        value(
            &body,
            &format!(
                "toolplane_tool_calls_total{{tool=\"{tool}\",source=\"builtin\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(calls("builtin:dice.roll", "ok"), 2.0);
    assert_eq!(calls("builtin:workspace.read_file", "recoverable"), 1.0);
    assert_eq!(calls("builtin:workspace.write_file", "ok"), 1.0);
    assert_eq!(
        value(
            &body,
            "toolplane_gate_refusals_total{reason=\"agent.tool_budget_exhausted\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &body,
            "toolplane_tool_call_duration_seconds_count{tool=\"builtin:dice.roll\",source=\"builtin\"}"
        ),
        2.0
    );

    let (_, body) = scrape(&workspace).await;
    assert_eq!(
        value(
            &body,
            &format!(
                "toolplane_workspace_tool_calls_total{{tool=\"workspace.read_file\",outcome=\"{missing}\"}}"
            )
        ),
        1.0
    );
    assert_eq!(
        value(
            &body,
            "toolplane_workspace_tool_calls_total{tool=\"workspace.write_file\",outcome=\"ok\"}"
        ),
        1.0
    );
    let journalled = h.journal(&run).await.len() as f64;
    assert_eq!(
        value(&body, "toolplane_workspace_journal_records_total"),
        journalled
    );

    // One server, connected; every state is listed.
    let (_, body) = scrape(&mcp).await;
    for (state, n) in [
        ("disconnected", 0.0),
        ("connecting", 0.0),
        ("connected", 1.0),
        ("failed", 0.0),
    ] {
        assert_eq!(
            value(
                &body,
                &format!("toolplane_mcp_connections{{state=\"{state}\"}}")
            ),
            n
        );
    }
    let mcp_calls = |outcome: &str| {
        value(
            &body,
            &format!("toolplane_mcp_calls_total{{server=\"{server}\",outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(mcp_calls("ok"), 1.0);
    assert_eq!(mcp_calls("mcp.tool_error"), 1.0);
    assert_eq!(
        value(
            &body,
            &format!("toolplane_mcp_call_duration_seconds_count{{server=\"{server}\"}}")
        ),
        2.0
    );
    h.plane.shutdown().await;
}

/// Every service's `/metrics` — the catalog's hand-written page included — reports the handler
/// panics its server caught, before any happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_reports_handler_panics() {
    let h = harness().await;
    let [runtime, workspace, mcp] = h.plane.metrics_urls();
    for base in [h.plane.catalog_http_url(), runtime, workspace, mcp] {
        let (_, body) = scrape(&base).await;
        assert!(
            body.contains("# TYPE toolplane_handler_panics_total counter\n"),
            "{base}:\n{body}"
        );
    }
    h.plane.shutdown().await;
}
