//! The chat store: each chat's messages as JSON lines (`cells/<cell>/chats/<chat>/messages.jsonl`,
//! a header line then one message per line, index = line number - 1 after the header). Owns
//! append and replace of messages with compare-and-swap; must never lose a concurrent append
//! (every change is a CAS on the whole file, retried on conflict).

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolplane_store::{Key, Precondition, Store, StoreError};

use crate::{engine::now_ms, error::WsError, limits::Limits};

/// One stored message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMessage {
    pub message_id: String,
    /// `user`, `assistant` or `system`.
    pub role: String,
    #[serde(default)]
    pub name: String,
    pub content: String,
    #[serde(default)]
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    pub created_at_unix_ms: i64,
    pub updated_at_unix_ms: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    chat: String,
    format: String,
}

static IDS: AtomicU64 = AtomicU64::new(0);

/// A new message id, unique within this process and very likely across restarts.
pub fn new_message_id() -> String {
    format!(
        "m-{:x}-{:x}-{:x}",
        now_ms(),
        std::process::id(),
        IDS.fetch_add(1, Ordering::Relaxed)
    )
}

/// The chats of every cell.
#[derive(Debug)]
pub struct Chats {
    store: Arc<dyn Store>,
    limits: Limits,
}

fn key(cell: &str, chat: &str) -> Result<Key, WsError> {
    Ok(Key::new(format!(
        "cells/{cell}/chats/{chat}/messages.jsonl"
    ))?)
}

impl Chats {
    pub fn new(store: Arc<dyn Store>, limits: Limits) -> Chats {
        Chats { store, limits }
    }

    /// The chat's messages (empty when it has none) and the stored version.
    pub async fn load(
        &self,
        cell: &str,
        chat: &str,
    ) -> Result<(Vec<StoredMessage>, Option<toolplane_store::Version>), WsError> {
        let key = key(cell, chat)?;
        let Some(object) = self.store.get(&key).await? else {
            return Ok((Vec::new(), None));
        };
        let text = std::str::from_utf8(&object.bytes)
            .map_err(|e| WsError::io(format!("chat {chat} is not utf-8: {e}")))?;
        let mut messages = Vec::new();
        for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
            messages.push(
                serde_json::from_str(line)
                    .map_err(|e| WsError::io(format!("corrupt chat {chat}: {e}")))?,
            );
        }
        Ok((messages, Some(object.version)))
    }

    fn encode(chat: &str, messages: &[StoredMessage]) -> Result<Vec<u8>, WsError> {
        let mut out = serde_json::to_vec(&Header {
            chat: chat.to_owned(),
            format: "toolplane.chat.v1".into(),
        })
        .map_err(|e| WsError::io(e.to_string()))?;
        out.push(b'\n');
        for m in messages {
            out.extend(serde_json::to_vec(m).map_err(|e| WsError::io(e.to_string()))?);
            out.push(b'\n');
        }
        Ok(out)
    }

    /// Applies `change` to the chat with CAS, retrying on conflicts; returns what `change` returned.
    pub async fn modify<T, F>(&self, cell: &str, chat: &str, mut change: F) -> Result<T, WsError>
    where
        F: FnMut(&mut Vec<StoredMessage>) -> Result<T, WsError>,
    {
        let key = key(cell, chat)?;
        for _ in 0..32 {
            let (mut messages, version) = self.load(cell, chat).await?;
            let out = change(&mut messages)?;
            if messages.len() > self.limits.max_chat_messages {
                return Err(WsError::invalid_request(format!(
                    "chat {chat} would hold more than {} messages",
                    self.limits.max_chat_messages
                )));
            }
            let expected = match version {
                Some(v) => Precondition::Version(v),
                None => Precondition::Absent,
            };
            match self
                .store
                .put_cas(&key, Self::encode(chat, &messages)?, expected)
                .await
            {
                Ok(_) => return Ok(out),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(WsError::status(
            "workspace.chat_conflict",
            tonic::Code::Aborted,
            format!("chat {chat} kept changing; retry"),
        ))
    }

    /// Appends a message; with `expected_index`, only if it would get that index.
    pub async fn append(
        &self,
        cell: &str,
        chat: &str,
        mut message: StoredMessage,
        expected_index: Option<u64>,
    ) -> Result<(u64, StoredMessage), WsError> {
        if message.content.len() > self.limits.max_chat_message_bytes {
            return Err(WsError::invalid_request(format!(
                "message is {} bytes, over the limit of {}",
                message.content.len(),
                self.limits.max_chat_message_bytes
            )));
        }
        let now = now_ms();
        message.created_at_unix_ms = now;
        message.updated_at_unix_ms = now;
        self.modify(cell, chat, |messages| {
            let index = messages.len() as u64;
            if let Some(expected) = expected_index
                && expected != index
            {
                return Err(WsError::status(
                    "workspace.chat_conflict",
                    tonic::Code::Aborted,
                    format!("the chat has {index} messages, not {expected}"),
                ));
            }
            messages.push(message.clone());
            Ok((index, message.clone()))
        })
        .await
    }
}
