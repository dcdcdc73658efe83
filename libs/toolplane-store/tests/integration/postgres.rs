//! The PostgreSQL backend against a real server started by the tests (see `pg_server`): the whole
//! conformance suite (directly and through a namespace), races of 16 writers on one key, what
//! errors and `Debug` may say, and the routed store over an S3 bucket (s3s-fs) for the bytes and
//! PostgreSQL for the mutable records. docs/storage.md explains what each proves.

// A test crate: helpers outside `#[test]` fns panic to report a failure, like the tests do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use toolplane_store::{Key, PgConfig, PgStore, Store, StoreOptions};

use crate::pg_server;
use crate::races::{assert_one_winner_each_round, cas_race, create_race, time_operations};

mod pg {
    use toolplane_store::StoreOptions;

    toolplane_store::store_conformance_tests!(|options: StoreOptions| crate::pg_server::open(
        options
    ));
}

mod pg_namespaced {
    use toolplane_store::{Key, StoreExt, StoreOptions};

    toolplane_store::store_conformance_tests!(|options: StoreOptions| async move {
        let mut options = options;
        for prefix in &mut options.create_only_prefixes {
            *prefix = Key::new("svc").unwrap().join(prefix).unwrap();
        }
        crate::pg_server::open(options)
            .await
            .namespace("svc")
            .unwrap()
    });
}

/// The cluster layout: create-only bytes in S3 (s3s-fs), the keys the suite writes concurrently or
/// mutates (`state`, `race`, `mixed`) in PostgreSQL. Every case but `keys_form_a_tree`, whose
/// re-create-after-delete step s3s-fs refuses (docs/storage.md); the three concurrent cases pass
/// here because their keys route to PostgreSQL.
mod routed_s3_and_pg {
    use std::sync::Arc;

    use toolplane_store::{Key, RoutedStore, Store, StoreOptions};

    use crate::s3_server::{Kind, open};

    async fn routed(options: StoreOptions) -> Arc<dyn Store> {
        let bytes = open(Kind::S3sFs, options.clone()).await;
        let records = crate::pg_server::open(options).await;
        let prefixes = ["state", "race", "mixed"].map(|p| Key::new(p).unwrap());
        Arc::new(RoutedStore::new(bytes, records, prefixes.to_vec()))
    }

    toolplane_store::store_conformance_tests!(@cases routed;
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
        error_messages_start_with_their_code,
    );
}

/// 16 `put_create`s of a fresh key and 16 `put_cas`es from one version, 10 rounds each: exactly
/// one winner every round, and its bytes are what is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn races_on_one_key_have_exactly_one_winner() {
    let store = pg_server::open(StoreOptions::default()).await;
    assert_one_winner_each_round("put_create", &create_race(Arc::clone(&store)).await);
    assert_one_winner_each_round("put_cas", &cas_race(store).await);
}

/// The same races on the memory store, whose every verb is one critical section: the control that
/// shows the race harness itself counts one winner per round on an atomic store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn races_on_the_memory_store_have_exactly_one_winner() {
    let store: Arc<dyn Store> =
        Arc::new(toolplane_store::MemoryStore::new(StoreOptions::default()));
    assert_one_winner_each_round("put_create", &create_race(Arc::clone(&store)).await);
    assert_one_winner_each_round("put_cas", &cas_race(store).await);
}

/// A password never appears in `Debug` or in an error, nor do the connection settings; an
/// unreachable server is `store.io`; a table name that is not a plain identifier is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn errors_carry_no_password_or_connection_settings() {
    let secret = "pg-secret-51d0";
    let missing = tempfile::tempdir().unwrap();
    let config = PgConfig {
        connection: format!(
            "host={} user=toolplane dbname=nowhere-db-4e1",
            missing.path().display()
        ),
        password: Some(secret.to_owned()),
        table: "objects".to_owned(),
        max_connections: 2,
    };
    assert!(!format!("{config:?}").contains(secret));
    assert!(!format!("{config:?}").contains("nowhere-db-4e1"));
    let error = PgStore::open(config.clone(), StoreOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "store.io", "{error}");
    let text = error.to_string();
    assert!(
        !text.contains(secret) && !text.contains("nowhere-db-4e1"),
        "{text}"
    );

    let bad = PgConfig {
        connection: format!("host=x password={secret} bogus_option=1"),
        ..config.clone()
    };
    let error = PgStore::open(bad, StoreOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "store.io", "{error}");
    assert!(!error.to_string().contains(secret), "{error}");

    for table in ["Objects", "a-b", "x; drop table y", "1st", ""] {
        let error = PgStore::open(
            PgConfig {
                table: table.to_owned(),
                ..pg_server::config(pg_server::server().await)
            },
            StoreOptions::default(),
        )
        .await
        .unwrap_err();
        assert_eq!(error.code(), "store.io", "{table:?}: {error}");
    }
}

/// Two stores on one table share their objects (a second process opening the same table sees the
/// first one's writes), and stores on different tables do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stores_on_one_table_share_it() {
    let server = pg_server::server().await;
    let config = pg_server::config(server);
    let one = PgStore::open(config.clone(), StoreOptions::default())
        .await
        .unwrap();
    let two = PgStore::open(config, StoreOptions::default())
        .await
        .unwrap();
    let other = pg_server::open(StoreOptions::default()).await;
    let key = Key::new("k").unwrap();
    one.put_create(&key, b"v".to_vec()).await.unwrap();
    assert_eq!(two.get(&key).await.unwrap().unwrap().bytes, b"v");
    assert!(other.get(&key).await.unwrap().is_none());
}

/// The cost of one operation on the PostgreSQL backend (a local server on a unix socket, fsync
/// on) against the local `FsStore`: mean wall time of `put_create`, `put_cas` and `get` of a 1 KiB
/// object, one at a time. A measurement, not a check; BENCHMARKS.md records its output and the
/// command: `cargo nextest run -p toolplane-store --test integration --run-ignored only --no-capture
/// -E 'test(measure_pg_against_fs)'`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run by hand (BENCHMARKS.md)"]
async fn measure_pg_against_fs() {
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn Store> = Arc::new(
        toolplane_store::FsStore::open(dir.path().join("store"), StoreOptions::default())
            .await
            .unwrap(),
    );
    let pg = pg_server::open(StoreOptions::default()).await;
    let fs_times = time_operations(&fs).await;
    let pg_times = time_operations(&pg).await;
    for ((name, fs), (_, pg)) in fs_times.iter().zip(&pg_times) {
        println!(
            "{name}: fs {:.3} ms, pg {:.3} ms, ratio {:.1}",
            fs * 1e3,
            pg * 1e3,
            pg / fs
        );
    }
}
