//! The service's protobuf messages built from the runtime's state: runs, invocations, their
//! budgets and statuses.

use super::*;

pub fn run_pb(r: &RunRecord, last_seq: u64) -> pb::Run {
    pb::Run {
        run_id: r.run_id.clone(),
        cell_id: r.cell_id.clone(),
        actor_id: r.actor_id.clone(),
        session_id: r.session_id.clone(),
        chat: Some(pb::ChatBinding {
            chat_id: r.chat_id.clone(),
            message_id: r.message_id.clone(),
        }),
        mode: match r.mode {
            RunMode::Foreground => pb::RunMode::Foreground as i32,
            RunMode::Background => pb::RunMode::Background as i32,
        },
        profile_id: r.profile_id.clone(),
        status: status_pb(r.status),
        driver: match r.driver {
            Driver::Host => pb::RunDriver::Host as i32,
            Driver::Runtime => pb::RunDriver::Runtime as i32,
        },
        root_invocation_id: r.root_invocation_id.clone(),
        active_invocation_id: r.active_invocation_id.clone(),
        last_seq,
        epoch: r.epoch,
        created_at_unix_ms: r.created_ms,
        updated_at_unix_ms: r.updated_ms,
        failure: r.failure.as_ref().map(failure_pb),
        committed: r.committed,
        labels: r.labels.clone().into_iter().collect(),
    }
}

pub fn status_pb(s: RunStatus) -> i32 {
    (match s {
        RunStatus::Created => pb::RunStatus::Created,
        RunStatus::Running => pb::RunStatus::Running,
        RunStatus::Completed => pb::RunStatus::Completed,
        RunStatus::PartialSuccess => pb::RunStatus::PartialSuccess,
        RunStatus::Failed => pb::RunStatus::Failed,
        RunStatus::Cancelling => pb::RunStatus::Cancelling,
        RunStatus::Cancelled => pb::RunStatus::Cancelled,
    }) as i32
}

pub(super) fn inv_status_pb(s: InvocationStatus) -> i32 {
    (match s {
        InvocationStatus::Open => pb::InvocationState::Open,
        InvocationStatus::Finished => pb::InvocationState::Finished,
        InvocationStatus::HandedOff => pb::InvocationState::HandedOff,
        InvocationStatus::Returned => pb::InvocationState::Returned,
        InvocationStatus::Failed => pb::InvocationState::Failed,
        InvocationStatus::Closed => pb::InvocationState::Closed,
        InvocationStatus::Cancelled => pb::InvocationState::Cancelled,
    }) as i32
}

pub(super) async fn invocation_pb(inv: &Invocation) -> pb::Invocation {
    let inner = inv.inner.lock().await;
    pb::Invocation {
        invocation_id: inv.id.clone(),
        run_id: inv.run.id.clone(),
        profile_id: inner.snapshot.profile_id.clone(),
        exit_policy: convert::exit_policy_pb(&inner.snapshot.exit_policy),
        parent_invocation_id: match &inner.snapshot.exit_policy {
            ExitPolicy::ReturnToParent {
                parent_invocation_id,
                ..
            } => parent_invocation_id.clone(),
            ExitPolicy::Handoff {
                from_invocation_id, ..
            } => from_invocation_id.clone(),
            ExitPolicy::Root => String::new(),
        },
        state: inv_status_pb(inner.status),
        snapshot_id: inner.snapshot.snapshot_id.clone(),
        provider_format: convert::provider_format_pb(inner.format),
        driver: match inv.driver {
            Driver::Host => pb::RunDriver::Host as i32,
            Driver::Runtime => pb::RunDriver::Runtime as i32,
        },
        current_turn: (inner.status == InvocationStatus::Open)
            .then(|| convert::turn_pb(&inner.turn, &turn_id(&inv.id, inner.round), None)),
        budget: Some(budget_pb(&inner)),
        failure: inner.failure.as_ref().map(failure_pb),
        created_at_unix_ms: inv.created_ms,
        ended_at_unix_ms: inner.ended_ms,
        task_id: match &inner.snapshot.exit_policy {
            ExitPolicy::ReturnToParent { task_id, .. } => task_id.clone(),
            _ => String::new(),
        },
    }
}

pub(super) async fn run_response(rt: &Runtime, run: &Run) -> pb::Run {
    run_pb(&run.snapshot(), rt.last_seq(run).await)
}

pub(super) fn exit_policy(v: i32, parent: &str) -> Result<ExitPolicy, RuntimeError> {
    match pb::ExitPolicy::try_from(v).unwrap_or(pb::ExitPolicy::Unspecified) {
        pb::ExitPolicy::Unspecified | pb::ExitPolicy::Root => Ok(ExitPolicy::Root),
        pb::ExitPolicy::Handoff => Ok(ExitPolicy::Handoff {
            from_invocation_id: parent.to_owned(),
            depth: 1,
        }),
        pb::ExitPolicy::ReturnChild => Err(RuntimeError::invalid(
            "return-mode children are opened by agent.delegate, not by hosts",
        )),
    }
}

pub(super) fn budget_pb(inner: &InvocationInner) -> pb::InvocationBudget {
    pb::InvocationBudget {
        calls_used: inner.gate.used_total(),
        calls_limit: Some(inner.snapshot.max_calls_per_invocation),
        rounds_used: inner.round,
        rounds_limit: Some(inner.snapshot.max_rounds),
    }
}
