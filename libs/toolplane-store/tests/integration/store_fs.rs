//! `StoreFs`, the filesystem layer over a store: the `Fs` contract the workspace's trees rely on
//! (kinds, `NotFound`/`AlreadyExists`, empty folders, atomic replace by rename, paged listings),
//! over the memory backend, PostgreSQL and S3 (s3s-fs), two processes' views of one tree, and the
//! blocking rule (an error, never a panic, where `block_on` can not run).

use std::{
    io::ErrorKind,
    path::{Path, PathBuf},
    sync::Arc,
};

use toolplane_store::{
    Key, MemoryStore, Store, StoreOptions,
    fs::{FileKind, Fs, MAX_DIR_ENTRIES, StoreFs},
};

fn root() -> PathBuf {
    PathBuf::from("/data/tree")
}

fn tmp() -> PathBuf {
    PathBuf::from("/data/tmp")
}

fn store_fs(store: &Arc<dyn Store>) -> StoreFs {
    StoreFs::new(
        Arc::clone(store),
        root(),
        tmp(),
        tokio::runtime::Handle::current(),
    )
}

/// Writes `bytes` at `path` the way the workspace's tree does: a temp file renamed over it.
fn put(fs: &StoreFs, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = tmp().join(format!("t-{}", path.display().to_string().len()));
    let mut file = fs.create_new(&temp)?;
    file.write_all(bytes)?;
    file.sync()?;
    let renamed = fs.rename(&temp, path);
    if renamed.is_err() {
        fs.remove_file(&temp)?;
    }
    renamed
}

fn kind(fs: &StoreFs, path: &Path) -> Result<FileKind, ErrorKind> {
    fs.symlink_metadata(path).map_err(|e| e.kind())
}

fn listing(fs: &StoreFs, path: &Path) -> Result<Vec<(String, FileKind)>, ErrorKind> {
    let mut entries: Vec<(String, FileKind)> = fs
        .read_dir(path)
        .map_err(|e| e.kind())?
        .into_iter()
        .map(|e| (e.name.into_string().unwrap(), e.kind))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(entries)
}

/// The contract, step by step, on a fresh store.
fn contract(fs: &StoreFs) {
    folders(fs);
    temp_files_and_renames(fs);
    listings_and_names(fs);
    removal_and_refusals(fs);
}

/// Folders: the root always exists; others are created once and empty until filled.
fn folders(fs: &StoreFs) {
    let r = root();
    assert_eq!(kind(fs, &r), Ok(FileKind::Dir), "the root always exists");
    assert_eq!(kind(fs, &r.join("a")), Err(ErrorKind::NotFound));
    assert_eq!(listing(fs, &r), Ok(vec![]));

    // Folders: created once, empty until something is put in them, never without a parent.
    fs.create_dir(&r.join("a")).unwrap();
    assert_eq!(
        fs.create_dir(&r.join("a")).unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    assert_eq!(
        fs.create_dir(&r).unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    assert_eq!(
        fs.create_dir(&r.join("x/y")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(kind(fs, &r.join("a")), Ok(FileKind::Dir));
    assert_eq!(
        listing(fs, &r.join("a")),
        Ok(vec![]),
        "an empty folder lists empty"
    );
    assert_eq!(listing(fs, &r.join("missing")), Err(ErrorKind::NotFound));
}

/// Temp files and the renames that put them into the store.
fn temp_files_and_renames(fs: &StoreFs) {
    let r = root();

    // Temp files live in memory until a rename puts them into the store.
    fs.create_dir(&tmp().join("0")).unwrap();
    let temp = tmp().join("0/w");
    let mut file = fs.create_new(&temp).unwrap();
    assert_eq!(
        fs.create_new(&temp).unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    file.write_all(b"hel").unwrap();
    file.write_all(b"lo").unwrap();
    file.sync().unwrap();
    assert_eq!(kind(fs, &temp), Ok(FileKind::File));
    let f = r.join("a/f.txt");
    fs.rename(&temp, &f).unwrap();
    assert_eq!(fs.read(&f).unwrap(), b"hello");
    assert_eq!(kind(fs, &f), Ok(FileKind::File));
    assert_eq!(
        fs.read(&temp).unwrap_err().kind(),
        ErrorKind::NotFound,
        "the temp file is gone"
    );
    assert_eq!(listing(fs, &tmp().join("0")), Ok(vec![]));

    // A rename replaces a file whole; it never replaces a folder or creates a missing parent.
    put(fs, &f, b"world").unwrap();
    assert_eq!(fs.read(&f).unwrap(), b"world");
    assert_eq!(
        put(fs, &r.join("a"), b"x").unwrap_err().kind(),
        ErrorKind::IsADirectory
    );
    assert_eq!(
        put(fs, &r.join("nope/x"), b"x").unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(kind(fs, &r.join("nope/x")), Err(ErrorKind::NotFound));
    assert_eq!(
        fs.read(&r.join("a")).unwrap_err().kind(),
        ErrorKind::IsADirectory
    );
    assert_eq!(
        fs.read(&r.join("a/none")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        fs.create_dir(&f).unwrap_err().kind(),
        ErrorKind::AlreadyExists,
        "a file is there"
    );
    assert_eq!(listing(fs, &f), Err(ErrorKind::NotADirectory));
}

/// Listings and names.
fn listings_and_names(fs: &StoreFs) {
    let r = root();

    // Listings hold exactly the folder's children, by kind, whatever lies deeper.
    fs.create_dir(&r.join("a/b")).unwrap();
    put(fs, &r.join("a/b/c"), b"deep").unwrap();
    assert_eq!(
        listing(fs, &r.join("a")),
        Ok(vec![
            ("b".into(), FileKind::Dir),
            ("f.txt".into(), FileKind::File)
        ])
    );
    assert_eq!(listing(fs, &r), Ok(vec![("a".into(), FileKind::Dir)]));

    // Names the key grammar reserves, or that look escaped, come back as they were written.
    fs.create_dir(&r.join(".toolplane-x")).unwrap();
    put(fs, &r.join(".toolplane-x/%p"), b"odd").unwrap();
    assert_eq!(fs.read(&r.join(".toolplane-x/%p")).unwrap(), b"odd");
    assert_eq!(
        listing(fs, &r.join(".toolplane-x")),
        Ok(vec![("%p".into(), FileKind::File)])
    );

    // A path no key can name is refused as invalid input, and the message names no host path.
    let long = r.join(["n".repeat(250).as_str(); 5].join("/"));
    let err = fs.symlink_metadata(&long).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(!err.to_string().contains("/data"), "{err}");
    assert_eq!(kind(fs, &r.join("a/../a")), Err(ErrorKind::InvalidInput));
}

/// Removal, refusals and locks.
fn removal_and_refusals(fs: &StoreFs) {
    let r = root();
    let f = r.join("a/f.txt");

    // Removal: only empty folders, and only what exists.
    assert_eq!(
        fs.remove_dir(&r.join("a")).unwrap_err().kind(),
        ErrorKind::DirectoryNotEmpty
    );
    fs.remove_file(&r.join("a/b/c")).unwrap();
    assert_eq!(
        fs.remove_file(&r.join("a/b/c")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    fs.remove_dir(&r.join("a/b")).unwrap();
    assert_eq!(kind(fs, &r.join("a/b")), Err(ErrorKind::NotFound));
    assert_eq!(
        fs.remove_dir(&r.join("a/b")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        listing(fs, &r.join("a")),
        Ok(vec![("f.txt".into(), FileKind::File)])
    );

    // What the tree never needs is refused, not emulated.
    assert_eq!(
        fs.hard_link(&f, &r.join("g")).unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    assert_eq!(
        fs.create_new(&r.join("g")).unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    assert_eq!(
        kind(fs, Path::new("/elsewhere/x")),
        Err(ErrorKind::Unsupported)
    );

    // Locks are exclusive within the process and released on drop.
    let held = fs.lock(&r.join("lock")).unwrap();
    assert!(fs.try_lock(&r.join("lock")).unwrap().is_none());
    drop(held);
    assert!(fs.try_lock(&r.join("lock")).unwrap().is_some());
}

/// Runs `check` on a blocking thread, as the workspace calls its tree.
async fn on_blocking_thread(store: Arc<dyn Store>, check: fn(&StoreFs)) {
    let fs = store_fs(&store);
    tokio::task::spawn_blocking(move || check(&fs))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fs_contract_holds_over_the_memory_store() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    on_blocking_thread(store, contract).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fs_contract_holds_over_postgres() {
    let store = crate::pg_server::open(StoreOptions::default()).await;
    on_blocking_thread(store, contract).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fs_contract_holds_over_s3() {
    let store =
        crate::s3_server::open(crate::s3_server::Kind::S3sFs, StoreOptions::default()).await;
    on_blocking_thread(store, contract).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_one_tree() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let (one, two) = (store_fs(&store), store_fs(&store));
    tokio::task::spawn_blocking(move || {
        one.create_dir(&root().join("run")).unwrap();
        put(&one, &root().join("run/notes.md"), b"from one").unwrap();
        assert_eq!(two.read(&root().join("run/notes.md")).unwrap(), b"from one");
        assert_eq!(
            listing(&two, &root().join("run")),
            Ok(vec![("notes.md".into(), FileKind::File)])
        );
        // Temp files are each process's own.
        one.create_new(&tmp().join("mine")).unwrap();
        assert_eq!(kind(&two, &tmp().join("mine")), Err(ErrorKind::NotFound));
        put(&two, &root().join("run/notes.md"), b"from two").unwrap();
        assert_eq!(one.read(&root().join("run/notes.md")).unwrap(), b"from two");
    })
    .await
    .unwrap();
}

/// Renames of one path from several processes at once, over PostgreSQL (whose round trips let
/// them interleave between a rename's head and its put): each lands whole (none fails on the
/// compare-and-swap it retries), and the file holds one writer's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_renames_of_one_path_all_land_whole() {
    let store = crate::pg_server::open(StoreOptions::default()).await;
    let target = root().join("shared.md");
    let mut writers = Vec::new();
    for w in 0..8u8 {
        let fs = store_fs(&store);
        let target = target.clone();
        writers.push(tokio::task::spawn_blocking(move || {
            for i in 0..25u8 {
                let temp = tmp().join(format!("w{w}-{i}"));
                let mut file = fs.create_new(&temp).unwrap();
                file.write_all(&[w; 1000]).unwrap();
                fs.rename(&temp, &target).unwrap();
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let fs = store_fs(&store);
    let bytes = tokio::task::spawn_blocking(move || fs.read(&target).unwrap())
        .await
        .unwrap();
    assert_eq!(bytes.len(), 1000);
    assert!(
        bytes.iter().all(|b| *b == bytes[0]),
        "one writer's bytes, whole"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_larger_than_a_list_page_lists_whole() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let fs = store_fs(&store);
    tokio::task::spawn_blocking(move || {
        for i in 0..1500 {
            put(&fs, &root().join(format!("f{i:04}")), b"x").unwrap();
        }
        fs.create_dir(&root().join("sub")).unwrap();
        put(&fs, &root().join("sub/deeper"), b"x").unwrap();
        let entries = listing(&fs, &root()).unwrap();
        assert_eq!(
            entries.len(),
            1501,
            "every file once, the folder once, nothing deeper"
        );
        assert_eq!(entries.last().unwrap(), &("sub".to_owned(), FileKind::Dir));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_over_the_entry_limit_is_refused_not_read_whole() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    // Files put straight into the file space of the root (`f/1/<name>`), as another process
    // might have made them.
    for i in 0..=MAX_DIR_ENTRIES {
        let key = Key::new(format!("f/1/n{i:06}")).unwrap();
        store.put_create(&key, Vec::new()).await.unwrap();
    }
    let fs = store_fs(&store);
    let err = tokio::task::spawn_blocking(move || fs.read_dir(&root()).unwrap_err())
        .await
        .unwrap();
    assert!(
        err.to_string()
            .contains(&format!("more than {MAX_DIR_ENTRIES} entries")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_worker_of_a_multi_thread_runtime_may_call_it() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let fs = store_fs(&store);
    let task = tokio::spawn(async move {
        fs.create_dir(&root().join("w")).unwrap();
        kind(&fs, &root().join("w"))
    });
    assert_eq!(task.await.unwrap(), Ok(FileKind::Dir));
}

#[tokio::test]
async fn a_current_thread_runtime_gets_an_error_not_a_panic() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let fs = store_fs(&store);
    let err = fs.create_dir(&root().join("w")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(err.to_string().contains("multi-thread runtime"), "{err}");
    // Temp files need no store and keep working.
    assert!(fs.create_new(&tmp().join("t")).is_ok());
}
