//! `persist/`: the chat-level persistent root, projected into a run at start and promoted back
//! when the run succeeds. Owns the chat's persist state (`cells/<cell>/chats/<chat>/
//! persist/state.json`: path → SHA-256) and its content-addressed blobs; must never promote
//! without a compare-and-swap against the version captured at run start, so two runs of one chat
//! cannot both win.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use toolplane_store::{Key, Precondition, StoreError, Version};

use crate::{
    engine::{Workspace, sha256_hex},
    error::WsError,
    paths::PERSIST_ROOT,
    runs::FileMap,
    tree::Read,
};

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct PersistState {
    files: FileMap,
    /// The run whose promotion made this state: its promotion asked again (the first was cut
    /// short after the swap, before the run's record says so) is answered with this version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    promoted_by: Option<String>,
}

fn state_key(cell: &str, chat: &str) -> Result<Key, WsError> {
    Ok(Key::new(format!(
        "cells/{cell}/chats/{chat}/persist/state.json"
    ))?)
}

fn blob_key(cell: &str, chat: &str, sha: &str) -> Result<Key, WsError> {
    Ok(Key::new(format!(
        "cells/{cell}/chats/{chat}/persist/blobs/{sha}"
    ))?)
}

async fn load(
    ws: &Workspace,
    cell: &str,
    chat: &str,
) -> Result<(Option<Version>, PersistState), WsError> {
    let key = state_key(cell, chat)?;
    match ws.store().get(&key).await? {
        None => Ok((None, PersistState::default())),
        Some(object) => {
            let state = serde_json::from_slice(&object.bytes)
                .map_err(|e| WsError::io(format!("corrupt persist state {key}: {e}")))?;
            Ok((Some(object.version), state))
        }
    }
}

/// Copies the chat's `persist/` into a new run's tree; returns the captured version (empty when
/// the chat has none yet).
pub async fn project(ws: &Workspace, cell: &str, chat: &str, run: &str) -> Result<String, WsError> {
    let (version, state) = load(ws, cell, chat).await?;
    let base = ws.tree().run_dir(cell, run);
    for (path, sha) in &state.files {
        let Some(blob) = ws.store().get(&blob_key(cell, chat, sha)?).await? else {
            return Err(WsError::io(format!(
                "persist blob {sha} of chat {chat} is missing"
            )));
        };
        let rel = format!("{PERSIST_ROOT}/{path}");
        let base = base.clone();
        ws.blocking(move |tree| tree.write_durable(&base, &rel, &blob.bytes))
            .await?;
    }
    Ok(version.map(|v| v.as_str().to_owned()).unwrap_or_default())
}

/// Promotes the run's `persist/` back to the chat with CAS against `base_version`. Returns the
/// new version and the changed paths (added, changed or removed); for a run whose promotion is
/// already the chat's state, that version and no paths.
pub async fn promote(
    ws: &Workspace,
    cell: &str,
    chat: &str,
    run: &str,
    base_version: &str,
) -> Result<(String, Vec<String>), WsError> {
    let base = ws.tree().run_dir(cell, run);
    let max = ws.limits().max_list_entries * 50;
    let files: Vec<(String, Vec<u8>)> = ws
        .blocking(move |tree| {
            let (names, truncated) = tree.list_files(&base, PERSIST_ROOT, max)?;
            if truncated {
                return Err(WsError::invalid_request(format!(
                    "persist/ holds more than {max} files"
                )));
            }
            let mut out = Vec::new();
            for name in names {
                if let Read::File(bytes) = tree.read(&base, &name)? {
                    out.push((name[PERSIST_ROOT.len() + 1..].to_owned(), bytes));
                }
            }
            Ok(out)
        })
        .await?;
    let (current, old) = load(ws, cell, chat).await?;
    let current_str = current
        .as_ref()
        .map(|v| v.as_str().to_owned())
        .unwrap_or_default();
    if current_str != base_version {
        if old.promoted_by.as_deref() == Some(run) {
            return Ok((current_str, Vec::new()));
        }
        return Err(conflict(chat));
    }
    let mut next = PersistState {
        files: BTreeMap::new(),
        promoted_by: Some(run.to_owned()),
    };
    for (path, bytes) in &files {
        let sha = sha256_hex(bytes);
        match ws
            .store()
            .put_create(&blob_key(cell, chat, &sha)?, bytes.clone())
            .await
        {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        next.files.insert(path.clone(), sha);
    }
    let changed = changed_paths(&old, &next);
    let bytes = serde_json::to_vec_pretty(&next).map_err(|e| WsError::io(e.to_string()))?;
    let expected = match current {
        Some(v) => Precondition::Version(v),
        None => Precondition::Absent,
    };
    match ws
        .store()
        .put_cas(&state_key(cell, chat)?, bytes, expected)
        .await
    {
        Ok(version) => Ok((version.as_str().to_owned(), changed)),
        Err(StoreError::Conflict { .. }) => Err(conflict(chat)),
        Err(e) => Err(e.into()),
    }
}

/// The `persist/` paths `next` adds, changes or removes against `old`, sorted.
fn changed_paths(old: &PersistState, next: &PersistState) -> Vec<String> {
    let mut changed: Vec<String> = next
        .files
        .iter()
        .filter(|(p, s)| old.files.get(*p) != Some(*s))
        .map(|(p, _)| format!("{PERSIST_ROOT}/{p}"))
        .collect();
    changed.extend(
        old.files
            .keys()
            .filter(|p| !next.files.contains_key(*p))
            .map(|p| format!("{PERSIST_ROOT}/{p}")),
    );
    changed.sort();
    changed
}

fn conflict(chat: &str) -> WsError {
    WsError::status(
        "workspace.persist_conflict",
        tonic::Code::FailedPrecondition,
        format!(
            "chat {chat}'s persist/ changed since this run started; its changes were not promoted"
        ),
    )
}
