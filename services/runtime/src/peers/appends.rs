//! Journal appends on their way to the workspace service. Owns how appends of different runs share
//! requests; must never delay an append while a request slot is free, never send two appends of
//! one run in one request (a run's journal appends one at a time, under its sequence lock), and
//! never leave a queued append without a sender, even when the caller that held a slot is
//! cancelled.
//!
//! An append takes one of [`MAX_IN_FLIGHT`] request slots and goes alone as `AppendJournal`, as
//! a single caller's always does. While every slot is busy, appends queue; a slot whose request
//! returns sends what queued as one `AppendJournals` request (up to [`MAX_BATCH`] appends) before
//! it is freed. Under load, so, many invocations' appends cost one request: one round trip and
//! one wake-up of the log writer instead of one each.

use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;
use toolplane_proto::v1 as pb;

use super::Peers;

/// Requests to the workspace in flight at once; more appends queue for the next of them.
const MAX_IN_FLIGHT: usize = 2;
/// Most appends one `AppendJournals` request carries (the workspace accepts 256).
const MAX_BATCH: usize = 64;
/// Most bytes of appends one `AppendJournals` request carries, well below the workspace's largest
/// request, so that a batch is never refused for its size when its appends alone would not be.
const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

type Reply = oneshot::Sender<Result<(), tonic::Status>>;

#[derive(Debug, Default)]
struct State {
    in_flight: usize,
    queue: Vec<(pb::AppendJournalRequest, Reply)>,
}

/// The appends of every run of this runtime, shared by all of them.
#[derive(Debug, Default)]
pub struct Appends {
    state: Mutex<State>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A request slot; dropped (also when its caller is cancelled), it sends what queued meanwhile
/// or frees the slot.
struct Slot {
    peers: Peers,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = lock(&self.peers.appends().state);
        let batch = take_batch(&mut state);
        if batch.is_empty() {
            state.in_flight -= 1;
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime left to send with (the process is stopping): nothing more is sent.
            state.in_flight -= 1;
            let rest: Vec<_> = state.queue.drain(..).collect();
            drop(state);
            for (_, reply) in batch.into_iter().chain(rest) {
                let _ = reply.send(Err(tonic::Status::unavailable(
                    "the runtime is stopping; the journal append was not sent",
                )));
            }
            return;
        };
        drop(state);
        let slot = Slot {
            peers: self.peers.clone(),
        };
        // Sent on a task of its own: the caller that held the slot is answered already.
        runtime.spawn(async move {
            send_batch(&slot.peers, batch).await;
            drop(slot);
        });
    }
}

enum Route {
    /// A slot is free: the caller sends its own append.
    Send(pb::AppendJournalRequest),
    /// Every slot is busy: the append waits for the next to free up.
    Wait(oneshot::Receiver<Result<(), tonic::Status>>),
}

/// Takes the next request's appends from the queue, oldest first: at most [`MAX_BATCH`] and
/// [`MAX_BATCH_BYTES`] (one larger append goes alone), one per run (a later append of a run
/// already taken waits for the next request), and none whose caller is gone (it was cancelled
/// before its append was sent, so the append is not sent: its run's journal did not advance).
fn take_batch(state: &mut State) -> Vec<(pb::AppendJournalRequest, Reply)> {
    let mut batch: Vec<(pb::AppendJournalRequest, Reply)> = Vec::new();
    let mut bytes = 0;
    let mut rest = Vec::new();
    for (request, reply) in state.queue.drain(..) {
        if reply.is_closed() {
            continue;
        }
        let size = prost::Message::encoded_len(&request);
        let full = batch.len() >= MAX_BATCH
            || (!batch.is_empty() && bytes + size > MAX_BATCH_BYTES)
            || batch
                .iter()
                .any(|(b, _)| b.run_id == request.run_id && b.cell_id == request.cell_id);
        if full {
            rest.push((request, reply));
        } else {
            bytes += size;
            batch.push((request, reply));
        }
    }
    state.queue = rest;
    batch
}

/// One append on its own, sent again while the workspace is unavailable (a byte-identical retry
/// of committed records is accepted).
async fn append_one(peers: &Peers, request: pb::AppendJournalRequest) -> Result<(), tonic::Status> {
    super::again::again("append_journal", || {
        let mut client = peers.workspace();
        let request = request.clone();
        async move { client.append_journal(request).await }
    })
    .await
    .map(|_| ())
}

async fn send_batch(peers: &Peers, mut batch: Vec<(pb::AppendJournalRequest, Reply)>) {
    if batch.len() == 1
        && let Some((request, reply)) = batch.pop()
    {
        let _ = reply.send(append_one(peers, request).await);
        return;
    }
    let (requests, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    let count = requests.len();
    let request = pb::AppendJournalsRequest { appends: requests };
    // Each append is a byte-identical retry if its first attempt was committed: sent again whole.
    let sent = super::again::again("append_journals", || {
        let mut client = peers.workspace();
        let request = request.clone();
        async move { client.append_journals(request).await }
    })
    .await;
    match sent {
        Ok(response) => {
            let outcomes = response.into_inner().outcomes;
            if outcomes.len() != count {
                let status = tonic::Status::internal(format!(
                    "the workspace answered {} outcomes for {count} appends",
                    outcomes.len()
                ));
                for reply in replies {
                    let _ = reply.send(Err(status.clone()));
                }
                return;
            }
            for (outcome, reply) in outcomes.into_iter().zip(replies) {
                let result = if outcome.code == 0 {
                    Ok(())
                } else {
                    Err(tonic::Status::new(
                        tonic::Code::from_i32(outcome.code),
                        outcome.message,
                    ))
                };
                let _ = reply.send(result);
            }
        }
        Err(status) => {
            for reply in replies {
                let _ = reply.send(Err(status.clone()));
            }
        }
    }
}

/// Sends one append of `peers`' runtime and returns what the workspace answered for it.
pub async fn append(peers: &Peers, request: pb::AppendJournalRequest) -> Result<(), tonic::Status> {
    let route = {
        let mut state = lock(&peers.appends().state);
        if state.in_flight < MAX_IN_FLIGHT {
            state.in_flight += 1;
            Route::Send(request)
        } else {
            let (tx, rx) = oneshot::channel();
            state.queue.push((request, tx));
            Route::Wait(rx)
        }
    };
    match route {
        Route::Wait(rx) => rx.await.unwrap_or_else(|_| {
            Err(tonic::Status::unavailable(
                "the journal append was dropped before it was sent",
            ))
        }),
        Route::Send(request) => {
            let slot = Slot {
                peers: peers.clone(),
            };
            let result = append_one(peers, request).await;
            drop(slot);
            result
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(run: &str, cell: &str, bytes: usize) -> pb::AppendJournalRequest {
        pb::AppendJournalRequest {
            run_id: run.into(),
            cell_id: cell.into(),
            expected_seq: 1,
            objects: vec![pb::AuditObjectWrite {
                path: "tool-args/i/c.json".into(),
                content: vec![b'x'; bytes],
                content_type: String::new(),
            }],
            ..Default::default()
        }
    }

    fn queue(
        appends: Vec<pb::AppendJournalRequest>,
    ) -> (State, Vec<oneshot::Receiver<Result<(), tonic::Status>>>) {
        let mut state = State::default();
        let mut receivers = Vec::new();
        for a in appends {
            let (tx, rx) = oneshot::channel();
            state.queue.push((a, tx));
            receivers.push(rx);
        }
        (state, receivers)
    }

    fn runs(batch: &[(pb::AppendJournalRequest, Reply)]) -> Vec<String> {
        batch.iter().map(|(a, _)| a.run_id.clone()).collect()
    }

    #[test]
    fn a_batch_holds_one_append_per_run_and_skips_cancelled_callers() {
        let (mut state, mut receivers) = queue(vec![
            append("r1", "", 10),
            append("r2", "", 10),
            append("r1", "", 10),
            append("r3", "", 10),
            append("r3", "other", 10),
        ]);
        // r2's caller was cancelled while its append waited.
        drop(receivers.remove(1));
        let batch = take_batch(&mut state);
        assert_eq!(runs(&batch), ["r1", "r3", "r3"]);
        assert_eq!(
            batch[2].0.cell_id, "other",
            "another cell's run of that id is another run"
        );
        // r1's second append waits for the next request, in order.
        let next = take_batch(&mut state);
        assert_eq!(runs(&next), ["r1"]);
        assert!(take_batch(&mut state).is_empty());
    }

    #[test]
    fn a_batch_stays_within_its_count_and_bytes_and_a_large_append_goes_alone() {
        let (mut state, _receivers) = queue(
            (0..MAX_BATCH + 5)
                .map(|n| append(&format!("r{n}"), "", 10))
                .collect(),
        );
        assert_eq!(take_batch(&mut state).len(), MAX_BATCH);
        assert_eq!(take_batch(&mut state).len(), 5);

        let big = MAX_BATCH_BYTES / 2 + 1;
        let (mut state, _receivers) = queue(vec![
            append("a", "", big),
            append("b", "", big),
            append("c", "", MAX_BATCH_BYTES + 1),
            append("d", "", 10),
        ]);
        assert_eq!(runs(&take_batch(&mut state)), ["a", "d"]);
        assert_eq!(runs(&take_batch(&mut state)), ["b"]);
        assert_eq!(runs(&take_batch(&mut state)), ["c"], "alone, however large");
        assert!(take_batch(&mut state).is_empty());
    }
}
