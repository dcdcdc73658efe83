//! Run workspaces through their life: creation (roots, artifact root, `persist/` projection),
//! invocation views, finishing (the journal sealed) and the promotion of `persist/`. Takes
//! validated ids and domain values, returns domain records; must never let a stale epoch change a
//! run, nor promote `persist/` for a run that did not succeed.

use std::sync::{Arc, PoisonError};

use crate::{
    engine::{Workspace, now_ms},
    error::WsError,
    paths::{self, Roots},
    persist,
    runs::{InvocationRecord, Run, RunRecord, STATUS_COMPLETED, SkillAccess, stale as stale_epoch},
};

/// A run workspace to create: the manifest's values, ids already validated.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub cell: String,
    pub run: String,
    pub actor_id: String,
    pub chat_id: String,
    pub message_id: Option<String>,
    /// The run mode's number (1 foreground, 2 background).
    pub mode: i32,
    /// The roots asked for (empty: the defaults), narrowed to the defaults.
    pub visible: Vec<String>,
    pub writable: Vec<String>,
    /// Where the message's artifacts go (empty: `output/`).
    pub message_artifact_root: String,
    pub epoch: u64,
}

/// What a promotion of `persist/` produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promoted {
    pub persist_version: String,
    /// Paths added, changed or removed (empty when the run had promoted already).
    pub changed_paths: Vec<String>,
}

impl Workspace {
    /// The run `(cell, run)`.
    pub async fn run(&self, cell: &str, run: &str) -> Result<Arc<Run>, WsError> {
        self.runs().get(cell, run).await
    }

    /// The manifest of a run (on a shared store read again: another replica may have changed
    /// it since this one cached it).
    pub async fn run_record(&self, cell: &str, run: &str) -> Result<RunRecord, WsError> {
        let run = self.run(cell, run).await?;
        self.runs().current(&run).await
    }

    /// Creates a run workspace, or returns the manifest of the same run created before with the
    /// same chat, roots and mode (a retry); another manifest under the run's id is refused.
    pub async fn create_run(&self, new: NewRun) -> Result<RunRecord, WsError> {
        let roots = Roots::narrowed(&new.visible, &new.writable, &Roots::default())?;
        let artifact = if new.message_artifact_root.is_empty() {
            "output/"
        } else {
            new.message_artifact_root.as_str()
        };
        let artifact_path = paths::parse(artifact, true)
            .map_err(|e| WsError::invalid_request(e.message().to_owned()))?;
        if !paths::DEFAULT_ROOTS.contains(&artifact_path.root()) {
            return Err(WsError::invalid_request(
                "message_artifact_root must lie under a workspace root",
            ));
        }
        match self.runs().get(&new.cell, &new.run).await {
            Ok(existing) => {
                let record = existing.record.lock().await.0.clone();
                if record.chat_id == new.chat_id && record.roots == roots && record.mode == new.mode
                {
                    return Ok(record);
                }
                return Err(WsError::status(
                    "workspace.run_exists",
                    tonic::Code::AlreadyExists,
                    format!("run {} exists with another manifest", new.run),
                ));
            }
            Err(e) if e.code() == "workspace.run_not_found" => {}
            Err(e) => return Err(e),
        }
        // A lease taken before the manifest existed fences the manifest from its first version.
        let leased = self
            .lease(&new.cell, &new.run)
            .await?
            .map_or(0, |(l, _)| l.epoch);
        let (c, r) = (new.cell.clone(), new.run.clone());
        self.blocking(move |tree| tree.create_run_dir(&c, &r))
            .await?;
        let persist_base_version =
            persist::project(self, &new.cell, &new.chat_id, &new.run).await?;
        let record = RunRecord {
            cell_id: new.cell,
            run_id: new.run,
            actor_id: new.actor_id,
            chat_id: new.chat_id,
            message_id: new.message_id,
            mode: new.mode,
            roots,
            persist_base_version,
            message_artifact_root: format!("{artifact_path}/"),
            created_at_unix_ms: now_ms(),
            epoch: new.epoch.max(leased),
            status: 0,
            finished: false,
            persist_promoted: None,
        };
        let (record, _) = self.runs().create(record).await?;
        Ok(record)
    }

    /// Opens an invocation's view of a run: its roots (`visible`/`writable`, narrowed to the
    /// run's) and skill access. Returns the roots it got.
    pub async fn open_invocation(
        &self,
        cell: &str,
        run_id: &str,
        invocation: &str,
        epoch: u64,
        roots: (&[String], &[String]),
        skills: SkillAccess,
    ) -> Result<Roots, WsError> {
        let run = self.run(cell, run_id).await?;
        let record = self.runs().check_epoch(&run, epoch, false).await?;
        let roots = Roots::narrowed(roots.0, roots.1, &record.roots)?;
        self.runs()
            .open_invocation(
                &run,
                cell,
                run_id,
                invocation,
                InvocationRecord {
                    roots: roots.clone(),
                    skills,
                    closed: false,
                },
            )
            .await?;
        Ok(roots)
    }

    /// Closes an invocation: its read-state is dropped and its later calls are refused.
    pub async fn close_invocation(
        &self,
        cell: &str,
        run_id: &str,
        invocation: &str,
        epoch: u64,
    ) -> Result<(), WsError> {
        let run = self.run(cell, run_id).await?;
        self.runs().check_epoch(&run, epoch, true).await?;
        self.runs()
            .close_invocation(&run, cell, run_id, invocation)
            .await
    }

    /// Finishes a run with `status`: the manifest says so, the journal is sealed and the
    /// invocations' views are dropped.
    pub async fn finish_run(
        &self,
        cell: &str,
        run_id: &str,
        epoch: u64,
        status: i32,
    ) -> Result<(), WsError> {
        let run = self.run(cell, run_id).await?;
        // Under the run's fence lock, and checked again on every re-read of the manifest (another
        // replica may have raised its epoch in between): a driver whose lease another one has
        // taken never marks the run finished. Once the manifest says finished, the run is.
        let (_, _fence) = self.runs().fenced(&run, epoch, true).await?;
        self.runs()
            .update(&run, |rec| {
                if epoch < rec.epoch {
                    return Err(stale_epoch(epoch, rec.epoch));
                }
                let change = !rec.finished;
                rec.finished = true;
                rec.status = status;
                Ok(change)
            })
            .await?;
        self.log()
            .seal(&(cell.to_owned(), run_id.to_owned()))
            .await?;
        run.invocations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        Ok(())
    }

    /// Promotes the run's `persist/` into its chat's state (once: a second call answers the
    /// version the first one made). Only a run not finished yet or completed promotes.
    pub async fn promote_persist(
        &self,
        cell: &str,
        run_id: &str,
        epoch: u64,
    ) -> Result<Promoted, WsError> {
        let run = self.run(cell, run_id).await?;
        let record = self.runs().check_epoch(&run, epoch, true).await?;
        if let Some(version) = &record.persist_promoted {
            return Ok(Promoted {
                persist_version: version.clone(),
                changed_paths: Vec::new(),
            });
        }
        if record.finished && record.status != STATUS_COMPLETED {
            return Err(WsError::status(
                "workspace.run_finished",
                tonic::Code::FailedPrecondition,
                "only a successful run promotes persist/",
            ));
        }
        let (version, changed) = persist::promote(
            self,
            cell,
            &record.chat_id,
            run_id,
            &record.persist_base_version,
        )
        .await?;
        let v = version.clone();
        self.runs()
            .update(&run, |rec| {
                rec.persist_promoted = Some(v.clone());
                Ok(true)
            })
            .await?;
        Ok(Promoted {
            persist_version: version,
            changed_paths: changed,
        })
    }
}
