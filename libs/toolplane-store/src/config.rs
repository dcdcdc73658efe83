//! Choosing a backend from configuration. Owns the one place where a backend is named and where
//! the S3 credentials and the PostgreSQL password are read from the environment; must never hold a credential in the
//! configuration itself, so a configuration can be logged and written to files.
//!
//! A service's `[store]` section is a [`StoreConfig`] in TOML, tagged by `kind` (docs/storage.md,
//! "Choosing the backend"):
//!
//! ```toml
//! [store]
//! kind = "routed"
//! record_prefixes = ["catalog", "mcp-proxy", "runs", "held", "approvals"]
//! [store.bytes]
//! kind = "s3"
//! endpoint = "http://127.0.0.1:9000"
//! bucket = "toolplane"
//! [store.records]
//! kind = "postgres"
//! connection = "host=/run/postgresql user=toolplane dbname=toolplane"
//! table = "toolplane"
//! ```

use std::{path::PathBuf, sync::Arc};

use crate::{FsStore, MemoryStore, Store, StoreError, StoreOptions};

/// The environment variable holding the S3 access key id.
pub const S3_ACCESS_KEY_ENV: &str = "AWS_ACCESS_KEY_ID";
/// The environment variable holding the S3 secret access key.
pub const S3_SECRET_KEY_ENV: &str = "AWS_SECRET_ACCESS_KEY";
/// The environment variable holding the PostgreSQL password (libpq's own), when one is needed.
pub const PG_PASSWORD_ENV: &str = "PGPASSWORD";

/// What opening a configured backend returns, boxed so that a routed configuration can open its
/// two backends recursively.
type OpenFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Arc<dyn Store>, StoreError>> + Send + 'a>,
>;

/// Which backend to open. In a configuration file it is a table tagged by `kind` (`fs`, `memory`,
/// `s3`, `postgres`, `routed`); unknown keys are refused.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum StoreConfig {
    /// [`FsStore`] under `root` (`dir` is accepted for it too).
    Fs {
        #[serde(alias = "dir")]
        root: PathBuf,
    },
    /// [`MemoryStore`]: nothing survives the process.
    Memory,
    /// `S3Store` (cargo feature `s3`) in `bucket`; the credentials come from
    /// [`S3_ACCESS_KEY_ENV`] and [`S3_SECRET_KEY_ENV`] when the store is opened.
    S3 {
        /// The server's base URL; `None` for AWS itself.
        #[serde(default)]
        endpoint: Option<String>,
        bucket: String,
        /// `us-east-1` when not set.
        #[serde(default = "default_region")]
        region: String,
        /// Every key is stored below this prefix when set.
        #[serde(default)]
        prefix: Option<crate::Key>,
    },
    /// `PgStore` (cargo feature `postgres`) in `table`; the password, if the server wants one,
    /// comes from [`PG_PASSWORD_ENV`] when the store is opened.
    Postgres {
        /// libpq-style settings or a `postgresql://` URL, without the password.
        connection: String,
        /// `toolplane` when not set.
        #[serde(default = "default_table")]
        table: String,
        /// The pool's size; 8 when not set.
        #[serde(default = "default_max_connections")]
        max_connections: usize,
    },
    /// [`crate::RoutedStore`]: keys at or below `record_prefixes` in `records`, the rest in
    /// `bytes` (in the cluster: S3 for the bytes, PostgreSQL for the mutable records).
    Routed {
        bytes: Box<StoreConfig>,
        records: Box<StoreConfig>,
        record_prefixes: Vec<crate::Key>,
    },
}

fn default_region() -> String {
    "us-east-1".to_owned()
}

fn default_table() -> String {
    "toolplane".to_owned()
}

fn default_max_connections() -> usize {
    8
}

impl StoreConfig {
    /// Whether the configured backend keeps its state where other processes on other machines
    /// see it (S3, PostgreSQL, or a router over them), rather than in this process or on this
    /// machine's filesystem.
    pub fn is_shared(&self) -> bool {
        match self {
            StoreConfig::Fs { .. } | StoreConfig::Memory => false,
            StoreConfig::S3 { .. } | StoreConfig::Postgres { .. } => true,
            StoreConfig::Routed { bytes, records, .. } => bytes.is_shared() || records.is_shared(),
        }
    }

    /// Opens the configured backend, reading S3 credentials from the process environment.
    pub async fn open(&self, options: StoreOptions) -> Result<Arc<dyn Store>, StoreError> {
        self.open_with_env(options, |name| std::env::var(name).ok())
            .await
    }

    /// Opens the configured backend, reading S3 credentials through `env` (tests pass a map).
    pub async fn open_with_env(
        &self,
        options: StoreOptions,
        env: impl Fn(&str) -> Option<String> + Sync,
    ) -> Result<Arc<dyn Store>, StoreError> {
        self.open_inner(options, &env).await
    }

    fn open_inner<'a>(
        &'a self,
        options: StoreOptions,
        env: &'a (dyn Fn(&str) -> Option<String> + Sync),
    ) -> OpenFuture<'a> {
        Box::pin(async move {
            match self {
                StoreConfig::Routed {
                    bytes,
                    records,
                    record_prefixes,
                } => {
                    let bytes = bytes.open_inner(options.clone(), env).await?;
                    let records = records.open_inner(options, env).await?;
                    Ok(Arc::new(crate::RoutedStore::new(
                        bytes,
                        records,
                        record_prefixes.clone(),
                    )) as Arc<dyn Store>)
                }
                StoreConfig::Postgres {
                    connection,
                    table,
                    max_connections,
                } => open_postgres(connection, table, *max_connections, options, env).await,
                other => other.open_local_or_s3(options, env).await,
            }
        })
    }

    async fn open_local_or_s3(
        &self,
        options: StoreOptions,
        env: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> Result<Arc<dyn Store>, StoreError> {
        match self {
            StoreConfig::Fs { root } => Ok(Arc::new(FsStore::open(root, options).await?)),
            StoreConfig::Memory => Ok(Arc::new(MemoryStore::new(options))),
            StoreConfig::S3 {
                endpoint,
                bucket,
                region,
                prefix,
            } => open_s3(endpoint, bucket, region, prefix, options, env),
            StoreConfig::Postgres { .. } | StoreConfig::Routed { .. } => Err(StoreError::io(
                "store configuration",
                std::io::Error::other("not a local or S3 backend"),
            )),
        }
    }
}

#[cfg(feature = "postgres")]
async fn open_postgres(
    connection: &str,
    table: &str,
    max_connections: usize,
    options: StoreOptions,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Arc<dyn Store>, StoreError> {
    let config = crate::PgConfig {
        connection: connection.to_owned(),
        password: env(PG_PASSWORD_ENV).filter(|password| !password.is_empty()),
        table: table.to_owned(),
        max_connections,
    };
    Ok(Arc::new(crate::PgStore::open(config, options).await?))
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(
    _connection: &str,
    _table: &str,
    _max_connections: usize,
    _options: StoreOptions,
    _env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Arc<dyn Store>, StoreError> {
    Err(StoreError::io(
        "postgres configuration",
        std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this build of toolplane-store has no PostgreSQL backend (cargo feature `postgres`)",
        ),
    ))
}

#[cfg(feature = "s3")]
fn open_s3(
    endpoint: &Option<String>,
    bucket: &str,
    region: &str,
    prefix: &Option<crate::Key>,
    options: StoreOptions,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Arc<dyn Store>, StoreError> {
    let credential = |name: &str| {
        env(name).filter(|value| !value.is_empty()).ok_or_else(|| {
            StoreError::io(
                "s3 configuration",
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("the environment variable {name} is not set"),
                ),
            )
        })
    };
    let config = crate::S3Config {
        endpoint: endpoint.clone(),
        bucket: bucket.to_owned(),
        region: region.to_owned(),
        access_key_id: credential(S3_ACCESS_KEY_ENV)?,
        secret_access_key: credential(S3_SECRET_KEY_ENV)?,
        prefix: prefix.clone(),
    };
    Ok(Arc::new(crate::S3Store::new(config, options)?))
}

#[cfg(not(feature = "s3"))]
fn open_s3(
    _endpoint: &Option<String>,
    _bucket: &str,
    _region: &str,
    _prefix: &Option<crate::Key>,
    _options: StoreOptions,
    _env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Arc<dyn Store>, StoreError> {
    Err(StoreError::io(
        "s3 configuration",
        std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this build of toolplane-store has no S3 backend (cargo feature `s3`)",
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Key, Precondition};

    fn s3() -> StoreConfig {
        StoreConfig::S3 {
            endpoint: Some("http://127.0.0.1:9".to_owned()),
            bucket: "b".to_owned(),
            region: "us-east-1".to_owned(),
            prefix: None,
        }
    }

    #[derive(Debug, serde::Deserialize)]
    struct Section {
        store: StoreConfig,
    }

    fn parse(text: &str) -> Result<StoreConfig, toml::de::Error> {
        toml::from_str::<Section>(text).map(|s| s.store)
    }

    #[test]
    fn every_backend_has_a_toml_shape() {
        assert_eq!(
            parse("[store]\nkind = \"fs\"\nroot = \"/var/lib/tp\"").unwrap(),
            StoreConfig::Fs {
                root: "/var/lib/tp".into()
            }
        );
        assert_eq!(
            parse("store = { kind = \"fs\", dir = \"d\" }").unwrap(),
            StoreConfig::Fs { root: "d".into() },
            "`dir` names the root too"
        );
        assert_eq!(
            parse("store = { kind = \"memory\" }").unwrap(),
            StoreConfig::Memory
        );
        assert_eq!(
            parse("[store]\nkind = \"s3\"\nbucket = \"b\"").unwrap(),
            StoreConfig::S3 {
                endpoint: None,
                bucket: "b".into(),
                region: "us-east-1".into(),
                prefix: None
            }
        );
        assert_eq!(
            parse("[store]\nkind = \"postgres\"\nconnection = \"host=/tmp\"").unwrap(),
            StoreConfig::Postgres {
                connection: "host=/tmp".into(),
                table: "toolplane".into(),
                max_connections: 8
            }
        );
        let routed = parse(
            r#"
            [store]
            kind = "routed"
            record_prefixes = ["catalog", "runtime/runs"]
            [store.bytes]
            kind = "s3"
            endpoint = "http://127.0.0.1:9000"
            bucket = "tp"
            region = "eu-west-1"
            prefix = "cluster-a"
            [store.records]
            kind = "postgres"
            connection = "postgresql://tp@db/tp"
            table = "records"
            max_connections = 4
            "#,
        )
        .unwrap();
        assert_eq!(
            routed,
            StoreConfig::Routed {
                bytes: Box::new(StoreConfig::S3 {
                    endpoint: Some("http://127.0.0.1:9000".into()),
                    bucket: "tp".into(),
                    region: "eu-west-1".into(),
                    prefix: Some(Key::new("cluster-a").unwrap()),
                }),
                records: Box::new(StoreConfig::Postgres {
                    connection: "postgresql://tp@db/tp".into(),
                    table: "records".into(),
                    max_connections: 4,
                }),
                record_prefixes: vec![
                    Key::new("catalog").unwrap(),
                    Key::new("runtime/runs").unwrap()
                ],
            }
        );
        assert!(routed.is_shared());
        assert!(!StoreConfig::Memory.is_shared());
        let text = toml::to_string(&routed).unwrap();
        assert_eq!(toml::from_str::<StoreConfig>(&text).unwrap(), routed);
    }

    #[test]
    fn toml_refuses_secrets_unknown_keys_and_bad_keys() {
        for bad in [
            "[store]\nkind = \"s3\"\nbucket = \"b\"\nsecret_access_key = \"s\"",
            "[store]\nkind = \"postgres\"\nconnection = \"c\"\npassword = \"p\"",
            "[store]\nkind = \"fs\"\nroot = \"x\"\nbucket = \"y\"",
            "[store]\nkind = \"s3\"",
            "[store]\nkind = \"s3\"\nbucket = \"b\"\nprefix = \"../up\"",
            "[store]\nkind = \"ftp\"",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn opens_the_local_backends() {
        let dir = tempfile::tempdir().unwrap();
        let key = Key::new("k").unwrap();
        for config in [
            StoreConfig::Memory,
            StoreConfig::Fs {
                root: dir.path().join("store"),
            },
        ] {
            let store = config.open(StoreOptions::default()).await.unwrap();
            store
                .put_cas(&key, b"v".to_vec(), Precondition::Absent)
                .await
                .unwrap();
            assert_eq!(store.get(&key).await.unwrap().unwrap().bytes, b"v");
        }
        assert!(dir.path().join("store/k").is_file(), "the fs backend wrote");
    }

    #[tokio::test]
    async fn s3_names_the_missing_credential_and_never_echoes_the_secret() {
        let missing = s3()
            .open_with_env(StoreOptions::default(), |name| {
                (name == S3_ACCESS_KEY_ENV).then(|| "id".to_owned())
            })
            .await
            .unwrap_err();
        assert_eq!(missing.code(), "store.io");
        assert!(missing.to_string().contains(S3_SECRET_KEY_ENV), "{missing}");

        let store = s3()
            .open_with_env(StoreOptions::default(), |name| {
                Some(format!("value-of-{name}"))
            })
            .await
            .unwrap();
        assert!(!format!("{store:?}").contains("value-of-AWS_SECRET_ACCESS_KEY"));
    }
}
