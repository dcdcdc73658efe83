//! The conformance suite every [`Store`] backend must pass (in the manner of quickwit-storage's
//! `storage_test_suite`). Owns the executable form of the semantics documented on the trait; must
//! never test a backend's internals, only what a service calling the trait would notice.
//!
//! Each case is a public async function taking a [`StoreFactory`]; it opens fresh stores through
//! it (with the options the case needs) and panics on the first violation, like a test.
//! [`run_all`] runs every case; [`store_conformance_tests!`](crate::store_conformance_tests)
//! generates one `#[tokio::test]` per case, so a failure names the case:
//!
//! ```ignore
//! toolplane_store::store_conformance_tests!(|options| async move {
//!     std::sync::Arc::new(toolplane_store::MemoryStore::new(options))
//!         as std::sync::Arc<dyn toolplane_store::Store>
//! });
//! ```
//!
//! The generated tests use `tokio::test` on the multi-threaded runtime, so the calling crate needs
//! `tokio` with the `macros` and `rt-multi-thread` features among its dev-dependencies.

use std::{collections::BTreeSet, future::Future, sync::Arc};

use async_trait::async_trait;
use tokio::{sync::Barrier, task::JoinSet};

use crate::{Key, ListPage, Precondition, Store, StoreError, StoreExt, StoreOptions, Version};

/// Opens a fresh, empty store with the given options. Implemented for every
/// `Fn(StoreOptions) -> impl Future<Output = Arc<dyn Store>>`.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    async fn open(&self, options: StoreOptions) -> Arc<dyn Store>;
}

#[async_trait]
impl<F, Fut> StoreFactory for F
where
    F: Fn(StoreOptions) -> Fut + Send + Sync,
    Fut: Future<Output = Arc<dyn Store>> + Send,
{
    async fn open(&self, options: StoreOptions) -> Arc<dyn Store> {
        self(options).await
    }
}

/// Generates one `#[tokio::test]` per conformance case for the factory expression given.
#[macro_export]
macro_rules! store_conformance_tests {
    ($factory:expr) => {
        $crate::store_conformance_tests!(@cases $factory;
            put_create_then_get,
            absent_keys_read_as_none,
            create_only_never_overwrites,
            concurrent_creators_exactly_one_wins,
            cas_absent_creates_once,
            cas_version_detects_conflicts,
            concurrent_read_modify_write_loses_no_update,
            concurrent_absent_writers_exactly_one_wins,
            delete_semantics,
            list_order_and_prefix,
            list_paging,
            namespaces_isolate,
            invalid_keys_refused,
            size_limit,
            create_only_prefixes_refuse_mutation,
            keys_form_a_tree,
            error_messages_start_with_their_code,
        );
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::conformance::$case(&$factory).await;
            }
        )*
    };
}

/// Runs every case against stores from `factory`.
pub async fn run_all(factory: &dyn StoreFactory) {
    put_create_then_get(factory).await;
    absent_keys_read_as_none(factory).await;
    create_only_never_overwrites(factory).await;
    concurrent_creators_exactly_one_wins(factory).await;
    cas_absent_creates_once(factory).await;
    cas_version_detects_conflicts(factory).await;
    concurrent_read_modify_write_loses_no_update(factory).await;
    concurrent_absent_writers_exactly_one_wins(factory).await;
    delete_semantics(factory).await;
    list_order_and_prefix(factory).await;
    list_paging(factory).await;
    namespaces_isolate(factory).await;
    invalid_keys_refused(factory).await;
    size_limit(factory).await;
    create_only_prefixes_refuse_mutation(factory).await;
    keys_form_a_tree(factory).await;
    error_messages_start_with_their_code(factory).await;
}

fn key(key: &str) -> Key {
    Key::new(key).unwrap_or_else(|e| panic!("conformance: {key:?} should be a valid key: {e}"))
}

fn ok<T>(result: Result<T, StoreError>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("conformance: {what}: unexpected error: {e}"))
}

async fn fresh(factory: &dyn StoreFactory) -> Arc<dyn Store> {
    factory.open(StoreOptions::default()).await
}

async fn bytes_of(store: &dyn Store, k: &Key) -> Option<Vec<u8>> {
    ok(store.get(k).await, "get").map(|object| object.bytes)
}

/// Every key under `prefix`, a page of `limit` at a time.
async fn list_all(store: &dyn Store, prefix: Option<&Key>, limit: usize) -> Vec<Key> {
    let mut keys = Vec::new();
    let mut after: Option<Key> = None;
    loop {
        let page = ok(store.list(prefix, after.as_ref(), limit).await, "list");
        assert!(
            page.keys.len() <= limit.max(1),
            "conformance: page longer than its limit"
        );
        keys.extend(page.keys);
        match page.next_start_after {
            Some(next) => after = Some(next),
            None => return keys,
        }
    }
}

fn keys(names: &[&str]) -> Vec<Key> {
    names.iter().map(|name| key(name)).collect()
}

/// A put returns the version `get` and `head` then report; versions follow the bytes.
pub async fn put_create_then_get(factory: &dyn StoreFactory) {
    let store = fresh(factory).await;
    let k = key("objects/one");
    let version = ok(store.put_create(&k, b"hello".to_vec()).await, "put_create");
    let object = ok(store.get(&k).await, "get")
        .unwrap_or_else(|| panic!("conformance: created key reads as absent"));
    assert_eq!(object.bytes, b"hello");
    assert_eq!(
        object.version, version,
        "get reports the version put_create returned"
    );
    assert_eq!(ok(store.head(&k).await, "head"), Some(version.clone()));

    let same = ok(
        store
            .put_create(&key("objects/two"), b"hello".to_vec())
            .await,
        "put_create",
    );
    assert_eq!(same, version, "equal bytes have equal versions");
    let other = ok(
        store
            .put_create(&key("objects/three"), b"hellO".to_vec())
            .await,
        "put_create",
    );
    assert_ne!(other, version, "different bytes have different versions");

    // An empty object exists; it is not the same as an absent key.
    let empty = key("objects/empty");
    ok(
        store.put_create(&empty, Vec::new()).await,
        "put_create empty",
    );
    assert_eq!(bytes_of(store.as_ref(), &empty).await, Some(Vec::new()));
}

/// Absent keys read as `None`, and an empty store lists nothing.
pub async fn absent_keys_read_as_none(factory: &dyn StoreFactory) {
    let store = fresh(factory).await;
    assert!(ok(store.get(&key("nothing/here")).await, "get").is_none());
    assert!(ok(store.head(&key("nothing")).await, "head").is_none());
    assert_eq!(
        ok(store.list(None, None, 10).await, "list"),
        ListPage::default()
    );
    assert_eq!(
        ok(store.list(Some(&key("nothing")), None, 10).await, "list"),
        ListPage::default()
    );
}

/// A second `put_create` fails with `AlreadyExists` and leaves the first object untouched.
pub async fn create_only_never_overwrites(factory: &dyn StoreFactory) {
    let store = fresh(factory).await;
    let k = key("audit/record");
    let first = ok(store.put_create(&k, b"first".to_vec()).await, "put_create");
    match store.put_create(&k, b"second".to_vec()).await {
        Err(StoreError::AlreadyExists { key: reported }) => assert_eq!(reported, k),
        other => panic!("conformance: second put_create gave {other:?}"),
    }
    let object = ok(store.get(&k).await, "get");
    assert_eq!(
        object.map(|o| (o.bytes, o.version)),
        Some((b"first".to_vec(), first))
    );

    // Also when the object was written by CAS.
    let managed = key("state/managed");
    ok(
        store
            .put_cas(&managed, b"v1".to_vec(), Precondition::Absent)
            .await,
        "put_cas",
    );
    assert!(matches!(
        store.put_create(&managed, b"v2".to_vec()).await,
        Err(StoreError::AlreadyExists { .. })
    ));
    assert_eq!(
        bytes_of(store.as_ref(), &managed).await,
        Some(b"v1".to_vec())
    );
}

/// Of 16 concurrent creators of one key, exactly one wins and its bytes are what is stored.
pub async fn concurrent_creators_exactly_one_wins(factory: &dyn StoreFactory) {
    const CREATORS: usize = 16;
    const ROUNDS: usize = 8;
    let store = fresh(factory).await;
    for round in 0..ROUNDS {
        let k = key(&format!("race/{round}/journal/000001"));
        let barrier = Arc::new(Barrier::new(CREATORS));
        let mut tasks = JoinSet::new();
        for creator in 0..CREATORS {
            let (store, k, barrier) = (Arc::clone(&store), k.clone(), Arc::clone(&barrier));
            tasks.spawn(async move {
                barrier.wait().await;
                let bytes = format!("creator {creator}").into_bytes();
                (creator, store.put_create(&k, bytes).await)
            });
        }
        let mut winners = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            let (creator, result) = joined.unwrap_or_else(|e| panic!("conformance: task: {e}"));
            match result {
                Ok(_) => winners.push(creator),
                Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => panic!("conformance: creator {creator} failed: {e}"),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "conformance: round {round}: winners {winners:?}"
        );
        let stored = bytes_of(store.as_ref(), &k).await;
        assert_eq!(stored, Some(format!("creator {}", winners[0]).into_bytes()));
    }
}

/// `Precondition::Absent` creates a missing key and conflicts once it exists.
pub async fn cas_absent_creates_once(factory: &dyn StoreFactory) {
    let store = fresh(factory).await;
    let k = key("state/lease");
    let v1 = ok(
        store
            .put_cas(&k, b"one".to_vec(), Precondition::Absent)
            .await,
        "put_cas",
    );
    match store
        .put_cas(&k, b"two".to_vec(), Precondition::Absent)
        .await
    {
        Err(StoreError::Conflict {
            current, expected, ..
        }) => {
            assert_eq!(
                current,
                Some(v1.clone()),
                "conflict carries the current version"
            );
            assert_eq!(expected, Precondition::Absent);
        }
        other => panic!("conformance: second Absent put_cas gave {other:?}"),
    }
    assert_eq!(bytes_of(store.as_ref(), &k).await, Some(b"one".to_vec()));

    let created = key("state/created");
    let v = ok(
        store.put_create(&created, b"c".to_vec()).await,
        "put_create",
    );
    match store
        .put_cas(&created, b"d".to_vec(), Precondition::Absent)
        .await
    {
        Err(StoreError::Conflict { current, .. }) => assert_eq!(current, Some(v)),
        other => panic!("conformance: Absent put_cas over a created key gave {other:?}"),
    }
}

/// `Precondition::Version` swaps only from that exact version; a stale or absent one conflicts
/// and writes nothing.
pub async fn cas_version_detects_conflicts(factory: &dyn StoreFactory) {
    let store = fresh(factory).await;
    let k = key("state/profile");
    let v1 = ok(
        store
            .put_cas(&k, b"one".to_vec(), Precondition::Absent)
            .await,
        "put_cas",
    );
    let v2 = ok(
        store
            .put_cas(&k, b"two".to_vec(), Precondition::Version(v1.clone()))
            .await,
        "put_cas from v1",
    );
    assert_ne!(v1, v2);
    assert_eq!(ok(store.head(&k).await, "head"), Some(v2.clone()));
    match store
        .put_cas(&k, b"three".to_vec(), Precondition::Version(v1.clone()))
        .await
    {
        Err(StoreError::Conflict {
            current,
            expected,
            key: reported,
        }) => {
            assert_eq!(current, Some(v2.clone()));
            assert_eq!(expected, Precondition::Version(v1.clone()));
            assert_eq!(reported, k);
        }
        other => panic!("conformance: stale put_cas gave {other:?}"),
    }
    assert_eq!(bytes_of(store.as_ref(), &k).await, Some(b"two".to_vec()));

    let missing = key("state/missing");
    match store
        .put_cas(&missing, b"x".to_vec(), Precondition::Version(v2.clone()))
        .await
    {
        Err(StoreError::Conflict { current: None, .. }) => {}
        other => panic!("conformance: put_cas of an absent key with a version gave {other:?}"),
    }
    assert!(ok(store.get(&missing).await, "get").is_none());

    match store
        .put_cas(
            &k,
            b"x".to_vec(),
            Precondition::Version(Version::new("bogus")),
        )
        .await
    {
        Err(StoreError::Conflict { .. }) => {}
        other => panic!("conformance: put_cas with a bogus version gave {other:?}"),
    }
}

/// 8 writers incrementing one counter through read-modify-write CAS lose no update.
pub async fn concurrent_read_modify_write_loses_no_update(factory: &dyn StoreFactory) {
    const WRITERS: u64 = 8;
    const ROUNDS: u64 = 40;
    let store = fresh(factory).await;
    let k = key("state/counter");
    let barrier = Arc::new(Barrier::new(8));
    let mut tasks = JoinSet::new();
    for _ in 0..WRITERS {
        let (store, k, barrier) = (Arc::clone(&store), k.clone(), Arc::clone(&barrier));
        tasks.spawn(async move {
            barrier.wait().await;
            for _ in 0..ROUNDS {
                loop {
                    let current = ok(store.get(&k).await, "get counter");
                    let (value, expected) = match current {
                        Some(object) => {
                            let text = String::from_utf8_lossy(&object.bytes).into_owned();
                            let value: u64 = text.parse().unwrap_or_else(|e| {
                                panic!("conformance: counter holds {text:?}: {e}")
                            });
                            (value, Precondition::Version(object.version))
                        }
                        None => (0, Precondition::Absent),
                    };
                    let next = (value + 1).to_string().into_bytes();
                    match store.put_cas(&k, next, expected).await {
                        Ok(_) => break,
                        Err(StoreError::Conflict { .. }) => continue,
                        Err(e) => panic!("conformance: put_cas counter: {e}"),
                    }
                }
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap_or_else(|e| panic!("conformance: writer task: {e}"));
    }
    let total = bytes_of(store.as_ref(), &k)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    assert_eq!(
        total,
        Some((WRITERS * ROUNDS).to_string()),
        "conformance: lost updates"
    );
}

/// Concurrent `put_cas(Absent)` and `put_create` of one key: exactly one of them wins, and
/// `put_cas(Absent)` never replaces what a `put_create` wrote.
pub async fn concurrent_absent_writers_exactly_one_wins(factory: &dyn StoreFactory) {
    const WRITERS: usize = 16;
    const ROUNDS: usize = 8;
    let store = fresh(factory).await;
    for round in 0..ROUNDS {
        let k = key(&format!("mixed/{round}"));
        let barrier = Arc::new(Barrier::new(WRITERS));
        let mut tasks = JoinSet::new();
        for writer in 0..WRITERS {
            let (store, k, barrier) = (Arc::clone(&store), k.clone(), Arc::clone(&barrier));
            tasks.spawn(async move {
                barrier.wait().await;
                let bytes = format!("writer {writer}").into_bytes();
                let result = if writer % 2 == 0 {
                    store.put_create(&k, bytes).await
                } else {
                    store.put_cas(&k, bytes, Precondition::Absent).await
                };
                (writer, result)
            });
        }
        let mut winners = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            let (writer, result) = joined.unwrap_or_else(|e| panic!("conformance: task: {e}"));
            match result {
                Ok(_) => winners.push(writer),
                Err(StoreError::AlreadyExists { .. } | StoreError::Conflict { .. }) => {}
                Err(e) => panic!("conformance: writer {writer} failed: {e}"),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "conformance: round {round}: winners {winners:?}"
        );
        let stored = bytes_of(store.as_ref(), &k).await;
        assert_eq!(stored, Some(format!("writer {}", winners[0]).into_bytes()));
    }
}

/// `delete` reports whether the key existed, honours `expected`, and frees the key.
pub async fn delete_semantics(factory: &dyn StoreFactory) {
    let store = fresh(factory).await;
    let k = key("state/session");
    assert!(
        !ok(store.delete(&k, None).await, "delete absent"),
        "absent key: false"
    );
    match store.delete(&k, Some(&Version::of(b"x"))).await {
        Err(StoreError::Conflict { current: None, .. }) => {}
        other => panic!("conformance: delete of an absent key with a version gave {other:?}"),
    }
    let v1 = ok(
        store
            .put_cas(&k, b"one".to_vec(), Precondition::Absent)
            .await,
        "put_cas",
    );
    match store.delete(&k, Some(&Version::of(b"not one"))).await {
        Err(StoreError::Conflict { current, .. }) => assert_eq!(current, Some(v1.clone())),
        other => panic!("conformance: delete with a stale version gave {other:?}"),
    }
    assert!(
        ok(store.get(&k).await, "get").is_some(),
        "a refused delete deletes nothing"
    );
    assert!(ok(store.delete(&k, Some(&v1)).await, "delete"));
    assert!(ok(store.get(&k).await, "get").is_none());
    assert!(ok(store.list(None, None, 10).await, "list").keys.is_empty());
    // The key is free again, for either kind of put.
    ok(
        store.put_create(&k, b"again".to_vec()).await,
        "put_create after delete",
    );
    assert!(ok(store.delete(&k, None).await, "delete"));
    ok(
        store
            .put_cas(&k, b"more".to_vec(), Precondition::Absent)
            .await,
        "put_cas after delete",
    );
}

/// `list` returns keys in byte order, at any depth, below the prefix by whole segments.
pub async fn list_order_and_prefix(factory: &dyn StoreFactory) {
    let store = fresh(factory).await;
    // Byte order, where `-` < `/` < `0` < letters < multi-byte UTF-8.
    let sorted = ["a-c", "a/b", "a/c/d", "a/c/e", "a0", "ab", "b", "ba/x", "é"];
    for name in ["b", "a/c/e", "é", "a0", "a/b", "ba/x", "a-c", "ab", "a/c/d"] {
        ok(
            store.put_create(&key(name), name.as_bytes().to_vec()).await,
            "put_create",
        );
    }
    assert_eq!(list_all(store.as_ref(), None, 100).await, keys(&sorted));
    assert_eq!(
        list_all(store.as_ref(), Some(&key("a")), 100).await,
        keys(&["a/b", "a/c/d", "a/c/e"])
    );
    assert_eq!(
        list_all(store.as_ref(), Some(&key("a/c")), 100).await,
        keys(&["a/c/d", "a/c/e"])
    );
    assert_eq!(
        list_all(store.as_ref(), Some(&key("ba")), 100).await,
        keys(&["ba/x"])
    );
    // Strictly below: an object is not listed under its own name, nor are its siblings.
    assert!(
        list_all(store.as_ref(), Some(&key("a/b")), 100)
            .await
            .is_empty()
    );
    assert!(
        list_all(store.as_ref(), Some(&key("b")), 100)
            .await
            .is_empty()
    );
    assert!(
        list_all(store.as_ref(), Some(&key("zz")), 100)
            .await
            .is_empty()
    );
}

/// Paging with `start_after` and `limit` visits every key once, in order.
pub async fn list_paging(factory: &dyn StoreFactory) {
    let store = fresh(factory).await;
    let mut expected = BTreeSet::new();
    for i in 0..25 {
        let name = if i % 5 == 0 {
            format!("p/d{i:02}/deep/k")
        } else {
            format!("p/k{i:02}")
        };
        ok(
            store.put_create(&key(&name), Vec::new()).await,
            "put_create",
        );
        expected.insert(key(&name));
    }
    ok(
        store.put_create(&key("q/outside"), Vec::new()).await,
        "put_create",
    );
    let expected: Vec<Key> = expected.into_iter().collect();
    let p = key("p");
    for limit in [1, 7, 25, 26, 1000] {
        assert_eq!(
            list_all(store.as_ref(), Some(&p), limit).await,
            expected,
            "limit {limit}"
        );
    }

    let first = ok(store.list(Some(&p), None, 7).await, "list");
    assert_eq!(first.keys, expected[..7]);
    assert_eq!(first.next_start_after.as_ref(), Some(&expected[6]));
    let last = ok(store.list(Some(&p), Some(&expected[20]), 4).await, "list");
    assert_eq!(last.keys, expected[21..]);
    assert_eq!(
        last.next_start_after, None,
        "no next page after the last key"
    );

    // `start_after` need not exist, and may lie inside a subtree.
    let after = ok(store.list(Some(&p), Some(&key("p/k10a")), 3).await, "list");
    assert_eq!(after.keys, keys(&["p/k11", "p/k12", "p/k13"]));
    let inside = ok(
        store.list(Some(&p), Some(&key("p/d05/deep")), 2).await,
        "list",
    );
    assert_eq!(inside.keys, keys(&["p/d05/deep/k", "p/d10/deep/k"]));
    let beyond = ok(store.list(Some(&p), Some(&key("p/z")), 10).await, "list");
    assert_eq!(beyond, ListPage::default());
    let before = ok(store.list(Some(&p), Some(&key("a")), 2).await, "list");
    assert_eq!(before.keys, expected[..2]);

    // A zero limit is clamped to one key, not an endless stream of empty pages.
    let one = ok(store.list(Some(&p), None, 0).await, "list");
    assert_eq!(one.keys, expected[..1]);
    assert!(one.next_start_after.is_some());
}

/// A namespaced view sees only its own keys, stripped of the prefix; the shared store sees them
/// prefixed.
pub async fn namespaces_isolate(factory: &dyn StoreFactory) {
    let root = fresh(factory).await;
    let catalog = ok(root.namespace("catalog"), "namespace");
    let proxy = ok(root.namespace("mcp-proxy"), "namespace");
    let nested = ok(catalog.namespace("profiles/v1"), "nested namespace");
    let k = key("state");
    let vc = ok(
        catalog.put_create(&k, b"catalog".to_vec()).await,
        "put_create",
    );
    ok(proxy.put_create(&k, b"proxy".to_vec()).await, "put_create");
    ok(
        nested
            .put_create(&key("default"), b"profile".to_vec())
            .await,
        "put_create",
    );
    ok(
        root.put_create(&key("catalog-other/state"), b"sibling".to_vec())
            .await,
        "put_create",
    );

    assert_eq!(
        bytes_of(catalog.as_ref(), &k).await,
        Some(b"catalog".to_vec())
    );
    assert_eq!(bytes_of(proxy.as_ref(), &k).await, Some(b"proxy".to_vec()));
    assert_eq!(
        bytes_of(root.as_ref(), &key("catalog/state")).await,
        Some(b"catalog".to_vec())
    );
    assert_eq!(
        bytes_of(root.as_ref(), &key("catalog/profiles/v1/default")).await,
        Some(b"profile".to_vec())
    );
    assert_eq!(
        list_all(catalog.as_ref(), None, 1).await,
        keys(&["profiles/v1/default", "state"])
    );
    assert_eq!(list_all(proxy.as_ref(), None, 10).await, keys(&["state"]));
    assert_eq!(
        list_all(nested.as_ref(), None, 10).await,
        keys(&["default"])
    );
    assert_eq!(
        list_all(catalog.as_ref(), Some(&key("profiles")), 10).await,
        keys(&["profiles/v1/default"])
    );
    let page = ok(
        catalog
            .list(None, Some(&key("profiles/v1/default")), 10)
            .await,
        "list",
    );
    assert_eq!(page.keys, keys(&["state"]));
    assert_eq!(
        list_all(root.as_ref(), None, 10).await,
        keys(&[
            "catalog-other/state",
            "catalog/profiles/v1/default",
            "catalog/state",
            "mcp-proxy/state"
        ])
    );

    // Verbs act inside the namespace only.
    assert!(matches!(
        proxy
            .put_cas(&k, b"x".to_vec(), Precondition::Version(vc.clone()))
            .await,
        Err(StoreError::Conflict { .. })
    ));
    ok(
        catalog
            .put_cas(&k, b"catalog 2".to_vec(), Precondition::Version(vc))
            .await,
        "put_cas",
    );
    assert!(ok(proxy.delete(&k, None).await, "delete"));
    assert_eq!(
        bytes_of(catalog.as_ref(), &k).await,
        Some(b"catalog 2".to_vec())
    );
    assert!(ok(proxy.get(&k).await, "get").is_none());

    for bad in ["", "..", "a/../b", "/abs", "a//b"] {
        assert!(
            matches!(root.namespace(bad), Err(StoreError::InvalidKey { .. })),
            "namespace {bad:?}"
        );
    }
}

/// Bad keys are typed errors from `Key::new`; a namespaced key longer than the limit is refused,
/// never truncated.
pub async fn invalid_keys_refused(factory: &dyn StoreFactory) {
    for bad in [
        "",
        "/a",
        "a/",
        "a//b",
        ".",
        "..",
        "a/./b",
        "a/../b",
        "a\\b",
        "a\0b",
        "a\nb",
        ".toolplane/x",
    ] {
        match Key::new(bad) {
            Err(e @ StoreError::InvalidKey { .. }) => assert_eq!(e.code(), "store.invalid_key"),
            other => panic!("conformance: Key::new({bad:?}) gave {other:?}"),
        }
    }
    assert!(Key::new("k".repeat(crate::MAX_KEY_BYTES + 1)).is_err());
    let root = fresh(factory).await;
    let ns = ok(root.namespace("ns"), "namespace");
    let longest = key(&vec!["k".repeat(crate::MAX_SEGMENT_BYTES); 4].join("/"));
    assert!(longest.as_str().len() > crate::MAX_KEY_BYTES - 3);
    match ns.put_create(&longest, Vec::new()).await {
        Err(StoreError::InvalidKey { .. }) => {}
        other => panic!("conformance: over-long namespaced key gave {other:?}"),
    }
    assert!(ok(root.list(None, None, 10).await, "list").keys.is_empty());
}

/// Objects over the configured limit are refused before anything is written.
pub async fn size_limit(factory: &dyn StoreFactory) {
    let store = factory
        .open(StoreOptions {
            max_object_bytes: 1024,
            ..StoreOptions::default()
        })
        .await;
    let k = key("big/object");
    match store.put_create(&k, vec![7; 1025]).await {
        Err(StoreError::TooLarge { size, limit, .. }) => assert_eq!((size, limit), (1025, 1024)),
        other => panic!("conformance: oversized put_create gave {other:?}"),
    }
    assert!(
        ok(store.get(&k).await, "get").is_none(),
        "a refused put writes nothing"
    );
    let v = ok(
        store.put_create(&k, vec![7; 1024]).await,
        "put_create at the limit",
    );
    match store
        .put_cas(&k, vec![8; 1025], Precondition::Version(v.clone()))
        .await
    {
        Err(StoreError::TooLarge { .. }) => {}
        other => panic!("conformance: oversized put_cas gave {other:?}"),
    }
    assert_eq!(ok(store.head(&k).await, "head"), Some(v));
}

/// Keys under a configured create-only prefix can be created and read but never changed.
pub async fn create_only_prefixes_refuse_mutation(factory: &dyn StoreFactory) {
    let options = StoreOptions {
        create_only_prefixes: vec![key("audit")],
        ..StoreOptions::default()
    };
    let store = factory.open(options).await;
    let record = key("audit/tool-args/1");
    let v = ok(
        store.put_create(&record, b"args".to_vec()).await,
        "put_create",
    );
    for result in [
        store
            .put_cas(
                &record,
                b"forged".to_vec(),
                Precondition::Version(v.clone()),
            )
            .await,
        store
            .put_cas(&key("audit/new"), b"x".to_vec(), Precondition::Absent)
            .await,
        store
            .put_cas(&key("audit"), b"x".to_vec(), Precondition::Absent)
            .await,
    ] {
        match result {
            Err(StoreError::CreateOnly { prefix, .. }) => assert_eq!(prefix, key("audit")),
            other => panic!("conformance: put_cas under a create-only prefix gave {other:?}"),
        }
    }
    assert!(matches!(
        store.delete(&record, None).await,
        Err(StoreError::CreateOnly { .. })
    ));
    assert_eq!(
        bytes_of(store.as_ref(), &record).await,
        Some(b"args".to_vec())
    );
    // Whole segments: `auditor` is not under `audit`.
    ok(
        store
            .put_cas(&key("auditor/x"), b"x".to_vec(), Precondition::Absent)
            .await,
        "put_cas",
    );
}

/// A key is an object or has keys below it, never both; a directory goes with its last key.
pub async fn keys_form_a_tree(factory: &dyn StoreFactory) {
    let store = fresh(factory).await;
    ok(
        store.put_create(&key("t/a"), b"leaf".to_vec()).await,
        "put_create",
    );
    for result in [
        store.put_create(&key("t"), Vec::new()).await,
        store
            .put_cas(&key("t"), Vec::new(), Precondition::Absent)
            .await,
        store.put_create(&key("t/a/b"), Vec::new()).await,
        store
            .put_cas(&key("t/a/b/c"), Vec::new(), Precondition::Absent)
            .await,
    ] {
        assert!(
            matches!(result, Err(StoreError::KeyCollision { .. })),
            "gave {result:?}"
        );
    }
    assert!(
        ok(store.get(&key("t")).await, "get").is_none(),
        "a directory is not an object"
    );
    assert!(ok(store.get(&key("t/a/b")).await, "get").is_none());
    assert_eq!(list_all(store.as_ref(), None, 10).await, keys(&["t/a"]));

    assert!(ok(store.delete(&key("t/a"), None).await, "delete"));
    ok(
        store.put_create(&key("t"), b"now a leaf".to_vec()).await,
        "put_create after the subtree went",
    );

    ok(
        store.put_create(&key("u/v/w/x"), Vec::new()).await,
        "put_create",
    );
    assert!(ok(store.delete(&key("u/v/w/x"), None).await, "delete"));
    ok(
        store
            .put_cas(&key("u"), Vec::new(), Precondition::Absent)
            .await,
        "put_cas after the subtree went",
    );
    assert_eq!(list_all(store.as_ref(), None, 10).await, keys(&["t", "u"]));
}

/// Every error's message starts with its stable code.
pub async fn error_messages_start_with_their_code(factory: &dyn StoreFactory) {
    let store = factory
        .open(StoreOptions {
            max_object_bytes: 4,
            create_only_prefixes: vec![key("audit")],
        })
        .await;
    let k = key("x");
    ok(store.put_create(&k, Vec::new()).await, "put_create");
    ok(
        store.put_create(&key("audit/1"), Vec::new()).await,
        "put_create",
    );
    let errors = [
        (
            store.put_create(&k, Vec::new()).await.err(),
            "store.already_exists",
        ),
        (
            store
                .put_cas(&k, Vec::new(), Precondition::Absent)
                .await
                .err(),
            "store.conflict",
        ),
        (
            store.put_create(&key("y"), vec![0; 5]).await.err(),
            "store.too_large",
        ),
        (
            store.put_create(&key("x/y"), Vec::new()).await.err(),
            "store.key_collision",
        ),
        (
            store.delete(&key("audit/1"), None).await.err(),
            "store.create_only",
        ),
        (Key::new("../x").err(), "store.invalid_key"),
    ];
    for (error, code) in errors {
        let error = error.unwrap_or_else(|| panic!("conformance: expected {code}, got success"));
        assert_eq!(error.code(), code);
        let text = error.to_string();
        assert!(
            text.starts_with(&format!("{code}: ")),
            "message {text:?} lacks code {code}"
        );
        assert!(!text.ends_with('.'), "message {text:?} ends with a period");
    }
}
