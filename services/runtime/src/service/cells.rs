//! Which cell a request acts in and which runs it may see: the caller's credential decides
//! (docs/auth.md, "Cells"). Every handler of the service reads its cell and its lookups through
//! here, so the rule is written once: another cell's run or invocation is answered exactly like
//! one that does not exist, and a request naming another cell is refused.

use std::sync::Arc;

use tonic::{Request, Status};
use toolplane_auth::Caller;

use super::forward::Origin;
use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::lifecycle::RunDriver;
use crate::state::{Invocation, Run};

/// The caller the auth layer put into the request; none (a server without the layer) is the
/// caller with authentication off.
pub fn caller<T>(request: &Request<T>) -> Caller {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(|| Caller::auth_off(""))
}

/// The cell a request naming `requested` acts in (PERMISSION_DENIED for another cell).
pub fn scope(caller: &Caller, requested: &str) -> Result<String, Status> {
    caller.scope(requested).map_err(|e| e.to_status())
}

/// The run `id`, when the caller may see it.
pub fn run(rt: &Runtime, caller: &Caller, id: &str) -> Result<Arc<Run>, RuntimeError> {
    rt.run_in(id, caller.visible_cell())
}

/// The invocation `id`, when the caller may see its run.
pub fn invocation(
    rt: &Runtime,
    caller: &Caller,
    id: &str,
) -> Result<Arc<Invocation>, RuntimeError> {
    rt.invocation_in(id, caller.visible_cell())
}

/// The run `id` for a read: this runtime's own, else the record another runtime over the same
/// store wrote (a detached copy, nothing drives it here).
pub async fn readable_run(rt: &Runtime, caller: &Caller, id: &str) -> Result<Arc<Run>, Status> {
    match rt.run_in(id, caller.visible_cell()) {
        // A run this runtime lost or handed over is read as its new driver stores it.
        Ok(run) if run.lease_lost() => match rt.stored_run(id, caller.visible_cell()).await? {
            Some(stored) => Ok(stored),
            None => Ok(run),
        },
        Ok(run) => Ok(run),
        Err(missing) => match rt.stored_run(id, caller.visible_cell()).await? {
            Some(run) => Ok(run),
            None => Err(missing.into()),
        },
    }
}

/// Where a request about a run goes: this runtime (it drives the run, or just took it over), or
/// the runtime that drives it, at its advertised URL (cluster mode, docs/runtime.md "Taking a run
/// over").
#[derive(Debug)]
pub enum Target<T> {
    Here(T),
    Forward(String),
}

/// The run `id` for a change: a run this runtime drives, or takes over now that nobody holds its
/// lease; a run another live runtime drives is forwarded to it (`Target::Forward`), or refused with
/// `runtime.not_owner` (FAILED_PRECONDITION, the run and its holder in the error's metadata) when
/// that runtime advertises no URL or the request was forwarded already. An ended run of another
/// runtime is answered from its stored record.
pub async fn driven_run(
    rt: &Arc<Runtime>,
    caller: &Caller,
    id: &str,
    origin: &Origin,
) -> Result<Target<Arc<Run>>, Status> {
    if let Ok(run) = rt.run_in(id, caller.visible_cell())
        && !run.lease_lost()
    {
        return Ok(Target::Here(run));
    }
    let Some(stored) = rt.stored_run(id, caller.visible_cell()).await? else {
        return Err(rt.run_in(id, caller.visible_cell()).err().map_or_else(
            || RuntimeError::not_found(format!("no run `{id}`")).into(),
            Status::from,
        ));
    };
    let cell = stored.cell.clone();
    match crate::runloop::locate(rt, &cell, id).await? {
        RunDriver::Here { run, .. } => Ok(Target::Here(run)),
        RunDriver::Ended => Ok(Target::Here(stored)),
        RunDriver::Elsewhere { holder, url } => {
            if url.is_empty() || origin.forwarded {
                Err(not_owner(id, &holder))
            } else {
                Ok(Target::Forward(url))
            }
        }
    }
}

/// The invocation `id` for a request about it: this runtime's, or its run's driver's (taken
/// over or forwarded as [`driven_run`] says). An invocation is found on another runtime by its
/// checkpoint (cluster mode); one without is `runtime.not_found` there.
pub async fn driven_invocation(
    rt: &Arc<Runtime>,
    caller: &Caller,
    id: &str,
    origin: &Origin,
) -> Result<Target<Arc<Invocation>>, Status> {
    match rt.invocation_in(id, caller.visible_cell()) {
        Ok(inv) if !inv.run.lease_lost() => return Ok(Target::Here(inv)),
        Ok(_) => {}
        Err(missing) if !rt.checkpoints_on() => return Err(missing.into()),
        Err(_) => {}
    }
    let Some((cell, run_id)) = rt.run_of_invocation(id, caller.visible_cell()).await? else {
        return Err(RuntimeError::not_found(format!("no invocation `{id}`")).into());
    };
    match crate::runloop::locate(rt, &cell, &run_id).await? {
        RunDriver::Here { .. } | RunDriver::Ended => {
            Ok(Target::Here(rt.invocation_in(id, caller.visible_cell())?))
        }
        RunDriver::Elsewhere { holder, url } => {
            if url.is_empty() || origin.forwarded {
                Err(not_owner(&run_id, &holder))
            } else {
                Ok(Target::Forward(url))
            }
        }
    }
}

fn not_owner(run: &str, holder: &str) -> Status {
    toolplane_proto::status::status(
        tonic::Code::FailedPrecondition,
        toolplane_core::error::RUNTIME_NOT_OWNER.as_str(),
        &format!("run `{run}` is driven by another runtime over the same store ({holder})"),
        toolplane_proto::status::Details::new()
            .meta("service", "runtime")
            .meta("run_id", run)
            .meta("holder", holder),
    )
}
