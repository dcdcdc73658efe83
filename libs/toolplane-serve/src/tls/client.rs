//! Calling a peer over TLS: [`PeerTls`] (the CA that peers' certificates are verified against,
//! and this service's client certificate, both re-read for each new connection when their files
//! changed) and [`peer_channel`], the one way a service opens a channel to another service of
//! the plane, with TLS or without.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tonic::transport::{Channel, Endpoint};

use super::files::{Watched, client_config};

/// How this service verifies its peers and proves itself to them.
#[derive(Clone, Debug)]
pub struct PeerTls {
    config: Arc<Watched<ClientConfig>>,
}

impl PeerTls {
    /// Reads the files once now; afterwards they are re-read when they change.
    pub fn from_files(
        ca: PathBuf,
        identity: Option<(PathBuf, PathBuf)>,
    ) -> Result<PeerTls, String> {
        let mut paths = vec![ca.clone()];
        if let Some((cert, key)) = &identity {
            paths.extend([cert.clone(), key.clone()]);
        }
        let config = Watched::new("peer", paths, move || {
            client_config(
                &ca,
                identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
            )
        })?;
        Ok(PeerTls {
            config: Arc::new(config),
        })
    }
}

/// A lazily connecting channel to the peer at `url` with `endpoint`'s settings: over TLS with
/// `tls` (then the URL must be `https://`), in the clear without (then it must be `http://`).
/// The mismatch is refused rather than guessed: a `https://` URL spoken to in the clear, or a
/// configured CA silently unused, would both surprise.
pub fn peer_channel(endpoint: Endpoint, tls: Option<&PeerTls>) -> Result<Channel, String> {
    let uri = endpoint.uri().clone();
    match (uri.scheme_str(), tls) {
        (Some("https"), Some(tls)) => Ok(endpoint.connect_with_connector_lazy(Connector {
            config: Arc::clone(&tls.config),
        })),
        (Some("http"), None) => Ok(endpoint.connect_lazy()),
        (Some("https"), None) => Err(format!(
            "tls.peer: `{uri}` is https but no peer CA is configured (--peer-tls-ca)"
        )),
        _ => Err(format!(
            "tls.peer: `{uri}` must be https:// with peer TLS (--peer-tls-ca), http:// without"
        )),
    }
}

/// Opens TCP, then TLS with the configuration of the moment, verifying the URI's host.
#[derive(Clone, Debug)]
struct Connector {
    config: Arc<Watched<ClientConfig>>,
}

type Connecting = Pin<Box<dyn Future<Output = io::Result<TokioIo<TlsStream<TcpStream>>>> + Send>>;

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Connecting {
        let config = self.config.current();
        Box::pin(async move {
            let invalid =
                |what: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{what}: {uri}"));
            let host = uri.host().ok_or_else(|| invalid("no host"))?;
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let port = uri.port_u16().unwrap_or(443);
            let name =
                ServerName::try_from(host.clone()).map_err(|_| invalid("not a server name"))?;
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = TlsConnector::from(config).connect(name, tcp).await?;
            Ok(TokioIo::new(stream))
        })
    }
}
