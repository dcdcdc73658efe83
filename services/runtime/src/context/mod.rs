//! The runtime's context: its configuration, its ports to the peers, its store and the book of
//! runs and invocations it is driving — the [`Runtime`] every layer above works through.
//!
//! Owns looking up runs and invocations, saving run records, appending to a run's journal through
//! the workspace port and starting delegated tasks through the [`TaskLauncher`] the layers above
//! provide. It never decides what a turn or a run does, and never names protobuf or tonic: the
//! peers are reached only through the traits in [`ports`].

pub mod approvals;
pub mod catalogs;
pub mod held;
pub mod journal;
pub mod ports;
pub mod stored;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use toolplane_core::Profile;
use toolplane_core::error as codes;
use toolplane_core::turn::CallIdPolicy;
use toolplane_model::ProviderFormat;
use toolplane_store::{Key, Precondition, Store};

use crate::config::RuntimeConfig;
use crate::error::RuntimeError;
use crate::metrics::RuntimeMetrics;
use crate::model::provider::{Endpoint, check_api_key_env, check_script_path};
use crate::state::{Approvals, Invocation, PendingTask, Run, RunRecord};
use ports::{Catalog, Models, PortErrorKind, ToolHosts, Workspace};

/// The peers the runtime talks to, each behind its port.
#[derive(Debug, Clone)]
pub struct Ports {
    pub catalog: Arc<dyn Catalog>,
    pub workspace: Arc<dyn Workspace>,
    pub tools: Arc<dyn ToolHosts>,
    pub models: Arc<dyn Models>,
}

/// Starts a delegated task in the background: provided by the layer that drives children, so
/// that the turn pipeline can start the tasks a call registered without depending on it.
pub trait TaskLauncher: Send + Sync + std::fmt::Debug {
    fn launch(&self, rt: Arc<Runtime>, run: Arc<Run>, task: PendingTask);
}

#[derive(Debug)]
pub struct Runtime {
    pub cfg: RuntimeConfig,
    pub ports: Ports,
    store: Arc<dyn Store>,
    runs: Mutex<HashMap<String, Arc<Run>>>,
    invocations: Mutex<HashMap<String, Arc<Invocation>>>,
    /// Itself, for the background work it starts (delegated tasks).
    me: OnceLock<Weak<Runtime>>,
    launcher: Arc<dyn TaskLauncher>,
    pub metrics: RuntimeMetrics,
    /// Held calls and questions (docs/approvals.md).
    pub approvals: Approvals,
    /// The name this runtime holds run leases under (`[cluster] holder`, or a fresh one).
    pub lease_holder: String,
    /// The MCP catalog changes each running invocation was told of.
    pub told_catalogs: catalogs::ToldCatalogs,
    /// The runtime is stopping: it takes no new runs and hands its runs over (cluster mode).
    draining: AtomicBool,
    /// Takeovers of this process one at a time, so a run is never rebuilt twice here.
    pub takeovers: tokio::sync::Mutex<()>,
    /// Runs (`<cell>/<run>`) this process is creating: their lease is taken and their start
    /// may be stored before their record is, and the takeover sweep leaves them alone.
    creating: Mutex<std::collections::HashSet<String>>,
}

/// A run being created (see [`Runtime::creating`]).
#[derive(Debug)]
pub struct Creating<'a> {
    rt: &'a Runtime,
    key: String,
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        lock(&self.rt.creating).remove(&self.key);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

pub fn key(s: &str) -> Result<Key, RuntimeError> {
    Key::new(s).map_err(|e| RuntimeError::invalid(e.to_string()))
}

impl Runtime {
    /// A runtime over `ports` and `store` with no runs yet; `launcher` starts delegated tasks.
    pub fn new(
        cfg: RuntimeConfig,
        ports: Ports,
        store: Arc<dyn Store>,
        launcher: Arc<dyn TaskLauncher>,
    ) -> Arc<Runtime> {
        let cfg_holder = cfg.cluster.holder.clone();
        let rt = Arc::new(Runtime {
            cfg,
            ports,
            store,
            runs: Mutex::new(HashMap::new()),
            invocations: Mutex::new(HashMap::new()),
            me: OnceLock::new(),
            launcher,
            metrics: RuntimeMetrics::default(),
            approvals: Approvals::default(),
            lease_holder: if cfg_holder.is_empty() {
                format!("runtime-{}", uuid::Uuid::new_v4())
            } else {
                cfg_holder
            },
            told_catalogs: catalogs::ToldCatalogs::default(),
            draining: AtomicBool::new(false),
            takeovers: tokio::sync::Mutex::new(()),
            creating: Mutex::default(),
        });
        let _ = rt.me.set(Arc::downgrade(&rt));
        rt
    }

    /// Marks run `run` of `cell` as being created here until the guard is dropped (created, or
    /// failed): see [`Runtime::is_creating`].
    pub fn creating(&self, cell: &str, run: &str) -> Creating<'_> {
        let key = format!("{cell}/{run}");
        lock(&self.creating).insert(key.clone());
        Creating { rt: self, key }
    }

    /// Whether this process is creating run `run` of `cell`: its lease is taken and its start may
    /// be stored before its record is.
    pub fn is_creating(&self, cell: &str, run: &str) -> bool {
        lock(&self.creating).contains(&format!("{cell}/{run}"))
    }

    /// Starts draining: no new runs from now on (`runtime.draining`).
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Refuses new work while draining.
    pub fn check_not_draining(&self) -> Result<(), RuntimeError> {
        if self.is_draining() {
            return Err(RuntimeError::new(
                codes::RUNTIME_DRAINING,
                "this runtime is stopping and takes no new runs; retry on another replica",
            ));
        }
        Ok(())
    }

    /// A shared handle to this runtime; `None` only while it is being dropped.
    pub fn arc(&self) -> Option<Arc<Runtime>> {
        self.me.get().and_then(Weak::upgrade)
    }

    /// The runtime's own store (run records).
    pub fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    /// A profile's own model endpoint, with this runtime's timeout and retries where the profile
    /// sets none: `None` when it names none, the reason when it cannot be used.
    pub fn endpoint_of(&self, profile: &Profile) -> Option<Result<Endpoint, String>> {
        profile.model.as_ref().map(|m| {
            check_api_key_env(m.api_key_env.as_deref(), &self.cfg.env_allow)
                .and_then(|()| match &m.script {
                    Some(path) => check_script_path(path, self.cfg.script_roots.as_deref()),
                    None => Ok(()),
                })
                .and_then(|()| {
                    Endpoint::from_profile(m, self.cfg.model_timeout, self.cfg.model_max_retries)
                })
        })
    }

    pub fn run(&self, id: &str) -> Result<Arc<Run>, RuntimeError> {
        self.run_in(id, None)
    }

    /// The run `id` when it belongs to `cell` (any cell for `None`). A run of another cell is
    /// answered exactly like a missing one.
    pub fn run_in(&self, id: &str, cell: Option<&str>) -> Result<Arc<Run>, RuntimeError> {
        lock(&self.runs)
            .get(id)
            .filter(|run| cell.is_none_or(|c| run.cell == c))
            .cloned()
            .ok_or_else(|| RuntimeError::not_found(format!("no run `{id}`")))
    }

    pub fn invocation(&self, id: &str) -> Result<Arc<Invocation>, RuntimeError> {
        self.invocation_in(id, None)
    }

    /// The invocation `id` when its run belongs to `cell` (any cell for `None`). An invocation
    /// of another cell is answered exactly like a missing one.
    pub fn invocation_in(
        &self,
        id: &str,
        cell: Option<&str>,
    ) -> Result<Arc<Invocation>, RuntimeError> {
        lock(&self.invocations)
            .get(id)
            .filter(|inv| cell.is_none_or(|c| inv.run.cell == c))
            .cloned()
            .ok_or_else(|| RuntimeError::not_found(format!("no invocation `{id}`")))
    }

    pub fn runs(&self) -> Vec<Arc<Run>> {
        lock(&self.runs).values().cloned().collect()
    }

    pub fn has_run(&self, id: &str) -> bool {
        lock(&self.runs).contains_key(id)
    }

    /// Adds (or replaces) a run in the book.
    pub fn insert_run(&self, run: Arc<Run>) {
        lock(&self.runs).insert(run.id.clone(), run);
    }

    /// Adds an invocation to the book.
    pub fn insert_invocation(&self, inv: Arc<Invocation>) {
        lock(&self.invocations).insert(inv.id.clone(), inv);
    }

    /// Invocations of a run, oldest first.
    pub fn invocations_of(&self, run_id: &str) -> Vec<Arc<Invocation>> {
        let mut v: Vec<Arc<Invocation>> = lock(&self.invocations)
            .values()
            .filter(|i| i.run.id == run_id)
            .cloned()
            .collect();
        v.sort_by_key(|i| i.created_ms);
        v
    }

    /// Every invocation in the book that satisfies `keep`.
    pub fn invocations_where(&self, keep: impl Fn(&Invocation) -> bool) -> Vec<Arc<Invocation>> {
        lock(&self.invocations)
            .values()
            .filter(|i| keep(i))
            .cloned()
            .collect()
    }

    /// Writes the run record (compare-and-swap on the stored version). With run leases on, a
    /// stored record of a newer epoch (another runtime took the run over) is never overwritten:
    /// the write fails with `runtime.lease_lost`.
    pub async fn persist_run(&self, run: &Run) -> Result<(), RuntimeError> {
        let record = run.snapshot();
        let k = key(&format!("runs/{}/{}.json", record.cell_id, record.run_id))?;
        let bytes =
            serde_json::to_vec(&record).map_err(|e| RuntimeError::invalid(e.to_string()))?;
        for _ in 0..3 {
            let expected = match self.stored_version(&k, record.epoch).await? {
                Some(v) => Precondition::Version(v),
                None => Precondition::Absent,
            };
            match self.store.put_cas(&k, bytes.clone(), expected).await {
                Ok(_) => return Ok(()),
                Err(e) if e.code() == "store.conflict" => continue,
                Err(e) => {
                    return Err(RuntimeError::dependency(format!(
                        "saving run {}: {e}",
                        record.run_id
                    )));
                }
            }
        }
        Err(RuntimeError::dependency(format!(
            "saving run {}: too many concurrent updates",
            record.run_id
        )))
    }

    /// The stored run record's version; with leases on, refused when it is of a newer epoch than
    /// `epoch`.
    async fn stored_version(
        &self,
        k: &Key,
        epoch: u64,
    ) -> Result<Option<toolplane_store::Version>, RuntimeError> {
        let dep = |e: toolplane_store::StoreError| RuntimeError::dependency(e.to_string());
        if !self.cfg.cluster.leases {
            return self.store.head(k).await.map_err(dep);
        }
        let Some(obj) = self.store.get(k).await.map_err(dep)? else {
            return Ok(None);
        };
        let stored = serde_json::from_slice::<RunRecord>(&obj.bytes)
            .map(|r| r.epoch)
            .unwrap_or(0);
        if stored > epoch {
            return Err(RuntimeError::new(
                codes::RUNTIME_LEASE_LOST,
                format!("the run's record is of epoch {stored}, newer than this runtime's {epoch}"),
            ));
        }
        Ok(Some(obj.version))
    }

    /// Reads profile `id` of `cell`; `None` when there is no such profile.
    pub async fn profile_in(&self, cell: &str, id: &str) -> Result<Option<Profile>, RuntimeError> {
        if id.is_empty() || id.len() > 64 {
            return Ok(None);
        }
        match self.ports.catalog.get_profile(cell, id).await {
            Ok(stored) => Ok(Some(Profile::from_json(&stored.profile_json)?)),
            Err(e)
                if e.kind == PortErrorKind::NotFound
                    || e.kind == PortErrorKind::InvalidArgument =>
            {
                Ok(None)
            }
            Err(e) => Err(RuntimeError::dependency(format!(
                "reading profile `{id}`: {}",
                e.message
            ))),
        }
    }

    /// Starts every task of `run` that was registered and not started yet. Called once the call
    /// that delegated them is journalled, so a child's records never precede its registration.
    pub fn launch_pending(&self, run: &Arc<Run>) {
        let pending = run.agents.take_pending();
        if pending.is_empty() {
            return;
        }
        let Some(rt) = self.arc() else { return };
        for task in pending {
            self.launcher.launch(Arc::clone(&rt), Arc::clone(run), task);
        }
    }

    /// The decode policy for a provider format (Gemini synthesises missing call ids).
    pub fn call_id_policy(format: ProviderFormat) -> CallIdPolicy {
        if format == ProviderFormat::Gemini {
            CallIdPolicy::SynthesiseMissing
        } else {
            CallIdPolicy::Required
        }
    }
}
