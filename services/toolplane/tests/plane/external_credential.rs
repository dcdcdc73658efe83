//! An external tool host never receives the plane's own credentials: in a plane with
//! authentication on, the runtime calls the catalog, the workspace and the mcp-proxy with the
//! service credential, but a call to a registered host's URL carries only the headers of its
//! registration — here none, so no `authorization` at all, neither the service credential nor
//! the caller's token (docs/auth.md, "Between services").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tonic::metadata::MetadataValue;
use tonic::service::{Interceptor, Routes};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use toolplane::plane::{Plane, PlaneConfig};
use toolplane_auth::{Authenticator, NewToken, Role};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;
use toolplane_proto::v1::tool_executor_server::{ToolExecutor, ToolExecutorServer};

/// The headers of one call, as names and values.
type Headers = Vec<(String, String)>;

/// Every header of every call the host received.
#[derive(Clone, Default)]
struct Host {
    headers: Arc<Mutex<Vec<Headers>>>,
}

#[tonic::async_trait]
impl ToolExecutor for Host {
    async fn execute(
        &self,
        request: Request<pb::ExecuteRequest>,
    ) -> Result<Response<pb::ExecuteResponse>, Status> {
        let headers = request
            .metadata()
            .clone()
            .into_headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        self.headers.lock().unwrap().push(headers);
        let inv = request.into_inner().invocation.unwrap_or_default();
        Ok(Response::new(pb::ExecuteResponse {
            result: Some(pb::ToolResult {
                call_id: inv.call_id,
                tool_id: inv.tool_id,
                content: "pong".into(),
                ..Default::default()
            }),
            outcome: pb::ExecutionOutcome::Known as i32,
            ..Default::default()
        }))
    }
}

/// Adds `authorization: Bearer <secret>` to every request.
fn bearer(secret: &str) -> impl Interceptor + Clone {
    let value: MetadataValue<_> = format!("Bearer {secret}").parse().unwrap();
    move |mut request: Request<()>| {
        request
            .metadata_mut()
            .insert("authorization", value.clone());
        Ok(request)
    }
}

async fn channel(url: &str) -> Channel {
    Channel::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_host_never_receives_the_service_credential_or_the_callers_token() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = toolplane_serve::auth::open_token_store(&dir.path().join("auth"))
        .await
        .unwrap();
    let admin = tokens
        .create(NewToken {
            name: "admin".into(),
            cell: "default".into(),
            role: Role::Admin,
            expires_at_unix_ms: None,
        })
        .await
        .unwrap();
    let secret = admin.secret.expose().to_owned();
    let mut cfg = PlaneConfig::ephemeral(dir.path().join("plane"));
    cfg.auth = Authenticator::on(Some(tokens), None);
    let plane = Plane::up(cfg).await.unwrap();

    let host = Host::default();
    let server =
        toolplane_testkit::spawn_routes(Routes::new(ToolExecutorServer::new(host.clone())))
            .await
            .unwrap();
    let catalog = channel(&plane.catalog_url()).await;
    CatalogServiceClient::with_interceptor(catalog.clone(), bearer(&secret))
        .register_tools(pb::RegisterToolsRequest {
            host_id: "pinger".into(),
            display_name: "Pinger".into(),
            endpoint: Some(pb::ExecutorEndpoint {
                url: server.url(),
                timeout_ms: 10_000,
                ..Default::default()
            }),
            tools: vec![pb::ToolRegistration {
                descriptor: Some(pb::ToolDescriptor {
                    id: "ext/pinger:ping".into(),
                    description: "Answers pong.".into(),
                    input_schema_json: json!({"type": "object"}).to_string(),
                    ..Default::default()
                }),
                category: pb::ToolCategory::Exploration as i32,
                progress_aware: false,
            }],
            ..Default::default()
        })
        .await
        .unwrap();
    let profile = json!({"id": "pinging", "tools": {"allow": ["ext/pinger:ping"]}});
    ProfileServiceClient::with_interceptor(catalog, bearer(&secret))
        .put_profile(pb::PutProfileRequest {
            profile_id: "pinging".into(),
            profile_json: profile.to_string(),
            ..Default::default()
        })
        .await
        .unwrap();

    let mut runtime = RuntimeServiceClient::with_interceptor(
        channel(&plane.runtime_url()).await,
        bearer(&secret),
    );
    let run = runtime
        .create_run(pb::CreateRunRequest {
            profile_id: "pinging".into(),
            mode: pb::RunMode::Background as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap()
        .run_id;
    let inv = runtime
        .open_invocation(pb::OpenInvocationRequest {
            run_id: run,
            provider_format: pb::ProviderFormat::OpenaiChat as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let calls: Value = json!({"role": "assistant", "content": null, "tool_calls": [{
        "id": "call_ping", "type": "function",
        "function": {"name": "ext__pinger__ping", "arguments": "{}"}
    }]});
    let answer = runtime
        .execute_tool_calls(pb::ExecuteToolCallsRequest {
            invocation_id: inv.invocation_id,
            turn_id: inv.first_turn.unwrap().turn_id,
            provider_format: pb::ProviderFormat::OpenaiChat as i32,
            calls_json: calls.to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!answer.results[0].is_error, "{:?}", answer.results[0]);

    let seen = host.headers.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "the host was called once: {seen:?}");
    for (name, value) in &seen[0] {
        assert_ne!(name, "authorization", "{seen:?}");
        assert!(
            !value.contains("tp_") && !value.to_ascii_lowercase().contains("bearer"),
            "{name}: a credential reached the host"
        );
    }
    plane.shutdown().await;
    server.shutdown().await.unwrap();
}
