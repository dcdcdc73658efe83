//! A filesystem layer whose files live in a [`Store`], so a file tree written through [`Fs`] (the
//! workspace's run trees) is shared by every process that opens the same store. Owns the mapping
//! of paths to keys and of the `Fs` verbs to store verbs; must never panic on a caller's thread,
//! let a path name a key outside its tree, or keep a file only in this process once a rename of
//! it returned.
//!
//! **Two areas.** Paths below `root` are the shared tree, kept in the store; paths below `tmp` are
//! temp files and folders private to this process, kept in memory (`tmp` must not lie inside
//! `root`; a path in both counts as temp). Any other path is `Unsupported`.
//!
//! **Keys.** A file at `root/a/b` is the key `f/2/a/b`; a folder `root/a` is an empty marker
//! object `d/1/a`; `root` itself is always a folder and has no key. The depth in the key keeps
//! every key of one space the same length in segments, so none lies below another (the store's
//! keys form a tree: `d/a` and `d/a/b` could not both be objects), and the immediate children of
//! a folder are exactly the keys below one prefix (`f/3/a/b` and `d/3/a/b` for `root/a/b`), so
//! `read_dir` lists them without walking the subtree. Separate file and folder spaces let a
//! folder exist empty and make a probe exact. A name the key grammar refuses (one starting with
//! `.toolplane`) or one starting with `%` is stored as `%` + the name; workspace paths never
//! contain `%`. A path whose key would break the grammar anyway (longer than 1,024 bytes with its
//! prefix, a name over 255 bytes after escaping, a name that is not UTF-8, a `..`) is an
//! `InvalidInput` error, never a panic; messages never repeat the host path.
//!
//! **Verbs.** `create_new` makes a temp file (only below `tmp`: a tree file is written by
//! renaming a temp file over it); `rename(tmp/x, root/y)` is an atomic replace on every backend:
//! the store has no unconditional put, so it heads `y`'s file key (concurrently with checking
//! that `y`'s folder exists and `y` is not a folder), then `put_cas`es against the version seen,
//! retrying with the version a conflict reports (the last rename wins, as with `rename(2)`);
//! `create_dir` is a `put_create` of the marker (`AlreadyExists` when a file or folder is there,
//! `NotFound` without its parent); `symlink_metadata` heads the file and the folder key
//! concurrently; `read` is one `get` (a miss costs one more `head` to tell a
//! folder from nothing); `read_dir` lists both spaces a page at a time and refuses a folder of
//! more than [`MAX_DIR_ENTRIES`] files (or folders) rather than grow without end; `remove_dir`
//! deletes the marker when a one-key listing of each space finds nothing below; `sync_dir` does
//! nothing, since a store write is durable when it returns; `hard_link` is `Unsupported` (the
//! tree never links); `lock` and `try_lock` are locks within this process only. No symlink or
//! special file can exist here (`may_hold_symlinks` is false), so the tree's symlink checks always
//! pass and it skips its re-check before a rename, whose own folder check covers the rest.
//!
//! **Known folders.** The workspace never removes a folder of a run's tree, so a folder stays one:
//! each `StoreFs` remembers the folders it created or found (a bounded set) and answers for them
//! without a request — `symlink_metadata` says `Dir`, `create_dir` `AlreadyExists`, a rename into
//! one skips its parent check. This keeps a probe of `a/b/c.txt` at one round trip (the leaf)
//! instead of one per component. Its price: a folder another process removes is still a folder
//! to this one (a rename into it then stores a file no listing shows); `remove_dir` here forgets
//! it.
//!
//! **Between processes.** Each verb is atomic, but check-then-act sequences are not (a folder
//! removed by one process while another renames a file into it leaves that file unlisted). Two
//! processes writing one run's tree at once is what the run lease prevents; the last rename of a
//! path wins.
//!
//! **Blocking.** `Fs` is a blocking interface and the store is async: each verb runs its store
//! future on `handle` with `Handle::block_on`, inside `tokio::task::block_in_place`. Call it from
//! a blocking thread (`spawn_blocking`, as the workspace does) or a thread outside any runtime;
//! on a worker of a multi-thread runtime it still works (the worker hands its other tasks on
//! while it waits). `block_on` on a current-thread runtime's own thread would panic and can not
//! be told apart from its blocking threads, so under a current-thread runtime, and when `handle`
//! is not a multi-thread runtime, every verb that needs the store fails with an `Unsupported`
//! error instead (temp files keep working).

use std::{
    collections::HashSet,
    ffi::OsString,
    fmt,
    future::Future,
    io,
    path::{Component, Path, PathBuf},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use tokio::runtime::{Handle, RuntimeFlavor};

use super::{
    DirEntry, FileKind, Fs, FsFile, FsLock,
    store_fs_keys::{Node, Space, decode, encode, invalid_input, store_err},
    store_fs_local::{LocalLocks, TempArea},
};
use crate::{Key, MAX_LIST_LIMIT, Precondition, Store, StoreError};

/// The most files (and, separately, folders) one `read_dir` returns; a larger folder is an error.
pub const MAX_DIR_ENTRIES: usize = 100_000;
/// Bound on the folders a `StoreFs` remembers; past it the set starts over (a few more requests).
const MAX_KNOWN_DIRS: usize = 1 << 16;
/// How often a rename tries its compare-and-swap when other writers keep replacing the file
/// (with the pauses of [`backoff`], about 1.5 s in all before it gives up).
const REPLACE_ATTEMPTS: usize = 32;

enum Place {
    Tree(Node),
    Temp,
}

fn kind_error(kind: io::ErrorKind) -> io::Error {
    io::Error::from(kind)
}

/// A file tree in a [`Store`]; see the module docs.
pub struct StoreFs {
    store: Arc<dyn Store>,
    root: PathBuf,
    temps: TempArea,
    locks: LocalLocks,
    handle: Handle,
    /// Folder keys this process created or found; see "Known folders" in the module docs.
    known_dirs: Mutex<HashSet<Key>>,
}

impl fmt::Debug for StoreFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreFs")
            .field("store", &self.store)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl StoreFs {
    /// A tree at `root` whose files are keys of `store` (give it a namespace of its own), with
    /// temp files below `tmp` in memory; store futures run on `handle`, which must be a
    /// multi-thread runtime.
    pub fn new(store: Arc<dyn Store>, root: PathBuf, tmp: PathBuf, handle: Handle) -> StoreFs {
        StoreFs {
            store,
            root,
            temps: TempArea::new(tmp),
            locks: LocalLocks::default(),
            handle,
            known_dirs: Mutex::new(HashSet::new()),
        }
    }

    fn known_dirs(&self) -> MutexGuard<'_, HashSet<Key>> {
        // Single inserts and removes: a panic elsewhere can not leave the set inconsistent.
        self.known_dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn knows_dir(&self, key: &Key) -> bool {
        self.known_dirs().contains(key)
    }

    fn learn_dir(&self, key: Key) {
        let mut known = self.known_dirs();
        if known.len() >= MAX_KNOWN_DIRS {
            known.clear();
        }
        known.insert(key);
    }

    fn place(&self, path: &Path) -> io::Result<Place> {
        if self.temps.contains(path) {
            return Ok(Place::Temp);
        }
        let rest = path.strip_prefix(&self.root).map_err(|_| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "the path is outside the store tree and its temp directory",
            )
        })?;
        let mut names = Vec::new();
        for component in rest.components() {
            match component {
                Component::Normal(name) => names.push(encode(name)?),
                _ => return Err(invalid_input("a path with '..' can not be stored")),
            }
        }
        Ok(Place::Tree(Node { names }))
    }

    /// Runs `work` to completion on the store's runtime; see the module docs for the rule.
    fn block<T>(&self, work: impl Future<Output = io::Result<T>>) -> io::Result<T> {
        let current_ok = Handle::try_current().map_or(true, |current| {
            current.runtime_flavor() == RuntimeFlavor::MultiThread
        });
        if !current_ok || self.handle.runtime_flavor() != RuntimeFlavor::MultiThread {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "store-backed files need a multi-thread runtime: call them from a blocking \
                 thread of one, or from a thread outside any runtime",
            ));
        }
        tokio::task::block_in_place(|| self.handle.block_on(work))
    }

    async fn head(&self, key: &Key) -> io::Result<bool> {
        Ok(self.store.head(key).await.map_err(store_err)?.is_some())
    }

    /// Whether the folder `key` names exists (`None`: the root, which always does).
    async fn dir_exists(&self, key: Option<&Key>) -> io::Result<bool> {
        match key {
            Some(key) if self.knows_dir(key) => Ok(true),
            Some(key) => {
                let exists = self.head(key).await?;
                if exists {
                    self.learn_dir(key.clone());
                }
                Ok(exists)
            }
            None => Ok(true),
        }
    }

    /// The names of the keys directly below `prefix`, a page at a time, at most
    /// [`MAX_DIR_ENTRIES`].
    async fn names_below(&self, prefix: &Key, kind: FileKind) -> io::Result<Vec<DirEntry>> {
        let mut entries = Vec::new();
        let mut after: Option<Key> = None;
        loop {
            let page = self
                .store
                .list(Some(prefix), after.as_ref(), MAX_LIST_LIMIT)
                .await
                .map_err(store_err)?;
            for key in &page.keys {
                // Every key of the space below this prefix is one name deeper; others are not
                // ours and are skipped.
                let Some(rest) = key.strip_prefix(prefix) else {
                    continue;
                };
                if rest.parent().is_some() {
                    continue;
                }
                if entries.len() >= MAX_DIR_ENTRIES {
                    return Err(io::Error::other(format!(
                        "a folder of the store tree holds more than {MAX_DIR_ENTRIES} entries"
                    )));
                }
                entries.push(DirEntry {
                    name: OsString::from(decode(rest.as_str())),
                    kind,
                });
            }
            match page.next_start_after {
                Some(next) => after = Some(next),
                None => return Ok(entries),
            }
        }
    }

    fn read_tree_dir(&self, node: &Node) -> io::Result<Vec<DirEntry>> {
        let files = node.children(Space::Files)?;
        let dirs = node.children(Space::Dirs)?;
        self.block(async {
            let (mut files, dirs) = tokio::try_join!(
                self.names_below(&files, FileKind::File),
                self.names_below(&dirs, FileKind::Dir),
            )?;
            if files.is_empty() && dirs.is_empty() && !node.is_root() {
                // Nothing below: an empty folder, or no folder at all.
                if !self.head(&node.key(Space::Dirs)?).await? {
                    return Err(kind_error(if self.head(&node.key(Space::Files)?).await? {
                        io::ErrorKind::NotADirectory
                    } else {
                        io::ErrorKind::NotFound
                    }));
                }
            }
            for dir in &dirs {
                let mut names = node.names.clone();
                names.push(encode(&dir.name)?);
                self.learn_dir(Node::key_at(Space::Dirs, &names)?);
            }
            files.extend(dirs);
            Ok(files)
        })
    }

    /// Puts the temp file `from` into the tree at `node`.
    fn commit(&self, from: &Path, node: &Node) -> io::Result<()> {
        if node.is_root() {
            return Err(kind_error(io::ErrorKind::IsADirectory));
        }
        let bytes = self.temps.read(from)?;
        let file = node.key(Space::Files)?;
        let dir = node.key(Space::Dirs)?;
        let parent = node.parent_dir_key()?;
        if self.knows_dir(&dir) {
            return Err(kind_error(io::ErrorKind::IsADirectory));
        }
        let mut current = self.block(async {
            let (parent_exists, is_dir, current) =
                tokio::try_join!(self.dir_exists(parent.as_ref()), self.head(&dir), async {
                    self.store.head(&file).await.map_err(store_err)
                },)?;
            if is_dir {
                return Err(kind_error(io::ErrorKind::IsADirectory));
            }
            if !parent_exists {
                return Err(kind_error(io::ErrorKind::NotFound));
            }
            Ok(current)
        })?;
        // The store has no unconditional put: replace the version just seen, and on a conflict
        // the version the store reports, until one put lands. Writers racing on one path retry
        // after a growing, jittered pause (on this blocking thread, between store calls), so
        // they fall out of step instead of each losing to the others every time.
        let mut attempt = 0;
        loop {
            let expected = current.map_or(Precondition::Absent, Precondition::Version);
            let put =
                self.block(async { Ok(self.store.put_cas(&file, bytes.clone(), expected).await) })?;
            match put {
                Ok(_) => break,
                Err(StoreError::Conflict { current: found, .. }) => current = found,
                Err(e) => return Err(store_err(e)),
            }
            attempt += 1;
            if attempt >= REPLACE_ATTEMPTS {
                return Err(io::Error::other(
                    "the file kept changing while it was replaced; try again",
                ));
            }
            std::thread::sleep(backoff(attempt));
        }
        self.temps.forget(from);
        Ok(())
    }
}

/// The pause before retry `attempt` (from 1): up to 1 ms doubled per attempt, at most 64 ms,
/// less a random part of it.
fn backoff(attempt: usize) -> std::time::Duration {
    use std::hash::{BuildHasher, Hasher};
    let ceiling_us = 1000u64 << attempt.min(6);
    // `RandomState` is seeded randomly per thread and per call: jitter without a dependency.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    std::time::Duration::from_micros(ceiling_us / 2 + random % (ceiling_us / 2))
}

fn unsupported(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, what.to_owned())
}

impl Fs for StoreFs {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        match self.place(path)? {
            Place::Temp => self.temps.create_new(path),
            Place::Tree(_) => Err(unsupported(
                "a file of the store tree is written by renaming a temp file over it",
            )),
        }
    }

    fn hard_link(&self, _from: &Path, _to: &Path) -> io::Result<()> {
        Err(unsupported("the store tree has no hard links"))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        match (self.place(from)?, self.place(to)?) {
            (Place::Temp, Place::Temp) => self.temps.rename(from, to),
            (Place::Temp, Place::Tree(node)) => self.commit(from, &node),
            (Place::Tree(_), _) => Err(unsupported(
                "files of the store tree are never moved; write the new path instead",
            )),
        }
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let node = match self.place(path)? {
            Place::Temp => return self.temps.remove_file(path),
            Place::Tree(node) if node.is_root() => {
                return Err(kind_error(io::ErrorKind::IsADirectory));
            }
            Place::Tree(node) => node,
        };
        let key = node.key(Space::Files)?;
        let existed =
            self.block(async { self.store.delete(&key, None).await.map_err(store_err) })?;
        if existed {
            Ok(())
        } else {
            Err(kind_error(io::ErrorKind::NotFound))
        }
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        let node = match self.place(path)? {
            Place::Temp => return self.temps.remove_dir(path),
            Place::Tree(node) if node.is_root() => {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "the store tree's root is never removed",
                ));
            }
            Place::Tree(node) => node,
        };
        let (files, dirs) = (node.children(Space::Files)?, node.children(Space::Dirs)?);
        let marker = node.key(Space::Dirs)?;
        let existed = self.block(async {
            let (files, dirs) = tokio::try_join!(
                self.store.list(Some(&files), None, 1),
                self.store.list(Some(&dirs), None, 1),
            )
            .map_err(store_err)?;
            if !files.keys.is_empty() || !dirs.keys.is_empty() {
                return Err(kind_error(io::ErrorKind::DirectoryNotEmpty));
            }
            self.store.delete(&marker, None).await.map_err(store_err)
        })?;
        let below = node.names.join("/");
        self.known_dirs().retain(|key| {
            let names = key.as_str().splitn(3, '/').nth(2).unwrap_or("");
            names != below && !names.starts_with(&format!("{below}/"))
        });
        if existed {
            Ok(())
        } else {
            Err(kind_error(io::ErrorKind::NotFound))
        }
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        let node = match self.place(path)? {
            Place::Temp => return self.temps.create_dir(path),
            Place::Tree(node) if node.is_root() => {
                return Err(kind_error(io::ErrorKind::AlreadyExists));
            }
            Place::Tree(node) => node,
        };
        let file = node.key(Space::Files)?;
        let marker = node.key(Space::Dirs)?;
        let parent = node.parent_dir_key()?;
        if self.knows_dir(&marker) {
            return Err(kind_error(io::ErrorKind::AlreadyExists));
        }
        self.block(async {
            let (is_file, parent_exists) =
                tokio::try_join!(self.head(&file), self.dir_exists(parent.as_ref()))?;
            if is_file {
                return Err(kind_error(io::ErrorKind::AlreadyExists));
            }
            if !parent_exists {
                return Err(kind_error(io::ErrorKind::NotFound));
            }
            let created = self.store.put_create(&marker, Vec::new()).await;
            // Created now or by someone else before: a folder either way.
            if matches!(created, Ok(_) | Err(StoreError::AlreadyExists { .. })) {
                self.learn_dir(marker.clone());
            }
            created.map(|_| ()).map_err(store_err)
        })
    }

    /// Nothing to do: every store write is durable once it returns.
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.place(path).map(|_| ())
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let node = match self.place(path)? {
            Place::Temp => return self.temps.read(path),
            Place::Tree(node) if node.is_root() => {
                return Err(kind_error(io::ErrorKind::IsADirectory));
            }
            Place::Tree(node) => node,
        };
        let file = node.key(Space::Files)?;
        let marker = node.key(Space::Dirs)?;
        self.block(async {
            if let Some(object) = self.store.get(&file).await.map_err(store_err)? {
                return Ok(object.bytes);
            }
            Err(kind_error(if self.head(&marker).await? {
                io::ErrorKind::IsADirectory
            } else {
                io::ErrorKind::NotFound
            }))
        })
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        match self.place(path)? {
            Place::Temp => self.temps.read_dir(path),
            Place::Tree(node) => self.read_tree_dir(&node),
        }
    }

    fn symlink_metadata(&self, path: &Path) -> io::Result<FileKind> {
        let node = match self.place(path)? {
            Place::Temp => return self.temps.kind(path),
            Place::Tree(node) if node.is_root() => return Ok(FileKind::Dir),
            Place::Tree(node) => node,
        };
        let file = node.key(Space::Files)?;
        let marker = node.key(Space::Dirs)?;
        if self.knows_dir(&marker) {
            return Ok(FileKind::Dir);
        }
        let (is_file, is_dir) =
            self.block(async { tokio::try_join!(self.head(&file), self.head(&marker)) })?;
        match (is_file, is_dir) {
            (true, _) => Ok(FileKind::File),
            (false, true) => {
                self.learn_dir(marker);
                Ok(FileKind::Dir)
            }
            (false, false) => Err(kind_error(io::ErrorKind::NotFound)),
        }
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FsLock>> {
        Ok(self.locks.lock(path))
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn FsLock>>> {
        Ok(self.locks.try_lock(path))
    }

    /// Never: neither the store nor the temp area can hold a symlink or special file.
    fn may_hold_symlinks(&self, _path: &Path) -> bool {
        false
    }
}
