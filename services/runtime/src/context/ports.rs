//! The ports: what the runtime needs from its peers, as traits over the runtime's own types — the
//! catalog (profiles, policies, tool listings), the workspace service (run and invocation
//! workspaces, the journal, audit objects, chat commits), the tool hosts (the workspace's tools,
//! the mcp-proxy, external hosts) and the model endpoints.
//!
//! The tonic clients and the HTTP model client that implement them live in `peers`; tests
//! implement them in memory. Nothing here knows protobuf or a socket. Each method documents what
//! the runtime relies on.

use std::fmt::Debug;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::Stream;
use serde_json::{Map, Value};
use toolplane_core::catalog::CatalogEntry;
use toolplane_core::error::{self as codes, CoreError};
use toolplane_core::id::ToolId;
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_core::{Category, result::is_well_formed_code};

use crate::error::RuntimeError;
use crate::model::provider::{CallError, Endpoint};
use crate::state::{AuditObject, JournalAppend, RunStatus};

/// How a peer refused or failed a request, in the classes the runtime acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortErrorKind {
    NotFound,
    InvalidArgument,
    FailedPrecondition,
    AlreadyExists,
    /// Nothing reached the peer (it is down or unreachable).
    Unavailable,
    Cancelled,
    DeadlineExceeded,
    /// The peer failed, or refused who we are (internal, unknown, data loss, authentication,
    /// permission).
    Broken,
    Other,
}

/// A peer's refusal or failure: its class and its message, which starts with the peer's stable
/// code when it has one (`"workspace.stale_file: …"`), and the raw error details of its status
/// (opaque here; relayed to the host with the error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortError {
    pub kind: PortErrorKind,
    pub message: String,
    pub details: Option<Arc<[u8]>>,
}

impl PortError {
    pub fn new(kind: PortErrorKind, message: impl Into<String>) -> Self {
        PortError {
            kind,
            message: message.into(),
            details: None,
        }
    }

    /// The stable code at the start of the message, when it has one.
    pub fn code(&self) -> Option<&str> {
        let (code, _) = self.message.split_once(':')?;
        is_well_formed_code(code).then_some(code)
    }

    /// Whether the peer refused to create something that exists (an audit object written twice).
    pub fn is_already_exists(&self) -> bool {
        let code = self.code().unwrap_or("");
        self.kind == PortErrorKind::AlreadyExists
            || code.ends_with("audit_exists")
            || code.ends_with("already_exists")
    }

    /// The refusal as a runtime error about `what`: not found and invalid requests keep their
    /// class; anything else is an unavailable dependency.
    pub fn into_error(self, what: &str) -> RuntimeError {
        let message = format!("{what}: {}", self.message);
        // Refused under an older epoch: another runtime drives the run now.
        if matches!(
            self.code(),
            Some("workspace.stale_epoch" | "mcp.stale_epoch")
        ) {
            return RuntimeError::new(codes::RUNTIME_LEASE_LOST, message).caused_by(self.details);
        }
        let error = match self.kind {
            PortErrorKind::NotFound => RuntimeError::not_found(message),
            PortErrorKind::InvalidArgument
            | PortErrorKind::FailedPrecondition
            | PortErrorKind::AlreadyExists => RuntimeError::invalid(message),
            _ => RuntimeError::dependency(message),
        };
        error.caused_by(self.details)
    }
}

/// A stored profile: its JSON document and version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredProfile {
    pub profile_json: String,
    pub version: u64,
}

/// One tool the catalog lists for a profile.
#[derive(Debug, Clone)]
pub struct ListedTool {
    /// The tool's id, when its descriptor has a readable one.
    pub id: Option<ToolId>,
    /// The category its registration declared, if any.
    pub category: Option<Category>,
    pub progress_aware: bool,
    /// The catalog entry, or why the runtime cannot read the listing.
    pub entry: Result<CatalogEntry, CoreError>,
}

/// A profile resolved for an invocation: the profile, the policies above it and its tools.
#[derive(Debug, Clone, Default)]
pub struct ResolvedProfile {
    pub profile: StoredProfile,
    /// The policies' JSON documents; `None` or blank when there is none.
    pub platform_policy_json: Option<String>,
    pub user_policy_json: Option<String>,
    pub tools: Vec<ListedTool>,
}

/// A page of a cell's profiles; an empty token means the last page.
#[derive(Debug, Clone, Default)]
pub struct ProfilePage {
    pub profiles: Vec<StoredProfile>,
    pub next_page_token: String,
}

/// Profiles, policies and tool listings (the catalog service).
#[async_trait]
pub trait Catalog: Send + Sync + Debug {
    /// The profile with its policies and the tools it may see, read once per invocation.
    async fn resolve_profile(
        &self,
        cell_id: &str,
        profile_id: &str,
        actor_id: &str,
    ) -> Result<ResolvedProfile, PortError>;
    /// One profile; `NotFound` (or `InvalidArgument` for a malformed id) when there is none.
    async fn get_profile(
        &self,
        cell_id: &str,
        profile_id: &str,
    ) -> Result<StoredProfile, PortError>;
    /// A page of the cell's profiles, in a stable order.
    async fn list_profiles(
        &self,
        cell_id: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<ProfilePage, PortError>;
    /// The tools of MCP server `server_id` (its registration id) as the catalog lists them now,
    /// unusable ones included, each naming the version of the server's list it was read from.
    /// Read at each turn of an invocation that binds the server's tools, to tell it the list
    /// changed; a catalog that cannot say lists nothing.
    async fn mcp_server_tools(
        &self,
        cell_id: &str,
        server_id: &str,
    ) -> Result<Vec<ListedTool>, PortError> {
        let _ = (cell_id, server_id);
        Ok(Vec::new())
    }
}

/// Which run a workspace request is about, and the epoch it is made under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunScope {
    pub run_id: String,
    pub cell_id: String,
    pub epoch: u64,
}

/// The workspace a new run asks for.
#[derive(Debug, Clone, Default)]
pub struct NewRunWorkspace {
    pub cell_id: String,
    pub run_id: String,
    pub actor_id: String,
    pub chat_id: String,
    pub message_id: Option<String>,
    pub background: bool,
    pub visible_roots: Vec<String>,
    pub writable_roots: Vec<String>,
    pub created_ms: i64,
}

/// The workspace as created: its roots (normalised by the workspace) and persistent base.
#[derive(Debug, Clone, Default)]
pub struct CreatedWorkspace {
    pub visible_roots: Vec<String>,
    pub writable_roots: Vec<String>,
    /// Empty when the run has no persistent projection.
    pub persist_base_version: String,
}

/// Which skills an invocation may read, and how much.
#[derive(Debug, Clone, Default)]
pub struct SkillAccess {
    pub visible: Vec<String>,
    pub deny: Vec<String>,
    pub max_read_chars_per_call: u32,
    pub max_read_chars_per_run: u32,
}

/// An invocation's view of its run's workspace.
#[derive(Debug, Clone)]
pub struct InvocationWorkspace {
    pub run: RunScope,
    pub invocation_id: String,
    pub visible_roots: Vec<String>,
    pub writable_roots: Vec<String>,
    pub skills: SkillAccess,
}

/// What promoting `persist/` changed.
#[derive(Debug, Clone, Default)]
pub struct Promoted {
    pub persist_version: String,
    pub changed_paths: Vec<String>,
}

/// A workspace file published into the run's chat message.
#[derive(Debug, Clone, Default)]
pub struct CommittedMessage {
    pub message_id: String,
    /// The message's content after the commit.
    pub content: String,
}

/// A journal record's level as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredLevel {
    Unspecified,
    Debug,
    Info,
    Warn,
    Error,
}

/// A journal record as the workspace stores and returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRecord {
    pub seq: u64,
    pub id: String,
    pub run_id: String,
    pub timestamp_ms: i64,
    pub level: StoredLevel,
    pub kind: String,
    pub payload_json: String,
    pub caused_by: Option<String>,
    pub invocation_id: String,
    pub related: Vec<String>,
}

/// A page of a run's journal from some sequence number on.
#[derive(Debug, Clone, Default)]
pub struct JournalPage {
    pub records: Vec<StoredRecord>,
    pub next_seq: u64,
    pub at_end: bool,
}

/// A run's journal as it grows; an item may carry no record (a keep-alive).
pub type RecordStream =
    Pin<Box<dyn Stream<Item = Result<Option<StoredRecord>, PortError>> + Send + 'static>>;

/// Run workspaces, the journal's storage, audit objects and chat commits (the workspace service).
#[async_trait]
pub trait Workspace: Send + Sync + Debug {
    async fn create_run_workspace(
        &self,
        ws: NewRunWorkspace,
    ) -> Result<CreatedWorkspace, PortError>;
    async fn put_world_info_activation(
        &self,
        run: &RunScope,
        activation_json: String,
    ) -> Result<(), PortError>;
    async fn open_invocation_workspace(&self, ws: InvocationWorkspace) -> Result<(), PortError>;
    async fn close_invocation_workspace(
        &self,
        run: &RunScope,
        invocation_id: &str,
    ) -> Result<(), PortError>;
    /// Promotes the run's `persist/` changes; a conflict is refused with the workspace's code.
    async fn promote_persist(&self, run: &RunScope) -> Result<Promoted, PortError>;
    /// Seals the run's workspace with its terminal status.
    async fn finish_run_workspace(
        &self,
        run: &RunScope,
        status: RunStatus,
    ) -> Result<(), PortError>;
    /// Publishes `source_path` into the run's chat message (replacing it, or appended to it).
    /// A file that cannot be published is refused with a recoverable code; a failure of the
    /// workspace itself is `Unavailable` or `Broken`.
    async fn commit_run_message(
        &self,
        run: &RunScope,
        source_path: &str,
        append: bool,
    ) -> Result<CommittedMessage, PortError>;
    /// Stores a group of records at its expected sequence number, with the audit objects it
    /// names (create-only, before the records); one group commit makes both durable. An object
    /// that exists is refused so that [`PortError::is_already_exists`] holds.
    async fn append_journal(&self, group: JournalAppend) -> Result<(), PortError>;
    /// Stores one audit object create-only (refused like `append_journal` when it exists).
    async fn put_audit_object(&self, run: &RunScope, object: AuditObject) -> Result<(), PortError>;
    async fn read_journal(
        &self,
        run_id: &str,
        cell_id: &str,
        from_seq: u64,
        page_size: u32,
    ) -> Result<JournalPage, PortError>;
    /// The journal from `from_seq` on, then each record as it is appended.
    async fn follow_journal(
        &self,
        run_id: &str,
        cell_id: &str,
        from_seq: u64,
    ) -> Result<RecordStream, PortError>;
    /// Takes the run's lease for `holder` (docs/workspace.md "Epochs and run leases"); the new
    /// epoch. A workspace that keeps no leases says so.
    async fn acquire_run_lease(
        &self,
        run: &RunScope,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<u64, PortError> {
        let _ = (run, holder, ttl_ms);
        Err(PortError::new(
            PortErrorKind::Other,
            "this workspace keeps no run leases",
        ))
    }
    /// Renews `holder`'s lease at `run.epoch`; refused (`workspace.stale_epoch`) once it moved on.
    async fn renew_run_lease(
        &self,
        run: &RunScope,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<(), PortError> {
        let _ = (run, holder, ttl_ms);
        Err(PortError::new(
            PortErrorKind::Other,
            "this workspace keeps no run leases",
        ))
    }
    /// Gives `holder`'s lease at `run.epoch` up.
    async fn release_run_lease(&self, run: &RunScope, holder: &str) -> Result<(), PortError> {
        let _ = (run, holder);
        Ok(())
    }
    /// A stored object of the run (an audit object, a readable view); `None` when there is none.
    /// A workspace that cannot read objects back says so.
    async fn get_object(&self, run: &RunScope, path: &str) -> Result<Option<Vec<u8>>, PortError> {
        let _ = (run, path);
        Err(PortError::new(
            PortErrorKind::Other,
            "this workspace does not read objects back",
        ))
    }
}

/// Whether a call's effects are known, as its host reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Known,
    NotSent,
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Known => "known",
            Outcome::NotSent => "not_sent",
            Outcome::Unknown => "unknown",
        }
    }
}

/// Which host runs a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolHost<'a> {
    /// The workspace service's own tools.
    Workspace,
    /// An MCP server, through the mcp-proxy.
    McpProxy,
    /// An external tool host at its endpoint (registered, or from the run spec).
    External { host_id: &'a str, endpoint: &'a str },
}

/// The context every executor receives with a call: who calls, in which run and invocation, where
/// it may read and write, and by when it must answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolContext {
    pub cell_id: String,
    pub actor_id: String,
    pub run_id: String,
    pub session_id: String,
    pub invocation_id: String,
    pub agent_id: String,
    pub work_dir: String,
    pub allow_paths: Vec<String>,
    pub deny_paths: Vec<String>,
    pub epoch: u64,
    pub deadline_unix_ms: i64,
    pub round: u32,
}

/// One call on its way to a host.
#[derive(Debug, Clone)]
pub struct ExecuteCall<'a> {
    pub context: ToolContext,
    pub call: &'a ToolInvocation,
    /// How long the request may take on the wire (the host's own limit plus a margin).
    pub request_timeout: Duration,
    /// The limit the host is told to apply to the tool itself, when the runtime sets one.
    pub tool_timeout_ms: Option<u64>,
}

/// What a host answered.
#[derive(Debug, Clone)]
pub struct Executed {
    /// The call's result, or why the answer carries none the runtime can read.
    pub result: Result<AgentToolResult, String>,
    pub outcome: Outcome,
    /// The host's raw result (JSON text), kept in the audit object.
    pub raw: Option<String>,
}

/// The hosts that run tool calls.
#[async_trait]
pub trait ToolHosts: Send + Sync + Debug {
    /// Sends one call. The outer error is a host that cannot be addressed at all (a malformed
    /// endpoint); the inner one is the host's refusal or failure.
    async fn execute(
        &self,
        host: ToolHost<'_>,
        call: ExecuteCall<'_>,
    ) -> Result<Result<Executed, PortError>, RuntimeError>;
}

/// A model endpoint's client for one invocation.
#[async_trait]
pub trait ModelCall: Send + Sync + Debug {
    fn endpoint(&self) -> &Endpoint;
    /// The endpoint a loop resumed after a restart goes on with: for a scripted model, without
    /// the turns already played.
    fn resumable_endpoint(&self) -> Endpoint;
    /// One attempt: the request from the system prompt, the provider-native history and the
    /// turn's tool fields; the response body. Whether a failure is worth retrying is the error's.
    async fn call(
        &self,
        system: &str,
        history: &[Value],
        tools: &Map<String, Value>,
        round: u32,
    ) -> Result<String, CallError>;
}

/// Clients of model endpoints.
pub trait Models: Send + Sync + Debug {
    /// A client of `endpoint` for a run of `cell` (whose egress policy it follows), or why there
    /// can be none.
    fn client(&self, cell: &str, endpoint: Endpoint) -> Result<Box<dyn ModelCall>, String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_refused_as_stale_is_a_lost_lease_whatever_its_status() {
        for refused in [
            "workspace.stale_epoch: epoch 1 is older than the run's epoch 2",
            "mcp.stale_epoch: epoch 1 is older than the run's epoch 2",
        ] {
            let e = PortError::new(PortErrorKind::FailedPrecondition, refused);
            assert_eq!(
                e.into_error("opening the invocation workspace").code(),
                codes::RUNTIME_LEASE_LOST
            );
        }
        let other = PortError::new(PortErrorKind::FailedPrecondition, "workspace.x: no");
        assert_eq!(other.into_error("y").code(), codes::RUNTIME_INVALID_REQUEST);
    }
}
