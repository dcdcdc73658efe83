//! What authentication costs a tool call (`TOOLPLANE_BENCH_ONLY=auth`): two planes in this
//! process, one with authentication off, one with it on as `toolplane up --auth` runs it (a token
//! store on disk, the in-memory service credential between the plane's services), the latter
//! called with a toolplane token of role `agent` as `authorization: Bearer` on every call. The
//! same calls alternate between the two, so load changes hit both alike; the figure is the ratio
//! of their medians (target ≤ 1.05). It also prints the token store's verification of that token
//! alone, the share of a call that is looking the token up.

use std::time::{Duration, Instant};

use serde_json::json;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use toolplane::plane::{Plane, PlaneConfig};
use toolplane_auth::{Authenticator, NewToken, Role, TokenStore};
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;
use toolplane_serve::auth::{DEFAULT_CELL, open_token_store};

use crate::{Inv, SAMPLES, Samples, call, channel, median, open, put_bench_profile};

/// Adds `authorization` to every request, when there is one.
#[derive(Clone)]
struct Bearer(Option<AsciiMetadataValue>);

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

type Client = RuntimeServiceClient<InterceptedService<Channel, Bearer>>;

/// One plane and the client that calls it, with an invocation whose `output/a.md` is written.
struct Side {
    plane: Plane,
    rt: Client,
    inv: Inv,
    samples: Samples,
}

impl Side {
    async fn up(cfg: PlaneConfig, admin: Option<&str>, agent: Option<&str>) -> Side {
        let plane = Plane::up(cfg).await.unwrap();
        put_bench_profile(&plane.catalog_url(), admin).await;
        let bearer = Bearer(agent.map(|v| v.parse().unwrap()));
        let mut rt =
            RuntimeServiceClient::with_interceptor(channel(&plane.runtime_url()).await, bearer);
        let inv = fresh(&mut rt).await;
        Side {
            plane,
            rt,
            inv,
            samples: Samples::new(),
        }
    }

    /// One `read_file` and one `dice.roll`, timed; kept after the warm-up.
    async fn round(&mut self, keep: bool) {
        if self.samples.spent() {
            self.inv = fresh(&mut self.rt).await;
            self.samples.restart();
        }
        self.samples.round(&mut self.rt, &mut self.inv, keep).await;
    }
}

async fn fresh(rt: &mut Client) -> Inv {
    let mut inv = open(rt).await;
    let args = json!({"path": "output/a.md", "content": "line one\nline two\n"});
    call(rt, &mut inv, 0, "workspace_write_file", args).await;
    inv
}

async fn token(tokens: &TokenStore, role: Role) -> String {
    let created = tokens
        .create(NewToken {
            name: format!("bench-{}", role.as_str()),
            cell: DEFAULT_CELL.into(),
            role,
            expires_at_unix_ms: None,
        })
        .await
        .unwrap();
    format!("Bearer {}", created.secret.expose())
}

pub async fn overhead() {
    let (off_dir, on_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ephemeral = |dir: &tempfile::TempDir| {
        let mut cfg = PlaneConfig::ephemeral(dir.path().to_path_buf());
        cfg.runtime.invocation_idle_timeout = Duration::from_secs(3600);
        cfg
    };
    let mut off = Side::up(ephemeral(&off_dir), None, None).await;
    // As `toolplane up --auth`: the token store in `<data-dir>/auth`, the plane adding its
    // in-memory service credential for the calls between its services.
    let tokens = open_token_store(&on_dir.path().join("auth")).await.unwrap();
    let (admin, agent) = (
        token(&tokens, Role::Admin).await,
        token(&tokens, Role::Agent).await,
    );
    let mut cfg = ephemeral(&on_dir);
    cfg.auth = Authenticator::on(Some(tokens.clone()), None);
    let mut on = Side::up(cfg, Some(&admin), Some(&agent)).await;
    for i in 0..SAMPLES + 200 {
        // Each goes first every other round, so neither always finds the other's leftovers.
        let keep = i >= 200;
        if i % 2 == 0 {
            off.round(keep).await;
            on.round(keep).await;
        } else {
            on.round(keep).await;
            off.round(keep).await;
        }
    }
    let secret = agent.trim_start_matches("Bearer ");
    let mut t_verify = Vec::new();
    for _ in 0..SAMPLES {
        let t = Instant::now();
        tokens.verify(secret).await.unwrap();
        t_verify.push(t.elapsed());
    }
    // The same store without the verified-token cache: two store reads per verification.
    let uncached = tokens.clone().with_cache(Duration::ZERO, 0);
    let mut t_uncached = Vec::new();
    for _ in 0..SAMPLES {
        let t = Instant::now();
        uncached.verify(secret).await.unwrap();
        t_uncached.push(t.elapsed());
    }
    for (what, off_t, on_t) in [
        ("read_file", &off.samples.read, &on.samples.read),
        ("dice.roll", &off.samples.dice, &on.samples.dice),
    ] {
        let (off_m, on_m) = (median(off_t.clone()), median(on_t.clone()));
        let ratio = on_m.as_secs_f64() / off_m.as_secs_f64();
        println!(
            "ExecuteToolCalls {what} p50 with an agent token {on_m:?}, auth off {off_m:?}: {ratio:.3}× (target ≤ 1.05) {}",
            if ratio <= 1.05 { "ok" } else { "MISSED" }
        );
    }
    println!(
        "of which: TokenStore::verify of that token alone p50 {:?} (cached), {:?} (cache off)",
        median(t_verify),
        median(t_uncached)
    );
    off.plane.shutdown().await;
    on.plane.shutdown().await;
}
