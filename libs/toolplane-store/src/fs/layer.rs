//! The filesystem layer under [`super::FsStore`]. Owns the small set of blocking IO calls the
//! backend may make, so tests can swap in a simulated crash filesystem or a recorder; must never
//! add policy (retries, symlink checks, ordering): that lives in the backend, where it is tested.

use std::{
    ffi::OsString,
    fmt,
    fs::{File, OpenOptions, TryLockError},
    io::{self, Read, Write},
    path::Path,
};

/// What a path is, without following a symlink at its last component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    /// A fifo, socket or device: never created by the store.
    Other,
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: OsString,
    pub kind: FileKind,
}

/// A file opened for writing by [`Fs::create_new`].
pub trait FsFile: Send + fmt::Debug {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// `fsync`: the file's contents are durable once this returns (its directory entry is not).
    fn sync(&mut self) -> io::Result<()>;
    /// `fdatasync`: like [`FsFile::sync`] for the contents and what reading them needs (the
    /// size), without flushing other metadata such as times.
    fn sync_data(&mut self) -> io::Result<()> {
        self.sync()
    }
    /// Extends the file with zero bytes to `end` bytes (nothing if it is that long already),
    /// without moving the write position: later [`FsFile::write_all`]s overwrite the zeros in
    /// place. Once a sync has covered them, writes into such space change neither the file's
    /// size nor its block map, so [`FsFile::sync_data`] flushes data alone, with no commit of the
    /// filesystem's own journal. The default does nothing (the file then grows with each write,
    /// which is correct, only slower to sync).
    fn extend_zeroed(&mut self, end: u64) -> io::Result<()> {
        let _ = end;
        Ok(())
    }
}

/// An exclusive advisory lock, released on drop.
pub trait FsLock: Send + Sync + fmt::Debug {}

/// The blocking IO the filesystem backend does. Paths are absolute. Errors use the standard
/// `io::ErrorKind`s (`AlreadyExists`, `NotFound`, `IsADirectory`, `NotADirectory`,
/// `DirectoryNotEmpty`) because the backend branches on them.
pub trait Fs: Send + Sync + fmt::Debug {
    /// Creates a new empty file, failing with `AlreadyExists` if anything is at `path`.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    /// `link(2)`: adds a name for the file at `from`; fails with `AlreadyExists` if `to` exists.
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// `rename(2)`: atomically replaces a file at `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes an empty directory.
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    /// Creates one directory; its parent must exist.
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// `fsync` of a directory: entries added or removed in it are durable once this returns.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// The whole contents of a regular file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// `len` bytes of a regular file from `offset`; `UnexpectedEof` when the file is shorter.
    fn read_range(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let all = self.read(path)?;
        usize::try_from(offset)
            .ok()
            .and_then(|at| all.get(at..at.checked_add(len)?))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))
    }
    /// The entries of a directory, in no particular order, without `.` and `..`.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>>;
    /// What is at `path`, without following a symlink there.
    fn symlink_metadata(&self, path: &Path) -> io::Result<FileKind>;
    /// Opens (creating if needed) the file at `path` and waits for an exclusive lock on it.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FsLock>>;
    /// Like [`Fs::lock`] but returns `None` instead of waiting when someone holds the lock.
    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn FsLock>>>;
    /// Whether a symlink or special file the caller did not make may appear at `path`. A caller
    /// that re-checks a path right before replacing it, so as never to replace one planted
    /// meanwhile, may skip that re-check where this is false. The default says it may.
    fn may_hold_symlinks(&self, path: &Path) -> bool {
        let _ = path;
        true
    }
}

/// The real filesystem through `std::fs`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

#[derive(Debug)]
struct RealFile(File);

impl FsFile for RealFile {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_all()
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    #[cfg(unix)]
    fn extend_zeroed(&mut self, end: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        /// Zeros written per call, so a long extension needs no buffer of its size.
        const CHUNK: u64 = 256 * 1024;
        let mut at = self.0.metadata()?.len();
        if at >= end {
            return Ok(());
        }
        let zeros = vec![0u8; CHUNK.min(end - at) as usize];
        while at < end {
            let n = (end - at).min(CHUNK) as usize;
            self.0.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        Ok(())
    }
}

/// Holds the open file; closing it releases the `flock`.
#[derive(Debug)]
struct RealLock {
    _file: File,
}

impl FsLock for RealLock {}

fn kind_of(file_type: std::fs::FileType) -> FileKind {
    if file_type.is_symlink() {
        FileKind::Symlink
    } else if file_type.is_dir() {
        FileKind::Dir
    } else if file_type.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    }
}

fn open_lock_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Raised by [`RealFs::read`] when the file it opened is not the regular file at the path, i.e.
/// the path was swapped for a symlink between the backend's check and the open.
#[derive(Debug)]
pub(crate) struct SwappedForSymlink;

impl fmt::Display for SwappedForSymlink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("path was replaced by a symlink while opening it")
    }
}

impl std::error::Error for SwappedForSymlink {}

impl Fs for RealFs {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let file = OpenOptions::new().write(true).create_new(true).open(path)?;
        Ok(Box::new(RealFile(file)))
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::hard_link(from, to)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        // A writer in another process may rename a new version into place between the open and
        // the check below; that is a different regular file, not an escape: open again.
        for _ in 0..8 {
            let mut file = File::open(path)?;
            // `open` follows symlinks and std has no portable O_NOFOLLOW, so check that what we
            // opened is the very regular file now at the path (the backend checked the path
            // first).
            let opened = file.metadata()?;
            let at_path = std::fs::symlink_metadata(path)?;
            if !opened.is_file() || !at_path.is_file() {
                return Err(io::Error::other(SwappedForSymlink));
            }
            if !same_file(&opened, &at_path) {
                continue;
            }
            let mut bytes = Vec::with_capacity(usize::try_from(opened.len()).unwrap_or(0));
            file.read_to_end(&mut bytes)?;
            return Ok(bytes);
        }
        Err(io::Error::other(SwappedForSymlink))
    }

    #[cfg(unix)]
    fn read_range(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let file = File::open(path)?;
        // As in `read`: only the regular file now at the path, never what a symlink points at.
        let opened = file.metadata()?;
        let at_path = std::fs::symlink_metadata(path)?;
        if !opened.is_file() || !at_path.is_file() || !same_file(&opened, &at_path) {
            return Err(io::Error::other(SwappedForSymlink));
        }
        let mut bytes = vec![0; len];
        file.read_exact_at(&mut bytes, offset)?;
        Ok(bytes)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        std::fs::read_dir(path)?
            .map(|entry| {
                let entry = entry?;
                Ok(DirEntry {
                    name: entry.file_name(),
                    kind: kind_of(entry.file_type()?),
                })
            })
            .collect()
    }

    fn symlink_metadata(&self, path: &Path) -> io::Result<FileKind> {
        Ok(kind_of(std::fs::symlink_metadata(path)?.file_type()))
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FsLock>> {
        let file = open_lock_file(path)?;
        file.lock()?;
        Ok(Box::new(RealLock { _file: file }))
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn FsLock>>> {
        let file = open_lock_file(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Box::new(RealLock { _file: file }))),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(error)) => Err(error),
        }
    }
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_: &std::fs::Metadata, _: &std::fs::Metadata) -> bool {
    // Without inode numbers the type checks above are all we can do.
    true
}
