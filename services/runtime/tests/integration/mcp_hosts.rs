//! The MCP face answers only the `Host` headers it is told to: the loopback names always, the
//! configured `mcp_allowed_hosts` besides, and refuses every other host (a DNS-rebinding page
//! reaching a runtime on a non-loopback address) with 403 before any MCP is spoken.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;

use serde_json::json;
use support::*;

async fn serve(hosts: &[&str]) -> (std::net::SocketAddr, Alone) {
    let hosts: Vec<String> = hosts.iter().map(|h| (*h).to_owned()).collect();
    let alone = alone_with(move |c| c.mcp_allowed_hosts = hosts.clone()).await;
    let router = toolplane_runtime::mcp::router(Arc::clone(&alone.rt));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (addr, alone)
}

/// The HTTP status of an `initialize` sent with `host` as the `Host` header.
async fn initialize(addr: std::net::SocketAddr, host: &str) -> u16 {
    reqwest::Client::new()
        .post(format!("http://{addr}/mcp?profile=nobody"))
        .header("host", host)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "host-check", "version": "1"}
            }
        }))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_hosts_are_answered_and_others_refused() {
    let (addr, _alone) = serve(&["tools.example.com"]).await;
    assert_eq!(initialize(addr, "evil.example.com").await, 403);
    assert_eq!(initialize(addr, "evil.example.com:80").await, 403);
    assert_ne!(initialize(addr, "tools.example.com").await, 403);
    assert_ne!(initialize(addr, "tools.example.com:7411").await, 403);
    assert_ne!(
        initialize(addr, &format!("127.0.0.1:{}", addr.port())).await,
        403
    );
    assert_ne!(initialize(addr, "localhost").await, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_loopback_by_default_and_any_host_with_a_star() {
    let (addr, _alone) = serve(&[]).await;
    assert_eq!(initialize(addr, "tools.example.com").await, 403);
    assert_ne!(initialize(addr, "localhost").await, 403);
    let (addr, _alone) = serve(&["*"]).await;
    assert_ne!(initialize(addr, "tools.example.com").await, 403);
}
