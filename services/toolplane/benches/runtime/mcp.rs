//! `TOOLPLANE_BENCH_ONLY=mcp`: an MCP `tools/call` of `dice.roll` through the runtime's MCP face
//! (`/mcp`, streamable HTTP, an rmcp client holding one session) against the same call through
//! `ExecuteToolCalls`, interleaved in one run so load changes hit both alike (target ≤ 1.3×).

use std::time::Instant;

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt as _};
use serde_json::json;
use tonic::transport::Channel;
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
    let (mut t_mcp, mut t_grpc) = (Vec::new(), Vec::new());
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
        if i >= 200 {
            t_mcp.push(m);
            t_grpc.push(g);
        }
    }
    let _ = s.cancel().await;
    let (mcp_m, grpc_m) = (median(t_mcp), median(t_grpc));
    let ratio = mcp_m.as_secs_f64() / grpc_m.as_secs_f64();
    println!("ExecuteToolCalls dice.roll p50 {grpc_m:?}");
    println!(
        "MCP tools/call dice_roll via /mcp p50 {mcp_m:?} = {ratio:.2}× ExecuteToolCalls (target ≤ 1.3) {}",
        if ratio <= 1.3 { "ok" } else { "MISSED" }
    );
}
