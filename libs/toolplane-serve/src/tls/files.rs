//! Certificates and keys from PEM files, and [`Watched`]: a value built from files and rebuilt
//! when one of them changes (modification time, size or inode: a Kubernetes Secret's volume
//! swaps a symlink, an operator may overwrite in place). Owns reading the files and building
//! rustls configurations; never holds a connection.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

type Build<T> = Box<dyn Fn() -> Result<T, String> + Send + Sync>;

/// What identifies one version of a file: reading it again is needed when this changes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode,
    })
}

/// A value built from `paths`, rebuilt by [`Watched::current`] when one of them changed since
/// the last build. A rebuild that fails (a file half written, a key that does not match its
/// certificate) keeps the last good value, logs, and is tried again on the next change.
pub(crate) struct Watched<T> {
    what: &'static str,
    paths: Vec<PathBuf>,
    build: Build<T>,
    state: Mutex<(Vec<Option<Stamp>>, Arc<T>)>,
}

impl<T> std::fmt::Debug for Watched<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("what", &self.what)
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

impl<T> Watched<T> {
    /// Builds once now: a first build that fails is the caller's error.
    pub(crate) fn new(
        what: &'static str,
        paths: Vec<PathBuf>,
        build: impl Fn() -> Result<T, String> + Send + Sync + 'static,
    ) -> Result<Watched<T>, String> {
        let stamps = paths.iter().map(|p| stamp(p)).collect();
        let value = build()?;
        Ok(Watched {
            what,
            paths,
            build: Box::new(build),
            state: Mutex::new((stamps, Arc::new(value))),
        })
    }

    /// The value for a new connection: rebuilt first when a file changed.
    pub(crate) fn current(&self) -> Arc<T> {
        let stamps: Vec<Option<Stamp>> = self.paths.iter().map(|p| stamp(p)).collect();
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        if state.0 != stamps {
            state.0 = stamps;
            match (self.build)() {
                Ok(value) => {
                    state.1 = Arc::new(value);
                    tracing::info!(what = self.what, "reloaded TLS files");
                }
                Err(error) => {
                    tracing::warn!(what = self.what, %error, "TLS files changed but cannot be used; keeping the previous ones");
                }
            }
        }
        Arc::clone(&state.1)
    }
}

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate of a PEM file, at least one.
pub(crate) fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("tls.files: {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("tls.files: {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("tls.files: {}: no certificate", path.display()));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub(crate) fn key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| format!("tls.files: {}: {e}", path.display()))
}

fn roots(path: &Path) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    for cert in certs(path)? {
        roots
            .add(cert)
            .map_err(|e| format!("tls.files: {}: {e}", path.display()))?;
    }
    Ok(Arc::new(roots))
}

/// A server's configuration: its certificate and key, and, with `client_ca`, client
/// certificates required and verified against that CA.
pub(crate) fn server_config(
    cert: &Path,
    key_file: &Path,
    client_ca: Option<&Path>,
    alpn: &[&[u8]],
) -> Result<ServerConfig, String> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls.config: {e}"))?;
    let builder = match client_ca {
        Some(ca) => builder.with_client_cert_verifier(
            WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider)
                .build()
                .map_err(|e| format!("tls.files: {}: {e}", ca.display()))?,
        ),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs(cert)?, key(key_file)?)
        .map_err(|e| {
            format!(
                "tls.files: {} with {}: {e}",
                cert.display(),
                key_file.display()
            )
        })?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A client's configuration: servers verified against `ca`, and a client certificate when
/// `identity` (certificate, key) is given.
pub(crate) fn client_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<ClientConfig, String> {
    let provider = provider();
    let verifier = WebPkiServerVerifier::builder_with_provider(roots(ca)?, Arc::clone(&provider))
        .build()
        .map_err(|e| format!("tls.files: {}: {e}", ca.display()))?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls.config: {e}"))?
        .with_webpki_verifier(verifier);
    let mut config = match identity {
        Some((cert, key_file)) => builder
            .with_client_auth_cert(certs(cert)?, key(key_file)?)
            .map_err(|e| {
                format!(
                    "tls.files: {} with {}: {e}",
                    cert.display(),
                    key_file.display()
                )
            })?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}
