//! The gRPC face of the proxy: `toolplane.v1.McpProxyService` and `toolplane.v1.ToolExecutor`,
//! served on one port. Each method decodes its request (through [`crate::convert`]), calls
//! [`McpProxy`], and encodes the answer; no decisions are made here. Registration changes leave
//! an admin audit record ([`crate::audit`]).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use toolplane_auth::{AdminAuditLog, AdminChange, AdminKind, Caller};
use toolplane_proto::idempotency::Replays;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::mcp_proxy_service_server::McpProxyService;
use toolplane_proto::v1::tool_executor_server::ToolExecutor;

use crate::audit;
use crate::convert;
use crate::error::{MCP_INVALID_REQUEST, ProxyError};
use crate::execute::CallInput;
use crate::proxy::{McpProxy, UpsertInput};
use crate::registration::cell_or_default;

/// The tonic service implementation; cheap to clone.
#[derive(Debug, Clone)]
pub struct GrpcProxy {
    proxy: McpProxy,
    audit: Option<AdminAuditLog>,
    /// `UpsertServer`'s answers per `request_id` (docs/errors.md, "Retrying creates").
    upserts: Arc<Replays<pb::UpsertServerRequest, pb::UpsertServerResponse>>,
}

impl GrpcProxy {
    /// The service over `proxy`, recording registration changes in the proxy's admin audit.
    pub fn new(proxy: McpProxy) -> GrpcProxy {
        let audit = Some(audit::admin_audit(&proxy, None));
        GrpcProxy {
            proxy,
            audit,
            upserts: Arc::default(),
        }
    }

    /// The same service, recording in `audit` (`None`: no record).
    #[must_use]
    pub fn with_audit(mut self, audit: Option<AdminAuditLog>) -> GrpcProxy {
        self.audit = audit;
        self
    }

    async fn record(&self, caller: Option<&Caller>, change: AdminChange) {
        audit::record(self.audit.as_ref(), caller, change).await;
    }
}

fn caller_of<T>(request: &Request<T>) -> Option<Caller> {
    request.extensions().get::<Caller>().cloned()
}

fn required<T>(v: Option<T>, what: &str) -> Result<T, Status> {
    v.ok_or_else(|| ProxyError::new(MCP_INVALID_REQUEST, format!("{what} is required")).to_status())
}

/// The `grpc-timeout` header as a duration. The gRPC wire format is at most eight ASCII digits and
/// one unit (`H`, `M`, `S`, `m`, `u`, `n`); anything else is ignored, as if no deadline were sent.
fn grpc_timeout<T>(request: &Request<T>) -> Option<Duration> {
    parse_grpc_timeout(request.metadata().get("grpc-timeout")?.as_bytes())
}

fn parse_grpc_timeout(v: &[u8]) -> Option<Duration> {
    let (unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // Eight digits fit in a u64 with room for the hour's factor.
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[tonic::async_trait]
impl McpProxyService for GrpcProxy {
    async fn upsert_server(
        &self,
        request: Request<pb::UpsertServerRequest>,
    ) -> Result<Response<pb::UpsertServerResponse>, Status> {
        let caller = request.extensions().get::<Caller>().cloned();
        let r = crate::cells::scoped(request)?;
        self.proxy.catch_up().await;
        let record_caller = caller.clone();
        let (cell, key, keyed) = (r.cell_id.clone(), r.request_id.clone(), r.clone());
        let answer = self.upserts.once(&cell, &key, &keyed, || async {
            let input = UpsertInput {
                cell_id: r.cell_id,
                server_id: r.server_id,
                display_name: r.display_name,
                transport: convert::transport_from(r.transport)?,
                state: convert::state_from(r.initial_state)?,
                limits: convert::limits_from(r.limits),
                default_permission: convert::permission_from(r.default_permission)?,
                tool_permissions: convert::tool_permissions_from(r.tool_permissions)?,
                skip_refresh: r.skip_refresh,
                expected_generation: r.expected_generation,
                caller,
            };
            let (view, created, warnings) = self.proxy.upsert(input).await?;
            self.record(record_caller.as_ref(), audit::upsert_change(&view, created))
                .await;
            Ok(pb::UpsertServerResponse {
                server: Some(convert::server_to(&view)),
                created,
                warnings: warnings.iter().map(convert::note_to).collect(),
            })
        });
        Ok(Response::new(answer.await?))
    }

    async fn deregister_server(
        &self,
        request: Request<pb::DeregisterServerRequest>,
    ) -> Result<Response<pb::DeregisterServerResponse>, Status> {
        let caller = caller_of(&request);
        let r = crate::cells::scoped(request)?;
        self.proxy.catch_up().await;
        let removed = self.proxy.deregister(&r.cell_id, &r.server_id).await?;
        let cell = cell_or_default(&r.cell_id)?;
        let change = AdminChange::new(
            AdminKind::Registration,
            "DeregisterServer",
            &cell,
            &r.server_id,
        )
        .summary(format!("MCP server removed with {} tools", removed.len()));
        self.record(caller.as_ref(), change).await;
        Ok(Response::new(pb::DeregisterServerResponse {
            removed_tool_ids: removed,
        }))
    }

    async fn set_server_state(
        &self,
        request: Request<pb::SetServerStateRequest>,
    ) -> Result<Response<pb::SetServerStateResponse>, Status> {
        let caller = caller_of(&request);
        let r = crate::cells::scoped(request)?;
        self.proxy.catch_up().await;
        let state = required(convert::state_from(r.state)?, "state")?;
        let view = self
            .proxy
            .set_state(&r.cell_id, &r.server_id, state)
            .await?;
        let change = AdminChange::new(
            AdminKind::Registration,
            "SetServerState",
            &view.reg.cell_id,
            &view.reg.server_id,
        )
        .summary(format!("MCP server set {}", audit::state_name(state)));
        self.record(caller.as_ref(), change).await;
        Ok(Response::new(pb::SetServerStateResponse {
            server: Some(convert::server_to(&view)),
        }))
    }

    async fn set_tool_permission(
        &self,
        request: Request<pb::SetToolPermissionRequest>,
    ) -> Result<Response<pb::SetToolPermissionResponse>, Status> {
        let caller = caller_of(&request);
        let r = crate::cells::scoped(request)?;
        self.proxy.catch_up().await;
        let permission = required(convert::permission_from(r.permission)?, "permission")?;
        let tool = self
            .proxy
            .set_permission(&r.cell_id, &r.server_id, &r.native_name, permission)
            .await?;
        let cell = cell_or_default(&r.cell_id)?;
        let change = AdminChange::new(
            AdminKind::Registration,
            "SetToolPermission",
            &cell,
            &r.server_id,
        )
        .summary(format!(
            "tool `{}` permission set to {permission:?}",
            r.native_name
        ));
        self.record(caller.as_ref(), change).await;
        Ok(Response::new(pb::SetToolPermissionResponse {
            tool: tool.as_ref().map(convert::tool_to),
        }))
    }

    async fn refresh_server(
        &self,
        request: Request<pb::RefreshServerRequest>,
    ) -> Result<Response<pb::RefreshServerResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        self.proxy.catch_up().await;
        let (view, outcome) = self.proxy.refresh(&r.cell_id, &r.server_id).await?;
        Ok(Response::new(pb::RefreshServerResponse {
            server: Some(convert::server_to(&view)),
            added_tool_ids: outcome.added,
            removed_tool_ids: outcome.removed,
            warnings: outcome.warnings.iter().map(convert::note_to).collect(),
        }))
    }

    async fn get_server(
        &self,
        request: Request<pb::GetServerRequest>,
    ) -> Result<Response<pb::GetServerResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        self.proxy.catch_up().await;
        let view = self.proxy.get_server(&r.cell_id, &r.server_id)?;
        Ok(Response::new(pb::GetServerResponse {
            server: Some(convert::server_to(&view)),
        }))
    }

    async fn list_servers(
        &self,
        request: Request<pb::ListServersRequest>,
    ) -> Result<Response<pb::ListServersResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        self.proxy.catch_up().await;
        let (views, next) = self
            .proxy
            .list_servers(&r.cell_id, r.page_size, &r.page_token)?;
        Ok(Response::new(pb::ListServersResponse {
            servers: views.iter().map(convert::server_to).collect(),
            next_page_token: next,
        }))
    }

    async fn list_cached_tools(
        &self,
        request: Request<pb::ListCachedToolsRequest>,
    ) -> Result<Response<pb::ListCachedToolsResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        self.proxy.catch_up().await;
        let (tools, next) = self.proxy.list_cached_tools(
            &r.cell_id,
            &r.server_ids,
            r.include_unusable,
            &r.query,
            r.page_size,
            &r.page_token,
        )?;
        Ok(Response::new(pb::ListCachedToolsResponse {
            tools: tools.iter().map(convert::tool_to).collect(),
            next_page_token: next,
        }))
    }
}

#[tonic::async_trait]
impl ToolExecutor for GrpcProxy {
    async fn execute(
        &self,
        request: Request<pb::ExecuteRequest>,
    ) -> Result<Response<pb::ExecuteResponse>, Status> {
        // Answer a little before the caller's own deadline so it gets a result, not a status.
        let rpc_deadline =
            grpc_timeout(&request).map(|d| d.saturating_sub(Duration::from_millis(20).min(d / 10)));
        let r = crate::cells::scoped(request)?;
        self.proxy.catch_up().await;
        let invocation = required(r.invocation, "invocation")?;
        let context = r.context.unwrap_or_default();
        let timeout = match (r.timeout_ms.map(Duration::from_millis), rpc_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // The span's fields are only evaluated when a subscriber wants the span; its name is
        // written straight into the subscriber's buffer, never into a string of its own.
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", invocation.tool_id),
            gen_ai.tool.name = %invocation.tool_id,
            gen_ai.tool.call.id = %invocation.call_id,
            run.id = %context.run_id,
            invocation.id = %context.invocation_id,
            cell.id = %context.cell_id,
        );
        let call = CallInput {
            cell_id: context.cell_id,
            run_id: context.run_id,
            epoch: context.epoch,
            call_id: invocation.call_id,
            tool_id: invocation.tool_id,
            arguments_json: invocation.arguments_json,
            timeout,
            deadline_unix_ms: context.deadline_unix_ms,
            trace: r.trace,
        };
        // Dropping this future (the caller went away) drops the call, which tells the server.
        let out = tracing::Instrument::instrument(
            self.proxy.execute(&call, CancellationToken::new()),
            span,
        )
        .await?;
        Ok(Response::new(convert::execute_to(
            call.call_id,
            call.tool_id,
            out,
            r.trace,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_follow_the_wire_format_and_never_panic() {
        assert_eq!(parse_grpc_timeout(b"5S"), Some(Duration::from_secs(5)));
        assert_eq!(
            parse_grpc_timeout(b"250m"),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            parse_grpc_timeout(b"99999999H"),
            Some(Duration::from_secs(99_999_999 * 3600))
        );
        for bad in [
            &b""[..],
            b"S",
            b"123456789S",
            b"18446744073709551616H",
            b"-1S",
            b"5x",
            "5\u{e9}".as_bytes(),
            "\u{e9}".as_bytes(),
        ] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }
}
