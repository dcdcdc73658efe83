//! Journal appends: claiming the next sequence numbers of a run, sending the records' frames
//! (after the frames of the audit objects they carry) as one job, recognising a byte-identical
//! retry, and sealing a journal. Must never accept a second record for a sequence number or an
//! append to a sealed journal.

use std::sync::{Arc, atomic::Ordering};

use prost::Message;
use tokio::sync::oneshot;
use toolplane_proto::v1::JournalEvent;

use super::{
    RunKey, Wal,
    frame::{event_frame, object_frame, seal_frame},
    journal::RunJournal,
    lock,
    objects::Held,
    shared::{After, Job, ObjectRef},
};
use crate::{engine::now_ms, error::WsError};

/// The outcome of claiming a journal append.
pub(super) enum Claim {
    Sent(oneshot::Receiver<Result<(), String>>),
    NotNext {
        next_claim: u64,
        records: Vec<JournalEvent>,
        objects: Vec<ObjectRef>,
    },
}

impl Wal {
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
}
