//! `TOOLPLANE_BENCH_ONLY=mcp`: an MCP `tools/call` of `dice.roll` through the runtime's MCP face
//! (`/mcp`, streamable HTTP, an rmcp client holding one session) against the same call through
//! `ExecuteToolCalls`, interleaved in one run so load changes hit both alike (target ≤ 1.3×).
//!
//! Beside them, the floor of the two transports with nothing behind them: a bare rmcp
//! streamable-HTTP server in this process (the face's session manager and configuration, one tool
//! that answers at once) called by the same rmcp client, and a bare tonic echo. The four calls are
//! interleaved; the floor's difference is what the transports alone add, to set beside the
//! face's difference over `ExecuteToolCalls`.

use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ContentBlock, Implementation, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt as _};
use serde_json::json;
use tonic::transport::Channel;
use toolplane_proto::testing::v1::EchoRequest;
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;

use super::{SAMPLES, call, median, open};

/// Calls per session / invocation, under the bench profile's round limit.
const PER_SESSION: usize = 500;

#[derive(Debug, Clone)]
struct BenchClient;

impl ClientHandler for BenchClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolplane-bench", "0"),
        )
    }
}

/// The floor's server: one tool, answered at once.
#[derive(Debug, Clone)]
struct Bare;

impl ServerHandler for Bare {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text("11"),
        ])))
    }
}

/// A bare rmcp streamable-HTTP server configured as the face is; its `/mcp` URL.
async fn bare_server() -> String {
    let service = StreamableHttpService::new(
        || Ok(Bare),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_json_response(true),
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/mcp")
}

async fn session(url: &str) -> RunningService<RoleClient, BenchClient> {
    BenchClient
        .serve(StreamableHttpClientTransport::from_uri(url))
        .await
        .unwrap()
}

/// The `i`th call's arguments, the same on both paths: new from one call to the next, so that the
/// cycle detector (rightly) lets a session of identical calls go on.
fn notation(i: usize) -> serde_json::Value {
    json!({"notation": format!("{}d6+4", i % 9 + 1)})
}

async fn mcp_call(s: &RunningService<RoleClient, BenchClient>, i: usize) {
    let mut params = CallToolRequestParams::new("dice_roll");
    params.arguments = notation(i).as_object().cloned();
    let r = s.peer().call_tool(params).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
}

pub async fn overhead(rt: &mut RuntimeServiceClient<Channel>, http_url: &str) {
    let url = format!("{http_url}/mcp?profile=bench");
    let mut s = session(&url).await;
    let mut inv = open(rt).await;
    let bare = session(&bare_server().await).await;
    let (echo_addr, _echo) = toolplane_testkit::spawn_echo_server().await.unwrap();
    let mut echo = toolplane_testkit::connect_echo(echo_addr).await.unwrap();
    let (mut t_mcp, mut t_grpc) = (Vec::new(), Vec::new());
    let (mut t_bare, mut t_echo) = (Vec::new(), Vec::new());
    for i in 0..SAMPLES + 200 {
        if i > 0 && i % PER_SESSION == 0 {
            let _ = s.cancel().await;
            s = session(&url).await;
            inv = open(rt).await;
        }
        let t = Instant::now();
        mcp_call(&s, i).await;
        let m = t.elapsed();
        let t = Instant::now();
        call(rt, &mut inv, i, "dice_roll", notation(i)).await;
        let g = t.elapsed();
        let t = Instant::now();
        let mut params = CallToolRequestParams::new("roll");
        params.arguments = notation(i).as_object().cloned();
        bare.peer().call_tool(params).await.unwrap();
        let b = t.elapsed();
        let t = Instant::now();
        echo.echo(EchoRequest {
            payload: vec![7; 64],
        })
        .await
        .unwrap();
        let e = t.elapsed();
        if i >= 200 {
            t_mcp.push(m);
            t_grpc.push(g);
            t_bare.push(b);
            t_echo.push(e);
        }
    }
    let _ = s.cancel().await;
    let _ = bare.cancel().await;
    let (mcp_m, grpc_m) = (median(t_mcp), median(t_grpc));
    let (bare_m, echo_m) = (median(t_bare), median(t_echo));
    println!("floor: bare rmcp tools/call p50 {bare_m:?}, bare tonic echo p50 {echo_m:?}");
    println!(
        "floor difference {:?}; the face's difference over ExecuteToolCalls {:?}",
        bare_m.saturating_sub(echo_m),
        mcp_m.saturating_sub(grpc_m),
    );
    let ratio = mcp_m.as_secs_f64() / grpc_m.as_secs_f64();
    println!("ExecuteToolCalls dice.roll p50 {grpc_m:?}");
    println!(
        "MCP tools/call dice_roll via /mcp p50 {mcp_m:?} = {ratio:.2}× ExecuteToolCalls (target ≤ 1.3) {}",
        if ratio <= 1.3 { "ok" } else { "MISSED" }
    );
}
