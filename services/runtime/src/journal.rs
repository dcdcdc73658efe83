//! The run journal's content (FEATURES J1): event envelopes, sequence numbers, and appends through
//! the workspace service, which owns the journal's storage and makes records durable with group
//! commit.
//!
//! The runtime is the single writer of a run's journal: one [`Journal`] per run assigns
//! consecutive sequence numbers under a lock held across the append, so records land in the order
//! they were decided. Audit objects a record names are put before the record (FEATURES E4). A failed
//! append is a system failure: the run cannot go on without its journal.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::Mutex;
use toolplane_proto::v1 as pb;

use crate::error::RuntimeError;
use crate::peers::Peers;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// One journal record: the envelope of FEATURES J1.
#[derive(Debug, Clone)]
pub struct Record {
    pub seq: u64,
    pub id: String,
    pub run_id: String,
    pub timestamp_ms: i64,
    pub level: Level,
    pub kind: &'static str,
    pub payload: Value,
    pub caused_by: Option<String>,
    pub invocation_id: Option<String>,
    pub related: Vec<String>,
}

/// An event before it has a sequence number.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: &'static str,
    pub level: Level,
    pub payload: Value,
    pub invocation_id: Option<String>,
    pub related: Vec<String>,
    pub caused_by: Option<String>,
}

impl Event {
    pub fn new(kind: &'static str, payload: Value) -> Self {
        Event {
            kind,
            level: Level::Info,
            payload,
            invocation_id: None,
            related: Vec::new(),
            caused_by: None,
        }
    }
    pub fn inv(mut self, invocation_id: &str) -> Self {
        self.invocation_id = Some(invocation_id.to_owned());
        self
    }
    pub fn warn(mut self) -> Self {
        self.level = Level::Warn;
        self
    }
    pub fn error(mut self) -> Self {
        self.level = Level::Error;
        self
    }
    pub fn related(mut self, ids: Vec<String>) -> Self {
        self.related = ids;
        self
    }
}

/// An audit object to put (create-only) before the records that name it.
#[derive(Debug, Clone)]
pub struct AuditObject {
    pub path: String,
    pub content: Vec<u8>,
    pub content_type: &'static str,
}

#[derive(Debug)]
pub struct Journal {
    run_id: String,
    cell_id: String,
    next_seq: Mutex<u64>,
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Journal {
    /// A journal whose next sequence number is `next_seq`; 0 means not known yet (a finished run
    /// loaded after a restart: see [`Journal::learn`]).
    pub fn new(run_id: &str, cell_id: &str, next_seq: u64) -> Self {
        Journal {
            run_id: run_id.to_owned(),
            cell_id: cell_id.to_owned(),
            next_seq: Mutex::new(next_seq),
        }
    }

    /// Whether the journal's end is not known yet.
    pub async fn is_unknown(&self) -> bool {
        *self.next_seq.lock().await == 0
    }

    /// Sets the end found in storage, unless it is already known.
    pub async fn learn(&self, last_seq: u64) {
        let mut next = self.next_seq.lock().await;
        if *next == 0 {
            *next = last_seq + 1;
        }
    }

    /// Appends the events as one group, carrying the audit objects they name: the workspace stores
    /// the objects create-only before the records, and one group commit makes both durable.
    /// Returns the records with their sequence numbers.
    pub async fn append(
        &self,
        peers: &Peers,
        epoch: u64,
        objects: Vec<AuditObject>,
        events: Vec<Event>,
    ) -> Result<Vec<Record>, RuntimeError> {
        if events.is_empty() {
            return put_objects(peers, &self.run_id, &self.cell_id, epoch, objects)
                .await
                .map(|()| Vec::new());
        }
        let mut next = self.next_seq.lock().await;
        if *next == 0 {
            return Err(RuntimeError::invalid(format!(
                "the journal of run {} was not read back yet; nothing is appended to it",
                self.run_id
            )));
        }
        let first = *next;
        let ts = now_ms();
        let records: Vec<Record> = events
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                let seq = first + i as u64;
                Record {
                    seq,
                    id: format!("{}:{seq}", self.run_id),
                    run_id: self.run_id.clone(),
                    timestamp_ms: ts,
                    level: e.level,
                    kind: e.kind,
                    payload: e.payload,
                    caused_by: e.caused_by,
                    invocation_id: e.invocation_id,
                    related: e.related,
                }
            })
            .collect();
        let paths: Vec<String> = objects.iter().map(|o| o.path.clone()).collect();
        let req = pb::AppendJournalRequest {
            run_id: self.run_id.clone(),
            expected_seq: first,
            records: records
                .iter()
                .map(crate::convert::journal_event_pb)
                .collect(),
            epoch,
            cell_id: self.cell_id.clone(),
            objects: objects
                .into_iter()
                .map(|o| pb::AuditObjectWrite {
                    path: o.path,
                    content: o.content,
                    content_type: o.content_type.to_owned(),
                })
                .collect(),
        };
        if let Err(status) = peers.append_journal(req).await {
            if is_audit_exists(&status) {
                return Err(duplicate_object(&paths.join(", ")));
            }
            return Err(RuntimeError::journal(format!(
                "appending {} record(s) at seq {first} failed: {}",
                records.len(),
                status.message()
            )));
        }
        *next = first + records.len() as u64;
        Ok(records)
    }

    pub async fn last_seq(&self) -> u64 {
        self.next_seq.lock().await.saturating_sub(1)
    }
}

/// Puts audit objects create-only, concurrently; the journal's group commit makes them durable
/// together with the record that names them.
pub async fn put_objects(
    peers: &Peers,
    run_id: &str,
    cell_id: &str,
    epoch: u64,
    objects: Vec<AuditObject>,
) -> Result<(), RuntimeError> {
    let puts = objects.into_iter().map(|o| {
        let mut ws = peers.workspace();
        let req = pb::PutAuditObjectRequest {
            run_id: run_id.to_owned(),
            path: o.path.clone(),
            content: o.content,
            content_type: o.content_type.to_owned(),
            epoch,
            allow_identical: false,
            sync: false,
            cell_id: cell_id.to_owned(),
        };
        async move { ws.put_audit_object(req).await.map_err(|s| (o.path, s)) }
    });
    for r in futures::future::join_all(puts).await {
        if let Err((path, status)) = r {
            let code = crate::error::status_code_prefix(&status).unwrap_or("");
            if status.code() == tonic::Code::AlreadyExists
                || code.ends_with("audit_exists")
                || code.ends_with("already_exists")
            {
                return Err(RuntimeError::new(
                    toolplane_core::error::MODEL_DUPLICATE_CALL_ID,
                    format!(
                        "the audit object `{path}` already exists: a call id was reused within the invocation"
                    ),
                ));
            }
            return Err(RuntimeError::dependency(format!(
                "storing `{path}` failed: {}",
                status.message()
            )));
        }
    }
    Ok(())
}

fn is_audit_exists(status: &tonic::Status) -> bool {
    let code = crate::error::status_code_prefix(status).unwrap_or("");
    status.code() == tonic::Code::AlreadyExists
        || code.ends_with("audit_exists")
        || code.ends_with("already_exists")
}

/// An audit object that already exists: the objects are named by the call id's digest within the
/// invocation, so this is a call id the provider reused.
fn duplicate_object(path: &str) -> RuntimeError {
    RuntimeError::new(
        toolplane_core::error::MODEL_DUPLICATE_CALL_ID,
        format!(
            "the audit object `{path}` already exists: a call id was reused within the invocation"
        ),
    )
}
