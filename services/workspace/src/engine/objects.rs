//! A run's stored objects as the storage RPCs see them: create-only audit objects, the world-info
//! activation, one object's bytes (the journal log's first, then the run's tree), a text window
//! of one, and pages of the run's objects. Takes validated ids and paths; must never serve a path
//! outside the workspace roots, nor overwrite an audit object.

use toolplane_text::{Window, WindowRequest, check_text, window};

use crate::{
    engine::{Workspace, sha256_hex},
    error::WsError,
    paths::{self, HIDDEN_ROOTS, READ_ONLY_ROOTS, WsPath},
    tools::worldinfo,
    tree::Read,
};

/// A path of a run workspace named by a storage RPC: any root, hidden storage included, but
/// nothing outside the known roots.
pub fn storage_path(raw: &str) -> Result<WsPath, WsError> {
    let path =
        paths::parse(raw, false).map_err(|e| WsError::invalid_request(e.message().to_owned()))?;
    let root = path.root();
    if paths::DEFAULT_ROOTS.contains(&root)
        || READ_ONLY_ROOTS.contains(&root)
        || HIDDEN_ROOTS.contains(&root)
    {
        Ok(path)
    } else {
        Err(WsError::invalid_request(format!(
            "{path} is not under a workspace root"
        )))
    }
}

/// A storage path where an audit object may be put.
pub fn audit_path(raw: &str) -> Result<WsPath, WsError> {
    let path = storage_path(raw)?;
    let ok = paths::is_audit_path(path.as_str());
    if ok {
        Ok(path)
    } else {
        Err(WsError::invalid_request(format!(
            "{path} is not an audit path: use tool-args/<invocation>/call_<16 hex>.json, tool-results/<invocation>/…, agent-results/<invocation>.json, summaries/<invocation>-result.md, input/… or model-responses/…"
        )))
    }
}

/// An audit object to store.
#[derive(Debug, Clone)]
pub struct AuditPut {
    /// An [`audit_path`], not yet validated.
    pub path: String,
    pub content: Vec<u8>,
    /// Answer once the object is durable in the log.
    pub sync: bool,
    /// An identical object already there is not an error.
    pub allow_identical: bool,
}

/// A stored audit object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutObject {
    pub sha256: String,
    pub size_bytes: u64,
    /// `false`: an identical object was there already (with `allow_identical`).
    pub created: bool,
}

/// One object of a run as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub path: String,
    pub size_bytes: u64,
    pub sha256: String,
    /// `None` where the filesystem layer cannot tell (a simulated one).
    pub modified_at_unix_ms: Option<i64>,
    pub visible: bool,
    pub writable: bool,
}

/// Which objects of a run to list.
#[derive(Debug, Clone)]
pub struct ObjectQuery {
    /// A folder or file (trailing `/` ignored; empty: everything).
    pub prefix: String,
    pub page_size: usize,
    /// The last path of the previous page (empty: from the start).
    pub page_token: String,
    /// Hidden storage (`input/`, `tool-args/`, …) too.
    pub include_hidden: bool,
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectPage {
    pub objects: Vec<ObjectInfo>,
    /// Empty on the last page.
    pub next_page_token: String,
}

impl Workspace {
    /// Stores an audit object at `path` (an [`audit_path`]) create-only through the journal log
    /// (durable before the answer with `sync`).
    pub async fn put_audit_object(
        &self,
        cell: &str,
        run_id: &str,
        epoch: u64,
        put: AuditPut,
    ) -> Result<PutObject, WsError> {
        let AuditPut {
            path,
            content,
            sync,
            allow_identical,
        } = put;
        let run = self.run(cell, run_id).await?;
        let path = audit_path(&path)?;
        if content.len() > self.limits().max_audit_bytes {
            return Err(WsError::invalid_request(format!(
                "object is {} bytes, over the limit of {}",
                content.len(),
                self.limits().max_audit_bytes
            )));
        }
        self.runs().check_epoch(&run, epoch, false).await?;
        let sha256 = sha256_hex(&content);
        let size_bytes = content.len() as u64;
        let created = self
            .log()
            .put_object(
                &(cell.to_owned(), run_id.to_owned()),
                path.as_str(),
                content,
                sync,
                allow_identical,
            )
            .await?;
        Ok(PutObject {
            sha256,
            size_bytes,
            created,
        })
    }

    /// Stores the run's world-info activation (normalised) as its audit object; a different
    /// activation for the same run is refused. Returns its SHA-256 and number of entries.
    pub async fn put_world_info_activation(
        &self,
        cell: &str,
        run_id: &str,
        epoch: u64,
        activation_json: &str,
    ) -> Result<(String, usize), WsError> {
        let run = self.run(cell, run_id).await?;
        if activation_json.len() > self.limits().max_worldinfo_bytes {
            return Err(WsError::invalid_request(
                "activation_json is over the size limit",
            ));
        }
        let activation = worldinfo::normalize(activation_json)?;
        self.runs().check_epoch(&run, epoch, false).await?;
        let bytes =
            serde_json::to_vec_pretty(&activation).map_err(|e| WsError::io(e.to_string()))?;
        let sha = sha256_hex(&bytes);
        let key = (cell.to_owned(), run_id.to_owned());
        self.log()
            .put_object(&key, worldinfo::ACTIVATION_PATH, bytes, true, true)
            .await
            .map_err(|e| {
                if e.code() == "workspace.audit_exists" {
                    WsError::status(
                        "workspace.audit_exists",
                        tonic::Code::AlreadyExists,
                        "this run already has a different world-info activation",
                    )
                } else {
                    e
                }
            })?;
        Ok((sha, activation.entries.len()))
    }

    /// The bytes at `path` (a [`storage_path`]) of a run: an audit object of the journal log,
    /// else the run's file; with the path it names.
    pub async fn read_object(
        &self,
        cell: &str,
        run_id: &str,
        path: &str,
    ) -> Result<(WsPath, Vec<u8>), WsError> {
        self.run(cell, run_id).await?;
        let path = storage_path(path)?;
        let key = (cell.to_owned(), run_id.to_owned());
        if let Some(b) = self.log().object_bytes(&key, path.as_str()).await? {
            return Ok((path, b.as_ref().clone()));
        }
        let base = self.tree().run_dir(cell, run_id);
        let rel = path.as_str().to_owned();
        match self.blocking(move |tree| tree.read(&base, &rel)).await? {
            Read::File(b) => Ok((path, b)),
            Read::Dir => Err(WsError::invalid_request(format!("{path} is a folder"))),
            Read::Absent => Err(WsError::not_found(format!("{path} does not exist"))),
        }
    }

    /// A window of the text at `path` (a [`storage_path`]) of a run (the read limits applied), and the SHA-256 of
    /// the whole object.
    pub async fn read_text(
        &self,
        cell: &str,
        run_id: &str,
        path: &str,
        start_line: Option<u64>,
        line_count: Option<u64>,
    ) -> Result<(Window, String), WsError> {
        let (path, bytes) = self.read_object(cell, run_id, path).await?;
        let text = check_text(&bytes).map_err(|e| {
            WsError::status(
                "workspace.file_not_text",
                tonic::Code::FailedPrecondition,
                format!("{path}: {e}"),
            )
        })?;
        let w = window(
            text,
            WindowRequest {
                start_line,
                line_count,
                max_chars: self.limits().max_read_chars,
                max_line_chars: self.limits().max_line_chars,
            },
        )
        .map_err(|e| {
            WsError::status(
                "workspace.invalid_range",
                tonic::Code::OutOfRange,
                format!("{path}: {e}"),
            )
        })?;
        Ok((w, sha256_hex(&bytes)))
    }

    /// A page of a run's objects, in path order: its files and the journal log's audit
    /// objects, hidden ones only with `include_hidden`.
    pub async fn list_objects(
        &self,
        cell: &str,
        run_id: &str,
        query: ObjectQuery,
    ) -> Result<ObjectPage, WsError> {
        let run = self.run(cell, run_id).await?;
        let roots = run.record.lock().await.0.roots.clone();
        let prefix = query.prefix.trim_end_matches('/').to_owned();
        if !prefix.is_empty() {
            storage_path(&prefix)?;
        }
        let base = self.tree().run_dir(cell, run_id);
        let key = (cell.to_owned(), run_id.to_owned());
        let logged = self.log().objects_under(&key, "").await?;
        self.blocking(move |tree| {
            let (mut files, _) = tree.list_files(&base, &prefix, usize::MAX)?;
            files.extend(logged.keys().cloned());
            files.sort();
            files.dedup();
            let mut objects = Vec::new();
            let mut next_page_token = String::new();
            for f in files {
                let Ok(path) = paths::parse(&f, false) else {
                    continue;
                };
                if !prefix.is_empty() && !path.is_at_or_below(&prefix) {
                    continue;
                }
                let visible = roots.can_see(&path);
                if !query.include_hidden && !visible {
                    continue;
                }
                if !query.page_token.is_empty() && f.as_str() <= query.page_token.as_str() {
                    continue;
                }
                if objects.len() == query.page_size {
                    next_page_token = objects
                        .last()
                        .map(|o: &ObjectInfo| o.path.clone())
                        .unwrap_or_default();
                    break;
                }
                let (bytes, modified) = match logged.get(&f) {
                    Some(o) => {
                        // Only the page's objects are read (on a shared store, fetched now).
                        let o = o.loaded()?;
                        (o.read()?.as_ref().clone(), Some(o.put_at_unix_ms))
                    }
                    None => match tree.read(&base, &f)? {
                        Read::File(b) => (b, tree.modified_ms(&base, &f)),
                        _ => continue,
                    },
                };
                objects.push(ObjectInfo {
                    path: f.clone(),
                    size_bytes: bytes.len() as u64,
                    sha256: sha256_hex(&bytes),
                    modified_at_unix_ms: modified,
                    visible,
                    writable: roots.can_write(&path),
                });
            }
            Ok(ObjectPage {
                objects,
                next_page_token,
            })
        })
        .await
    }
}
