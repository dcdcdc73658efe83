//! The gRPC services: `toolplane.v1.WorkspaceService` (storage RPCs for the runtime and UIs) and
//! `toolplane.v1.ToolExecutor` (the workspace, chat, skill and world-info tools, in
//! [`executor`]). Thin handlers:
//! each validates its request's ids, converts it (through [`convert`]) into the engine's values,
//! calls the engine ([`crate::engine`]) and converts the answer back; errors map to statuses in
//! one place ([`done`]). Must never decide a rule of the engine here, answer a recoverable tool
//! error with a status, nor a system failure with a tool result. Skill imports and deletions
//! leave an admin audit record ([`audit`]).

pub mod audit;
mod cells;
mod executor;
mod leases;
mod skills;

use std::{collections::HashSet, pin::Pin, sync::Arc};

use tokio_stream::{Stream, StreamExt, wrappers::ReceiverStream};
use tonic::{Request, Response, Status};
use toolplane_proto::v1::{self as pb, workspace_service_server::WorkspaceService};

use crate::{
    convert,
    engine::{
        Workspace,
        chats::{Commit, NewMessage},
        journal::Append,
        objects::{AuditPut, ObjectQuery},
        runs::NewRun,
    },
    error::WsError,
    paths::valid_id,
};

/// The default cell when a request leaves it empty.
pub const DEFAULT_CELL: &str = "default";

/// Most appends one `AppendJournals` request may carry.
pub const MAX_BATCH_APPENDS: usize = 256;

/// Both gRPC services over one engine.
#[derive(Debug, Clone)]
pub struct WorkspaceGrpc {
    ws: Arc<Workspace>,
    audit: Option<toolplane_auth::AdminAuditLog>,
}

impl WorkspaceGrpc {
    /// The services over `ws`, recording skill changes in the workspace's admin audit.
    pub fn new(ws: Arc<Workspace>) -> WorkspaceGrpc {
        let audit = Some(audit::admin_audit(&ws, None));
        WorkspaceGrpc { ws, audit }
    }

    /// The same services, recording in `audit` (`None`: no record).
    #[must_use]
    pub fn with_audit(mut self, audit: Option<toolplane_auth::AdminAuditLog>) -> WorkspaceGrpc {
        self.audit = audit;
        self
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

type Rpc<T> = Result<Response<T>, Status>;

/// The one mapping of an engine result to a gRPC answer; system failures are logged.
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

impl WorkspaceGrpc {
    /// One `AppendJournal`, on its own or as part of an `AppendJournals`.
    async fn append_one(
        &self,
        r: pb::AppendJournalRequest,
    ) -> Result<pb::AppendJournalResponse, WsError> {
        let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
        let append = Append {
            epoch: r.epoch,
            expected_seq: r.expected_seq,
            records: r.records,
            objects: r.objects.into_iter().map(|o| (o.path, o.content)).collect(),
        };
        let last_seq = self.ws.append_journal(&cell, &run, append).await?;
        Ok(pb::AppendJournalResponse { last_seq })
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
            .ok_or_else(|| WsError::invalid_request("manifest.chat is required"))?;
        valid_id("chat id", &chat.chat_id)?;
        if let Some(id) = &chat.message_id {
            valid_id("message id", id)?;
        }
        let roots = m.roots.unwrap_or_default();
        let record = self
            .ws
            .create_run(NewRun {
                cell,
                run,
                actor_id: m.actor_id,
                chat_id: chat.chat_id,
                message_id: chat.message_id,
                mode: convert::run_mode(m.mode),
                visible: roots.visible,
                writable: roots.writable,
                message_artifact_root: m.message_artifact_root,
                epoch: req.epoch,
            })
            .await?;
        Ok(pb::CreateRunWorkspaceResponse {
            manifest: Some(convert::manifest(&record)),
        })
    }

    async fn commit(
        &self,
        req: pb::CommitRunMessageRequest,
    ) -> Result<pb::CommitRunMessageResponse, WsError> {
        let (cell, run) = run_key(&req.cell_id, &req.run_id)?;
        let commit = Commit {
            epoch: req.epoch,
            source_path: req.source_path,
            expected_source_sha256: req.expected_source_sha256,
            append: req.mode == pb::CommitMode::Append as i32,
        };
        let c = self.ws.commit_run_message(&cell, &run, commit).await?;
        Ok(pb::CommitRunMessageResponse {
            message: Some(convert::message(c.index, &c.message)),
            source_sha256: c.source_sha256,
            created: c.created,
        })
    }
}

#[tonic::async_trait]
impl WorkspaceService for WorkspaceGrpc {
    async fn create_run_workspace(
        &self,
        r: Request<pb::CreateRunWorkspaceRequest>,
    ) -> Rpc<pb::CreateRunWorkspaceResponse> {
        done(self.create_run(cells::scoped(r)?).await)
    }

    async fn get_run_workspace(
        &self,
        r: Request<pb::GetRunWorkspaceRequest>,
    ) -> Rpc<pb::GetRunWorkspaceResponse> {
        let r = cells::scoped(r)?;
        done(
            async {
                let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
                let record = self.ws.run_record(&cell, &run).await?;
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
        let r = cells::scoped(r)?;
        done(
            async {
                let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
                self.ws.run(&cell, &run).await?;
                valid_id("invocation id", &r.invocation_id)?;
                let roots = r.roots.unwrap_or_default();
                let skills = convert::skill_access(r.skills);
                let roots = (roots.visible.as_slice(), roots.writable.as_slice());
                let roots = self
                    .ws
                    .open_invocation(&cell, &run, &r.invocation_id, r.epoch, roots, skills)
                    .await?;
                Ok(pb::OpenInvocationWorkspaceResponse {
                    roots: Some(convert::roots(&roots)),
                })
            }
            .await,
        )
    }

    async fn close_invocation_workspace(
        &self,
        r: Request<pb::CloseInvocationWorkspaceRequest>,
    ) -> Rpc<pb::CloseInvocationWorkspaceResponse> {
        let r = cells::scoped(r)?;
        done(
            async {
                let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
                self.ws.run(&cell, &run).await?;
                valid_id("invocation id", &r.invocation_id)?;
                self.ws
                    .close_invocation(&cell, &run, &r.invocation_id, r.epoch)
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
        let r = cells::scoped(r)?;
        done(
            async {
                let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
                let put = AuditPut {
                    path: r.path,
                    content: r.content,
                    sync: r.sync,
                    allow_identical: r.allow_identical,
                };
                let stored = self.ws.put_audit_object(&cell, &run, r.epoch, put).await?;
                Ok(pb::PutAuditObjectResponse {
                    sha256: stored.sha256,
                    size_bytes: stored.size_bytes,
                    created: stored.created,
                })
            }
            .await,
        )
    }

    async fn get_object(&self, r: Request<pb::GetObjectRequest>) -> Rpc<pb::GetObjectResponse> {
        let r = cells::scoped(r)?;
        done(
            async {
                let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
                let (path, bytes) = self.ws.read_object(&cell, &run, &r.path).await?;
                Ok(pb::GetObjectResponse {
                    sha256: crate::engine::sha256_hex(&bytes),
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
        let r = cells::scoped(r)?;
        done(
            async {
                let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
                let query = ObjectQuery {
                    prefix: r.prefix,
                    page_size: convert::page_size(r.page_size, 100, 1000),
                    page_token: convert::page_cursor("workspace.objects", &r.page_token)?,
                    include_hidden: r.include_hidden,
                };
                let page = self.ws.list_objects(&cell, &run, query).await?;
                Ok(pb::ListObjectsResponse {
                    objects: page.objects.into_iter().map(convert::object).collect(),
                    next_page_token: convert::page_token(
                        "workspace.objects",
                        &page.next_page_token,
                    ),
                })
            }
            .await,
        )
    }

    async fn read_file(&self, r: Request<pb::ReadFileRequest>) -> Rpc<pb::ReadFileResponse> {
        let r = cells::scoped(r)?;
        done(
            async {
                let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
                let (start, count) = (r.start_line.map(u64::from), r.line_count.map(u64::from));
                let (w, sha256) = self
                    .ws
                    .read_text(&cell, &run, &r.path, start, count)
                    .await?;
                let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
                Ok(pb::ReadFileResponse {
                    content: w.content,
                    start_line: clamp(w.start_line),
                    end_line: clamp(w.end_line),
                    total_lines: clamp(w.total_lines),
                    next_start_line: w.next_start_line.map(clamp),
                    sha256,
                })
            }
            .await,
        )
    }

    async fn append_journal(
        &self,
        r: Request<pb::AppendJournalRequest>,
    ) -> Rpc<pb::AppendJournalResponse> {
        done(self.append_one(cells::scoped(r)?).await)
    }

    async fn append_journals(
        &self,
        r: Request<pb::AppendJournalsRequest>,
    ) -> Rpc<pb::AppendJournalsResponse> {
        let appends = cells::scoped(r)?.appends;
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
        let r = cells::scoped(r)?;
        done(
            async {
                let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
                let limit = convert::page_size(r.page_size, 500, 5000);
                let page = self.ws.read_journal(&cell, &run, r.from_seq, limit).await?;
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
        let r = cells::scoped(r)?;
        let records = async {
            let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
            self.ws.follow_journal(&cell, &run, r.from_seq).await
        }
        .await
        .map_err(|e| e.to_status())?;
        let stream = ReceiverStream::new(records).map(|record| {
            record
                .map(|record| pb::FollowJournalResponse {
                    record: Some(record),
                })
                .map_err(|e| e.to_status())
        });
        Ok(Response::new(Box::pin(stream) as JournalStream))
    }

    async fn append_chat_message(
        &self,
        r: Request<pb::AppendChatMessageRequest>,
    ) -> Rpc<pb::AppendChatMessageResponse> {
        let r = cells::scoped(r)?;
        done(
            async {
                let cell = cell_of(&r.cell_id)?;
                valid_id("chat id", &r.chat_id)?;
                let role = convert::role_to_str(r.role)
                    .ok_or_else(|| WsError::invalid_request("role is required"))?;
                let new = NewMessage {
                    role,
                    name: r.name,
                    content: r.content,
                    metadata_json: r.metadata_json,
                };
                let (index, message) = self
                    .ws
                    .append_chat_message(&cell, &r.chat_id, new, r.expected_index)
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
        done(self.commit(cells::scoped(r)?).await)
    }

    async fn list_chat_messages(
        &self,
        r: Request<pb::ListChatMessagesRequest>,
    ) -> Rpc<pb::ListChatMessagesResponse> {
        let r = cells::scoped(r)?;
        done(
            async {
                let cell = cell_of(&r.cell_id)?;
                valid_id("chat id", &r.chat_id)?;
                let cursor = convert::page_cursor("workspace.chat_messages", &r.page_token)?;
                let start: usize = if cursor.is_empty() {
                    0
                } else {
                    cursor.parse().map_err(|_| {
                        WsError::status(
                            toolplane_proto::page_token::CODE,
                            tonic::Code::InvalidArgument,
                            "the page token was not issued by workspace.chat_messages",
                        )
                    })?
                };
                let page = convert::page_size(r.page_size, 100, 1000);
                let (messages, next) = self
                    .ws
                    .chat_messages(&cell, &r.chat_id, start, page)
                    .await?;
                Ok(pb::ListChatMessagesResponse {
                    messages: messages
                        .iter()
                        .map(|(i, m)| convert::message(*i, m))
                        .collect(),
                    next_page_token: next
                        .map(|n| convert::page_token("workspace.chat_messages", &n.to_string()))
                        .unwrap_or_default(),
                })
            }
            .await,
        )
    }

    async fn import_skill(
        &self,
        r: Request<pb::ImportSkillRequest>,
    ) -> Rpc<pb::ImportSkillResponse> {
        let caller = audit::caller_of(&r);
        done(skills::import(&self.ws, self.audit.as_ref(), &caller, cells::scoped(r)?).await)
    }

    async fn list_skills(&self, r: Request<pb::ListSkillsRequest>) -> Rpc<pb::ListSkillsResponse> {
        done(skills::list(&self.ws, cells::scoped(r)?).await)
    }

    async fn delete_skill(
        &self,
        r: Request<pb::DeleteSkillRequest>,
    ) -> Rpc<pb::DeleteSkillResponse> {
        let caller = audit::caller_of(&r);
        done(skills::delete(&self.ws, self.audit.as_ref(), &caller, cells::scoped(r)?).await)
    }

    async fn put_world_info_activation(
        &self,
        r: Request<pb::PutWorldInfoActivationRequest>,
    ) -> Rpc<pb::PutWorldInfoActivationResponse> {
        let r = cells::scoped(r)?;
        done(
            async {
                let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
                let (sha256, entries) = self
                    .ws
                    .put_world_info_activation(&cell, &run, r.epoch, &r.activation_json)
                    .await?;
                Ok(pb::PutWorldInfoActivationResponse {
                    sha256,
                    entry_count: entries as u32,
                })
            }
            .await,
        )
    }

    async fn promote_persist(
        &self,
        r: Request<pb::PromotePersistRequest>,
    ) -> Rpc<pb::PromotePersistResponse> {
        let r = cells::scoped(r)?;
        done(
            async {
                let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
                let promoted = self.ws.promote_persist(&cell, &run, r.epoch).await?;
                Ok(pb::PromotePersistResponse {
                    persist_version: promoted.persist_version,
                    changed_paths: promoted.changed_paths,
                })
            }
            .await,
        )
    }

    async fn finish_run_workspace(
        &self,
        r: Request<pb::FinishRunWorkspaceRequest>,
    ) -> Rpc<pb::FinishRunWorkspaceResponse> {
        let r = cells::scoped(r)?;
        done(
            async {
                let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
                self.ws.finish_run(&cell, &run, r.epoch, r.status).await?;
                Ok(pb::FinishRunWorkspaceResponse {})
            }
            .await,
        )
    }

    async fn acquire_run_lease(
        &self,
        r: Request<pb::AcquireRunLeaseRequest>,
    ) -> Rpc<pb::AcquireRunLeaseResponse> {
        done(leases::acquire(&self.ws, cells::scoped(r)?).await)
    }

    async fn renew_run_lease(
        &self,
        r: Request<pb::RenewRunLeaseRequest>,
    ) -> Rpc<pb::RenewRunLeaseResponse> {
        done(leases::renew(&self.ws, cells::scoped(r)?).await)
    }

    async fn release_run_lease(
        &self,
        r: Request<pb::ReleaseRunLeaseRequest>,
    ) -> Rpc<pb::ReleaseRunLeaseResponse> {
        done(leases::release(&self.ws, cells::scoped(r)?).await)
    }
}
