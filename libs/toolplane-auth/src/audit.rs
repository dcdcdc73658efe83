//! The admin audit: an append-only record of every administrative change a service makes —
//! tokens, registrations, policies, profiles, skills — with who made it, in which cell, what and
//! when (docs/auth.md, "Admin audit"). Owns the record's shape, its keys and reading it back by
//! cell; must never hold a secret (the summary a service gives is names and ids only) and never
//! show one cell's records to another.
//!
//! Layout in the service's own (namespaced) store: `admin-audit/<cell>/<id>`, create-only, where
//! the id is the time in milliseconds (16 digits), this process's record count (10 hex digits,
//! so records of one millisecond keep their order) and 8 random hex digits (so processes sharing
//! a store never collide): the keys of a cell list in time order.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use toolplane_store::{Key, Store};

use crate::token::now_unix_ms;
use crate::{AuthError, Caller, CallerKind, Role, SERVICE_PRINCIPAL, TokenStore};

/// The key prefix of the admin audit in a service's store.
pub const ADMIN_AUDIT_PREFIX: &str = "admin-audit";
/// The most records one page holds.
pub const MAX_AUDIT_PAGE: usize = 500;
/// The records one page holds when the reader asks for none in particular.
pub const DEFAULT_AUDIT_PAGE: usize = 100;
const MAX_SUMMARY_CHARS: usize = 512;
const MAX_OBJECT_CHARS: usize = 256;
/// Records made by this process, the middle part of every id.
static RECORDS_MADE: AtomicU64 = AtomicU64::new(0);

/// What kind of thing an administrative change touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdminKind {
    /// A toolplane token: created or revoked.
    Token,
    /// An MCP server or an external tool host: registered, changed or removed.
    Registration,
    /// A platform or user policy.
    Policy,
    /// An agent profile.
    Profile,
    /// A skill: imported or deleted.
    Skill,
}

impl AdminKind {
    pub const ALL: [AdminKind; 5] = [
        AdminKind::Token,
        AdminKind::Registration,
        AdminKind::Policy,
        AdminKind::Profile,
        AdminKind::Skill,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AdminKind::Token => "token",
            AdminKind::Registration => "registration",
            AdminKind::Policy => "policy",
            AdminKind::Profile => "profile",
            AdminKind::Skill => "skill",
        }
    }
}

impl fmt::Display for AdminKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AdminKind {
    type Err = AuthError;

    fn from_str(name: &str) -> Result<AdminKind, AuthError> {
        AdminKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
            .ok_or_else(|| {
                AuthError::InvalidRequest(format!(
                    "unknown admin audit kind `{}` (token, registration, policy, profile, skill)",
                    name.chars().take(32).collect::<String>()
                ))
            })
    }
}

/// One change, as the service that made it describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminChange {
    pub kind: AdminKind,
    /// The RPC's method name, e.g. `PutProfile`.
    pub rpc: String,
    /// The cell the changed object belongs to.
    pub cell: String,
    /// The changed object's id (token id, server id, profile id …).
    pub object_id: String,
    /// A short description without secret values: names and ids, never env or header values.
    pub summary: String,
}

impl AdminChange {
    pub fn new(kind: AdminKind, rpc: &str, cell: &str, object_id: &str) -> AdminChange {
        AdminChange {
            kind,
            rpc: rpc.to_owned(),
            cell: cell.to_owned(),
            object_id: object_id.to_owned(),
            summary: String::new(),
        }
    }

    #[must_use]
    pub fn summary(mut self, summary: impl Into<String>) -> AdminChange {
        self.summary = summary.into();
        self
    }
}

/// A stored record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminAuditRecord {
    /// `<16-digit unix ms>-<10 hex>-<8 hex>`, ordered by time within a cell.
    pub id: String,
    pub at_unix_ms: u64,
    /// The service that made the change (`catalog`, `mcp-proxy`, `workspace`).
    pub service: String,
    pub cell: String,
    /// The token's name, the JWT's subject, `service` for the plane's own credential, or
    /// `anonymous` with authentication off.
    pub who: String,
    /// The token id or JWT subject (`anonymous` with authentication off).
    pub principal: String,
    pub caller_kind: CallerKind,
    pub role: Role,
    pub kind: AdminKind,
    pub rpc: String,
    pub object_id: String,
    pub summary: String,
}

/// What to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdminAuditQuery {
    /// Only records at or after this time (0: from the first).
    pub since_unix_ms: u64,
    /// Only records of this kind.
    pub kind: Option<AdminKind>,
    /// Records per page (0: [`DEFAULT_AUDIT_PAGE`]; at most [`MAX_AUDIT_PAGE`]).
    pub page_size: usize,
    /// The `next_page_token` of the previous page, or empty.
    pub page_token: String,
}

/// One page of a cell's records, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdminAuditPage {
    pub records: Vec<AdminAuditRecord>,
    /// Empty on the last page.
    pub next_page_token: String,
}

/// A service's admin audit in its store.
#[derive(Clone, Debug)]
pub struct AdminAuditLog {
    store: Arc<dyn Store>,
    service: String,
    tokens: Option<TokenStore>,
}

impl AdminAuditLog {
    /// The audit of `service` in `store` (the service's own namespaced store).
    pub fn new(store: Arc<dyn Store>, service: &str) -> AdminAuditLog {
        AdminAuditLog {
            store,
            service: service.to_owned(),
            tokens: None,
        }
    }

    /// Names token callers by their token's name, looked up in `tokens` (else by token id).
    #[must_use]
    pub fn with_tokens(mut self, tokens: Option<TokenStore>) -> AdminAuditLog {
        self.tokens = tokens;
        self
    }

    /// Records a change `caller` made. A failure to record is logged as an error and does not
    /// fail the change, which has already happened.
    pub async fn record(&self, caller: &Caller, change: AdminChange) {
        if let Err(error) = self.try_record(caller, change).await {
            tracing::error!(code = error.code(), %error, service = %self.service, "admin audit: a change could not be recorded");
        }
    }

    /// [`AdminAuditLog::record`], answering the stored record or why it could not be stored.
    pub async fn try_record(
        &self,
        caller: &Caller,
        change: AdminChange,
    ) -> Result<AdminAuditRecord, AuthError> {
        let at_unix_ms = now_unix_ms();
        let mut suffix = [0u8; 4];
        getrandom::fill(&mut suffix).map_err(|e| {
            AuthError::io("the OS random source", std::io::Error::other(e.to_string()))
        })?;
        let seq = RECORDS_MADE.fetch_add(1, Ordering::Relaxed);
        let id = format!(
            "{at_unix_ms:016}-{seq:010x}-{:08x}",
            u32::from_be_bytes(suffix)
        );
        let cell = if change.cell.is_empty() {
            caller.cell.clone()
        } else {
            change.cell
        };
        let record = AdminAuditRecord {
            id,
            at_unix_ms,
            service: self.service.clone(),
            who: self.who(caller).await,
            principal: caller.principal.clone(),
            caller_kind: caller.kind,
            role: caller.role,
            kind: change.kind,
            rpc: change.rpc,
            object_id: change.object_id.chars().take(MAX_OBJECT_CHARS).collect(),
            summary: change.summary.chars().take(MAX_SUMMARY_CHARS).collect(),
            cell,
        };
        let key = Key::new(format!("{}/{}", cell_prefix(&record.cell), record.id))?;
        let bytes = serde_json::to_vec(&record)
            .map_err(|e| AuthError::CorruptRecord(format!("an admin audit record: {e}")))?;
        self.store.put_create(&key, bytes).await?;
        Ok(record)
    }

    /// The token's name for a token caller (its id when the name cannot be read), the subject of
    /// a JWT, `anonymous` with authentication off.
    async fn who(&self, caller: &Caller) -> String {
        if caller.kind != CallerKind::Token || caller.principal == SERVICE_PRINCIPAL {
            return caller.principal.clone();
        }
        let Some(tokens) = &self.tokens else {
            return caller.principal.clone();
        };
        match tokens.info(&caller.principal).await {
            Ok(Some(info)) => info.name,
            _ => caller.principal.clone(),
        }
    }

    /// One page of `cell`'s records, oldest first. The caller decides which cell a reader may
    /// see (its own); nothing of another cell is ever read.
    pub async fn list(
        &self,
        cell: &str,
        query: &AdminAuditQuery,
    ) -> Result<AdminAuditPage, AuthError> {
        let prefix = Key::new(cell_prefix(cell))?;
        let after = if !query.page_token.is_empty() {
            if query.page_token.contains('/') {
                return Err(AuthError::InvalidRequest(
                    "page_token is not one of this audit's".into(),
                ));
            }
            Some(Key::new(format!(
                "{}/{}",
                prefix.as_str(),
                query.page_token
            ))?)
        } else if query.since_unix_ms > 0 {
            // Ids start with the time, so this cursor sorts just before the first record at
            // `since_unix_ms`.
            Some(Key::new(format!(
                "{}/{:016}",
                prefix.as_str(),
                query.since_unix_ms
            ))?)
        } else {
            None
        };
        let size = match query.page_size {
            0 => DEFAULT_AUDIT_PAGE,
            n => n.min(MAX_AUDIT_PAGE),
        };
        let page = self.store.list(Some(&prefix), after.as_ref(), size).await?;
        let mut records = Vec::with_capacity(page.keys.len());
        for key in &page.keys {
            let Some(object) = self.store.get(key).await? else {
                continue;
            };
            let record: AdminAuditRecord = serde_json::from_slice(&object.bytes)
                .map_err(|e| AuthError::CorruptRecord(format!("an admin audit record: {e}")))?;
            if record.at_unix_ms >= query.since_unix_ms
                && query.kind.is_none_or(|kind| kind == record.kind)
            {
                records.push(record);
            }
        }
        Ok(AdminAuditPage {
            records,
            next_page_token: page
                .next_start_after
                .map(|key| key.name().to_owned())
                .unwrap_or_default(),
        })
    }
}

/// `admin-audit/<cell>`, the cell written so that it is always one key segment: bytes other than
/// ASCII letters, digits, `-`, `_` and `.` as `%XX` (and a leading `.` too).
fn cell_prefix(cell: &str) -> String {
    let mut segment = String::with_capacity(cell.len());
    for (i, byte) in cell.bytes().enumerate() {
        let plain =
            byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' || (byte == b'.' && i > 0);
        if plain {
            segment.push(char::from(byte));
        } else {
            segment.push_str(&format!("%{byte:02X}"));
        }
    }
    if segment.is_empty() {
        segment.push_str("%00");
    }
    format!("{ADMIN_AUDIT_PREFIX}/{segment}")
}

#[cfg(test)]
mod tests {
    use toolplane_store::MemoryStore;

    use super::*;
    use crate::NewToken;

    fn caller(cell: &str, principal: &str, kind: CallerKind) -> Caller {
        Caller {
            cell: cell.into(),
            role: Role::Admin,
            principal: principal.into(),
            kind,
        }
    }

    fn change(kind: AdminKind, cell: &str, object: &str) -> AdminChange {
        AdminChange::new(kind, "PutProfile", cell, object).summary("profile written")
    }

    #[tokio::test]
    async fn records_name_the_token_and_list_by_cell_in_time_order() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let tokens = TokenStore::new(Arc::new(MemoryStore::default()));
        let ci = tokens
            .create(NewToken {
                name: "ci".into(),
                cell: "a".into(),
                role: Role::Admin,
                expires_at_unix_ms: None,
            })
            .await
            .unwrap();
        let audit = AdminAuditLog::new(store, "catalog").with_tokens(Some(tokens));
        let admin_a = caller("a", &ci.info.id, CallerKind::Token);
        for i in 0..5 {
            audit
                .try_record(&admin_a, change(AdminKind::Profile, "a", &format!("p{i}")))
                .await
                .unwrap();
        }
        let jwt_b = caller("b/x", "alice@example.com", CallerKind::Jwt);
        audit
            .try_record(&jwt_b, change(AdminKind::Policy, "", "platform"))
            .await
            .unwrap();
        audit
            .try_record(
                &Caller::auth_off("default"),
                change(AdminKind::Token, "", "t"),
            )
            .await
            .unwrap();

        let mut seen = Vec::new();
        let mut query = AdminAuditQuery {
            page_size: 2,
            ..AdminAuditQuery::default()
        };
        loop {
            let page = audit.list("a", &query).await.unwrap();
            assert!(page.records.len() <= 2);
            seen.extend(page.records);
            if page.next_page_token.is_empty() {
                break;
            }
            query.page_token = page.next_page_token;
        }
        let objects: Vec<&str> = seen.iter().map(|r| r.object_id.as_str()).collect();
        assert_eq!(objects, ["p0", "p1", "p2", "p3", "p4"]);
        assert!(seen.iter().all(|r| r.who == "ci" && r.service == "catalog"));
        assert!(seen.windows(2).all(|w| w[0].id < w[1].id));

        let b = audit
            .list("b/x", &AdminAuditQuery::default())
            .await
            .unwrap();
        assert_eq!(b.records.len(), 1);
        assert_eq!(b.records[0].who, "alice@example.com");
        assert_eq!(b.records[0].cell, "b/x");
        let off = audit
            .list("default", &AdminAuditQuery::default())
            .await
            .unwrap();
        assert_eq!(off.records[0].who, "anonymous");
        assert!(
            audit
                .list("c", &AdminAuditQuery::default())
                .await
                .unwrap()
                .records
                .is_empty()
        );
    }

    #[tokio::test]
    async fn since_and_kind_filter_and_a_bad_page_token_is_refused() {
        let audit = AdminAuditLog::new(Arc::new(MemoryStore::default()), "mcp-proxy");
        let admin = caller("a", "tok_1", CallerKind::Token);
        let first = audit
            .try_record(&admin, change(AdminKind::Registration, "a", "s1"))
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        let second = audit
            .try_record(&admin, change(AdminKind::Profile, "a", "p1"))
            .await
            .unwrap();
        assert_eq!(first.who, "tok_1", "no token store: the id");
        let since = AdminAuditQuery {
            since_unix_ms: second.at_unix_ms,
            ..AdminAuditQuery::default()
        };
        assert_eq!(audit.list("a", &since).await.unwrap().records, [second]);
        let kind = AdminAuditQuery {
            kind: Some(AdminKind::Registration),
            ..AdminAuditQuery::default()
        };
        assert_eq!(audit.list("a", &kind).await.unwrap().records, [first]);
        let bad = AdminAuditQuery {
            page_token: "../b/x".into(),
            ..AdminAuditQuery::default()
        };
        assert!(audit.list("a", &bad).await.is_err());
        assert!("nope".parse::<AdminKind>().is_err());
        assert_eq!("skill".parse::<AdminKind>().unwrap(), AdminKind::Skill);
    }
}
