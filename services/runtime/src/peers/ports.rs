//! The ports over gRPC: each trait of `context::ports` as requests to the peers, and the runtime
//! assembled from its configuration with them.

use std::sync::Arc;

use async_trait::async_trait;
use toolplane_proto::v1 as pb;
use toolplane_store::StoreOptions;

use super::Peers;
use crate::config::RuntimeConfig;
use crate::context::ports::{
    Catalog, CommittedMessage, CreatedWorkspace, ExecuteCall, Executed, InvocationWorkspace,
    JournalPage, ListedTool, NewRunWorkspace, PortError, ProfilePage, Promoted, RecordStream,
    ResolvedProfile, RunScope, StoredProfile, ToolHost, ToolHosts, Workspace,
};
use crate::context::{Ports, Runtime};
use crate::convert::peers::{
    executed, invocation_pb, journal_group_pb, listed_tool, port_error, stored_profile,
    stored_record, tool_context_pb,
};
use crate::error::RuntimeError;
use crate::state::{AuditObject, JournalAppend, RunStatus};

impl Runtime {
    /// Opens the runtime's store, connects (lazily) to its peers and fails every run a previous
    /// process left unfinished.
    pub async fn open(cfg: RuntimeConfig) -> Result<Arc<Runtime>, RuntimeError> {
        let store = cfg
            .store_config()
            .open(StoreOptions::default())
            .await
            .map_err(|e| RuntimeError::dependency(format!("opening the store: {e}")))?;
        let peers = Arc::new(Peers::new(&cfg)?);
        let models = Arc::new(super::models::HttpModels::new(cfg.egress.clone()));
        let ports = Ports {
            catalog: peers.clone(),
            workspace: peers.clone(),
            tools: peers,
            models: models.clone(),
        };
        let runtime = Runtime::assemble(cfg, ports, store).await;
        models.record_into(runtime.metrics.clone());
        Ok(runtime)
    }
}

fn err(status: tonic::Status) -> PortError {
    port_error(&status)
}

/// `peers.workspace().$method($request).await`, sent again while the workspace is unavailable
/// ([`super::again`]): only for requests whose repetition changes nothing.
macro_rules! again {
    ($peers:expr, $method:ident, $request:expr) => {{
        let request = $request;
        super::again::again(stringify!($method), || {
            let mut client = $peers.workspace();
            let request = request.clone();
            async move { client.$method(request).await }
        })
        .await
    }};
}

#[async_trait]
impl Catalog for Peers {
    async fn resolve_profile(
        &self,
        cell_id: &str,
        profile_id: &str,
        actor_id: &str,
    ) -> Result<ResolvedProfile, PortError> {
        let r = self
            .profiles()
            .resolve_profile(pb::ResolveProfileRequest {
                cell_id: cell_id.to_owned(),
                profile_id: profile_id.to_owned(),
                actor_id: actor_id.to_owned(),
            })
            .await
            .map_err(err)?
            .into_inner();
        // A registered host's endpoint headers (e.g. `authorization`) go with its calls; they stay
        // in this adapter, never in the snapshot, the journal or the audit.
        for listing in &r.tools {
            if let Some((x, e)) = listing
                .external
                .as_ref()
                .and_then(|x| Some((x, x.endpoint.as_ref()?)))
            {
                self.set_external_headers(&x.host_id, &e.url, &e.headers);
            }
        }
        Ok(ResolvedProfile {
            profile: stored_profile(r.profile),
            platform_policy_json: r.platform_policy.map(|d| d.policy_json),
            user_policy_json: r.user_policy.map(|d| d.policy_json),
            tools: r.tools.into_iter().map(listed_tool).collect(),
        })
    }

    async fn get_profile(
        &self,
        cell_id: &str,
        profile_id: &str,
    ) -> Result<StoredProfile, PortError> {
        let r = self
            .profiles()
            .get_profile(pb::GetProfileRequest {
                cell_id: cell_id.to_owned(),
                profile_id: profile_id.to_owned(),
            })
            .await
            .map_err(err)?
            .into_inner();
        Ok(stored_profile(r.profile))
    }

    async fn list_profiles(
        &self,
        cell_id: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<ProfilePage, PortError> {
        let r = self
            .profiles()
            .list_profiles(pb::ListProfilesRequest {
                cell_id: cell_id.to_owned(),
                page_size,
                page_token: page_token.to_owned(),
            })
            .await
            .map_err(err)?
            .into_inner();
        Ok(ProfilePage {
            profiles: r
                .profiles
                .into_iter()
                .map(|p| stored_profile(Some(p)))
                .collect(),
            next_page_token: r.next_page_token,
        })
    }

    async fn mcp_server_tools(
        &self,
        cell_id: &str,
        server_id: &str,
    ) -> Result<Vec<ListedTool>, PortError> {
        let mut tools = Vec::new();
        let mut page_token = String::new();
        loop {
            let r = self
                .tool_catalog()
                .list_tools(pb::ListToolsRequest {
                    cell_id: cell_id.to_owned(),
                    include_unusable: true,
                    provider: format!("mcp/{server_id}"),
                    page_size: 1000,
                    page_token,
                    ..Default::default()
                })
                .await
                .map_err(err)?
                .into_inner();
            tools.extend(r.tools.into_iter().map(listed_tool));
            if r.next_page_token.is_empty() {
                return Ok(tools);
            }
            page_token = r.next_page_token;
        }
    }
}

#[async_trait]
impl Workspace for Peers {
    async fn create_run_workspace(
        &self,
        ws: NewRunWorkspace,
    ) -> Result<CreatedWorkspace, PortError> {
        let manifest = pb::RunWorkspaceManifest {
            cell_id: ws.cell_id,
            run_id: ws.run_id,
            actor_id: ws.actor_id,
            chat: Some(pb::ChatBinding {
                chat_id: ws.chat_id,
                message_id: ws.message_id,
            }),
            mode: if ws.background {
                pb::RunMode::Background as i32
            } else {
                pb::RunMode::Foreground as i32
            },
            roots: Some(pb::WorkspaceRoots {
                visible: ws.visible_roots,
                writable: ws.writable_roots,
            }),
            persist_base_version: String::new(),
            message_artifact_root: String::new(),
            created_at_unix_ms: ws.created_ms,
            epoch: 1,
            status: pb::RunStatus::Created as i32,
        };
        let created = again!(
            self,
            create_run_workspace,
            pb::CreateRunWorkspaceRequest {
                manifest: Some(manifest),
                epoch: 1,
            }
        )
        .map_err(err)?
        .into_inner()
        .manifest
        .unwrap_or_default();
        let roots = created.roots.unwrap_or_default();
        Ok(CreatedWorkspace {
            visible_roots: roots.visible,
            writable_roots: roots.writable,
            persist_base_version: created.persist_base_version,
        })
    }

    async fn put_world_info_activation(
        &self,
        run: &RunScope,
        activation_json: String,
    ) -> Result<(), PortError> {
        again!(
            self,
            put_world_info_activation,
            pb::PutWorldInfoActivationRequest {
                run_id: run.run_id.clone(),
                activation_json,
                epoch: run.epoch,
                cell_id: run.cell_id.clone(),
            }
        )
        .map_err(err)?;
        Ok(())
    }

    async fn open_invocation_workspace(&self, ws: InvocationWorkspace) -> Result<(), PortError> {
        again!(
            self,
            open_invocation_workspace,
            pb::OpenInvocationWorkspaceRequest {
                run_id: ws.run.run_id,
                invocation_id: ws.invocation_id,
                roots: Some(pb::WorkspaceRoots {
                    visible: ws.visible_roots,
                    writable: ws.writable_roots,
                }),
                epoch: ws.run.epoch,
                cell_id: ws.run.cell_id,
                skills: Some(pb::SkillAccess {
                    visible: ws.skills.visible,
                    deny: ws.skills.deny,
                    max_read_chars_per_call: ws.skills.max_read_chars_per_call,
                    max_read_chars_per_run: ws.skills.max_read_chars_per_run,
                }),
            }
        )
        .map_err(err)?;
        Ok(())
    }

    async fn close_invocation_workspace(
        &self,
        run: &RunScope,
        invocation_id: &str,
    ) -> Result<(), PortError> {
        again!(
            self,
            close_invocation_workspace,
            pb::CloseInvocationWorkspaceRequest {
                run_id: run.run_id.clone(),
                invocation_id: invocation_id.to_owned(),
                epoch: run.epoch,
                cell_id: run.cell_id.clone(),
            }
        )
        .map_err(err)?;
        Ok(())
    }

    async fn promote_persist(&self, run: &RunScope) -> Result<Promoted, PortError> {
        let r = again!(
            self,
            promote_persist,
            pb::PromotePersistRequest {
                run_id: run.run_id.clone(),
                epoch: run.epoch,
                cell_id: run.cell_id.clone(),
            }
        )
        .map_err(err)?
        .into_inner();
        Ok(Promoted {
            persist_version: r.persist_version,
            changed_paths: r.changed_paths,
        })
    }

    async fn finish_run_workspace(
        &self,
        run: &RunScope,
        status: RunStatus,
    ) -> Result<(), PortError> {
        let status = match status {
            RunStatus::Completed => pb::RunStatus::Completed,
            RunStatus::PartialSuccess => pb::RunStatus::PartialSuccess,
            RunStatus::Cancelled => pb::RunStatus::Cancelled,
            _ => pb::RunStatus::Failed,
        };
        again!(
            self,
            finish_run_workspace,
            pb::FinishRunWorkspaceRequest {
                run_id: run.run_id.clone(),
                status: status as i32,
                epoch: run.epoch,
                cell_id: run.cell_id.clone(),
            }
        )
        .map_err(err)?;
        Ok(())
    }

    async fn commit_run_message(
        &self,
        run: &RunScope,
        source_path: &str,
        append: bool,
    ) -> Result<CommittedMessage, PortError> {
        let request = pb::CommitRunMessageRequest {
            run_id: run.run_id.clone(),
            source_path: source_path.to_owned(),
            mode: if append {
                pb::CommitMode::Append as i32
            } else {
                pb::CommitMode::Replace as i32
            },
            expected_source_sha256: None,
            epoch: run.epoch,
            cell_id: run.cell_id.clone(),
        };
        // Replacing the message with the same text twice is the same as once; appending is not.
        let r = if append {
            self.workspace().commit_run_message(request).await
        } else {
            again!(self, commit_run_message, request)
        }
        .map_err(err)?
        .into_inner();
        let m = r.message.unwrap_or_default();
        Ok(CommittedMessage {
            message_id: m.message_id,
            content: m.content,
        })
    }

    async fn append_journal(&self, group: JournalAppend) -> Result<(), PortError> {
        self.send_journal(journal_group_pb(group))
            .await
            .map_err(err)
    }

    async fn put_audit_object(&self, run: &RunScope, object: AuditObject) -> Result<(), PortError> {
        let mut request = pb::PutAuditObjectRequest {
            run_id: run.run_id.clone(),
            path: object.path,
            content: object.content,
            content_type: object.content_type.to_owned(),
            epoch: run.epoch,
            allow_identical: false,
            sync: false,
            cell_id: run.cell_id.clone(),
        };
        super::again::again("put_audit_object", || {
            let mut client = self.workspace();
            let attempt = request.clone();
            // A repetition finds the object the lost attempt may have stored: the same bytes are
            // then the same object.
            request.allow_identical = true;
            async move { client.put_audit_object(attempt).await }
        })
        .await
        .map_err(err)?;
        Ok(())
    }

    async fn acquire_run_lease(
        &self,
        run: &RunScope,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<u64, PortError> {
        let r = again!(
            self,
            acquire_run_lease,
            pb::AcquireRunLeaseRequest {
                run_id: run.run_id.clone(),
                holder: holder.to_owned(),
                ttl_ms,
                cell_id: run.cell_id.clone(),
            }
        )
        .map_err(err)?;
        Ok(r.into_inner().lease.map_or(0, |l| l.epoch))
    }

    async fn renew_run_lease(
        &self,
        run: &RunScope,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<(), PortError> {
        again!(
            self,
            renew_run_lease,
            pb::RenewRunLeaseRequest {
                run_id: run.run_id.clone(),
                holder: holder.to_owned(),
                epoch: run.epoch,
                ttl_ms,
                cell_id: run.cell_id.clone(),
            }
        )
        .map_err(err)?;
        Ok(())
    }

    async fn release_run_lease(&self, run: &RunScope, holder: &str) -> Result<(), PortError> {
        again!(
            self,
            release_run_lease,
            pb::ReleaseRunLeaseRequest {
                run_id: run.run_id.clone(),
                holder: holder.to_owned(),
                epoch: run.epoch,
                cell_id: run.cell_id.clone(),
            }
        )
        .map_err(err)?;
        Ok(())
    }

    async fn get_object(&self, run: &RunScope, path: &str) -> Result<Option<Vec<u8>>, PortError> {
        let got = again!(
            self,
            get_object,
            pb::GetObjectRequest {
                run_id: run.run_id.clone(),
                path: path.to_owned(),
                cell_id: run.cell_id.clone(),
            }
        );
        match got {
            Ok(r) => Ok(Some(r.into_inner().content)),
            Err(status) if status.code() == tonic::Code::NotFound => Ok(None),
            Err(status) => Err(err(status)),
        }
    }

    async fn read_journal(
        &self,
        run_id: &str,
        cell_id: &str,
        from_seq: u64,
        page_size: u32,
    ) -> Result<JournalPage, PortError> {
        let r = again!(
            self,
            read_journal,
            pb::ReadJournalRequest {
                run_id: run_id.to_owned(),
                from_seq,
                page_size,
                cell_id: cell_id.to_owned(),
            }
        )
        .map_err(err)?
        .into_inner();
        Ok(JournalPage {
            records: r.records.into_iter().map(stored_record).collect(),
            next_seq: r.next_seq,
            at_end: r.at_end,
        })
    }

    async fn follow_journal(
        &self,
        run_id: &str,
        cell_id: &str,
        from_seq: u64,
    ) -> Result<RecordStream, PortError> {
        let inner = self
            .workspace()
            .follow_journal(pb::FollowJournalRequest {
                run_id: run_id.to_owned(),
                from_seq,
                cell_id: cell_id.to_owned(),
            })
            .await
            .map_err(err)?
            .into_inner();
        Ok(Box::pin(futures::StreamExt::map(inner, |item| {
            item.map(|r| r.record.map(stored_record)).map_err(err)
        })))
    }
}

#[async_trait]
impl ToolHosts for Peers {
    async fn execute(
        &self,
        host: ToolHost<'_>,
        call: ExecuteCall<'_>,
    ) -> Result<Result<Executed, PortError>, RuntimeError> {
        let mut client = match host {
            ToolHost::Workspace => self.workspace_executor(),
            ToolHost::McpProxy => self.mcp_executor(),
            ToolHost::External { endpoint, .. } => self.external_executor(endpoint)?,
        };
        let mut req = tonic::Request::new(pb::ExecuteRequest {
            context: Some(tool_context_pb(call.context)),
            invocation: Some(invocation_pb(call.call)),
            timeout_ms: call.tool_timeout_ms,
            trace: false,
        });
        if let ToolHost::External { host_id, endpoint } = host {
            self.add_external_headers(host_id, endpoint, req.metadata_mut());
        }
        req.set_timeout(call.request_timeout);
        Ok(match client.execute(req).await {
            Ok(resp) => Ok(executed(call.call, resp.into_inner())),
            Err(status) => Err(err(status)),
        })
    }
}
