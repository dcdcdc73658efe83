//! The S3-compatible object-store backend (cargo feature `s3`). Owns the mapping of the [`Store`]
//! verbs onto conditional S3 requests through the `object_store` crate; must never hand-write
//! HTTP, and must never put a credential or a host path into an error.
//!
//! What is atomic and what is not is decided here and written down in docs/storage.md
//! ("Backends"): create-only puts are one `If-None-Match: *` PUT, version swaps one `If-Match`
//! PUT, so both are as atomic as the server's conditional writes; the key-tree rule, `delete`'s
//! `expected` version and `delete`'s "existed" answer are a check followed by a request.

use std::{fmt, io, sync::Arc};

use async_trait::async_trait;
use futures::{StreamExt, future::try_join_all};
use object_store::{
    Attribute, Attributes, GetOptions, GetResult, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, RetryConfig, UpdateVersion,
    aws::{AmazonS3Builder, S3ConditionalPut},
    path::Path,
};

use crate::{
    Key, ListPage, Object, Precondition, Store, StoreError, StoreOptions, Version,
    store::clamp_limit,
};

/// The user-metadata entry (`x-amz-meta-toolplane-sha256`) that carries an object's version, so
/// `head` and `put_cas` need no download.
const VERSION_METADATA: &str = "toolplane-sha256";

/// Where an [`S3Store`] keeps its objects and how it signs in.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    /// The server's base URL (`http://127.0.0.1:9000`); `None` for AWS itself.
    pub endpoint: Option<String>,
    pub bucket: String,
    pub region: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Every key is stored as `prefix/key` when set, so several stores can share one bucket.
    pub prefix: Option<Key>,
}

impl fmt::Debug for S3Config {
    // The secret never reaches a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// A [`Store`] in an S3-compatible bucket. See the module docs and docs/storage.md for which
/// guarantees come from the server and which are a check before a request.
#[derive(Debug)]
pub struct S3Store {
    options: StoreOptions,
    prefix: Option<Key>,
    /// Lists, deletes and read retries, with the client's default retries.
    reader: Arc<dyn ObjectStore>,
    /// Conditional writes and the first try of a read, never retried: a retried
    /// `If-None-Match` PUT whose first attempt landed would report our own object as someone
    /// else's.
    writer: Arc<dyn ObjectStore>,
}

impl S3Store {
    /// A store over `config`'s bucket. Makes no request; a wrong endpoint or credential shows as
    /// `store.io` on the first call.
    pub fn new(config: S3Config, options: StoreOptions) -> Result<S3Store, StoreError> {
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_access_key_id(&config.access_key_id)
            .with_secret_access_key(&config.secret_access_key)
            .with_conditional_put(S3ConditionalPut::ETagMatch);
        if let Some(endpoint) = &config.endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"))
                .with_virtual_hosted_style_request(false);
        }
        let reader = builder
            .clone()
            .build()
            .map_err(|e| StoreError::io("s3 configuration", redacted(e, &config)))?;
        let writer = builder
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            })
            .build()
            .map_err(|e| StoreError::io("s3 configuration", redacted(e, &config)))?;
        Ok(S3Store {
            options,
            prefix: config.prefix,
            reader: Arc::new(reader),
            writer: Arc::new(writer),
        })
    }

    /// The object path of `key`.
    fn path(&self, key: &str) -> Result<Path, StoreError> {
        match &self.prefix {
            Some(prefix) => self.path_of(&format!("{prefix}/{key}")),
            None => self.path_of(key),
        }
    }

    /// `full` (prefix included) as an object path. Every valid key is a valid object path (no
    /// empty, `.`/`..` or control-character segments), so this only fails for a key that
    /// `Key::new` would have refused.
    fn path_of(&self, full: &str) -> Result<Path, StoreError> {
        Path::parse(full).map_err(|_| StoreError::InvalidKey {
            key: full.chars().take(120).collect(),
            reason: "key is not a valid object path",
        })
    }

    /// The key of a listed object path, or `None` for objects outside the key grammar.
    fn key_of(&self, path: &Path) -> Option<Key> {
        let raw = path.as_ref();
        let rest = match &self.prefix {
            Some(prefix) => raw.strip_prefix(prefix.as_str())?.strip_prefix('/')?,
            None => raw,
        };
        Key::new(rest).ok()
    }

    /// The ETag and version of `key`, or `None` if absent: one HEAD when the object carries its
    /// version as metadata, else a GET that hashes the bytes.
    async fn tagged_version(&self, key: &Key) -> Result<Option<(String, Version)>, StoreError> {
        let Some(result) = self.fetch(key, true).await? else {
            return Ok(None);
        };
        let e_tag = result.meta.e_tag.clone().unwrap_or_default();
        let metadata = Attribute::Metadata(VERSION_METADATA.into());
        if let Some(version) = result.attributes.get(&metadata) {
            return Ok(Some((e_tag, Version::new(version.as_ref()))));
        }
        Ok(self
            .read(key)
            .await?
            .map(|(e_tag, object)| (e_tag, object.version)))
    }

    /// The object at `key` with its ETag, or `None` if absent. The version is computed from the
    /// bytes read, never taken from metadata.
    async fn read(&self, key: &Key) -> Result<Option<(String, Object)>, StoreError> {
        let Some(result) = self.fetch(key, false).await? else {
            return Ok(None);
        };
        let e_tag = result.meta.e_tag.clone().unwrap_or_default();
        let bytes = result.bytes().await.map_err(|e| transport("get", key, e))?;
        Ok(Some((e_tag, Object::new(Vec::from(bytes)))))
    }

    /// One GET (or HEAD) of `key`, `None` if absent.
    ///
    /// Tried once without retries first: servers that keep objects as files (s3s-fs) fail a read
    /// of a "directory" with a server error instead of 404. Then keys below `key`, or `key`
    /// missing from its parent's listing, prove it is not an object; otherwise the read is retried
    /// with the client's backoff.
    async fn fetch(&self, key: &Key, head: bool) -> Result<Option<GetResult>, StoreError> {
        let path = self.path(key.as_str())?;
        let options = GetOptions {
            head,
            ..GetOptions::default()
        };
        match self.writer.get_opts(&path, options.clone()).await {
            Ok(result) => return Ok(Some(result)),
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(_) => {}
        }
        if !self.list(Some(key), None, 1).await?.keys.is_empty() || !self.is_listed(key).await? {
            return Ok(None);
        }
        match self.reader.get_opts(&path, options).await {
            Ok(result) => Ok(Some(result)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(transport(if head { "head" } else { "get" }, key, e)),
        }
    }

    /// Whether `key` is listed as an object among its siblings (one LIST of its parent).
    async fn is_listed(&self, key: &Key) -> Result<bool, StoreError> {
        let parent = match key.parent() {
            Some(parent) => Some(self.path(parent.as_str())?),
            None => self.root_path()?,
        };
        let listing = self
            .reader
            .list_with_delimiter(parent.as_ref())
            .await
            .map_err(|e| transport("list", key, e))?;
        let path = self.path(key.as_str())?;
        Ok(listing.objects.iter().any(|meta| meta.location == path))
    }

    /// The path every key lies below, if the store has a prefix.
    fn root_path(&self) -> Result<Option<Path>, StoreError> {
        self.prefix
            .as_ref()
            .map(|root| self.path_of(root.as_str()))
            .transpose()
    }

    /// Whether an object exists at `ancestor` (a proper prefix of a key, by whole segments).
    async fn ancestor_exists(&self, ancestor: &str) -> Result<bool, StoreError> {
        Ok(self.fetch(&Key::new(ancestor)?, true).await?.is_some())
    }

    /// The key-tree rule, checked before a create. Not atomic with the create that follows: a
    /// concurrent writer can make a colliding key between this check and the PUT (see
    /// docs/storage.md).
    async fn check_tree(&self, key: &Key) -> Result<(), StoreError> {
        let ancestors = try_join_all(
            key.ancestors()
                .map(|ancestor| self.ancestor_exists(ancestor)),
        )
        .await?;
        if ancestors.into_iter().any(|exists| exists) {
            return Err(StoreError::KeyCollision {
                key: key.clone(),
                reason: "an ancestor of the key is an object",
            });
        }
        if !self.list(Some(key), None, 1).await?.keys.is_empty() {
            return Err(StoreError::KeyCollision {
                key: key.clone(),
                reason: "keys exist below the key",
            });
        }
        Ok(())
    }

    /// One conditional PUT of `bytes` carrying their version as metadata.
    async fn put(
        &self,
        key: &Key,
        bytes: Vec<u8>,
        mode: PutMode,
    ) -> Result<Version, object_store::Error> {
        let version = Version::of(&bytes);
        let mut attributes = Attributes::new();
        attributes.insert(
            Attribute::Metadata(VERSION_METADATA.into()),
            version.as_str().to_owned().into(),
        );
        let options = PutOptions {
            mode,
            attributes,
            ..PutOptions::default()
        };
        let path = self
            .path(key.as_str())
            .map_err(|e| object_store::Error::Generic {
                store: "toolplane",
                source: Box::new(e),
            })?;
        self.writer
            .put_opts(&path, PutPayload::from(bytes), options)
            .await?;
        Ok(version)
    }

    /// The conflict to report after the server refused a conditional write: the version now
    /// present, read afresh.
    async fn conflict(&self, key: &Key, expected: Precondition) -> StoreError {
        let current = match self.tagged_version(key).await {
            Ok(found) => found.map(|(_, version)| version),
            Err(e) => return e,
        };
        StoreError::Conflict {
            key: key.clone(),
            expected,
            current,
        }
    }
}

/// A transport failure of `what` on `key` as `store.io`.
fn transport(what: &str, key: &Key, error: object_store::Error) -> StoreError {
    StoreError::io(
        format!("s3 {what} {key}"),
        io::Error::other(error.to_string()),
    )
}

/// A configuration error with the secret cut out, should the builder ever echo it.
fn redacted(error: object_store::Error, config: &S3Config) -> io::Error {
    let mut text = error.to_string();
    if !config.secret_access_key.is_empty() {
        text = text.replace(&config.secret_access_key, "<redacted>");
    }
    io::Error::other(text)
}

#[async_trait]
impl Store for S3Store {
    async fn put_create(&self, key: &Key, bytes: Vec<u8>) -> Result<Version, StoreError> {
        self.options.check_size(key, bytes.len())?;
        self.check_tree(key).await?;
        match self.put(key, bytes, PutMode::Create).await {
            Ok(version) => Ok(version),
            Err(object_store::Error::AlreadyExists { .. }) => {
                Err(StoreError::AlreadyExists { key: key.clone() })
            }
            Err(e) => Err(transport("put", key, e)),
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
        let mode = match &expected {
            Precondition::Absent => {
                if let Some((_, current)) = self.tagged_version(key).await? {
                    return Err(StoreError::Conflict {
                        key: key.clone(),
                        expected,
                        current: Some(current),
                    });
                }
                self.check_tree(key).await?;
                PutMode::Create
            }
            Precondition::Version(want) => {
                let found = self.tagged_version(key).await?;
                let e_tag = match found {
                    Some((e_tag, current)) if current == *want => e_tag,
                    found => {
                        return Err(StoreError::Conflict {
                            key: key.clone(),
                            expected,
                            current: found.map(|(_, version)| version),
                        });
                    }
                };
                PutMode::Update(UpdateVersion {
                    e_tag: Some(e_tag),
                    version: None,
                })
            }
        };
        match self.put(key, bytes, mode).await {
            Ok(version) => Ok(version),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }
                | object_store::Error::NotFound { .. },
            ) => Err(self.conflict(key, expected).await),
            Err(e) => Err(transport("put", key, e)),
        }
    }

    async fn get(&self, key: &Key) -> Result<Option<Object>, StoreError> {
        Ok(self.read(key).await?.map(|(_, object)| object))
    }

    async fn head(&self, key: &Key) -> Result<Option<Version>, StoreError> {
        Ok(self.tagged_version(key).await?.map(|(_, version)| version))
    }

    async fn list(
        &self,
        prefix: Option<&Key>,
        start_after: Option<&Key>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let limit = clamp_limit(limit);
        // `object_store` lists below a prefix by whole segments, as the trait requires.
        let list_prefix = match (prefix, &self.prefix) {
            (Some(prefix), _) => Some(self.path(prefix.as_str())?),
            (None, _) => self.root_path()?,
        };
        let mut stream = match start_after {
            Some(after) => self
                .reader
                .list_with_offset(list_prefix.as_ref(), &self.path(after.as_str())?),
            None => self.reader.list(list_prefix.as_ref()),
        };
        let mut keys = Vec::new();
        while keys.len() <= limit {
            let Some(meta) = stream.next().await else {
                break;
            };
            let meta =
                meta.map_err(|e| StoreError::io("s3 list", io::Error::other(e.to_string())))?;
            if let Some(key) = self.key_of(&meta.location) {
                keys.push(key);
            }
        }
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
        let current = self.tagged_version(key).await?.map(|(_, version)| version);
        if let Some(expected) = expected
            && current.as_ref() != Some(expected)
        {
            return Err(StoreError::Conflict {
                key: key.clone(),
                expected: Precondition::Version(expected.clone()),
                current,
            });
        }
        if current.is_none() {
            return Ok(false);
        }
        match self.reader.delete(&self.path(key.as_str())?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(true),
            Err(e) => Err(transport("delete", key, e)),
        }
    }
}
