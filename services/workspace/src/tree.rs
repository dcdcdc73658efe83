//! The run workspaces' file trees on the injectable filesystem layer (`toolplane_store::fs::Fs`).
//! Owns the on-disk layout under `<data>/tree/<cell>/<run>/` and the write protocol that makes a
//! file write atomic and durable; must never follow a symlink, write outside a run's directory or
//! acknowledge a durable write before its file and directory entry are fsynced.
//!
//! Durable replace: write a temp file under `<data>/tmp/`, fsync it, `rename(2)` it over the
//! target, fsync the target's directory (and, once, the parents of directories it created) — the
//! same steps as a bare durable write, so a tool write costs one file fsync and one directory
//! fsync. The journal log's files (journal files, object packs) are written the same way. Temp files are spread over shard folders of `<data>/tmp/` so concurrent writers do not all
//! contend for one folder.
//!
//! Symlinks: every component below the run directory is checked with `lstat` before use; a
//! symlink or special file is `workspace.escape`, a system failure, and nothing is followed.
//! `rename` replaces a symlink at the final component instead of following it, and reads verify
//! that the opened file is the regular file at the path, so a leaf swapped for a symlink between
//! the check and the IO is refused too. The root belongs to the service: a directory component
//! swapped for a symlink by another local user between the check and the rename is outside what
//! `lstat` checks can prevent (see docs/workspace.md).

use std::{
    collections::HashSet,
    fmt, io,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use toolplane_store::fs::{FileKind, Fs};

use crate::error::WsError;

/// Test hooks at the points where a concurrent change would matter, so tests can make a race
/// deterministic. Production uses [`NoHooks`].
pub trait TreeHooks: Send + Sync + fmt::Debug {
    /// Called after a write's checks, right before the new file replaces the target.
    fn before_commit(&self, _target: &Path) {}
    /// Called after a read's checks, right before the file is opened.
    fn before_read(&self, _target: &Path) {}
}

/// No hooks.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

impl TreeHooks for NoHooks {}

/// The directories a scan has checked, relative to its base (see [`Tree::read_scanned`]).
#[derive(Debug, Default)]
pub struct CheckedDirs {
    /// The directory of the previous file (files come sorted, so usually the next one's too).
    last: String,
    all: HashSet<String>,
}

/// What a path holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Absent,
    File,
    Dir,
    /// A component before the last is a regular file.
    UnderFile,
}

/// The outcome of reading a path.
#[derive(Debug)]
pub enum Read {
    Absent,
    Dir,
    File(Vec<u8>),
}

const STRIPES: usize = 64;
/// Temp folders under `<data>/tmp/` (temp files are spread over them).
const TEMP_SHARDS: u64 = 8;

/// The file trees of every run.
#[derive(Debug)]
pub struct Tree {
    fs: Arc<dyn Fs>,
    root: PathBuf,
    tmp: PathBuf,
    durable_dirs: Mutex<HashSet<PathBuf>>,
    seq: AtomicU64,
    session: String,
    hooks: Arc<dyn TreeHooks>,
    stripes: Vec<Mutex<()>>,
    /// `fs` is the real filesystem, so file times can be read with `lstat`.
    file_times: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn path_is_directory() -> WsError {
    WsError::tool(
        "workspace.path_is_directory",
        "the path is a folder; use workspace_list_files to see its files",
    )
}

fn io_err(what: &str, path: &Path, e: io::Error) -> WsError {
    // A path the filesystem layer can not name (on a store-backed tree: a key over the store's
    // length limit) is the model's to fix: a recoverable error, without the host path.
    if e.kind() == io::ErrorKind::InvalidInput {
        return WsError::tool(
            "workspace.invalid_path",
            format!("the path can not be stored: {e}; use a shorter path"),
        );
    }
    // The path and the layer's own words (a host path, a store's URL) go to the operator's log;
    // the message a client (and through the runtime, a host) reads names neither.
    tracing::error!(path = %path.display(), error = %e, "run tree: {what} failed");
    WsError::io(format!(
        "{what} failed in the run's file tree ({}); the workspace's log has the details",
        e.kind()
    ))
}

impl Tree {
    /// A tree rooted at `root` (which must exist) with temp files in `tmp` (which must exist and
    /// be on the same filesystem).
    pub fn new(
        fs: Arc<dyn Fs>,
        root: PathBuf,
        tmp: PathBuf,
        session: String,
        hooks: Arc<dyn TreeHooks>,
    ) -> Tree {
        let mut durable = HashSet::new();
        durable.insert(root.clone());
        Tree {
            fs,
            root,
            tmp,
            durable_dirs: Mutex::new(durable),
            seq: AtomicU64::new(0),
            session,
            hooks,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            file_times: false,
        }
    }

    /// Declares that the filesystem layer is the real filesystem, whose file times
    /// [`Tree::modified_ms`] may read.
    pub fn with_file_times(mut self) -> Tree {
        self.file_times = true;
        self
    }

    pub fn fs(&self) -> &Arc<dyn Fs> {
        &self.fs
    }

    /// `<root>/<cell>/<run>`.
    pub fn run_dir(&self, cell: &str, run: &str) -> PathBuf {
        self.root.join(cell).join(run)
    }

    /// Creates the run's directory durably (idempotent).
    pub fn create_run_dir(&self, cell: &str, run: &str) -> Result<PathBuf, WsError> {
        let dir = self.run_dir(cell, run);
        self.ensure_dirs(&self.root, &[cell, run])?;
        Ok(dir)
    }

    /// Serialises writers of one path within this process (check-then-write must not interleave).
    pub fn lock_path(&self, path: &Path) -> MutexGuard<'_, ()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        path.hash(&mut h);
        let i = (h.finish() as usize) % STRIPES;
        lock(&self.stripes[i])
    }

    fn kind(&self, path: &Path) -> Result<Option<FileKind>, WsError> {
        match self.fs.symlink_metadata(path) {
            Ok(kind) => Ok(Some(kind)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => Ok(None),
            Err(e) => Err(io_err("inspect", path, e)),
        }
    }

    pub(crate) fn escape(path: &Path, kind: FileKind) -> WsError {
        let what = if kind == FileKind::Symlink {
            "a symlink"
        } else {
            "a special file"
        };
        // The host path goes to the operator's log, never into a message a model or client reads.
        tracing::warn!(path = %path.display(), "{what} inside the workspace store was not followed");
        WsError::escape(format!(
            "{what} inside the workspace store is never followed"
        ))
    }

    /// What `rel` (a validated relative path) holds under `base`, checking every component.
    pub fn probe(&self, base: &Path, rel: &str) -> Result<Entry, WsError> {
        let mut path = base.to_path_buf();
        let segments: Vec<&str> = rel.split('/').collect();
        for (i, segment) in segments.iter().enumerate() {
            path.push(segment);
            let last = i + 1 == segments.len();
            match self.kind(&path)? {
                None => return Ok(Entry::Absent),
                Some(FileKind::Dir) => {
                    if last {
                        return Ok(Entry::Dir);
                    }
                }
                Some(FileKind::File) => {
                    return Ok(if last { Entry::File } else { Entry::UnderFile });
                }
                Some(kind) => return Err(Self::escape(&path, kind)),
            }
        }
        Ok(Entry::Dir)
    }

    /// Reads `rel` under `base`.
    pub fn read(&self, base: &Path, rel: &str) -> Result<Read, WsError> {
        match self.probe(base, rel)? {
            Entry::Absent | Entry::UnderFile => return Ok(Read::Absent),
            Entry::Dir => return Ok(Read::Dir),
            Entry::File => {}
        }
        self.read_leaf(&base.join(rel))
    }

    /// Reads `rel` under `base` during a scan of many files: each directory component is checked
    /// (`lstat`) once per scan (`checked`, which must only ever be used with this `base`) rather
    /// than once per file; the leaf is checked every time (a fifo must never be opened) and
    /// verified again by the read. Same answers as [`Tree::read`]; the window in which a
    /// directory component could be swapped is the scan rather than one read, the same class of
    /// race the module doc leaves to the data directory's ownership.
    pub fn read_scanned(
        &self,
        base: &Path,
        rel: &str,
        checked: &mut CheckedDirs,
    ) -> Result<Read, WsError> {
        let dir = rel.rsplit_once('/').map_or("", |(dir, _)| dir);
        if !dir.is_empty() && dir != checked.last {
            let ends = dir
                .match_indices('/')
                .map(|(i, _)| i)
                .chain(std::iter::once(dir.len()));
            for end in ends {
                let prefix = &dir[..end];
                if checked.all.contains(prefix) {
                    continue;
                }
                let path = base.join(prefix);
                match self.kind(&path)? {
                    None | Some(FileKind::File) => return Ok(Read::Absent),
                    Some(FileKind::Dir) => {
                        checked.all.insert(prefix.to_owned());
                    }
                    Some(kind) => return Err(Self::escape(&path, kind)),
                }
            }
            dir.clone_into(&mut checked.last);
        }
        let path = base.join(rel);
        match self.kind(&path)? {
            None => Ok(Read::Absent),
            Some(FileKind::Dir) => Ok(Read::Dir),
            Some(FileKind::File) => self.read_leaf(&path),
            Some(kind) => Err(Self::escape(&path, kind)),
        }
    }

    /// Reads the file at `path` (whose directories were checked), refusing a symlink or special
    /// file there.
    fn read_leaf(&self, path: &Path) -> Result<Read, WsError> {
        self.hooks.before_read(path);
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.fs.read(path) {
                Ok(bytes) => return Ok(Read::File(bytes)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Read::Absent),
                Err(e) => {
                    match self.kind(path)? {
                        // A symlink there now is an escape attempt: never followed.
                        Some(kind @ (FileKind::Symlink | FileKind::Other)) => {
                            return Err(Self::escape(path, kind));
                        }
                        Some(FileKind::Dir) => return Ok(Read::Dir),
                        // A concurrent writer renamed a new file into place between the open
                        // and the identity check: read again.
                        Some(FileKind::File) if attempts < 16 => continue,
                        _ => return Err(io_err("read", path, e)),
                    }
                }
            }
        }
    }

    /// Creates the directories `segments` below `base` (which must be durable), fsyncing each new
    /// directory's parent once.
    fn ensure_dirs(&self, base: &Path, segments: &[&str]) -> Result<(), WsError> {
        let mut path = base.to_path_buf();
        for segment in segments {
            let parent = path.clone();
            path.push(segment);
            if lock(&self.durable_dirs).contains(&path) {
                continue;
            }
            match self.kind(&path)? {
                Some(FileKind::Dir) => {}
                None => match self.fs.create_dir(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        if self.kind(&path)? != Some(FileKind::Dir) {
                            return Err(WsError::escape(format!(
                                "not a directory: {}",
                                path.display()
                            )));
                        }
                    }
                    Err(e) => return Err(io_err("create directory", &path, e)),
                },
                Some(FileKind::File) => {
                    return Err(WsError::tool(
                        "workspace.invalid_path",
                        format!("a parent of the path is a file: {segment}"),
                    ));
                }
                Some(kind) => return Err(Self::escape(&path, kind)),
            }
            // Whether we created it or found it, its entry in `parent` must be durable before a
            // file inside it is acknowledged.
            self.fs
                .sync_dir(&parent)
                .map_err(|e| io_err("sync directory", &parent, e))?;
            let mut durable = lock(&self.durable_dirs);
            if durable.len() > 1 << 16 {
                durable.clear();
                durable.insert(self.root.clone());
            }
            durable.insert(path.clone());
        }
        Ok(())
    }

    /// A new temp file holding `bytes`, fsynced.
    fn temp(&self, bytes: &[u8]) -> Result<PathBuf, WsError> {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        // Spread over shard folders: concurrent writers would otherwise all take the one temp
        // folder's lock to create and to remove their files.
        let tmp = self
            .tmp
            .join(format!("{}", n % TEMP_SHARDS))
            .join(format!("{}-{n}", self.session));
        let mut file = self
            .fs
            .create_new(&tmp)
            .map_err(|e| io_err("create temp file", &tmp, e))?;
        let written = file.write_all(bytes).and_then(|()| file.sync());
        if let Err(e) = written {
            let _ = self.fs.remove_file(&tmp);
            return Err(io_err("write temp file", &tmp, e));
        }
        Ok(tmp)
    }

    fn parent_and_prepare(&self, base: &Path, rel: &str) -> Result<(PathBuf, PathBuf), WsError> {
        let segments: Vec<&str> = rel.split('/').collect();
        let (_, dirs) = segments
            .split_last()
            .ok_or_else(|| WsError::invalid_request("empty path"))?;
        self.ensure_dirs(base, dirs)?;
        let target = base.join(rel);
        let parent = target
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| base.to_path_buf());
        Ok((target, parent))
    }

    fn check_target(&self, target: &Path) -> Result<(), WsError> {
        match self.kind(target)? {
            None | Some(FileKind::File) => Ok(()),
            Some(FileKind::Dir) => Err(path_is_directory()),
            Some(kind) => Err(Self::escape(target, kind)),
        }
    }

    /// Atomically and durably replaces (or creates) `rel` under `base` with `bytes`.
    pub fn write_durable(&self, base: &Path, rel: &str, bytes: &[u8]) -> Result<(), WsError> {
        let (target, parent) = self.parent_and_prepare(base, rel)?;
        self.check_target(&target)?;
        let tmp = self.temp(bytes)?;
        self.hooks.before_commit(&target);
        // Re-check right before the rename: a symlink or folder that appeared meanwhile is
        // refused rather than replaced. A layer that can hold no symlink (a store-backed tree)
        // refuses a folder in its rename, so there the re-check would only repeat requests.
        let recheck = || {
            self.probe(base, rel)
                .and_then(|_| self.check_target(&target))
        };
        if self.fs.may_hold_symlinks(&target)
            && let Err(e) = recheck()
        {
            let _ = self.fs.remove_file(&tmp);
            return Err(e);
        }
        if let Err(e) = self.fs.rename(&tmp, &target) {
            let _ = self.fs.remove_file(&tmp);
            if e.kind() == io::ErrorKind::IsADirectory {
                return Err(path_is_directory());
            }
            return Err(io_err("rename into place", &target, e));
        }
        self.fs
            .sync_dir(&parent)
            .map_err(|e| io_err("sync directory", &parent, e))
    }

    /// When the file at `rel` under `base` was last modified (Unix ms), if the filesystem layer
    /// can tell: the real filesystem can (`lstat`, never following a symlink), a simulated one
    /// cannot.
    pub fn modified_ms(&self, base: &Path, rel: &str) -> Option<i64> {
        if !self.file_times {
            return None;
        }
        let modified = std::fs::symlink_metadata(base.join(rel))
            .ok()?
            .modified()
            .ok()?;
        let ms = modified
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_millis();
        i64::try_from(ms).ok()
    }

    /// Files below `rel` (or the whole `base` when `rel` is empty), as relative paths from `base`,
    /// sorted; stops with `truncated = true` after `max` files. A symlink, special file or
    /// non-UTF-8 name is an error here (the plane's own folders never hold one); the model's
    /// listings use [`Tree::list_files_skipping`].
    pub fn list_files(
        &self,
        base: &Path,
        rel: &str,
        max: usize,
    ) -> Result<(Vec<String>, bool), WsError> {
        let (files, truncated, skipped) = self.list_files_skipping(base, rel, max)?;
        match skipped.first() {
            Some(s) => Err(Self::escape(&base.join(&s.path), s.kind)),
            None => Ok((files, truncated)),
        }
    }

    /// Like [`Tree::list_files`], but entries that are not regular files or folders (symlinks,
    /// special files) and names that are not UTF-8 are skipped and reported, never followed.
    pub fn list_files_skipping(
        &self,
        base: &Path,
        rel: &str,
        max: usize,
    ) -> Result<(Vec<String>, bool, Vec<Skipped>), WsError> {
        let mut skipped = Vec::new();
        let mut out = Vec::new();
        let mut stack: Vec<String> = vec![rel.to_owned()];
        let mut truncated = false;
        while let Some(dir) = stack.pop() {
            let path = if dir.is_empty() {
                base.to_path_buf()
            } else {
                base.join(&dir)
            };
            let entries = match self.fs.read_dir(&path) {
                Ok(entries) => entries,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err("list", &path, e)),
            };
            for entry in entries {
                let name = entry.name.to_string_lossy();
                let child = if dir.is_empty() {
                    name.clone().into_owned()
                } else {
                    format!("{dir}/{name}")
                };
                if entry.name.to_str().is_none() {
                    skipped.push(Skipped {
                        path: child,
                        kind: entry.kind,
                        reason: "its name is not UTF-8",
                    });
                    continue;
                }
                match entry.kind {
                    FileKind::Dir => stack.push(child),
                    FileKind::File => {
                        if out.len() >= max {
                            truncated = true;
                            break;
                        }
                        out.push(child);
                    }
                    kind => skipped.push(Skipped {
                        path: child,
                        kind,
                        reason: if kind == FileKind::Symlink {
                            "a symlink, never followed"
                        } else {
                            "not a regular file"
                        },
                    }),
                }
            }
            if truncated {
                break;
            }
        }
        out.sort();
        skipped.sort_by(|a, b| a.path.cmp(&b.path));
        Ok((out, truncated, skipped))
    }

    /// Creates the temp shard folders and removes the temp files a crashed session left (all of
    /// `tmp` except this session's).
    pub fn clean_tmp(&self) -> Result<(), WsError> {
        let mut dirs = vec![self.tmp.clone()];
        for shard in 0..TEMP_SHARDS {
            let dir = self.tmp.join(format!("{shard}"));
            match self.fs.create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err("create temp folder", &dir, e)),
            }
            dirs.push(dir);
        }
        for dir in dirs {
            let entries = match self.fs.read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) => return Err(io_err("list temp files", &dir, e)),
            };
            for entry in entries {
                if entry.kind == FileKind::File {
                    let _ = self.fs.remove_file(&dir.join(&entry.name));
                }
            }
        }
        Ok(())
    }
}

/// An entry a listing passed over, with its path relative to the listing's base (a lossy reading
/// when the name is not UTF-8) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: String,
    pub kind: FileKind,
    pub reason: &'static str,
}
