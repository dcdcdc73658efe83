//! The one auto-publish before the first explicit commit: after a round, the last successful
//! write or patch of the round is published into the chat message if it is a text file under the
//! message artifact root of a foreground run that has not committed yet.

use serde_json::json;
use toolplane_core::builtin;

use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::state::{Event, Invocation, InvocationInner, RunMode};
use crate::tools::control;

pub async fn auto_publish(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    last_mutation: Option<String>,
) -> Result<(), RuntimeError> {
    let Some(path) = last_mutation else {
        return Ok(());
    };
    let record = inv.run.snapshot();
    let text = [".md", ".markdown", ".txt"]
        .iter()
        .any(|s| path.ends_with(s));
    let root = &inner.snapshot.workspace.message_artifact_root;
    if record.mode != RunMode::Foreground
        || record.committed
        || record.auto_published
        || !text
        || !path.starts_with(root.as_str())
    {
        return Ok(());
    }
    if inner.snapshot.builtin(builtin::WORKSPACE_COMMIT).is_none()
        && !matches!(
            inner.snapshot.exit_policy,
            toolplane_core::ExitPolicy::Root | toolplane_core::ExitPolicy::Handoff { .. }
        )
    {
        return Ok(());
    }
    match control::commit(rt, inv, &path, false).await? {
        Ok((message_id, _)) => {
            inv.run.update(|r| r.auto_published = true);
            rt.persist_run(&inv.run).await?;
            let ev = Event::new("chat_message_committed", json!({"invocationId": inv.id, "path": path, "messageId": message_id, "auto": true})).inv(&inv.id);
            rt.append(&inv.run, inv.run.epoch(), Vec::new(), vec![ev])
                .await?;
        }
        Err(refused) => {
            let ev = Event::new("chat_message_committed", json!({"invocationId": inv.id, "path": path, "auto": true, "skipped": refused.message, "errorCode": refused.code})).inv(&inv.id).warn();
            rt.append(&inv.run, inv.run.epoch(), Vec::new(), vec![ev])
                .await?;
        }
    }
    Ok(())
}
