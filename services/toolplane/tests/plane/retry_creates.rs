//! Retry-safe creates against a whole plane on real sockets (docs/errors.md, "Retrying
//! creates"): every creating RPC sent twice with the same `request_id`, as a client does when the
//! first answer was lost, creates once and answers the same; the same key with another request
//! is refused as `request.idempotency_mismatch`; without a key each request creates.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use serde_json::json;
use tonic_types::StatusExt;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::token_service_client::TokenServiceClient;

fn mismatch(status: tonic::Status) {
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    let details = status.get_error_details();
    assert_eq!(
        details.error_info().map(|i| i.reason.as_str()),
        Some("request.idempotency_mismatch"),
        "{status:?}"
    );
    let field = details
        .bad_request()
        .and_then(|b| b.field_violations.first())
        .map(|v| v.field.as_str());
    assert_eq!(field, Some("request_id"));
}

fn labels(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_creating_rpc_retried_with_its_request_id_creates_once() {
    let mut h = common::harness().await;
    let mut tokens = TokenServiceClient::new(common::channel(&h.plane.catalog_url()).await);

    // PutProfile: the retry of a create-only write (expected version 0) answers the first write
    // instead of `profile.version_conflict`.
    let put = |key: &str, text: &str| pb::PutProfileRequest {
        profile_id: "p1".into(),
        profile_json: text.into(),
        expected_version: Some(0),
        request_id: key.into(),
        ..Default::default()
    };
    let doc = json!({"id": "p1", "tools": {"allow": ["builtin:dice.roll"]}}).to_string();
    let first = h.profiles.put_profile(put("put-1", &doc)).await.unwrap();
    let again = h.profiles.put_profile(put("put-1", &doc)).await.unwrap();
    assert_eq!(first.get_ref(), again.get_ref());
    assert_eq!(first.get_ref().profile.as_ref().unwrap().version, 1);
    let other = json!({"id": "p1", "tools": {"allow": ["*"]}}).to_string();
    mismatch(
        h.profiles
            .put_profile(put("put-1", &other))
            .await
            .unwrap_err(),
    );
    let unkeyed = h.profiles.put_profile(put("", &doc)).await.unwrap_err();
    assert_eq!(unkeyed.code(), tonic::Code::Aborted, "{unkeyed:?}");

    // CreateRun: one run, whatever the order of the labels' entries.
    let create = |key: &str, pairs: &[(&str, &str)]| pb::CreateRunRequest {
        profile_id: "p1".into(),
        chat: Some(pb::ChatBinding {
            chat_id: "chat-1".into(),
            message_id: None,
        }),
        mode: pb::RunMode::Background as i32,
        labels: labels(pairs),
        request_id: key.into(),
        ..Default::default()
    };
    let pairs = [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")];
    let reversed = [("d", "4"), ("c", "3"), ("b", "2"), ("a", "1")];
    let first = h.runtime.create_run(create("run-1", &pairs)).await.unwrap();
    let again = h
        .runtime
        .create_run(create("run-1", &reversed))
        .await
        .unwrap();
    let run_id = first.get_ref().run.as_ref().unwrap().run_id.clone();
    assert_eq!(again.get_ref().run.as_ref().unwrap().run_id, run_id);
    mismatch(
        h.runtime
            .create_run(create("run-1", &[("a", "other")]))
            .await
            .unwrap_err(),
    );

    // StartRun: one runtime-driven run (its model endpoint is never reached in time to matter).
    let start = |key: &str| pb::StartRunRequest {
        spec: Some(pb::RunSpec {
            profile_id: "p1".into(),
            model: Some(pb::ModelEndpoint {
                kind: pb::ModelEndpointKind::OpenaiCompatible as i32,
                base_url: "http://127.0.0.1:9".into(),
                model: "none".into(),
                max_retries: Some(0),
                ..Default::default()
            }),
            initial_user_message: "hello".into(),
            mode: pb::RunMode::Background as i32,
            labels: labels(&pairs),
            ..Default::default()
        }),
        request_id: key.into(),
    };
    let first = h.runtime.start_run(start("start-1")).await.unwrap();
    let again = h.runtime.start_run(start("start-1")).await.unwrap();
    let started = first.get_ref().run.as_ref().unwrap().run_id.clone();
    assert_eq!(again.get_ref().run.as_ref().unwrap().run_id, started);
    let mut other = start("start-1");
    other.spec.as_mut().unwrap().initial_user_message = "something else".into();
    mismatch(h.runtime.start_run(other).await.unwrap_err());

    let runs = h
        .runtime
        .list_runs(pb::ListRunsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .runs;
    let mut ids: Vec<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
    ids.sort_unstable();
    let mut want = vec![run_id.as_str(), started.as_str()];
    want.sort_unstable();
    assert_eq!(ids, want, "the retries created runs of their own");

    // UpsertServer: one registration (a new id each time without a key).
    let upsert = |key: &str, name: &str| pb::UpsertServerRequest {
        display_name: name.into(),
        transport: Some(pb::McpTransport {
            kind: Some(pb::mcp_transport::Kind::Stdio(pb::McpStdioTransport {
                command: "/bin/true".into(),
                ..Default::default()
            })),
        }),
        skip_refresh: true,
        request_id: key.into(),
        ..Default::default()
    };
    let first = h.mcp.upsert_server(upsert("mcp-1", "one")).await.unwrap();
    let again = h.mcp.upsert_server(upsert("mcp-1", "one")).await.unwrap();
    let server = first.get_ref().server.as_ref().unwrap().server_id.clone();
    assert_eq!(again.get_ref().server.as_ref().unwrap().server_id, server);
    assert!(again.get_ref().created);
    mismatch(
        h.mcp
            .upsert_server(upsert("mcp-1", "two"))
            .await
            .unwrap_err(),
    );
    let servers = h
        .mcp
        .list_servers(pb::ListServersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .servers;
    assert_eq!(servers.len(), 1, "{servers:?}");

    // CreateToken: one token, and the retry is told the same secret.
    let token = |key: &str, name: &str| pb::CreateTokenRequest {
        role: "reader".into(),
        name: name.into(),
        request_id: key.into(),
        ..Default::default()
    };
    let first = tokens.create_token(token("tok-1", "ci")).await.unwrap();
    let again = tokens.create_token(token("tok-1", "ci")).await.unwrap();
    assert_eq!(first.get_ref().secret, again.get_ref().secret);
    mismatch(
        tokens
            .create_token(token("tok-1", "other"))
            .await
            .unwrap_err(),
    );
    let listed = tokens
        .list_tokens(pb::ListTokensRequest::default())
        .await
        .unwrap()
        .into_inner()
        .tokens;
    let named: Vec<_> = listed.iter().filter(|t| t.name == "ci").collect();
    assert_eq!(named.len(), 1, "{listed:?}");
}
