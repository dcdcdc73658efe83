//! Appends, the fence and the seal of a journal on a shared store: each is a read of the head
//! and one compare-and-swap of it, re-read and re-checked on a conflict. Must never write the head
//! of an append before the audit objects it carries, nor accept an append below the head's epoch.

use prost::Message;
use toolplane_proto::v1::JournalEvent;
use toolplane_store::{Precondition, StoreError, Version};

use super::{Head, MAX_ROUNDS, StoreLog, TAIL_BYTES, head::encode_segment, head_key, segment_key};
use crate::{engine::now_ms, error::WsError, wal::RunKey};

pub(super) fn stale(epoch: u64, fence: u64) -> WsError {
    WsError::status(
        "workspace.stale_epoch",
        tonic::Code::FailedPrecondition,
        format!("epoch {epoch} is older than the run's epoch {fence}"),
    )
}

fn finished() -> WsError {
    WsError::status(
        "workspace.run_finished",
        tonic::Code::FailedPrecondition,
        "the run's journal is sealed",
    )
}

fn conflict(expected_seq: u64, next: u64) -> WsError {
    WsError::status(
        "workspace.journal_conflict",
        tonic::Code::Aborted,
        format!("sequence number {expected_seq} is not next: the journal's next is {next}"),
    )
}

fn kept_conflicting(what: &str) -> WsError {
    WsError::status(
        "workspace.journal_unavailable",
        tonic::Code::Unavailable,
        format!("the journal head kept changing during {what}; retry"),
    )
}

/// What a compare-and-swap of the head did.
enum Cas {
    Written,
    /// Another writer changed the head first: re-read and re-check.
    Lost,
}

impl StoreLog {
    async fn put_head(
        &self,
        key: &RunKey,
        head: &Head,
        version: Option<Version>,
    ) -> Result<Cas, WsError> {
        let expected = match version {
            Some(v) => Precondition::Version(v),
            None => Precondition::Absent,
        };
        match self
            .store
            .put_cas(&head_key(key)?, head.encode(), expected)
            .await
        {
            Ok(_) => Ok(Cas::Written),
            Err(StoreError::Conflict { .. } | StoreError::AlreadyExists { .. }) => Ok(Cas::Lost),
            Err(e) => Err(e.into()),
        }
    }

    /// Appends `records` (consecutive, from `expected_seq`) at `epoch` with the audit objects
    /// they name (`(path, bytes)`, validated by the caller), stored create-only before the head
    /// that commits the records; returns the last sequence number. Records get their `seq` and
    /// `run_id` filled in. A byte-identical retry of committed records (and objects) succeeds
    /// without writing.
    pub async fn append(
        &self,
        key: &RunKey,
        epoch: u64,
        expected_seq: u64,
        mut records: Vec<JournalEvent>,
        objects: Vec<(String, Vec<u8>)>,
    ) -> Result<u64, WsError> {
        let n = records.len() as u64;
        let last = expected_seq + n - 1;
        for (i, record) in records.iter_mut().enumerate() {
            record.seq = expected_seq + i as u64;
            if record.run_id.is_empty() {
                record.run_id.clone_from(&key.1);
            }
        }
        let encoded: Vec<Vec<u8>> = records.iter().map(Message::encode_to_vec).collect();
        let put_at = now_ms();
        let mut objects_stored = objects.is_empty();
        for _ in 0..MAX_ROUNDS {
            let (mut head, version) = self.load_head(key).await?;
            if head.sealed {
                return Err(finished());
            }
            if epoch < head.epoch {
                return Err(stale(epoch, head.epoch));
            }
            if expected_seq != head.next_seq {
                if expected_seq < head.next_seq
                    && self
                        .is_retry(key, &head, expected_seq, &records, &objects)
                        .await?
                {
                    return Ok(last);
                }
                return Err(conflict(expected_seq, head.next_seq));
            }
            if !objects_stored {
                // Objects first: a record is never durable before an object it names. An
                // identical object already there is this append's own earlier try.
                for (path, bytes) in &objects {
                    self.create_object(key, path, bytes, put_at, true).await?;
                }
                objects_stored = true;
            }
            if head.tail_bytes() > TAIL_BYTES {
                self.move_tail_out(key, &mut head).await?;
            }
            head.epoch = head.epoch.max(epoch);
            head.next_seq = last + 1;
            head.tail.extend(encoded.iter().cloned());
            if let Cas::Written = self.put_head(key, &head, version).await? {
                self.followers.committed(key, last, false);
                return Ok(last);
            }
        }
        Err(kept_conflicting("an append"))
    }

    /// Writes the head's tail as a segment and drops it from the tail (of this copy of the
    /// head; the caller's compare-and-swap commits that). The segment's bytes are those of the
    /// committed records alone, so a racing writer moving the same records writes the same
    /// object: finding it there with those bytes is fine.
    async fn move_tail_out(&self, key: &RunKey, head: &mut Head) -> Result<(), WsError> {
        let (first, last) = (head.tail_first(), head.last_seq());
        let bytes = encode_segment(&head.tail);
        let skey = segment_key(key, first, last)?;
        match self.store.put_create(&skey, bytes.clone()).await {
            Ok(_) => {}
            Err(StoreError::AlreadyExists { .. }) => {
                let same = self
                    .store
                    .get(&skey)
                    .await?
                    .is_some_and(|o| o.bytes == bytes);
                if !same {
                    return Err(WsError::io(format!(
                        "journal segment {first}-{last} of run {} holds other records",
                        key.1
                    )));
                }
            }
            Err(e) => return Err(e.into()),
        }
        head.segments.push((first, last));
        head.tail.clear();
        Ok(())
    }

    /// Whether `records` from `expected_seq` are committed already, byte for byte (their seq and
    /// run filled in), with `objects` stored with the same bytes.
    async fn is_retry(
        &self,
        key: &RunKey,
        head: &Head,
        expected_seq: u64,
        records: &[JournalEvent],
        objects: &[(String, Vec<u8>)],
    ) -> Result<bool, WsError> {
        let page = self.page(key, head, expected_seq, records.len()).await?;
        if page.records != records {
            return Ok(false);
        }
        for (path, bytes) in objects {
            match self.object_bytes(key, path).await? {
                Some(found) if found.as_slice() == bytes.as_slice() => {}
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Raises the head's epoch to `epoch` (creating the head if absent): from then on every
    /// append of an older epoch is refused, whichever replica it comes through.
    pub async fn fence(&self, key: &RunKey, epoch: u64) -> Result<(), WsError> {
        for _ in 0..MAX_ROUNDS {
            let (mut head, version) = self.load_head(key).await?;
            if head.epoch >= epoch && version.is_some() {
                return Ok(());
            }
            head.epoch = head.epoch.max(epoch);
            if let Cas::Written = self.put_head(key, &head, version).await? {
                return Ok(());
            }
        }
        Err(kept_conflicting("a fence"))
    }

    /// Seals a run's journal: later appends fail, followers end after the last record.
    pub async fn seal(&self, key: &RunKey) -> Result<(), WsError> {
        for _ in 0..MAX_ROUNDS {
            let (mut head, version) = self.load_head(key).await?;
            if head.sealed {
                return Ok(());
            }
            head.sealed = true;
            if let Cas::Written = self.put_head(key, &head, version).await? {
                self.followers.committed(key, head.last_seq(), true);
                return Ok(());
            }
        }
        Err(kept_conflicting("a seal"))
    }
}
