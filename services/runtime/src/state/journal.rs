//! The run journal's content: event envelopes, sequence numbers and the groups of records that go
//! to storage together.
//!
//! The runtime is the single writer of a run's journal: one [`Journal`] per run assigns
//! consecutive sequence numbers under a lock held across the append ([`Journal::reserve`]), so
//! records land in the order they were decided. Audit objects a record names travel in the same
//! group and are stored before it. Storing the group is the `context` layer's (through the
//! workspace port); this module never does IO.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::{Mutex, MutexGuard};

use crate::error::RuntimeError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// One journal record: its envelope (sequence, id, time, level, kind, scope, causality) and
/// payload.
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

/// A group of records and the audit objects they name, appended at `expected_seq` as one unit.
#[derive(Debug, Clone)]
pub struct JournalAppend {
    pub run_id: String,
    pub cell_id: String,
    pub expected_seq: u64,
    pub epoch: u64,
    pub records: Vec<Record>,
    pub objects: Vec<AuditObject>,
}

/// The journal's next sequence number, held while one group is stored.
#[derive(Debug)]
pub struct Reservation<'a> {
    journal: &'a Journal,
    next: MutexGuard<'a, u64>,
}

impl Reservation<'_> {
    /// The group the events become, numbered from the reserved sequence number.
    pub fn group(
        &self,
        epoch: u64,
        objects: Vec<AuditObject>,
        events: Vec<Event>,
    ) -> JournalAppend {
        let first = *self.next;
        let ts = now_ms();
        let run_id = &self.journal.run_id;
        let records = events
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                let seq = first + i as u64;
                Record {
                    seq,
                    id: format!("{run_id}:{seq}"),
                    run_id: run_id.clone(),
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
        JournalAppend {
            run_id: run_id.clone(),
            cell_id: self.journal.cell_id.clone(),
            expected_seq: first,
            epoch,
            records,
            objects,
        }
    }

    /// Moves the journal's end past a stored group of `count` records.
    pub fn advance(mut self, count: usize) {
        *self.next += count as u64;
    }
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

    /// Reserves the next sequence number until the returned reservation is advanced or dropped;
    /// refused while the journal's end is not known.
    pub async fn reserve(&self) -> Result<Reservation<'_>, RuntimeError> {
        let next = self.next_seq.lock().await;
        if *next == 0 {
            return Err(RuntimeError::invalid(format!(
                "the journal of run {} was not read back yet; nothing is appended to it",
                self.run_id
            )));
        }
        Ok(Reservation {
            journal: self,
            next,
        })
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    pub fn cell_id(&self) -> &str {
        &self.cell_id
    }

    pub async fn last_seq(&self) -> u64 {
        self.next_seq.lock().await.saturating_sub(1)
    }
}

/// Where a model response of `invocation`'s `round` is stored: `model-responses/<invocation>/
/// round-<n>.json`, with the run's epoch in the name after a takeover (`round-<n>-epoch-<e>.json`),
/// since the runtime that stopped may have stored that round's response already (docs/runtime.md,
/// "Taking a run over").
pub fn response_path(invocation: &str, round: u32, epoch: u64) -> String {
    if epoch > 1 {
        format!("model-responses/{invocation}/round-{round}-epoch-{epoch}.json")
    } else {
        format!("model-responses/{invocation}/round-{round}.json")
    }
}
