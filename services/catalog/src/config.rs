//! The catalog's configuration: where it listens, where it keeps state, where the mcp-proxy is,
//! where start-up profiles live, and its limits.
//!
//! Owns the defaults and their validation; the binary fills it from a TOML file, flags and
//! environment. It must never bind to anything but loopback unless configured to.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::error::{CatalogCode, CatalogError};

/// Default gRPC address: loopback only (the catalog's port in the deploy is 7420).
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 7420);
/// Default HTTP (`GET /tools`, `/metrics`) address: loopback only.
pub const DEFAULT_HTTP_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 7421);

/// Where the catalog keeps profiles, policies and registrations: the store crate's
/// configuration, a `[store]` table tagged by `kind` (docs/storage.md, "Choosing the backend").
/// The default is a directory on the local filesystem, `.toolplane/store`.
pub use toolplane_store::StoreConfig;

fn default_store() -> StoreConfig {
    StoreConfig::Fs {
        root: PathBuf::from(".toolplane/store"),
    }
}

/// Limits on what the catalog accepts; every input has one.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Most tools one external host may register.
    pub max_tools_per_host: usize,
    /// Most external hosts per cell.
    pub max_hosts_per_cell: usize,
    /// Most profiles per cell.
    pub max_profiles_per_cell: usize,
    /// Most cells the catalog keeps in memory at once.
    pub max_cells: usize,
    /// Largest registration (all descriptors together), in bytes.
    pub max_registration_bytes: usize,
    /// Most MCP tools pulled per cell.
    pub max_mcp_tools_per_cell: usize,
    /// Largest gRPC request accepted, in bytes.
    pub max_request_bytes: usize,
    /// Largest listing page or description text returned, in bytes (clients accept 4 MiB by
    /// default, so pages stop before that).
    pub max_response_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_tools_per_host: 1000,
            max_hosts_per_cell: 1000,
            max_profiles_per_cell: 10_000,
            max_cells: 1000,
            max_registration_bytes: 8 * 1024 * 1024,
            max_mcp_tools_per_cell: 50_000,
            max_request_bytes: 16 * 1024 * 1024,
            max_response_bytes: 3 * 1024 * 1024 + 512 * 1024,
        }
    }
}

/// The whole configuration. In a TOML file every field is optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CatalogConfig {
    /// gRPC address (`CatalogService`, `ProfileService`, health, reflection).
    pub listen: SocketAddr,
    /// HTTP address (`GET /tools`, `GET /tools/descriptions`, `GET /sources`, `GET /healthz`,
    /// `GET /metrics`).
    pub http_listen: SocketAddr,
    pub store: StoreConfig,
    /// The mcp-proxy's gRPC URL, e.g. `http://127.0.0.1:7440`; without it the catalog lists no
    /// MCP tools and says so in the MCP source's state.
    pub mcp_proxy_url: Option<String>,
    /// How often every known cell's sources are pulled again (mcp-proxy cache, stored
    /// registrations and profiles), in milliseconds.
    pub refresh_interval_ms: u64,
    /// Deadline of one pull from the mcp-proxy (connect and all pages), in milliseconds.
    pub mcp_timeout_ms: u64,
    /// Directory of profile JSON files upserted at start-up (`<id>.json` into the default cell,
    /// `<cell>/<id>.json` into that cell). When set, it must exist.
    pub profiles_dir: Option<PathBuf>,
    pub limits: Limits,
    /// `[auth]`: the authentication flags' settings; the flags override them (docs/auth.md).
    pub auth: toolplane_serve::auth::AuthConfig,
    /// The credential sent to the mcp-proxy (`authorization: Bearer …`) when it requires one;
    /// set by the binary from `--peer-token-file` or `TOOLPLANE_PEER_TOKEN`, never from the
    /// file (docs/auth.md).
    #[serde(skip)]
    pub mcp_proxy_token: Option<toolplane_auth::TokenSecret>,
    /// `[tls]`: the TLS flags' settings, the catalog's own ports and its calls to the mcp-proxy
    /// (docs/auth.md, "mTLS between services"); the flags override them.
    pub tls: toolplane_serve::tls::TlsConfig,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        CatalogConfig {
            listen: DEFAULT_LISTEN,
            http_listen: DEFAULT_HTTP_LISTEN,
            store: default_store(),
            mcp_proxy_url: None,
            refresh_interval_ms: 2000,
            mcp_timeout_ms: 2000,
            profiles_dir: None,
            limits: Limits::default(),
            auth: toolplane_serve::auth::AuthConfig::default(),
            mcp_proxy_token: None,
            tls: toolplane_serve::tls::TlsConfig::default(),
        }
    }
}

impl CatalogConfig {
    /// A configuration for tests and embedding: both servers on `127.0.0.1:0`, memory store.
    pub fn ephemeral() -> Self {
        let any = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
        CatalogConfig {
            listen: any,
            http_listen: any,
            store: StoreConfig::Memory,
            ..CatalogConfig::default()
        }
    }

    /// Parses a TOML configuration file's text; unknown keys are refused.
    pub fn from_toml(text: &str) -> Result<Self, CatalogError> {
        let config: CatalogConfig = toml::from_str(text)
            .map_err(|e| CatalogError::new(CatalogCode::ConfigInvalid, e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    pub fn refresh_interval(&self) -> Duration {
        Duration::from_millis(self.refresh_interval_ms)
    }

    pub fn mcp_timeout(&self) -> Duration {
        Duration::from_millis(self.mcp_timeout_ms)
    }

    /// Checks every value.
    pub fn validate(&self) -> Result<(), CatalogError> {
        let bad = |m: String| Err(CatalogError::new(CatalogCode::ConfigInvalid, m));
        if !(100..=3_600_000).contains(&self.refresh_interval_ms) {
            return bad(format!(
                "refresh_interval_ms is {}, expected 100 to 3600000",
                self.refresh_interval_ms
            ));
        }
        if !(50..=600_000).contains(&self.mcp_timeout_ms) {
            return bad(format!(
                "mcp_timeout_ms is {}, expected 50 to 600000",
                self.mcp_timeout_ms
            ));
        }
        if let Some(url) = &self.mcp_proxy_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return bad(format!(
                "mcp_proxy_url `{url}` must start with http:// or https://"
            ));
        }
        let l = &self.limits;
        for (name, v) in [
            ("limits.max_tools_per_host", l.max_tools_per_host),
            ("limits.max_hosts_per_cell", l.max_hosts_per_cell),
            ("limits.max_profiles_per_cell", l.max_profiles_per_cell),
            ("limits.max_cells", l.max_cells),
            ("limits.max_registration_bytes", l.max_registration_bytes),
            ("limits.max_mcp_tools_per_cell", l.max_mcp_tools_per_cell),
            ("limits.max_request_bytes", l.max_request_bytes),
            ("limits.max_response_bytes", l.max_response_bytes),
        ] {
            if v == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_bind_loopback() {
        let c = CatalogConfig::default();
        assert!(c.listen.ip().is_loopback() && c.http_listen.ip().is_loopback());
        assert!(c.validate().is_ok());
    }

    #[test]
    fn toml_fills_and_refuses_unknown_keys() {
        let c = CatalogConfig::from_toml(
            r#"
            listen = "0.0.0.0:9000"
            mcp_proxy_url = "http://127.0.0.1:7440"
            profiles_dir = "profiles"
            [store]
            kind = "memory"
            [limits]
            max_tools_per_host = 10
            "#,
        )
        .unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.store, StoreConfig::Memory);
        assert_eq!(c.limits.max_tools_per_host, 10);
        assert_eq!(c.limits.max_hosts_per_cell, 1000);
        let fs = CatalogConfig::from_toml(
            "store = { kind = \"fs\", dir = \"/var/lib/toolplane/catalog\" }",
        )
        .unwrap();
        assert_eq!(
            fs.store,
            StoreConfig::Fs {
                root: "/var/lib/toolplane/catalog".into()
            }
        );
        let pg = CatalogConfig::from_toml(
            "[store]\nkind = \"postgres\"\nconnection = \"host=/run/postgresql\"",
        )
        .unwrap();
        assert_eq!(
            pg.store,
            StoreConfig::Postgres {
                connection: "host=/run/postgresql".into(),
                table: "toolplane".into(),
                max_connections: 8,
            }
        );
        assert_eq!(
            CatalogConfig::default().store,
            StoreConfig::Fs {
                root: ".toolplane/store".into()
            },
            "fs stays the default"
        );
        for bad in [
            "colour = 1",
            "[limits]\nmax_cells = 0",
            "refresh_interval_ms = 1",
            "mcp_proxy_url = \"127.0.0.1:1\"",
            "[store]\nkind = \"s3\"",
            "[store]\nkind = \"postgres\"\nconnection = \"c\"\npassword = \"p\"",
            "[store]\nkind = \"fs\"\ndir = \"x\"\nbucket = \"y\"",
        ] {
            let e = CatalogConfig::from_toml(bad).unwrap_err();
            assert_eq!(e.code(), "catalog.config_invalid", "{bad}");
        }
    }
}
