//! The filesystem backend's sessions: each open store writes its temp files under a session of
//! its own in the temp area, held by a lock; a session whose lock is free belonged to a process
//! that is gone, and is removed.

use std::{
    collections::HashSet,
    io,
    path::Path,
    process,
    sync::atomic::Ordering,
    time::{SystemTime, UNIX_EPOCH},
};

use super::{FileKind, Fs, LOCK_SUFFIX, SESSION_SEQ, io_at};
use crate::StoreError;

/// A session name no other open store has: the process, the time and a counter.
pub(super) fn session_name() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or_default();
    let seq = SESSION_SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{}-{nanos:x}-{seq}", process::id())
}

/// Removes the temp directories of sessions whose lock is free: their process is gone.
pub(super) fn clean_dead_sessions(fs: &dyn Fs, tmp: &Path, own: &str) -> Result<(), StoreError> {
    let entries = fs
        .read_dir(tmp)
        .map_err(|e| io_at("read directory", tmp, e))?;
    let sessions: HashSet<String> = entries
        .iter()
        .filter_map(|entry| entry.name.to_str())
        .map(|name| name.strip_suffix(LOCK_SUFFIX).unwrap_or(name).to_owned())
        .filter(|session| session != own)
        .collect();
    for session in sessions {
        let lock_path = tmp.join(format!("{session}{LOCK_SUFFIX}"));
        let Some(_guard) = fs
            .try_lock(&lock_path)
            .map_err(|e| io_at("lock", &lock_path, e))?
        else {
            continue;
        };
        remove_tree(fs, &tmp.join(&session))?;
        // Removed while held, so nobody can take it over for a live session in between.
        match fs.remove_file(&lock_path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_at("remove", &lock_path, e)),
        }
    }
    Ok(())
}

/// Removes `dir` and everything in it without following symlinks. Only used inside the
/// backend's own temp area.
fn remove_tree(fs: &dyn Fs, dir: &Path) -> Result<(), StoreError> {
    let entries = match fs.read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_at("read directory", dir, e)),
    };
    for entry in entries {
        let path = dir.join(&entry.name);
        let removed = match entry.kind {
            FileKind::Dir => {
                remove_tree(fs, &path)?;
                continue;
            }
            _ => fs.remove_file(&path),
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_at("remove", &path, e)),
        }
    }
    match fs.remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_at("remove directory", dir, e)),
    }
}
