//! The cancel of one call by the client that asked for it (an MCP client's
//! `notifications/cancelled` at the MCP face), beside the cancel of the whole run.
//!
//! The layer that received the call runs its turn inside [`scope`] with a flag it sets when the
//! client cancels; the executors watch it exactly as they watch the run's cancel: a call not sent
//! yet is not sent, a call in flight is dropped (its host is told to stop) and answered and
//! journalled as cancelled with an unknown outcome. It is task-local, so that the turn pipeline
//! and the runtime-driven loop between the two need not carry it; it does not cross
//! `tokio::spawn`, and nothing here spawns a call.

use std::future::Future;
use std::sync::Arc;

use crate::state::{CancelFlag, Invocation, Stop};

tokio::task_local! {
    static CALL_CANCEL: Arc<CancelFlag>;
}

/// Runs `turn` with `flag` as the cancel of its call.
pub async fn scope<F: Future>(flag: Arc<CancelFlag>, turn: F) -> F::Output {
    CALL_CANCEL.scope(flag, turn).await
}

/// Whether the client cancelled the call being run.
pub fn is_cancelled() -> bool {
    CALL_CANCEL.try_with(|f| f.is_set()).unwrap_or(false)
}

/// What stops a call in flight of `inv`: its run's cancel, and the client's cancel of the call
/// when it has one.
pub fn stop(inv: &Invocation) -> Stop {
    let run = Arc::clone(&inv.run);
    match CALL_CANCEL.try_with(Arc::clone) {
        Ok(flag) => Stop::task(run, flag),
        Err(_) => Stop::run(run),
    }
}

/// Who stopped a call: the client, unless the run was cancelled.
pub fn who(inv: &Invocation) -> &'static str {
    if inv.run.is_cancelled() {
        "the run was cancelled"
    } else {
        "the client cancelled the call"
    }
}
