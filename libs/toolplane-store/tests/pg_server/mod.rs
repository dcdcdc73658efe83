//! A real PostgreSQL server for the PostgreSQL backend's tests: started once per test process on a
//! unix socket in a temp directory (no TCP port), trust authentication, stopped (its directory
//! removed) when the test process exits, also when it panics.
//!
//! Its data directory is a copy of a template made once by `initdb` under `target/` (initdb takes
//! seconds, a copy milliseconds). PostgreSQL refuses to run as root: as root, both run as the
//! `postgres` user (else `nobody`) through `setpriv`, with the directory handed to that user. A
//! missing PostgreSQL fails the test with how to install it, never skips it (docs/storage.md,
//! "Testing the PostgreSQL backend").

#![allow(dead_code)]

use std::{
    env,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use tokio::sync::OnceCell;
use toolplane_store::{PgConfig, PgStore, StoreOptions};

/// The socket's port number: with `listen_addresses` empty it only names the socket file.
const PORT: u16 = 5432;

/// A running server; lives for the whole test process.
#[derive(Debug)]
pub struct Server {
    /// The directory holding the socket (and the data directory).
    pub dir: PathBuf,
    /// The wrapper shell holding the server; it stops the server when our end of its stdin
    /// closes, which happens when the test process exits for any reason.
    _guard: Child,
}

static SERVER: OnceCell<Server> = OnceCell::const_new();
static STORES: AtomicUsize = AtomicUsize::new(0);

/// The server for this test process, started on first use.
pub async fn server() -> &'static Server {
    SERVER.get_or_init(start).await
}

/// The configuration of a fresh, empty store on `server`: its own table.
pub fn config(server: &Server) -> PgConfig {
    let n = STORES.fetch_add(1, Ordering::SeqCst);
    PgConfig {
        connection: format!(
            "host={} port={PORT} user=postgres dbname=postgres",
            server.dir.display()
        ),
        password: None,
        table: format!("store_{n}"),
        max_connections: 16,
    }
}

/// A fresh, empty store with `options`.
pub async fn open(options: StoreOptions) -> std::sync::Arc<dyn toolplane_store::Store> {
    let server = server().await;
    std::sync::Arc::new(PgStore::open(config(server), options).await.unwrap())
}

fn workspace_target() -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
    }
}

/// The directory holding `initdb` and `postgres`: PATH first, then Debian's
/// /usr/lib/postgresql/<version>/bin (the newest), or a panic that says how to install them.
fn bin_dir() -> PathBuf {
    let on_path = env::var_os("PATH").and_then(|path| {
        env::split_paths(&path)
            .find(|dir| dir.join("initdb").is_file() && dir.join("postgres").is_file())
    });
    let debian = || {
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let version = entry.file_name().to_str()?.parse().ok()?;
                let bin = entry.path().join("bin");
                bin.join("initdb").is_file().then_some((version, bin))
            })
            .collect();
        versions.sort();
        versions.pop().map(|(_, bin)| bin)
    };
    on_path.or_else(debian).unwrap_or_else(|| {
        panic!(
            "PostgreSQL (initdb and postgres) is not installed; install it with: \
             apt-get install postgresql (Debian; .ci/run and scripts/test do this)"
        )
    })
}

fn run(command: &mut Command, what: &str) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The user PostgreSQL runs as when we are root, or `None` when we are not root.
fn run_as() -> Option<&'static str> {
    let uid = run(Command::new("id").arg("-u"), "id -u");
    if uid.trim() != "0" {
        return None;
    }
    let has_postgres = Command::new("id")
        .args(["-u", "postgres"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    Some(if has_postgres { "postgres" } else { "nobody" })
}

/// `program` in `bin`, run as `user` when set (through `setpriv`, which execs: no extra process
/// between the wrapper and the server, so a signal reaches the server itself).
fn command(bin: &Path, program: &str, user: Option<&str>) -> Command {
    match user {
        Some(user) => {
            let mut command = Command::new("setpriv");
            command
                .arg(format!("--reuid={user}"))
                .arg(format!("--regid={user}"))
                .arg("--init-groups")
                .arg("--")
                .arg(bin.join(program));
            command
        }
        None => Command::new(bin.join(program)),
    }
}

fn chown(path: &Path, user: Option<&str>) {
    if let Some(user) = user {
        run(
            Command::new("chown")
                .args(["-R", &format!("{user}:")])
                .arg(path),
            "chown",
        );
    }
}

/// The initdb'd template for this PostgreSQL version, made once under `target/`.
fn template(bin: &Path, user: Option<&str>) -> PathBuf {
    let version = run(
        Command::new(bin.join("postgres")).arg("--version"),
        "postgres --version",
    );
    let major = version
        .split_whitespace()
        .last()
        .and_then(|v| v.split('.').next())
        .unwrap_or("unknown")
        .to_owned();
    let template = workspace_target().join(format!("pg-template-{major}"));
    if template.join("PG_VERSION").is_file() {
        return template;
    }
    // initdb into a private directory, then rename: concurrent test processes race to make the
    // template and all but one discard theirs.
    let scratch = tempfile::Builder::new()
        .prefix("pg-template-")
        .tempdir_in(workspace_target())
        .unwrap();
    chown(scratch.path(), user);
    let data = scratch.path().join("data");
    run(
        command(bin, "initdb", user).arg("-D").arg(&data).args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]),
        "initdb",
    );
    let _ = std::fs::rename(&data, &template);
    template
}

async fn start() -> Server {
    let bin = bin_dir();
    let user = run_as();
    let template = template(&bin, user);
    // Removed on a failure before the wrapper that removes it at the end is running.
    let scratch = tempfile::Builder::new()
        .prefix("toolplane-pg-")
        .tempdir()
        .unwrap();
    let dir = scratch.path().to_path_buf();
    let data = dir.join("data");
    run(
        Command::new("cp").arg("-a").arg(&template).arg(&data),
        "copy the template",
    );
    chown(&dir, user);
    let server = command(&bin, "postgres", user);
    let mut args: Vec<String> = vec![server.get_program().to_string_lossy().into_owned()];
    args.extend(server.get_args().map(|a| a.to_string_lossy().into_owned()));
    args.extend(["-D".to_owned(), data.display().to_string()]);
    args.extend(["-k".to_owned(), dir.display().to_string()]);
    args.extend(["-p".to_owned(), PORT.to_string()]);
    args.extend(["-c", "listen_addresses=", "-c", "max_connections=200"].map(str::to_owned));
    // The wrapper runs the server in the background and waits for EOF on its stdin (our pipe),
    // then stops it (SIGINT: fast shutdown) and removes the directory.
    let script = r#"dir=$1; shift; "$@" >"$dir/server.log" 2>&1 </dev/null & pid=$!
cat >/dev/null; kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir""#;
    let dir = scratch.keep();
    let guard = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(&dir)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server { dir, _guard: guard };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let probe = PgConfig {
            table: "ready".to_owned(),
            ..config(&server)
        };
        match PgStore::open(probe, StoreOptions::default()).await {
            Ok(_) => return server,
            Err(e) => assert!(
                Instant::now() < deadline,
                "PostgreSQL did not accept connections within 30 s ({e}); its log: {}",
                std::fs::read_to_string(server.dir.join("server.log")).unwrap_or_default()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
