//! Retry-safe creates: the first answer to a request's `request_id`, given again to its retries
//! (docs/errors.md, "Retrying creates").
//!
//! A [`Replays`] belongs to one RPC of one server. A request with an empty `request_id` simply
//! runs. The first request with a key runs; a retry with the same key and an equal request (the
//! same fields; map entries in any order) gets the first one's answer without running again, and
//! one that arrives while the first still runs waits for it; the same key with a different
//! request is refused as [`IDEMPOTENCY_MISMATCH`] (INVALID_ARGUMENT, field `request_id`). Keys
//! are scoped per cell. A request that fails is forgotten, so its retry runs again. Answers are
//! kept in memory for [`KEEP_FOR`], at most [`MAX_KEYS`] keys and [`MAX_BYTES`] of requests per
//! RPC, the oldest dropped first; a restart forgets them.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prost::Message;
use tokio::sync::OnceCell;
use tonic::{Code, Status};

use crate::status::{self, Details, IDEMPOTENCY_MISMATCH};

/// How long an answer is replayed.
pub const KEEP_FOR: Duration = Duration::from_secs(10 * 60);
/// The most keys kept per RPC.
pub const MAX_KEYS: usize = 10_000;
/// The most request bytes kept per RPC.
pub const MAX_BYTES: usize = 64 << 20;

type Key = (String, String);

/// A creating request that takes a `request_id`, and the service that answers it (the
/// `service` of a refusal's `ErrorInfo` metadata, like every other error of that service).
pub trait Keyed {
    /// The service name as the status metadata gives it.
    const SERVICE: &'static str;
}

macro_rules! keyed {
    ($($service:literal => $($message:ident),+;)*) => {
        $($(impl Keyed for crate::v1::$message {
            const SERVICE: &'static str = $service;
        })+)*
    };
}

keyed! {
    "runtime" => CreateRunRequest, StartRunRequest;
    "catalog" => PutProfileRequest, CreateTokenRequest;
    "mcp-proxy" => UpsertServerRequest;
}

struct Entry<Req, Resp> {
    request: Req,
    bytes: usize,
    answer: Arc<OnceCell<Resp>>,
}

struct State<Req, Resp> {
    entries: HashMap<Key, Entry<Req, Resp>>,
    /// Keys in the order they were first seen, with when.
    order: VecDeque<(Key, Instant)>,
    bytes: usize,
}

/// The answers of one RPC's keyed requests.
pub struct Replays<Req, Resp> {
    state: Mutex<State<Req, Resp>>,
}

impl<Req, Resp> std::fmt::Debug for Replays<Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Replays")
    }
}

impl<Req, Resp> Default for Replays<Req, Resp> {
    fn default() -> Self {
        Replays {
            state: Mutex::new(State {
                entries: HashMap::new(),
                order: VecDeque::new(),
                bytes: 0,
            }),
        }
    }
}

impl<Req, Resp> Replays<Req, Resp>
where
    Req: Message + PartialEq + Clone + Keyed,
    Resp: Clone,
{
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `run` once per `(cell, request_id)`; see the module documentation.
    pub async fn once<F, Fut>(
        &self,
        cell: &str,
        request_id: &str,
        request: &Req,
        run: F,
    ) -> Result<Resp, Status>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Resp, Status>>,
    {
        if request_id.is_empty() {
            return run().await;
        }
        let key = (cell.to_owned(), request_id.to_owned());
        let answer = self.slot(&key, request)?;
        match answer.get_or_try_init(run).await {
            Ok(resp) => Ok(resp.clone()),
            Err(status) => {
                self.forget(&key, &answer);
                Err(status)
            }
        }
    }

    /// The answer slot of `key`, new or shared with an equal earlier request.
    fn slot(&self, key: &Key, request: &Req) -> Result<Arc<OnceCell<Resp>>, Status> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.expire(Instant::now());
        if let Some(entry) = state.entries.get(key) {
            if entry.request != *request {
                return Err(status::status(
                    Code::InvalidArgument,
                    IDEMPOTENCY_MISMATCH,
                    &format!(
                        "request_id `{}` was used for a different request in this cell",
                        key.1.chars().take(80).collect::<String>()
                    ),
                    Details::new()
                        .meta("service", Req::SERVICE)
                        .field("request_id", "used before for a different request"),
                ));
            }
            return Ok(Arc::clone(&entry.answer));
        }
        let answer = Arc::new(OnceCell::new());
        let bytes = request.encoded_len() + key.0.len() + key.1.len();
        state.entries.insert(
            key.clone(),
            Entry {
                request: request.clone(),
                bytes,
                answer: Arc::clone(&answer),
            },
        );
        state.order.push_back((key.clone(), Instant::now()));
        state.bytes += bytes;
        Ok(answer)
    }

    /// Drops `key` when it still holds `answer` (a failed first request).
    fn forget(&self, key: &Key, answer: &Arc<OnceCell<Resp>>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state
            .entries
            .get(key)
            .is_some_and(|e| Arc::ptr_eq(&e.answer, answer))
        {
            state.remove(key);
        }
    }
}

impl<Req, Resp> State<Req, Resp> {
    /// Drops what is older than [`KEEP_FOR`] and, oldest first, what is over the bounds.
    fn expire(&mut self, now: Instant) {
        while let Some((key, at)) = self.order.front() {
            let old = now.duration_since(*at) > KEEP_FOR;
            if !old && self.entries.len() < MAX_KEYS && self.bytes < MAX_BYTES {
                break;
            }
            let key = key.clone();
            self.order.pop_front();
            self.remove(&key);
        }
    }

    fn remove(&mut self, key: &Key) {
        if let Some(entry) = self.entries.remove(key) {
            self.bytes = self.bytes.saturating_sub(entry.bytes);
        }
        // A key forgotten after a failure may still be in `order`; a later entry of the same
        // key is then dropped a little early, which only costs a replay.
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::v1 as pb;

    fn request(name: &str, labels: &[(&str, &str)]) -> pb::CreateRunRequest {
        pb::CreateRunRequest {
            profile_id: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_retry_gets_the_first_answer_and_a_different_request_is_refused() {
        let replays: Replays<pb::CreateRunRequest, String> = Replays::new();
        let runs = AtomicUsize::new(0);
        let run = || async {
            let n = runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Status>(format!("run-{n}"))
        };
        let first = request("p", &[("a", "1"), ("b", "2"), ("c", "3")]);
        let same = request("p", &[("c", "3"), ("b", "2"), ("a", "1")]);
        assert_eq!(
            replays.once("default", "k1", &first, run).await.unwrap(),
            "run-0"
        );
        assert_eq!(
            replays.once("default", "k1", &same, run).await.unwrap(),
            "run-0"
        );
        // Another cell, or no key: runs again.
        assert_eq!(
            replays.once("other", "k1", &first, run).await.unwrap(),
            "run-1"
        );
        assert_eq!(
            replays.once("default", "", &first, run).await.unwrap(),
            "run-2"
        );
        let err = replays
            .once("default", "k1", &request("q", &[]), run)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert_eq!(
            status::error_code(&err).as_deref(),
            Some(IDEMPOTENCY_MISMATCH)
        );
        let info = tonic_types::StatusExt::get_details_error_info(&err).unwrap();
        assert_eq!(info.metadata["service"], "runtime");
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_failed_request_is_forgotten() {
        let replays: Replays<pb::CreateRunRequest, String> = Replays::new();
        let req = request("p", &[]);
        let failed = replays
            .once("default", "k", &req, || async {
                Err::<String, _>(Status::unavailable("down"))
            })
            .await;
        assert!(failed.is_err());
        let other = request("q", &[]);
        let ok = replays
            .once("default", "k", &other, || async {
                Ok::<_, Status>("done".to_owned())
            })
            .await;
        assert_eq!(ok.unwrap(), "done");
    }
}
