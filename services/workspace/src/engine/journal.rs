//! A run's journal as the storage RPCs see it: appends (their records and the audit objects they
//! carry checked against the journal's rules, then handed to the log: one job of the local log,
//! or the objects then one compare-and-swap of the head on a shared store), pages of
//! records and following a journal as it grows. The records are `toolplane.v1.JournalEvent`
//! messages end to end: the log stores each one's encoding as it came (with its `epoch` set to
//! the append's), so there is no second, domain copy of a record to convert on the hot path. Must never accept a record whose sequence
//! number or run disagrees with the append, nor two objects of one append at colliding paths.

use tokio::sync::mpsc;
use toolplane_proto::v1::JournalEvent;

use crate::{
    engine::{Workspace, objects::audit_path},
    error::WsError,
    wal::JournalPage,
};

/// Most audit objects one journal append may carry (a tool call carries two or three).
pub const MAX_APPEND_OBJECTS: usize = 64;

/// One append to a run's journal.
#[derive(Debug, Clone)]
pub struct Append {
    pub epoch: u64,
    /// The sequence number of the first record (1-based).
    pub expected_seq: u64,
    pub records: Vec<JournalEvent>,
    /// Audit objects `(path, bytes)` the records name, stored before them.
    pub objects: Vec<(String, Vec<u8>)>,
}

impl Workspace {
    /// Appends records (and the audit objects they carry) to a run's journal; returns the last
    /// sequence number once all are durable.
    pub async fn append_journal(
        &self,
        cell: &str,
        run_id: &str,
        append: Append,
    ) -> Result<u64, WsError> {
        let run = self.run(cell, run_id).await?;
        self.check_records(run_id, &append)?;
        let objects = self.check_objects(append.objects)?;
        let _fence = self.runs().fenced(&run, append.epoch, false).await?;
        let mut records = append.records;
        for record in &mut records {
            record.epoch = append.epoch;
        }
        // The objects go into the log before the records that name them, in the same
        // job: one group commit covers both, and an existing object fails the whole
        // append before anything is written.
        let appended = records.len();
        let last_seq = self
            .log()
            .append(
                &(cell.to_owned(), run_id.to_owned()),
                append.epoch,
                append.expected_seq,
                records,
                objects,
            )
            .await?;
        self.metrics().journal_records(appended);
        Ok(last_seq)
    }

    /// The records of an append: some, numbered from `expected_seq` (or unnumbered), of this run
    /// (or of none named), each with a type, within the size limit.
    fn check_records(&self, run_id: &str, a: &Append) -> Result<(), WsError> {
        if a.records.is_empty() || a.expected_seq == 0 {
            return Err(WsError::invalid_request(
                "an append needs records and expected_seq >= 1",
            ));
        }
        let size: usize = a.records.iter().map(prost::Message::encoded_len).sum();
        if size > self.limits().max_journal_append_bytes {
            return Err(WsError::invalid_request(format!(
                "append is {size} bytes, over the limit of {}",
                self.limits().max_journal_append_bytes
            )));
        }
        for (i, record) in a.records.iter().enumerate() {
            if record.seq != 0 && record.seq != a.expected_seq + i as u64 {
                return Err(WsError::invalid_request(format!(
                    "record {i} has seq {}, expected {}",
                    record.seq,
                    a.expected_seq + i as u64
                )));
            }
            if !record.run_id.is_empty() && record.run_id != run_id {
                return Err(WsError::invalid_request(format!(
                    "record {i} belongs to run {}",
                    record.run_id
                )));
            }
            if record.r#type.is_empty() {
                return Err(WsError::invalid_request(format!("record {i} has no type")));
            }
        }
        Ok(())
    }

    /// The objects of an append: few enough, each at an audit path and within the size limit,
    /// no two at the same path or one below another.
    fn check_objects(
        &self,
        objects: Vec<(String, Vec<u8>)>,
    ) -> Result<Vec<(String, Vec<u8>)>, WsError> {
        if objects.len() > MAX_APPEND_OBJECTS {
            return Err(WsError::invalid_request(format!(
                "an append carries {} objects, more than {MAX_APPEND_OBJECTS}",
                objects.len()
            )));
        }
        let mut checked = Vec::with_capacity(objects.len());
        for (raw, content) in objects {
            let path = audit_path(&raw)?;
            if content.len() > self.limits().max_audit_bytes {
                return Err(WsError::invalid_request(format!(
                    "object `{raw}` is {} bytes, over the limit of {}",
                    content.len(),
                    self.limits().max_audit_bytes
                )));
            }
            checked.push((path.as_str().to_owned(), content));
        }
        for (i, (a, _)) in checked.iter().enumerate() {
            if let Some((b, _)) = checked.iter().skip(i + 1).find(|(b, _)| {
                a == b || b.starts_with(&format!("{a}/")) || a.starts_with(&format!("{b}/"))
            }) {
                return Err(WsError::invalid_request(format!(
                    "objects `{a}` and `{b}` of one append collide"
                )));
            }
        }
        Ok(checked)
    }

    /// Records of a run's journal from `from` (1-based), at most `limit`.
    pub async fn read_journal(
        &self,
        cell: &str,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<JournalPage, WsError> {
        self.run(cell, run_id).await?;
        self.log()
            .journal(&(cell.to_owned(), run_id.to_owned()))
            .await?
            .read(from, limit)
            .await
    }

    /// Follows a run's journal from `from`: every record, then each new one as it is
    /// committed, until the journal is sealed (the channel then ends) or the receiver is
    /// dropped. A failed read is sent as the last item.
    pub async fn follow_journal(
        &self,
        cell: &str,
        run_id: &str,
        from: u64,
    ) -> Result<mpsc::Receiver<Result<JournalEvent, WsError>>, WsError> {
        self.run(cell, run_id).await?;
        let journal = self
            .log()
            .journal(&(cell.to_owned(), run_id.to_owned()))
            .await?;
        let (tx, rx) = mpsc::channel(256);
        let mut watch = journal.subscribe().await?;
        let mut next = from.max(1);
        tokio::spawn(async move {
            loop {
                let page = match journal.read(next, 500).await {
                    Ok(page) => page,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                next = page.next_seq;
                let (at_end, sealed) = (page.at_end, page.sealed);
                for record in page.records {
                    if tx.send(Ok(record)).await.is_err() {
                        return;
                    }
                }
                if at_end {
                    if sealed {
                        return;
                    }
                    tokio::select! {
                        changed = watch.changed() => if changed.is_err() { return },
                        () = tx.closed() => return,
                    }
                }
            }
        });
        Ok(rx)
    }
}
