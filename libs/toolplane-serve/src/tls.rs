//! TLS between the plane's services (docs/auth.md, "mTLS between services"): the flags every
//! service binary shares ([`TlsArgs`], each also an environment variable) and the `[tls]`
//! section of a configuration file ([`TlsConfig`], which the flags override), the server side
//! ([`ServerTls`], given to [`crate::ServeOptions::tls`]: the gRPC and HTTP ports over rustls,
//! client certificates required on the gRPC port when a client CA is given) and the client side
//! ([`PeerTls`] and [`peer_channel`]). Certificates and keys come from PEM files and are re-read
//! when they change, for each new connection: a renewed certificate needs no restart. A verified
//! client certificate stands for a caller ([`identity`]) in place of a bearer credential.
//!
//! Off unless configured: `toolplane up` composes its services in one process over loopback and
//! never uses it.

mod client;
mod files;
pub mod identity;
mod server;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use client::{PeerTls, peer_channel};
pub use server::{ServerTls, TlsConn};

/// TLS flags, shared by every service binary.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// Serve over TLS with this certificate chain (PEM; with --tls-key). Re-read when it
    /// changes, for new connections.
    #[arg(
        long,
        env = "TOOLPLANE_TLS_CERT",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(
        long,
        env = "TOOLPLANE_TLS_KEY",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub tls_key: Option<PathBuf>,
    /// Require a client certificate signed by this CA (PEM) on the gRPC port (mTLS). A
    /// certificate with a SAN URI `spiffe://<domain>/cell/<cell>/role/<role>` is that caller.
    #[arg(
        long,
        env = "TOOLPLANE_TLS_CLIENT_CA",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub tls_client_ca: Option<PathBuf>,
    /// Call the plane's other services over TLS (their URLs `https://…`), verifying them against
    /// this CA (PEM).
    #[arg(
        long,
        env = "TOOLPLANE_PEER_TLS_CA",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub peer_tls_ca: Option<PathBuf>,
    /// The client certificate (PEM) presented to peers that require one (with --peer-tls-key).
    #[arg(
        long,
        env = "TOOLPLANE_PEER_TLS_CERT",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub peer_tls_cert: Option<PathBuf>,
    /// The private key of --peer-tls-cert (PEM).
    #[arg(
        long,
        env = "TOOLPLANE_PEER_TLS_KEY",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub peer_tls_key: Option<PathBuf>,
}

/// `[tls]` in a service's configuration file; every key optional, unknown keys refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// `--tls-cert`.
    pub cert_file: Option<PathBuf>,
    /// `--tls-key`.
    pub key_file: Option<PathBuf>,
    /// `--tls-client-ca`.
    pub client_ca_file: Option<PathBuf>,
    /// `--peer-tls-ca`.
    pub peer_ca_file: Option<PathBuf>,
    /// `--peer-tls-cert`.
    pub peer_cert_file: Option<PathBuf>,
    /// `--peer-tls-key`.
    pub peer_key_file: Option<PathBuf>,
}

impl TlsArgs {
    /// These flags over a file's `[tls]`: a flag (or its environment variable) that is given
    /// wins, a missing one takes the file's value.
    #[must_use]
    pub fn over(&self, file: &TlsConfig) -> TlsConfig {
        let pick =
            |flag: &Option<PathBuf>, file: &Option<PathBuf>| flag.clone().or_else(|| file.clone());
        TlsConfig {
            cert_file: pick(&self.tls_cert, &file.cert_file),
            key_file: pick(&self.tls_key, &file.key_file),
            client_ca_file: pick(&self.tls_client_ca, &file.client_ca_file),
            peer_ca_file: pick(&self.peer_tls_ca, &file.peer_ca_file),
            peer_cert_file: pick(&self.peer_tls_cert, &file.peer_cert_file),
            peer_key_file: pick(&self.peer_tls_key, &file.peer_key_file),
        }
    }
}

impl TlsConfig {
    /// The server side these settings describe: none without a certificate; the files are read
    /// now. A key without a certificate, or a client CA without one, is an error.
    pub fn server(&self) -> Result<Option<ServerTls>, String> {
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                ServerTls::from_files(cert.clone(), key.clone(), self.client_ca_file.clone())
                    .map(Some)
            }
            (None, None) if self.client_ca_file.is_none() => Ok(None),
            (None, None) => {
                Err("tls.invalid_request: --tls-client-ca needs --tls-cert and --tls-key".into())
            }
            _ => Err("tls.invalid_request: --tls-cert and --tls-key come together".into()),
        }
    }

    /// The client side these settings describe: none without a peer CA; the files are read now.
    pub fn peer(&self) -> Result<Option<PeerTls>, String> {
        let identity = match (&self.peer_cert_file, &self.peer_key_file) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            _ => {
                return Err(
                    "tls.invalid_request: --peer-tls-cert and --peer-tls-key come together".into(),
                );
            }
        };
        match (&self.peer_ca_file, identity) {
            (Some(ca), identity) => PeerTls::from_files(ca.clone(), identity).map(Some),
            (None, None) => Ok(None),
            (None, Some(_)) => {
                Err("tls.invalid_request: --peer-tls-cert needs --peer-tls-ca".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_and_halves_are_refused() {
        let file = TlsConfig {
            cert_file: Some("/file/cert.pem".into()),
            key_file: Some("/file/key.pem".into()),
            peer_ca_file: Some("/file/ca.pem".into()),
            ..TlsConfig::default()
        };
        let flags = TlsArgs {
            tls_cert: Some("/flag/cert.pem".into()),
            ..TlsArgs::default()
        };
        let merged = flags.over(&file);
        assert_eq!(merged.cert_file, Some("/flag/cert.pem".into()));
        assert_eq!(merged.key_file, Some("/file/key.pem".into()));
        assert_eq!(merged.peer_ca_file, Some("/file/ca.pem".into()));
        assert_eq!(
            TlsArgs::default().over(&TlsConfig::default()),
            TlsConfig::default()
        );

        let half = TlsConfig {
            cert_file: Some("c".into()),
            ..TlsConfig::default()
        };
        assert!(half.server().unwrap_err().contains("come together"));
        let ca_alone = TlsConfig {
            client_ca_file: Some("ca".into()),
            ..TlsConfig::default()
        };
        assert!(ca_alone.server().unwrap_err().contains("--tls-cert"));
        let identity_alone = TlsConfig {
            peer_cert_file: Some("c".into()),
            peer_key_file: Some("k".into()),
            ..TlsConfig::default()
        };
        assert!(identity_alone.peer().unwrap_err().contains("--peer-tls-ca"));
        assert!(TlsConfig::default().server().unwrap().is_none());
        assert!(TlsConfig::default().peer().unwrap().is_none());
    }
}
