//! Chat messages as the storage RPCs see them: appends by the plane, pages of a chat, and a run's
//! commit of a workspace file as its chat message (replacing or appending to the message the run
//! is bound to). Must never commit a file the run cannot see, one that is not UTF-8 text, or one
//! whose content changed from what the caller expected.

use toolplane_text::check_text;

use crate::{
    chat::{StoredMessage, new_message_id},
    engine::{Workspace, now_ms, sha256_hex},
    error::WsError,
    paths::{self, READ_ONLY_ROOTS},
    tree::Read,
};

/// A message the plane appends to a chat.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub role: &'static str,
    pub name: String,
    pub content: String,
    /// A JSON object as text, if any.
    pub metadata_json: Option<String>,
}

/// A run's commit of a workspace file as its chat message.
#[derive(Debug, Clone)]
pub struct Commit {
    pub epoch: u64,
    pub source_path: String,
    /// Refuse the commit unless the file's SHA-256 is this.
    pub expected_source_sha256: Option<String>,
    /// Append to the run's message instead of replacing its text.
    pub append: bool,
}

/// What a commit did.
#[derive(Debug, Clone)]
pub struct Committed {
    pub index: u64,
    pub message: StoredMessage,
    pub source_sha256: String,
    /// A new message was made (the run had none bound yet).
    pub created: bool,
}

impl Workspace {
    /// Appends a message to a chat (at `expected_index` when given); returns its index and it.
    pub async fn append_chat_message(
        &self,
        cell: &str,
        chat: &str,
        new: NewMessage,
        expected_index: Option<u64>,
    ) -> Result<(u64, StoredMessage), WsError> {
        let metadata = match &new.metadata_json {
            Some(text) => {
                let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
                    WsError::invalid_request(format!("metadata_json is not JSON: {e}"))
                })?;
                if !v.is_object() {
                    return Err(WsError::invalid_request(
                        "metadata_json must be a JSON object",
                    ));
                }
                Some(v)
            }
            None => None,
        };
        let message = StoredMessage {
            message_id: new_message_id(),
            role: new.role.to_owned(),
            name: new.name,
            content: new.content,
            run_id: String::new(),
            metadata,
            created_at_unix_ms: 0,
            updated_at_unix_ms: 0,
        };
        self.chats()
            .append(cell, chat, message, expected_index)
            .await
    }

    /// The messages of a chat from index `start`, at most `page`, each with its index, and the
    /// index to continue from (`None` at the end).
    pub async fn chat_messages(
        &self,
        cell: &str,
        chat: &str,
        start: usize,
        page: usize,
    ) -> Result<(Vec<(u64, StoredMessage)>, Option<usize>), WsError> {
        let (messages, _) = self.chats().load(cell, chat).await?;
        let end = (start + page).min(messages.len());
        let out = messages
            .get(start..end)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, m)| ((start + i) as u64, m.clone()))
            .collect();
        Ok((out, (end < messages.len()).then_some(end)))
    }

    /// Commits a visible workspace file of the run as the run's chat message: replaces (or
    /// appends to) the message the run is bound to, or creates one and binds the run to it.
    pub async fn commit_run_message(
        &self,
        cell: &str,
        run_id: &str,
        commit: Commit,
    ) -> Result<Committed, WsError> {
        let run = self.run(cell, run_id).await?;
        let record = self.runs().check_epoch(&run, commit.epoch, false).await?;
        let (text, sha) = self
            .commit_source(cell, run_id, &record.roots, &commit)
            .await?;
        let append = commit.append;
        let bound = record.message_id.clone();
        // The run's message has an id its run decides: a commit sent again after its chat write
        // landed but before the binding below did finds the message and replaces it, instead of
        // adding a second one.
        let id = bound.clone().unwrap_or_else(|| run_message_id(run_id));
        let now = now_ms();
        let (index, message, created) = self
            .chats()
            .modify(cell, &record.chat_id, |messages| {
                if let Some((i, m)) = messages
                    .iter_mut()
                    .enumerate()
                    .find(|(_, m)| m.message_id == id)
                {
                    if append {
                        m.content.push_str(&text)
                    } else {
                        m.content.clone_from(&text)
                    }
                    m.updated_at_unix_ms = now;
                    return Ok((i as u64, m.clone(), false));
                }
                let message = StoredMessage {
                    message_id: id.clone(),
                    role: "assistant".into(),
                    name: String::new(),
                    content: text.clone(),
                    run_id: run_id.to_owned(),
                    metadata: None,
                    created_at_unix_ms: now,
                    updated_at_unix_ms: now,
                };
                messages.push(message.clone());
                Ok((messages.len() as u64 - 1, message, true))
            })
            .await?;
        if bound.is_none() {
            let id = message.message_id.clone();
            self.runs()
                .update(&run, |r| {
                    let change = r.message_id.is_none();
                    if change {
                        r.message_id = Some(id.clone());
                    }
                    Ok(change)
                })
                .await?;
        }
        Ok(Committed {
            index,
            message,
            source_sha256: sha,
            created,
        })
    }

    /// The text of a commit's source file and its SHA-256: a visible, non-empty UTF-8 file at
    /// the expected version.
    async fn commit_source(
        &self,
        cell: &str,
        run_id: &str,
        roots: &paths::Roots,
        commit: &Commit,
    ) -> Result<(String, String), WsError> {
        let invalid = |m: String| {
            WsError::status(
                "workspace.commit_source_invalid",
                tonic::Code::FailedPrecondition,
                m,
            )
        };
        let path = paths::parse(&commit.source_path, false)
            .map_err(|e| invalid(e.message().to_owned()))?;
        if !roots.can_see(&path) || READ_ONLY_ROOTS.contains(&path.root()) {
            return Err(invalid(format!("{path} is not a visible workspace file")));
        }
        let base = self.tree().run_dir(cell, run_id);
        let rel = path.as_str().to_owned();
        let bytes = match self.blocking(move |tree| tree.read(&base, &rel)).await? {
            Read::Absent => return Err(invalid(format!("{path} does not exist"))),
            Read::Dir => return Err(invalid(format!("{path} is a folder"))),
            Read::File(bytes) => bytes,
        };
        let text = check_text(&bytes)
            .map_err(|e| invalid(format!("{path} is not UTF-8 text ({e})")))?
            .to_owned();
        if text.trim().is_empty() {
            return Err(invalid(format!("{path} is empty")));
        }
        let sha = sha256_hex(&bytes);
        if let Some(expected) = &commit.expected_source_sha256
            && *expected != sha
        {
            return Err(invalid(format!(
                "{path} changed: its sha256 is {sha}, not {expected}"
            )));
        }
        Ok((text, sha))
    }
}

/// The id of the chat message a run's commits write: one per run, the same on every replica and
/// every retry.
fn run_message_id(run_id: &str) -> String {
    format!("m-run-{run_id}")
}
