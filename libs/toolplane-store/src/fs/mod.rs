//! The local filesystem backend. Owns the on-disk layout under one root directory and the order of
//! writes and fsyncs that makes every put atomic and durable; must never follow a symlink inside
//! the root, replace a create-only object, or acknowledge a write before it is durable.
//!
//! Layout: key `a/b/c` is the file `<root>/a/b/c`. The backend's own files live in
//! `<root>/.toolplane/` (a segment no key may use): `tmp/<session>/` holds the temp files of one
//! open store, guarded by the lock file `tmp/<session>.lock`; `locks/<nn>` are the 256 lock
//! stripes that serialise compare-and-swap across processes.
//!
//! Write protocol:
//! - `put_create`: write a temp file, fsync it, `link(2)` it to the final name (which fails if
//!   the name exists, so it never overwrites, even against other processes), fsync the final
//!   directory, fsync the parent of every directory on the path not yet known to be durable.
//! - `put_cas`: under the key's lock (an in-process mutex, then a cross-process `flock`), read the
//!   current version and compare; write and fsync a temp file; `rename(2)` it over the final name
//!   (or `link(2)` when the precondition is `Absent`, so it can not replace an object a concurrent
//!   `put_create` made); fsync the directories as above.
//!
//! `get` and `head` read and hash the whole object (the version is the SHA-256 of the bytes); no
//! lock is taken, since `rename` and `link` swap whole files atomically.
//!
//! Limits: symlink checks are `lstat`s of each path component before use, so a symlink planted
//! concurrently by someone with write access to the root can race them (reads re-check the
//! opened file against the path); the root belongs to toolplane alone. Between processes sharing
//! a root, atomicity holds (`link`, `flock`); a directory one process created is fsynced by
//! whichever process first puts into it without knowing it durable (a process that removes an
//! empty directory another process still remembers as durable is the one gap; it needs a crash
//! in that window to matter).
//!
//! Temp files live in a per-session directory rather than next to their final name so that
//! cleaning up after a crash reads one small directory at open instead of walking the whole store;
//! `link` and `rename` work across directories of one filesystem, and nothing about the temp
//! file's own directory entry needs to be durable.

mod key_locks;
mod layer;
mod sessions;
mod store_fs;
mod store_fs_keys;
mod store_fs_local;
mod walk;

use std::{
    collections::HashSet,
    io,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, MutexGuard, PoisonError, RwLock,
        atomic::{AtomicU64, Ordering},
    },
};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

pub use layer::{DirEntry, FileKind, Fs, FsFile, FsLock, RealFs};
pub use store_fs::{MAX_DIR_ENTRIES, StoreFs};

use key_locks::KeyLocks;
use sessions::{clean_dead_sessions, session_name};
use walk::Walk;

use crate::{
    Key, ListPage, Object, Precondition, Store, StoreError, StoreOptions, Version,
    store::clamp_limit,
};

/// The directory under the root holding the backend's own files.
pub const META_DIR: &str = ".toolplane";
const TMP_DIR: &str = "tmp";
const LOCKS_DIR: &str = "locks";
const LOCK_SUFFIX: &str = ".lock";
const TEMP_FILE_PREFIX: &str = "put-";
/// Bound on `durable_dirs`; past it the set starts over, which costs a few extra fsyncs and
/// keeps a long-running service (one directory per run) from growing it without end.
const MAX_KNOWN_DURABLE_DIRS: usize = 1 << 16;
/// How often a put retries when the directories on its key's path change under it (another
/// writer removing an empty directory); each retry needs a concurrent change, so this is plenty.
const PLACE_ATTEMPTS: usize = 16;

/// Distinguishes sessions of stores opened in one process within one clock tick.
static SESSION_SEQ: AtomicU64 = AtomicU64::new(0);

/// A [`Store`] on a local filesystem; see the module docs for the layout and write protocol.
///
/// Cheap to clone; all clones share one session. Several processes may open the same root:
/// create-only and CAS stay atomic between them.
#[derive(Debug, Clone)]
pub struct FsStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    fs: Arc<dyn Fs>,
    root: PathBuf,
    /// `<root>/.toolplane/tmp`: one directory per session for its temp files.
    tmp: PathBuf,
    /// This session's temp directory and its lock, made by the first write (an open that only
    /// reads creates nothing and syncs nothing).
    session: Mutex<Option<Session>>,
    locks_dir: PathBuf,
    options: StoreOptions,
    key_locks: KeyLocks,
    /// Held shared while a put creates directories and links into them, exclusively while an
    /// empty directory is removed, so no put links into a directory being removed and
    /// `durable_dirs` never names a directory that was removed and recreated behind its back.
    tree: RwLock<()>,
    /// Directories whose entry in their parent this session has fsynced (or found fsynced), so a
    /// put pays for the parents' fsyncs once per directory instead of once per put.
    durable_dirs: Mutex<HashSet<PathBuf>>,
    temp_seq: AtomicU64,
}

#[derive(Debug)]
struct Session {
    dir: PathBuf,
    /// Held for the session's life; its release (even by a crash) lets the next session clean up.
    _lock: Box<dyn FsLock>,
}

/// What a key's path holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Absent,
    /// A proper prefix of the key is an object.
    UnderObject,
    File,
    Dir,
}

impl FsStore {
    /// Opens (creating if needed) a store rooted at `root` on the real filesystem, and removes
    /// temp files that crashed sessions left behind.
    pub async fn open(
        root: impl Into<PathBuf>,
        options: StoreOptions,
    ) -> Result<FsStore, StoreError> {
        let root = root.into();
        let inner = spawn_blocking(move || {
            let created = create_root(&root)?;
            // The root's own path may run through symlinks (`/tmp` on some systems): only what
            // lies inside the root is never followed.
            let root = std::fs::canonicalize(&root)
                .map_err(|e| StoreError::io(format!("resolve store root {}", root.display()), e))?;
            let fs: Arc<dyn Fs> = Arc::new(RealFs);
            for dir in created {
                if let Some(parent) = dir.parent() {
                    fs.sync_dir(parent)
                        .map_err(|e| io_at("sync directory", parent, e))?;
                }
            }
            Inner::open(fs, root, options)
        })
        .await?;
        Ok(FsStore {
            inner: Arc::new(inner),
        })
    }

    /// Opens a store at `root` on the given filesystem layer (a simulated or recording one in
    /// tests). `root` must be an absolute path to an existing directory.
    pub async fn open_with_fs(
        fs: Arc<dyn Fs>,
        root: impl Into<PathBuf>,
        options: StoreOptions,
    ) -> Result<FsStore, StoreError> {
        let root = root.into();
        let inner = spawn_blocking(move || Inner::open(fs, root, options)).await?;
        Ok(FsStore {
            inner: Arc::new(inner),
        })
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    async fn blocking<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        spawn_blocking(move || work(&inner)).await
    }
}

/// Runs blocking IO off the async workers. The work runs to completion even if the caller's
/// future is dropped, so a put is never abandoned between its steps (a crash is another matter,
/// and the write protocol covers it).
async fn spawn_blocking<T, F>(work: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StoreError::io("blocking store task failed", io::Error::other(e)))?
}

/// Creates `root` and missing ancestors; returns the directories it created, outermost first.
fn create_root(root: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let mut missing = Vec::new();
    let mut dir = Some(root);
    // A relative root's last ancestor is the empty path: the working directory, which exists.
    while let Some(path) = dir.filter(|p| !p.as_os_str().is_empty()) {
        match std::fs::symlink_metadata(path) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(path.to_path_buf()),
            Err(e) => return Err(io_at("inspect store root", path, e)),
        }
        dir = path.parent();
    }
    missing.reverse();
    for path in &missing {
        match std::fs::create_dir(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_at("create store root", path, e)),
        }
    }
    Ok(missing)
}

fn io_at(what: &str, path: &Path, source: io::Error) -> StoreError {
    StoreError::io(format!("{what} {}", path.display()), source)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded sets are updated by single inserts/removes; a panic elsewhere can not leave
    // them inconsistent, so a poisoned lock is still usable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Inner {
    fn open(fs: Arc<dyn Fs>, root: PathBuf, options: StoreOptions) -> Result<Inner, StoreError> {
        match fs.symlink_metadata(&root) {
            Ok(FileKind::Dir) => {}
            Ok(_) => {
                return Err(io_at(
                    "open store root",
                    &root,
                    io::Error::new(
                        io::ErrorKind::NotADirectory,
                        "store root is not a directory",
                    ),
                ));
            }
            Err(e) => return Err(io_at("open store root", &root, e)),
        }
        let meta = root.join(META_DIR);
        let tmp = meta.join(TMP_DIR);
        let locks_dir = meta.join(LOCKS_DIR);
        let mut created = false;
        for dir in [&meta, &tmp, &locks_dir] {
            created |= ensure_dir(fs.as_ref(), dir)?;
        }
        if created {
            for dir in [&root, &meta] {
                fs.sync_dir(dir)
                    .map_err(|e| io_at("sync directory", dir, e))?;
            }
        }
        // Temp files a dead session left go now, whether or not this one writes.
        clean_dead_sessions(fs.as_ref(), &tmp, "")?;
        Ok(Inner {
            fs,
            root,
            tmp,
            session: Mutex::new(None),
            locks_dir,
            options,
            key_locks: KeyLocks::default(),
            tree: RwLock::new(()),
            durable_dirs: Mutex::new(HashSet::new()),
            temp_seq: AtomicU64::new(0),
        })
    }

    /// This session's temp directory, made on first use: the root's parent is synced (the root
    /// may have been created by a process that never synced it; once per session makes
    /// everything below it safe to build on), the session's lock taken and its directory
    /// created.
    fn session_dir(&self) -> Result<PathBuf, StoreError> {
        let mut session = lock(&self.session);
        if let Some(s) = session.as_ref() {
            return Ok(s.dir.clone());
        }
        if let Some(parent) = self.root.parent() {
            self.fs
                .sync_dir(parent)
                .map_err(|e| io_at("sync directory", parent, e))?;
        }
        let name = session_name();
        let lock_path = self.tmp.join(format!("{name}{LOCK_SUFFIX}"));
        // Lock first, then create the directory: a session directory whose lock is free belongs
        // to a dead session.
        let session_lock = self
            .fs
            .lock(&lock_path)
            .map_err(|e| io_at("lock session", &lock_path, e))?;
        let dir = self.tmp.join(&name);
        self.fs
            .create_dir(&dir)
            .map_err(|e| io_at("create session directory", &dir, e))?;
        *session = Some(Session {
            dir: dir.clone(),
            _lock: session_lock,
        });
        Ok(dir)
    }

    fn path_of(&self, key: &Key) -> PathBuf {
        let mut path = self.root.clone();
        path.extend(key.segments());
        path
    }

    /// Looks at each component of `key`'s path without following anything.
    fn probe(&self, key: &Key) -> Result<Probe, StoreError> {
        let mut path = self.root.clone();
        let mut segments = key.segments().peekable();
        while let Some(segment) = segments.next() {
            path.push(segment);
            let last = segments.peek().is_none();
            match self.fs.symlink_metadata(&path) {
                Ok(FileKind::Dir) if last => return Ok(Probe::Dir),
                Ok(FileKind::Dir) => {}
                Ok(FileKind::File) if last => return Ok(Probe::File),
                Ok(FileKind::File) => return Ok(Probe::UnderObject),
                Ok(kind) => return Err(escape(path, kind)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Probe::Absent),
                Err(e) => return Err(io_at("inspect", &path, e)),
            }
        }
        // A key has at least one segment, so the loop returned.
        Ok(Probe::Absent)
    }

    fn read_object(&self, key: &Key) -> Result<Option<Object>, StoreError> {
        if self.probe(key)? != Probe::File {
            return Ok(None);
        }
        let path = self.path_of(key);
        match self.fs.read(&path) {
            Ok(bytes) => Ok(Some(Object::new(bytes))),
            // Deleted (or turned into a directory) between the probe and the read.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::IsADirectory
                ) =>
            {
                Ok(None)
            }
            Err(e)
                if e.get_ref()
                    .is_some_and(|inner| inner.is::<layer::SwappedForSymlink>()) =>
            {
                Err(StoreError::Escape {
                    path,
                    what: "symlink inside the store root",
                })
            }
            Err(e) => Err(io_at("read", &path, e)),
        }
    }

    fn current_version(&self, key: &Key) -> Result<Option<Version>, StoreError> {
        Ok(self.read_object(key)?.map(|object| object.version))
    }

    /// Writes `bytes` to a new temp file in this session's directory and fsyncs it.
    fn write_temp(&self, bytes: &[u8]) -> Result<PathBuf, StoreError> {
        let seq = self.temp_seq.fetch_add(1, Ordering::Relaxed);
        let path = self.session_dir()?.join(format!("{TEMP_FILE_PREFIX}{seq}"));
        let mut file = self
            .fs
            .create_new(&path)
            .map_err(|e| io_at("create temp file", &path, e))?;
        let written = file.write_all(bytes).and_then(|()| file.sync());
        drop(file);
        if let Err(e) = written {
            self.discard_temp(&path);
            return Err(io_at("write temp file", &path, e));
        }
        Ok(path)
    }

    /// Best effort: a temp file that survives (a crash, a failing disk) is removed at next open.
    fn discard_temp(&self, path: &Path) {
        let _ = self.fs.remove_file(path);
    }

    /// Creates the missing directories on `key`'s path. Returns those whose entry in their parent
    /// is not known to be durable (the caller fsyncs the parents once the object is in place).
    /// Call with `tree` held shared.
    fn ensure_parent_dirs(&self, key: &Key) -> Result<Vec<PathBuf>, StoreError> {
        let mut unsynced = Vec::new();
        let mut path = self.root.clone();
        let segments: Vec<&str> = key.segments().collect();
        let parents = &segments[..segments.len().saturating_sub(1)];
        for segment in parents {
            path.push(segment);
            let mut created = false;
            let mut attempts = 0;
            loop {
                attempts += 1;
                match self.fs.symlink_metadata(&path) {
                    Ok(FileKind::Dir) => break,
                    Ok(FileKind::File) => {
                        return Err(StoreError::KeyCollision {
                            key: key.clone(),
                            reason: "an ancestor of the key is an object",
                        });
                    }
                    Ok(kind) => return Err(escape(path, kind)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 3 => {
                        match self.fs.create_dir(&path) {
                            Ok(()) => {
                                created = true;
                                break;
                            }
                            // Someone else made it (a directory, or an object): look again.
                            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                            Err(e) => return Err(io_at("create directory", &path, e)),
                        }
                    }
                    Err(e) => return Err(io_at("inspect", &path, e)),
                }
            }
            if created || !lock(&self.durable_dirs).contains(&path) {
                unsynced.push(path.clone());
            }
        }
        Ok(unsynced)
    }

    /// Makes a just-placed object at `final_path` durable: its directory, then the entry of every
    /// directory on the path that is not yet known to be durable.
    fn sync_placed(&self, final_path: &Path, unsynced: Vec<PathBuf>) -> Result<(), StoreError> {
        let Some(parent) = final_path.parent() else {
            return Ok(());
        };
        self.fs
            .sync_dir(parent)
            .map_err(|e| io_at("sync directory", parent, e))?;
        let mut synced: HashSet<&Path> = HashSet::from([parent]);
        for dir in unsynced.iter().rev() {
            if let Some(dir_parent) = dir.parent()
                && synced.insert(dir_parent)
            {
                self.fs
                    .sync_dir(dir_parent)
                    .map_err(|e| io_at("sync directory", dir_parent, e))?;
            }
        }
        let mut durable_dirs = lock(&self.durable_dirs);
        if durable_dirs.len() + unsynced.len() > MAX_KNOWN_DURABLE_DIRS {
            durable_dirs.clear();
        }
        durable_dirs.extend(unsynced);
        Ok(())
    }

    /// Puts the synced temp file in place as `key`: with `link(2)` (never replaces anything) or,
    /// when `replace`, with `rename(2)`; then syncs. Retries when directories on the path change
    /// underneath.
    fn place(&self, key: &Key, temp: &Path, replace: bool) -> Result<(), StoreError> {
        let final_path = self.path_of(key);
        for _ in 0..PLACE_ATTEMPTS {
            let failure = {
                let _tree = self.tree.read().unwrap_or_else(PoisonError::into_inner);
                let unsynced = self.ensure_parent_dirs(key)?;
                let placed = if replace {
                    self.fs.rename(temp, &final_path)
                } else {
                    self.fs.hard_link(temp, &final_path)
                };
                match placed {
                    Ok(()) => return self.sync_placed(&final_path, unsynced),
                    Err(e) => e,
                }
            };
            match failure.kind() {
                io::ErrorKind::AlreadyExists
                | io::ErrorKind::IsADirectory
                | io::ErrorKind::DirectoryNotEmpty => match self.probe(key)? {
                    Probe::File if !replace => {
                        return Err(StoreError::AlreadyExists { key: key.clone() });
                    }
                    Probe::Dir => {
                        if !self.remove_empty_tree(&final_path)? {
                            return Err(StoreError::KeyCollision {
                                key: key.clone(),
                                reason: "keys exist below the key",
                            });
                        }
                    }
                    Probe::UnderObject => {
                        return Err(StoreError::KeyCollision {
                            key: key.clone(),
                            reason: "an ancestor of the key is an object",
                        });
                    }
                    // Gone again, or replaced meanwhile: try again.
                    Probe::Absent | Probe::File => {}
                },
                // A directory on the path vanished or changed between its check and the link.
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => {}
                _ => return Err(io_at("place object", &final_path, failure)),
            }
        }
        Err(io_at(
            "place object",
            &final_path,
            io::Error::other("the key's directories kept changing; gave up"),
        ))
    }

    /// Removes `dir` if it holds nothing but empty directories (what a deleted subtree or a put
    /// that crashed after creating directories leaves), so its name can become an object, as it
    /// could on every other backend. Returns whether it was removed.
    fn remove_empty_tree(&self, dir: &Path) -> Result<bool, StoreError> {
        let _tree = self.tree.write().unwrap_or_else(PoisonError::into_inner);
        let mut dirs = Vec::new();
        if !self.collect_empty_tree(dir, &mut dirs)? {
            return Ok(false);
        }
        // Forget them before removing, so no put trusts a stale entry afterwards.
        lock(&self.durable_dirs).retain(|known| !known.starts_with(dir));
        // Deepest first: `collect_empty_tree` pushes parents before children.
        for path in dirs.iter().rev() {
            match self.fs.remove_dir(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                // Another process put a key there meanwhile.
                Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => return Ok(false),
                Err(e) => return Err(io_at("remove empty directory", path, e)),
            }
        }
        Ok(true)
    }

    fn collect_empty_tree(&self, dir: &Path, dirs: &mut Vec<PathBuf>) -> Result<bool, StoreError> {
        dirs.push(dir.to_path_buf());
        let entries = self
            .fs
            .read_dir(dir)
            .map_err(|e| io_at("read directory", dir, e))?;
        for entry in entries {
            let path = dir.join(&entry.name);
            match entry.kind {
                FileKind::Dir => {
                    if !self.collect_empty_tree(&path, dirs)? {
                        return Ok(false);
                    }
                }
                FileKind::File => return Ok(false),
                kind => return Err(escape(path, kind)),
            }
        }
        Ok(true)
    }

    fn put_create(&self, key: &Key, bytes: &[u8]) -> Result<Version, StoreError> {
        let version = Version::of(bytes);
        let temp = self.write_temp(bytes)?;
        let placed = self.place(key, &temp, false);
        self.discard_temp(&temp);
        placed.map(|()| version)
    }

    fn lock_stripe(&self, key: &Key) -> Result<Box<dyn FsLock>, StoreError> {
        // 256 stripes, one per value of the key hash's first byte: bounded files, and two keys
        // share a stripe (and wait on each other across processes) rarely.
        let stripe = Sha256::digest(key.as_str().as_bytes())[0];
        let path = self.locks_dir.join(format!("{stripe:02x}"));
        self.fs.lock(&path).map_err(|e| io_at("lock", &path, e))
    }

    /// Call with the key's in-process lock held.
    fn put_cas(
        &self,
        key: &Key,
        bytes: &[u8],
        expected: Precondition,
    ) -> Result<Version, StoreError> {
        let _stripe = self.lock_stripe(key)?;
        let current = self.current_version(key)?;
        if !expected.holds_for(current.as_ref()) {
            return Err(StoreError::Conflict {
                key: key.clone(),
                expected,
                current,
            });
        }
        let version = Version::of(bytes);
        let temp = self.write_temp(bytes)?;
        // `put_create` takes no lock, so an absent key may appear at any moment: only `link`
        // can create it without replacing what a concurrent creator wrote.
        let replace = current.is_some();
        let placed = self.place(key, &temp, replace);
        self.discard_temp(&temp);
        match placed {
            Ok(()) => Ok(version),
            Err(StoreError::AlreadyExists { .. }) => Err(StoreError::Conflict {
                key: key.clone(),
                expected,
                current: self.current_version(key)?,
            }),
            Err(e) => Err(e),
        }
    }

    /// Call with the key's in-process lock held.
    fn delete(&self, key: &Key, expected: Option<&Version>) -> Result<bool, StoreError> {
        let _stripe = self.lock_stripe(key)?;
        let current = self.current_version(key)?;
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
        let path = self.path_of(key);
        match self.fs.remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_at("delete", &path, e)),
        }
        if let Some(parent) = path.parent() {
            self.fs
                .sync_dir(parent)
                .map_err(|e| io_at("sync directory", parent, e))?;
        }
        Ok(true)
    }

    fn list(
        &self,
        prefix: Option<&Key>,
        start_after: Option<&Key>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let limit = clamp_limit(limit);
        let (dir, key_prefix) = match prefix {
            None => (self.root.clone(), String::new()),
            Some(prefix) => match self.probe(prefix)? {
                Probe::Dir => (self.path_of(prefix), format!("{prefix}/")),
                _ => return Ok(ListPage::default()),
            },
        };
        let mut keys = Vec::new();
        let walk = Walk {
            start_after: start_after.map(Key::as_str),
            want: limit + 1,
        };
        walk.dir(self, &dir, &key_prefix, &mut keys)?;
        let more = keys.len() > limit;
        keys.truncate(limit);
        let next_start_after = if more { keys.last().cloned() } else { None };
        Ok(ListPage {
            keys,
            next_start_after,
        })
    }
}

fn escape(path: PathBuf, kind: FileKind) -> StoreError {
    let what = match kind {
        FileKind::Symlink => "symlink inside the store root",
        _ => "special file inside the store root",
    };
    StoreError::Escape { path, what }
}

/// Makes sure `dir` is a directory; returns whether it created it.
fn ensure_dir(fs: &dyn Fs, dir: &Path) -> Result<bool, StoreError> {
    match fs.symlink_metadata(dir) {
        Ok(FileKind::Dir) => Ok(false),
        Ok(kind) => Err(escape(dir.to_path_buf(), kind)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => match fs.create_dir(dir) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io_at("create directory", dir, e)),
        },
        Err(e) => Err(io_at("inspect", dir, e)),
    }
}

#[async_trait]
impl Store for FsStore {
    async fn put_create(&self, key: &Key, bytes: Vec<u8>) -> Result<Version, StoreError> {
        self.inner.options.check_size(key, bytes.len())?;
        let key = key.clone();
        self.blocking(move |inner| inner.put_create(&key, &bytes))
            .await
    }

    async fn put_cas(
        &self,
        key: &Key,
        bytes: Vec<u8>,
        expected: Precondition,
    ) -> Result<Version, StoreError> {
        self.inner.options.check_mutable(key)?;
        self.inner.options.check_size(key, bytes.len())?;
        let _key_lock = self.inner.key_locks.lock(key).await;
        let key = key.clone();
        self.blocking(move |inner| inner.put_cas(&key, &bytes, expected))
            .await
    }

    async fn get(&self, key: &Key) -> Result<Option<Object>, StoreError> {
        let key = key.clone();
        self.blocking(move |inner| inner.read_object(&key)).await
    }

    async fn head(&self, key: &Key) -> Result<Option<Version>, StoreError> {
        let key = key.clone();
        self.blocking(move |inner| inner.current_version(&key))
            .await
    }

    async fn list(
        &self,
        prefix: Option<&Key>,
        start_after: Option<&Key>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let prefix = prefix.cloned();
        let start_after = start_after.cloned();
        self.blocking(move |inner| inner.list(prefix.as_ref(), start_after.as_ref(), limit))
            .await
    }

    async fn delete(&self, key: &Key, expected: Option<&Version>) -> Result<bool, StoreError> {
        self.inner.options.check_mutable(key)?;
        let _key_lock = self.inner.key_locks.lock(key).await;
        let key = key.clone();
        let expected = expected.cloned();
        self.blocking(move |inner| inner.delete(&key, expected.as_ref()))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::SimFs;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn key_lock_table_empties_after_use() {
        let sim = SimFs::new();
        sim.create_dir_all(Path::new("/store")).unwrap();
        let store = FsStore::open_with_fs(Arc::new(sim), "/store", StoreOptions::default())
            .await
            .unwrap();
        let k = Key::new("state/x").unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..8u8 {
            let (store, k) = (store.clone(), k.clone());
            tasks.spawn(async move {
                let _ = store.put_cas(&k, vec![i], Precondition::Absent).await;
                let _ = store.delete(&k, None).await;
            });
        }
        while let Some(joined) = tasks.join_next().await {
            joined.unwrap();
        }
        assert!(store.inner.key_locks.is_empty());
    }
}
