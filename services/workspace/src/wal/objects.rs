//! Audit objects in the log: create-only puts, the check of what a path already holds (pending
//! objects, packed objects, then the run's tree), and reads of an object from memory or from its
//! pack. Must never accept a second object for a path, nor an object above or below another.

use std::{
    collections::BTreeMap,
    io,
    path::Path,
    sync::{Arc, atomic::Ordering},
};

use tokio::sync::oneshot;

use super::{
    RunKey, Wal,
    files::PackLoc,
    frame::{digest16, object_frame},
    io_err,
    journal::RunJournal,
    lock,
    shared::{After, Job, ObjectRef, PendingMap},
};
use crate::{
    engine::now_ms,
    error::WsError,
    paths,
    tree::{Entry, Read},
};

/// An audit object the log holds: in memory until its segment is checkpointed, then in its run's
/// object pack.
#[derive(Debug, Clone)]
pub struct LogObject {
    pub path: String,
    pub size: u64,
    /// When it was put (Unix ms).
    pub put_at_unix_ms: i64,
    pub(super) at: At,
}

/// Reads an object when asked, bytes and put time; blocking (it may wait on a store).
pub type LoadObject = Arc<dyn Fn() -> Result<LogObject, WsError> + Send + Sync>;

#[derive(Clone)]
pub(super) enum At {
    Memory(Arc<Vec<u8>>),
    Pack(Arc<RunJournal>, PackLoc),
    /// Listed, not read yet (an object of a shared store's log).
    Later(LoadObject),
}

impl std::fmt::Debug for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Memory(bytes) => write!(f, "Memory({} bytes)", bytes.len()),
            At::Pack(journal, loc) => f.debug_tuple("Pack").field(journal).field(loc).finish(),
            At::Later(_) => f.write_str("Later"),
        }
    }
}

impl LogObject {
    /// An object held in memory, as the log holds one until its segment is checkpointed.
    pub fn in_memory(path: String, bytes: Arc<Vec<u8>>, put_at_unix_ms: i64) -> LogObject {
        LogObject {
            path,
            size: bytes.len() as u64,
            put_at_unix_ms,
            at: At::Memory(bytes),
        }
    }

    /// An object `load` reads when asked, of a size and put time not known before (both 0; see
    /// [`LogObject::loaded`]): a listing of a shared store's objects hands these out so that only
    /// the objects a caller reads are fetched, each when it is read.
    pub fn later(path: String, load: LoadObject) -> LogObject {
        LogObject {
            path,
            size: 0,
            put_at_unix_ms: 0,
            at: At::Later(load),
        }
    }

    /// The object with its size and put time known: a listed one read from its store
    /// (blocking), any other as it is.
    pub fn loaded(&self) -> Result<LogObject, WsError> {
        match &self.at {
            At::Later(load) => load(),
            _ => Ok(self.clone()),
        }
    }

    /// The object's bytes. Blocking: a checkpointed object is read from its pack, a listed one
    /// from its store.
    pub fn read(&self) -> Result<Arc<Vec<u8>>, WsError> {
        match &self.at {
            At::Memory(bytes) => Ok(Arc::clone(bytes)),
            At::Later(load) => load()?.read(),
            At::Pack(journal, loc) => journal
                .files
                .read_object(&journal.key, &self.path, loc)
                .map(Arc::new),
        }
    }
}

/// What a log's map of objects (pending or checkpointed) says of a put at `path`: the same
/// object, another one, one above it or below it — or nothing.
pub(super) fn held_in<V>(
    map: &BTreeMap<String, V>,
    path: &str,
    same: impl Fn(&V) -> bool,
) -> Option<Held> {
    if let Some(v) = map.get(path) {
        return Some(if same(v) {
            Held::Same
        } else {
            Held::Other(format!("{path} exists"))
        });
    }
    for (i, _) in path.match_indices('/') {
        if map.contains_key(&path[..i]) {
            return Some(Held::Other(format!("{} is an object", &path[..i])));
        }
    }
    let below = format!("{path}/");
    map.range(below.clone()..)
        .next()
        .is_some_and(|(p, _)| p.starts_with(&below))
        .then(|| Held::Other(format!("{path} is a folder")))
}

/// What a put finds at an object's path.
pub(super) enum Held {
    Free,
    /// The same bytes are there already.
    Same,
    /// Something else is there (why).
    Other(String),
}

pub(super) fn audit_exists(message: String) -> WsError {
    WsError::status(
        "workspace.audit_exists",
        tonic::Code::AlreadyExists,
        message,
    )
}

pub(super) fn pending_entry(o: &ObjectRef) -> LogObject {
    LogObject::in_memory(o.path.clone(), Arc::clone(&o.bytes), o.put_at)
}

pub(super) fn packed_entry(journal: &Arc<RunJournal>, path: String, loc: PackLoc) -> LogObject {
    LogObject {
        path,
        size: loc.size,
        put_at_unix_ms: loc.put_at,
        at: At::Pack(Arc::clone(journal), loc),
    }
}

impl Wal {
    /// What `path` of a run holds now, as seen by a create-only put: the log's objects (pending,
    /// then checkpointed), then the run's tree. A path under an object, or above one, is taken
    /// too. The tree is probed in place: a few `lstat`s of a local directory.
    pub(super) fn held(
        &self,
        journal: &RunJournal,
        pending: Option<&BTreeMap<String, ObjectRef>>,
        path: &str,
        bytes: &[u8],
    ) -> Result<Held, WsError> {
        if let Some(held) = pending.and_then(|p| held_in(p, path, |o| o.bytes.as_slice() == bytes))
        {
            return Ok(held);
        }
        {
            let index = lock(&journal.objects);
            let digest = || digest16(bytes);
            if let Some(held) = held_in(&index, path, |loc| {
                loc.size == bytes.len() as u64 && loc.digest == digest()
            }) {
                return Ok(held);
            }
        }
        let base = self.tree.run_dir(&journal.key.0, &journal.key.1);
        if !self.tree_may_hold_objects(journal, &base)? {
            return Ok(Held::Free);
        }
        Ok(match self.tree.probe(&base, path)? {
            Entry::Absent => Held::Free,
            Entry::UnderFile => Held::Other(format!("a parent folder of {path} is a file")),
            Entry::Dir => Held::Other(format!("{path} is a folder")),
            // A model cannot write such a name (it is reserved for the object), but an older
            // version let it: that file is the model's, never this object, even with the same
            // bytes.
            Entry::File if paths::is_writable_audit_path(path) => {
                Held::Other(format!("{path} was written as a file"))
            }
            Entry::File => match self.tree.read(&base, path)? {
                Read::File(existing) if existing == bytes => Held::Same,
                _ => Held::Other(format!("{path} exists")),
            },
        })
    }

    /// Whether the run's tree may have a file or folder at an audit path, so that a put must
    /// probe the tree: only a run an older version wrote, which kept audit objects as tree files
    /// (`tool-args/`, `input/`, …) or let a model write `summaries/<name>-result.md`. The tools
    /// create no such entry (no audit root but `summaries/` is writable, and there those names
    /// are reserved), so this is found once per load: a few `lstat`s and one listing of
    /// `summaries/` instead of a probe per object.
    fn tree_may_hold_objects(&self, journal: &RunJournal, base: &Path) -> Result<bool, WsError> {
        if let Some(&found) = journal.tree_objects.get() {
            return Ok(found);
        }
        let mut found = false;
        for root in paths::AUDIT_ROOTS {
            match (root, self.tree.probe(base, root)?) {
                (_, Entry::Absent) => {}
                ("summaries", Entry::Dir) => {
                    let dir = base.join(root);
                    found = match self.tree.fs().read_dir(&dir) {
                        Ok(entries) => entries.iter().any(|e| {
                            e.name
                                .to_str()
                                .is_none_or(|n| paths::is_audit_path(&format!("{root}/{n}")))
                        }),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                        Err(e) => return Err(io_err("list", &dir, e)),
                    };
                }
                _ => found = true,
            }
            if found {
                break;
            }
        }
        let _ = journal.tree_objects.set(found);
        Ok(found)
    }

    /// Marks objects pending (readable at once, durable with the group that carries them).
    pub(super) fn hold(&self, pending: &mut PendingMap, key: &RunKey, objects: &[ObjectRef]) {
        let run = pending.entry(key.clone()).or_default();
        for o in objects {
            self.shared
                .pending_bytes
                .fetch_add(o.bytes.len() as u64, Ordering::AcqRel);
            self.shared.pending_count.fetch_add(1, Ordering::AcqRel);
            run.insert(o.path.clone(), o.clone());
        }
    }

    /// Refuses a put at a path the log or the tree already holds.
    pub(super) fn check_free(
        &self,
        journal: &RunJournal,
        pending: Option<&BTreeMap<String, ObjectRef>>,
        o: &ObjectRef,
        allow_identical: bool,
    ) -> Result<bool, WsError> {
        match self.held(journal, pending, &o.path, &o.bytes)? {
            Held::Free => Ok(true),
            Held::Same if allow_identical => Ok(false),
            Held::Same => Err(audit_exists(format!(
                "{} exists; audit objects are never overwritten",
                o.path
            ))),
            Held::Other(why) => Err(audit_exists(format!(
                "{why}; audit objects are never overwritten"
            ))),
        }
    }

    /// Stores an audit object create-only through the log. Returns `false` when an identical
    /// object already existed and `allow_identical` was set. With `sync`, waits until the object
    /// is durable in the log; otherwise it becomes durable with the next group (before any
    /// journal record appended after this call). Either way it is readable at once.
    pub async fn put_object(
        self: &Arc<Self>,
        key: &RunKey,
        path: &str,
        bytes: Vec<u8>,
        sync: bool,
        allow_identical: bool,
    ) -> Result<bool, WsError> {
        self.check()?;
        self.backpressure().await;
        let object = ObjectRef {
            key: key.clone(),
            path: path.to_owned(),
            bytes: Arc::new(bytes),
            put_at: now_ms(),
        };
        let journal = self.journal(key).await?;
        // Built before the log's lock of pending objects is taken, as in `claim`.
        let mut frames = Vec::with_capacity(object.bytes.len() + object.path.len() + 64);
        object_frame(&mut frames, &object);
        let rx = {
            let mut pending = lock(&self.shared.pending);
            if !self.check_free(&journal, pending.get(key), &object, allow_identical)? {
                return Ok(false);
            }
            let (tx, rx) = oneshot::channel();
            self.send(Job::Append {
                frames,
                after: vec![After::Object(object.clone())],
                ack: sync.then_some(tx),
            })?;
            self.hold(&mut pending, key, std::slice::from_ref(&object));
            rx
        };
        if sync {
            Self::wait(rx).await?;
        }
        Ok(true)
    }

    /// The audit object at `path` of a run, if the log holds one (its bytes are read with
    /// [`LogObject::read`]).
    pub async fn object(&self, key: &RunKey, path: &str) -> Result<Option<LogObject>, WsError> {
        if !paths::is_audit_path(path) {
            return Ok(None);
        }
        if let Some(o) = lock(&self.shared.pending)
            .get(key)
            .and_then(|run| run.get(path))
        {
            return Ok(Some(pending_entry(o)));
        }
        let journal = self.journal(key).await?;
        let loc = lock(&journal.objects).get(path).copied();
        Ok(loc.map(|loc| packed_entry(&journal, path.to_owned(), loc)))
    }

    /// The bytes of the audit object at `path` of a run, if the log holds one.
    pub async fn object_bytes(
        &self,
        key: &RunKey,
        path: &str,
    ) -> Result<Option<Arc<Vec<u8>>>, WsError> {
        match self.object(key, path).await? {
            None => Ok(None),
            Some(LogObject {
                at: At::Memory(bytes),
                ..
            }) => Ok(Some(bytes)),
            Some(o) => tokio::task::spawn_blocking(move || o.read())
                .await
                .map_err(|e| WsError::io(format!("audit read task failed: {e}")))?
                .map(Some),
        }
    }

    /// The audit objects of a run under a path prefix, keyed (and ordered) by path.
    pub async fn objects_under(
        &self,
        key: &RunKey,
        prefix: &str,
    ) -> Result<BTreeMap<String, LogObject>, WsError> {
        if !paths::may_hold_audit_paths(prefix) {
            return Ok(BTreeMap::new());
        }
        let mut out: BTreeMap<String, LogObject> = BTreeMap::new();
        {
            let pending = lock(&self.shared.pending);
            if let Some(run) = pending.get(key) {
                for (p, o) in run
                    .range(prefix.to_owned()..)
                    .take_while(|(p, _)| p.starts_with(prefix))
                {
                    out.insert(p.clone(), pending_entry(o));
                }
            }
        }
        let journal = self.journal(key).await?;
        let index = lock(&journal.objects);
        for (p, loc) in index
            .range(prefix.to_owned()..)
            .take_while(|(p, _)| p.starts_with(prefix))
        {
            out.entry(p.clone())
                .or_insert_with(|| packed_entry(&journal, p.clone(), *loc));
        }
        Ok(out)
    }
}
