//! The cell a request acts in comes from the caller's credential, never from the request
//! (docs/auth.md, "Cells"): [`scoped`] replaces every cell a message names
//! ([`toolplane_proto::cells::CellScoped`]) by the caller's — an empty cell becomes the caller's,
//! another cell is refused (PERMISSION_DENIED). Every service keeps its state per cell, so an id
//! of another cell is then looked up in the caller's cell and answered exactly like one that does
//! not exist. With authentication off (no caller, or `CallerKind::AuthOff`) the message is left
//! as it is. The catalog, the workspace and the mcp-proxy take every message through here.

use tonic::{Request, Status};
use toolplane_auth::Caller;
use toolplane_proto::cells::CellScoped;

/// The request's message with every cell it names replaced by the caller's (see the module).
pub fn scoped<T: CellScoped>(request: Request<T>) -> Result<T, Status> {
    let caller = request
        .extensions()
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(|| Caller::auth_off(""));
    let mut message = request.into_inner();
    for cell in message.cells() {
        *cell = caller.scope(cell).map_err(|e| e.to_status())?;
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use toolplane_auth::{CallerKind, Role};
    use toolplane_proto::v1 as pb;

    use super::*;

    fn as_caller<T>(cell: &str, kind: CallerKind, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.extensions_mut().insert(Caller {
            cell: cell.into(),
            role: Role::Admin,
            principal: "tok".into(),
            kind,
        });
        request
    }

    fn get(cell: &str) -> pb::GetServerRequest {
        pb::GetServerRequest {
            cell_id: cell.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_callers_cell_replaces_the_requests() {
        let own = scoped(as_caller("b", CallerKind::Token, get(""))).unwrap();
        assert_eq!(own.cell_id, "b");
        let named = scoped(as_caller("b", CallerKind::Token, get("b"))).unwrap();
        assert_eq!(named.cell_id, "b");
        let other = scoped(as_caller("b", CallerKind::Token, get("a"))).unwrap_err();
        assert_eq!(other.code(), tonic::Code::PermissionDenied);
        // Authentication off: the request's cell as it is.
        let off = scoped(as_caller("default", CallerKind::AuthOff, get("a"))).unwrap();
        assert_eq!(off.cell_id, "a");
        assert_eq!(scoped(Request::new(get("a"))).unwrap().cell_id, "a");
    }
}
