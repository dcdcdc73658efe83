//! Appending to a run's journal and reading its end, through the workspace port. A failed append
//! is a system failure: the run cannot go on without its journal.

use std::collections::VecDeque;

use crate::error::RuntimeError;
use crate::state::{AuditObject, Event, Run};

use super::Runtime;
use super::ports::{PortError, RunScope, StoredRecord};

impl Runtime {
    /// Appends the events to the run's journal as one group, carrying the audit objects they
    /// name: the workspace stores the objects create-only before the records, and one group
    /// commit makes both durable.
    pub async fn append(
        &self,
        run: &Run,
        epoch: u64,
        objects: Vec<AuditObject>,
        events: Vec<Event>,
    ) -> Result<(), RuntimeError> {
        if run.lease_lost() {
            return Err(lease_lost(run));
        }
        if events.is_empty() {
            return self.put_objects(run, epoch, objects).await;
        }
        let reservation = run.journal.reserve().await?;
        let group = reservation.group(epoch, objects, events);
        let (count, first) = (group.records.len(), group.expected_seq);
        let paths: Vec<String> = group.objects.iter().map(|o| o.path.clone()).collect();
        if let Err(e) = self.ports.workspace.append_journal(group).await {
            if e.is_already_exists() {
                return Err(duplicate_object(&paths.join(", ")));
            }
            if self.cfg.cluster.leases && e.code() == Some("workspace.stale_epoch") {
                self.lose_run(run, &e.message);
                return Err(lease_lost(run));
            }
            return Err(RuntimeError::journal(format!(
                "appending {count} record(s) at seq {first} failed: {}",
                e.message
            )));
        }
        reservation.advance(count);
        Ok(())
    }

    /// Puts audit objects create-only, concurrently; the journal's group commit makes them
    /// durable together with the record that names them.
    async fn put_objects(
        &self,
        run: &Run,
        epoch: u64,
        objects: Vec<AuditObject>,
    ) -> Result<(), RuntimeError> {
        let scope = RunScope {
            run_id: run.journal.run_id().to_owned(),
            cell_id: run.journal.cell_id().to_owned(),
            epoch,
        };
        let puts = objects.into_iter().map(|o| {
            let path = o.path.clone();
            let scope = &scope;
            async move {
                self.ports
                    .workspace
                    .put_audit_object(scope, o)
                    .await
                    .map_err(|e| (path, e))
            }
        });
        for r in futures::future::join_all(puts).await {
            if let Err((path, e)) = r {
                return Err(put_failed(&path, &e));
            }
        }
        Ok(())
    }

    /// The run's last journal sequence number; for a finished run loaded after a restart it is
    /// read back from the workspace the first time it is asked for.
    pub async fn last_seq(&self, run: &Run) -> u64 {
        if run.journal.is_unknown().await
            && let Some(end) = self.journal_end(run).await
        {
            run.journal.learn(end).await;
        }
        run.journal.last_seq().await
    }

    /// The last sequence number stored in the run's journal; `None` when it cannot be read.
    pub async fn journal_end(&self, run: &Run) -> Option<u64> {
        self.journal_tail(run).await.map(|(seq, _)| seq)
    }

    /// The last records stored in the run's journal (up to [`TAIL`], oldest first) and its last
    /// sequence number (0 for an empty journal); `None` when the journal cannot be read.
    pub async fn journal_tail(&self, run: &Run) -> Option<(u64, Vec<StoredRecord>)> {
        let mut from = 1;
        let mut tail: VecDeque<StoredRecord> = VecDeque::with_capacity(TAIL);
        loop {
            let page = self
                .ports
                .workspace
                .read_journal(&run.id, &run.cell, from, 5000)
                .await
                .ok()?;
            let at_end = page.at_end || page.records.is_empty();
            for r in page.records {
                if tail.len() == TAIL {
                    tail.pop_front();
                }
                tail.push_back(r);
            }
            if at_end {
                let end = tail.back().map_or(0, |r| r.seq);
                return Some((end, tail.into()));
            }
            from = page.next_seq;
        }
    }
}

/// How many of a journal's last records [`Runtime::journal_tail`] keeps: enough for the records
/// of one call and what follows it to a run's end.
pub const TAIL: usize = 16;

fn put_failed(path: &str, e: &PortError) -> RuntimeError {
    if e.is_already_exists() {
        return duplicate_object(path);
    }
    RuntimeError::dependency(format!("storing `{path}` failed: {}", e.message))
}

/// An audit object that already exists: the objects are named by the call id's digest within the
/// invocation, so this is a call id the provider reused.
fn duplicate_object(path: &str) -> RuntimeError {
    RuntimeError::new(
        toolplane_core::error::MODEL_DUPLICATE_CALL_ID,
        format!(
            "the audit object `{path}` already exists: a call id was reused within the invocation"
        ),
    )
}

/// The refusal of every write for a run whose lease another holder took.
pub fn lease_lost(run: &Run) -> RuntimeError {
    RuntimeError::new(
        toolplane_core::error::RUNTIME_LEASE_LOST,
        format!(
            "another runtime holds run {} now; this one writes nothing more for it",
            run.id
        ),
    )
}
