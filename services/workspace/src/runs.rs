//! Run workspaces: their manifests (with the run lease epoch), invocation views and per-invocation
//! read-state. Owns the manifest's store key and the epoch rule; must never let a stale epoch
//! mutate anything, nor keep read-state anywhere but in memory (lost read-state fails closed).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use serde::{Deserialize, Serialize};
use toolplane_store::{Key, Precondition, Store, StoreError, Version};

use crate::{
    error::WsError,
    paths::Roots,
    read_state::{self, FileRead},
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The stored manifest of a run workspace (`cells/<cell>/runs/<run>/manifest.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub cell_id: String,
    pub run_id: String,
    pub actor_id: String,
    pub chat_id: String,
    /// The message the run's commits replace or append to (bound at creation or by the first
    /// commit).
    pub message_id: Option<String>,
    /// 1 foreground, 2 background (the proto enum's numbers).
    pub mode: i32,
    pub roots: Roots,
    pub persist_base_version: String,
    pub message_artifact_root: String,
    pub created_at_unix_ms: i64,
    pub epoch: u64,
    /// The proto `RunStatus` number; 0 while open.
    pub status: i32,
    pub finished: bool,
    /// The chat `persist/` version this run promoted, once it did.
    pub persist_promoted: Option<String>,
}

/// A finished run's status when it succeeded (`toolplane.v1.RunStatus.COMPLETED`, the number
/// manifests keep).
pub const STATUS_COMPLETED: i32 = 3;

/// What the skill tools of an invocation may see and read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillAccess {
    pub visible: Vec<String>,
    pub deny: Vec<String>,
    pub max_read_chars_per_call: u32,
    pub max_read_chars_per_run: u32,
}

impl Default for SkillAccess {
    fn default() -> SkillAccess {
        SkillAccess {
            visible: Vec::new(),
            deny: Vec::new(),
            max_read_chars_per_call: toolplane_core::profile::DEFAULT_SKILL_READ_CHARS_PER_CALL,
            max_read_chars_per_run: toolplane_core::profile::DEFAULT_SKILL_READ_CHARS_PER_RUN,
        }
    }
}

impl SkillAccess {
    pub fn can_see(&self, name: &str) -> bool {
        !self.deny.iter().any(|d| d == name || d == "*")
            && self.visible.iter().any(|v| v == name || v == "*")
    }
}

/// The stored view of one invocation (`cells/<cell>/runs/<run>/invocations/<id>.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvocationRecord {
    pub roots: Roots,
    pub skills: SkillAccess,
    pub closed: bool,
}

/// An open invocation: its view and its in-memory read-state.
#[derive(Debug)]
pub struct Invocation {
    pub record: Mutex<InvocationRecord>,
    pub reads: Mutex<HashMap<String, FileRead>>,
}

impl Invocation {
    pub fn record(&self) -> InvocationRecord {
        lock(&self.record).clone()
    }

    pub fn read_state(&self, path: &str) -> Option<FileRead> {
        lock(&self.reads).get(path).cloned()
    }

    pub fn set_read_state(&self, path: &str, state: FileRead) {
        lock(&self.reads).insert(path.to_owned(), state);
    }

    /// Records a read of `path` at `version` ([`read_state::record_read`]).
    pub fn record_read(&self, path: &str, version: &str, full: bool, fragment: &str) {
        let mut reads = lock(&self.reads);
        let state = reads.remove(path);
        reads.insert(
            path.to_owned(),
            read_state::record_read(state, version, full, fragment),
        );
    }
}

/// One run in memory: its manifest (cached, written through with CAS) and invocations.
#[derive(Debug)]
pub struct Run {
    pub record: tokio::sync::Mutex<(RunRecord, Version)>,
    pub invocations: Mutex<HashMap<String, Arc<Invocation>>>,
    /// Characters of skill text the run has returned (reads and search snippets).
    pub skill_chars_used: AtomicU64,
    /// Held shared by a write from its epoch check until it is stored ([`Runs::fenced`]), and
    /// exclusively by a lease acquisition while it raises the epoch: once the raise is done, no
    /// write of an older epoch is still on its way.
    pub fence: tokio::sync::RwLock<()>,
}

/// Store keys of runs.
pub fn manifest_key(cell: &str, run: &str) -> Result<Key, WsError> {
    Ok(Key::new(format!("cells/{cell}/runs/{run}/manifest.json"))?)
}

pub fn invocation_key(cell: &str, run: &str, invocation: &str) -> Result<Key, WsError> {
    Ok(Key::new(format!(
        "cells/{cell}/runs/{run}/invocations/{invocation}.json"
    ))?)
}

fn parse<T: for<'de> Deserialize<'de>>(key: &Key, bytes: &[u8]) -> Result<T, WsError> {
    serde_json::from_slice(bytes).map_err(|e| WsError::io(format!("corrupt record {key}: {e}")))
}

fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, WsError> {
    serde_json::to_vec_pretty(value).map_err(|e| WsError::io(format!("serialise record: {e}")))
}

/// The runs this process has touched.
#[derive(Debug)]
pub struct Runs {
    store: Arc<dyn Store>,
    runs: Mutex<HashMap<(String, String), Arc<Run>>>,
    /// Other replicas share the store: a cached manifest's epoch may be behind, so every epoch
    /// check re-reads it.
    shared: bool,
}

impl Runs {
    pub fn new(store: Arc<dyn Store>) -> Runs {
        Runs {
            store,
            runs: Mutex::new(HashMap::new()),
            shared: false,
        }
    }

    /// The runs of one replica among several over `store`.
    pub fn new_shared(store: Arc<dyn Store>) -> Runs {
        Runs {
            shared: true,
            ..Runs::new(store)
        }
    }

    /// Creates a run's manifest; an identical existing manifest (a retry) is returned as is.
    pub async fn create(&self, record: RunRecord) -> Result<(RunRecord, bool), WsError> {
        let key = manifest_key(&record.cell_id, &record.run_id)?;
        match self
            .store
            .put_cas(&key, to_json(&record)?, Precondition::Absent)
            .await
        {
            Ok(version) => {
                let run = Arc::new(Run {
                    record: tokio::sync::Mutex::new((record.clone(), version)),
                    invocations: Mutex::new(HashMap::new()),
                    skill_chars_used: AtomicU64::new(0),
                    fence: tokio::sync::RwLock::new(()),
                });
                lock(&self.runs).insert((record.cell_id.clone(), record.run_id.clone()), run);
                Ok((record, true))
            }
            Err(StoreError::Conflict { .. }) | Err(StoreError::AlreadyExists { .. }) => {
                let run = self.get(&record.cell_id, &record.run_id).await?;
                let existing = run.record.lock().await.0.clone();
                Ok((existing, false))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A run, loaded from the store on first use.
    pub async fn get(&self, cell: &str, run: &str) -> Result<Arc<Run>, WsError> {
        if let Some(found) = lock(&self.runs).get(&(cell.to_owned(), run.to_owned())) {
            return Ok(Arc::clone(found));
        }
        let key = manifest_key(cell, run)?;
        let Some(object) = self.store.get(&key).await? else {
            return Err(WsError::status(
                "workspace.run_not_found",
                tonic::Code::NotFound,
                format!("no run workspace {run} in cell {cell}"),
            ));
        };
        let record: RunRecord = parse(&key, &object.bytes)?;
        let loaded = Arc::new(Run {
            record: tokio::sync::Mutex::new((record, object.version)),
            invocations: Mutex::new(HashMap::new()),
            skill_chars_used: AtomicU64::new(0),
            fence: tokio::sync::RwLock::new(()),
        });
        let mut runs = lock(&self.runs);
        Ok(Arc::clone(
            runs.entry((cell.to_owned(), run.to_owned()))
                .or_insert(loaded),
        ))
    }

    /// Applies `change` to the run's manifest with CAS (reloading on a conflict with another
    /// replica) and returns the new record.
    pub async fn update<F>(&self, run: &Run, mut change: F) -> Result<RunRecord, WsError>
    where
        F: FnMut(&mut RunRecord) -> Result<bool, WsError>,
    {
        let mut guard = run.record.lock().await;
        for _ in 0..16 {
            let mut next = guard.0.clone();
            if !change(&mut next)? {
                return Ok(guard.0.clone());
            }
            let key = manifest_key(&next.cell_id, &next.run_id)?;
            match self
                .store
                .put_cas(
                    &key,
                    to_json(&next)?,
                    Precondition::Version(guard.1.clone()),
                )
                .await
            {
                Ok(version) => {
                    *guard = (next.clone(), version);
                    return Ok(next);
                }
                Err(StoreError::Conflict { .. }) => {
                    let Some(object) = self.store.get(&key).await? else {
                        return Err(WsError::io(format!("manifest {key} vanished")));
                    };
                    *guard = (parse(&key, &object.bytes)?, object.version);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(WsError::io("manifest update kept conflicting"))
    }

    /// Checks a mutating request's epoch: older than the run's is `workspace.stale_epoch`, newer
    /// raises the run's. On a shared store the manifest is re-read first. With `allow_finished` false, a sealed run refuses the mutation.
    pub async fn check_epoch(
        &self,
        run: &Run,
        epoch: u64,
        allow_finished: bool,
    ) -> Result<RunRecord, WsError> {
        {
            let mut guard = run.record.lock().await;
            self.refresh(&mut guard).await?;
            let record = &guard.0;
            if epoch < record.epoch {
                return Err(stale(epoch, record.epoch));
            }
            if record.finished && !allow_finished {
                return Err(WsError::status(
                    "workspace.run_finished",
                    tonic::Code::FailedPrecondition,
                    format!("run {} is finished; its workspace is sealed", record.run_id),
                ));
            }
            if epoch == record.epoch {
                return Ok(record.clone());
            }
        }
        self.update(run, |record| {
            if epoch < record.epoch {
                return Err(stale(epoch, record.epoch));
            }
            let raise = epoch > record.epoch;
            record.epoch = record.epoch.max(epoch);
            Ok(raise)
        })
        .await
    }

    /// On a shared store, replaces the cached manifest with the stored one when another replica
    /// changed it; nothing otherwise.
    async fn refresh(&self, cached: &mut (RunRecord, Version)) -> Result<(), WsError> {
        if !self.shared {
            return Ok(());
        }
        let key = manifest_key(&cached.0.cell_id, &cached.0.run_id)?;
        let Some(object) = self.store.get(&key).await? else {
            return Err(WsError::io(format!("manifest {key} vanished")));
        };
        if object.version != cached.1 {
            *cached = (parse(&key, &object.bytes)?, object.version);
        }
        Ok(())
    }

    /// The run's manifest as it is now (re-read on a shared store).
    pub async fn current(&self, run: &Run) -> Result<RunRecord, WsError> {
        let mut guard = run.record.lock().await;
        self.refresh(&mut guard).await?;
        Ok(guard.0.clone())
    }

    /// [`Runs::check_epoch`] for a write: the returned guard is held until the write is stored,
    /// so a lease acquisition raising the epoch waits for it.
    pub async fn fenced<'r>(
        &self,
        run: &'r Run,
        epoch: u64,
        allow_finished: bool,
    ) -> Result<(RunRecord, tokio::sync::RwLockReadGuard<'r, ()>), WsError> {
        let guard = run.fence.read().await;
        let record = self.check_epoch(run, epoch, allow_finished).await?;
        Ok((record, guard))
    }

    /// Opens (or re-opens with the same view) an invocation.
    pub async fn open_invocation(
        &self,
        run: &Run,
        cell: &str,
        run_id: &str,
        id: &str,
        record: InvocationRecord,
    ) -> Result<Arc<Invocation>, WsError> {
        let key = invocation_key(cell, run_id, id)?;
        let bytes = to_json(&record)?;
        match self
            .store
            .put_cas(&key, bytes.clone(), Precondition::Absent)
            .await
        {
            Ok(_) => {}
            Err(StoreError::Conflict {
                current: Some(version),
                ..
            }) => {
                let existing = self.store.get(&key).await?;
                let existing: InvocationRecord = match existing {
                    Some(o) => parse(&key, &o.bytes)?,
                    None => return Err(WsError::io(format!("invocation record {key} vanished"))),
                };
                if existing.closed {
                    return Err(WsError::status(
                        "workspace.invocation_closed",
                        tonic::Code::FailedPrecondition,
                        format!("invocation {id} was closed"),
                    ));
                }
                if existing != record {
                    self.store
                        .put_cas(&key, bytes, Precondition::Version(version))
                        .await?;
                }
            }
            Err(e) => return Err(e.into()),
        }
        let invocation = Arc::new(Invocation {
            record: Mutex::new(record),
            reads: Mutex::new(HashMap::new()),
        });
        lock(&run.invocations).insert(id.to_owned(), Arc::clone(&invocation));
        Ok(invocation)
    }

    /// An open invocation; after a restart its view is reloaded with empty read-state.
    pub async fn invocation(
        &self,
        run: &Run,
        cell: &str,
        run_id: &str,
        id: &str,
    ) -> Result<Arc<Invocation>, WsError> {
        if let Some(found) = lock(&run.invocations).get(id) {
            if lock(&found.record).closed {
                return Err(closed(id));
            }
            return Ok(Arc::clone(found));
        }
        let key = invocation_key(cell, run_id, id)?;
        let Some(object) = self.store.get(&key).await? else {
            return Err(WsError::status(
                "workspace.invocation_not_open",
                tonic::Code::FailedPrecondition,
                format!(
                    "invocation {id} has no workspace view; call OpenInvocationWorkspace first"
                ),
            ));
        };
        let record: InvocationRecord = parse(&key, &object.bytes)?;
        if record.closed {
            return Err(closed(id));
        }
        let invocation = Arc::new(Invocation {
            record: Mutex::new(record),
            reads: Mutex::new(HashMap::new()),
        });
        let mut map = lock(&run.invocations);
        Ok(Arc::clone(map.entry(id.to_owned()).or_insert(invocation)))
    }

    /// Closes an invocation: its read-state is dropped and its later calls are refused.
    pub async fn close_invocation(
        &self,
        run: &Run,
        cell: &str,
        run_id: &str,
        id: &str,
    ) -> Result<(), WsError> {
        let key = invocation_key(cell, run_id, id)?;
        if let Some(object) = self.store.get(&key).await? {
            let mut record: InvocationRecord = parse(&key, &object.bytes)?;
            if !record.closed {
                record.closed = true;
                self.store
                    .put_cas(
                        &key,
                        to_json(&record)?,
                        Precondition::Version(object.version),
                    )
                    .await?;
            }
        }
        if let Some(found) = lock(&run.invocations).remove(id) {
            lock(&found.record).closed = true;
        }
        Ok(())
    }

    pub fn skill_budget_use(run: &Run, chars: u64) -> u64 {
        run.skill_chars_used.fetch_add(chars, Ordering::AcqRel) + chars
    }
}

fn closed(id: &str) -> WsError {
    WsError::tool(
        "workspace.invocation_closed",
        format!("invocation {id} was closed; its tool calls are refused"),
    )
}

/// `workspace.stale_epoch`: a request made under an epoch older than the run's.
pub(crate) fn stale(epoch: u64, current: u64) -> WsError {
    WsError::status(
        "workspace.stale_epoch",
        tonic::Code::FailedPrecondition,
        format!("epoch {epoch} is older than the run's epoch {current}"),
    )
}

/// A map of paths to SHA-256, the content of a `persist/` state.
pub type FileMap = BTreeMap<String, String>;
