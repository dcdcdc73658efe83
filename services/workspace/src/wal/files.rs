//! Journal files and object packs under `<data>/journal/runs/<cell>/<run>/`: listing a run's
//! files, writing them (each durable before it is named), reading records through a bounded cache
//! of decoded files and reading an object from its pack with its checksum verified. Must never
//! replace a pack or a journal file that exists.

use std::{
    collections::{BTreeMap, HashMap},
    io,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use prost::Message;
use toolplane_proto::v1::JournalEvent;
use toolplane_store::fs::{FileKind, Fs};

use super::{
    RunKey,
    frame::{
        digest16, frame_bodies, frame_body, journal_file_name, pack_name, parse_journal_file_name,
        parse_pack_body, parse_pack_name, push_frame, put_str,
    },
    io_err, lock,
    shared::ObjectRef,
};
use crate::{error::WsError, tree::Tree};

/// Most records of one journal file.
pub(super) const FILE_RECORDS: usize = 4096;
/// A journal file is closed once it passes this many bytes.
pub(super) const FILE_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of decoded journal files kept for reads.
pub(super) const CACHE_BYTES: usize = 32 * 1024 * 1024;
pub(super) const SEALED: &str = "sealed";

/// Where a checkpointed audit object is: one frame of one of its run's object packs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PackLoc {
    pub(super) pack: u64,
    pub(super) offset: u64,
    pub(super) frame_len: usize,
    pub(super) size: u64,
    pub(super) put_at: i64,
    /// Recognises a byte-identical retry without reading the pack.
    pub(super) digest: [u8; 16],
}

/// A run's checkpointed audit objects by path.
pub(super) type ObjectIndex = BTreeMap<String, PackLoc>;

/// A decoded journal file: its records, its size on disk, when it was last used.
pub(super) type Cached = (Arc<Vec<JournalEvent>>, usize, u64);

/// Decoded journal files (by run and first record), least recently used dropped first.
#[derive(Debug, Default)]
pub(super) struct FileCache {
    pub(super) entries: HashMap<(RunKey, u64), Cached>,
    pub(super) bytes: usize,
    pub(super) clock: u64,
}

impl FileCache {
    fn get(&mut self, key: &(RunKey, u64)) -> Option<Arc<Vec<JournalEvent>>> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(key).map(|(records, _, used)| {
            *used = clock;
            Arc::clone(records)
        })
    }

    fn put(&mut self, key: (RunKey, u64), records: Arc<Vec<JournalEvent>>, size: usize) {
        self.clock += 1;
        if let Some((_, old, _)) = self.entries.insert(key, (records, size, self.clock)) {
            self.bytes -= old;
        }
        self.bytes += size;
        while self.bytes > CACHE_BYTES && self.entries.len() > 1 {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (_, _, used))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((_, size, _)) = self.entries.remove(&oldest) {
                self.bytes -= size;
            }
        }
    }
}

/// Where journal files live, and reading them.
#[derive(Debug)]
pub(super) struct Files {
    pub(super) fs: Arc<dyn Fs>,
    pub(super) tree: Arc<Tree>,
    /// `<data>/journal/runs` (durable).
    pub(super) runs: PathBuf,
    pub(super) cache: Mutex<FileCache>,
}

impl Files {
    fn rel(key: &RunKey, name: &str) -> String {
        format!("{}/{}/{name}", key.0, key.1)
    }

    /// The journal files of a run (contiguous from 1), whether it is sealed, and the numbers of
    /// its object packs, in order.
    #[allow(clippy::type_complexity)]
    pub(super) fn load(&self, key: &RunKey) -> Result<(Vec<(u64, u64)>, bool, Vec<u64>), WsError> {
        let dir = self.runs.join(&key.0).join(&key.1);
        let entries = match self.fs.read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok((Vec::new(), false, Vec::new()));
            }
            Err(e) => return Err(io_err("list journal files", &dir, e)),
        };
        let mut files = Vec::new();
        let mut packs = Vec::new();
        let mut sealed = false;
        for entry in entries {
            if entry.kind != FileKind::File {
                return Err(WsError::escape(format!(
                    "unexpected entry in journal directory {}",
                    dir.join(&entry.name).display()
                )));
            }
            let Some(name) = entry.name.to_str() else {
                continue;
            };
            if name == SEALED {
                sealed = true;
            } else if let Some(range) = parse_journal_file_name(name) {
                files.push(range);
            } else if let Some(n) = parse_pack_name(name) {
                packs.push(n);
            }
        }
        files.sort_unstable();
        packs.sort_unstable();
        let mut expect = 1;
        for &(first, last) in &files {
            if first != expect || last < first {
                return Err(WsError::io(format!(
                    "journal files of run {} do not continue at {expect}: {first}-{last}",
                    key.1
                )));
            }
            expect = last + 1;
        }
        Ok((files, sealed, packs))
    }

    /// The index of the objects in a run's packs.
    pub(super) fn load_objects(&self, key: &RunKey, packs: &[u64]) -> Result<ObjectIndex, WsError> {
        let mut index = ObjectIndex::new();
        for &pack in packs {
            let path = self.runs.join(Self::rel(key, &pack_name(pack)));
            let data = self
                .fs
                .read(&path)
                .map_err(|e| io_err("read object pack", &path, e))?;
            let corrupt = |at: usize| {
                WsError::io(format!(
                    "corrupt object pack {}: bad frame at byte {at}",
                    path.display()
                ))
            };
            // A pack is only ever whole (written, synced, then renamed into place): its frames
            // are walked by their lengths here, and each checksum is verified when it is read.
            let mut at = 0;
            while at < data.len() {
                let body = data
                    .get(at..at + 4)
                    .and_then(|b| b.try_into().ok())
                    .map(|b| u32::from_le_bytes(b) as usize)
                    .and_then(|len| data.get(at + 12..at + 12 + len))
                    .ok_or_else(|| corrupt(at))?;
                let (name, put_at, digest, bytes) =
                    parse_pack_body(body).ok_or_else(|| corrupt(at))?;
                index.insert(
                    name,
                    PackLoc {
                        pack,
                        offset: at as u64,
                        frame_len: 12 + body.len(),
                        size: bytes.len() as u64,
                        put_at,
                        digest,
                    },
                );
                at += 12 + body.len();
            }
        }
        Ok(index)
    }

    /// Writes objects into the run's pack number `pack`, durably; returns their index entries.
    pub(super) fn write_pack(
        &self,
        key: &RunKey,
        pack: u64,
        objects: &[&ObjectRef],
    ) -> Result<Vec<(String, PackLoc)>, WsError> {
        let mut buf = Vec::with_capacity(
            objects
                .iter()
                .map(|o| o.bytes.len() + o.path.len() + 32)
                .sum(),
        );
        let mut entries = Vec::with_capacity(objects.len());
        for o in objects {
            let at = buf.len();
            let digest = digest16(&o.bytes);
            push_frame(&mut buf, |b| {
                put_str(b, o.path.as_bytes());
                b.extend_from_slice(&o.put_at.to_le_bytes());
                b.extend_from_slice(&digest);
                b.extend_from_slice(&o.bytes);
            });
            entries.push((
                o.path.clone(),
                PackLoc {
                    pack,
                    offset: at as u64,
                    frame_len: buf.len() - at,
                    size: o.bytes.len() as u64,
                    put_at: o.put_at,
                    digest,
                },
            ));
        }
        // A pack is never replaced: finding one under the name means this journal's idea of
        // the run's packs is out of date, and writing would lose the objects in it.
        let rel = Self::rel(key, &pack_name(pack));
        let path = self.runs.join(&rel);
        match self.fs.symlink_metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Ok(_) => {
                return Err(WsError::io(format!(
                    "object pack {} exists already; packs are never replaced",
                    path.display()
                )));
            }
            Err(e) => return Err(io_err("inspect object pack", &path, e)),
        }
        self.tree.write_durable(&self.runs, &rel, &buf)?;
        Ok(entries)
    }

    /// A checkpointed object's bytes, its frame checksum verified.
    pub(super) fn read_object(
        &self,
        key: &RunKey,
        path: &str,
        loc: &PackLoc,
    ) -> Result<Vec<u8>, WsError> {
        let pack = self.runs.join(Self::rel(key, &pack_name(loc.pack)));
        let frame = self
            .fs
            .read_range(&pack, loc.offset, loc.frame_len)
            .map_err(|e| io_err("read object pack", &pack, e))?;
        match frame_body(&frame).and_then(|(body, _)| parse_pack_body(body)) {
            Some((name, _, _, bytes)) if name == path && bytes.len() as u64 == loc.size => {
                Ok(bytes.to_vec())
            }
            _ => Err(WsError::io(format!(
                "corrupt object pack {}: the frame of {path} at byte {} does not hold it",
                pack.display(),
                loc.offset
            ))),
        }
    }

    pub(super) fn read_file(
        &self,
        key: &RunKey,
        first: u64,
        last: u64,
    ) -> Result<Arc<Vec<JournalEvent>>, WsError> {
        let cache_key = (key.clone(), first);
        if let Some(records) = lock(&self.cache).get(&cache_key) {
            return Ok(records);
        }
        let path = self
            .runs
            .join(Self::rel(key, &journal_file_name(first, last)));
        let data = self
            .fs
            .read(&path)
            .map_err(|e| io_err("read journal file", &path, e))?;
        let mut records = Vec::new();
        for body in frame_bodies(&data) {
            let event = JournalEvent::decode(body).map_err(|e| {
                WsError::io(format!("corrupt journal file {}: {e}", path.display()))
            })?;
            records.push(event);
        }
        let whole = records.len() as u64 == last - first + 1
            && records
                .iter()
                .enumerate()
                .all(|(i, r)| r.seq == first + i as u64);
        if !whole {
            return Err(WsError::io(format!(
                "corrupt journal file {}: it does not hold records {first}..{last}",
                path.display()
            )));
        }
        let records = Arc::new(records);
        lock(&self.cache).put(cache_key, Arc::clone(&records), data.len());
        Ok(records)
    }

    /// Writes records (consecutive) into journal files, durably; returns their ranges.
    pub(super) fn write(
        &self,
        key: &RunKey,
        records: &[JournalEvent],
    ) -> Result<Vec<(u64, u64)>, WsError> {
        let mut ranges = Vec::new();
        let mut rest = records;
        while let Some(head) = rest.first() {
            let mut buf = Vec::new();
            let mut n = 0;
            for record in rest.iter().take(FILE_RECORDS) {
                push_frame(&mut buf, |b| {
                    let _ = record.encode(b);
                });
                n += 1;
                if buf.len() >= FILE_BYTES {
                    break;
                }
            }
            let (first, last) = (head.seq, head.seq + n as u64 - 1);
            self.tree.write_durable(
                &self.runs,
                &Self::rel(key, &journal_file_name(first, last)),
                &buf,
            )?;
            ranges.push((first, last));
            rest = &rest[n..];
        }
        Ok(ranges)
    }

    pub(super) fn write_sealed(&self, key: &RunKey) -> Result<(), WsError> {
        self.tree
            .write_durable(&self.runs, &Self::rel(key, SEALED), b"")
    }
}
