//! Choosing a backend from configuration. Owns the one place where a backend is named and where
//! the S3 credentials and the PostgreSQL password are read from the environment; must never hold a credential in the
//! configuration itself, so a configuration can be logged and written to files.

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

/// Which backend to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreConfig {
    /// [`FsStore`] under `root`.
    Fs { root: PathBuf },
    /// [`MemoryStore`]: nothing survives the process.
    Memory,
    /// `S3Store` (cargo feature `s3`) in `bucket`; the credentials come from
    /// [`S3_ACCESS_KEY_ENV`] and [`S3_SECRET_KEY_ENV`] when the store is opened.
    S3 {
        /// The server's base URL; `None` for AWS itself.
        endpoint: Option<String>,
        bucket: String,
        region: String,
        /// Every key is stored below this prefix when set.
        prefix: Option<crate::Key>,
    },
    /// `PgStore` (cargo feature `postgres`) in `table`; the password, if the server wants one,
    /// comes from [`PG_PASSWORD_ENV`] when the store is opened.
    Postgres {
        /// libpq-style settings or a `postgresql://` URL, without the password.
        connection: String,
        table: String,
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

impl StoreConfig {
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
