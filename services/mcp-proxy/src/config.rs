//! The binary's configuration: a TOML file, overridden by flags and environment variables.
//!
//! ```toml
//! listen = "127.0.0.1:7440"
//! data_dir = "/var/lib/toolplane"
//! [store]                  # optional: the store's backend; by default `data_dir` on this disk
//! kind = "postgres"
//! connection = "host=/run/postgresql user=toolplane dbname=toolplane"
//! [proxy]
//! max_servers_per_cell = 100
//! [proxy.limits]
//! call_timeout_ms = 60000
//! ```
//!
//! Unknown keys are refused so a typo never silently does nothing. The proxy binds to loopback
//! unless told otherwise: a reachable proxy lets anyone start processes through stdio
//! registrations.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::proxy::ProxySettings;

/// The default listen address: loopback, on the mcp-proxy's port in every deployment (7440).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7440";
/// The mcp-proxy's port.
pub const DEFAULT_PORT: u16 = 7440;

/// The binary's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to serve gRPC on.
    pub listen: SocketAddr,
    /// Root of the local store (the proxy keeps its state under `<data_dir>/mcp-proxy/`) unless
    /// `[store]` names another backend; the tokens of `--auth` are kept here in every case.
    pub data_dir: PathBuf,
    /// `[store]`: the store's backend (docs/storage.md, "Choosing the backend"); unset, a
    /// filesystem store at `data_dir`. Replicas over one shared store share registrations and
    /// cached catalogs (docs/deploy.md, "Scaling out").
    pub store: Option<toolplane_store::StoreConfig>,
    /// Proxy settings and registration limits.
    pub proxy: ProxySettings,
    /// `[auth]`: the authentication flags' settings; the flags override them (docs/auth.md).
    pub auth: toolplane_serve::auth::AuthConfig,
    /// `[tls]`: the TLS flags' settings; the flags override them (docs/auth.md, "mTLS between
    /// services").
    pub tls: toolplane_serve::tls::TlsConfig,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            data_dir: PathBuf::from("toolplane-data"),
            store: None,
            proxy: ProxySettings::default(),
            auth: toolplane_serve::auth::AuthConfig::default(),
            tls: toolplane_serve::tls::TlsConfig::default(),
        }
    }
}

/// Why the configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("mcp.invalid_config: cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("mcp.invalid_config: {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
}

impl Config {
    /// The store to open: `[store]`, else a filesystem store at `data_dir`.
    pub fn store_config(&self) -> toolplane_store::StoreConfig {
        self.store
            .clone()
            .unwrap_or_else(|| toolplane_store::StoreConfig::Fs {
                root: self.data_dir.clone(),
            })
    }

    /// Reads a TOML config file.
    pub fn from_file(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn defaults_bind_loopback_and_unknown_keys_are_refused() {
        let c: Config = toml::from_str("").unwrap();
        assert!(c.listen.ip().is_loopback());
        assert_eq!(c.listen, DEFAULT_LISTEN.parse().unwrap());
        assert_eq!(c.listen.port(), 7440);
        let c: Config =
            toml::from_str("listen = \"127.0.0.1:9\"\n[proxy.limits]\ncall_timeout_ms = 5\n")
                .unwrap();
        assert_eq!(c.proxy.limits.call_timeout_ms, 5);
        assert!(toml::from_str::<Config>("lisen = \"x\"").is_err());
        assert!(toml::from_str::<Config>("[proxy.limits]\ncall_timeout = 5").is_err());
    }

    #[test]
    fn the_store_is_the_data_dir_unless_configured() {
        let c: Config = toml::from_str("data_dir = \"/d\"").unwrap();
        assert_eq!(
            c.store_config(),
            toolplane_store::StoreConfig::Fs { root: "/d".into() }
        );
        let c: Config = toml::from_str(
            "data_dir = \"/d\"\n[store]\nkind = \"postgres\"\nconnection = \"host=/s\"\ntable = \"mcp\"",
        )
        .unwrap();
        assert_eq!(
            c.store_config(),
            toolplane_store::StoreConfig::Postgres {
                connection: "host=/s".into(),
                table: "mcp".into(),
                max_connections: 8,
            }
        );
        assert!(
            toml::from_str::<Config>(
                "[store]\nkind = \"postgres\"\nconnection = \"c\"\npassword = \"p\""
            )
            .is_err(),
            "a password is never read from the file"
        );
    }
}
