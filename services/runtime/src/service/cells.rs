//! Which cell a request acts in and which runs it may see: the caller's credential decides
//! (docs/auth.md, "Cells"). Every handler of the service reads its cell and its lookups through
//! here, so the rule is written once: another cell's run or invocation is answered exactly like
//! one that does not exist, and a request naming another cell is refused.

use std::sync::Arc;

use tonic::{Request, Status};
use toolplane_auth::Caller;

use crate::context::Runtime;
use crate::error::RuntimeError;
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
        Ok(run) => Ok(run),
        Err(missing) => match rt.stored_run(id, caller.visible_cell()).await? {
            Some(run) => Ok(run),
            None => Err(missing.into()),
        },
    }
}

/// The run `id` for a change: only a run this runtime drives. A run whose record another runtime
/// over the same store wrote is refused with `runtime.not_owner` (FAILED_PRECONDITION, the run in
/// the error's metadata).
pub async fn driven_run(rt: &Runtime, caller: &Caller, id: &str) -> Result<Arc<Run>, Status> {
    match rt.run_in(id, caller.visible_cell()) {
        Ok(run) => Ok(run),
        Err(missing) => match rt.stored_run(id, caller.visible_cell()).await? {
            Some(_) => Err(toolplane_proto::status::status(
                tonic::Code::FailedPrecondition,
                toolplane_core::error::RUNTIME_NOT_OWNER.as_str(),
                &format!("run `{id}` is driven by another runtime over the same store"),
                toolplane_proto::status::Details::new()
                    .meta("service", "runtime")
                    .meta("run_id", id),
            )),
            None => Err(missing.into()),
        },
    }
}
