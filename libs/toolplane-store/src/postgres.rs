//! The PostgreSQL backend (cargo feature `postgres`), for the small mutable records of the
//! cluster mode. Owns the mapping of the [`Store`] verbs onto SQL over one table; must never put
//! the connection settings or a password into an error or a `Debug` line.
//!
//! What makes each verb atomic is decided here and written down in docs/storage.md ("PostgreSQL"):
//! a version swap is one conditional `UPDATE` and a conditional delete one `DELETE`; a new key is
//! created in a transaction that first takes transaction-scoped advisory locks (exclusive on the
//! key, shared on each ancestor), so the key-tree check and the `INSERT` cannot interleave with
//! another creation of the key, of an ancestor or of a key below it.

use std::{fmt, io, str::FromStr};

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use sha2::{Digest, Sha256};
use tokio_postgres::NoTls;

use crate::{
    Key, ListPage, Object, Precondition, Store, StoreError, StoreOptions, Version,
    store::clamp_limit,
};

/// The longest table name PostgreSQL keeps without truncating it.
const MAX_TABLE_NAME: usize = 63;

/// Where a [`PgStore`] keeps its objects and how it connects.
#[derive(Clone, PartialEq, Eq)]
pub struct PgConfig {
    /// Connection settings without the password, libpq style (`host=/run/postgresql
    /// user=toolplane dbname=toolplane`) or as a `postgresql://user@host/db` URL.
    pub connection: String,
    /// The password, when the server asks for one.
    pub password: Option<String>,
    /// The table holding this store's objects, created when missing: lowercase ASCII letters,
    /// digits and `_`, starting with a letter or `_`, at most 63 bytes.
    pub table: String,
    /// Connections the store's pool opens at most.
    pub max_connections: usize,
}

impl fmt::Debug for PgConfig {
    // The connection settings may name a password; neither reaches a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgConfig")
            .field("connection", &"<redacted>")
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("table", &self.table)
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

/// A [`Store`] in one PostgreSQL table `(key text COLLATE "C" PRIMARY KEY, bytes bytea, version
/// text)`. See the module docs and docs/storage.md for how each verb is made atomic.
pub struct PgStore {
    pool: Pool,
    table: String,
    options: StoreOptions,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("table", &self.table)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn io_error(
    what: impl Into<String>,
    kind: io::ErrorKind,
    message: impl Into<String>,
) -> StoreError {
    StoreError::io(what, io::Error::new(kind, message.into()))
}

/// A database failure as `store.io`. The client's error text names the failed statement's
/// server message (or the IO error), never the connection settings.
fn db_error(what: &str, error: tokio_postgres::Error) -> StoreError {
    let text = match error.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => error.to_string(),
    };
    io_error(format!("postgres {what}"), io::ErrorKind::Other, text)
}

fn valid_table_name(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    first_ok
        && name.len() <= MAX_TABLE_NAME
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl PgStore {
    /// Connects (the pool opens connections as they are needed; the first one here) and creates
    /// the table when it is missing.
    pub async fn open(config: PgConfig, options: StoreOptions) -> Result<PgStore, StoreError> {
        if !valid_table_name(&config.table) {
            return Err(io_error(
                "postgres configuration",
                io::ErrorKind::InvalidInput,
                format!(
                    "table name {:?} is not a plain lowercase identifier",
                    config.table
                ),
            ));
        }
        // The parser's error could quote the settings, so it is not passed on.
        let mut pg = tokio_postgres::Config::from_str(&config.connection).map_err(|_| {
            io_error(
                "postgres configuration",
                io::ErrorKind::InvalidInput,
                "the connection settings do not parse",
            )
        })?;
        if let Some(password) = &config.password {
            pg.password(password);
        }
        let manager = Manager::from_config(
            pg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.max_connections.max(1))
            .build()
            .map_err(|e| io_error("postgres pool", io::ErrorKind::Other, e.to_string()))?;
        let store = PgStore {
            pool,
            table: config.table,
            options,
        };
        let client = store.client().await?;
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {} (key text COLLATE \"C\" PRIMARY KEY, \
             bytes bytea NOT NULL, version text NOT NULL)",
            store.table
        );
        client
            .batch_execute(&create)
            .await
            .map_err(|e| db_error("create table", e))?;
        Ok(store)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(|e| {
            let text = match e {
                deadpool_postgres::PoolError::Backend(e) => match e.as_db_error() {
                    Some(db) => format!("{}: {}", db.code().code(), db.message()),
                    None => e.to_string(),
                },
                other => other.to_string(),
            };
            io_error("postgres connect", io::ErrorKind::Other, text)
        })
    }

    /// The advisory-lock id of a key path in this table: 64 bits of SHA-256 over both. A
    /// collision of two ids only makes two creations wait for each other.
    fn lock_id(&self, path: &str) -> i64 {
        let digest = Sha256::new()
            .chain_update(self.table.as_bytes())
            .chain_update([0])
            .chain_update(path.as_bytes())
            .finalize();
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest[..8]);
        i64::from_be_bytes(id)
    }

    /// Creates `key` if it is absent and the key tree allows it: `Ok(None)` when created,
    /// `Ok(Some(version))` when the key exists. Takes the key's creation locks first (see the
    /// module docs); READ COMMITTED gives each statement after them a snapshot that includes
    /// every creation that held a conflicting lock before.
    async fn create(&self, key: &Key, object: &Object) -> Result<Option<Version>, StoreError> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| db_error("begin", e))?;
        let mut locks: Vec<(i64, bool)> = key
            .ancestors()
            .map(|ancestor| (self.lock_id(ancestor), false))
            .collect();
        locks.push((self.lock_id(key.as_str()), true));
        // One global order (by id) for every transaction, so two creations never deadlock.
        locks.sort_unstable();
        let (ids, exclusive): (Vec<i64>, Vec<bool>) = locks.into_iter().unzip();
        tx.execute(
            "SELECT CASE WHEN x THEN pg_advisory_xact_lock(id) \
             ELSE pg_advisory_xact_lock_shared(id) END \
             FROM unnest($1::int8[], $2::bool[]) AS l(id, x) ORDER BY id",
            &[&ids, &exclusive],
        )
        .await
        .map_err(|e| db_error("lock", e))?;
        let ancestors: Vec<&str> = key.ancestors().collect();
        let (below_from, below_to) = subtree_bounds(key);
        let check = format!(
            "SELECT (SELECT version FROM {t} WHERE key = $1), \
             EXISTS (SELECT 1 FROM {t} WHERE key = ANY($2::text[])), \
             EXISTS (SELECT 1 FROM {t} WHERE key > $3 AND key < $4)",
            t = self.table
        );
        let row = tx
            .query_one(&check, &[&key.as_str(), &ancestors, &below_from, &below_to])
            .await
            .map_err(|e| db_error("check", e))?;
        let current: Option<String> = row.get(0);
        if let Some(current) = current {
            return Ok(Some(Version::new(current)));
        }
        let reason = if row.get::<_, bool>(1) {
            Some("an ancestor of the key is an object")
        } else if row.get::<_, bool>(2) {
            Some("keys exist below the key")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(StoreError::KeyCollision {
                key: key.clone(),
                reason,
            });
        }
        let insert = format!(
            "INSERT INTO {} (key, bytes, version) VALUES ($1, $2, $3)",
            self.table
        );
        tx.execute(
            &insert,
            &[&key.as_str(), &object.bytes, &object.version.as_str()],
        )
        .await
        .map_err(|e| db_error("insert", e))?;
        tx.commit().await.map_err(|e| db_error("commit", e))?;
        Ok(None)
    }

    async fn current_version(&self, key: &Key) -> Result<Option<Version>, StoreError> {
        let query = format!("SELECT version FROM {} WHERE key = $1", self.table);
        let row = self
            .client()
            .await?
            .query_opt(&query, &[&key.as_str()])
            .await
            .map_err(|e| db_error("head", e))?;
        Ok(row.map(|row| Version::new(row.get::<_, String>(0))))
    }
}

/// Keys strictly below `key` are exactly those in `(key + "/", key + "0")` in byte order (`0` is
/// the byte after `/`, and no key ends with `/`).
fn subtree_bounds(key: &Key) -> (String, String) {
    (format!("{key}/"), format!("{key}0"))
}

#[async_trait]
impl Store for PgStore {
    async fn put_create(&self, key: &Key, bytes: Vec<u8>) -> Result<Version, StoreError> {
        self.options.check_size(key, bytes.len())?;
        let object = Object::new(bytes);
        match self.create(key, &object).await? {
            None => Ok(object.version),
            Some(_) => Err(StoreError::AlreadyExists { key: key.clone() }),
        }
    }

    async fn put_cas(
        &self,
        key: &Key,
        bytes: Vec<u8>,
        expected: Precondition,
    ) -> Result<Version, StoreError> {
        self.options.check_mutable(key)?;
        self.options.check_size(key, bytes.len())?;
        let object = Object::new(bytes);
        let from = match &expected {
            Precondition::Absent => {
                return match self.create(key, &object).await? {
                    None => Ok(object.version),
                    Some(current) => Err(StoreError::Conflict {
                        key: key.clone(),
                        expected,
                        current: Some(current),
                    }),
                };
            }
            Precondition::Version(from) => from,
        };
        // A concurrent swap of the same row makes this UPDATE wait and then re-check the
        // version on the row that won, so of N swaps from one version exactly one matches.
        let update = format!(
            "UPDATE {} SET bytes = $2, version = $3 WHERE key = $1 AND version = $4",
            self.table
        );
        let updated = self
            .client()
            .await?
            .execute(
                &update,
                &[
                    &key.as_str(),
                    &object.bytes,
                    &object.version.as_str(),
                    &from.as_str(),
                ],
            )
            .await
            .map_err(|e| db_error("update", e))?;
        if updated == 1 {
            return Ok(object.version);
        }
        Err(StoreError::Conflict {
            key: key.clone(),
            expected,
            current: self.current_version(key).await?,
        })
    }

    async fn get(&self, key: &Key) -> Result<Option<Object>, StoreError> {
        let query = format!("SELECT bytes, version FROM {} WHERE key = $1", self.table);
        let row = self
            .client()
            .await?
            .query_opt(&query, &[&key.as_str()])
            .await
            .map_err(|e| db_error("get", e))?;
        Ok(row.map(|row| Object {
            bytes: row.get(0),
            version: Version::new(row.get::<_, String>(1)),
        }))
    }

    async fn head(&self, key: &Key) -> Result<Option<Version>, StoreError> {
        self.current_version(key).await
    }

    async fn list(
        &self,
        prefix: Option<&Key>,
        start_after: Option<&Key>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let limit = clamp_limit(limit);
        let after = start_after.map_or("", Key::as_str);
        let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let rows = match prefix {
            None => {
                let query = format!(
                    "SELECT key FROM {} WHERE key > $1 ORDER BY key LIMIT $2",
                    self.table
                );
                client.query(&query, &[&after, &fetch]).await
            }
            Some(prefix) => {
                let (from, to) = subtree_bounds(prefix);
                let query = format!(
                    "SELECT key FROM {} WHERE key > $1 AND key > $2 AND key < $3 \
                     ORDER BY key LIMIT $4",
                    self.table
                );
                client.query(&query, &[&after, &from, &to, &fetch]).await
            }
        }
        .map_err(|e| db_error("list", e))?;
        // Rows this store did not write could hold names that are not keys; they are skipped.
        let mut keys: Vec<Key> = rows
            .iter()
            .filter_map(|row| Key::new(row.get::<_, String>(0)).ok())
            .collect();
        let more = keys.len() > limit;
        keys.truncate(limit);
        let next_start_after = if more { keys.last().cloned() } else { None };
        Ok(ListPage {
            keys,
            next_start_after,
        })
    }

    async fn delete(&self, key: &Key, expected: Option<&Version>) -> Result<bool, StoreError> {
        self.options.check_mutable(key)?;
        let delete = format!(
            "DELETE FROM {} WHERE key = $1 AND ($2::text IS NULL OR version = $2)",
            self.table
        );
        let deleted = self
            .client()
            .await?
            .execute(&delete, &[&key.as_str(), &expected.map(Version::as_str)])
            .await
            .map_err(|e| db_error("delete", e))?;
        match expected {
            Some(expected) if deleted == 0 => Err(StoreError::Conflict {
                key: key.clone(),
                expected: Precondition::Version(expected.clone()),
                current: self.current_version(key).await?,
            }),
            _ => Ok(deleted == 1),
        }
    }
}
