//! A real S3-compatible server for the S3 backend's tests: started once per test process on a free
//! loopback port with a temp root, credentials and one bucket, and stopped (its root removed) when
//! the test process exits, also when it panics. (When the whole process group is killed, as a
//! cancelled test run does, the server goes with it but its temp root stays.)
//!
//! Two servers are known: `s3s-fs` (Rust, installed by `scripts/test`) and `moto` (Python, for the
//! ignored tests). A missing one fails the test with how to install it, never skips it (see
//! docs/storage.md, "Testing the S3 backend").

#![allow(dead_code)]

use std::{
    env,
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::OnceCell;
use toolplane_store::{Key, S3Config, S3Store, Store, StoreOptions};

const ACCESS_KEY: &str = "toolplane-test";
const SECRET_KEY: &str = "toolplane-test-secret-3f9a";
const BUCKET: &str = "toolplane";
const REGION: &str = "us-east-1";

/// Which S3-compatible server to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `moto_server` from PyPI's `moto[server]`, in `target/s3-venv` (made by `scripts/test`).
    Moto,
    /// `s3s-fs` from crates.io (`cargo install s3s-fs --version 0.14.1 --features binary`).
    S3sFs,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Moto => "moto",
            Kind::S3sFs => "s3s-fs",
        }
    }
}

/// A running server; lives for the whole test process.
#[derive(Debug)]
pub struct Server {
    pub kind: Kind,
    pub endpoint: String,
    /// The wrapper shell holding the server; it stops the server when our end of its stdin
    /// closes, which happens when the test process exits for any reason.
    _guard: Child,
}

static MOTO: OnceCell<Server> = OnceCell::const_new();
static S3S_FS: OnceCell<Server> = OnceCell::const_new();
static STORES: AtomicUsize = AtomicUsize::new(0);

/// The server of `kind` for this test process, started on first use.
pub async fn server(kind: Kind) -> &'static Server {
    let cell = match kind {
        Kind::Moto => &MOTO,
        Kind::S3sFs => &S3S_FS,
    };
    cell.get_or_init(|| start(kind)).await
}

/// The configuration of a fresh, empty store on `server`: its own prefix in the shared bucket.
pub fn config(server: &Server) -> S3Config {
    let n = STORES.fetch_add(1, Ordering::SeqCst);
    S3Config {
        endpoint: Some(server.endpoint.clone()),
        bucket: BUCKET.to_owned(),
        region: REGION.to_owned(),
        access_key_id: ACCESS_KEY.to_owned(),
        secret_access_key: SECRET_KEY.to_owned(),
        prefix: Some(Key::new(format!("store-{n}")).unwrap()),
    }
}

/// A fresh, empty store with `options` on the server of `kind`.
pub async fn open(kind: Kind, options: StoreOptions) -> Arc<dyn Store> {
    let server = server(kind).await;
    Arc::new(S3Store::new(config(server), options).unwrap())
}

fn workspace_target() -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
    }
}

/// The server binary of `kind`, or a panic that says how to install it.
fn binary(kind: Kind) -> PathBuf {
    let (found, install) = match kind {
        Kind::Moto => {
            let venv = workspace_target().join("s3-venv/bin/moto_server");
            (
                venv.is_file().then_some(venv),
                "python3 -m venv target/s3-venv && target/s3-venv/bin/pip install -r \
                 libs/toolplane-store/tests/s3-server-requirements.txt (scripts/test does this)",
            )
        }
        Kind::S3sFs => {
            let cargo_home = env::var_os("CARGO_HOME")
                .map(PathBuf::from)
                .or_else(|| env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")));
            let on_path = env::var_os("PATH").and_then(|path| {
                env::split_paths(&path)
                    .map(|dir| dir.join("s3s-fs"))
                    .find(|candidate| candidate.is_file())
            });
            let in_cargo = cargo_home
                .map(|home| home.join("bin/s3s-fs"))
                .filter(|candidate| candidate.is_file());
            (
                on_path.or(in_cargo),
                "cargo install s3s-fs --version 0.14.1 --features binary --locked \
                 (scripts/test does this)",
            )
        }
    };
    found.unwrap_or_else(|| {
        panic!(
            "the {} S3 server is not installed; install it with: {install}",
            kind.name()
        )
    })
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

async fn start(kind: Kind) -> Server {
    let binary = binary(kind);
    let root = tempfile::Builder::new()
        .prefix("toolplane-s3-")
        .tempdir()
        .unwrap()
        .keep();
    let port = free_port();
    let mut args: Vec<String> = Vec::new();
    match kind {
        Kind::Moto => {
            args.extend(["-H", "127.0.0.1", "-p"].map(str::to_owned));
            args.push(port.to_string());
        }
        Kind::S3sFs => {
            std::fs::create_dir(root.join("data")).unwrap();
            std::fs::create_dir(root.join("data").join(BUCKET)).unwrap();
            args.extend(["--host", "127.0.0.1", "--port"].map(str::to_owned));
            args.push(port.to_string());
            args.extend(
                ["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY].map(str::to_owned),
            );
            args.push(root.join("data").display().to_string());
        }
    }
    // The wrapper runs the server in the background and waits for EOF on its stdin (our pipe),
    // then stops the server and removes the root.
    let script = r#"root=$1; shift; "$@" >"$root/server.log" 2>&1 </dev/null & pid=$!
cat >/dev/null; kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$root""#;
    let guard = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(&root)
        .arg(&binary)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the {} S3 server did not listen on port {port} within 30 s; its log: {}",
            kind.name(),
            std::fs::read_to_string(root.join("server.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let endpoint = format!("http://127.0.0.1:{port}");
    if kind == Kind::Moto {
        // moto accepts an unsigned CreateBucket.
        let response = reqwest::Client::new()
            .put(format!("{endpoint}/{BUCKET}"))
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "create bucket: {response:?}"
        );
    }
    Server {
        kind,
        endpoint,
        _guard: guard,
    }
}
