//! Approvals in the runtime's store: each record under `approvals/<cell>/<id>.json`, written
//! whenever it changes (held, decided, started), and read back into the book at start.

use toolplane_store::Precondition;

use super::{Runtime, key};
use crate::error::RuntimeError;
use crate::state::Approval;

impl Runtime {
    /// Writes the approval's record (overwriting the one stored); the change is durable when
    /// this returns.
    pub async fn persist_approval(&self, a: &Approval) -> Result<(), RuntimeError> {
        let k = key(&format!("approvals/{}/{}.json", a.cell_id, a.id))?;
        let bytes = serde_json::to_vec(a).map_err(|e| RuntimeError::invalid(e.to_string()))?;
        for _ in 0..3 {
            let expected = match self
                .store()
                .head(&k)
                .await
                .map_err(|e| RuntimeError::dependency(e.to_string()))?
            {
                Some(v) => Precondition::Version(v),
                None => Precondition::Absent,
            };
            match self.store().put_cas(&k, bytes.clone(), expected).await {
                Ok(_) => return Ok(()),
                Err(e) if e.code() == "store.conflict" => continue,
                Err(e) => {
                    return Err(RuntimeError::dependency(format!(
                        "saving approval {}: {e}",
                        a.id
                    )));
                }
            }
        }
        Err(RuntimeError::dependency(format!(
            "saving approval {}: too many concurrent updates",
            a.id
        )))
    }

    /// Every stored approval, read back into the book (at start, before runs are recovered).
    pub async fn load_approvals(&self) -> Vec<Approval> {
        let all = self.approvals_under("approvals").await;
        for a in &all {
            self.approvals.insert(a.clone());
        }
        all
    }

    /// The approvals of run `run` of `cell` still pending in the store, read into the book (a
    /// run taken over from another runtime).
    pub async fn load_run_approvals(&self, cell: &str, run: &str) {
        for a in self.approvals_under(&format!("approvals/{cell}")).await {
            if a.run_id == run && a.state == crate::state::ApprovalState::Pending {
                self.approvals.insert(a);
            }
        }
    }

    /// Approval `id` as the store has it (in `cell`, or any cell for `None`).
    pub async fn stored_approval(&self, id: &str, cell: Option<&str>) -> Option<Approval> {
        if id.is_empty() || id.contains('/') {
            return None;
        }
        let found = match cell {
            Some(c) => key(&format!("approvals/{c}/{id}.json")).ok(),
            None => {
                let name = format!("/{id}.json");
                let prefix = key("approvals").ok()?;
                let page = self.store().list(Some(&prefix), None, 10_000).await.ok()?;
                page.keys.into_iter().find(|k| k.as_str().ends_with(&name))
            }
        }?;
        let obj = self.store().get(&found).await.ok()??;
        serde_json::from_slice(&obj.bytes).ok()
    }

    /// The approvals stored under `prefix` (unreadable ones skipped).
    async fn approvals_under(&self, prefix: &str) -> Vec<Approval> {
        let keys = self.list_keys(prefix).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "listing approvals failed");
            Vec::new()
        });
        let mut out = Vec::new();
        for k in &keys {
            if let Ok(Some(obj)) = self.store().get(k).await
                && let Ok(a) = serde_json::from_slice::<Approval>(&obj.bytes)
            {
                out.push(a);
            }
        }
        out
    }
}
