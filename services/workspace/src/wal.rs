//! The group-committed log: the journal's storage and the home of audit objects. Owns the log
//! segments under `<data>/journal/`, the journal files and object packs they are checkpointed
//! into (`<data>/journal/runs/<cell>/<run>/`), each run's index of its audit objects and the
//! in-memory tail of each journal; must never acknowledge a record before the fsync that covers
//! it, never let a journal record become durable before an object it may name, never accept a
//! second record for a sequence number or a second object for a path, and never delete a segment
//! before everything it holds is durable elsewhere.
//!
//! **Group commit.** One writer thread appends frames to the current segment. Whatever arrived
//! while it was busy is written with one `write` and made durable with one `fsync`, then the
//! journal records of that group are published to readers and followers and the waiting callers
//! are answered. Frames are `[u32 body length][first 8 bytes of sha256(body)][body]`. Audit
//! objects come from puts or carried by the append of the records naming them (one job, objects
//! first); either way an object is in the log no later than any record appended after it. The
//! writer keeps the segment's file extended with zeros about a MiB ahead of its writes, written
//! with a group and synced by its `fdatasync`, so most groups overwrite space the file already has
//! and their `fdatasync` flushes data alone; recovery reads those zeros as the torn frame where
//! the segment ends.
//!
//! **Checkpoints.** Until its segment is checkpointed an audit object is served from memory
//! (`pending`; puts wait while too much is). Once the writer closes a segment (it passed
//! `journal_segment_bytes`, or it holds 1/16 of that and the log was quiet for
//! `journal_idle_close_ms`, or a checkpoint was asked for, or the service stops), the checkpointer
//! writes each run's objects of that segment into one new immutable object pack of the run
//! (`objects-<n>.pack`, numbered per run; frames of path, put time and bytes) and adds them to
//! the run's object index, writes each run's records into an immutable journal file
//! (`<first seq>-<last seq>.jrn`, frames of encoded records), writes a `sealed` marker for runs
//! sealed in it — every file written to a temp file, fsynced, renamed into place and its
//! directory fsynced — and only then deletes the segment (and fsyncs the directory). A tool call's
//! two audit objects so cost no file of their own: a run's objects share one pack per segment.
//! Segments are checkpointed strictly in order, so the journal files of a run are always its
//! records 1..n without a gap.
//!
//! **Reads.** A journal in memory is its journal-file index, the records not yet checkpointed
//! (the tail), its seal state and the index of its checkpointed objects (path → pack, offset,
//! size, digest). Older records are read from the journal files through a bounded cache; an object
//! is read from its pack with one positioned read and its frame checksum verified. A journal with
//! no tail that nobody holds or looked up since the previous checkpoint is dropped from memory
//! and reloaded from its directory when needed.
//!
//! **Start.** Every remaining segment is read up to its first torn frame and checkpointed before
//! the service serves: its objects go to new packs (those a cut-short checkpoint already packed
//! are skipped), records after a run's journal files are written to new ones, the segment is
//! deleted. A crash
//! at any point of a checkpoint leaves the segment in place, and the next start redoes it.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    io,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, MutexGuard, OnceLock, PoisonError,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
        mpsc,
    },
    thread::JoinHandle,
    time::Duration,
};

use prost::Message;
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, oneshot, watch};
use toolplane_proto::v1::JournalEvent;
use toolplane_store::fs::{FileKind, Fs, FsFile};

use crate::{
    engine::now_ms,
    error::WsError,
    paths,
    tree::{Entry, Read, Tree},
};

/// Most bytes one group writes (the rest waits for the next group).
const GROUP_BYTES: usize = 16 * 1024 * 1024;
/// Bytes of audit objects waiting for their checkpoint above which puts wait.
const MAX_PENDING_BYTES: u64 = 256 * 1024 * 1024;
/// Zeros the writer keeps written ahead of its next group ([`zero_ahead`]).
const ZERO_AHEAD: u64 = 1024 * 1024;
/// The writer extends the zeros once fewer than this many bytes of them are left.
const ZERO_AHEAD_LOW: u64 = ZERO_AHEAD / 4;
/// A quiet log closes its segment once it holds a 1/`QUIET_CLOSE_FILL` of `segment_bytes` (1 MiB
/// of the default 16): a trickle of calls, each after a pause, never gets a pack and a journal file
/// per call.
const QUIET_CLOSE_FILL: u64 = 16;
/// Largest segment: pending objects are bounded by the segments not yet checkpointed.
const MAX_SEGMENT_BYTES: u64 = MAX_PENDING_BYTES / 4;
/// Most records of one journal file.
const FILE_RECORDS: usize = 4096;
/// A journal file is closed once it passes this many bytes.
const FILE_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of decoded journal files kept for reads.
const CACHE_BYTES: usize = 32 * 1024 * 1024;
/// An audit object without its put time (segments written before put times were logged).
const KIND_OBJECT_UNTIMED: u8 = 1;
const KIND_EVENT: u8 = 2;
const KIND_SEAL: u8 = 3;
/// An audit object with the time it was put.
const KIND_OBJECT: u8 = 4;
const SEALED: &str = "sealed";

/// `(cell, run)`.
pub type RunKey = (String, String);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn io_err(what: &str, path: &Path, e: io::Error) -> WsError {
    WsError::io(format!("{what} {}: {e}", path.display()))
}

fn unavailable(message: impl Into<String>) -> WsError {
    WsError::status(
        "workspace.journal_unavailable",
        tonic::Code::Unavailable,
        message,
    )
}

// ---------------------------------------------------------------------------------------------
// Frames

fn put_str(buf: &mut Vec<u8>, s: &[u8]) {
    buf.extend_from_slice(&(s.len() as u32).to_le_bytes());
    buf.extend_from_slice(s);
}

/// Appends a frame whose body `body` writes to `out`, in place (no intermediate buffer).
fn push_frame(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0; 12]);
    body(out);
    let len = (out.len() - at - 12) as u32;
    let sum = Sha256::digest(&out[at + 12..]);
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    out[at + 4..at + 12].copy_from_slice(&sum[..8]);
}

fn object_frame(out: &mut Vec<u8>, o: &ObjectRef) {
    push_frame(out, |b| {
        b.push(KIND_OBJECT);
        put_str(b, o.key.0.as_bytes());
        put_str(b, o.key.1.as_bytes());
        put_str(b, o.path.as_bytes());
        b.extend_from_slice(&o.put_at.to_le_bytes());
        put_str(b, &o.bytes);
    });
}

fn event_frame(out: &mut Vec<u8>, key: &RunKey, event: &JournalEvent) {
    push_frame(out, |b| {
        b.push(KIND_EVENT);
        put_str(b, key.0.as_bytes());
        put_str(b, key.1.as_bytes());
        b.extend_from_slice(&event.seq.to_le_bytes());
        b.extend_from_slice(&(event.encoded_len() as u32).to_le_bytes());
        // Encoding into a Vec cannot run out of space.
        let _ = event.encode(b);
    });
}

fn seal_frame(out: &mut Vec<u8>, key: &RunKey) {
    push_frame(out, |b| {
        b.push(KIND_SEAL);
        put_str(b, key.0.as_bytes());
        put_str(b, key.1.as_bytes());
    });
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn string(&mut self) -> Option<String> {
        self.bytes()
            .and_then(|b| String::from_utf8(b.to_vec()).ok())
    }
}

/// The bodies of the intact frames of `data`, up to the first torn or corrupt one.
fn frame_bodies(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some((body, len)) = frame_body(rest) {
        out.push(body);
        rest = rest.get(len..).unwrap_or_default();
    }
    out
}

/// The body of the intact frame at the start of `data`, and the frame's whole length.
fn frame_body(data: &[u8]) -> Option<(&[u8], usize)> {
    let mut cur = Cursor(data);
    let len = cur.u32()? as usize;
    let sum = cur.take(8)?;
    let body = cur.take(len)?;
    (Sha256::digest(body)[..8] == *sum).then_some((body, 12 + len))
}

enum Frame<'a> {
    Object {
        key: RunKey,
        path: String,
        put_at: i64,
        bytes: &'a [u8],
    },
    Event {
        key: RunKey,
        event: JournalEvent,
    },
    Seal {
        key: RunKey,
    },
}

/// The intact frames of a segment, up to the first torn or corrupt one. A frame whose checksum
/// holds but whose body cannot be read (another version's frame, or a bug) is an error: the
/// records after it are not silently dropped.
fn parse_segment(data: &[u8]) -> Result<Vec<Frame<'_>>, String> {
    let mut out = Vec::new();
    for (i, body) in frame_bodies(data).into_iter().enumerate() {
        let mut b = Cursor(body);
        let parsed = (|| {
            let kind = b.take(1)?[0];
            let key = (b.string()?, b.string()?);
            match kind {
                KIND_OBJECT => Some(Frame::Object {
                    key,
                    path: b.string()?,
                    put_at: b.u64()? as i64,
                    bytes: b.bytes()?,
                }),
                KIND_OBJECT_UNTIMED => Some(Frame::Object {
                    key,
                    path: b.string()?,
                    put_at: now_ms(),
                    bytes: b.bytes()?,
                }),
                KIND_EVENT => {
                    let _seq = b.u64()?;
                    let event = JournalEvent::decode(b.bytes()?).ok()?;
                    Some(Frame::Event { key, event })
                }
                KIND_SEAL => Some(Frame::Seal { key }),
                _ => None,
            }
        })();
        match parsed {
            Some(f) => out.push(f),
            None => {
                return Err(format!(
                    "frame {i} is whole but cannot be read (kind {})",
                    body.first().copied().unwrap_or(0)
                ));
            }
        }
    }
    Ok(out)
}

fn segment_name(n: u64) -> String {
    format!("seg-{n:010}.wal")
}

fn journal_file_name(first: u64, last: u64) -> String {
    format!("{first:020}-{last:020}.jrn")
}

fn parse_journal_file_name(name: &str) -> Option<(u64, u64)> {
    let (first, last) = name.strip_suffix(".jrn")?.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

fn pack_name(n: u64) -> String {
    format!("objects-{n:010}.pack")
}

fn parse_pack_name(name: &str) -> Option<u64> {
    name.strip_prefix("objects-")?
        .strip_suffix(".pack")?
        .parse()
        .ok()
}

/// The first 16 bytes of the sha256 of `bytes`.
fn digest16(bytes: &[u8]) -> [u8; 16] {
    let sum = Sha256::digest(bytes);
    let mut out = [0; 16];
    out.copy_from_slice(&sum[..16]);
    out
}

/// A pack frame's body: the object's path, when it was put, the digest of its bytes (so an index
/// is built without hashing), its bytes.
fn parse_pack_body(body: &[u8]) -> Option<(String, i64, [u8; 16], &[u8])> {
    let mut b = Cursor(body);
    let path = b.string()?;
    let put_at = b.u64()? as i64;
    let digest = b.take(16)?.try_into().ok()?;
    Some((path, put_at, digest, b.0))
}

/// Where a checkpointed audit object is: one frame of one of its run's object packs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PackLoc {
    pack: u64,
    offset: u64,
    frame_len: usize,
    size: u64,
    put_at: i64,
    /// Recognises a byte-identical retry without reading the pack.
    digest: [u8; 16],
}

/// A run's checkpointed audit objects by path.
type ObjectIndex = BTreeMap<String, PackLoc>;

// ---------------------------------------------------------------------------------------------
// Journal files and their cache

/// A decoded journal file: its records, its size on disk, when it was last used.
type Cached = (Arc<Vec<JournalEvent>>, usize, u64);

/// Decoded journal files (by run and first record), least recently used dropped first.
#[derive(Debug, Default)]
struct FileCache {
    entries: HashMap<(RunKey, u64), Cached>,
    bytes: usize,
    clock: u64,
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
struct Files {
    fs: Arc<dyn Fs>,
    tree: Arc<Tree>,
    /// `<data>/journal/runs` (durable).
    runs: PathBuf,
    cache: Mutex<FileCache>,
}

impl Files {
    fn rel(key: &RunKey, name: &str) -> String {
        format!("{}/{}/{name}", key.0, key.1)
    }

    /// The journal files of a run (contiguous from 1), whether it is sealed, and the numbers of
    /// its object packs, in order.
    #[allow(clippy::type_complexity)]
    fn load(&self, key: &RunKey) -> Result<(Vec<(u64, u64)>, bool, Vec<u64>), WsError> {
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
    fn load_objects(&self, key: &RunKey, packs: &[u64]) -> Result<ObjectIndex, WsError> {
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
    fn write_pack(
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
    fn read_object(&self, key: &RunKey, path: &str, loc: &PackLoc) -> Result<Vec<u8>, WsError> {
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

    fn read_file(
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
    fn write(&self, key: &RunKey, records: &[JournalEvent]) -> Result<Vec<(u64, u64)>, WsError> {
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

    fn write_sealed(&self, key: &RunKey) -> Result<(), WsError> {
        self.tree
            .write_durable(&self.runs, &Self::rel(key, SEALED), b"")
    }
}

// ---------------------------------------------------------------------------------------------
// One run's journal

/// One page of a journal.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalPage {
    pub records: Vec<JournalEvent>,
    /// The sequence number after the page.
    pub next_seq: u64,
    /// The page reached the last committed record.
    pub at_end: bool,
    pub sealed: bool,
}

/// One run's journal as readers see it: the committed records, in sequence order.
#[derive(Debug)]
pub struct RunJournal {
    key: RunKey,
    files: Arc<Files>,
    state: Mutex<JournalState>,
    committed: watch::Sender<u64>,
    /// The run's checkpointed audit objects (the pending ones are in [`Shared::pending`]).
    objects: Mutex<ObjectIndex>,
    /// The number of the run's last pack (0: none). Only the checkpointer writes packs.
    last_pack: AtomicU64,
    /// Looked up since the last eviction pass: a journal in use is not dropped (reloading
    /// it would rebuild its object index from its packs).
    used: AtomicBool,
    /// Whether the run's tree may have an entry at an audit path, found on the first put after
    /// a load ([`Wal::tree_may_hold_objects`]).
    tree_objects: OnceLock<bool>,
}

#[derive(Debug, Default)]
struct JournalState {
    /// Next sequence number a writer may claim (claimed numbers may still be in flight).
    next_claim: u64,
    /// Journal files, `(first, last)`, contiguous from 1.
    files: Vec<(u64, u64)>,
    /// Last record in journal files.
    on_disk: u64,
    /// Committed records after `on_disk`, in order.
    tail: VecDeque<JournalEvent>,
    sealed: bool,
    /// The `sealed` marker is durable.
    seal_on_disk: bool,
}

impl JournalState {
    fn last(&self) -> u64 {
        self.on_disk + self.tail.len() as u64
    }
}

impl RunJournal {
    fn load(key: RunKey, files: Arc<Files>) -> Result<RunJournal, WsError> {
        let (ranges, sealed, packs) = files.load(&key)?;
        let objects = files.load_objects(&key, &packs)?;
        let on_disk = ranges.last().map_or(0, |r| r.1);
        Ok(RunJournal {
            objects: Mutex::new(objects),
            last_pack: AtomicU64::new(packs.last().copied().unwrap_or(0)),
            used: AtomicBool::new(true),
            tree_objects: OnceLock::new(),
            key,
            files,
            state: Mutex::new(JournalState {
                next_claim: on_disk + 1,
                files: ranges,
                on_disk,
                tail: VecDeque::new(),
                sealed,
                seal_on_disk: sealed,
            }),
            committed: watch::channel(on_disk).0,
        })
    }

    /// Records from `from` (1-based), at most `limit`. The tail is answered from memory; older
    /// records come from the journal files.
    pub async fn read(self: &Arc<Self>, from: u64, limit: usize) -> Result<JournalPage, WsError> {
        let from = from.max(1);
        {
            let state = lock(&self.state);
            if from > state.on_disk || limit == 0 {
                return Ok(Self::page_from_tail(&state, from, limit, Vec::new()));
            }
        }
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || this.read_blocking(from, limit))
            .await
            .map_err(|e| WsError::io(format!("journal read task failed: {e}")))?
    }

    /// The page from `from` made of `records` (already read from files) and the tail.
    fn page_from_tail(
        state: &JournalState,
        from: u64,
        limit: usize,
        mut records: Vec<JournalEvent>,
    ) -> JournalPage {
        let next = from + records.len() as u64;
        let start = usize::try_from(next.saturating_sub(state.on_disk + 1)).unwrap_or(usize::MAX);
        let room = limit.saturating_sub(records.len());
        records.extend(state.tail.iter().skip(start).take(room).cloned());
        let next_seq = from + records.len() as u64;
        JournalPage {
            at_end: next_seq > state.last(),
            sealed: state.sealed,
            next_seq,
            records,
        }
    }

    fn read_blocking(&self, from: u64, limit: usize) -> Result<JournalPage, WsError> {
        let mut records: Vec<JournalEvent> = Vec::new();
        let mut next = from;
        loop {
            let file = {
                let state = lock(&self.state);
                if next > state.on_disk || records.len() >= limit {
                    return Ok(Self::page_from_tail(&state, from, limit, records));
                }
                let i = state.files.partition_point(|&(_, last)| last < next);
                match state.files.get(i) {
                    Some(&range) => range,
                    None => {
                        return Err(WsError::io(format!(
                            "journal of run {} has no file holding record {next}",
                            self.key.1
                        )));
                    }
                }
            };
            let chunk = self.files.read_file(&self.key, file.0, file.1)?;
            let skip = usize::try_from(next - file.0).unwrap_or(usize::MAX);
            let room = limit - records.len();
            let before = records.len();
            records.extend(chunk.iter().skip(skip).take(room).cloned());
            next += (records.len() - before) as u64;
            if records.len() == before {
                return Err(WsError::io(format!(
                    "journal file of run {} ends before record {next}",
                    self.key.1
                )));
            }
        }
    }

    /// A receiver that changes whenever records are committed or the journal is sealed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.committed.subscribe()
    }

    pub fn last_seq(&self) -> u64 {
        lock(&self.state).last()
    }

    fn publish(&self, records: Vec<JournalEvent>) {
        let last = {
            let mut state = lock(&self.state);
            for record in records {
                // Records arrive in claim order; a gap would be a bug in claiming, never hidden.
                if record.seq == state.last() + 1 {
                    state.tail.push_back(record);
                }
            }
            state.last()
        };
        self.committed.send_replace(last);
    }

    fn seal(&self) {
        let last = {
            let mut state = lock(&self.state);
            state.sealed = true;
            state.last()
        };
        // Wake followers even when no record was added.
        self.committed.send_modify(|v| *v = last);
    }

    /// Writes the tail's records up to `upto` into journal files (and the seal marker when
    /// `seal`), then drops them from the tail. Only the checkpointer calls this.
    fn checkpoint(&self, upto: u64, seal: bool) -> Result<(), WsError> {
        let (records, seal_needed) = {
            let state = lock(&self.state);
            let n = usize::try_from(upto.saturating_sub(state.on_disk)).unwrap_or(usize::MAX);
            let records: Vec<JournalEvent> = state.tail.iter().take(n).cloned().collect();
            (records, seal && state.sealed && !state.seal_on_disk)
        };
        let ranges = self.files.write(&self.key, &records)?;
        if seal_needed {
            self.files.write_sealed(&self.key)?;
        }
        let mut state = lock(&self.state);
        for (first, last) in ranges {
            if first == state.on_disk + 1 {
                let n = usize::try_from(last - first + 1).unwrap_or(usize::MAX);
                let n = n.min(state.tail.len());
                state.tail.drain(..n);
                state.on_disk = last;
                state.files.push((first, last));
            }
        }
        state.seal_on_disk |= seal_needed;
        Ok(())
    }

    /// Nothing of this journal lives only in memory: it can be reloaded from its files.
    fn idle(&self) -> bool {
        let state = lock(&self.state);
        state.tail.is_empty()
            && state.next_claim == state.on_disk + 1
            && state.sealed == state.seal_on_disk
    }
}

// ---------------------------------------------------------------------------------------------
// Shared state, jobs and messages

/// Audit objects whose segment is not checkpointed yet, per run and path.
type PendingMap = HashMap<RunKey, BTreeMap<String, ObjectRef>>;

/// An audit object the log holds: in memory until its segment is checkpointed, then in its run's
/// object pack.
#[derive(Debug, Clone)]
pub struct LogObject {
    pub path: String,
    pub size: u64,
    /// When it was put (Unix ms).
    pub put_at_unix_ms: i64,
    at: At,
}

#[derive(Debug, Clone)]
enum At {
    Memory(Arc<Vec<u8>>),
    Pack(Arc<RunJournal>, PackLoc),
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

    /// The object's bytes. Blocking: a checkpointed object is read from its pack.
    pub fn read(&self) -> Result<Arc<Vec<u8>>, WsError> {
        match &self.at {
            At::Memory(bytes) => Ok(Arc::clone(bytes)),
            At::Pack(journal, loc) => journal
                .files
                .read_object(&journal.key, &self.path, loc)
                .map(Arc::new),
        }
    }
}

/// What a log's map of objects (pending or checkpointed) says of a put at `path`: the same
/// object, another one, one above it or below it — or nothing.
fn held_in<V>(map: &BTreeMap<String, V>, path: &str, same: impl Fn(&V) -> bool) -> Option<Held> {
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
enum Held {
    Free,
    /// The same bytes are there already.
    Same,
    /// Something else is there (why).
    Other(String),
}

/// The outcome of claiming a journal append.
enum Claim {
    Sent(oneshot::Receiver<Result<(), String>>),
    NotNext {
        next_claim: u64,
        records: Vec<JournalEvent>,
        objects: Vec<ObjectRef>,
    },
}

fn audit_exists(message: String) -> WsError {
    WsError::status(
        "workspace.audit_exists",
        tonic::Code::AlreadyExists,
        message,
    )
}

#[derive(Debug, Default)]
struct Shared {
    poisoned: AtomicBool,
    journals: Mutex<HashMap<RunKey, Arc<RunJournal>>>,
    /// Bumped (under the `journals` lock) whenever a journal is dropped from memory: a load
    /// that started before may have read files the dropped journal had already outgrown.
    evictions: AtomicU64,
    /// Audit objects whose segment is not checkpointed yet, per run and path.
    pending: Mutex<PendingMap>,
    pending_bytes: AtomicU64,
    pending_count: AtomicUsize,
    /// Woken whenever pending objects were checkpointed.
    checkpointed: Notify,
    /// Segments the writer closed that the checkpointer has not checkpointed yet.
    closed_waiting: AtomicUsize,
}

impl Shared {
    fn unpend(&self, key: &RunKey, path: &str, bytes: &Arc<Vec<u8>>) {
        let mut pending = lock(&self.pending);
        if let Some(run) = pending.get_mut(key) {
            if run.get(path).is_some_and(|p| Arc::ptr_eq(&p.bytes, bytes)) {
                run.remove(path);
                self.pending_bytes
                    .fetch_sub(bytes.len() as u64, Ordering::AcqRel);
                self.pending_count.fetch_sub(1, Ordering::AcqRel);
            }
            if run.is_empty() {
                pending.remove(key);
            }
        }
    }
}

/// An audit object on its way through the log.
#[derive(Debug, Clone)]
struct ObjectRef {
    key: RunKey,
    path: String,
    bytes: Arc<Vec<u8>>,
    /// When it was put (Unix ms).
    put_at: i64,
}

enum After {
    Publish {
        journal: Arc<RunJournal>,
        records: Vec<JournalEvent>,
    },
    Object(ObjectRef),
    Seal {
        journal: Arc<RunJournal>,
    },
}

type Ack = oneshot::Sender<Result<(), String>>;

enum Job {
    Append {
        frames: Vec<u8>,
        after: Vec<After>,
        ack: Option<Ack>,
    },
    /// Close the current segment and checkpoint everything before it.
    Checkpoint { done: Ack },
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Append { frames, .. } => f
                .debug_struct("Append")
                .field("bytes", &frames.len())
                .finish(),
            Job::Checkpoint { .. } => f.write_str("Checkpoint"),
        }
    }
}

/// What the writer tells the checkpointer, in log order.
enum Note {
    Committed {
        segment: u64,
        objects: Vec<ObjectRef>,
        /// Runs with records in the group, and their last record.
        runs: Vec<(Arc<RunJournal>, u64)>,
        seals: Vec<Arc<RunJournal>>,
    },
    Closed {
        segment: u64,
        done: Option<Ack>,
    },
}

// ---------------------------------------------------------------------------------------------
// The log

/// The log and the journals it holds.
#[derive(Debug)]
pub struct Wal {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    /// The writer and the checkpointer until the first job starts their threads: a log nobody
    /// appends to (a start, a plane that only reads) runs no thread for them.
    unstarted: Mutex<Option<Unstarted>>,
    shared: Arc<Shared>,
    files: Arc<Files>,
    writer: Mutex<Option<JoinHandle<()>>>,
    checkpointer: Mutex<Option<JoinHandle<()>>>,
    tree: Arc<Tree>,
}

/// The log's two threads' work, before they run.
struct Unstarted {
    writer: Writer,
    jobs: mpsc::Receiver<Job>,
    checkpointer: Checkpointer,
    notes: mpsc::Receiver<Note>,
}

impl std::fmt::Debug for Unstarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Unstarted")
    }
}

impl Wal {
    /// Checkpoints the segments in `dir` (which must exist durably, with `runs/` in it). The
    /// writer and the checkpointer start with the first job; the writer creates the next segment
    /// with its first group. Blocking.
    pub fn open(
        fs: Arc<dyn Fs>,
        dir: PathBuf,
        tree: Arc<Tree>,
        segment_bytes: u64,
        idle_close: Option<Duration>,
    ) -> Result<Wal, WsError> {
        let shared = Arc::new(Shared::default());
        let files = Arc::new(Files {
            fs: Arc::clone(&fs),
            tree: Arc::clone(&tree),
            runs: dir.join("runs"),
            cache: Mutex::new(FileCache::default()),
        });
        let mut segments: Vec<u64> = fs
            .read_dir(&dir)
            .map_err(|e| io_err("list journal segments", &dir, e))?
            .into_iter()
            .filter(|e| e.kind == FileKind::File)
            .filter_map(|e| {
                let name = e.name.to_str()?.to_owned();
                name.strip_prefix("seg-")?
                    .strip_suffix(".wal")?
                    .parse()
                    .ok()
            })
            .collect();
        segments.sort_unstable();
        for n in &segments {
            recover_segment(&fs, &dir, *n, &shared, &files)?;
        }
        evict_idle(&shared);
        // The next segment is created by the first group written into it.
        let next = segments.last().map_or(1, |n| n + 1);
        let (tx, rx) = mpsc::channel::<Job>();
        let (notes_tx, notes_rx) = mpsc::channel::<Note>();
        let writer = Writer {
            fs: Arc::clone(&fs),
            dir: dir.clone(),
            file: None,
            segment: next,
            size: 0,
            zeroed: 0,
            segment_bytes: segment_bytes.min(MAX_SEGMENT_BYTES),
            idle_close,
            shared: Arc::clone(&shared),
            notes: notes_tx,
            buf: Vec::new(),
        };
        let checkpointer = Checkpointer {
            fs,
            dir,
            shared: Arc::clone(&shared),
            files: Arc::clone(&files),
            open: BTreeMap::new(),
            closed: VecDeque::new(),
        };
        Ok(Wal {
            tx: Mutex::new(Some(tx)),
            unstarted: Mutex::new(Some(Unstarted {
                writer,
                jobs: rx,
                checkpointer,
                notes: notes_rx,
            })),
            shared,
            files,
            writer: Mutex::new(None),
            checkpointer: Mutex::new(None),
            tree,
        })
    }

    /// Starts the writer's and the checkpointer's threads, unless they run already.
    fn start_threads(&self) -> Result<(), WsError> {
        let Some(parts) = lock(&self.unstarted).take() else {
            return Ok(());
        };
        let Unstarted {
            writer,
            jobs,
            checkpointer,
            notes,
        } = parts;
        let checkpointer = std::thread::Builder::new()
            .name("workspace-checkpoint".into())
            .spawn(move || checkpointer.run(notes))
            .map_err(|e| WsError::io(format!("start journal checkpointer: {e}")))?;
        *lock(&self.checkpointer) = Some(checkpointer);
        let handle = std::thread::Builder::new()
            .name("workspace-wal".into())
            .spawn(move || writer.run(jobs))
            .map_err(|e| WsError::io(format!("start journal writer: {e}")))?;
        *lock(&self.writer) = Some(handle);
        Ok(())
    }

    /// The journal of a run (empty if it has no record yet), loading it from its files when it
    /// is not in memory.
    pub async fn journal(&self, key: &RunKey) -> Result<Arc<RunJournal>, WsError> {
        if let Some(j) = lock(&self.shared.journals).get(key) {
            j.used.store(true, Ordering::Relaxed);
            return Ok(Arc::clone(j));
        }
        let shared = Arc::clone(&self.shared);
        let files = Arc::clone(&self.files);
        let key = key.clone();
        tokio::task::spawn_blocking(move || journal_in(&shared, &files, &key))
            .await
            .map_err(|e| WsError::io(format!("journal load task failed: {e}")))?
    }

    fn check(&self) -> Result<(), WsError> {
        if self.shared.poisoned.load(Ordering::Acquire) {
            return Err(unavailable(
                "the journal log failed to write or sync; restart the service",
            ));
        }
        Ok(())
    }

    fn send(&self, job: Job) -> Result<(), WsError> {
        let tx = lock(&self.tx);
        if tx.is_some() {
            // A thread that cannot start drops its half of the channel: the send below fails,
            // and the log is poisoned, so every later request says so at once.
            if let Err(e) = self.start_threads() {
                tracing::error!(error = %e, "the journal log cannot start");
                self.shared.poisoned.store(true, Ordering::Release);
            }
        }
        match tx.as_ref() {
            Some(tx) if tx.send(job).is_ok() => Ok(()),
            _ => Err(unavailable("the journal writer has stopped")),
        }
    }

    async fn wait(rx: oneshot::Receiver<Result<(), String>>) -> Result<(), WsError> {
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(unavailable(message)),
            Err(_) => Err(unavailable("the journal writer has stopped")),
        }
    }

    /// Waits while more than [`MAX_PENDING_BYTES`] of objects wait for their checkpoint.
    async fn backpressure(&self) {
        loop {
            let checkpointed = self.shared.checkpointed.notified();
            tokio::pin!(checkpointed);
            checkpointed.as_mut().enable();
            if self.shared.pending_bytes.load(Ordering::Acquire) <= MAX_PENDING_BYTES {
                return;
            }
            checkpointed.await;
        }
    }

    /// What `path` of a run holds now, as seen by a create-only put: the log's objects (pending,
    /// then checkpointed), then the run's tree. A path under an object, or above one, is taken
    /// too. The tree is probed in place: a few `lstat`s of a local directory.
    fn held(
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
    fn hold(&self, pending: &mut PendingMap, key: &RunKey, objects: &[ObjectRef]) {
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
    fn check_free(
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

    /// Claims `expected_seq` and sends the objects' and records' frames as one job (objects
    /// first), or says that `expected_seq` is not next.
    fn claim(
        &self,
        journal: &Arc<RunJournal>,
        expected_seq: u64,
        mut records: Vec<JournalEvent>,
        objects: Vec<ObjectRef>,
    ) -> Result<Claim, WsError> {
        let key = &journal.key;
        let mut state = lock(&journal.state);
        if state.sealed {
            return Err(WsError::status(
                "workspace.run_finished",
                tonic::Code::FailedPrecondition,
                "the run's journal is sealed",
            ));
        }
        if expected_seq != state.next_claim {
            return Ok(Claim::NotNext {
                next_claim: state.next_claim,
                records,
                objects,
            });
        }
        let last = expected_seq + records.len() as u64 - 1;
        // The frames (checksums, encoding) are built under the run's lock only; the log's lock
        // of pending objects, which every run's puts and appends take, covers just the
        // create-only check, the send and the hold.
        let size: usize = objects
            .iter()
            .map(|o| o.bytes.len() + o.path.len() + 64)
            .chain(records.iter().map(|r| r.encoded_len() + 64))
            .sum();
        let mut frames = Vec::with_capacity(
            size + (objects.len() + records.len()) * (key.0.len() + key.1.len()),
        );
        for o in &objects {
            object_frame(&mut frames, o);
        }
        for (i, record) in records.iter_mut().enumerate() {
            record.seq = expected_seq + i as u64;
            if record.run_id.is_empty() {
                record.run_id.clone_from(&key.1);
            }
            event_frame(&mut frames, key, record);
        }
        let mut pending = lock(&self.shared.pending);
        for o in &objects {
            self.check_free(journal, pending.get(key), o, false)?;
        }
        let (tx, rx) = oneshot::channel();
        let mut after: Vec<After> = objects.iter().cloned().map(After::Object).collect();
        after.push(After::Publish {
            journal: Arc::clone(journal),
            records,
        });
        // Sent under the run's lock so claim order is log order.
        self.send(Job::Append {
            frames,
            after,
            ack: Some(tx),
        })?;
        self.hold(&mut pending, key, &objects);
        state.next_claim = last + 1;
        Ok(Claim::Sent(rx))
    }

    /// Appends `records` (consecutive, starting at `expected_seq`) to a run's journal, with the
    /// audit objects they name (`(path, bytes)`, validated by the caller), stored create-only
    /// before them in the same group; returns the last sequence number once all are durable. A
    /// retry of records already in the journal, byte for byte, with the same objects, succeeds
    /// without writing.
    pub async fn append(
        self: &Arc<Self>,
        key: &RunKey,
        expected_seq: u64,
        records: Vec<JournalEvent>,
        objects: Vec<(String, Vec<u8>)>,
    ) -> Result<u64, WsError> {
        self.check()?;
        let put_at = now_ms();
        let objects: Vec<ObjectRef> = objects
            .into_iter()
            .map(|(path, bytes)| ObjectRef {
                key: key.clone(),
                path,
                bytes: Arc::new(bytes),
                put_at,
            })
            .collect();
        if !objects.is_empty() {
            self.backpressure().await;
        }
        let journal = self.journal(key).await?;
        let n = records.len() as u64;
        let last = expected_seq + n - 1;
        match self.claim(&journal, expected_seq, records, objects)? {
            Claim::Sent(rx) => {
                Self::wait(rx).await.inspect_err(|_| {
                    // The claim can not be rolled back safely once sent; the log is poisoned
                    // instead.
                    self.shared.poisoned.store(true, Ordering::Release);
                })?;
                Ok(last)
            }
            Claim::NotNext {
                next_claim,
                records,
                objects,
            } => {
                // Not next: a byte-identical retry of committed records (and their objects)
                // succeeds.
                if expected_seq >= 1
                    && self
                        .is_retry(&journal, expected_seq, &records, objects)
                        .await?
                {
                    return Ok(last);
                }
                Err(WsError::status(
                    "workspace.journal_conflict",
                    tonic::Code::Aborted,
                    format!(
                        "sequence number {expected_seq} is not next: the journal's next is {next_claim}"
                    ),
                ))
            }
        }
    }

    async fn is_retry(
        self: &Arc<Self>,
        journal: &Arc<RunJournal>,
        expected_seq: u64,
        records: &[JournalEvent],
        objects: Vec<ObjectRef>,
    ) -> Result<bool, WsError> {
        let page = journal.read(expected_seq, records.len()).await?;
        let same_records = page.records.len() == records.len()
            && page.records.iter().zip(records).all(|(a, b)| {
                let mut b = b.clone();
                b.seq = a.seq;
                if b.run_id.is_empty() {
                    b.run_id.clone_from(&a.run_id);
                }
                *a == b
            });
        if !same_records || objects.is_empty() {
            return Ok(same_records);
        }
        let pending = lock(&self.shared.pending);
        for o in &objects {
            if !matches!(
                self.held(journal, pending.get(&journal.key), &o.path, &o.bytes)?,
                Held::Same
            ) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Seals a run's journal: later appends fail, followers end after the last record.
    pub async fn seal(&self, key: &RunKey) -> Result<(), WsError> {
        self.check()?;
        let journal = self.journal(key).await?;
        let (tx, rx) = oneshot::channel();
        {
            let state = lock(&journal.state);
            if state.sealed {
                return Ok(());
            }
            let mut frames = Vec::new();
            seal_frame(&mut frames, key);
            self.send(Job::Append {
                frames,
                after: vec![After::Seal {
                    journal: Arc::clone(&journal),
                }],
                ack: Some(tx),
            })?;
        }
        Self::wait(rx).await
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

    /// Journals held in memory; the others live only in their journal files until needed.
    pub fn resident_journals(&self) -> usize {
        lock(&self.shared.journals).len()
    }

    /// Audit objects waiting for their segment's checkpoint (held in memory until then).
    pub fn pending_count(&self) -> usize {
        self.shared.pending_count.load(Ordering::Acquire)
    }

    /// Closes the current segment and waits until it and every segment before it are
    /// checkpointed: every object in its run's pack, every record in a journal file, the
    /// segments deleted.
    pub async fn checkpoint(&self) -> Result<(), WsError> {
        self.check()?;
        let (tx, rx) = oneshot::channel();
        self.send(Job::Checkpoint { done: tx })?;
        Self::wait(rx).await
    }

    /// Stops the writer after the jobs already sent, checkpoints what it wrote (unless the log
    /// failed) and stops the checkpointer.
    pub fn shutdown(&self) {
        lock(&self.tx).take();
        lock(&self.unstarted).take();
        if let Some(handle) = lock(&self.writer).take() {
            let _ = handle.join();
        }
        if let Some(handle) = lock(&self.checkpointer).take() {
            let _ = handle.join();
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn journal_in(
    shared: &Shared,
    files: &Arc<Files>,
    key: &RunKey,
) -> Result<Arc<RunJournal>, WsError> {
    loop {
        let generation = {
            let journals = lock(&shared.journals);
            if let Some(j) = journals.get(key) {
                j.used.store(true, Ordering::Relaxed);
                return Ok(Arc::clone(j));
            }
            shared.evictions.load(Ordering::Acquire)
        };
        // Loaded without the lock (it reads the run's files).
        let loaded = Arc::new(RunJournal::load(key.clone(), Arc::clone(files))?);
        let mut journals = lock(&shared.journals);
        // Another caller may have loaded it meanwhile: the first one in the map wins.
        if let Some(j) = journals.get(key) {
            return Ok(Arc::clone(j));
        }
        // A journal dropped while this one loaded may have written files this load missed
        // (a journal file, a pack): load again rather than bring back an outdated copy.
        if shared.evictions.load(Ordering::Acquire) == generation {
            journals.insert(key.clone(), Arc::clone(&loaded));
            return Ok(loaded);
        }
    }
}

/// Drops journals that nobody holds, that live entirely in their files and that nobody looked up
/// since the previous pass (so a run in use keeps its journal and object index in memory; an
/// idle one goes after one checkpoint interval).
fn evict_idle(shared: &Shared) {
    let mut journals = lock(&shared.journals);
    let before = journals.len();
    journals.retain(|_, j| {
        Arc::strong_count(j) > 1 || !j.idle() || j.used.swap(false, Ordering::Relaxed)
    });
    if journals.len() != before {
        shared.evictions.fetch_add(1, Ordering::AcqRel);
    }
}

fn pending_entry(o: &ObjectRef) -> LogObject {
    LogObject::in_memory(o.path.clone(), Arc::clone(&o.bytes), o.put_at)
}

fn packed_entry(journal: &Arc<RunJournal>, path: String, loc: PackLoc) -> LogObject {
    LogObject {
        path,
        size: loc.size,
        put_at_unix_ms: loc.put_at,
        at: At::Pack(Arc::clone(journal), loc),
    }
}

/// Writes each run's objects of a segment into a new pack of the run (its packs are numbered
/// 1, 2, … per run, so a run that lives through restarts never reuses a name) and adds them to
/// the run's index; only then are they dropped from `pending`.
fn store_objects(
    shared: &Shared,
    files: &Arc<Files>,
    objects: &[ObjectRef],
) -> Result<(), WsError> {
    let mut by_run: BTreeMap<&RunKey, Vec<&ObjectRef>> = BTreeMap::new();
    for o in objects {
        by_run.entry(&o.key).or_default().push(o);
    }
    for (key, objects) in by_run {
        let journal = journal_in(shared, files, key)?;
        // Objects already packed by a checkpoint that a crash cut short are not packed again.
        let objects: Vec<&ObjectRef> = {
            let index = lock(&journal.objects);
            objects
                .into_iter()
                .filter(|o| !index.contains_key(&o.path))
                .collect()
        };
        if objects.is_empty() {
            continue;
        }
        let pack = journal.last_pack.load(Ordering::Acquire) + 1;
        let entries = files.write_pack(key, pack, &objects)?;
        journal.last_pack.store(pack, Ordering::Release);
        lock(&journal.objects).extend(entries);
    }
    for o in objects {
        shared.unpend(&o.key, &o.path, &o.bytes);
    }
    shared.checkpointed.notify_waiters();
    Ok(())
}

/// Start-up: checkpoints one segment left by the previous run and deletes it.
fn recover_segment(
    fs: &Arc<dyn Fs>,
    dir: &Path,
    n: u64,
    shared: &Shared,
    files: &Arc<Files>,
) -> Result<(), WsError> {
    let path = dir.join(segment_name(n));
    let data = fs
        .read(&path)
        .map_err(|e| io_err("read journal segment", &path, e))?;
    let mut objects = Vec::new();
    let mut touched: HashMap<RunKey, (Arc<RunJournal>, u64)> = HashMap::new();
    let mut sealed: Vec<Arc<RunJournal>> = Vec::new();
    let frames = parse_segment(&data).map_err(|e| {
        WsError::io(format!(
            "journal segment {}: {e}; it is kept and the service does not start rather than drop what follows",
            path.display()
        ))
    })?;
    for frame in frames {
        match frame {
            Frame::Object {
                key,
                path,
                put_at,
                bytes,
            } => objects.push(ObjectRef {
                key,
                path,
                bytes: Arc::new(bytes.to_vec()),
                put_at,
            }),
            Frame::Event { key, event } => {
                let journal = journal_in(shared, files, &key)?;
                let seq = event.seq;
                {
                    let mut state = lock(&journal.state);
                    if seq == state.last() + 1 {
                        state.tail.push_back(event);
                        state.next_claim = state.last() + 1;
                    } else if seq > state.last() + 1 {
                        tracing::error!(run = %key.1, seq, last = state.last(), "journal record after a gap ignored");
                        continue;
                    }
                }
                let last = journal.last_seq();
                touched.insert(key, (journal, last));
            }
            Frame::Seal { key } => {
                let journal = journal_in(shared, files, &key)?;
                journal.seal();
                sealed.push(journal);
            }
        }
    }
    store_objects(shared, files, &objects).map_err(|e| {
        WsError::io(format!(
            "restore the audit objects of segment {n} from the journal log: {e}"
        ))
    })?;
    for (journal, last) in touched.values() {
        journal.checkpoint(*last, false)?;
    }
    for journal in &sealed {
        journal.checkpoint(0, true)?;
    }
    for (journal, _) in touched.values() {
        journal.committed.send_replace(journal.last_seq());
    }
    fs.remove_file(&path)
        .map_err(|e| io_err("delete journal segment", &path, e))?;
    fs.sync_dir(dir)
        .map_err(|e| io_err("sync journal directory", dir, e))
}

// ---------------------------------------------------------------------------------------------
// The writer thread

/// Keeps a segment's file extended with zeros ahead of its writes: when fewer than
/// [`ZERO_AHEAD_LOW`] bytes of them are left past `size`, writes zeros up to [`ZERO_AHEAD`] past
/// it (never past `segment_bytes`, where the segment is closed). The group that writes them makes
/// them durable with its own `fdatasync`; the groups after it overwrite space the file already
/// has, so their `fdatasync` flushes data without a commit of the filesystem's journal (about a
/// third less time per group on ext4). The first group of a segment, a group larger than the
/// zeros left and the group that writes more of them still grow the file. Recovery reads the
/// zeros as a torn frame, where the segment ends. A failed extension is not tried again for the
/// segment, whose groups then append as they would without it.
fn zero_ahead(file: &mut dyn FsFile, size: u64, zeroed: &mut u64, segment_bytes: u64) {
    let end = (size + ZERO_AHEAD).min(segment_bytes);
    if *zeroed >= size + ZERO_AHEAD_LOW || *zeroed >= end {
        return;
    }
    match file.extend_zeroed(end) {
        Ok(()) => *zeroed = end,
        Err(e) => {
            tracing::warn!(error = %e, "journal segment not extended ahead of its writes");
            *zeroed = segment_bytes;
        }
    }
}

struct Writer {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    /// The current segment; `None` until its first group (a segment that would stay empty is
    /// never created).
    file: Option<Box<dyn FsFile>>,
    segment: u64,
    size: u64,
    /// How far the current segment's file extends, zeros past `size` included.
    zeroed: u64,
    segment_bytes: u64,
    /// A segment holding at least [`QUIET_CLOSE_FILL`] of a segment that sees no append for this
    /// long is closed ([`Writer::idle`]).
    idle_close: Option<Duration>,
    shared: Arc<Shared>,
    notes: mpsc::Sender<Note>,
    /// The group being written (kept to reuse its allocation).
    buf: Vec<u8>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Job>) {
        loop {
            let quiet_close = self.size >= (self.segment_bytes / QUIET_CLOSE_FILL).max(1)
                && !self.shared.poisoned.load(Ordering::Acquire);
            let first = match self.idle_close {
                Some(quiet) if quiet_close => match rx.recv_timeout(quiet) {
                    Ok(job) => job,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        self.idle();
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                },
                _ => match rx.recv() {
                    Ok(job) => job,
                    Err(mpsc::RecvError) => break,
                },
            };
            let mut jobs = Vec::new();
            let mut checkpoint = None;
            let mut bytes = 0;
            let mut next = Some(first);
            while let Some(job) = next.take() {
                match job {
                    Job::Checkpoint { done } => {
                        checkpoint = Some(done);
                        break;
                    }
                    Job::Append { ref frames, .. } => {
                        bytes += frames.len();
                        jobs.push(job);
                    }
                }
                if bytes < GROUP_BYTES {
                    next = rx.try_recv().ok();
                }
            }
            if !jobs.is_empty() {
                self.group(jobs, bytes);
            }
            if checkpoint.is_some() || self.size > self.segment_bytes {
                self.roll(checkpoint);
            }
        }
        // Stopping: what was written is checkpointed so the next start has nothing to redo,
        // unless the log failed (the next start then recovers from the segments).
        if !self.shared.poisoned.load(Ordering::Acquire) {
            self.closed(self.segment, None);
        }
    }

    fn group(&mut self, jobs: Vec<Job>, bytes: usize) {
        match self.commit(&jobs, bytes) {
            Ok(()) => {
                let mut objects = Vec::new();
                let mut runs = Vec::new();
                let mut seals = Vec::new();
                for job in jobs {
                    let Job::Append { after, ack, .. } = job else {
                        continue;
                    };
                    for after in after {
                        match after {
                            After::Publish { journal, records } => {
                                let last = records.last().map_or(0, |r| r.seq);
                                journal.publish(records);
                                runs.push((journal, last));
                            }
                            After::Seal { journal } => {
                                journal.seal();
                                seals.push(journal);
                            }
                            After::Object(object) => objects.push(object),
                        }
                    }
                    if let Some(ack) = ack {
                        let _ = ack.send(Ok(()));
                    }
                }
                let _ = self.notes.send(Note::Committed {
                    segment: self.segment,
                    objects,
                    runs,
                    seals,
                });
            }
            Err(message) => {
                tracing::error!(error = %message, "journal group commit failed");
                self.shared.poisoned.store(true, Ordering::Release);
                for job in jobs {
                    if let Job::Append { ack: Some(ack), .. } = job {
                        let _ = ack.send(Err(message.clone()));
                    }
                }
            }
        }
    }

    fn commit(&mut self, jobs: &[Job], bytes: usize) -> Result<(), String> {
        if self.shared.poisoned.load(Ordering::Acquire) {
            return Err("the journal log is poisoned by an earlier failure".into());
        }
        self.buf.clear();
        self.buf.reserve(bytes);
        for job in jobs {
            if let Job::Append { frames, .. } = job {
                self.buf.extend_from_slice(frames);
            }
        }
        let file = match &mut self.file {
            Some(file) => file,
            None => {
                let path = self.dir.join(segment_name(self.segment));
                let file = self
                    .fs
                    .create_new(&path)
                    .map_err(|e| format!("workspace.io: create segment {}: {e}", path.display()))?;
                self.fs.sync_dir(&self.dir).map_err(|e| {
                    format!(
                        "workspace.io: sync journal directory {}: {e}",
                        self.dir.display()
                    )
                })?;
                self.file.insert(file)
            }
        };
        file.write_all(&self.buf)
            .map_err(|e| format!("workspace.io: write journal: {e}"))?;
        self.size += self.buf.len() as u64;
        self.zeroed = self.zeroed.max(self.size);
        zero_ahead(
            file.as_mut(),
            self.size,
            &mut self.zeroed,
            self.segment_bytes,
        );
        // `fdatasync` covers the group's bytes and, when the group passed the zeros written
        // ahead or wrote more of them, the segment's new size.
        file.sync_data()
            .map_err(|e| format!("workspace.io: sync journal: {e}"))?;
        if self.buf.capacity() > GROUP_BYTES {
            // A huge group does not pin its buffer for the life of the process.
            self.buf = Vec::new();
        }
        Ok(())
    }

    /// The log went quiet with at least [`QUIET_CLOSE_FILL`] of a segment in its segment: closes
    /// the segment, so the checkpointer moves its records and objects into their journal files
    /// and packs now rather than in the middle of the next busy period, and makes the next
    /// segment's file with its zeros ahead, so the first group after the pause finds it ready.
    /// Nothing is closed while the checkpointer has a closed segment left (a failing disk would
    /// otherwise gather a segment per pause). A failure to make the file only leaves it to the
    /// first group, as after a start; a file made and then not removable keeps its number, and the
    /// next segment takes the one after it (a start finds that file empty and deletes it).
    fn idle(&mut self) {
        if self.shared.closed_waiting.load(Ordering::Acquire) > 0 {
            return;
        }
        self.roll(None);
        if self.shared.poisoned.load(Ordering::Acquire) {
            return;
        }
        let path = self.dir.join(segment_name(self.segment));
        let mut file = match self.fs.create_new(&path) {
            Ok(file) => file,
            Err(e) => {
                tracing::warn!(error = %e, "next journal segment not made ahead");
                return;
            }
        };
        let zeros = ZERO_AHEAD.min(self.segment_bytes);
        let made = self
            .fs
            .sync_dir(&self.dir)
            .and_then(|()| file.extend_zeroed(zeros))
            .and_then(|()| file.sync_data());
        match made {
            Ok(()) => {
                self.file = Some(file);
                self.zeroed = zeros;
            }
            Err(e) => {
                tracing::warn!(error = %e, "next journal segment not made ahead");
                drop(file);
                match self.fs.remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::warn!(error = %e, path = %path.display(), "a journal segment made ahead could not be removed; the next segment takes the next number");
                        self.segment += 1;
                    }
                }
            }
        }
    }

    /// Closes the current segment and hands it to the checkpointer.
    fn roll(&mut self, done: Option<Ack>) {
        if self.shared.poisoned.load(Ordering::Acquire) {
            if let Some(done) = done {
                let _ = done.send(Err(
                    "the journal log is poisoned by an earlier failure".into()
                ));
            }
            return;
        }
        // The next segment is created by its first group.
        let closed = self.segment;
        self.file = None;
        self.segment += 1;
        self.size = 0;
        self.zeroed = 0;
        self.closed(closed, done);
    }

    /// Hands a closed segment to the checkpointer, counted in `closed_waiting` until it is done.
    fn closed(&self, segment: u64, done: Option<Ack>) {
        self.shared.closed_waiting.fetch_add(1, Ordering::AcqRel);
        let _ = self.notes.send(Note::Closed { segment, done });
    }
}

// ---------------------------------------------------------------------------------------------
// The checkpointer thread

/// What a segment still open (or closed but not yet checkpointed) holds.
#[derive(Default)]
struct SegmentWork {
    runs: HashMap<RunKey, (Arc<RunJournal>, u64)>,
    seals: Vec<Arc<RunJournal>>,
    objects: Vec<ObjectRef>,
}

struct Checkpointer {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    shared: Arc<Shared>,
    files: Arc<Files>,
    open: BTreeMap<u64, SegmentWork>,
    /// Closed segments not yet checkpointed, in order, with whoever waits for them.
    closed: VecDeque<(u64, Vec<Ack>)>,
}

impl Checkpointer {
    fn run(mut self, rx: mpsc::Receiver<Note>) {
        while let Ok(first) = rx.recv() {
            let mut next = Some(first);
            let mut close = Vec::new();
            while let Some(note) = next.take() {
                match note {
                    Note::Committed {
                        segment,
                        objects: o,
                        runs,
                        seals,
                    } => {
                        let work = self.open.entry(segment).or_default();
                        for (journal, last) in runs {
                            let entry = work
                                .runs
                                .entry(journal.key.clone())
                                .or_insert_with(|| (Arc::clone(&journal), 0));
                            entry.1 = entry.1.max(last);
                        }
                        work.seals.extend(seals);
                        work.objects.extend(o);
                    }
                    Note::Closed { segment, done } => close.push((segment, done)),
                }
                if close.is_empty() {
                    next = rx.try_recv().ok();
                }
            }
            if close.is_empty() {
                continue;
            }
            for (segment, done) in close {
                match self.closed.back_mut() {
                    Some((s, waiters)) if *s == segment => {
                        // One checkpoint answers both notes: the count drops once for it.
                        self.shared.closed_waiting.fetch_sub(1, Ordering::AcqRel);
                        waiters.extend(done);
                    }
                    _ => self.closed.push_back((segment, done.into_iter().collect())),
                }
            }
            // Also retries segments a failed checkpoint kept.
            self.checkpoint_closed();
        }
    }

    /// Checkpoints closed segments in order, stopping at the first that fails (it stays, and is
    /// retried with the next closed segment or at the next start).
    fn checkpoint_closed(&mut self) {
        while let Some((segment, _)) = self.closed.front() {
            let segment = *segment;
            let result = self.checkpoint(segment);
            match result {
                Ok(()) => {
                    self.shared.closed_waiting.fetch_sub(1, Ordering::AcqRel);
                    if let Some((_, waiters)) = self.closed.pop_front() {
                        for w in waiters {
                            let _ = w.send(Ok(()));
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, segment, "journal checkpoint failed; the segment is kept");
                    // Segments after it wait for it: their waiters learn now.
                    for (_, waiters) in self.closed.iter_mut() {
                        for w in waiters.drain(..) {
                            let _ = w.send(Err(format!("workspace.io: checkpoint failed: {e}")));
                        }
                    }
                    return;
                }
            }
        }
        evict_idle(&self.shared);
    }

    fn checkpoint(&mut self, segment: u64) -> Result<(), WsError> {
        // Everything of earlier segments is done (they were checkpointed first).
        let mut work = self.open.remove(&segment).unwrap_or_default();
        // Objects before the records that may name them.
        if let Err(e) = store_objects(&self.shared, &self.files, &work.objects) {
            self.open.insert(segment, work);
            return Err(e);
        }
        work.objects.clear();
        let mut result = Ok(());
        for (journal, last) in work.runs.values() {
            result = result.and_then(|()| journal.checkpoint(*last, false));
        }
        for journal in &work.seals {
            result = result.and_then(|()| journal.checkpoint(0, true));
        }
        if let Err(e) = result {
            // Journal files already written are whole; the rest is redone next time.
            self.open.insert(segment, work);
            return Err(e);
        }
        let path = self.dir.join(segment_name(segment));
        match self.fs.remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("delete journal segment", &path, e)),
        }
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| io_err("sync journal directory", &self.dir, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> RunKey {
        ("default".to_owned(), "r1".to_owned())
    }

    #[test]
    fn segments_with_untimed_object_frames_still_parse() {
        // An object frame as segments held it before put times were logged, then a record.
        let mut data = Vec::new();
        push_frame(&mut data, |b| {
            b.push(KIND_OBJECT_UNTIMED);
            put_str(b, b"default");
            put_str(b, b"r1");
            put_str(b, b"tool-args/i/call_0000000000000001.json");
            put_str(b, b"{}");
        });
        let event = JournalEvent {
            seq: 1,
            r#type: "tool_call_requested".into(),
            ..Default::default()
        };
        event_frame(&mut data, &key(), &event);
        let frames = parse_segment(&data).unwrap();
        assert_eq!(frames.len(), 2);
        assert!(
            matches!(&frames[0], Frame::Object { path, bytes, .. } if path == "tool-args/i/call_0000000000000001.json" && *bytes == b"{}")
        );
        assert!(matches!(&frames[1], Frame::Event { event: e, .. } if e.seq == 1));
    }

    #[test]
    fn a_whole_frame_that_cannot_be_read_is_an_error_not_a_torn_tail() {
        let mut data = Vec::new();
        seal_frame(&mut data, &key());
        push_frame(&mut data, |b| {
            b.push(9);
            put_str(b, b"default");
            put_str(b, b"r1");
        });
        match parse_segment(&data) {
            Err(e) => assert!(e.contains("frame 1"), "{e}"),
            Ok(frames) => panic!("{} frames parsed", frames.len()),
        }
        // A torn tail is not an error: the frames before it are the segment.
        let mut torn = Vec::new();
        seal_frame(&mut torn, &key());
        torn.extend_from_slice(&[7, 0, 0, 0, 1, 2]);
        assert_eq!(parse_segment(&torn).unwrap().len(), 1);
    }
}
