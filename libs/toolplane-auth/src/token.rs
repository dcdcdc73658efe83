//! toolplane's own bearer tokens. Owns how a token is made (256 bits from the OS, prefix `tp_`),
//! stored (only the SHA-256 of the secret, never the secret) and verified (a lookup by that hash,
//! then a constant-time comparison); must never return, log or store a secret after `create`.
//!
//! Layout in the service's namespaced store:
//! - `tokens/records/<id>`: the JSON [`TokenRecord`], rewritten by compare-and-swap on revoke;
//! - `tokens/by-hash/<hex sha256>`: the token id, create-only, so `verify` is one lookup, not a
//!   scan. A record is written before its hash entry: a crash between leaves a token that lists
//!   but never verifies, never one that verifies without a record.
//!
//! A successful verification is remembered for a short time ([`crate::cache`], keyed by the
//! secret's SHA-256, shared by every clone of the store); revoking through the store forgets it.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use toolplane_store::{Key, Precondition, Store, StoreError};

use crate::cache::{DEFAULT_CACHE_CAPACITY, DEFAULT_CACHE_TTL, Lookup, VerifiedCache};
use crate::{AuthError, Caller, CallerKind, Role};

/// Every toolplane token secret starts with this, so scanners and people recognise one.
pub const TOKEN_PREFIX: &str = "tp_";
/// Random bytes in a secret (256 bits).
const SECRET_BYTES: usize = 32;
const MAX_NAME_CHARS: usize = 128;
const MAX_CELL_CHARS: usize = 128;
/// Revocation re-reads and rewrites the record; this many lost races and it gives up.
const REVOKE_ATTEMPTS: usize = 8;

/// A token secret, shown once. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSecret(String);

impl TokenSecret {
    /// A secret read back from the bootstrap file.
    pub(crate) fn from_file(secret: &str) -> TokenSecret {
        TokenSecret(secret.to_owned())
    }

    /// The secret to hand to the caller once, e.g. in `authorization: Bearer <secret>`.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A fresh secret: `tp_` and 256 bits from the operating system's random source, as hex.
    /// Kept in memory only, e.g. the credential `toolplane up`'s runtime calls its peers with.
    pub fn generate() -> Result<TokenSecret, AuthError> {
        TokenStore::new_secret()
    }

    /// A secret read from a file or an environment variable: surrounding whitespace is dropped;
    /// anything but `tp_` and at least 64 more characters is refused (`auth.invalid_request`),
    /// with a message that never repeats the text.
    pub fn parse(text: &str) -> Result<TokenSecret, AuthError> {
        let secret = text.trim();
        if !secret.starts_with(TOKEN_PREFIX)
            || secret.len() < TOKEN_PREFIX.len() + 64
            || !secret.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(AuthError::InvalidRequest(
                "a token secret is `tp_` followed by at least 64 printable characters".into(),
            ));
        }
        Ok(TokenSecret(secret.to_owned()))
    }
}

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(<redacted>)")
    }
}

/// What to create a token for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewToken {
    /// A human name ("ci", "grafana"); 1 to 128 characters.
    pub name: String,
    pub cell: String,
    pub role: Role,
    /// When the token stops working; `None` for never.
    pub expires_at_unix_ms: Option<u64>,
}

/// A token as listed: everything but the secret and its hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TokenInfo {
    pub id: String,
    pub name: String,
    pub cell: String,
    pub role: Role,
    pub created_at_unix_ms: u64,
    pub expires_at_unix_ms: Option<u64>,
    pub revoked: bool,
}

/// A created token: its listing and the secret, which is shown this once and never again.
#[derive(Debug)]
pub struct CreatedToken {
    pub info: TokenInfo,
    pub secret: TokenSecret,
}

/// The stored record: the listing plus the hex SHA-256 of the secret.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct TokenRecord {
    id: String,
    name: String,
    cell: String,
    role: Role,
    created_at_unix_ms: u64,
    expires_at_unix_ms: Option<u64>,
    revoked: bool,
    secret_sha256: String,
}

impl TokenRecord {
    fn info(&self) -> TokenInfo {
        TokenInfo {
            id: self.id.clone(),
            name: self.name.clone(),
            cell: self.cell.clone(),
            role: self.role,
            created_at_unix_ms: self.created_at_unix_ms,
            expires_at_unix_ms: self.expires_at_unix_ms,
            revoked: self.revoked,
        }
    }
}

/// Tokens in a service's store (give it the service's namespaced view). Clones share the store
/// and the verified-token cache.
#[derive(Clone, Debug)]
pub struct TokenStore {
    store: Arc<dyn Store>,
    cache: Arc<VerifiedCache>,
}

impl TokenStore {
    /// Tokens in `store`, with the default verified-token cache: up to 10,000 entries, each
    /// living at most one second.
    pub fn new(store: Arc<dyn Store>) -> TokenStore {
        TokenStore {
            store,
            cache: Arc::new(VerifiedCache::new(
                DEFAULT_CACHE_TTL,
                DEFAULT_CACHE_CAPACITY,
            )),
        }
    }

    /// The same tokens with a fresh verified-token cache whose entries live at most `ttl` and
    /// which holds at most `capacity` of them (oldest evicted first); a zero `ttl` or `capacity`
    /// turns the cache off, so every verification reads the store. Clones made before this call
    /// keep the old cache.
    #[must_use]
    pub fn with_cache(self, ttl: Duration, capacity: usize) -> TokenStore {
        TokenStore {
            store: self.store,
            cache: Arc::new(VerifiedCache::new(ttl, capacity)),
        }
    }

    /// Creates a token and returns its secret, the only time the secret is ever available.
    pub async fn create(&self, new: NewToken) -> Result<CreatedToken, AuthError> {
        self.create_with_secret(new, TokenStore::new_secret()?)
            .await
    }

    /// A fresh secret: the prefix and 256 bits from the OS random source, as hex.
    pub(crate) fn new_secret() -> Result<TokenSecret, AuthError> {
        Ok(TokenSecret(format!(
            "{TOKEN_PREFIX}{}",
            hex(&random_bytes::<SECRET_BYTES>()?)
        )))
    }

    /// True when at least one token (revoked ones included) is stored.
    pub(crate) async fn has_any(&self) -> Result<bool, AuthError> {
        let prefix = Key::new("tokens/records")?;
        Ok(!self
            .store
            .list(Some(&prefix), None, 1)
            .await?
            .keys
            .is_empty())
    }

    pub(crate) async fn create_with_secret(
        &self,
        new: NewToken,
        secret: TokenSecret,
    ) -> Result<CreatedToken, AuthError> {
        check_field("name", &new.name, MAX_NAME_CHARS)?;
        check_field("cell", &new.cell, MAX_CELL_CHARS)?;
        let hash = sha256_hex(secret.expose());
        let record = TokenRecord {
            id: format!("tok_{}", hex(&random_bytes::<8>()?)),
            name: new.name,
            cell: new.cell,
            role: new.role,
            created_at_unix_ms: now_unix_ms(),
            expires_at_unix_ms: new.expires_at_unix_ms,
            revoked: false,
            secret_sha256: hash.clone(),
        };
        self.store
            .put_create(
                &record_key(&record.id).ok_or_else(|| not_found(&record.id))?,
                encode(&record)?,
            )
            .await?;
        self.store
            .put_create(&hash_key(&hash)?, record.id.clone().into_bytes())
            .await?;
        tracing::info!(token_id = %record.id, cell = %record.cell, role = %record.role, "token created");
        Ok(CreatedToken {
            info: record.info(),
            secret,
        })
    }

    /// Every token, ordered by id, without secrets or hashes.
    pub async fn list(&self) -> Result<Vec<TokenInfo>, AuthError> {
        let prefix = Key::new("tokens/records")?;
        let mut infos = Vec::new();
        let mut after: Option<Key> = None;
        loop {
            let page = self
                .store
                .list(
                    Some(&prefix),
                    after.as_ref(),
                    toolplane_store::MAX_LIST_LIMIT,
                )
                .await?;
            for key in &page.keys {
                if let Some(record) = self.read(key).await? {
                    infos.push(record.info());
                }
            }
            match page.next_start_after {
                Some(next) => after = Some(next),
                None => return Ok(infos),
            }
        }
    }

    /// The listing of token `id`, or `None` when there is no such token.
    pub async fn info(&self, id: &str) -> Result<Option<TokenInfo>, AuthError> {
        let Some(key) = record_key(id) else {
            return Ok(None);
        };
        Ok(self.read(&key).await?.map(|record| record.info()))
    }

    /// Revokes a token; it is refused from then on, by this store and its clones at once (the
    /// verified-token cache forgets it), by other processes sharing the store once their cached
    /// entry ages out. Revoking a revoked token is a no-op.
    pub async fn revoke(&self, id: &str) -> Result<TokenInfo, AuthError> {
        let revoked = self.revoke_record(id).await;
        if revoked.is_ok() {
            self.cache.forget_token(id);
        }
        revoked
    }

    async fn revoke_record(&self, id: &str) -> Result<TokenInfo, AuthError> {
        let key = record_key(id).ok_or_else(|| not_found(id))?;
        for _ in 0..REVOKE_ATTEMPTS {
            let Some(object) = self.store.get(&key).await? else {
                return Err(not_found(id));
            };
            let mut record = decode(&object.bytes)?;
            if record.revoked {
                return Ok(record.info());
            }
            record.revoked = true;
            match self
                .store
                .put_cas(
                    &key,
                    encode(&record)?,
                    Precondition::Version(object.version),
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(token_id = %record.id, "token revoked");
                    return Ok(record.info());
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(error) => return Err(error.into()),
            }
        }
        Err(AuthError::InvalidRequest(format!(
            "token {id} kept changing while being revoked"
        )))
    }

    /// The caller a secret stands for, now.
    pub async fn verify(&self, secret: &str) -> Result<Caller, AuthError> {
        self.verify_at(secret, now_unix_ms()).await
    }

    /// The caller a secret stands for at `now_unix_ms`: unknown, revoked or expired secrets are
    /// refused, with messages that never repeat the secret. A secret verified within the cache's
    /// time is answered from the cache, its expiry checked against `now_unix_ms` again.
    pub async fn verify_at(&self, secret: &str, now_unix_ms: u64) -> Result<Caller, AuthError> {
        if !secret.starts_with(TOKEN_PREFIX) {
            return Err(AuthError::InvalidCredential);
        }
        let digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let generation = match self.cache.lookup(&digest, now_unix_ms) {
            Lookup::Hit(answer) => return answer,
            Lookup::Miss { generation } => generation,
        };
        let (caller, expires_at_unix_ms) = self.verify_in_store(&hex(&digest), now_unix_ms).await?;
        self.cache
            .insert(digest, &caller, expires_at_unix_ms, generation);
        Ok(caller)
    }

    /// [`TokenStore::verify_at`] against the store: the caller and the token's expiry.
    async fn verify_in_store(
        &self,
        hash: &str,
        now_unix_ms: u64,
    ) -> Result<(Caller, Option<u64>), AuthError> {
        let key = hash_key(hash).map_err(|_| AuthError::InvalidCredential)?;
        let Some(id) = self.store.get(&key).await? else {
            return Err(AuthError::InvalidCredential);
        };
        let id = String::from_utf8(id.bytes)
            .map_err(|_| AuthError::CorruptRecord("a token hash entry is not UTF-8".into()))?;
        let key = record_key(&id)
            .ok_or_else(|| AuthError::CorruptRecord("a token hash entry names no token".into()))?;
        let Some(record) = self.read(&key).await? else {
            return Err(AuthError::InvalidCredential);
        };
        // The lookup already matched the hash as a key; the comparison against the record proves
        // the entry belongs to it, in time that does not depend on where the bytes differ.
        if !bool::from(record.secret_sha256.as_bytes().ct_eq(hash.as_bytes())) {
            return Err(AuthError::InvalidCredential);
        }
        if record.revoked {
            return Err(AuthError::Revoked);
        }
        if record
            .expires_at_unix_ms
            .is_some_and(|expires| now_unix_ms >= expires)
        {
            return Err(AuthError::Expired);
        }
        Ok((
            Caller {
                cell: record.cell,
                role: record.role,
                principal: record.id,
                kind: CallerKind::Token,
            },
            record.expires_at_unix_ms,
        ))
    }

    async fn read(&self, key: &Key) -> Result<Option<TokenRecord>, AuthError> {
        match self.store.get(key).await? {
            Some(object) => decode(&object.bytes).map(Some),
            None => Ok(None),
        }
    }
}

fn check_field(what: &str, value: &str, max_chars: usize) -> Result<(), AuthError> {
    let chars = value.chars().count();
    if chars == 0 || chars > max_chars || value.chars().any(char::is_control) {
        return Err(AuthError::InvalidRequest(format!(
            "token {what} must be 1 to {max_chars} characters without control characters"
        )));
    }
    Ok(())
}

fn not_found(id: &str) -> AuthError {
    AuthError::TokenNotFound {
        id: id.chars().take(64).collect(),
    }
}

/// The record key of token `id`; `None` for an id that is not one key segment.
fn record_key(id: &str) -> Option<Key> {
    if id.contains('/') {
        return None;
    }
    Key::new(format!("tokens/records/{id}")).ok()
}

fn hash_key(hash: &str) -> Result<Key, StoreError> {
    Key::new(format!("tokens/by-hash/{hash}"))
}

fn encode(record: &TokenRecord) -> Result<Vec<u8>, AuthError> {
    serde_json::to_vec(record).map_err(|e| AuthError::CorruptRecord(e.to_string()))
}

fn decode(bytes: &[u8]) -> Result<TokenRecord, AuthError> {
    serde_json::from_slice(bytes)
        .map_err(|e| AuthError::CorruptRecord(format!("a token record: {e}")))
}

/// Lowercase hex SHA-256 of `text`.
pub(crate) fn sha256_hex(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    out
}

fn random_bytes<const N: usize>() -> Result<[u8; N], AuthError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)
        .map_err(|e| AuthError::io("the OS random source", std::io::Error::other(e.to_string())))?;
    Ok(bytes)
}

pub(crate) fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use toolplane_store::MemoryStore;

    use super::*;

    fn store() -> TokenStore {
        TokenStore::new(Arc::new(MemoryStore::default()))
    }

    fn new_token(role: Role, expires: Option<u64>) -> NewToken {
        NewToken {
            name: "ci".into(),
            cell: "cell-a".into(),
            role,
            expires_at_unix_ms: expires,
        }
    }

    #[tokio::test]
    async fn a_created_token_verifies_as_its_cell_and_role() {
        let tokens = store();
        let created = tokens.create(new_token(Role::Agent, None)).await.unwrap();
        let secret = created.secret.expose();
        assert!(secret.starts_with("tp_"));
        assert_eq!(secret.len(), 3 + 64, "256 bits as hex");
        let caller = tokens.verify(secret).await.unwrap();
        assert_eq!(caller.cell, "cell-a");
        assert_eq!(caller.role, Role::Agent);
        assert_eq!(caller.principal, created.info.id);
        assert_eq!(caller.kind, CallerKind::Token);
        let other = tokens.create(new_token(Role::Agent, None)).await.unwrap();
        assert_ne!(other.secret, created.secret);
        assert_ne!(other.info.id, created.info.id);
    }

    #[tokio::test]
    async fn unknown_expired_and_revoked_tokens_are_refused() {
        let tokens = store();
        let now = now_unix_ms();
        let expiring = tokens
            .create(new_token(Role::Reader, Some(now + 1_000)))
            .await
            .unwrap();
        let secret = expiring.secret.expose();
        assert!(tokens.verify_at(secret, now).await.is_ok());
        assert!(matches!(
            tokens.verify_at(secret, now + 1_000).await,
            Err(AuthError::Expired)
        ));
        let revoked = tokens.create(new_token(Role::Admin, None)).await.unwrap();
        assert!(tokens.revoke(&revoked.info.id).await.unwrap().revoked);
        assert!(tokens.revoke(&revoked.info.id).await.unwrap().revoked);
        assert!(matches!(
            tokens.verify(revoked.secret.expose()).await,
            Err(AuthError::Revoked)
        ));
        let mut wrong = secret.to_owned();
        wrong.pop();
        wrong.push('x');
        for bad in [wrong.as_str(), "tp_", "nope", "", "tp_../../x"] {
            let err = tokens.verify(bad).await.unwrap_err();
            assert!(matches!(err, AuthError::InvalidCredential), "{bad}: {err}");
        }
        assert!(matches!(
            tokens.revoke("tok_missing").await,
            Err(AuthError::TokenNotFound { .. })
        ));
        assert!(matches!(
            tokens.revoke("../x").await,
            Err(AuthError::TokenNotFound { .. })
        ));
    }

    /// The hash entry only points at a record; the record's own hash must match too, so an
    /// entry pointing at another token's record (a corrupted or planted index) is refused.
    #[tokio::test]
    async fn a_hash_entry_pointing_at_another_record_is_refused() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let tokens = TokenStore::new(Arc::clone(&store));
        let reader = tokens.create(new_token(Role::Reader, None)).await.unwrap();
        let admin = tokens.create(new_token(Role::Admin, None)).await.unwrap();
        let entry = hash_key(&sha256_hex(reader.secret.expose())).unwrap();
        store.delete(&entry, None).await.unwrap();
        store
            .put_create(&entry, admin.info.id.clone().into_bytes())
            .await
            .unwrap();
        assert!(matches!(
            tokens.verify(reader.secret.expose()).await,
            Err(AuthError::InvalidCredential)
        ));
        assert_eq!(
            tokens.verify(admin.secret.expose()).await.unwrap().role,
            Role::Admin
        );
    }

    /// Removes every hash entry, so that a verification that reads the store refuses every
    /// token: whatever still verifies afterwards was answered by the cache.
    async fn forget_hashes(store: &Arc<dyn Store>, secrets: &[&TokenSecret]) {
        for secret in secrets {
            let entry = hash_key(&sha256_hex(secret.expose())).unwrap();
            store.delete(&entry, None).await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_cached_token_revoked_is_refused_on_the_very_next_call() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let tokens = TokenStore::new(Arc::clone(&store));
        let administration = tokens.clone();
        let created = tokens.create(new_token(Role::Agent, None)).await.unwrap();
        let secret = created.secret.expose();
        for _ in 0..3 {
            assert_eq!(tokens.verify(secret).await.unwrap().role, Role::Agent);
        }
        administration.revoke(&created.info.id).await.unwrap();
        assert!(matches!(
            tokens.verify(secret).await,
            Err(AuthError::Revoked)
        ));
    }

    #[tokio::test]
    async fn an_expired_token_is_refused_even_when_cached() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let tokens = TokenStore::new(Arc::clone(&store));
        let now = now_unix_ms();
        let created = tokens
            .create(new_token(Role::Reader, Some(now + 500)))
            .await
            .unwrap();
        let secret = created.secret.expose();
        assert!(tokens.verify_at(secret, now).await.is_ok());
        forget_hashes(&store, &[&created.secret]).await;
        assert!(tokens.verify_at(secret, now + 1).await.is_ok(), "cached");
        assert!(matches!(
            tokens.verify_at(secret, now + 500).await,
            Err(AuthError::Expired)
        ));
    }

    #[tokio::test]
    async fn the_cache_holds_at_most_its_bound_oldest_first_out() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let tokens = TokenStore::new(Arc::clone(&store)).with_cache(Duration::from_secs(60), 2);
        let mut created = Vec::new();
        for _ in 0..3 {
            let token = tokens.create(new_token(Role::Agent, None)).await.unwrap();
            tokens.verify(token.secret.expose()).await.unwrap();
            created.push(token);
        }
        assert_eq!(tokens.cache.len(), 2);
        let secrets: Vec<&TokenSecret> = created.iter().map(|t| &t.secret).collect();
        forget_hashes(&store, &secrets).await;
        assert!(matches!(
            tokens.verify(created[0].secret.expose()).await,
            Err(AuthError::InvalidCredential)
        ));
        for token in &created[1..] {
            assert!(tokens.verify(token.secret.expose()).await.is_ok());
        }
    }

    /// Another process sharing the store has its own cache: it sees a revocation once its entry
    /// ages out, and with the cache off at once.
    #[tokio::test]
    async fn another_store_on_the_same_data_sees_a_revocation_after_the_ttl() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let here = TokenStore::new(Arc::clone(&store));
        let elsewhere =
            TokenStore::new(Arc::clone(&store)).with_cache(Duration::from_millis(50), 10);
        let uncached = TokenStore::new(Arc::clone(&store)).with_cache(Duration::ZERO, 10);
        let created = here.create(new_token(Role::Agent, None)).await.unwrap();
        let secret = created.secret.expose();
        elsewhere.verify(secret).await.unwrap();
        uncached.verify(secret).await.unwrap();
        here.revoke(&created.info.id).await.unwrap();
        assert!(elsewhere.verify(secret).await.is_ok(), "within the TTL");
        assert!(matches!(
            uncached.verify(secret).await,
            Err(AuthError::Revoked)
        ));
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(matches!(
            elsewhere.verify(secret).await,
            Err(AuthError::Revoked)
        ));
    }

    #[tokio::test]
    async fn list_shows_every_token_but_never_a_secret_or_its_hash() {
        let tokens = store();
        let a = tokens.create(new_token(Role::Admin, None)).await.unwrap();
        let b = tokens
            .create(new_token(Role::Reader, Some(5)))
            .await
            .unwrap();
        tokens.revoke(&b.info.id).await.unwrap();
        let listed = tokens.list().await.unwrap();
        assert_eq!(listed.len(), 2);
        let text = format!("{listed:?} {}", serde_json::to_string(&listed).unwrap());
        for created in [&a, &b] {
            let secret = created.secret.expose();
            assert!(!text.contains(secret));
            assert!(!text.contains(&secret[3..]));
            assert!(!text.contains(&sha256_hex(secret)));
            assert!(listed.contains(&TokenInfo {
                revoked: created.info.id == b.info.id,
                ..created.info.clone()
            }));
        }
        assert!(!format!("{a:?}").contains(a.secret.expose()));
    }

    #[tokio::test]
    async fn bad_fields_are_refused_before_anything_is_stored() {
        let tokens = store();
        for (name, cell) in [("", "c"), ("n", ""), ("n\n", "c"), (&*"x".repeat(200), "c")] {
            let err = tokens
                .create(NewToken {
                    name: name.into(),
                    cell: cell.into(),
                    role: Role::Reader,
                    expires_at_unix_ms: None,
                })
                .await
                .unwrap_err();
            assert_eq!(err.code(), "auth.invalid_request");
        }
        assert!(tokens.list().await.unwrap().is_empty());
    }
}
