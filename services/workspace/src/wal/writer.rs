//! The writer thread: group commit. Whatever jobs arrived while it was busy are written with one
//! `write` and made durable with one `fdatasync`, then their records are published and their
//! callers answered; it closes segments and hands them to the checkpointer. Must never answer a
//! caller before the sync that covers its frames.

use std::{
    io,
    path::PathBuf,
    sync::{Arc, atomic::Ordering, mpsc},
    time::Duration,
};

use toolplane_store::fs::{Fs, FsFile};

use super::{
    frame::segment_name,
    shared::{Ack, After, Job, Note, Shared},
};

/// Most bytes one group writes (the rest waits for the next group).
pub(super) const GROUP_BYTES: usize = 16 * 1024 * 1024;
/// Zeros the writer keeps written ahead of its next group ([`zero_ahead`]).
pub(super) const ZERO_AHEAD: u64 = 1024 * 1024;
/// The writer extends the zeros once fewer than this many bytes of them are left.
pub(super) const ZERO_AHEAD_LOW: u64 = ZERO_AHEAD / 4;
/// A quiet log closes its segment once it holds a 1/`QUIET_CLOSE_FILL` of `segment_bytes` (1 MiB
/// of the default 16): a trickle of calls, each after a pause, never gets a pack and a journal file
/// per call.
pub(super) const QUIET_CLOSE_FILL: u64 = 16;

/// Keeps a segment's file extended with zeros ahead of its writes: when fewer than
/// [`ZERO_AHEAD_LOW`] bytes of them are left past `size`, writes zeros up to [`ZERO_AHEAD`] past
/// it (never past `segment_bytes`, where the segment is closed). The group that writes them makes
/// them durable with its own `fdatasync`; the groups after it overwrite space the file already
/// has, so their `fdatasync` flushes data without a commit of the filesystem's journal (about a
/// third less time per group on ext4). The first group of a segment, a group larger than the
/// zeros left and the group that writes more of them still grow the file. Recovery reads the
/// zeros as a torn frame, where the segment ends. A failed extension is not tried again for the
/// segment, whose groups then append as they would without it.
pub(super) fn zero_ahead(file: &mut dyn FsFile, size: u64, zeroed: &mut u64, segment_bytes: u64) {
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

pub(super) struct Writer {
    pub(super) fs: Arc<dyn Fs>,
    pub(super) dir: PathBuf,
    /// The current segment; `None` until its first group (a segment that would stay empty is
    /// never created).
    pub(super) file: Option<Box<dyn FsFile>>,
    pub(super) segment: u64,
    pub(super) size: u64,
    /// How far the current segment's file extends, zeros past `size` included.
    pub(super) zeroed: u64,
    pub(super) segment_bytes: u64,
    /// A segment holding at least [`QUIET_CLOSE_FILL`] of a segment that sees no append for this
    /// long is closed ([`Writer::idle`]).
    pub(super) idle_close: Option<Duration>,
    pub(super) shared: Arc<Shared>,
    pub(super) notes: mpsc::Sender<Note>,
    /// The group being written (kept to reuse its allocation).
    pub(super) buf: Vec<u8>,
}

impl Writer {
    pub(super) fn run(mut self, rx: mpsc::Receiver<Job>) {
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
