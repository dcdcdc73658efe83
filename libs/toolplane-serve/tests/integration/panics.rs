//! A handler that panics, served through `toolplane_serve::serve` over a real socket: the caller
//! gets INTERNAL (gRPC) or a 500 (HTTP) instead of a dropped connection, the same channel keeps
//! serving, and `toolplane_handler_panics_total` counts each panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use toolplane_proto::testing::v1::echo_service_client::EchoServiceClient;
use toolplane_proto::testing::v1::echo_service_server::{EchoService, EchoServiceServer};
use toolplane_proto::testing::v1::{EchoRequest, EchoResponse};
use toolplane_serve::{PANIC_MESSAGE, ServeOptions, Services};

/// An echo that panics on the payload `panic`.
struct PanickingEcho;

#[tonic::async_trait]
impl EchoService for PanickingEcho {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoResponse>, Status> {
        let EchoRequest { payload } = request.into_inner();
        if payload == b"panic" {
            panic!("the handler met an input it did not expect");
        }
        Ok(Response::new(EchoResponse { payload }))
    }
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

async fn echo(client: &mut EchoServiceClient<Channel>, payload: &[u8]) -> Result<Vec<u8>, Status> {
    client
        .echo(EchoRequest {
            payload: payload.to_vec(),
        })
        .await
        .map(|r| r.into_inner().payload)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_answers_internal_and_the_server_keeps_serving() {
    let registry = Arc::new(toolplane_telemetry::metrics::Registry::new());
    let router = toolplane_telemetry::metrics::router(Arc::clone(&registry)).route(
        "/boom",
        get(|| async {
            if true {
                panic!("an HTTP route panicked");
            }
            "unreachable"
        }),
    );
    let serving = toolplane_serve::serve(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Services::new().add_service(EchoServiceServer::new(PanickingEcho)),
        ServeOptions::new("echo")
            .registry(Arc::clone(&registry))
            .http(TcpListener::bind("127.0.0.1:0").await.unwrap(), router),
    )
    .await
    .unwrap();
    let channel = Channel::from_shared(serving.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = EchoServiceClient::new(channel);

    let failed = echo(&mut client, b"panic").await.unwrap_err();
    assert_eq!(failed.code(), tonic::Code::Internal, "{failed:?}");
    assert_eq!(failed.message(), PANIC_MESSAGE);
    // The same channel (the same HTTP/2 connection) still answers, more than once.
    assert_eq!(echo(&mut client, b"after").await.unwrap(), b"after");
    let again = echo(&mut client, b"panic").await.unwrap_err();
    assert_eq!(again.code(), tonic::Code::Internal, "{again:?}");
    assert_eq!(echo(&mut client, b"still").await.unwrap(), b"still");

    let http = serving.http_addr().unwrap();
    let boom = http_get(http, "/boom").await;
    assert!(boom.starts_with("HTTP/1.1 500"), "{boom}");
    assert!(boom.ends_with(PANIC_MESSAGE), "{boom}");
    assert!(!boom.contains("an HTTP route panicked"), "{boom}");

    let metrics = http_get(http, "/metrics").await;
    assert!(
        metrics.contains(
            "toolplane_handler_panics_total{rpc=\"/toolplane.testing.v1.EchoService/Echo\"} 2"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("toolplane_handler_panics_total{rpc=\"http\"} 1"),
        "{metrics}"
    );
    serving.shutdown().await.unwrap();
}
