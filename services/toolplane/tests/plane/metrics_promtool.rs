//! Every service's `/metrics` after a runtime-driven run with the scripted model, read by
//! Prometheus's own parser (`promtool check metrics`, from Debian's `prometheus` package), and
//! checked against what the provisioned Grafana dashboard queries: each metric a panel reads is
//! served by some service. The run's model calls show up as the GenAI conventions' histograms.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::process::{Command, Stdio};

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolplane_proto::v1 as pb;

/// The body of `GET <base>/metrics`.
async fn scrape(base: &str) -> String {
    let addr = base.trim_start_matches("http://");
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.contains(" 200 "), "{head}");
    body.to_owned()
}

/// `promtool check metrics` on `body`: its complaints, or `None` when it accepts the page.
fn promtool(body: &str) -> Option<String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is not installed: `apt-get install prometheus` (.ci/run does)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (!out.status.success() || !said.trim().is_empty()).then_some(said)
}

/// The metric names the dashboard's queries read (`toolplane_…` and `gen_ai_…`).
fn dashboard_metrics() -> BTreeSet<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/dashboards/toolplane.json"
    );
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut exprs = Vec::new();
    fn walk<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr", Value::String(e)) => out.push(e),
                        _ => walk(v, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(&dashboard, &mut exprs);
    let mut names = BTreeSet::new();
    for e in exprs {
        for (i, _) in e.match_indices("toolplane_") {
            let name: String = e[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.insert(name);
        }
    }
    assert!(names.len() >= 8, "the dashboard's metrics: {names:?}");
    names
}

/// The family a series name belongs to on `page`: itself, or the histogram it is a
/// `_bucket`/`_sum`/`_count` of.
fn declared(page: &str, series: &str) -> bool {
    let family = ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| {
            series
                .strip_suffix(s)
                .filter(|f| page.contains(&format!("# TYPE {f} histogram\n")))
        })
        .unwrap_or(series);
    page.contains(&format!("# TYPE {family} "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metrics_page_passes_promtool_and_serves_what_the_dashboard_reads() {
    let mut h = harness().await;
    let _server = register_fixture(&mut h).await;
    h.put_profile(json!({
        "id": "measured",
        "tools": {"allow": ["builtin:workspace.*", "builtin:dice.roll", "mcp:fixture/echo"], "maxCallsPerInvocation": 10}
    }))
    .await;
    let usage = json!({"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320});
    let turn = |name: &str, arguments: Value| json!({"tool_calls": [{"function": {"name": name, "arguments": arguments}}], "usage": usage});
    let script = json!({"turns": [
        turn("mcp__fixture__echo", json!({"text": "hi"})),
        turn("dice_roll", json!({"notation": "d6"})),
        turn("workspace_write_file", json!({"path": "output/main.md", "content": "measured\n"})),
        turn("workspace_commit", json!({})),
        turn("workspace_finish", json!({})),
    ]});
    let run = h
        .start_run(pb::RunSpec {
            profile_id: "measured".into(),
            model: Some(pb::ModelEndpoint {
                kind: pb::ModelEndpointKind::Scripted as i32,
                script_json: Some(script.to_string()),
                ..Default::default()
            }),
            initial_user_message: "Write a note and finish.".into(),
            mode: pb::RunMode::Foreground as i32,
            max_rounds: 8,
            ..Default::default()
        })
        .await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        done.failure
    );

    let [runtime, workspace, mcp] = h.plane.metrics_urls();
    let mut pages = Vec::new();
    for base in [h.plane.catalog_http_url(), runtime, workspace, mcp] {
        let page = scrape(&base).await;
        if let Some(complaints) = promtool(&page) {
            panic!("promtool check metrics on {base}/metrics:\n{complaints}\n{page}");
        }
        pages.push(page);
    }

    for name in dashboard_metrics() {
        assert!(
            pages.iter().any(|p| declared(p, &name)),
            "{name}, which the dashboard reads, is served by no service"
        );
    }
    // What the run did is counted, not just declared.
    let all = pages.concat();
    for series in [
        "toolplane_tool_calls_total{tool=\"builtin:dice.roll\"",
        "toolplane_tool_call_duration_seconds_bucket{",
        "toolplane_model_call_duration_seconds_bucket{provider=\"scripted\",outcome=\"ok\"",
        "toolplane_workspace_tool_calls_total{tool=\"workspace.write_file\"",
        "toolplane_workspace_journal_records_total ",
        "toolplane_mcp_calls_total{",
        "toolplane_mcp_call_duration_seconds_bucket{",
        "toolplane_mcp_connections{state=\"connected\"} 1",
    ] {
        assert!(
            all.lines().any(|l| l.starts_with(series)),
            "{series} in\n{all}"
        );
    }

    // Five model calls, each reporting 300 input and 20 output tokens.
    let genai = "gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"toolplane.scripted\",gen_ai_request_model=\"\",gen_ai_response_model=\"scripted\",server_address=\"\"";
    for (series, value) in [
        (
            format!("gen_ai_client_operation_duration_seconds_count{{{genai},error_type=\"\"}}"),
            "5",
        ),
        (
            format!("gen_ai_client_token_usage_sum{{{genai},gen_ai_token_type=\"input\"}}"),
            "1500.0",
        ),
        (
            format!("gen_ai_client_token_usage_sum{{{genai},gen_ai_token_type=\"output\"}}"),
            "100.0",
        ),
    ] {
        assert!(
            all.lines().any(|l| l == format!("{series} {value}")),
            "{series} {value} in\n{all}"
        );
    }
    h.plane.shutdown().await;
}
