//! Races of writers on one key and a per-operation timing, shared by the tests of the S3 and
//! PostgreSQL backends.

#![allow(dead_code)]

use std::sync::Arc;

use tokio::{sync::Barrier, task::JoinSet};
use toolplane_store::{Key, Precondition, Store, StoreError};

/// How many writers race on one key, and how many times.
pub const WRITERS: usize = 16;
pub const ROUNDS: usize = 10;

/// `WRITERS` concurrent `put_create`s of one fresh key, `ROUNDS` times: the number of winners of
/// each round (exactly one on an atomic server) and whether the stored bytes are the winner's.
pub async fn create_race(store: Arc<dyn Store>) -> Vec<(usize, bool)> {
    let mut outcomes = Vec::new();
    for round in 0..ROUNDS {
        let key = Key::new(format!("race/create/{round}")).unwrap();
        let winners = race(&store, &key, round, |store, key, bytes| async move {
            store.put_create(&key, bytes).await
        })
        .await;
        outcomes.push(outcome(&store, &key, round, &winners).await);
    }
    outcomes
}

/// `WRITERS` concurrent `put_cas`es from the same version of one key, `ROUNDS` times.
pub async fn cas_race(store: Arc<dyn Store>) -> Vec<(usize, bool)> {
    let key = Key::new("race/cas").unwrap();
    let mut version = store.put_create(&key, b"start".to_vec()).await.unwrap();
    let mut outcomes = Vec::new();
    for round in 0..ROUNDS {
        let from = version.clone();
        let winners = race(&store, &key, round, move |store, key, bytes| {
            let from = from.clone();
            async move {
                store
                    .put_cas(&key, bytes, Precondition::Version(from))
                    .await
            }
        })
        .await;
        outcomes.push(outcome(&store, &key, round, &winners).await);
        version = store.head(&key).await.unwrap().unwrap();
    }
    outcomes
}

/// Runs `WRITERS` writes of distinct bytes at once; the writers that succeeded. A refusal must be
/// `already_exists` or `conflict`, never another error.
///
/// The bytes name the round too: a version is the hash of the bytes, so a writer that wrote the
/// bytes the key already holds (last round's winner, again) would leave its version unchanged and
/// let a second swap from that version win as well.
async fn race<F, Fut>(store: &Arc<dyn Store>, key: &Key, round: usize, write: F) -> Vec<usize>
where
    F: Fn(Arc<dyn Store>, Key, Vec<u8>) -> Fut,
    Fut:
        std::future::Future<Output = Result<toolplane_store::Version, StoreError>> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(WRITERS));
    let mut tasks = JoinSet::new();
    for writer in 0..WRITERS {
        let bytes = writer_bytes(writer, key, round);
        let write = write(Arc::clone(store), key.clone(), bytes);
        let barrier = Arc::clone(&barrier);
        tasks.spawn(async move {
            barrier.wait().await;
            (writer, write.await)
        });
    }
    let mut winners = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined.unwrap() {
            (writer, Ok(_)) => winners.push(writer),
            (_, Err(StoreError::AlreadyExists { .. } | StoreError::Conflict { .. })) => {}
            (writer, Err(e)) => panic!("writer {writer}: {e}"),
        }
    }
    winners
}

fn writer_bytes(writer: usize, key: &Key, round: usize) -> Vec<u8> {
    format!("writer {writer} of {key} in round {round}").into_bytes()
}

async fn outcome(
    store: &Arc<dyn Store>,
    key: &Key,
    round: usize,
    winners: &[usize],
) -> (usize, bool) {
    let stored = store.get(key).await.unwrap().unwrap().bytes;
    let winner_stored = winners
        .iter()
        .any(|&w| stored == writer_bytes(w, key, round));
    (winners.len(), winner_stored)
}

pub fn assert_one_winner_each_round(what: &str, outcomes: &[(usize, bool)]) {
    assert!(
        outcomes
            .iter()
            .all(|&(winners, stored)| winners == 1 && stored),
        "{what}: (winners, the stored bytes are a winner's) per round: {outcomes:?}"
    );
}

/// Mean seconds per `put_create`, `put_cas` and `get` over 200 of each.
pub async fn time_operations(store: &Arc<dyn Store>) -> [(&'static str, f64); 3] {
    use std::time::Instant;
    const N: usize = 200;
    let bytes = vec![7u8; 1024];
    let keys: Vec<Key> = (0..N)
        .map(|i| Key::new(format!("bench/k{i:04}")).unwrap())
        .collect();
    let start = Instant::now();
    let mut versions = Vec::new();
    for key in &keys {
        versions.push(store.put_create(key, bytes.clone()).await.unwrap());
    }
    let create = start.elapsed().as_secs_f64() / N as f64;
    let start = Instant::now();
    for (key, version) in keys.iter().zip(versions) {
        let mut next = bytes.clone();
        next[0] = 8;
        store
            .put_cas(key, next, Precondition::Version(version))
            .await
            .unwrap();
    }
    let cas = start.elapsed().as_secs_f64() / N as f64;
    let start = Instant::now();
    for key in &keys {
        assert!(store.get(key).await.unwrap().is_some());
    }
    let get = start.elapsed().as_secs_f64() / N as f64;
    [("put_create", create), ("put_cas", cas), ("get", get)]
}
