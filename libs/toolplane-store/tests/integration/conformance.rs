//! Runs the conformance suite against every backend this crate ships, directly and through
//! namespaced views, and against the filesystem backend on the simulated filesystem.

// A test crate: helpers outside `#[test]` fns panic to report a failure, like the tests do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod memory {
    use std::sync::Arc;

    use toolplane_store::{MemoryStore, Store, StoreOptions};

    toolplane_store::store_conformance_tests!(|options: StoreOptions| async move {
        Arc::new(MemoryStore::new(options)) as Arc<dyn Store>
    });
}

mod memory_namespaced {
    use std::sync::Arc;

    use toolplane_store::{MemoryStore, Store, StoreExt, StoreOptions};

    use crate::common::options_under;

    toolplane_store::store_conformance_tests!(|options: StoreOptions| async move {
        let root: Arc<dyn Store> = Arc::new(MemoryStore::new(options_under("svc/a", options)));
        root.namespace("svc/a").unwrap()
    });
}

mod fs {
    use toolplane_store::StoreOptions;

    use crate::common::{TempFsStore, arc};

    toolplane_store::store_conformance_tests!(|options: StoreOptions| async move {
        arc(TempFsStore::open(options).await)
    });
}

mod fs_namespaced {
    use toolplane_store::{StoreExt, StoreOptions};

    use crate::common::{TempFsStore, arc, options_under};

    toolplane_store::store_conformance_tests!(|options: StoreOptions| async move {
        arc(TempFsStore::open(options_under("workspace", options)).await)
            .namespace("workspace")
            .unwrap()
    });
}

/// The router over two memory stores, with the keys the suite mutates routed to one of them.
mod routed_memory {
    use std::sync::Arc;

    use toolplane_store::{Key, MemoryStore, RoutedStore, Store, StoreOptions};

    toolplane_store::store_conformance_tests!(|options: StoreOptions| async move {
        let bytes: Arc<dyn Store> = Arc::new(MemoryStore::new(options.clone()));
        let records: Arc<dyn Store> = Arc::new(MemoryStore::new(options));
        let prefixes = ["state", "race", "mixed", "t"].map(|p| Key::new(p).unwrap());
        Arc::new(RoutedStore::new(bytes, records, prefixes.to_vec())) as Arc<dyn Store>
    });
}

mod fs_on_sim {
    use std::{path::Path, sync::Arc};

    use toolplane_store::{FsStore, Store, StoreOptions, testing::SimFs};

    toolplane_store::store_conformance_tests!(|options: StoreOptions| async move {
        let sim = SimFs::new();
        sim.create_dir_all(Path::new("/store")).unwrap();
        Arc::new(
            FsStore::open_with_fs(Arc::new(sim), "/store", options)
                .await
                .unwrap(),
        ) as Arc<dyn Store>
    });
}

/// `run_all` is the entry point other crates' backends use; run it once end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_on_memory() {
    let factory = |options| async move {
        std::sync::Arc::new(toolplane_store::MemoryStore::new(options))
            as std::sync::Arc<dyn toolplane_store::Store>
    };
    toolplane_store::conformance::run_all(&factory).await;
}
