//! The service's configuration: a TOML file, overridden by flags and `TOOLPLANE_WORKSPACE_*`
//! environment variables. Owns the defaults (loopback, `./data/workspace`); must never bind a
//! non-loopback address unless told to.

use std::{net::SocketAddr, path::PathBuf};

use serde::Deserialize;

use crate::limits::Limits;

/// Command line (each flag also reads its environment variable).
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "toolplane-workspace",
    about = "toolplane's workspace service",
    version
)]
pub struct Cli {
    /// TOML configuration file.
    #[arg(long, env = "TOOLPLANE_WORKSPACE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on (default 127.0.0.1:7430).
    #[arg(long, env = "TOOLPLANE_WORKSPACE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Data directory (default ./data/workspace).
    #[arg(long, env = "TOOLPLANE_WORKSPACE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// HTTP address of `/metrics` and `/healthz`.
    #[arg(
        long,
        env = "TOOLPLANE_WORKSPACE_HTTP_LISTEN",
        default_value = "127.0.0.1:7431"
    )]
    pub http_listen: SocketAddr,
    #[command(flatten)]
    pub auth: toolplane_serve::auth::AuthArgs,
    #[command(flatten)]
    pub tls: toolplane_serve::tls::TlsArgs,
}

/// The configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
    #[serde(default)]
    pub limits: Limits,
    /// `[auth]`: the authentication flags' settings (docs/auth.md).
    #[serde(default)]
    pub auth: toolplane_serve::auth::AuthConfig,
    /// `[tls]`: the TLS flags' settings (docs/auth.md, "mTLS between services").
    #[serde(default)]
    pub tls: toolplane_serve::tls::TlsConfig,
    /// `[store]`: a shared backend (PostgreSQL, S3, or a router over them; docs/storage.md) that
    /// holds everything the workspace keeps, so several replicas serve the same runs
    /// (docs/workspace.md, "On a shared store"). Unset, the data directory holds it all.
    pub store: Option<toolplane_store::StoreConfig>,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub limits: Limits,
    /// Authentication: the flags over the file's `[auth]`.
    pub auth: toolplane_serve::auth::AuthArgs,
    /// TLS: the flags over the file's `[tls]`.
    pub tls: toolplane_serve::tls::TlsConfig,
    /// The shared store, when the file names one.
    pub store: Option<toolplane_store::StoreConfig>,
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:7430";

impl Config {
    /// File, then flags / environment on top.
    pub fn resolve(cli: &Cli) -> Result<Config, String> {
        let file = match &cli.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("config.unreadable: {}: {e}", path.display()))?;
                toml::from_str::<FileConfig>(&text)
                    .map_err(|e| format!("config.invalid: {}: {e}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let default_listen: SocketAddr = DEFAULT_LISTEN
            .parse()
            .map_err(|e| format!("config.invalid: {e}"))?;
        Ok(Config {
            listen: cli.listen.or(file.listen).unwrap_or(default_listen),
            data_dir: cli
                .data_dir
                .clone()
                .or(file.data_dir)
                .unwrap_or_else(|| PathBuf::from("data/workspace")),
            limits: file.limits,
            auth: cli.auth.over(&file.auth),
            tls: cli.tls.over(&file.tls),
            store: match file.store {
                Some(store) if !store.is_shared() => {
                    return Err(format!(
                        "config.invalid: {}: [store] must be a shared backend (postgres, s3 or \
                         routed); without it the workspace keeps everything in its data directory",
                        cli.config
                            .as_deref()
                            .unwrap_or(std::path::Path::new("-"))
                            .display()
                    ));
                }
                store => store,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn resolve(file: &str) -> Result<Config, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("workspace.toml");
        std::fs::write(&path, file).unwrap();
        Config::resolve(&Cli::parse_from([
            "toolplane-workspace",
            "--config",
            path.to_str().unwrap(),
        ]))
    }

    #[test]
    fn a_shared_store_table_is_taken_and_a_local_one_refused() {
        let shared = resolve(
            "[store]\nkind = \"postgres\"\nconnection = \"host=/run/postgresql\"\ntable = \"t\"\n",
        )
        .unwrap();
        assert!(shared.store.is_some_and(|s| s.is_shared()));
        assert!(resolve("").unwrap().store.is_none());
        let local = resolve("[store]\nkind = \"fs\"\nroot = \"/tmp/x\"\n").unwrap_err();
        assert!(local.contains("must be a shared backend"), "{local}");
    }
}
