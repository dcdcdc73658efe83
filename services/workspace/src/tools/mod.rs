//! The agent-facing tools this service executes through `ToolExecutor.Execute`: `workspace.*`
//! (files), `chat.*`, `skill.*` and `worldinfo.*`. Owns argument parsing against the builtin
//! descriptors' shapes and each tool's model-facing text; must never execute a runtime-control
//! tool (`workspace.commit`, `workspace.finish`, `agent.*`), which the runtime owns.

pub mod args;
pub mod chat;
pub mod files;
pub mod listing;
pub mod search;
pub mod skill;
pub mod worldinfo;

use std::sync::Arc;

use serde_json::Value;
use toolplane_core::builtin;

use crate::{
    engine::Workspace,
    error::WsError,
    paths::PathGuard,
    runs::{Invocation, Run},
};

/// What a successful tool call returns.
#[derive(Debug, Clone, Default)]
pub struct ToolOutput {
    /// Model-facing Markdown.
    pub content: String,
    /// Structured result for the runtime, audit and UIs.
    pub structured: Value,
    /// Resource refs (`workspace:<path>#Lx-Ly`, `chat:current#<i>`, …).
    pub refs: Vec<String>,
}

/// Who calls, in which run and invocation.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub cell: String,
    pub run_id: String,
    pub invocation_id: String,
    pub epoch: u64,
    pub guard: PathGuard,
}

/// A call bound to its run and invocation.
#[derive(Debug)]
pub struct Call<'a> {
    pub ws: &'a Workspace,
    pub ctx: CallContext,
    pub run: Arc<Run>,
    pub invocation: Arc<Invocation>,
}

/// Runs one tool call. Recoverable failures are `WsError::Tool`.
pub async fn execute(
    ws: &Workspace,
    ctx: CallContext,
    native: &str,
    arguments: &str,
) -> Result<ToolOutput, WsError> {
    if builtin::executor_of(native) != Some(builtin::BuiltinExecutor::Workspace) {
        return Err(WsError::status(
            "workspace.unknown_tool",
            tonic::Code::InvalidArgument,
            format!("the workspace service does not execute {native}"),
        ));
    }
    if arguments.len() > ws.limits().max_arguments_bytes {
        return Err(WsError::tool(
            "tool.invalid_arguments",
            format!(
                "arguments are {} bytes, over the limit of {}",
                arguments.len(),
                ws.limits().max_arguments_bytes
            ),
        ));
    }
    let args = args::Args::parse(native, arguments)?;
    let run = ws.runs().get(&ctx.cell, &ctx.run_id).await?;
    let invocation = ws
        .runs()
        .invocation(&run, &ctx.cell, &ctx.run_id, &ctx.invocation_id)
        .await?;
    let call = Call {
        ws,
        ctx,
        run,
        invocation,
    };
    match native {
        builtin::WORKSPACE_LIST_FILES => listing::list_files(&call, args).await,
        builtin::WORKSPACE_SEARCH_FILES => listing::search_files(&call, args).await,
        builtin::WORKSPACE_READ_FILE => files::read_file(&call, args).await,
        builtin::WORKSPACE_WRITE_FILE => files::write_file(&call, args).await,
        builtin::WORKSPACE_APPLY_PATCH => files::apply_patch(&call, args).await,
        builtin::CHAT_SEARCH => chat::search(&call, args).await,
        builtin::CHAT_READ_MESSAGES => chat::read_messages(&call, args).await,
        builtin::SKILL_LIST => skill::list(&call, args).await,
        builtin::SKILL_SEARCH => skill::search(&call, args).await,
        builtin::SKILL_READ => skill::read(&call, args).await,
        builtin::WORLDINFO_READ_ACTIVATED => worldinfo::read_activated(&call, args).await,
        _ => Err(WsError::status(
            "workspace.unknown_tool",
            tonic::Code::InvalidArgument,
            format!("the workspace service does not execute {native}"),
        )),
    }
}
