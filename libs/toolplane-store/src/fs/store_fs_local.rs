//! The process-local half of [`super::StoreFs`]: its temp area (files and folders held in memory
//! until a rename puts them into the store) and its advisory locks. Owns nothing shared with other
//! processes; must never let a temp buffer grow past its bound or hand out a lock twice.

use std::{
    collections::{HashMap, HashSet},
    ffi::OsString,
    io,
    path::{Path, PathBuf},
    sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError},
};

use super::{DirEntry, FileKind, FsFile, FsLock};

/// The most bytes one temp file may hold: the default store object limit, so a file the store
/// would refuse is refused while it is written, before memory for it is taken.
pub(super) const MAX_TEMP_FILE_BYTES: u64 = crate::DEFAULT_MAX_OBJECT_BYTES;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below is one insert, remove or copy: a panic elsewhere can not
    // leave the maps half-updated, so a poisoned lock still guards consistent state.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

type Buffer = Arc<Mutex<Vec<u8>>>;

/// Temp files and folders below one temp directory, in memory.
#[derive(Debug)]
pub(super) struct TempArea {
    root: PathBuf,
    state: Mutex<TempState>,
}

#[derive(Debug, Default)]
struct TempState {
    files: HashMap<PathBuf, Buffer>,
    dirs: HashSet<PathBuf>,
}

impl TempState {
    fn is_dir(&self, root: &Path, path: &Path) -> bool {
        path == root || self.dirs.contains(path)
    }
}

fn not_found() -> io::Error {
    io::Error::from(io::ErrorKind::NotFound)
}

impl TempArea {
    pub(super) fn new(root: PathBuf) -> TempArea {
        TempArea {
            root,
            state: Mutex::new(TempState::default()),
        }
    }

    pub(super) fn contains(&self, path: &Path) -> bool {
        path.starts_with(&self.root)
    }

    fn parent_is_dir(&self, state: &TempState, path: &Path) -> bool {
        path.parent().is_some_and(|p| state.is_dir(&self.root, p))
    }

    pub(super) fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let mut state = lock(&self.state);
        if state.files.contains_key(path) || state.is_dir(&self.root, path) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        if !self.parent_is_dir(&state, path) {
            return Err(not_found());
        }
        let buffer = Buffer::default();
        state.files.insert(path.to_path_buf(), Arc::clone(&buffer));
        Ok(Box::new(TempFile { buffer }))
    }

    pub(super) fn create_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = lock(&self.state);
        if state.files.contains_key(path) || state.is_dir(&self.root, path) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        if !self.parent_is_dir(&state, path) {
            return Err(not_found());
        }
        state.dirs.insert(path.to_path_buf());
        Ok(())
    }

    pub(super) fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let state = lock(&self.state);
        match state.files.get(path) {
            Some(buffer) => Ok(lock(buffer).clone()),
            None if state.is_dir(&self.root, path) => {
                Err(io::Error::from(io::ErrorKind::IsADirectory))
            }
            None => Err(not_found()),
        }
    }

    pub(super) fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = lock(&self.state);
        match state.files.remove(path) {
            Some(_) => Ok(()),
            None if state.is_dir(&self.root, path) => {
                Err(io::Error::from(io::ErrorKind::IsADirectory))
            }
            None => Err(not_found()),
        }
    }

    pub(super) fn remove_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = lock(&self.state);
        if !state.dirs.contains(path) {
            return Err(if state.files.contains_key(path) {
                io::Error::from(io::ErrorKind::NotADirectory)
            } else if path == self.root {
                io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "the temp directory itself is never removed",
                )
            } else {
                not_found()
            });
        }
        let occupied = state.files.keys().any(|f| f.parent() == Some(path))
            || state.dirs.iter().any(|d| d.parent() == Some(path));
        if occupied {
            return Err(io::Error::from(io::ErrorKind::DirectoryNotEmpty));
        }
        state.dirs.remove(path);
        Ok(())
    }

    /// Moves a temp file to another temp path, replacing a file there.
    pub(super) fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = lock(&self.state);
        if state.is_dir(&self.root, to) {
            return Err(io::Error::from(io::ErrorKind::IsADirectory));
        }
        if !self.parent_is_dir(&state, to) {
            return Err(not_found());
        }
        let buffer = state.files.remove(from).ok_or_else(not_found)?;
        state.files.insert(to.to_path_buf(), buffer);
        Ok(())
    }

    /// Drops a temp file whose bytes a rename put into the store.
    pub(super) fn forget(&self, path: &Path) {
        lock(&self.state).files.remove(path);
    }

    pub(super) fn kind(&self, path: &Path) -> io::Result<FileKind> {
        let state = lock(&self.state);
        if state.files.contains_key(path) {
            Ok(FileKind::File)
        } else if state.is_dir(&self.root, path) {
            Ok(FileKind::Dir)
        } else {
            Err(not_found())
        }
    }

    pub(super) fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let state = lock(&self.state);
        if !state.is_dir(&self.root, path) {
            return Err(if state.files.contains_key(path) {
                io::Error::from(io::ErrorKind::NotADirectory)
            } else {
                not_found()
            });
        }
        let entry = |p: &PathBuf, kind| {
            (p.parent() == Some(path)).then(|| DirEntry {
                name: p.file_name().map(OsString::from).unwrap_or_default(),
                kind,
            })
        };
        let files = state.files.keys().filter_map(|p| entry(p, FileKind::File));
        let dirs = state.dirs.iter().filter_map(|p| entry(p, FileKind::Dir));
        Ok(files.chain(dirs).collect())
    }
}

/// A temp file being written: a shared buffer the area also holds.
#[derive(Debug)]
struct TempFile {
    buffer: Buffer,
}

impl FsFile for TempFile {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut buffer = lock(&self.buffer);
        let len = buffer.len().saturating_add(bytes.len());
        if u64::try_from(len).unwrap_or(u64::MAX) > MAX_TEMP_FILE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("a store-backed file holds at most {MAX_TEMP_FILE_BYTES} bytes"),
            ));
        }
        buffer.extend_from_slice(bytes);
        Ok(())
    }

    /// Nothing to do: a temp file is never durable itself; the rename that puts it into the
    /// store is.
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Advisory locks by path, within this process only.
#[derive(Debug, Default)]
pub(super) struct LocalLocks {
    held: Arc<(Mutex<HashSet<PathBuf>>, Condvar)>,
}

#[derive(Debug)]
struct LocalLock {
    held: Arc<(Mutex<HashSet<PathBuf>>, Condvar)>,
    path: PathBuf,
}

impl FsLock for LocalLock {}

impl Drop for LocalLock {
    fn drop(&mut self) {
        let (set, released) = &*self.held;
        lock(set).remove(&self.path);
        released.notify_all();
    }
}

impl LocalLocks {
    pub(super) fn lock(&self, path: &Path) -> Box<dyn FsLock> {
        let (set, released) = &*self.held;
        let mut held = lock(set);
        while held.contains(path) {
            held = released.wait(held).unwrap_or_else(PoisonError::into_inner);
        }
        held.insert(path.to_path_buf());
        self.guard(path)
    }

    pub(super) fn try_lock(&self, path: &Path) -> Option<Box<dyn FsLock>> {
        let (set, _) = &*self.held;
        lock(set)
            .insert(path.to_path_buf())
            .then(|| self.guard(path))
    }

    fn guard(&self, path: &Path) -> Box<dyn FsLock> {
        Box::new(LocalLock {
            held: Arc::clone(&self.held),
            path: path.to_path_buf(),
        })
    }
}
