//! The bare tonic unary echo on loopback (`toolplane.testing.v1.EchoService`), served next to
//! gRPC health. It does no work besides moving the payload back, so it measures what the
//! transport alone costs: every benchmark in the project reports its numbers against it.

use std::net::SocketAddr;

use tonic::service::Routes;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use toolplane_proto::testing::v1::echo_service_client::EchoServiceClient;
use toolplane_proto::testing::v1::echo_service_server::{EchoService, EchoServiceServer};
use toolplane_proto::testing::v1::{EchoRequest, EchoResponse};

use crate::{ServerHandle, TestkitError, spawn_routes};

/// Returns every request's payload unchanged.
#[derive(Debug, Default, Clone, Copy)]
pub struct Echo;

#[tonic::async_trait]
impl EchoService for Echo {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoResponse>, Status> {
        let EchoRequest { payload } = request.into_inner();
        Ok(Response::new(EchoResponse { payload }))
    }
}

/// Starts the echo server, with gRPC health reporting it as serving, on `127.0.0.1:0` on the
/// current tokio runtime; returns its address and the handle that keeps it running.
pub async fn spawn_echo_server() -> Result<(SocketAddr, ServerHandle), TestkitError> {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<EchoServiceServer<Echo>>()
        .await;
    let routes = Routes::new(health_service).add_service(EchoServiceServer::new(Echo));
    let handle = spawn_routes(routes).await?;
    Ok((handle.addr(), handle))
}

/// Connects an echo client (with `TCP_NODELAY`) to a server started by [`spawn_echo_server`].
pub async fn connect_echo(addr: SocketAddr) -> Result<EchoServiceClient<Channel>, TestkitError> {
    let url = format!("http://{addr}");
    let channel = Channel::from_shared(url.clone())
        .map_err(|_| TestkitError::InvalidAddress(url))?
        .tcp_nodelay(true)
        .connect()
        .await?;
    Ok(EchoServiceClient::new(channel))
}
