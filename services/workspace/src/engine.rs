//! The workspace engine: everything the gRPC services call, taking and returning domain values
//! (the one protobuf message it carries is the journal record, see [`journal`]). Owns the data
//! directory's layout and opening it (replaying the journal log); its submodules hold the
//! operations the storage RPCs call: [`runs`] (run workspaces and invocations), [`objects`]
//! (audit objects and object reads), [`journal`] (appends, reads, following), [`chats`] (chat
//! messages and commits), [`skills`], [`leases`] (run leases and the epochs they fence). Must
//! never expose a path outside a run's directory or a cell's keys to another cell.
//!
//! Layout of `<data>`: `store/` (an `FsStore`; this service's keys live under `workspace/`:
//! manifests, invocation views, chats, `persist/` states and blobs, skills), `tree/<cell>/<run>/`
//! (run file trees: the model-visible roots, `tool-results/`, and hidden `input/`, `tool-args/`,
//! `model-responses/`), `journal/` (the group-committed log, and `journal/runs/` the journal files
//! it is checkpointed into), `tmp/` (temp files of writes). Opened with
//! [`Workspace::open_shared`] instead, the journals and audit objects live in the shared store
//! ([`crate::storelog`]) and only the trees on a filesystem layer.

pub mod chats;
pub mod journal;
pub mod leases;
pub mod objects;
pub mod runs;
pub mod skills;

use std::{
    io,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use sha2::{Digest, Sha256};
use toolplane_store::{
    FsStore, Store, StoreExt, StoreOptions,
    fs::{Fs, StoreFs},
};

use crate::{
    chat::Chats,
    error::WsError,
    limits::Limits,
    runs::Runs,
    skills::Skills,
    storelog::{Log, StoreLog},
    tree::{NoHooks, Tree, TreeHooks},
    wal::Wal,
};

/// Options to open the engine.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub data_dir: PathBuf,
    pub limits: Limits,
}

/// The engine.
#[derive(Debug)]
pub struct Workspace {
    store: Arc<dyn Store>,
    tree: Arc<Tree>,
    log: Log,
    runs: Runs,
    chats: Chats,
    skills: Skills,
    limits: Limits,
    metrics: WorkspaceMetrics,
}

/// The workspace service's metrics, served on its HTTP port's `/metrics`.
#[derive(Debug, Clone)]
pub struct WorkspaceMetrics {
    pub registry: Arc<toolplane_telemetry::metrics::Registry>,
    tool_calls: toolplane_telemetry::metrics::Counter,
    tool_call_duration: toolplane_telemetry::metrics::Histogram,
    journal_records: toolplane_telemetry::metrics::Counter,
}

impl Default for WorkspaceMetrics {
    fn default() -> Self {
        let registry = Arc::new(toolplane_telemetry::metrics::Registry::new());
        toolplane_telemetry::metrics::export(&registry, "toolplane-workspace");
        WorkspaceMetrics {
            tool_calls: registry.counter(
                "toolplane_workspace_tool_calls_total",
                "Workspace, chat, skill and world-info tool calls executed, by tool and outcome (`ok` or the error code).",
                &["tool", "outcome"],
            ),
            tool_call_duration: registry.histogram(
                "toolplane_workspace_tool_call_duration_seconds",
                "Time the workspace service took to execute a tool call.",
                &["tool"],
            ),
            journal_records: registry.counter(
                "toolplane_workspace_journal_records_total",
                "Journal records made durable.",
                &[],
            ),
            registry,
        }
    }
}

impl WorkspaceMetrics {
    pub fn tool_call(&self, tool: &str, error_code: Option<&str>, seconds: f64) {
        self.tool_calls.inc(&[tool, error_code.unwrap_or("ok")]);
        self.tool_call_duration.observe(&[tool], seconds);
    }

    pub fn journal_records(&self, n: usize) {
        self.journal_records.add(&[], n as f64);
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn ensure_dir(fs: &dyn Fs, path: &Path) -> Result<(), WsError> {
    match fs.create_dir(path) {
        Ok(()) => {
            if let Some(parent) = path.parent() {
                fs.sync_dir(parent)
                    .map_err(|e| WsError::io(format!("sync {}: {e}", parent.display())))?;
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(WsError::io(format!("create {}: {e}", path.display()))),
    }
}

impl Workspace {
    /// Opens the engine on the real filesystem.
    pub async fn open(options: EngineOptions) -> Result<Workspace, WsError> {
        std::fs::create_dir_all(&options.data_dir).map_err(|e| {
            WsError::io(format!(
                "create data dir {}: {e}",
                options.data_dir.display()
            ))
        })?;
        let data = std::fs::canonicalize(&options.data_dir)
            .map_err(|e| WsError::io(format!("resolve data dir: {e}")))?;
        let store = FsStore::open(data.join("store"), store_options()).await?;
        Workspace::open_on_disk(data, Arc::new(store), options.limits, Arc::new(NoHooks)).await
    }

    /// Opens the engine on the real filesystem with a given store and hooks (tests). `data` must
    /// be an absolute, existing directory.
    pub async fn open_on_disk(
        data: PathBuf,
        store: Arc<dyn Store>,
        limits: Limits,
        hooks: Arc<dyn TreeHooks>,
    ) -> Result<Workspace, WsError> {
        let fs: Arc<dyn Fs> = Arc::new(toolplane_store::fs::RealFs);
        Workspace::open_inner(fs, true, data, store, limits, hooks).await
    }

    /// Opens the engine on a given filesystem layer and store (tests: `SimFs`, hooks); file
    /// times are unknown on it. `data` must be an absolute, existing directory on `fs`.
    pub async fn open_with(
        fs: Arc<dyn Fs>,
        data: PathBuf,
        store: Arc<dyn Store>,
        limits: Limits,
        hooks: Arc<dyn TreeHooks>,
    ) -> Result<Workspace, WsError> {
        Workspace::open_inner(fs, false, data, store, limits, hooks).await
    }

    async fn open_inner(
        fs: Arc<dyn Fs>,
        file_times: bool,
        data: PathBuf,
        store: Arc<dyn Store>,
        limits: Limits,
        hooks: Arc<dyn TreeHooks>,
    ) -> Result<Workspace, WsError> {
        let store = store.namespace("workspace")?;
        let session = format!("{}-{}", std::process::id(), now_ms());
        let segment_bytes = limits.journal_segment_bytes;
        let idle_close = (limits.journal_idle_close_ms > 0)
            .then(|| Duration::from_millis(limits.journal_idle_close_ms));
        let opened =
            tokio::task::spawn_blocking(move || -> Result<(Arc<Tree>, Arc<Wal>), WsError> {
                for dir in ["tree", "tmp", "journal", "journal/runs"] {
                    ensure_dir(fs.as_ref(), &data.join(dir))?;
                }
                let mut tree = Tree::new(
                    Arc::clone(&fs),
                    data.join("tree"),
                    data.join("tmp"),
                    session,
                    hooks,
                );
                if file_times {
                    tree = tree.with_file_times();
                }
                let tree = Arc::new(tree);
                tree.clean_tmp()?;
                let wal = Arc::new(Wal::open(
                    fs,
                    data.join("journal"),
                    Arc::clone(&tree),
                    segment_bytes,
                    idle_close,
                )?);
                Ok((tree, wal))
            })
            .await
            .map_err(|e| WsError::io(format!("open task failed: {e}")))??;
        let (tree, wal) = opened;
        Ok(Workspace {
            runs: Runs::new(Arc::clone(&store)),
            chats: Chats::new(Arc::clone(&store), limits.clone()),
            skills: Skills::new(Arc::clone(&store), limits.clone()),
            store,
            tree,
            log: Log::Local(wal),
            limits,
            metrics: WorkspaceMetrics::default(),
        })
    }

    /// Opens the engine as one of several replicas over one shared `store`: the journals and
    /// audit objects in it ([`StoreLog`], under `workspace/log/`), manifests re-read on every
    /// epoch check (another replica may have raised one), the run trees on `tree_fs` under
    /// `tree_root` (an absolute, existing directory on it; `tree/` and `tmp/<session>/` are made
    /// there).
    pub async fn open_shared(
        store: Arc<dyn Store>,
        tree_fs: Arc<dyn Fs>,
        tree_root: PathBuf,
        limits: Limits,
        hooks: Arc<dyn TreeHooks>,
    ) -> Result<Workspace, WsError> {
        let store = store.namespace("workspace")?;
        let session = format!("{}-{}", std::process::id(), now_ms());
        // Each replica writes its temp files in a folder of its own, so cleaning it at start never
        // removes another replica's write in flight (a crashed replica's folder stays behind).
        let tmp = tree_root.join("tmp").join(&session);
        let tree = tokio::task::spawn_blocking(move || -> Result<Arc<Tree>, WsError> {
            for dir in [tree_root.join("tree"), tree_root.join("tmp"), tmp.clone()] {
                ensure_dir(tree_fs.as_ref(), &dir)?;
            }
            let tree = Arc::new(Tree::new(
                tree_fs,
                tree_root.join("tree"),
                tmp,
                session,
                hooks,
            ));
            tree.clean_tmp()?;
            Ok(tree)
        })
        .await
        .map_err(|e| WsError::io(format!("open task failed: {e}")))??;
        Ok(Workspace {
            runs: Runs::new_shared(Arc::clone(&store)),
            chats: Chats::new(Arc::clone(&store), limits.clone()),
            skills: Skills::new(Arc::clone(&store), limits.clone()),
            log: Log::Shared(Arc::new(StoreLog::new(Arc::clone(&store)))),
            store,
            tree,
            limits,
            metrics: WorkspaceMetrics::default(),
        })
    }

    /// Opens the engine as one of several replicas over a shared `store`, with nothing on local
    /// disk: [`Workspace::open_shared`] with the run trees in the store too (`workspace/tree/`,
    /// through [`StoreFs`]). What the service binary opens for a shared `[store]`.
    pub async fn open_on_store(
        store: Arc<dyn Store>,
        limits: Limits,
    ) -> Result<Workspace, WsError> {
        // Only a name: StoreFs keeps the tree in the store and each replica's temp files in its
        // memory, so nothing is written under it.
        let root = PathBuf::from("/toolplane-workspace");
        let tree_fs = StoreFs::new(
            store.namespace("workspace/tree")?,
            root.join("tree"),
            root.join("tmp"),
            tokio::runtime::Handle::current(),
        );
        Workspace::open_shared(store, Arc::new(tree_fs), root, limits, Arc::new(NoHooks)).await
    }

    pub fn metrics(&self) -> &WorkspaceMetrics {
        &self.metrics
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }
    pub fn tree(&self) -> &Arc<Tree> {
        &self.tree
    }
    /// The local journal log, for what only it has (checkpoints, its memory figures); `None`
    /// on a shared store.
    pub fn wal(&self) -> Option<&Arc<Wal>> {
        self.log.wal()
    }
    /// Where journals and audit objects live.
    pub fn log(&self) -> &Log {
        &self.log
    }
    pub fn runs(&self) -> &Runs {
        &self.runs
    }
    pub fn chats(&self) -> &Chats {
        &self.chats
    }
    pub fn skills(&self) -> &Skills {
        &self.skills
    }
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Runs blocking tree IO off the async workers.
    pub async fn blocking<T, F>(&self, work: F) -> Result<T, WsError>
    where
        T: Send + 'static,
        F: FnOnce(&Tree) -> Result<T, WsError> + Send + 'static,
    {
        let tree = Arc::clone(&self.tree);
        tokio::task::spawn_blocking(move || work(&tree))
            .await
            .map_err(|e| WsError::io(format!("blocking task failed: {e}")))?
    }

    /// Stops the journal writer (after the jobs already queued) and checkpoints what it wrote.
    pub fn shutdown(&self) {
        self.log.shutdown();
    }
}

fn store_options() -> StoreOptions {
    StoreOptions::default()
}
