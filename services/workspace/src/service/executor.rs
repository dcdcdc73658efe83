//! The tool executor's adapter: `toolplane.v1.ToolExecutor/Execute` for the workspace, chat,
//! skill and world-info tools. Checks and converts the call's context and tool id, runs the tool
//! ([`tools::execute`]), converts its outcome to a `ToolResult` ([`convert::tool_result`]) and
//! counts it. Must never answer a recoverable tool error with a status, nor a system failure
//! with a tool result.

use std::time::Instant;

use tonic::Request;
use toolplane_core::ToolId;
use toolplane_proto::v1::{self as pb, tool_executor_server::ToolExecutor};
use tracing::Instrument;

use super::{Rpc, WorkspaceGrpc, done, run_key};
use crate::{
    convert,
    error::WsError,
    paths::{PathGuard, valid_id},
    tools::{self, CallContext},
};

impl WorkspaceGrpc {
    /// The tool executor's adapter: the call's context and tool id checked and converted, the
    /// tool run by [`tools::execute`], its outcome converted to a `ToolResult` and counted.
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

#[tonic::async_trait]
impl ToolExecutor for WorkspaceGrpc {
    async fn execute(&self, r: Request<pb::ExecuteRequest>) -> Rpc<pb::ExecuteResponse> {
        done(self.execute_call(super::cells::scoped(r)?).await)
    }
}
