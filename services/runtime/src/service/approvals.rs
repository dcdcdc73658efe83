//! The approval RPCs: `ListApprovals` (the caller's cell), `DecideApproval`, `AnswerQuestion`
//! and `CollectToolResults`. Who decided is the caller's principal from its credential.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};
use toolplane_auth::Caller;
use toolplane_proto::v1 as pb;

use super::forward::{Forwarder, Origin};
use super::{cells, page_window, turns};
use crate::context::Runtime;
use crate::convert::approvals::{approval_pb, state_filter};
use crate::error::RuntimeError;
use crate::lifecycle::ApprovalFilter;
use crate::state::Decision;

/// Longest reason or answer accepted, in bytes.
const MAX_TEXT_BYTES: usize = 16 * 1024;

/// Who decides: the credential's principal (a token id or a JWT subject).
fn decider(caller: &Caller) -> String {
    caller.principal.clone()
}

fn check_text(what: &str, text: &str) -> Result<(), RuntimeError> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(RuntimeError::invalid(format!(
            "{what} is {} bytes, over {MAX_TEXT_BYTES}",
            text.len()
        )));
    }
    Ok(())
}

pub async fn list(
    rt: &Runtime,
    request: Request<pb::ListApprovalsRequest>,
) -> Result<Response<pb::ListApprovalsResponse>, Status> {
    let caller = cells::caller(&request);
    let r = request.into_inner();
    let filter = ApprovalFilter {
        cell: caller.visible_cell().map(str::to_owned),
        run_id: r.run_id,
        state: state_filter(r.state),
    };
    let all = rt.list_approvals(&filter).await;
    let (start, size, next_page_token) = page_window(
        "runtime.approvals",
        (r.page_size, 100, 1000),
        &r.page_token,
        all.len(),
    )?;
    Ok(Response::new(pb::ListApprovalsResponse {
        approvals: all.iter().skip(start).take(size).map(approval_pb).collect(),
        next_page_token,
    }))
}

/// Where a decision about approval `id` goes: here when this runtime holds the approval or takes
/// its run over, else the runtime that drives its run (cluster mode; docs/runtime.md "Taking a run
/// over").
async fn approval_target(
    rt: &Arc<Runtime>,
    caller: &Caller,
    id: &str,
    origin: &Origin,
) -> Result<cells::Target<()>, Status> {
    let here = rt
        .approvals
        .get(id)
        .is_some_and(|a| rt.run(&a.run_id).is_ok_and(|run| !run.lease_lost()));
    if here || !rt.checkpoints_on() {
        return Ok(cells::Target::Here(()));
    }
    let Some(a) = rt.stored_approval(id, caller.visible_cell()).await else {
        return Ok(cells::Target::Here(()));
    };
    Ok(
        match cells::driven_run(rt, caller, &a.run_id, origin).await? {
            cells::Target::Here(_) => cells::Target::Here(()),
            cells::Target::Forward(url) => cells::Target::Forward(url),
        },
    )
}

pub async fn decide(
    rt: &Arc<Runtime>,
    forward: &Forwarder,
    request: Request<pb::DecideApprovalRequest>,
) -> Result<Response<pb::DecideApprovalResponse>, Status> {
    let caller = cells::caller(&request);
    let origin = Origin::of(&request);
    let r = request.into_inner();
    here_or_forward!(
        forward,
        approval_target(rt, &caller, &r.approval_id, &origin),
        origin,
        decide_approval(r)
    );
    check_text("reason", &r.reason)?;
    let by = decider(&caller);
    let decision = if r.approve {
        Decision::Approve {
            by,
            reason: r.reason,
            remember: r.remember_for_run,
        }
    } else {
        Decision::Deny {
            by,
            reason: r.reason,
        }
    };
    let a = rt
        .decide_approval(&r.approval_id, caller.visible_cell(), decision)
        .await?;
    Ok(Response::new(pb::DecideApprovalResponse {
        approval: Some(approval_pb(&a)),
    }))
}

pub async fn answer(
    rt: &Arc<Runtime>,
    forward: &Forwarder,
    request: Request<pb::AnswerQuestionRequest>,
) -> Result<Response<pb::AnswerQuestionResponse>, Status> {
    let caller = cells::caller(&request);
    let origin = Origin::of(&request);
    let r = request.into_inner();
    here_or_forward!(
        forward,
        approval_target(rt, &caller, &r.approval_id, &origin),
        origin,
        answer_question(r)
    );
    check_text("answer", &r.answer)?;
    let decision = Decision::Answer {
        by: decider(&caller),
        answer: r.answer,
    };
    let a = rt
        .decide_approval(&r.approval_id, caller.visible_cell(), decision)
        .await?;
    Ok(Response::new(pb::AnswerQuestionResponse {
        approval: Some(approval_pb(&a)),
    }))
}

pub async fn collect(
    rt: &Arc<Runtime>,
    forward: &Forwarder,
    request: Request<pb::CollectToolResultsRequest>,
) -> Result<Response<pb::CollectToolResultsResponse>, Status> {
    let caller = cells::caller(&request);
    let origin = Origin::of(&request);
    let r = request.into_inner();
    let inv = here_or_forward!(
        forward,
        cells::driven_invocation(rt, &caller, &r.invocation_id, &origin),
        origin,
        collect_tool_results(r)
    );
    let format = inv.inner.lock().await.format;
    let wait = Duration::from_millis(u64::from(r.wait_ms));
    let turn = rt
        .collect_host_calls(&inv, &r.turn_id, wait, r.epoch)
        .await?;
    Ok(Response::new(pb::CollectToolResultsResponse {
        response: Some(turns::host_turn_pb(&inv, format, turn).await),
    }))
}
