//! Each of the proxy's services decodes requests up to what it needs: an `Execute` over 4 MiB or
//! an admin request over 8 MiB is refused with OUT_OF_RANGE before it is decoded, and the proxy
//! keeps serving on the same connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use toolplane_mcp_proxy::{MAX_ADMIN_REQUEST_BYTES, MAX_EXECUTE_REQUEST_BYTES};
use toolplane_proto::v1 as pb;

fn execute(arguments_json: String) -> pb::ExecuteRequest {
    pb::ExecuteRequest {
        invocation: Some(pb::ToolInvocation {
            call_id: "c".into(),
            tool_id: "builtin:dice.roll".into(),
            arguments_json,
            provider_metadata_json: None,
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_a_services_limit_are_refused_and_the_proxy_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;

    let over = format!(r#"{{"text":"{}"}}"#, "a".repeat(MAX_EXECUTE_REQUEST_BYTES));
    let refused = h.exec.execute(execute(over)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");

    let refused = h
        .admin
        .get_server(pb::GetServerRequest {
            server_id: "s".repeat(MAX_ADMIN_REQUEST_BYTES),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");

    // Within the limits the same connection still answers: a 1 MiB Execute is decoded and
    // answered (a status of its own: the tool is not an MCP tool), and so is an admin request.
    let within = format!(r#"{{"text":"{}"}}"#, "a".repeat(1 << 20));
    let answered = h.exec.execute(execute(within)).await.unwrap_err();
    assert_eq!(
        answered.code(),
        tonic::Code::InvalidArgument,
        "{answered:?}"
    );
    h.admin
        .list_servers(pb::ListServersRequest::default())
        .await
        .unwrap();
    h.stop().await;
}
