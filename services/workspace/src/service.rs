//! The gRPC services: `toolplane.v1.WorkspaceService` (storage RPCs for the runtime and UIs) and
//! `toolplane.v1.ToolExecutor` (the workspace, chat, skill and world-info tools). Owns request
//! validation, the epoch check of every mutating RPC and the mapping of errors to statuses; must
//! never answer a recoverable tool error with a status, nor a system failure with a tool result.

use std::{collections::HashSet, pin::Pin, sync::Arc, time::Instant};

use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use toolplane_core::ToolId;
use toolplane_proto::v1::{
    self as pb, tool_executor_server::ToolExecutor, workspace_service_server::WorkspaceService,
};
use toolplane_text::{WindowRequest, check_text, window};
use tracing::Instrument;

use crate::{
    chat::{StoredMessage, new_message_id},
    convert,
    engine::{Workspace, now_ms, sha256_hex},
    error::WsError,
    paths::{self, HIDDEN_ROOTS, PathGuard, READ_ONLY_ROOTS, Roots, valid_id},
    persist,
    runs::{InvocationRecord, RunRecord, SkillAccess},
    tools::{self, CallContext, worldinfo},
    tree::Read,
};

/// The default cell when a request leaves it empty.
pub const DEFAULT_CELL: &str = "default";

/// Most audit objects one journal append may carry (a tool call carries two or three).
pub const MAX_APPEND_OBJECTS: usize = 64;

/// Most appends one `AppendJournals` request may carry.
pub const MAX_BATCH_APPENDS: usize = 256;

/// Both gRPC services over one engine.
#[derive(Debug, Clone)]
pub struct WorkspaceGrpc {
    ws: Arc<Workspace>,
}

impl WorkspaceGrpc {
    pub fn new(ws: Arc<Workspace>) -> WorkspaceGrpc {
        WorkspaceGrpc { ws }
    }
}

fn cell_of(cell: &str) -> Result<String, WsError> {
    let cell = if cell.is_empty() { DEFAULT_CELL } else { cell };
    valid_id("cell id", cell)?;
    Ok(cell.to_owned())
}

fn run_key(cell: &str, run: &str) -> Result<(String, String), WsError> {
    let cell = cell_of(cell)?;
    valid_id("run id", run)?;
    Ok((cell, run.to_owned()))
}

/// A path of a run workspace named by a storage RPC: any root, hidden storage included, but
/// nothing outside the known roots.
fn storage_path(raw: &str) -> Result<paths::WsPath, WsError> {
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

fn audit_path(raw: &str) -> Result<paths::WsPath, WsError> {
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

type Rpc<T> = Result<Response<T>, Status>;

impl WorkspaceGrpc {
    /// One `AppendJournal`, on its own or as part of an `AppendJournals`.
    async fn append_one(
        &self,
        r: pb::AppendJournalRequest,
    ) -> Result<pb::AppendJournalResponse, WsError> {
        let (cell, run_id, run) = self.run(&r.cell_id, &r.run_id).await?;
        if r.records.is_empty() || r.expected_seq == 0 {
            return Err(WsError::invalid_request(
                "an append needs records and expected_seq >= 1",
            ));
        }
        let size: usize = r.records.iter().map(prost::Message::encoded_len).sum();
        if size > self.ws.limits().max_journal_append_bytes {
            return Err(WsError::invalid_request(format!(
                "append is {size} bytes, over the limit of {}",
                self.ws.limits().max_journal_append_bytes
            )));
        }
        for (i, record) in r.records.iter().enumerate() {
            if record.seq != 0 && record.seq != r.expected_seq + i as u64 {
                return Err(WsError::invalid_request(format!(
                    "record {i} has seq {}, expected {}",
                    record.seq,
                    r.expected_seq + i as u64
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
        if r.objects.len() > MAX_APPEND_OBJECTS {
            return Err(WsError::invalid_request(format!(
                "an append carries {} objects, more than {MAX_APPEND_OBJECTS}",
                r.objects.len()
            )));
        }
        let mut objects = Vec::with_capacity(r.objects.len());
        for o in r.objects {
            let path = audit_path(&o.path)?;
            if o.content.len() > self.ws.limits().max_audit_bytes {
                return Err(WsError::invalid_request(format!(
                    "object `{}` is {} bytes, over the limit of {}",
                    o.path,
                    o.content.len(),
                    self.ws.limits().max_audit_bytes
                )));
            }
            objects.push((path.as_str().to_owned(), o.content));
        }
        for (i, (a, _)) in objects.iter().enumerate() {
            if let Some((b, _)) = objects.iter().skip(i + 1).find(|(b, _)| {
                a == b || b.starts_with(&format!("{a}/")) || a.starts_with(&format!("{b}/"))
            }) {
                return Err(WsError::invalid_request(format!(
                    "objects `{a}` and `{b}` of one append collide"
                )));
            }
        }
        self.ws.runs().check_epoch(&run, r.epoch, false).await?;
        // The objects go into the log before the records that name them, in the same
        // job: one group commit covers both, and an existing object fails the whole
        // append before anything is written.
        let appended = r.records.len();
        let last_seq = self
            .ws
            .wal()
            .append(&(cell, run_id), r.expected_seq, r.records, objects)
            .await?;
        self.ws.metrics().journal_records(appended);
        Ok(pb::AppendJournalResponse { last_seq })
    }

    async fn run(
        &self,
        cell: &str,
        run: &str,
    ) -> Result<(String, String, Arc<crate::runs::Run>), WsError> {
        let (cell, run) = run_key(cell, run)?;
        let loaded = self.ws.runs().get(&cell, &run).await?;
        Ok((cell, run, loaded))
    }

    async fn create_run(
        &self,
        req: pb::CreateRunWorkspaceRequest,
    ) -> Result<pb::CreateRunWorkspaceResponse, WsError> {
        let m = req
            .manifest
            .ok_or_else(|| WsError::invalid_request("manifest is required"))?;
        let (cell, run) = run_key(&m.cell_id, &m.run_id)?;
        let chat = m
            .chat
            .clone()
            .ok_or_else(|| WsError::invalid_request("manifest.chat is required"))?;
        valid_id("chat id", &chat.chat_id)?;
        if let Some(id) = &chat.message_id {
            valid_id("message id", id)?;
        }
        let roots = m.roots.clone().unwrap_or_default();
        let roots = Roots::narrowed(&roots.visible, &roots.writable, &Roots::default())?;
        let artifact = if m.message_artifact_root.is_empty() {
            "output/".to_owned()
        } else {
            m.message_artifact_root.clone()
        };
        let artifact_path = paths::parse(&artifact, true)
            .map_err(|e| WsError::invalid_request(e.message().to_owned()))?;
        if !paths::DEFAULT_ROOTS.contains(&artifact_path.root()) {
            return Err(WsError::invalid_request(
                "message_artifact_root must lie under a workspace root",
            ));
        }
        let mode = if m.mode == pb::RunMode::Background as i32 {
            pb::RunMode::Background as i32
        } else {
            pb::RunMode::Foreground as i32
        };
        match self.ws.runs().get(&cell, &run).await {
            Ok(existing) => {
                let record = existing.record.lock().await.0.clone();
                if record.chat_id == chat.chat_id && record.roots == roots && record.mode == mode {
                    return Ok(pb::CreateRunWorkspaceResponse {
                        manifest: Some(convert::manifest(&record)),
                    });
                }
                return Err(WsError::status(
                    "workspace.run_exists",
                    tonic::Code::AlreadyExists,
                    format!("run {run} exists with another manifest"),
                ));
            }
            Err(e) if e.code() == "workspace.run_not_found" => {}
            Err(e) => return Err(e),
        }
        let (c, r) = (cell.clone(), run.clone());
        self.ws
            .blocking(move |tree| tree.create_run_dir(&c, &r))
            .await?;
        let persist_base_version = persist::project(&self.ws, &cell, &chat.chat_id, &run).await?;
        let record = RunRecord {
            cell_id: cell,
            run_id: run,
            actor_id: m.actor_id,
            chat_id: chat.chat_id,
            message_id: chat.message_id,
            mode,
            roots,
            persist_base_version,
            message_artifact_root: format!("{artifact_path}/"),
            created_at_unix_ms: now_ms(),
            epoch: req.epoch,
            status: 0,
            finished: false,
            persist_promoted: None,
        };
        let (record, _) = self.ws.runs().create(record).await?;
        Ok(pb::CreateRunWorkspaceResponse {
            manifest: Some(convert::manifest(&record)),
        })
    }

    async fn commit(
        &self,
        req: pb::CommitRunMessageRequest,
    ) -> Result<pb::CommitRunMessageResponse, WsError> {
        let (cell, run_id, run) = self.run(&req.cell_id, &req.run_id).await?;
        let record = self.ws.runs().check_epoch(&run, req.epoch, false).await?;
        let invalid = |m: String| {
            WsError::status(
                "workspace.commit_source_invalid",
                tonic::Code::FailedPrecondition,
                m,
            )
        };
        let path =
            paths::parse(&req.source_path, false).map_err(|e| invalid(e.message().to_owned()))?;
        if !record.roots.can_see(&path) || READ_ONLY_ROOTS.contains(&path.root()) {
            return Err(invalid(format!("{path} is not a visible workspace file")));
        }
        let base = self.ws.tree().run_dir(&cell, &run_id);
        let rel = path.as_str().to_owned();
        let bytes = match self.ws.blocking(move |tree| tree.read(&base, &rel)).await? {
            Read::Absent => return Err(invalid(format!("{path} does not exist"))),
            Read::Dir => return Err(invalid(format!("{path} is a folder"))),
            Read::File(bytes) => bytes,
        };
        let text = check_text(&bytes)
            .map_err(|e| invalid(format!("{path} is not UTF-8 text ({e})")))?
            .to_owned();
        if text.trim().is_empty() {
            return Err(invalid(format!("{path} is empty")));
        }
        let sha = sha256_hex(&bytes);
        if let Some(expected) = &req.expected_source_sha256
            && *expected != sha
        {
            return Err(invalid(format!(
                "{path} changed: its sha256 is {sha}, not {expected}"
            )));
        }
        let append = req.mode == pb::CommitMode::Append as i32;
        let bound = record.message_id.clone();
        let now = now_ms();
        let (index, message, created) = self
            .ws
            .chats()
            .modify(&cell, &record.chat_id, |messages| {
                if let Some(id) = &bound
                    && let Some((i, m)) = messages
                        .iter_mut()
                        .enumerate()
                        .find(|(_, m)| &m.message_id == id)
                {
                    if append {
                        m.content.push_str(&text)
                    } else {
                        m.content.clone_from(&text)
                    }
                    m.updated_at_unix_ms = now;
                    return Ok((i as u64, m.clone(), false));
                }
                let message = StoredMessage {
                    message_id: bound.clone().unwrap_or_else(new_message_id),
                    role: "assistant".into(),
                    name: String::new(),
                    content: text.clone(),
                    run_id: run_id.clone(),
                    metadata: None,
                    created_at_unix_ms: now,
                    updated_at_unix_ms: now,
                };
                messages.push(message.clone());
                Ok((messages.len() as u64 - 1, message, true))
            })
            .await?;
        if bound.is_none() {
            let id = message.message_id.clone();
            self.ws
                .runs()
                .update(&run, |r| {
                    let change = r.message_id.is_none();
                    if change {
                        r.message_id = Some(id.clone());
                    }
                    Ok(change)
                })
                .await?;
        }
        Ok(pb::CommitRunMessageResponse {
            message: Some(convert::message(index, &message)),
            source_sha256: sha,
            created,
        })
    }

    async fn list_objects(
        &self,
        req: pb::ListObjectsRequest,
    ) -> Result<pb::ListObjectsResponse, WsError> {
        let (cell, run_id, run) = self.run(&req.cell_id, &req.run_id).await?;
        let roots = run.record.lock().await.0.roots.clone();
        let prefix = req.prefix.trim_end_matches('/').to_owned();
        if !prefix.is_empty() {
            storage_path(&prefix)?;
        }
        let page = match req.page_size {
            0 => 100,
            n => (n as usize).min(1000),
        };
        let base = self.ws.tree().run_dir(&cell, &run_id);
        let key = (cell.clone(), run_id.clone());
        let logged = self.ws.wal().objects_under(&key, "").await?;
        let token = req.page_token.clone();
        let include_hidden = req.include_hidden;
        let objects = self
            .ws
            .blocking(move |tree| {
                let (mut files, _) = tree.list_files(&base, &prefix, usize::MAX)?;
                files.extend(logged.keys().cloned());
                files.sort();
                files.dedup();
                let mut out = Vec::new();
                let mut next = String::new();
                for f in files {
                    let Ok(path) = paths::parse(&f, false) else {
                        continue;
                    };
                    if !prefix.is_empty() && !path.is_at_or_below(&prefix) {
                        continue;
                    }
                    let visible = roots.can_see(&path);
                    if !include_hidden && !visible {
                        continue;
                    }
                    if !token.is_empty() && f.as_str() <= token.as_str() {
                        continue;
                    }
                    if out.len() == page {
                        next = out
                            .last()
                            .map(|o: &pb::WorkspaceObject| o.path.clone())
                            .unwrap_or_default();
                        break;
                    }
                    let (bytes, modified) = match logged.get(&f) {
                        Some(o) => (o.read()?.as_ref().clone(), Some(o.put_at_unix_ms)),
                        None => match tree.read(&base, &f)? {
                            Read::File(b) => (b, tree.modified_ms(&base, &f)),
                            _ => continue,
                        },
                    };
                    out.push(pb::WorkspaceObject {
                        path: f.clone(),
                        size_bytes: bytes.len() as u64,
                        sha256: sha256_hex(&bytes),
                        // 0 only where the filesystem layer cannot tell (a simulated one).
                        modified_at_unix_ms: modified.unwrap_or(0),
                        visible,
                        writable: roots.can_write(&path),
                    });
                }
                Ok(pb::ListObjectsResponse {
                    objects: out,
                    next_page_token: next,
                })
            })
            .await?;
        Ok(objects)
    }

    async fn read_object(
        &self,
        cell: &str,
        run_id: &str,
        path: &paths::WsPath,
    ) -> Result<Vec<u8>, WsError> {
        let key = (cell.to_owned(), run_id.to_owned());
        if let Some(b) = self.ws.wal().object_bytes(&key, path.as_str()).await? {
            return Ok(b.as_ref().clone());
        }
        let base = self.ws.tree().run_dir(cell, run_id);
        let rel = path.as_str().to_owned();
        match self.ws.blocking(move |tree| tree.read(&base, &rel)).await? {
            Read::File(b) => Ok(b),
            Read::Dir => Err(WsError::invalid_request(format!("{path} is a folder"))),
            Read::Absent => Err(WsError::not_found(format!("{path} does not exist"))),
        }
    }

    async fn execute_call(&self, req: pb::ExecuteRequest) -> Result<pb::ExecuteResponse, WsError> {
        let started = Instant::now();
        let ctx = req
            .context
            .ok_or_else(|| WsError::invalid_request("context is required"))?;
        let invocation = req
            .invocation
            .ok_or_else(|| WsError::invalid_request("invocation is required"))?;
        let tool = ToolId::parse(&invocation.tool_id).map_err(|e| {
            WsError::status(
                "workspace.unknown_tool",
                tonic::Code::InvalidArgument,
                e.to_string(),
            )
        })?;
        if !tool.is_builtin(tool.native()) {
            return Err(WsError::status(
                "workspace.unknown_tool",
                tonic::Code::InvalidArgument,
                format!("{} is not a builtin tool", invocation.tool_id),
            ));
        }
        let (cell, run) = run_key(&ctx.cell_id, &ctx.run_id)?;
        valid_id("invocation id", &ctx.invocation_id)?;
        let call = CallContext {
            cell: cell.clone(),
            run_id: run.clone(),
            invocation_id: ctx.invocation_id.clone(),
            epoch: ctx.epoch,
            guard: PathGuard {
                allow: ctx.allow_paths.clone(),
                deny: ctx.deny_paths.clone(),
            },
        };
        let span = tracing::info_span!("execute_tool", otel.name = %format!("execute_tool {}", tool.native()), gen_ai.tool.name = %tool.native(), gen_ai.tool.call.id = %invocation.call_id, run.id = %run, invocation.id = %ctx.invocation_id, cell.id = %cell);
        let outcome = tools::execute(&self.ws, call, tool.native(), &invocation.arguments_json)
            .instrument(span)
            .await;
        let result = convert::tool_result(&invocation.call_id, &invocation.tool_id, outcome)?;
        self.ws.metrics().tool_call(
            tool.native(),
            result.error_code.as_deref(),
            started.elapsed().as_secs_f64(),
        );
        Ok(pb::ExecuteResponse {
            result: Some(result),
            outcome: pb::ExecutionOutcome::Known as i32,
            elapsed_ms: started.elapsed().as_millis() as u64,
            raw_result_json: None,
            trace: Vec::new(),
        })
    }
}

fn done<T>(r: Result<T, WsError>) -> Rpc<T> {
    r.map(Response::new).map_err(|e| {
        if !e.is_recoverable()
            && matches!(
                e.to_status().code(),
                tonic::Code::Internal | tonic::Code::Unavailable
            )
        {
            tracing::error!(code = e.code(), error = %e, "workspace request failed");
        }
        e.to_status()
    })
}

type JournalStream = Pin<Box<dyn Stream<Item = Result<pb::FollowJournalResponse, Status>> + Send>>;

#[tonic::async_trait]
impl WorkspaceService for WorkspaceGrpc {
    async fn create_run_workspace(
        &self,
        r: Request<pb::CreateRunWorkspaceRequest>,
    ) -> Rpc<pb::CreateRunWorkspaceResponse> {
        done(self.create_run(r.into_inner()).await)
    }

    async fn get_run_workspace(
        &self,
        r: Request<pb::GetRunWorkspaceRequest>,
    ) -> Rpc<pb::GetRunWorkspaceResponse> {
        let r = r.into_inner();
        done(
            async {
                let (_, _, run) = self.run(&r.cell_id, &r.run_id).await?;
                let record = run.record.lock().await.0.clone();
                Ok(pb::GetRunWorkspaceResponse {
                    manifest: Some(convert::manifest(&record)),
                    finished: record.finished,
                })
            }
            .await,
        )
    }

    async fn open_invocation_workspace(
        &self,
        r: Request<pb::OpenInvocationWorkspaceRequest>,
    ) -> Rpc<pb::OpenInvocationWorkspaceResponse> {
        let r = r.into_inner();
        done(
            async {
                let (cell, run_id, run) = self.run(&r.cell_id, &r.run_id).await?;
                valid_id("invocation id", &r.invocation_id)?;
                let record = self.ws.runs().check_epoch(&run, r.epoch, false).await?;
                let roots = r.roots.unwrap_or_default();
                let roots = Roots::narrowed(&roots.visible, &roots.writable, &record.roots)?;
                let skills = r
                    .skills
                    .map(|s| SkillAccess {
                        visible: s.visible,
                        deny: s.deny,
                        max_read_chars_per_call: if s.max_read_chars_per_call == 0 {
                            SkillAccess::default().max_read_chars_per_call
                        } else {
                            s.max_read_chars_per_call
                        },
                        max_read_chars_per_run: if s.max_read_chars_per_run == 0 {
                            SkillAccess::default().max_read_chars_per_run
                        } else {
                            s.max_read_chars_per_run
                        },
                    })
                    .unwrap_or_default();
                self.ws
                    .runs()
                    .open_invocation(
                        &run,
                        &cell,
                        &run_id,
                        &r.invocation_id,
                        InvocationRecord {
                            roots: roots.clone(),
                            skills,
                            closed: false,
                        },
                    )
                    .await?;
                Ok(pb::OpenInvocationWorkspaceResponse {
                    roots: Some(pb::WorkspaceRoots {
                        visible: roots.visible.iter().map(|v| format!("{v}/")).collect(),
                        writable: roots.writable.iter().map(|v| format!("{v}/")).collect(),
                    }),
                })
            }
            .await,
        )
    }

    async fn close_invocation_workspace(
        &self,
        r: Request<pb::CloseInvocationWorkspaceRequest>,
    ) -> Rpc<pb::CloseInvocationWorkspaceResponse> {
        let r = r.into_inner();
        done(
            async {
                let (cell, run_id, run) = self.run(&r.cell_id, &r.run_id).await?;
                valid_id("invocation id", &r.invocation_id)?;
                self.ws.runs().check_epoch(&run, r.epoch, true).await?;
                self.ws
                    .runs()
                    .close_invocation(&run, &cell, &run_id, &r.invocation_id)
                    .await?;
                Ok(pb::CloseInvocationWorkspaceResponse {})
            }
            .await,
        )
    }

    async fn put_audit_object(
        &self,
        r: Request<pb::PutAuditObjectRequest>,
    ) -> Rpc<pb::PutAuditObjectResponse> {
        let r = r.into_inner();
        done(
            async {
                let (cell, run_id, run) = self.run(&r.cell_id, &r.run_id).await?;
                let path = audit_path(&r.path)?;
                if r.content.len() > self.ws.limits().max_audit_bytes {
                    return Err(WsError::invalid_request(format!(
                        "object is {} bytes, over the limit of {}",
                        r.content.len(),
                        self.ws.limits().max_audit_bytes
                    )));
                }
                self.ws.runs().check_epoch(&run, r.epoch, false).await?;
                let sha = sha256_hex(&r.content);
                let size = r.content.len() as u64;
                let created = self
                    .ws
                    .wal()
                    .put_object(
                        &(cell, run_id),
                        path.as_str(),
                        r.content,
                        r.sync,
                        r.allow_identical,
                    )
                    .await?;
                Ok(pb::PutAuditObjectResponse {
                    sha256: sha,
                    size_bytes: size,
                    created,
                })
            }
            .await,
        )
    }

    async fn get_object(&self, r: Request<pb::GetObjectRequest>) -> Rpc<pb::GetObjectResponse> {
        let r = r.into_inner();
        done(
            async {
                let (cell, run_id, _) = self.run(&r.cell_id, &r.run_id).await?;
                let path = storage_path(&r.path)?;
                let bytes = self.read_object(&cell, &run_id, &path).await?;
                Ok(pb::GetObjectResponse {
                    sha256: sha256_hex(&bytes),
                    content: bytes,
                    content_type: convert::content_type(path.as_str()).to_owned(),
                })
            }
            .await,
        )
    }

    async fn list_objects(
        &self,
        r: Request<pb::ListObjectsRequest>,
    ) -> Rpc<pb::ListObjectsResponse> {
        done(self.list_objects(r.into_inner()).await)
    }

    async fn read_file(&self, r: Request<pb::ReadFileRequest>) -> Rpc<pb::ReadFileResponse> {
        let r = r.into_inner();
        done(
            async {
                let (cell, run_id, _) = self.run(&r.cell_id, &r.run_id).await?;
                let path = storage_path(&r.path)?;
                let bytes = self.read_object(&cell, &run_id, &path).await?;
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
                        start_line: r.start_line.map(u64::from),
                        line_count: r.line_count.map(u64::from),
                        max_chars: self.ws.limits().max_read_chars,
                        max_line_chars: self.ws.limits().max_line_chars,
                    },
                )
                .map_err(|e| {
                    WsError::status(
                        "workspace.invalid_range",
                        tonic::Code::OutOfRange,
                        format!("{path}: {e}"),
                    )
                })?;
                let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
                Ok(pb::ReadFileResponse {
                    content: w.content.clone(),
                    start_line: clamp(w.start_line),
                    end_line: clamp(w.end_line),
                    total_lines: clamp(w.total_lines),
                    next_start_line: w.next_start_line.map(clamp),
                    sha256: sha256_hex(&bytes),
                })
            }
            .await,
        )
    }

    async fn append_journal(
        &self,
        r: Request<pb::AppendJournalRequest>,
    ) -> Rpc<pb::AppendJournalResponse> {
        done(self.append_one(r.into_inner()).await)
    }

    async fn append_journals(
        &self,
        r: Request<pb::AppendJournalsRequest>,
    ) -> Rpc<pb::AppendJournalsResponse> {
        let appends = r.into_inner().appends;
        if appends.len() > MAX_BATCH_APPENDS {
            return done(Err(WsError::invalid_request(format!(
                "a request carries {} appends, more than {MAX_BATCH_APPENDS}",
                appends.len()
            ))));
        }
        let mut runs = HashSet::with_capacity(appends.len());
        for a in &appends {
            let cell = if a.cell_id.is_empty() {
                DEFAULT_CELL
            } else {
                a.cell_id.as_str()
            };
            if !runs.insert((cell, a.run_id.as_str())) {
                return done(Err(WsError::invalid_request(format!(
                    "run {} has more than one append in the request",
                    a.run_id
                ))));
            }
        }
        // Polled together, the appends reach the log together: their jobs share group commits.
        let results =
            futures::future::join_all(appends.into_iter().map(|a| self.append_one(a))).await;
        let outcomes = results
            .into_iter()
            .map(|r| match done(r) {
                Ok(response) => pb::AppendJournalOutcome {
                    last_seq: response.into_inner().last_seq,
                    code: 0,
                    message: String::new(),
                },
                Err(status) => pb::AppendJournalOutcome {
                    last_seq: 0,
                    code: status.code() as i32,
                    message: status.message().to_owned(),
                },
            })
            .collect();
        Ok(Response::new(pb::AppendJournalsResponse { outcomes }))
    }

    async fn read_journal(
        &self,
        r: Request<pb::ReadJournalRequest>,
    ) -> Rpc<pb::ReadJournalResponse> {
        let r = r.into_inner();
        done(
            async {
                let (cell, run_id, _) = self.run(&r.cell_id, &r.run_id).await?;
                let limit = match r.page_size {
                    0 => 500,
                    n => (n as usize).min(5000),
                };
                let page = self
                    .ws
                    .wal()
                    .journal(&(cell, run_id))
                    .await?
                    .read(r.from_seq, limit)
                    .await?;
                Ok(pb::ReadJournalResponse {
                    records: page.records,
                    next_seq: page.next_seq,
                    at_end: page.at_end,
                })
            }
            .await,
        )
    }

    type FollowJournalStream = JournalStream;

    async fn follow_journal(
        &self,
        r: Request<pb::FollowJournalRequest>,
    ) -> Rpc<Self::FollowJournalStream> {
        let r = r.into_inner();
        let journal = match self.run(&r.cell_id, &r.run_id).await {
            Ok((cell, run_id, _)) => self
                .ws
                .wal()
                .journal(&(cell, run_id))
                .await
                .map_err(|e| e.to_status())?,
            Err(e) => return Err(e.to_status()),
        };
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let mut watch = journal.subscribe();
        let mut next = r.from_seq.max(1);
        tokio::spawn(async move {
            loop {
                let page = match journal.read(next, 500).await {
                    Ok(page) => page,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_status())).await;
                        return;
                    }
                };
                next = page.next_seq;
                let (at_end, sealed) = (page.at_end, page.sealed);
                for record in page.records {
                    if tx
                        .send(Ok(pb::FollowJournalResponse {
                            record: Some(record),
                        }))
                        .await
                        .is_err()
                    {
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
        Ok(Response::new(
            Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)) as JournalStream,
        ))
    }

    async fn append_chat_message(
        &self,
        r: Request<pb::AppendChatMessageRequest>,
    ) -> Rpc<pb::AppendChatMessageResponse> {
        let r = r.into_inner();
        done(
            async {
                let cell = cell_of(&r.cell_id)?;
                valid_id("chat id", &r.chat_id)?;
                let role = convert::role_to_str(r.role)
                    .ok_or_else(|| WsError::invalid_request("role is required"))?;
                let metadata = match &r.metadata_json {
                    Some(text) => {
                        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
                            WsError::invalid_request(format!("metadata_json is not JSON: {e}"))
                        })?;
                        if !v.is_object() {
                            return Err(WsError::invalid_request(
                                "metadata_json must be a JSON object",
                            ));
                        }
                        Some(v)
                    }
                    None => None,
                };
                let message = StoredMessage {
                    message_id: new_message_id(),
                    role: role.to_owned(),
                    name: r.name,
                    content: r.content,
                    run_id: String::new(),
                    metadata,
                    created_at_unix_ms: 0,
                    updated_at_unix_ms: 0,
                };
                let (index, message) = self
                    .ws
                    .chats()
                    .append(&cell, &r.chat_id, message, r.expected_index)
                    .await?;
                Ok(pb::AppendChatMessageResponse {
                    message: Some(convert::message(index, &message)),
                })
            }
            .await,
        )
    }

    async fn commit_run_message(
        &self,
        r: Request<pb::CommitRunMessageRequest>,
    ) -> Rpc<pb::CommitRunMessageResponse> {
        done(self.commit(r.into_inner()).await)
    }

    async fn list_chat_messages(
        &self,
        r: Request<pb::ListChatMessagesRequest>,
    ) -> Rpc<pb::ListChatMessagesResponse> {
        let r = r.into_inner();
        done(
            async {
                let cell = cell_of(&r.cell_id)?;
                valid_id("chat id", &r.chat_id)?;
                let start: usize = if r.page_token.is_empty() {
                    0
                } else {
                    r.page_token
                        .parse()
                        .map_err(|_| WsError::invalid_request("bad page_token"))?
                };
                let page = match r.page_size {
                    0 => 100,
                    n => (n as usize).min(1000),
                };
                let (messages, _) = self.ws.chats().load(&cell, &r.chat_id).await?;
                let end = (start + page).min(messages.len());
                let out = messages
                    .get(start..end)
                    .unwrap_or_default()
                    .iter()
                    .enumerate()
                    .map(|(i, m)| convert::message((start + i) as u64, m))
                    .collect();
                Ok(pb::ListChatMessagesResponse {
                    messages: out,
                    next_page_token: if end < messages.len() {
                        end.to_string()
                    } else {
                        String::new()
                    },
                })
            }
            .await,
        )
    }

    async fn import_skill(
        &self,
        r: Request<pb::ImportSkillRequest>,
    ) -> Rpc<pb::ImportSkillResponse> {
        let r = r.into_inner();
        done(
            async {
                let cell = cell_of(&r.cell_id)?;
                let (skill, warnings) = self
                    .ws
                    .skills()
                    .import(&cell, &r.source_path, &r.name, r.replace)
                    .await?;
                Ok(pb::ImportSkillResponse {
                    skill: Some(skill_proto(&skill)),
                    warnings: warnings
                        .into_iter()
                        .map(|w| pb::Diagnostic {
                            code: w.code.to_owned(),
                            message: w.message,
                            subject: w.subject,
                        })
                        .collect(),
                })
            }
            .await,
        )
    }

    async fn list_skills(&self, r: Request<pb::ListSkillsRequest>) -> Rpc<pb::ListSkillsResponse> {
        let r = r.into_inner();
        done(
            async {
                let cell = cell_of(&r.cell_id)?;
                let page = match r.page_size {
                    0 => 100,
                    n => (n as usize).min(1000),
                };
                let skills: Vec<_> = self
                    .ws
                    .skills()
                    .list(&cell)
                    .await?
                    .into_iter()
                    .filter(|s| r.page_token.is_empty() || s.name > r.page_token)
                    .collect();
                let next = if skills.len() > page {
                    skills
                        .get(page - 1)
                        .map(|s| s.name.clone())
                        .unwrap_or_default()
                } else {
                    String::new()
                };
                Ok(pb::ListSkillsResponse {
                    skills: skills.iter().take(page).map(skill_proto).collect(),
                    next_page_token: next,
                })
            }
            .await,
        )
    }

    async fn delete_skill(
        &self,
        r: Request<pb::DeleteSkillRequest>,
    ) -> Rpc<pb::DeleteSkillResponse> {
        let r = r.into_inner();
        done(
            async {
                let cell = cell_of(&r.cell_id)?;
                if !self.ws.skills().delete(&cell, &r.name).await? {
                    return Err(WsError::not_found(format!("no skill {}", r.name)));
                }
                Ok(pb::DeleteSkillResponse {})
            }
            .await,
        )
    }

    async fn put_world_info_activation(
        &self,
        r: Request<pb::PutWorldInfoActivationRequest>,
    ) -> Rpc<pb::PutWorldInfoActivationResponse> {
        let r = r.into_inner();
        done(
            async {
                let (cell, run_id, run) = self.run(&r.cell_id, &r.run_id).await?;
                if r.activation_json.len() > self.ws.limits().max_worldinfo_bytes {
                    return Err(WsError::invalid_request(
                        "activation_json is over the size limit",
                    ));
                }
                let activation = worldinfo::normalize(&r.activation_json)?;
                self.ws.runs().check_epoch(&run, r.epoch, false).await?;
                let bytes = serde_json::to_vec_pretty(&activation)
                    .map_err(|e| WsError::io(e.to_string()))?;
                let sha = sha256_hex(&bytes);
                self.ws
                    .wal()
                    .put_object(
                        &(cell, run_id),
                        worldinfo::ACTIVATION_PATH,
                        bytes,
                        true,
                        true,
                    )
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
                Ok(pb::PutWorldInfoActivationResponse {
                    sha256: sha,
                    entry_count: activation.entries.len() as u32,
                })
            }
            .await,
        )
    }

    async fn promote_persist(
        &self,
        r: Request<pb::PromotePersistRequest>,
    ) -> Rpc<pb::PromotePersistResponse> {
        let r = r.into_inner();
        done(
            async {
                let (cell, run_id, run) = self.run(&r.cell_id, &r.run_id).await?;
                let record = self.ws.runs().check_epoch(&run, r.epoch, true).await?;
                if let Some(version) = &record.persist_promoted {
                    return Ok(pb::PromotePersistResponse {
                        persist_version: version.clone(),
                        changed_paths: Vec::new(),
                    });
                }
                if record.finished && record.status != pb::RunStatus::Completed as i32 {
                    return Err(WsError::status(
                        "workspace.run_finished",
                        tonic::Code::FailedPrecondition,
                        "only a successful run promotes persist/",
                    ));
                }
                let (version, changed) = persist::promote(
                    &self.ws,
                    &cell,
                    &record.chat_id,
                    &run_id,
                    &record.persist_base_version,
                )
                .await?;
                let v = version.clone();
                self.ws
                    .runs()
                    .update(&run, |rec| {
                        rec.persist_promoted = Some(v.clone());
                        Ok(true)
                    })
                    .await?;
                Ok(pb::PromotePersistResponse {
                    persist_version: version,
                    changed_paths: changed,
                })
            }
            .await,
        )
    }

    async fn finish_run_workspace(
        &self,
        r: Request<pb::FinishRunWorkspaceRequest>,
    ) -> Rpc<pb::FinishRunWorkspaceResponse> {
        let r = r.into_inner();
        done(
            async {
                let (cell, run_id, run) = self.run(&r.cell_id, &r.run_id).await?;
                self.ws.runs().check_epoch(&run, r.epoch, true).await?;
                self.ws
                    .runs()
                    .update(&run, |rec| {
                        let change = !rec.finished;
                        rec.finished = true;
                        rec.status = r.status;
                        Ok(change)
                    })
                    .await?;
                self.ws.wal().seal(&(cell, run_id)).await?;
                run.invocations
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clear();
                Ok(pb::FinishRunWorkspaceResponse {})
            }
            .await,
        )
    }
}

fn skill_proto(s: &crate::skills::SkillPackage) -> pb::Skill {
    pb::Skill {
        name: s.name.clone(),
        description: s.description.clone(),
        file_count: s.files.len() as u32,
        total_bytes: s.total_bytes(),
        skipped_file_count: s.skipped.len() as u32,
        version: s.version.clone(),
        imported_at_unix_ms: s.imported_at_unix_ms,
    }
}

#[tonic::async_trait]
impl ToolExecutor for WorkspaceGrpc {
    async fn execute(&self, r: Request<pb::ExecuteRequest>) -> Rpc<pb::ExecuteResponse> {
        done(self.execute_call(r.into_inner()).await)
    }
}
