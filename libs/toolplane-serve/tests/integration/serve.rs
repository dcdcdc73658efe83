//! The shared start, over a real socket on 127.0.0.1:0, as a client sees it: health answers
//! SERVING, reflection lists the service and health only, the message limit is enforced, the
//! HTTP port answers; and a graceful stop tells health watchers NOT_SERVING, refuses new
//! connections, lets the request already in flight finish, and only then runs the shutdown hook.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use toolplane_proto::testing::v1::echo_service_client::EchoServiceClient;
use toolplane_proto::testing::v1::echo_service_server::{EchoService, EchoServiceServer};
use toolplane_proto::testing::v1::{EchoRequest, EchoResponse};
use toolplane_serve::{ServeOptions, Services};

const ECHO: &str = "toolplane.testing.v1.EchoService";

/// An echo whose `slow` requests wait until the test releases them.
#[derive(Clone)]
struct GatedEcho {
    entered: Arc<Notify>,
    release: Arc<Notify>,
    events: Arc<Mutex<Vec<&'static str>>>,
}

#[tonic::async_trait]
impl EchoService for GatedEcho {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoResponse>, Status> {
        let EchoRequest { payload } = request.into_inner();
        if payload == b"slow" {
            self.entered.notify_one();
            self.release.notified().await;
            self.events.lock().unwrap().push("slow request answered");
        }
        Ok(Response::new(EchoResponse { payload }))
    }
}

async fn channel(addr: std::net::SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn status(health: &mut HealthClient<Channel>, service: &str) -> i32 {
    health
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

async fn listed_services(channel: Channel) -> Vec<String> {
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        answers.next().await.unwrap().unwrap().message_response
    else {
        panic!("not a service list")
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    names
}

/// `future`'s output, or a failed test after 5 s (never a test that hangs).
async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), future)
        .await
        .expect("no answer within 5 s")
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    Ok(answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_health_reflection_limits_and_stops_gracefully() {
    let echo = GatedEcho {
        entered: Arc::new(Notify::new()),
        release: Arc::new(Notify::new()),
        events: Arc::new(Mutex::new(Vec::new())),
    };
    let registry = Arc::new(toolplane_telemetry::metrics::Registry::new());
    registry.counter("echo_calls_total", "calls", &[]).inc(&[]);
    let hook_events = Arc::clone(&echo.events);
    let serving = toolplane_serve::serve(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Services::new().add_service(EchoServiceServer::new(echo.clone())),
        ServeOptions::new("echo")
            .max_message_bytes(1024)
            .metrics(TcpListener::bind("127.0.0.1:0").await.unwrap(), registry)
            .on_shutdown(move || async move {
                hook_events.lock().unwrap().push("shutdown hook ran");
            }),
    )
    .await
    .unwrap();
    let addr = serving.addr();
    let http = serving.http_addr().unwrap();
    let channel = channel(addr).await;

    let mut health = HealthClient::new(channel.clone());
    assert_eq!(
        status(&mut health, ECHO).await,
        ServingStatus::Serving as i32
    );
    assert_eq!(status(&mut health, "").await, ServingStatus::Serving as i32);
    assert_eq!(
        listed_services(channel.clone()).await,
        ["grpc.health.v1.Health", ECHO]
    );
    let mut client = EchoServiceClient::new(channel.clone());
    let too_big = client
        .echo(EchoRequest {
            payload: vec![0; 2048],
        })
        .await
        .unwrap_err();
    assert_eq!(too_big.code(), tonic::Code::OutOfRange, "{too_big:?}");
    let metrics = http_get(http, "/metrics").await.unwrap();
    assert!(metrics.contains("echo_calls_total 1"), "{metrics}");

    let mut watch = health
        .watch(HealthCheckRequest {
            service: ECHO.to_owned(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.next().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );
    let in_flight = tokio::spawn(async move {
        client
            .echo(EchoRequest {
                payload: b"slow".to_vec(),
            })
            .await
    });
    echo.entered.notified().await;
    let stopping = tokio::spawn(serving.shutdown());

    // Watchers are told, and their streams end rather than hold the stop open.
    assert_eq!(
        within(watch.next()).await.unwrap().unwrap().status,
        ServingStatus::NotServing as i32
    );
    assert!(within(watch.next()).await.is_none());
    // New connections are refused while the request in flight is still running.
    within(async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !stopping.is_finished(),
        "the stop did not wait for the request"
    );
    assert!(echo.events.lock().unwrap().is_empty());

    echo.release.notify_one();
    let answer = in_flight.await.unwrap().unwrap().into_inner();
    assert_eq!(answer.payload, b"slow");
    within(stopping).await.unwrap().unwrap();
    assert_eq!(
        *echo.events.lock().unwrap(),
        ["slow request answered", "shutdown hook ran"]
    );
    assert!(
        http_get(http, "/healthz").await.is_err(),
        "the HTTP port still answers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn until_stops_when_the_signal_fires() {
    let echo = GatedEcho {
        entered: Arc::new(Notify::new()),
        release: Arc::new(Notify::new()),
        events: Arc::new(Mutex::new(Vec::new())),
    };
    let serving = toolplane_serve::serve(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Services::new().add_service(EchoServiceServer::new(echo)),
        ServeOptions::new("echo"),
    )
    .await
    .unwrap();
    let addr = serving.addr();
    let (fire, fired) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(serving.until(async {
        let _ = fired.await;
    }));
    let mut client = EchoServiceClient::new(channel(addr).await);
    let answer = client
        .echo(EchoRequest {
            payload: b"hi".to_vec(),
        })
        .await
        .unwrap();
    assert_eq!(answer.into_inner().payload, b"hi");
    fire.send(()).unwrap();
    within(served).await.unwrap().unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_with_its_own_limit_refuses_more_and_the_server_keeps_serving() {
    let echo = GatedEcho {
        entered: Arc::new(Notify::new()),
        release: Arc::new(Notify::new()),
        events: Arc::new(Mutex::new(Vec::new())),
    };
    let own = toolplane_serve::MessageLimits {
        decoding: Some(1024),
        encoding: None,
    };
    let serving = toolplane_serve::serve(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Services::new().add_service_with_limits(EchoServiceServer::new(echo), own),
        ServeOptions::new("echo").max_message_bytes(1 << 20),
    )
    .await
    .unwrap();
    let channel = channel(serving.addr()).await;
    let mut client = EchoServiceClient::new(channel.clone());
    let too_big = client
        .echo(EchoRequest {
            payload: vec![0; 2048],
        })
        .await
        .unwrap_err();
    assert_eq!(too_big.code(), tonic::Code::OutOfRange, "{too_big:?}");
    // The same connection keeps answering: a request within the limit, and health.
    let answer = client
        .echo(EchoRequest {
            payload: vec![7; 900],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.payload, vec![7; 900]);
    let mut health = HealthClient::new(channel);
    assert_eq!(
        status(&mut health, ECHO).await,
        ServingStatus::Serving as i32
    );
    serving.shutdown().await.unwrap();
}
