//! The echo server round-trips payloads over a real loopback socket, reports itself healthy, and
//! stops when asked.

use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use toolplane_proto::testing::v1::EchoRequest;
use toolplane_testkit::{connect_echo, spawn_echo_server};

#[tokio::test]
async fn echo_round_trips_payloads_over_loopback() {
    let (addr, server) = spawn_echo_server().await.unwrap();
    assert!(addr.ip().is_loopback());
    assert_ne!(addr.port(), 0);

    let mut client = connect_echo(addr).await.unwrap();
    for payload in [
        Vec::new(),
        b"hello".to_vec(),
        (0..=255u8).cycle().take(64 * 1024).collect(),
    ] {
        let response = client
            .echo(EchoRequest {
                payload: payload.clone(),
            })
            .await
            .unwrap();
        assert_eq!(response.into_inner().payload, payload);
    }

    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn echo_server_reports_healthy() {
    let (_addr, server) = spawn_echo_server().await.unwrap();
    let channel = Channel::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "toolplane.testing.v1.EchoService"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .unwrap()
            .into_inner()
            .status();
        assert_eq!(status, ServingStatus::Serving, "health of {service:?}");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_stops_accepting_connections() {
    let (addr, server) = spawn_echo_server().await.unwrap();
    server.shutdown().await.unwrap();
    assert!(
        connect_echo(addr).await.is_err(),
        "connected to a stopped server"
    );
}
