//! A recording filesystem layer. Owns a log of the operations the store asked for, in order, so a
//! test can assert the write protocol (e.g. the temp file is fsynced before it is linked); must
//! never change what the wrapped layer does.

use std::{
    io,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError},
};

use crate::fs::{DirEntry, FileKind, Fs, FsFile, FsLock};

/// One operation as the store asked for it (logged before it runs, so failed ones show too).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FsOp {
    CreateNew(PathBuf),
    Write {
        path: PathBuf,
        len: usize,
    },
    SyncFile(PathBuf),
    /// A file extended with zeros ahead of its writes ([`FsFile::extend_zeroed`]).
    ExtendZeroed {
        path: PathBuf,
        end: u64,
    },
    HardLink {
        from: PathBuf,
        to: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    RemoveFile(PathBuf),
    RemoveDir(PathBuf),
    CreateDir(PathBuf),
    SyncDir(PathBuf),
    Read(PathBuf),
    ReadDir(PathBuf),
    SymlinkMetadata(PathBuf),
    Lock(PathBuf),
    TryLock(PathBuf),
}

type Log = Arc<Mutex<Vec<FsOp>>>;

fn push(log: &Log, op: FsOp) {
    log.lock().unwrap_or_else(PoisonError::into_inner).push(op);
}

/// Wraps another [`Fs`] and logs every operation.
#[derive(Clone, Debug)]
pub struct RecordingFs {
    inner: Arc<dyn Fs>,
    log: Log,
}

impl RecordingFs {
    pub fn new(inner: Arc<dyn Fs>) -> RecordingFs {
        RecordingFs {
            inner,
            log: Log::default(),
        }
    }

    /// The operations so far, oldest first.
    pub fn ops(&self) -> Vec<FsOp> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Forgets the operations so far (e.g. those of opening the store).
    pub fn clear(&self) {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    fn record(&self, op: FsOp) {
        push(&self.log, op);
    }
}

#[derive(Debug)]
struct RecordingFile {
    inner: Box<dyn FsFile>,
    path: PathBuf,
    log: Log,
}

impl FsFile for RecordingFile {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        push(
            &self.log,
            FsOp::Write {
                path: self.path.clone(),
                len: bytes.len(),
            },
        );
        self.inner.write_all(bytes)
    }

    fn sync(&mut self) -> io::Result<()> {
        push(&self.log, FsOp::SyncFile(self.path.clone()));
        self.inner.sync()
    }

    fn sync_data(&mut self) -> io::Result<()> {
        push(&self.log, FsOp::SyncFile(self.path.clone()));
        self.inner.sync_data()
    }

    fn extend_zeroed(&mut self, end: u64) -> io::Result<()> {
        push(
            &self.log,
            FsOp::ExtendZeroed {
                path: self.path.clone(),
                end,
            },
        );
        self.inner.extend_zeroed(end)
    }
}

impl Fs for RecordingFs {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.record(FsOp::CreateNew(path.to_path_buf()));
        let inner = self.inner.create_new(path)?;
        Ok(Box::new(RecordingFile {
            inner,
            path: path.to_path_buf(),
            log: Arc::clone(&self.log),
        }))
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.record(FsOp::HardLink {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
        self.inner.hard_link(from, to)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.record(FsOp::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
        self.inner.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.record(FsOp::RemoveFile(path.to_path_buf()));
        self.inner.remove_file(path)
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.record(FsOp::RemoveDir(path.to_path_buf()));
        self.inner.remove_dir(path)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.record(FsOp::CreateDir(path.to_path_buf()));
        self.inner.create_dir(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.record(FsOp::SyncDir(path.to_path_buf()));
        self.inner.sync_dir(path)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.record(FsOp::Read(path.to_path_buf()));
        self.inner.read(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        self.record(FsOp::ReadDir(path.to_path_buf()));
        self.inner.read_dir(path)
    }

    fn symlink_metadata(&self, path: &Path) -> io::Result<FileKind> {
        self.record(FsOp::SymlinkMetadata(path.to_path_buf()));
        self.inner.symlink_metadata(path)
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FsLock>> {
        self.record(FsOp::Lock(path.to_path_buf()));
        self.inner.lock(path)
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn FsLock>>> {
        self.record(FsOp::TryLock(path.to_path_buf()));
        self.inner.try_lock(path)
    }

    fn may_hold_symlinks(&self, path: &Path) -> bool {
        self.inner.may_hold_symlinks(path)
    }
}
