//! The auth layer on an axum HTTP server over loopback: 401 / 403 with a JSON body, health open.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test fixtures fail loudly

use crate::common;

use std::net::{Ipv4Addr, SocketAddr};

use axum::Router;
use axum::routing::get;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use toolplane_auth::{AuthLayer, Authenticator, Caller, NewToken, Role};

async fn serve_http(auth: Authenticator) -> SocketAddr {
    let router = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(|| async { "# metrics\n" }))
        .route(
            "/tools",
            get(|caller: axum::Extension<Caller>| async move {
                format!("tools for {} as {}", caller.cell, caller.role)
            }),
        )
        .route("/admin-only", get(|| async { "secret stuff" }))
        .layer(AuthLayer::new(auth));
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// One HTTP/1.1 GET over a fresh connection: status code and body.
async fn get_path(addr: SocketAddr, path: &str, authorization: Option<&str>) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let auth = authorization.map_or(String::new(), |v| format!("authorization: {v}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n{auth}connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").unwrap().1.to_owned();
    (status, body)
}

#[tokio::test(flavor = "multi_thread")]
async fn http_paths_answer_401_and_403_with_json_and_health_stays_open() {
    let tokens = token_store();
    let reader = tokens
        .create(NewToken {
            name: "grafana".into(),
            cell: "cell-h".into(),
            role: Role::Reader,
            expires_at_unix_ms: None,
        })
        .await
        .unwrap();
    let addr = serve_http(Authenticator::on(Some(tokens), None)).await;
    let bearer = format!("Bearer {}", reader.secret.expose());

    assert_eq!(get_path(addr, "/healthz", None).await, (200, "ok\n".into()));

    let (status, body) = get_path(addr, "/metrics", None).await;
    assert_eq!(status, 401);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["code"], "auth.unauthenticated");
    assert!(
        json["message"]
            .as_str()
            .unwrap()
            .starts_with("auth.unauthenticated: ")
    );

    let wrong = format!("Bearer tp_{}", "f".repeat(64));
    let (status, body) = get_path(addr, "/tools", Some(&wrong)).await;
    assert_eq!(status, 401);
    assert!(!body.contains(&"f".repeat(64)), "{body}");

    assert_eq!(get_path(addr, "/metrics", Some(&bearer)).await.0, 200);
    assert_eq!(
        get_path(addr, "/tools", Some(&bearer)).await,
        (200, "tools for cell-h as reader".into())
    );

    // A path without a row needs an admin.
    let (status, body) = get_path(addr, "/admin-only", Some(&bearer)).await;
    assert_eq!(status, 403);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["code"], "auth.permission_denied");
    assert!(!body.contains(reader.secret.expose()));
}
