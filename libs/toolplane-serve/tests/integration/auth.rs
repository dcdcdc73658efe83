//! Authentication on the shared start, over a real socket: with an authenticator on, every gRPC
//! service and the HTTP port refuse a request without the right credential while health stays
//! open; with the default (off), a handler still finds a `Caller` in its request's extensions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use toolplane_auth::{Authenticator, Caller, NewToken, Role, TokenStore};
use toolplane_proto::testing::v1::echo_service_client::EchoServiceClient;
use toolplane_proto::testing::v1::echo_service_server::{EchoService, EchoServiceServer};
use toolplane_proto::testing::v1::{EchoRequest, EchoResponse};
use toolplane_serve::{ServeOptions, Services, Serving};
use toolplane_store::MemoryStore;

/// Answers `cell|role|kind` of the caller the layer inserted.
#[derive(Clone)]
struct WhoAmI;

#[tonic::async_trait]
impl EchoService for WhoAmI {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoResponse>, Status> {
        let who = match request.extensions().get::<Caller>() {
            Some(c) => format!("{}|{}|{:?}", c.cell, c.role, c.kind),
            None => "no caller".to_owned(),
        };
        Ok(Response::new(EchoResponse {
            payload: who.into_bytes(),
        }))
    }
}

async fn start(auth: Option<Authenticator>) -> Serving {
    let registry = Arc::new(toolplane_telemetry::metrics::Registry::new());
    let mut options = ServeOptions::new("echo")
        .metrics(TcpListener::bind("127.0.0.1:0").await.unwrap(), registry);
    if let Some(auth) = auth {
        options = options.auth(auth);
    }
    toolplane_serve::serve(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Services::new().add_service(EchoServiceServer::new(WhoAmI)),
        options,
    )
    .await
    .unwrap()
}

async fn echo(serving: &Serving, credential: Option<&str>) -> Result<String, Status> {
    let channel = Channel::from_shared(serving.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut request = Request::new(EchoRequest { payload: vec![] });
    if let Some(secret) = credential {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {secret}").parse().unwrap());
    }
    let answer = EchoServiceClient::new(channel).echo(request).await?;
    Ok(String::from_utf8(answer.into_inner().payload).unwrap())
}

/// The status line of `GET path` on the HTTP port.
async fn http_status(serving: &Serving, path: &str, credential: Option<&str>) -> String {
    let mut stream = tokio::net::TcpStream::connect(serving.http_addr().unwrap())
        .await
        .unwrap();
    let auth = credential
        .map(|c| format!("authorization: Bearer {c}\r\n"))
        .unwrap_or_default();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer.lines().next().unwrap_or_default().to_owned()
}

async fn token(tokens: &TokenStore, role: Role) -> String {
    tokens
        .create(NewToken {
            name: role.as_str().to_owned(),
            cell: "c1".to_owned(),
            role,
            expires_at_unix_ms: None,
        })
        .await
        .unwrap()
        .secret
        .expose()
        .to_owned()
}

#[tokio::test]
async fn with_auth_on_every_service_and_route_asks_who_is_calling() {
    let tokens = TokenStore::new(Arc::new(MemoryStore::default()));
    let reader = token(&tokens, Role::Reader).await;
    let admin = token(&tokens, Role::Admin).await;
    let serving = start(Some(Authenticator::on(Some(tokens), None))).await;

    let refused = echo(&serving, None).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    // A path in no table (this test's echo) requires admin.
    let refused = echo(&serving, Some(&reader)).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert_eq!(
        echo(&serving, Some(&admin)).await.unwrap(),
        "c1|admin|Token"
    );

    let channel = Channel::from_shared(serving.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let health = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await;
    assert!(health.is_ok(), "health stays open: {health:?}");

    assert!(
        http_status(&serving, "/healthz", None)
            .await
            .contains(" 200")
    );
    assert!(
        http_status(&serving, "/metrics", None)
            .await
            .contains(" 401")
    );
    assert!(
        http_status(&serving, "/metrics", Some(&reader))
            .await
            .contains(" 200")
    );
    serving.shutdown().await.unwrap();
}

#[tokio::test]
async fn with_auth_off_handlers_still_find_a_caller() {
    let serving = start(None).await;
    assert_eq!(echo(&serving, None).await.unwrap(), "default|admin|AuthOff");
    assert!(
        http_status(&serving, "/metrics", None)
            .await
            .contains(" 200")
    );
    serving.shutdown().await.unwrap();
}
