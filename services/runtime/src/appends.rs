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

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;
use toolplane_proto::v1 as pb;

use crate::peers::Peers;

/// Requests to the workspace in flight at once; more appends queue for the next of them.
const MAX_IN_FLIGHT: usize = 2;
/// Most appends one `AppendJournals` request carries (the workspace accepts 256).
const MAX_BATCH: usize = 64;

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
    appends: Arc<Appends>,
    peers: Peers,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = lock(&self.appends.state);
        if state.queue.is_empty() {
            state.in_flight -= 1;
            return;
        }
        let batch = take_batch(&mut state);
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
            appends: Arc::clone(&self.appends),
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

fn take_batch(state: &mut State) -> Vec<(pb::AppendJournalRequest, Reply)> {
    let n = state.queue.len().min(MAX_BATCH);
    state.queue.drain(..n).collect()
}

async fn send_batch(peers: &Peers, batch: Vec<(pb::AppendJournalRequest, Reply)>) {
    if batch.len() == 1 {
        for (request, reply) in batch {
            let result = peers.workspace().append_journal(request).await.map(|_| ());
            let _ = reply.send(result);
        }
        return;
    }
    let (requests, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    let count = requests.len();
    match peers
        .workspace()
        .append_journals(pb::AppendJournalsRequest { appends: requests })
        .await
    {
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

impl Appends {
    /// Sends one append and returns what the workspace answered for it.
    pub async fn append(
        self: &Arc<Self>,
        peers: &Peers,
        request: pb::AppendJournalRequest,
    ) -> Result<(), tonic::Status> {
        let route = {
            let mut state = lock(&self.state);
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
                    appends: Arc::clone(self),
                    peers: peers.clone(),
                };
                let result = peers.workspace().append_journal(request).await.map(|_| ());
                drop(slot);
                result
            }
        }
    }
}
