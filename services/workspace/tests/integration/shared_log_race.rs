//! A stale driver racing the lease's new holder on a shared store, and what one append costs in
//! store round trips (docs/workspace.md, "The journal on a shared store").

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::Semaphore;
use toolplane_store::fs::RealFs;
use toolplane_store::{Key, ListPage, Object, Precondition, Store, StoreError, Version};
use toolplane_workspace::{
    Workspace,
    engine::{chats::Commit, objects::ObjectQuery},
    limits::Limits,
    runs::SkillAccess,
    tree::NoHooks,
};

use crate::common::{call_with, serve_tools};
use crate::shared_log::{CELL, all_records, append, create, memory, replicas};

/// What one racing append did: `(epoch, seq, started after the fence returned, answered after
/// it returned)`.
type Landed = Arc<Mutex<Vec<(u64, u64, bool, bool)>>>;

async fn last_seq(ws: &Workspace, run: &str) -> u64 {
    let key = (CELL.to_owned(), run.to_owned());
    let journal = ws.log().journal(&key).await.unwrap();
    journal.last_seq().await.unwrap()
}

/// Appends one record at a time at `epoch` until `rounds` landed or the epoch is refused;
/// returns whether it was refused.
async fn driver(
    ws: Arc<Workspace>,
    name: String,
    epoch: u64,
    rounds: usize,
    fenced: Arc<AtomicBool>,
    landed: Landed,
) -> bool {
    let mut done = 0;
    for i in 0..100_000 {
        let after_fence = fenced.load(Ordering::SeqCst);
        let next = last_seq(&ws, "r3").await + 1;
        match append(&ws, "r3", epoch, next, &[&format!("{name}-{i}")], vec![]).await {
            Ok(seq) => {
                let answered_after = fenced.load(Ordering::SeqCst);
                landed
                    .lock()
                    .unwrap()
                    .push((epoch, seq, after_fence, answered_after));
                done += 1;
                if done == rounds {
                    return false;
                }
            }
            Err(code) if code == "workspace.journal_conflict" => {}
            Err(code) if code == "workspace.stale_epoch" => return true,
            Err(code) => panic!("{name}: unexpected {code}"),
        }
        tokio::task::yield_now().await;
    }
    panic!("{name} never finished");
}

/// Twelve drivers on one run over two replicas: eight of the old epoch append until refused,
/// while the lease moves to a new holder, whose four drivers then append three records each.
/// Long: the race and the checks of its outcome read best in one place. (Whether this race hits
/// the window between a replica's manifest check and the head's write is up to the scheduler;
/// `a_stale_append_held_before_its_commit_is_refused_by_the_fence` holds an append in it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_driver_never_gets_a_record_in_after_the_fence() {
    let (_dir, engines) = replicas(memory(), 2).await;
    let (a, b) = (Arc::clone(&engines[0]), Arc::clone(&engines[1]));
    create(&a, "r3", 0).await;
    let old = a.acquire_lease(CELL, "r3", "old", 60_000).await.unwrap();
    let fenced = Arc::new(AtomicBool::new(false));
    let landed: Landed = Landed::default();
    // Eight tasks of the old driver, half through each replica, append until refused.
    let mut stale = Vec::new();
    for t in 0..8 {
        let ws = Arc::clone(if t % 2 == 0 { &a } else { &b });
        stale.push(tokio::spawn(driver(
            ws,
            format!("stale{t}"),
            old.epoch,
            usize::MAX,
            Arc::clone(&fenced),
            Arc::clone(&landed),
        )));
    }
    while last_seq(&a, "r3").await < 12 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    a.release_lease(CELL, "r3", "old", old.epoch).await.unwrap();
    let new = a.acquire_lease(CELL, "r3", "new", 60_000).await.unwrap();
    // Every record committed before the fence is at or below this.
    let at_fence = last_seq(&b, "r3").await;
    fenced.store(true, Ordering::SeqCst);
    assert!(new.epoch > old.epoch);
    let mut current = Vec::new();
    for t in 0..4 {
        current.push(tokio::spawn(driver(
            Arc::clone(&b),
            format!("new{t}"),
            new.epoch,
            3,
            Arc::clone(&fenced),
            Arc::clone(&landed),
        )));
    }
    for task in stale {
        assert!(
            task.await.unwrap(),
            "every stale task is refused in the end"
        );
    }
    for task in current {
        assert!(!task.await.unwrap());
    }
    let records = all_records(&b, "r3").await;
    let landed = landed.lock().unwrap().clone();
    // Every sequence number once, each from exactly one successful append, with its epoch.
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=records.len() as u64).collect::<Vec<_>>());
    let mut by_seq: BTreeMap<u64, u64> = BTreeMap::new();
    for &(epoch, seq, _, _) in &landed {
        assert!(
            by_seq.insert(seq, epoch).is_none(),
            "seq {seq} landed twice"
        );
    }
    assert_eq!(by_seq.len(), records.len());
    for r in &records {
        assert_eq!(by_seq[&r.seq], r.epoch, "record {}", r.seq);
    }
    // Epochs never go down along the journal, and the new holder's records are there.
    assert!(records.windows(2).all(|w| w[0].epoch <= w[1].epoch));
    assert_eq!(records.iter().filter(|r| r.epoch == new.epoch).count(), 12);
    // No append of the old epoch begun after the fence returned got in, and those answered
    // after it were committed before it.
    let late: Vec<_> = landed
        .iter()
        .filter(|&&(epoch, seq, started_after, answered_after)| {
            epoch < new.epoch && (started_after || (answered_after && seq > at_fence))
        })
        .collect();
    assert!(late.is_empty(), "{late:?}");
    eprintln!(
        "fence race: {} stale records before the fence, {} in all",
        records.iter().filter(|r| r.epoch == old.epoch).count(),
        records.len()
    );
}

/// A store that records the verbs and keys asked of it and, once armed, holds the next
/// compare-and-swap of a key containing the armed part (a journal head, a manifest) until
/// released.
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn Store>,
    ops: Mutex<Vec<(&'static str, String)>>,
    armed: Mutex<Option<&'static str>>,
    /// A permit once a compare-and-swap is held.
    held: Semaphore,
    /// A permit lets it go on.
    release: Semaphore,
}

impl Recording {
    fn new(inner: Arc<dyn Store>) -> Recording {
        Recording {
            inner,
            ops: Mutex::default(),
            armed: Mutex::new(None),
            held: Semaphore::new(0),
            release: Semaphore::new(0),
        }
    }

    /// Holds the next compare-and-swap of a key containing `part`.
    fn arm(&self, part: &'static str) {
        *self.armed.lock().unwrap() = Some(part);
    }

    fn note(&self, verb: &'static str, key: Option<&Key>) {
        let key = key.map(|k| k.as_str().to_owned()).unwrap_or_default();
        self.ops.lock().unwrap().push((verb, key));
    }

    fn take(&self) -> Vec<(&'static str, String)> {
        std::mem::take(&mut *self.ops.lock().unwrap())
    }
}

#[async_trait]
impl Store for Recording {
    async fn put_create(&self, key: &Key, bytes: Vec<u8>) -> Result<Version, StoreError> {
        self.note("put_create", Some(key));
        self.inner.put_create(key, bytes).await
    }
    async fn put_cas(
        &self,
        key: &Key,
        bytes: Vec<u8>,
        expected: Precondition,
    ) -> Result<Version, StoreError> {
        self.note("put_cas", Some(key));
        let hold = {
            let mut armed = self.armed.lock().unwrap();
            let hit = armed.is_some_and(|part| key.as_str().contains(part));
            if hit {
                *armed = None;
            }
            hit
        };
        if hold {
            self.held.add_permits(1);
            self.release.acquire().await.unwrap().forget();
        }
        self.inner.put_cas(key, bytes, expected).await
    }
    async fn get(&self, key: &Key) -> Result<Option<Object>, StoreError> {
        self.note("get", Some(key));
        self.inner.get(key).await
    }
    async fn head(&self, key: &Key) -> Result<Option<Version>, StoreError> {
        self.note("head", Some(key));
        self.inner.head(key).await
    }
    async fn list(
        &self,
        prefix: Option<&Key>,
        start_after: Option<&Key>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.note("list", prefix);
        self.inner.list(prefix, start_after, limit).await
    }
    async fn delete(&self, key: &Key, expected: Option<&Version>) -> Result<bool, StoreError> {
        self.note("delete", Some(key));
        self.inner.delete(key, expected).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_append_with_two_objects_costs_five_store_round_trips() {
    let recording = Arc::new(Recording::new(memory()));
    let (_dir, engines) = replicas(Arc::clone(&recording) as Arc<dyn Store>, 1).await;
    let ws = &engines[0];
    create(ws, "r4", 1).await;
    append(ws, "r4", 1, 1, &["start"], vec![]).await.unwrap();
    recording.take();
    let objects = vec![
        (
            "tool-args/i/call_00000000000000b1.json".to_owned(),
            b"{}".to_vec(),
        ),
        (
            "tool-results/i/call_00000000000000b1.json".to_owned(),
            b"[]".to_vec(),
        ),
    ];
    assert_eq!(append(ws, "r4", 1, 2, &["call"], objects).await, Ok(2));
    let ops = recording.take();
    let verbs: Vec<&str> = ops.iter().map(|(v, _)| *v).collect();
    eprintln!("one append with two objects: {ops:?}");
    // The manifest re-read (the epoch check), the head, the two objects, then the head's
    // compare-and-swap: never a record before the objects it names.
    assert_eq!(verbs, ["get", "get", "put_create", "put_create", "put_cas"]);
    assert!(ops[0].1.ends_with("manifest.json"), "{ops:?}");
    assert!(ops[1].1.ends_with("heads/default/r4"), "{ops:?}");
    assert!(ops[2].1.contains("/obj/tool-args/"), "{ops:?}");
    assert!(ops[4].1.ends_with("heads/default/r4"), "{ops:?}");
}

/// The stale driver's append passed every check of its replica (the manifest still at its epoch)
/// and is about to commit when the new holder's lease fences the journal through the other
/// replica: the head's compare-and-swap refuses it, and nothing of it is in the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_append_held_before_its_commit_is_refused_by_the_fence() {
    let shared = memory();
    let spy = Arc::new(Recording::new(Arc::clone(&shared)));
    let (_dir_a, a) = replicas(shared, 1).await;
    let (_dir_b, b) = replicas(Arc::clone(&spy) as Arc<dyn Store>, 1).await;
    let (a, b) = (Arc::clone(&a[0]), Arc::clone(&b[0]));
    create(&a, "r5", 0).await;
    let old = a.acquire_lease(CELL, "r5", "old", 60_000).await.unwrap();
    assert_eq!(
        append(&b, "r5", old.epoch, 1, &["first"], vec![]).await,
        Ok(1)
    );
    spy.arm("/heads/");
    let stale = {
        let b = Arc::clone(&b);
        tokio::spawn(async move { append(&b, "r5", old.epoch, 2, &["stale"], vec![]).await })
    };
    spy.held.acquire().await.unwrap().forget();
    a.release_lease(CELL, "r5", "old", old.epoch).await.unwrap();
    let new = a.acquire_lease(CELL, "r5", "new", 60_000).await.unwrap();
    spy.release.add_permits(1);
    assert_eq!(
        stale.await.unwrap(),
        Err("workspace.stale_epoch".to_owned())
    );
    assert_eq!(
        append(&a, "r5", new.epoch, 2, &["new"], vec![]).await,
        Ok(2)
    );
    let records = all_records(&b, "r5").await;
    let seen: Vec<(&str, u64)> = records
        .iter()
        .map(|r| (r.r#type.as_str(), r.epoch))
        .collect();
    assert_eq!(seen, [("first", old.epoch), ("new", new.epoch)]);
}

/// The old driver's finish passed its epoch check and is about to mark the manifest finished
/// when the new holder's lease raises the epoch through the other replica: the manifest's
/// compare-and-swap fails, the re-read shows the new epoch, and the finish is refused. The run
/// goes on under the new driver, who ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_finish_held_before_its_manifest_write_is_refused() {
    let shared = memory();
    let spy = Arc::new(Recording::new(Arc::clone(&shared)));
    let (_dir_a, a) = replicas(shared, 1).await;
    let (_dir_b, b) = replicas(Arc::clone(&spy) as Arc<dyn Store>, 1).await;
    let (a, b) = (Arc::clone(&a[0]), Arc::clone(&b[0]));
    create(&a, "r6", 0).await;
    let old = a.acquire_lease(CELL, "r6", "old", 60_000).await.unwrap();
    spy.arm("manifest.json");
    let stale = {
        let b = Arc::clone(&b);
        tokio::spawn(async move {
            b.finish_run(CELL, "r6", old.epoch, 3)
                .await
                .map_err(|e| e.code().to_owned())
        })
    };
    spy.held.acquire().await.unwrap().forget();
    a.release_lease(CELL, "r6", "old", old.epoch).await.unwrap();
    let new = a.acquire_lease(CELL, "r6", "new", 60_000).await.unwrap();
    spy.release.add_permits(1);
    assert_eq!(
        stale.await.unwrap(),
        Err("workspace.stale_epoch".to_owned())
    );
    assert!(!b.run_record(CELL, "r6").await.unwrap().finished);
    assert_eq!(
        append(&a, "r6", new.epoch, 1, &["new"], vec![]).await,
        Ok(1)
    );
    a.finish_run(CELL, "r6", new.epoch, 3).await.unwrap();
    assert!(b.run_record(CELL, "r6").await.unwrap().finished);
    assert!(b.read_journal(CELL, "r6", 1, 10).await.unwrap().sealed);
}

/// A page of `ListObjects` on a replica that has read nothing yet reads the page's audit objects
/// alone, not every object of the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_objects_reads_only_the_objects_on_it() {
    let shared = memory();
    let recording = Arc::new(Recording::new(Arc::clone(&shared)));
    let (_dir_a, a) = replicas(shared, 1).await;
    let (_dir_b, b) = replicas(Arc::clone(&recording) as Arc<dyn Store>, 1).await;
    create(&a[0], "r7", 1).await;
    let objects: Vec<(String, Vec<u8>)> = (1..=6)
        .map(|i| {
            (
                format!("tool-results/i/call_00000000000000c{i}.json"),
                format!("[{i}]").into_bytes(),
            )
        })
        .collect();
    append(&a[0], "r7", 1, 1, &["calls"], objects)
        .await
        .unwrap();
    recording.take();
    let query = ObjectQuery {
        prefix: "tool-results".to_owned(),
        page_size: 2,
        page_token: String::new(),
        include_hidden: true,
    };
    let page = b[0].list_objects(CELL, "r7", query).await.unwrap();
    let listed: Vec<&str> = page.objects.iter().map(|o| o.path.as_str()).collect();
    assert_eq!(
        listed,
        [
            "tool-results/i/call_00000000000000c1.json",
            "tool-results/i/call_00000000000000c2.json"
        ]
    );
    assert_eq!(page.objects[0].size_bytes, 3);
    let reads = recording
        .take()
        .into_iter()
        .filter(|(verb, key)| *verb == "get" && key.contains("/obj/"))
        .count();
    assert_eq!(reads, 2, "one read per object on the page");
}

fn replace_with(path: &str) -> Commit {
    Commit {
        epoch: 1,
        source_path: path.to_owned(),
        expected_source_sha256: None,
        append: false,
    }
}

/// A replacing commit whose chat write landed but whose binding of the run to the message is
/// held (as when its replica goes away there) is sent again through another replica: the chat
/// keeps one message, the run's, with the committed text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacing_commit_sent_again_before_its_binding_landed_makes_one_message() {
    let shared = memory();
    let spy = Arc::new(Recording::new(Arc::clone(&shared)));
    let (dir, a) = replicas(shared, 1).await;
    let a = Arc::clone(&a[0]);
    // A second replica over the same trees, its store calls through the spy.
    let b = Workspace::open_shared(
        Arc::clone(&spy) as Arc<dyn Store>,
        Arc::new(RealFs),
        std::fs::canonicalize(dir.path()).unwrap(),
        Limits::default(),
        Arc::new(NoHooks),
    )
    .await
    .unwrap();
    let b = Arc::new(b);
    create(&a, "r8", 1).await;
    a.blocking(|tree| {
        let base = tree.run_dir(CELL, "r8");
        tree.write_durable(&base, "output/answer.md", b"the answer")
    })
    .await
    .unwrap();
    spy.arm("manifest.json");
    let first = {
        let b = Arc::clone(&b);
        tokio::spawn(async move {
            b.commit_run_message(CELL, "r8", replace_with("output/answer.md"))
                .await
                .map(|c| c.created)
        })
    };
    spy.held.acquire().await.unwrap().forget();
    let again = a
        .commit_run_message(CELL, "r8", replace_with("output/answer.md"))
        .await
        .unwrap();
    assert!(
        !again.created,
        "the retry finds the message the first attempt made"
    );
    spy.release.add_permits(1);
    assert!(first.await.unwrap().unwrap());
    let (messages, _) = a.chat_messages(CELL, "chat", 0, 10).await.unwrap();
    let texts: Vec<&str> = messages.iter().map(|(_, m)| m.content.as_str()).collect();
    assert_eq!(texts, ["the answer"]);
    let bound = a.run_record(CELL, "r8").await.unwrap().message_id;
    assert_eq!(bound.as_deref(), Some(messages[0].1.message_id.as_str()));
}

/// A search on a replica that has read nothing yet fetches only the audit objects it scans: a
/// search of one result among six reads that one from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_reads_only_the_objects_it_scans() {
    let shared = memory();
    let recording = Arc::new(Recording::new(Arc::clone(&shared)));
    let (_dir_a, a) = replicas(shared, 1).await;
    let (_dir_b, b) = replicas(Arc::clone(&recording) as Arc<dyn Store>, 1).await;
    create(&a[0], "r9", 1).await;
    b[0].open_invocation(CELL, "r9", "i", 1, (&[], &[]), SkillAccess::default())
        .await
        .unwrap();
    let objects: Vec<(String, Vec<u8>)> = (1..=6)
        .map(|i| {
            (
                format!("tool-results/i/call_00000000000000d{i}.json"),
                format!("{{\"needle\":{i}}}").into_bytes(),
            )
        })
        .collect();
    append(&a[0], "r9", 1, 1, &["calls"], objects)
        .await
        .unwrap();
    let (_server, mut tools) = serve_tools(Arc::clone(&b[0])).await;
    recording.take();
    let path = "tool-results/i/call_00000000000000d3.json";
    let found = call_with(
        &mut tools,
        CELL,
        "r9",
        "i",
        "workspace.search_files",
        json!({ "query": "needle", "path": path }),
    )
    .await
    .unwrap();
    assert!(!found.is_error, "{:?} {}", found.error_code, found.content);
    assert!(found.content.contains(path), "{}", found.content);
    let reads: Vec<String> = recording
        .take()
        .into_iter()
        .filter(|(verb, key)| *verb == "get" && key.contains("/obj/"))
        .map(|(_, key)| key)
        .collect();
    assert_eq!(reads.len(), 1, "{reads:?}");
    assert!(reads[0].ends_with(path), "{reads:?}");
}
