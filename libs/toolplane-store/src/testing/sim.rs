//! A simulated filesystem that can crash. Owns an in-memory model of what a POSIX page cache has
//! made durable and what it has not; must never make a change durable earlier than a real kernel
//! is obliged to, or tests built on it would prove nothing.
//!
//! The model: a file's contents become durable only when the file is fsynced; a directory entry
//! (created by create, link, rename, mkdir; removed by unlink, rename, rmdir) becomes durable only
//! when its directory is fsynced. [`SimFs::crash`] then decides what the disk holds, by a
//! [`CrashMode`]: drop all volatile state, keep all directory entries but no unsynced data (the
//! "zero-length file after a crash" pattern of delayed allocation), or an arbitrary per-entry and
//! per-file mix that may also tear unsynced files. [`SimFs::crash_after`] makes the k-th
//! operation from now, and every one after it, fail as if the process had died there.
//!
//! Symlinks can be planted (to test that the store refuses them) but are never followed: a path
//! through one fails, so a store that tried to traverse one is caught, not silently redirected.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    ffi::OsString,
    io,
    path::{Component, Path, PathBuf},
    sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError},
};

use crate::fs::{DirEntry, FileKind, Fs, FsFile, FsLock};

const ROOT: u64 = 0;

/// What [`SimFs::crash`] keeps of the state that was not yet durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Everything not fsynced is lost: the disk holds exactly the durable state.
    DropVolatile,
    /// Every directory change reached the disk, but no unsynced file contents did.
    KeepDirectoryEntries,
    /// Each unsynced directory entry independently reached the disk or not; each unsynced file
    /// kept its old contents, its new ones, or the new ones up to a torn point and the old ones
    /// after it (never less than a sync covered). Writes reaching the disk out of order (a later
    /// page without an earlier one) are not modelled. Deterministic for a given seed.
    Arbitrary { seed: u64 },
}

/// The simulated filesystem; clones share one disk. Paths are absolute; `/` always exists.
#[derive(Clone, Debug, Default)]
pub struct SimFs {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    world: Mutex<World>,
    lock_released: Condvar,
}

#[derive(Debug)]
enum Inode {
    File {
        data: Vec<u8>,
        durable: Vec<u8>,
    },
    Dir {
        entries: BTreeMap<OsString, u64>,
        durable: BTreeMap<OsString, u64>,
    },
    Symlink,
}

impl Inode {
    fn kind(&self) -> FileKind {
        match self {
            Inode::File { .. } => FileKind::File,
            Inode::Dir { .. } => FileKind::Dir,
            Inode::Symlink => FileKind::Symlink,
        }
    }

    fn new_dir() -> Inode {
        Inode::Dir {
            entries: BTreeMap::new(),
            durable: BTreeMap::new(),
        }
    }
}

#[derive(Debug)]
struct World {
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    /// Path → holder of the lock on it.
    locks: HashMap<PathBuf, u64>,
    next_holder: u64,
    /// Bumped by every crash; handles and locks from an earlier epoch belong to a dead process.
    epoch: u64,
    ops: u64,
    crash_after: Option<u64>,
    crashed: bool,
}

impl Default for World {
    fn default() -> World {
        World {
            inodes: HashMap::from([(ROOT, Inode::new_dir())]),
            next_inode: ROOT + 1,
            locks: HashMap::new(),
            next_holder: 0,
            epoch: 0,
            ops: 0,
            crash_after: None,
            crashed: false,
        }
    }
}

fn crashed_error() -> io::Error {
    io::Error::other("simulated crash: the process is dead")
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("sim: no such file: {}", path.display()),
    )
}

/// splitmix64: a tiny deterministic generator, so crash choices replay from a seed.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 { 0 } else { self.next() % bound }
    }
}

impl World {
    /// Counts one operation, failing it if the injected crash is due.
    fn op(&mut self) -> io::Result<()> {
        if self.crashed {
            return Err(crashed_error());
        }
        if self.crash_after.is_some_and(|after| self.ops >= after) {
            self.crashed = true;
            return Err(crashed_error());
        }
        self.ops += 1;
        Ok(())
    }

    fn alloc(&mut self, inode: Inode) -> u64 {
        let id = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(id, inode);
        id
    }

    fn entries(&self, dir: u64) -> Option<&BTreeMap<OsString, u64>> {
        match self.inodes.get(&dir) {
            Some(Inode::Dir { entries, .. }) => Some(entries),
            _ => None,
        }
    }

    fn entries_mut(&mut self, dir: u64) -> Option<&mut BTreeMap<OsString, u64>> {
        match self.inodes.get_mut(&dir) {
            Some(Inode::Dir { entries, .. }) => Some(entries),
            _ => None,
        }
    }

    /// The directory holding `path`'s last component, and that component.
    fn parent_of(&self, path: &Path) -> io::Result<(u64, OsString)> {
        let mut components = path.components();
        if components.next() != Some(Component::RootDir) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "sim: paths must be absolute",
            ));
        }
        let names: Vec<&std::ffi::OsStr> = components
            .map(|component| match component {
                Component::Normal(name) => Ok(name),
                _ => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "sim: paths must be normalised",
                )),
            })
            .collect::<io::Result<_>>()?;
        let Some((last, dirs)) = names.split_last() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "sim: path is the root",
            ));
        };
        let mut dir = ROOT;
        for name in dirs {
            let Some(&child) = self.entries(dir).and_then(|entries| entries.get(*name)) else {
                return Err(not_found(path));
            };
            match self.inodes.get(&child) {
                Some(Inode::Dir { .. }) => dir = child,
                Some(Inode::File { .. }) => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotADirectory,
                        format!("sim: not a directory on the way to {}", path.display()),
                    ));
                }
                Some(Inode::Symlink) => {
                    return Err(io::Error::other(format!(
                        "sim: refusing to follow a symlink on the way to {}",
                        path.display()
                    )));
                }
                None => return Err(not_found(path)),
            }
        }
        Ok((dir, (*last).to_owned()))
    }

    fn lookup(&self, path: &Path) -> io::Result<u64> {
        if path == Path::new("/") {
            return Ok(ROOT);
        }
        let (dir, name) = self.parent_of(path)?;
        self.entries(dir)
            .and_then(|entries| entries.get(&name))
            .copied()
            .ok_or_else(|| not_found(path))
    }

    /// Adds `name → inode` in `dir`, failing if the name is taken.
    fn link(&mut self, dir: u64, name: OsString, inode: u64, path: &Path) -> io::Result<()> {
        let entries = self.entries_mut(dir).ok_or_else(|| not_found(path))?;
        if entries.contains_key(&name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("sim: already exists: {}", path.display()),
            ));
        }
        entries.insert(name, inode);
        Ok(())
    }

    fn crash(&mut self, mode: CrashMode) {
        let mut rng = match mode {
            CrashMode::Arbitrary { seed } => Some(Rng(seed)),
            _ => None,
        };
        let mut ids: Vec<u64> = self.inodes.keys().copied().collect();
        // Decide in a fixed order so a seed replays the same crash.
        ids.sort_unstable();
        for id in ids {
            let Some(inode) = self.inodes.get_mut(&id) else {
                continue;
            };
            match inode {
                Inode::Dir { entries, durable } => {
                    let survived = match (&mode, rng.as_mut()) {
                        (CrashMode::DropVolatile, _) => durable.clone(),
                        (CrashMode::KeepDirectoryEntries, _) => entries.clone(),
                        (_, Some(rng)) => {
                            let names: std::collections::BTreeSet<&OsString> =
                                entries.keys().chain(durable.keys()).collect();
                            let mut kept = BTreeMap::new();
                            for name in names {
                                let new = entries.get(name);
                                let old = durable.get(name);
                                let pick = if new == old || rng.below(2) == 0 {
                                    new
                                } else {
                                    old
                                };
                                if let Some(&inode) = pick {
                                    kept.insert(name.clone(), inode);
                                }
                            }
                            kept
                        }
                        (_, None) => durable.clone(),
                    };
                    *entries = survived.clone();
                    *durable = survived;
                }
                Inode::File { data, durable } => {
                    let survived = match (&mode, rng.as_mut()) {
                        (_, Some(rng)) if data != durable => match rng.below(3) {
                            0 => durable.clone(),
                            1 => data.clone(),
                            _ => {
                                // Written back in order up to a torn point: the new bytes
                                // before it, the durable ones after it. What a sync covered
                                // is never cut off.
                                let keep =
                                    usize::try_from(rng.below(data.len() as u64 + 1)).unwrap_or(0);
                                let mut torn = data[..keep].to_vec();
                                if let Some(rest) = durable.get(keep..) {
                                    torn.extend_from_slice(rest);
                                }
                                torn
                            }
                        },
                        _ => durable.clone(),
                    };
                    *data = survived.clone();
                    *durable = survived;
                }
                Inode::Symlink => {}
            }
        }
        self.collect_garbage();
        self.locks.clear();
        self.epoch += 1;
        self.ops = 0;
        self.crash_after = None;
        self.crashed = false;
    }

    /// Drops inodes no surviving entry reaches.
    fn collect_garbage(&mut self) {
        let mut reachable = HashSet::from([ROOT]);
        let mut stack = vec![ROOT];
        while let Some(dir) = stack.pop() {
            if let Some(entries) = self.entries(dir) {
                for &child in entries.values() {
                    if reachable.insert(child) {
                        stack.push(child);
                    }
                }
            }
        }
        self.inodes.retain(|id, _| reachable.contains(id));
    }
}

impl SimFs {
    pub fn new() -> SimFs {
        SimFs::default()
    }

    fn world(&self) -> MutexGuard<'_, World> {
        // Test-only model: a panic mid-update is already a failing test.
        self.shared
            .world
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets `ops` more operations succeed; the next one and all after it fail as if the process
    /// died there, until [`SimFs::crash`].
    pub fn crash_after(&self, ops: u64) {
        let mut world = self.world();
        world.ops = 0;
        world.crash_after = Some(ops);
    }

    /// Lets `ops` more operations succeed from now on, counting on from the operations already
    /// counted (unlike [`SimFs::crash_after`], which starts the count again); returns that count.
    pub fn crash_after_more(&self, ops: u64) -> u64 {
        let mut world = self.world();
        let counted = world.ops;
        world.crash_after = Some(counted.saturating_add(ops));
        counted
    }

    /// Whether the injected crash has happened.
    pub fn has_crashed(&self) -> bool {
        self.world().crashed
    }

    /// Operations counted since the last [`SimFs::crash_after`] or crash.
    pub fn ops(&self) -> u64 {
        self.world().ops
    }

    /// The machine goes down and comes back: volatile state is resolved by `mode`, locks are
    /// released, and handles from before the crash stop working.
    pub fn crash(&self, mode: CrashMode) {
        self.world().crash(mode);
        self.shared.lock_released.notify_all();
    }

    /// Setup helper (not counted, always durable): creates `path` and its missing ancestors.
    pub fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut world = self.world();
        let mut dir = ROOT;
        for component in path.components() {
            let Component::Normal(name) = component else {
                continue;
            };
            let existing = world
                .entries(dir)
                .and_then(|entries| entries.get(name))
                .copied();
            dir = match existing {
                Some(child) if matches!(world.inodes.get(&child), Some(Inode::Dir { .. })) => child,
                Some(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotADirectory,
                        "sim: not a directory",
                    ));
                }
                None => {
                    let child = world.alloc(Inode::new_dir());
                    if let Some(Inode::Dir { entries, durable }) = world.inodes.get_mut(&dir) {
                        entries.insert(name.to_owned(), child);
                        durable.insert(name.to_owned(), child);
                    }
                    child
                }
            };
        }
        Ok(())
    }

    /// Setup helper (not counted, always durable): plants a symlink at `path`.
    pub fn plant_symlink(&self, path: &Path) -> io::Result<()> {
        self.plant(path, Inode::Symlink)
    }

    /// Setup helper (not counted, always durable): plants a regular file at `path`.
    pub fn plant_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.plant(
            path,
            Inode::File {
                data: bytes.to_vec(),
                durable: bytes.to_vec(),
            },
        )
    }

    fn plant(&self, path: &Path, inode: Inode) -> io::Result<()> {
        let mut world = self.world();
        let (dir, name) = world.parent_of(path)?;
        let id = world.alloc(inode);
        world.link(dir, name.clone(), id, path)?;
        if let Some(Inode::Dir { durable, .. }) = world.inodes.get_mut(&dir) {
            durable.insert(name, id);
        }
        Ok(())
    }

    /// Every non-directory path at or below `path` (not counted), sorted.
    pub fn files_under(&self, path: &Path) -> Vec<PathBuf> {
        let world = self.world();
        let mut found = Vec::new();
        let Ok(start) = world.lookup(path) else {
            return found;
        };
        let mut stack = vec![(start, path.to_path_buf())];
        while let Some((id, at)) = stack.pop() {
            match world.inodes.get(&id) {
                Some(Inode::Dir { entries, .. }) => {
                    for (name, &child) in entries {
                        stack.push((child, at.join(name)));
                    }
                }
                Some(_) => found.push(at),
                None => {}
            }
        }
        found.sort();
        found
    }
}

#[derive(Debug)]
struct SimFile {
    fs: SimFs,
    inode: u64,
    epoch: u64,
    /// Where the next write lands: writes overwrite zeros from [`FsFile::extend_zeroed`].
    pos: usize,
}

impl SimFile {
    fn with_data(&self, update: impl FnOnce(&mut Vec<u8>, &mut Vec<u8>)) -> io::Result<()> {
        let mut world = self.fs.world();
        if world.epoch != self.epoch {
            return Err(crashed_error());
        }
        world.op()?;
        match world.inodes.get_mut(&self.inode) {
            Some(Inode::File { data, durable }) => {
                update(data, durable);
                Ok(())
            }
            // Unlinked and then collected by a crash: the handle is from a dead process.
            _ => Err(crashed_error()),
        }
    }
}

impl FsFile for SimFile {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let at = self.pos;
        self.with_data(|data, _| {
            let end = at + bytes.len();
            if data.len() < end {
                data.resize(end, 0);
            }
            data[at..end].copy_from_slice(bytes);
        })?;
        self.pos += bytes.len();
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.with_data(|data, durable| durable.clone_from(data))
    }

    fn extend_zeroed(&mut self, end: u64) -> io::Result<()> {
        let end = usize::try_from(end).map_err(io::Error::other)?;
        self.with_data(|data, _| {
            if data.len() < end {
                data.resize(end, 0);
            }
        })
    }
}

#[derive(Debug)]
struct SimLock {
    fs: SimFs,
    path: PathBuf,
    holder: u64,
    epoch: u64,
}

impl FsLock for SimLock {}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut world = self.fs.world();
        if world.epoch == self.epoch && world.locks.get(&self.path) == Some(&self.holder) {
            world.locks.remove(&self.path);
        }
        drop(world);
        self.fs.shared.lock_released.notify_all();
    }
}

impl SimFs {
    /// Opens `path` for locking the way `open(O_CREAT)` would, then takes the lock if free.
    fn acquire(&self, path: &Path, wait: bool) -> io::Result<Option<Box<dyn FsLock>>> {
        let mut world = self.world();
        world.op()?;
        if world.lookup(path).is_err() {
            let (dir, name) = world.parent_of(path)?;
            let id = world.alloc(Inode::File {
                data: Vec::new(),
                durable: Vec::new(),
            });
            world.link(dir, name, id, path)?;
        }
        let epoch = world.epoch;
        while world.locks.contains_key(path) {
            if !wait {
                return Ok(None);
            }
            world = self
                .shared
                .lock_released
                .wait(world)
                .unwrap_or_else(PoisonError::into_inner);
            if world.epoch != epoch {
                return Err(crashed_error());
            }
        }
        let holder = world.next_holder;
        world.next_holder += 1;
        world.locks.insert(path.to_path_buf(), holder);
        Ok(Some(Box::new(SimLock {
            fs: self.clone(),
            path: path.to_path_buf(),
            holder,
            epoch,
        })))
    }
}

impl Fs for SimFs {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let mut world = self.world();
        world.op()?;
        let (dir, name) = world.parent_of(path)?;
        let id = world.alloc(Inode::File {
            data: Vec::new(),
            durable: Vec::new(),
        });
        world.link(dir, name, id, path)?;
        Ok(Box::new(SimFile {
            fs: self.clone(),
            inode: id,
            epoch: world.epoch,
            pos: 0,
        }))
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut world = self.world();
        world.op()?;
        let inode = world.lookup(from)?;
        match world.inodes.get(&inode) {
            Some(Inode::File { .. }) => {}
            Some(Inode::Dir { .. }) => {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "sim: can not link a directory",
                ));
            }
            _ => return Err(io::Error::other("sim: can only link regular files")),
        }
        let (dir, name) = world.parent_of(to)?;
        world.link(dir, name, inode, to)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut world = self.world();
        world.op()?;
        let (from_dir, from_name) = world.parent_of(from)?;
        let inode = world.lookup(from)?;
        if !matches!(world.inodes.get(&inode), Some(Inode::File { .. })) {
            return Err(io::Error::other("sim: only regular files are renamed"));
        }
        let (to_dir, to_name) = world.parent_of(to)?;
        let target = world
            .entries(to_dir)
            .and_then(|entries| entries.get(&to_name))
            .copied();
        if let Some(target) = target {
            if target == inode {
                // POSIX: renaming a file onto another link of itself does nothing.
                return Ok(());
            }
            if matches!(world.inodes.get(&target), Some(Inode::Dir { .. })) {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    "sim: target is a directory",
                ));
            }
        }
        if let Some(entries) = world.entries_mut(from_dir) {
            entries.remove(&from_name);
        }
        if let Some(entries) = world.entries_mut(to_dir) {
            entries.insert(to_name, inode);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut world = self.world();
        world.op()?;
        let inode = world.lookup(path)?;
        if matches!(world.inodes.get(&inode), Some(Inode::Dir { .. })) {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "sim: is a directory",
            ));
        }
        let (dir, name) = world.parent_of(path)?;
        if let Some(entries) = world.entries_mut(dir) {
            entries.remove(&name);
        }
        Ok(())
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        let mut world = self.world();
        world.op()?;
        let inode = world.lookup(path)?;
        match world.entries(inode) {
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    "sim: not a directory",
                ));
            }
            Some(entries) if !entries.is_empty() => {
                return Err(io::Error::new(
                    io::ErrorKind::DirectoryNotEmpty,
                    "sim: directory not empty",
                ));
            }
            Some(_) => {}
        }
        let (dir, name) = world.parent_of(path)?;
        if let Some(entries) = world.entries_mut(dir) {
            entries.remove(&name);
        }
        Ok(())
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        let mut world = self.world();
        world.op()?;
        let (dir, name) = world.parent_of(path)?;
        if world
            .entries(dir)
            .is_some_and(|entries| entries.contains_key(&name))
        {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "sim: already exists",
            ));
        }
        let id = world.alloc(Inode::new_dir());
        world.link(dir, name, id, path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut world = self.world();
        world.op()?;
        let inode = world.lookup(path)?;
        match world.inodes.get_mut(&inode) {
            Some(Inode::Dir { entries, durable }) => {
                durable.clone_from(entries);
                Ok(())
            }
            _ => Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "sim: not a directory",
            )),
        }
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut world = self.world();
        world.op()?;
        let inode = world.lookup(path)?;
        match world.inodes.get(&inode) {
            Some(Inode::File { data, .. }) => Ok(data.clone()),
            Some(Inode::Dir { .. }) => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "sim: is a directory",
            )),
            _ => Err(io::Error::other("sim: refusing to follow a symlink")),
        }
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let mut world = self.world();
        world.op()?;
        let inode = world.lookup(path)?;
        let entries = world
            .entries(inode)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotADirectory, "sim: not a directory"))?;
        // Reverse order, so nothing can rely on directory order by accident.
        Ok(entries
            .iter()
            .rev()
            .filter_map(|(name, id)| {
                world.inodes.get(id).map(|inode| DirEntry {
                    name: name.clone(),
                    kind: inode.kind(),
                })
            })
            .collect())
    }

    fn symlink_metadata(&self, path: &Path) -> io::Result<FileKind> {
        let mut world = self.world();
        world.op()?;
        let inode = world.lookup(path)?;
        world
            .inodes
            .get(&inode)
            .map(Inode::kind)
            .ok_or_else(|| not_found(path))
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FsLock>> {
        self.acquire(path, true)?
            .ok_or_else(|| io::Error::other("sim: lock not acquired"))
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn FsLock>>> {
        self.acquire(path, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(path: &str) -> &Path {
        Path::new(path)
    }

    fn write(fs: &SimFs, path: &str, bytes: &[u8], sync: bool) {
        let mut file = fs.create_new(p(path)).unwrap();
        file.write_all(bytes).unwrap();
        if sync {
            file.sync().unwrap();
        }
    }

    #[test]
    fn unsynced_entry_is_lost_and_synced_one_survives() {
        let fs = SimFs::new();
        fs.create_dir_all(p("/d")).unwrap();
        write(&fs, "/d/a", b"a", true);
        fs.crash(CrashMode::DropVolatile);
        assert!(fs.read(p("/d/a")).is_err(), "entry was never synced");

        write(&fs, "/d/a", b"a", true);
        fs.sync_dir(p("/d")).unwrap();
        fs.crash(CrashMode::DropVolatile);
        assert_eq!(fs.read(p("/d/a")).unwrap(), b"a");
    }

    #[test]
    fn synced_entry_without_synced_data_is_an_empty_file() {
        // The hazard the store's protocol exists to avoid, shown to be modelled.
        let fs = SimFs::new();
        fs.create_dir_all(p("/d")).unwrap();
        write(&fs, "/d/a", b"payload", false);
        fs.sync_dir(p("/d")).unwrap();
        fs.crash(CrashMode::DropVolatile);
        assert_eq!(fs.read(p("/d/a")).unwrap(), b"");
    }

    #[test]
    fn keep_directory_entries_keeps_names_but_not_data() {
        let fs = SimFs::new();
        fs.create_dir_all(p("/d")).unwrap();
        write(&fs, "/d/a", b"payload", false);
        fs.crash(CrashMode::KeepDirectoryEntries);
        assert_eq!(fs.read(p("/d/a")).unwrap(), b"");
    }

    #[test]
    fn a_new_directory_needs_its_parent_synced() {
        let fs = SimFs::new();
        fs.create_dir(p("/d")).unwrap();
        write(&fs, "/d/a", b"a", true);
        fs.sync_dir(p("/d")).unwrap();
        fs.crash(CrashMode::DropVolatile);
        assert_eq!(
            fs.symlink_metadata(p("/d")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn injected_crash_fails_the_kth_op_and_all_after() {
        let fs = SimFs::new();
        fs.crash_after(2);
        fs.create_dir(p("/a")).unwrap();
        fs.create_dir(p("/b")).unwrap();
        assert!(fs.create_dir(p("/c")).is_err());
        assert!(fs.has_crashed());
        assert!(fs.sync_dir(p("/")).is_err());
        fs.crash(CrashMode::DropVolatile);
        assert!(!fs.has_crashed());
        assert_eq!(fs.files_under(p("/")), Vec::<PathBuf>::new());
        assert!(fs.symlink_metadata(p("/a")).is_err());
    }

    #[test]
    fn link_never_replaces_and_rename_does() {
        let fs = SimFs::new();
        write(&fs, "/t1", b"one", true);
        write(&fs, "/t2", b"two", true);
        fs.hard_link(p("/t1"), p("/x")).unwrap();
        let err = fs.hard_link(p("/t2"), p("/x")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        fs.rename(p("/t2"), p("/x")).unwrap();
        assert_eq!(fs.read(p("/x")).unwrap(), b"two");
        assert!(fs.read(p("/t2")).is_err());
    }

    #[test]
    fn symlinks_are_never_traversed() {
        let fs = SimFs::new();
        fs.plant_symlink(p("/link")).unwrap();
        assert_eq!(fs.symlink_metadata(p("/link")).unwrap(), FileKind::Symlink);
        assert!(fs.create_dir(p("/link/x")).is_err());
        assert!(fs.read(p("/link")).is_err());
    }

    #[test]
    fn locks_exclude_and_die_with_the_crash() {
        let fs = SimFs::new();
        let held = fs.lock(p("/l")).unwrap();
        assert!(fs.try_lock(p("/l")).unwrap().is_none());
        drop(held);
        let held = fs.try_lock(p("/l")).unwrap();
        assert!(held.is_some());
        fs.crash(CrashMode::DropVolatile);
        assert!(fs.try_lock(p("/l")).unwrap().is_some());
        drop(held);
    }

    #[test]
    fn arbitrary_crash_is_deterministic_per_seed() {
        let run = |seed| {
            let fs = SimFs::new();
            for i in 0..16 {
                write(&fs, &format!("/f{i}"), b"0123456789", i % 2 == 0);
            }
            fs.crash(CrashMode::Arbitrary { seed });
            fs.files_under(p("/"))
                .into_iter()
                .map(|path| (path.clone(), fs.read(&path).unwrap()))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        let outcomes: HashSet<_> = (0..20).map(run).collect();
        assert!(
            outcomes.len() > 1,
            "different seeds should crash differently"
        );
    }
}
