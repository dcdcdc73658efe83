//! Which cells a request message names: [`CellScoped`], implemented here, beside the messages,
//! for every request of the catalog, the workspace and the mcp-proxy that carries a cell
//! (docs/auth.md, "Cells"). A service replaces those cells by its caller's through
//! `toolplane_serve::cells::scoped`; this module only points at the fields.

use crate::v1 as pb;

/// A request message that names the cell it acts in, once or more.
pub trait CellScoped {
    /// Every cell the message names.
    fn cells(&mut self) -> Vec<&mut String>;
}

macro_rules! cell_field {
    ($($message:ty),* $(,)?) => {
        $(impl CellScoped for $message {
            fn cells(&mut self) -> Vec<&mut String> {
                vec![&mut self.cell_id]
            }
        })*
    };
}

// The catalog: tools, tool hosts, profiles and policies.
cell_field!(
    pb::ListToolsRequest,
    pb::GetToolRequest,
    pb::DescribeToolsRequest,
    pb::RegisterToolsRequest,
    pb::DeregisterToolsRequest,
    pb::ListToolHostsRequest,
    pb::RefreshSourcesRequest,
    pb::PutProfileRequest,
    pb::GetProfileRequest,
    pb::ListProfilesRequest,
    pb::DeleteProfileRequest,
    pb::PutPlatformPolicyRequest,
    pb::GetPlatformPolicyRequest,
    pb::PutUserPolicyRequest,
    pb::GetUserPolicyRequest,
    pb::ResolveProfileRequest,
);

// The workspace: runs, objects, journals, chats, skills.
cell_field!(
    pb::GetRunWorkspaceRequest,
    pb::OpenInvocationWorkspaceRequest,
    pb::CloseInvocationWorkspaceRequest,
    pb::PutAuditObjectRequest,
    pb::GetObjectRequest,
    pb::ListObjectsRequest,
    pb::ReadFileRequest,
    pb::AppendJournalRequest,
    pb::ReadJournalRequest,
    pb::FollowJournalRequest,
    pb::AppendChatMessageRequest,
    pb::CommitRunMessageRequest,
    pb::ListChatMessagesRequest,
    pb::ImportSkillRequest,
    pb::ListSkillsRequest,
    pb::DeleteSkillRequest,
    pb::PutWorldInfoActivationRequest,
    pb::PromotePersistRequest,
    pb::FinishRunWorkspaceRequest,
    pb::AcquireRunLeaseRequest,
    pb::RenewRunLeaseRequest,
    pb::ReleaseRunLeaseRequest,
);

// The mcp-proxy: registrations and their cached tools.
cell_field!(
    pb::UpsertServerRequest,
    pb::DeregisterServerRequest,
    pb::SetServerStateRequest,
    pb::SetToolPermissionRequest,
    pb::RefreshServerRequest,
    pb::GetServerRequest,
    pb::ListServersRequest,
    pb::ListCachedToolsRequest,
);

impl CellScoped for pb::CreateRunWorkspaceRequest {
    fn cells(&mut self) -> Vec<&mut String> {
        self.manifest.iter_mut().map(|m| &mut m.cell_id).collect()
    }
}

impl CellScoped for pb::AppendJournalsRequest {
    fn cells(&mut self) -> Vec<&mut String> {
        self.appends.iter_mut().map(|a| &mut a.cell_id).collect()
    }
}

/// `ToolExecutor/Execute`, served by the workspace and the mcp-proxy: the context's cell.
impl CellScoped for pb::ExecuteRequest {
    fn cells(&mut self) -> Vec<&mut String> {
        self.context.iter_mut().map(|c| &mut c.cell_id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cell_a_message_carries_is_named() {
        let mut batch = pb::AppendJournalsRequest {
            appends: vec![
                pb::AppendJournalRequest {
                    cell_id: "a".into(),
                    ..Default::default()
                },
                pb::AppendJournalRequest {
                    cell_id: "b".into(),
                    ..Default::default()
                },
            ],
        };
        let named: Vec<String> = batch.cells().into_iter().map(|c| c.clone()).collect();
        assert_eq!(named, ["a", "b"]);
        let mut none = pb::ExecuteRequest::default();
        assert!(none.cells().is_empty());
        let mut one = pb::GetServerRequest {
            cell_id: "c".into(),
            ..Default::default()
        };
        *one.cells()[0] = "d".into();
        assert_eq!(one.cell_id, "d");
    }
}
