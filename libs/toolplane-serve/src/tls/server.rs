//! Serving over TLS: [`ServerTls`] (the gRPC port's configuration, client certificates required
//! when a client CA is given, and the HTTP port's, which never asks for one), the accept loop
//! that hands each new connection the configuration of the moment (so replaced files apply to
//! new connections without a restart), and [`TlsConn`], a connection that tells tonic, through
//! [`Connected`], the [`TransportCaller`] its client certificate stands for. Handshakes run on
//! their own tasks with a deadline: a slow or silent client never holds the accept loop.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::Connected;
use toolplane_auth::TransportCaller;

use super::files::{Watched, server_config};
use super::identity::caller_of;

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections handshaken but not yet taken by the server.
const BACKLOG: usize = 64;

/// A server's TLS: certificate and key files, and the client CA whose certificates the gRPC port
/// requires. Each new connection gets the files as they are then.
#[derive(Clone, Debug)]
pub struct ServerTls {
    grpc: Arc<Watched<ServerConfig>>,
    http: Arc<Watched<ServerConfig>>,
}

impl ServerTls {
    /// Reads the files once now (an unreadable file, a key that does not match the certificate,
    /// an empty CA is an error here); afterwards they are re-read when they change.
    pub fn from_files(
        cert: PathBuf,
        key: PathBuf,
        client_ca: Option<PathBuf>,
    ) -> Result<ServerTls, String> {
        let mut paths = vec![cert.clone(), key.clone()];
        paths.extend(client_ca.clone());
        let grpc = {
            let (cert, key) = (cert.clone(), key.clone());
            Watched::new("server", paths, move || {
                server_config(&cert, &key, client_ca.as_deref(), &[b"h2"])
            })?
        };
        // The HTTP port (`/healthz`, `/metrics`, the catalog's routes) asks for no client
        // certificate: probes and scrapers reach it with TLS only, and its routes other than
        // health still need a bearer credential.
        let http = Watched::new("server http", vec![cert.clone(), key.clone()], move || {
            server_config(&cert, &key, None, &[b"http/1.1"])
        })?;
        Ok(ServerTls {
            grpc: Arc::new(grpc),
            http: Arc::new(http),
        })
    }

    /// The gRPC port's connections, handshaken, for `serve_with_incoming`.
    pub(crate) fn grpc_incoming(
        &self,
        listener: TcpListener,
    ) -> impl Stream<Item = Result<TlsConn, io::Error>> + use<> {
        let rx = accept(listener, Arc::clone(&self.grpc));
        futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|conn| (Ok(conn), rx))
        })
    }

    /// The HTTP port's listener, for `axum::serve`.
    pub(crate) fn http_listener(&self, listener: TcpListener) -> io::Result<TlsListener> {
        let addr = listener.local_addr()?;
        Ok(TlsListener {
            rx: accept(listener, Arc::clone(&self.http)),
            addr,
        })
    }
}

/// Accepts on `listener` until the receiver is dropped, handshaking each connection on a task of
/// its own.
fn accept(listener: TcpListener, config: Arc<Watched<ServerConfig>>) -> mpsc::Receiver<TlsConn> {
    let (tx, rx) = mpsc::channel(BACKLOG);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = tx.closed() => return,
                accepted = listener.accept() => accepted,
            };
            let (tcp, remote) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Nagle's algorithm and delayed ACKs would add ~40 ms to every small response.
            let _ = tcp.set_nodelay(true);
            let acceptor = TlsAcceptor::from(config.current());
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let caller = stream
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|certs| certs.first())
                            .and_then(caller_of);
                        let conn = TlsConn {
                            stream,
                            remote,
                            caller: TransportCaller(caller),
                        };
                        let _ = tx.send(conn).await;
                    }
                    Ok(Err(error)) => {
                        tracing::debug!(%remote, %error, "TLS handshake refused");
                    }
                    Err(_) => tracing::debug!(%remote, "TLS handshake timed out"),
                }
            });
        }
    });
    rx
}

/// One handshaken server connection.
#[derive(Debug)]
pub struct TlsConn {
    stream: TlsStream<TcpStream>,
    remote: SocketAddr,
    caller: TransportCaller,
}

impl Connected for TlsConn {
    type ConnectInfo = TransportCaller;

    fn connect_info(&self) -> TransportCaller {
        self.caller.clone()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The HTTP port's handshaken connections, as an axum listener.
#[derive(Debug)]
pub(crate) struct TlsListener {
    rx: mpsc::Receiver<TlsConn>,
    addr: SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsConn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TlsConn, SocketAddr) {
        match self.rx.recv().await {
            Some(conn) => {
                let remote = conn.remote;
                (conn, remote)
            }
            // The accept loop ends only when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }
}
