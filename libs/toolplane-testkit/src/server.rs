//! Spawning tonic servers on loopback port 0, and [`ServerHandle`], which owns one.
//!
//! Dropping the handle asks the server to shut down gracefully without waiting for it; call
//! [`ServerHandle::shutdown`] to wait and to see a serving error.

use std::net::{Ipv4Addr, SocketAddr};

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::service::Routes;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::TestkitError;

/// Serves `routes` on `127.0.0.1:<free port>` over a real socket (with `TCP_NODELAY`), on the
/// current tokio runtime. Add gRPC health (and reflection) to `routes` as a production service
/// would.
pub async fn spawn_routes(routes: Routes) -> Result<ServerHandle, TestkitError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let server = Server::builder()
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, async {
            // A dropped sender (a dropped handle) shuts the server down as well.
            let _ = shutdown_rx.await;
        });
    let task = tokio::spawn(server);
    Ok(ServerHandle {
        addr,
        shutdown: Some(shutdown_tx),
        task: Some(task),
    })
}

/// A server spawned on the current tokio runtime, bound to a loopback port.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's base URL, `http://<addr>`, as clients connect to it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting connections, waits for in-flight requests to finish, and reports how the
    /// server ended.
    pub async fn shutdown(mut self) -> Result<(), TestkitError> {
        if let Some(tx) = self.shutdown.take() {
            // The receiver is gone only if the server already stopped; the join below says why.
            let _ = tx.send(());
        }
        match self.task.take() {
            Some(task) => Ok(task.await??),
            None => Ok(()),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
