//! The run lease RPCs (`AcquireRunLease`, `RenewRunLease`, `ReleaseRunLease`): each validates
//! its ids and calls the engine ([`crate::engine::leases`]), which owns every rule.

use toolplane_proto::v1 as pb;

use super::run_key;
use crate::{convert, engine::Workspace, error::WsError};

pub(super) async fn acquire(
    ws: &Workspace,
    r: pb::AcquireRunLeaseRequest,
) -> Result<pb::AcquireRunLeaseResponse, WsError> {
    let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
    let lease = ws.acquire_lease(&cell, &run, &r.holder, r.ttl_ms).await?;
    Ok(pb::AcquireRunLeaseResponse {
        lease: Some(convert::lease(lease)),
    })
}

pub(super) async fn renew(
    ws: &Workspace,
    r: pb::RenewRunLeaseRequest,
) -> Result<pb::RenewRunLeaseResponse, WsError> {
    let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
    let lease = ws
        .renew_lease(&cell, &run, &r.holder, r.epoch, r.ttl_ms)
        .await?;
    Ok(pb::RenewRunLeaseResponse {
        lease: Some(convert::lease(lease)),
    })
}

pub(super) async fn release(
    ws: &Workspace,
    r: pb::ReleaseRunLeaseRequest,
) -> Result<pb::ReleaseRunLeaseResponse, WsError> {
    let (cell, run) = run_key(&r.cell_id, &r.run_id)?;
    ws.release_lease(&cell, &run, &r.holder, r.epoch).await?;
    Ok(pb::ReleaseRunLeaseResponse {})
}
