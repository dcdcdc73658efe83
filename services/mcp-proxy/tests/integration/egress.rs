//! Egress of streamable HTTP servers: in a deployed posture (private networks denied) cloud
//! metadata, loopback and a redirect to loopback are refused with `mcp.egress_denied`; on a
//! laptop (`toolplane up` on loopback) they are allowed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolplane_core::egress::{EgressPolicy, PrivateNetworks};
use toolplane_mcp_proxy::ProxySettings;
use toolplane_proto::v1 as pb;

fn deployed(allowed_cidrs: &[&str]) -> ProxySettings {
    ProxySettings {
        egress: EgressPolicy {
            private_networks: PrivateNetworks::Deny,
            allowed_cidrs: allowed_cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn register(name: &str, url: &str, skip_refresh: bool) -> pb::UpsertServerRequest {
    pb::UpsertServerRequest {
        display_name: name.into(),
        transport: Some(http(url)),
        skip_refresh,
        ..Default::default()
    }
}

const REFUSED: [&str; 5] = [
    "http://169.254.169.254/latest/meta-data",
    "http://127.0.0.1:9/mcp",
    "http://localhost:9/mcp",
    "http://[::1]:9/mcp",
    "http://10.0.0.1/mcp",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployed_proxy_refuses_metadata_loopback_and_private_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start_with(dir.path(), deployed(&[])).await;
    for (i, url) in REFUSED.iter().enumerate() {
        let e = h
            .admin
            .upsert_server(register(&format!("s{i}"), url, true))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{url}: {e:?}");
        assert!(
            e.message().starts_with("mcp.egress_denied: "),
            "{url}: {}",
            e.message()
        );
    }
    let listed = h
        .admin
        .list_servers(pb::ListServersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.servers.is_empty(), "{listed:?}");
    h.stop().await;

    // On a laptop the same URLs may be registered.
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    for (i, url) in REFUSED.iter().enumerate() {
        h.upsert(register(&format!("s{i}"), url, true)).await;
    }
    h.stop().await;
}

/// An HTTP server on `127.0.0.2` that answers every request with a redirect to `target`.
async fn redirecting_server(target: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let target = target.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let _ = socket.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    format!("http://{addr}/mcp")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_a_denied_address_is_refused() {
    let url = redirecting_server("http://127.0.0.1:9/mcp".into()).await;
    let dir = tempfile::tempdir().unwrap();
    // The server's own address is allowed; where it redirects to is not.
    let mut h = Harness::start_with(dir.path(), deployed(&["127.0.0.2/32"])).await;
    let answer = h.upsert(register("redirector", &url, false)).await;
    let server = answer.server.unwrap();
    assert_ne!(server.connection, pb::McpConnectionStatus::Connected as i32);
    assert!(
        answer
            .warnings
            .iter()
            .any(|w| w.code == "mcp.egress_denied"),
        "{:?}",
        answer.warnings
    );
    assert!(
        server.last_error.contains("127.0.0.1"),
        "{}",
        server.last_error
    );
    h.stop().await;
}

/// Per-cell egress: cell `a` may register an internal range and host that cell `b` (and the
/// default cell) may not (docs/egress.md, "Per cell").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_registers_what_its_own_egress_allows_and_another_cell_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = deployed(&[]);
    settings.egress.allowed_hosts = vec!["mcp.example.com".into()];
    settings.egress.cells.insert(
        "a".into(),
        toolplane_core::egress::CellEgress {
            allowed_hosts: Some(vec!["mcp.example.com".into(), "mcp.a.internal".into()]),
            allowed_cidrs: vec!["10.0.0.0/24".parse().unwrap()],
            ..Default::default()
        },
    );
    let mut h = Harness::start_with(dir.path(), settings).await;
    let in_cell = |cell: &str, name: &str, url: &str| pb::UpsertServerRequest {
        cell_id: cell.into(),
        ..register(name, url, true)
    };
    for (name, url) in [
        ("range", "http://10.0.0.1/mcp"),
        ("host", "http://mcp.a.internal/mcp"),
    ] {
        h.admin
            .upsert_server(in_cell("a", name, url))
            .await
            .unwrap_or_else(|e| panic!("cell a, {url}: {e:?}"));
        for cell in ["b", ""] {
            let e = h
                .admin
                .upsert_server(in_cell(cell, name, url))
                .await
                .unwrap_err();
            assert_eq!(
                e.code(),
                tonic::Code::PermissionDenied,
                "{cell}, {url}: {e:?}"
            );
            assert!(
                e.message().starts_with("mcp.egress_denied: "),
                "{cell}, {url}: {}",
                e.message()
            );
        }
    }
    h.stop().await;
}
