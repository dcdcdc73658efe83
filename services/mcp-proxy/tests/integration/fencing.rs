//! Run fencing (docs/mcp-proxy.md, "Fencing"): a call whose `ToolContext.epoch` is older than the
//! newest the proxy has seen for its run is refused with `mcp.stale_epoch` — a FAILED_PRECONDITION
//! status naming the run and both epochs — and the MCP server never sees it; epoch 0 is never
//! fenced. The two-replica case is in `replicas.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use tonic_types::StatusExt as _;
use toolplane_proto::v1 as pb;

fn echo_at(server: &pb::McpServer, run: &str, epoch: u64, text: &str) -> pb::ExecuteRequest {
    pb::ExecuteRequest {
        context: Some(pb::ToolContext {
            run_id: run.into(),
            epoch,
            ..Default::default()
        }),
        invocation: Some(pb::ToolInvocation {
            call_id: "call_1".into(),
            tool_id: tool_id(server, "echo"),
            arguments_json: format!(r#"{{"text":"{text}"}}"#),
            provider_metadata_json: None,
        }),
        ..Default::default()
    }
}

/// The `echo` texts the fixture server received, in order.
fn echoed(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("called echo "))
        .map(|args| {
            let v: serde_json::Value = serde_json::from_str(args).unwrap();
            v["text"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_epoch_of_a_run_is_refused_before_the_server_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let mut h = Harness::start(&dir.path().join("data")).await;
    let server = h
        .upsert(fixture(
            "fx",
            &[("FIXTURE_CALL_LOG", log.to_str().unwrap())],
        ))
        .await
        .server
        .unwrap();

    let ok = h
        .exec
        .execute(echo_at(&server, "r1", 2, "at 2"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(result(&ok).content, "at 2", "{:?}", result(&ok));

    let refused = h
        .exec
        .execute(echo_at(&server, "r1", 1, "at 1"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().starts_with("mcp.stale_epoch: "),
        "{}",
        refused.message()
    );
    let info = refused.get_details_error_info().unwrap();
    assert_eq!(info.reason, "mcp.stale_epoch");
    assert_eq!(info.metadata["run_id"], "r1");
    assert_eq!(info.metadata["epoch"], "1");
    assert_eq!(info.metadata["newest_epoch"], "2");

    // Epoch 0 is not fenced; the newest epoch and other runs still go through.
    for (run, epoch, text) in [
        ("r1", 0, "at 0"),
        ("r1", 2, "at 2 again"),
        ("r2", 1, "r2 at 1"),
    ] {
        let ok = h
            .exec
            .execute(echo_at(&server, run, epoch, text))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(result(&ok).content, text, "{:?}", result(&ok));
    }
    assert_eq!(
        echoed(&log),
        ["at 2", "at 0", "at 2 again", "r2 at 1"],
        "the server saw the refused call"
    );

    // A restart keeps the fence: the newest epoch is in the store, not only in memory.
    h.stop().await;
    let mut h = Harness::start(&dir.path().join("data")).await;
    let refused = h
        .exec
        .execute(echo_at(&server, "r1", 1, "after restart"))
        .await
        .unwrap_err();
    assert_eq!(
        toolplane_proto::status::error_code(&refused).as_deref(),
        Some("mcp.stale_epoch")
    );
    h.stop().await;
    assert!(!echoed(&log).contains(&"after restart".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_epoch_without_a_valid_run_id_is_an_invalid_request() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    let server = h.upsert(fixture("fx", &[])).await.server.unwrap();
    let refused = h
        .exec
        .execute(echo_at(&server, "", 3, "no run"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        toolplane_proto::status::error_code(&refused).as_deref(),
        Some("mcp.invalid_request")
    );
    h.stop().await;
}
