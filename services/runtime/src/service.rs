//! `toolplane.v1.RuntimeService` over the [`Runtime`]: request validation and conversion only; the
//! behaviour lives in the layers below (`lifecycle`, `pipeline`, `runloop`). The top of the
//! runtime's layers: nothing imports it.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use serde_json::Value;
use tonic::{Request, Response, Status};
use toolplane_core::snapshot::ExitPolicy;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::runtime_service_server::RuntimeService;

use crate::context::Runtime;
use crate::convert;
use crate::convert::peers::{port_status, stored_record_pb};
use crate::convert::runs::{failure_pb, new_run_from_create, run_start};
use crate::error::RuntimeError;
use crate::lifecycle::Opened;
use crate::pipeline::{HandedOff, HostCalls};
use crate::state::{
    Driver, Invocation, InvocationInner, InvocationStatus, Run, RunMode, RunRecord, RunStatus,
    turn_id,
};
use toolplane_proto::idempotency::Replays;

/// What a request about a run or an invocation acts on here (`cells::Target::Here`), or — when
/// another runtime drives the run — that runtime's answer to the request `$r`, sent on through
/// `$forward` as `$method` with the caller's credential (`cells::Target::Forward`).
macro_rules! here_or_forward {
    ($forward:expr, $target:expr, $origin:ident, $method:ident($r:ident)) => {
        match $target.await? {
            cells::Target::Here(found) => found,
            cells::Target::Forward(url) => {
                return $forward.client(&url)?.$method($origin.request($r)).await;
            }
        }
    };
}

mod approvals;
mod cells;
pub mod forward;
mod messages;
mod turns;

use forward::{Forwarder, Origin};
use messages::{budget_pb, exit_policy, inv_status_pb, invocation_pb, run_response};
pub use messages::{run_pb, status_pb};

/// Largest `calls_json` accepted.
const MAX_CALLS_JSON_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct RuntimeGrpc {
    pub rt: Arc<Runtime>,
    /// The answers of keyed creates, replayed to their retries.
    pub creates: Arc<Creates>,
    /// The clients of the other runtimes, for requests about the runs they drive.
    pub forward: Arc<Forwarder>,
}

impl RuntimeGrpc {
    pub fn new(rt: Arc<Runtime>) -> RuntimeGrpc {
        RuntimeGrpc {
            forward: Forwarder::new(&rt.cfg),
            rt,
            creates: Arc::default(),
        }
    }
}

/// The first answers of `CreateRun` and `StartRun` per `request_id` (docs/errors.md, "Retrying
/// creates").
#[derive(Debug, Default)]
pub struct Creates {
    create_run: Replays<pb::CreateRunRequest, pb::CreateRunResponse>,
    start_run: Replays<pb::StartRunRequest, pb::StartRunResponse>,
}

/// An offset page over an in-memory list: `(start, size, next_page_token)`. The token is the
/// opaque form (`toolplane_proto::page_token`) of the next page's offset in `listing`; empty when
/// there is none.
fn page_window(
    listing: &'static str,
    (page_size, default, max): (u32, u32, u32),
    token: &str,
    len: usize,
) -> Result<(usize, usize, String), Status> {
    use toolplane_proto::page_token;
    let size = if page_size == 0 {
        default
    } else {
        page_size.min(max)
    } as usize;
    let bad = |message: String| {
        Status::from(RuntimeError::new(
            toolplane_core::error::REQUEST_INVALID_PAGE_TOKEN,
            message,
        ))
    };
    // A token this service issued is an offset within the list; anything past its end (an
    // offset of `usize::MAX` included) was not issued here.
    let start: usize = match page_token::decode(listing, token) {
        Ok(None) => 0,
        Ok(Some(cursor)) => cursor
            .parse()
            .ok()
            .filter(|start: &usize| *start <= len && cursor == start.to_string())
            .ok_or_else(|| bad(format!("the page token was not issued by {listing}")))?,
        Err(e) => return Err(bad(e.to_string())),
    };
    let end = start.saturating_add(size);
    let next = if end < len {
        page_token::encode(listing, &end.to_string())
    } else {
        String::new()
    };
    Ok((start, size, next))
}

type WatchStream =
    Pin<Box<dyn Stream<Item = Result<pb::WatchRunResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl RuntimeService for RuntimeGrpc {
    async fn create_run(
        &self,
        request: Request<pb::CreateRunRequest>,
    ) -> Result<Response<pb::CreateRunResponse>, Status> {
        let caller = cells::caller(&request);
        self.rt.check_not_draining()?;
        let mut r = request.into_inner();
        r.cell_id = cells::scope(&caller, &r.cell_id)?;
        let (cell, key, keyed) = (r.cell_id.clone(), r.request_id.clone(), r.clone());
        let answer = self.creates.create_run.once(&cell, &key, &keyed, || async {
            let run = self.rt.create_run(new_run_from_create(r)?).await?;
            Ok(pb::CreateRunResponse {
                run: Some(run_response(&self.rt, &run).await),
            })
        });
        Ok(Response::new(answer.await?))
    }

    async fn start_run(
        &self,
        request: Request<pb::StartRunRequest>,
    ) -> Result<Response<pb::StartRunResponse>, Status> {
        let caller = cells::caller(&request);
        self.rt.check_not_draining()?;
        let mut r = request.into_inner();
        let mut spec = r
            .spec
            .take()
            .ok_or_else(|| Status::from(RuntimeError::invalid("a run spec is required")))?;
        spec.cell_id = cells::scope(&caller, &spec.cell_id)?;
        let (cell, key) = (spec.cell_id.clone(), r.request_id.clone());
        r.spec = Some(spec.clone());
        let answer = self.creates.start_run.once(&cell, &key, &r, || async {
            let run =
                crate::runloop::start(self.rt.clone(), run_start(spec, &self.rt.cfg)?).await?;
            Ok(pb::StartRunResponse {
                run: Some(run_response(&self.rt, &run).await),
            })
        });
        Ok(Response::new(answer.await?))
    }

    async fn get_run(
        &self,
        request: Request<pb::GetRunRequest>,
    ) -> Result<Response<pb::GetRunResponse>, Status> {
        let caller = cells::caller(&request);
        let run = cells::readable_run(&self.rt, &caller, &request.into_inner().run_id).await?;
        Ok(Response::new(pb::GetRunResponse {
            run: Some(run_response(&self.rt, &run).await),
        }))
    }

    async fn list_runs(
        &self,
        request: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let caller = cells::caller(&request);
        let r = request.into_inner();
        // With auth on an empty cell is the caller's, never every cell.
        let cell = cells::scope(&caller, &r.cell_id)?;
        // Runs other runtimes over the same store drive are listed from their stored records.
        let mut all: Vec<RunRecord> = self.rt.runs().iter().map(|run| run.snapshot()).collect();
        for stored in self.rt.stored_runs(&cell).await? {
            if !self.rt.has_run(&stored.run_id) {
                all.push(stored);
            }
        }
        let mut runs: Vec<RunRecord> = all
            .into_iter()
            .filter(|x| cell.is_empty() || x.cell_id == cell)
            .filter(|x| r.actor_id.is_empty() || x.actor_id == r.actor_id)
            .filter(|x| r.chat_id.is_empty() || x.chat_id == r.chat_id)
            .filter(|x| r.statuses.is_empty() || r.statuses.contains(&status_pb(x.status)))
            .collect();
        runs.sort_by(|a, b| {
            b.created_ms
                .cmp(&a.created_ms)
                .then(a.run_id.cmp(&b.run_id))
        });
        let (start, size, next) = page_window(
            "runtime.runs",
            (r.page_size, 50, 500),
            &r.page_token,
            runs.len(),
        )?;
        let mut page: Vec<pb::Run> = Vec::with_capacity(size);
        for x in runs.iter().skip(start).take(size) {
            let last_seq = match self.rt.run(&x.run_id) {
                Ok(run) => self.rt.last_seq(&run).await,
                Err(_) => self.rt.last_seq(&Run::new(x.clone(), 0)).await,
            };
            page.push(run_pb(x, last_seq));
        }
        Ok(Response::new(pb::ListRunsResponse {
            runs: page,
            next_page_token: next,
        }))
    }

    async fn cancel_run(
        &self,
        request: Request<pb::CancelRunRequest>,
    ) -> Result<Response<pb::CancelRunResponse>, Status> {
        let caller = cells::caller(&request);
        let origin = Origin::of(&request);
        let r = request.into_inner();
        let run = here_or_forward!(
            self.forward,
            cells::driven_run(&self.rt, &caller, &r.run_id, &origin),
            origin,
            cancel_run(r)
        );
        self.rt.cancel_run(&run, &r.reason).await?;
        Ok(Response::new(pb::CancelRunResponse {
            run: Some(run_response(&self.rt, &run).await),
        }))
    }

    type WatchRunStream = WatchStream;

    async fn watch_run(
        &self,
        request: Request<pb::WatchRunRequest>,
    ) -> Result<Response<Self::WatchRunStream>, Status> {
        let caller = cells::caller(&request);
        let r = request.into_inner();
        let run = cells::readable_run(&self.rt, &caller, &r.run_id).await?;
        let ws = &self.rt.ports.workspace;
        let from = r.from_seq.max(1);
        if r.history_only {
            let mut records = Vec::new();
            let mut next = from;
            loop {
                let page = ws
                    .read_journal(&run.id, &run.cell, next, 5000)
                    .await
                    .map_err(port_status)?;
                let done = page.at_end || page.records.is_empty();
                next = page.next_seq;
                records.extend(page.records);
                if done {
                    break;
                }
            }
            let stream = futures::stream::iter(records.into_iter().map(|e| {
                Ok(pb::WatchRunResponse {
                    event: Some(stored_record_pb(e)),
                })
            }));
            return Ok(Response::new(Box::pin(stream)));
        }
        let inner = ws
            .follow_journal(&run.id, &run.cell, from)
            .await
            .map_err(port_status)?;
        let stream = futures::StreamExt::map(inner, |item| {
            item.map(|r| pb::WatchRunResponse {
                event: r.map(stored_record_pb),
            })
            .map_err(port_status)
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn open_invocation(
        &self,
        request: Request<pb::OpenInvocationRequest>,
    ) -> Result<Response<pb::OpenInvocationResponse>, Status> {
        let caller = cells::caller(&request);
        let origin = Origin::of(&request);
        let r = request.into_inner();
        let run = here_or_forward!(
            self.forward,
            cells::driven_run(&self.rt, &caller, &r.run_id, &origin),
            origin,
            open_invocation(r)
        );
        if let Some(e) = r.epoch
            && e != 0
            && e < run.epoch()
        {
            return Err(RuntimeError::new(
                toolplane_core::error::RUNTIME_STALE_EPOCH,
                format!("epoch {e} is older than {}", run.epoch()),
            )
            .into());
        }
        let format = convert::provider_format(r.provider_format)?;
        let choice = convert::tool_choice(r.tool_choice.as_ref())?;
        let exit = exit_policy(r.exit_policy, &r.parent_invocation_id)?;
        let opened = self
            .rt
            .open_invocation(&run, &r.profile_id, exit, format, choice, Driver::Host)
            .await?;
        let inv = &opened.invocation;
        let inner = inv.inner.lock().await;
        Ok(Response::new(pb::OpenInvocationResponse {
            invocation_id: inv.id.clone(),
            snapshot_id: inner.snapshot.snapshot_id.clone(),
            tools_json: opened.tools_json.to_string(),
            first_turn: Some(first_turn_pb(&inner, &opened)),
            snapshot: Some(convert::snapshot_summary_pb(
                &inner.snapshot,
                &inv.snapshot_path,
                inv.created_ms,
                inv.profile_version,
            )),
            omitted: convert::omissions_pb(&inner.snapshot),
            state: inv_status_pb(inner.status),
        }))
    }

    async fn execute_tool_calls(
        &self,
        request: Request<pb::ExecuteToolCallsRequest>,
    ) -> Result<Response<pb::ExecuteToolCallsResponse>, Status> {
        let caller = cells::caller(&request);
        let origin = Origin::of(&request);
        let r = request.into_inner();
        if r.calls_json.len() > MAX_CALLS_JSON_BYTES {
            return Err(RuntimeError::invalid(format!(
                "calls_json is {} bytes, over {MAX_CALLS_JSON_BYTES}",
                r.calls_json.len()
            ))
            .into());
        }
        let inv = here_or_forward!(
            self.forward,
            cells::driven_invocation(&self.rt, &caller, &r.invocation_id, &origin),
            origin,
            execute_tool_calls(r)
        );
        let format = convert::provider_format(r.provider_format)?;
        let calls: Value = serde_json::from_str(&r.calls_json).map_err(|e| {
            RuntimeError::new(
                toolplane_core::error::MODEL_MALFORMED_RESPONSE,
                format!("calls_json is not valid json: {e}"),
            )
        })?;
        let next_choice = match r.next_tool_choice.as_ref() {
            Some(c) => Some(convert::tool_choice(Some(c)).map_err(|e| {
                RuntimeError::invalid(format!("next_tool_choice: {}", e.0.message))
            })?),
            None => None,
        };
        let turn = self
            .rt
            .execute_host_calls(
                &inv,
                HostCalls {
                    turn: &r.turn_id,
                    format,
                    calls: &calls,
                    epoch: r.epoch,
                    model_response: r.model_response_json,
                    next_choice,
                    cell: caller.visible_cell(),
                },
            )
            .await?;
        Ok(Response::new(turns::host_turn_pb(&inv, format, turn).await))
    }

    async fn list_approvals(
        &self,
        request: Request<pb::ListApprovalsRequest>,
    ) -> Result<Response<pb::ListApprovalsResponse>, Status> {
        approvals::list(&self.rt, request).await
    }

    async fn decide_approval(
        &self,
        request: Request<pb::DecideApprovalRequest>,
    ) -> Result<Response<pb::DecideApprovalResponse>, Status> {
        approvals::decide(&self.rt, &self.forward, request).await
    }

    async fn answer_question(
        &self,
        request: Request<pb::AnswerQuestionRequest>,
    ) -> Result<Response<pb::AnswerQuestionResponse>, Status> {
        approvals::answer(&self.rt, &self.forward, request).await
    }

    async fn collect_tool_results(
        &self,
        request: Request<pb::CollectToolResultsRequest>,
    ) -> Result<Response<pb::CollectToolResultsResponse>, Status> {
        approvals::collect(&self.rt, &self.forward, request).await
    }

    async fn close_invocation(
        &self,
        request: Request<pb::CloseInvocationRequest>,
    ) -> Result<Response<pb::CloseInvocationResponse>, Status> {
        let caller = cells::caller(&request);
        let origin = Origin::of(&request);
        let r = request.into_inner();
        let inv = here_or_forward!(
            self.forward,
            cells::driven_invocation(&self.rt, &caller, &r.invocation_id, &origin),
            origin,
            close_invocation(r)
        );
        self.rt.close_invocation(&inv, &r.reason, r.epoch).await?;
        Ok(Response::new(pb::CloseInvocationResponse {
            invocation: Some(invocation_pb(&inv).await),
        }))
    }

    async fn get_invocation(
        &self,
        request: Request<pb::GetInvocationRequest>,
    ) -> Result<Response<pb::GetInvocationResponse>, Status> {
        let caller = cells::caller(&request);
        let origin = Origin::of(&request);
        let r = request.into_inner();
        let inv = here_or_forward!(
            self.forward,
            cells::driven_invocation(&self.rt, &caller, &r.invocation_id, &origin),
            origin,
            get_invocation(r)
        );
        Ok(Response::new(pb::GetInvocationResponse {
            invocation: Some(invocation_pb(&inv).await),
        }))
    }

    async fn list_invocations(
        &self,
        request: Request<pb::ListInvocationsRequest>,
    ) -> Result<Response<pb::ListInvocationsResponse>, Status> {
        let caller = cells::caller(&request);
        let r = request.into_inner();
        cells::run(&self.rt, &caller, &r.run_id)?;
        let all = self.rt.invocations_of(&r.run_id);
        let (start, size, next) = page_window(
            "runtime.invocations",
            (r.page_size, 100, 1000),
            &r.page_token,
            all.len(),
        )?;
        let mut out = Vec::new();
        for inv in all.iter().skip(start).take(size) {
            out.push(invocation_pb(inv).await);
        }
        Ok(Response::new(pb::ListInvocationsResponse {
            invocations: out,
            next_page_token: next,
        }))
    }

    async fn get_snapshot(
        &self,
        request: Request<pb::GetSnapshotRequest>,
    ) -> Result<Response<pb::GetSnapshotResponse>, Status> {
        let caller = cells::caller(&request);
        let id = request.into_inner().snapshot_id;
        let inv = cells::invocation(&self.rt, &caller, &id)?;
        let inner = inv.inner.lock().await;
        let json = serde_json::to_string_pretty(&*inner.snapshot).map_err(|e| {
            RuntimeError::new(toolplane_core::error::RUNTIME_INTERNAL, e.to_string())
        })?;
        Ok(Response::new(pb::GetSnapshotResponse {
            snapshot_json: json,
            summary: Some(convert::snapshot_summary_pb(
                &inner.snapshot,
                &inv.snapshot_path,
                inv.created_ms,
                inv.profile_version,
            )),
        }))
    }
}

/// A newly opened invocation's first turn, with the tool choice in its provider format.
fn first_turn_pb(inner: &InvocationInner, opened: &Opened) -> pb::ToolTurn {
    convert::turn_pb(
        &inner.turn,
        &opened.turn_id,
        choice_json(&opened.tools_json),
    )
}

/// The tool choice among a turn's provider request fields, as JSON text.
fn choice_json(tools_json: &Value) -> Option<String> {
    tools_json
        .get("tool_choice")
        .or_else(|| tools_json.get("toolConfig"))
        .map(Value::to_string)
}

/// The handoff target a host continues with: its tools in the caller's provider format, its first
/// turn and the brief.
async fn handoff_pb(h: &HandedOff) -> pb::HandoffTarget {
    let inv = &h.opened.invocation;
    let inner = inv.inner.lock().await;
    pb::HandoffTarget {
        invocation_id: inv.id.clone(),
        profile_id: inner.profile.id.clone(),
        snapshot_id: inner.snapshot.snapshot_id.clone(),
        tools_json: h.opened.tools_json.to_string(),
        first_turn: Some(first_turn_pb(&inner, &h.opened)),
        brief: h.brief.clone(),
        omitted: convert::omissions_pb(&inner.snapshot),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_are_opaque_and_those_not_issued_are_refused() {
        use toolplane_proto::page_token::encode;
        let at = |offset: &str| encode("runtime.runs", offset);
        let window = |size, token: &str| page_window("runtime.runs", (size, 50, 500), token, 120);
        assert_eq!(window(0, "").unwrap(), (0, 50, at("50")));
        assert_eq!(window(50, &at("100")).unwrap(), (100, 50, String::new()));
        assert_eq!(window(10, &at("120")).unwrap(), (120, 10, String::new()));
        for bad in [
            at("121"),
            at(&usize::MAX.to_string()),
            at("18446744073709551616"),
            at("-1"),
            at("x"),
            at("1e3"),
            at("050"),
            encode("runtime.invocations", "50"),
            "50".to_owned(),
        ] {
            let err = window(u32::MAX, &bad).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{bad}");
            assert_eq!(
                toolplane_proto::status::error_code(&err).as_deref(),
                Some("request.invalid_page_token")
            );
        }
    }
}
