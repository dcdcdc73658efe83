//! The cell a request acts in comes from the caller's credential, never from the request
//! (docs/auth.md, "Cells"). Every handler takes its message through [`scoped`], which replaces
//! the cell the message names by the caller's: an empty cell becomes the caller's, another cell
//! is refused (PERMISSION_DENIED). Tool hosts, profiles, platform and user policies are all kept
//! per cell, so a profile id of another cell is then looked up in the caller's cell and answered
//! exactly like one that does not exist. With authentication off (no caller, or
//! `CallerKind::AuthOff`) the message is left as it is.

use tonic::{Request, Status};
use toolplane_auth::Caller;
use toolplane_proto::v1 as pb;

/// A request message that names the cell it acts in, once or more.
pub(crate) trait CellScoped {
    /// Every cell the message names.
    fn cells(&mut self) -> Vec<&mut String>;
}

macro_rules! cell_field {
    ($($message:ty),* $(,)?) => {
        $(impl CellScoped for $message {
            fn cells(&mut self) -> Vec<&mut String> {
                vec![&mut self.cell_id]
            }
        })*
    };
}

cell_field!(
    pb::ListToolsRequest,
    pb::GetToolRequest,
    pb::DescribeToolsRequest,
    pb::RegisterToolsRequest,
    pb::DeregisterToolsRequest,
    pb::ListToolHostsRequest,
    pb::RefreshSourcesRequest,
    pb::PutProfileRequest,
    pb::GetProfileRequest,
    pb::ListProfilesRequest,
    pb::DeleteProfileRequest,
    pb::PutPlatformPolicyRequest,
    pb::GetPlatformPolicyRequest,
    pb::PutUserPolicyRequest,
    pb::GetUserPolicyRequest,
    pb::ResolveProfileRequest,
);

/// The request's message with every cell it names replaced by the caller's (see the module).
pub(crate) fn scoped<T: CellScoped>(request: Request<T>) -> Result<T, Status> {
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
