//! Runs this runtime does not drive, read from the runtime's store: over a shared store another
//! replica's run has its record under `runs/<cell>/<run>.json`, so any replica answers reads of it
//! (`GetRun`, `WatchRun`, `ListRuns`) without taking it over, and refuses changes to it with
//! `runtime.not_owner` (docs/runtime.md, "Over a shared store").
//!
//! Two indexes find a record by id alone, each one empty key per entry: `ids/runs/<run>/<cell>`
//! (written when a run is created), so a caller who names no cell (authentication off) costs
//! one listing of that prefix, not of every run; and, in cluster mode,
//! `ids/invocations/<invocation>/<cell>/<run>` (written when an invocation opens), so an
//! invocation of another runtime's run is found the same way.

use std::sync::Arc;

use toolplane_store::Key;

use super::{Runtime, key};
use crate::error::RuntimeError;
use crate::state::{Run, RunRecord};

impl Runtime {
    /// The stored record of run `id` of `cell` (any cell for `None`), as a detached run: it is
    /// not put into this runtime's book and nothing drives it. `None` when no record is stored.
    pub async fn stored_run(
        &self,
        id: &str,
        cell: Option<&str>,
    ) -> Result<Option<Arc<Run>>, RuntimeError> {
        if id.is_empty() || id.contains('/') {
            return Ok(None);
        }
        let found = match cell {
            Some(c) => {
                self.read_record(&key(&format!("runs/{c}/{id}.json"))?)
                    .await?
            }
            None => {
                let mut found = None;
                for cell in self.indexed(&format!("ids/runs/{id}")).await? {
                    found = self
                        .read_record(&key(&format!("runs/{cell}/{id}.json"))?)
                        .await?;
                    if found.is_some() {
                        break;
                    }
                }
                found
            }
        };
        Ok(found.map(|r| Arc::new(Run::new(r, 0))))
    }

    /// The cell and run of invocation `id` (cluster mode), found by its index entry; `None` when
    /// it has none in `cell` (any cell for `None`).
    pub async fn run_of_invocation(
        &self,
        id: &str,
        cell: Option<&str>,
    ) -> Result<Option<(String, String)>, RuntimeError> {
        if id.is_empty() || id.contains('/') {
            return Ok(None);
        }
        for entry in self.indexed(&format!("ids/invocations/{id}")).await? {
            if let Some((c, run)) = entry.split_once('/')
                && cell.is_none_or(|own| own == c)
            {
                return Ok(Some((c.to_owned(), run.to_owned())));
            }
        }
        Ok(None)
    }

    /// Adds `<prefix>/<entry>` to an index (an empty object; already there is fine).
    pub async fn index(&self, prefix: &str, entry: &str) -> Result<(), RuntimeError> {
        match self
            .store()
            .put_create(&key(&format!("{prefix}/{entry}"))?, Vec::new())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.code() == "store.already_exists" => Ok(()),
            Err(e) => Err(RuntimeError::dependency(format!("indexing {prefix}: {e}"))),
        }
    }

    /// The entries of an index (the key paths below `prefix`), at most a page of them.
    async fn indexed(&self, prefix: &str) -> Result<Vec<String>, RuntimeError> {
        let page = self
            .store()
            .list(Some(&key(prefix)?), None, 100)
            .await
            .map_err(|e| RuntimeError::dependency(format!("reading {prefix}: {e}")))?;
        let strip = format!("{prefix}/");
        Ok(page
            .keys
            .iter()
            .filter_map(|k| k.as_str().strip_prefix(&strip).map(str::to_owned))
            .collect())
    }

    /// The runs (cell, run) that have an invocation checkpoint stored: the open runs of every
    /// runtime over the store (cluster mode).
    pub async fn checkpointed_runs(&self) -> Result<Vec<(String, String)>, RuntimeError> {
        let mut out: Vec<(String, String)> = Vec::new();
        for k in self.list_keys("held").await? {
            let mut parts = k.as_str().split('/').skip(1);
            if let (Some(cell), Some(run)) = (parts.next(), parts.next())
                && !out.iter().any(|(c, r)| c == cell && r == run)
            {
                out.push((cell.to_owned(), run.to_owned()));
            }
        }
        Ok(out)
    }

    /// Every stored run record of `cell` (every cell for an empty one).
    pub async fn stored_runs(&self, cell: &str) -> Result<Vec<RunRecord>, RuntimeError> {
        let prefix = if cell.is_empty() {
            "runs".to_owned()
        } else {
            format!("runs/{cell}")
        };
        let mut out = Vec::new();
        for k in self.list_keys(&prefix).await? {
            if let Some(r) = self.read_record(&k).await? {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Every key under `prefix`, page after page.
    pub(crate) async fn list_keys(&self, prefix: &str) -> Result<Vec<Key>, RuntimeError> {
        let prefix = key(prefix)?;
        let mut keys = Vec::new();
        let mut after: Option<Key> = None;
        loop {
            let page = self
                .store()
                .list(Some(&prefix), after.as_ref(), 1000)
                .await
                .map_err(|e| RuntimeError::dependency(format!("listing runs: {e}")))?;
            keys.extend(page.keys);
            match page.next_start_after {
                Some(n) => after = Some(n),
                None => return Ok(keys),
            }
        }
    }

    async fn read_record(&self, k: &Key) -> Result<Option<RunRecord>, RuntimeError> {
        let Some(obj) = self
            .store()
            .get(k)
            .await
            .map_err(|e| RuntimeError::dependency(format!("reading {}: {e}", k.as_str())))?
        else {
            return Ok(None);
        };
        Ok(serde_json::from_slice::<RunRecord>(&obj.bytes).ok())
    }
}
