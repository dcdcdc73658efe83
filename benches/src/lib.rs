//! Shared plumbing for toolplane's benchmarks.
//!
//! Every benchmark measures its subject next to a baseline in the same process (usually the bare
//! tonic echo of `toolplane-testkit`), then reports the ratio of the two medians against the
//! target an issue names. Absolute times differ between machines; the ratio is what is kept in
//! `BENCHMARKS.md`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::Criterion;
use tonic::transport::Channel;
use toolplane_proto::testing::v1::EchoRequest;
use toolplane_proto::testing::v1::echo_service_client::EchoServiceClient;

pub mod tool_search;

/// Where criterion writes its results: `<workspace>/target/criterion`.
pub fn criterion_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("criterion")
}

/// The median estimate, in nanoseconds, of a finished criterion benchmark id such as
/// `baseline/tonic_echo`.
pub fn median_ns(id: &str) -> Option<f64> {
    // Criterion names a benchmark's directory after its id with `/` replaced by `_`.
    let path = criterion_dir()
        .join(id.replace('/', "_"))
        .join("new")
        .join("estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("median")?.get("point_estimate")?.as_f64()
}

/// One line of a ratio report.
#[derive(Debug, Clone)]
pub struct Ratio {
    pub subject: &'static str,
    pub baseline: &'static str,
    /// The subject must cost at most `target` × the baseline.
    pub target: f64,
}

/// Prints each subject's median, the baseline's, their ratio and whether it meets its target.
/// Returns false when a target is missed or a result is missing.
pub fn report(ratios: &[Ratio]) -> bool {
    let mut ok = true;
    println!(
        "\n{:<44} {:>12} {:>12} {:>9} {:>9}  verdict",
        "subject / baseline", "subject", "baseline", "ratio", "target"
    );
    for r in ratios {
        match (median_ns(r.subject), median_ns(r.baseline)) {
            (Some(s), Some(b)) => {
                let ratio = s / b;
                let pass = ratio <= r.target;
                ok &= pass;
                println!(
                    "{:<44} {:>10.2}µs {:>10.2}µs {:>9.4} {:>9.4}  {}",
                    format!("{} / {}", r.subject, r.baseline),
                    s / 1000.0,
                    b / 1000.0,
                    ratio,
                    r.target,
                    if pass { "ok" } else { "MISSED" }
                );
            }
            _ => {
                ok = false;
                println!(
                    "{} / {}: no result (was the benchmark filtered out?)",
                    r.subject, r.baseline
                );
            }
        }
    }
    ok
}

/// Criterion as every benchmark here runs it: results under [`criterion_dir`], 1 s of warm-up,
/// 3 s of measurement, command-line filters honoured.
pub fn criterion() -> Criterion {
    Criterion::default()
        .output_directory(&criterion_dir())
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args()
}

/// The baseline every ratio is taken against: `baseline/tonic_echo`, one unary echo of 64 bytes
/// over loopback through `client`.
// A failed echo makes every ratio meaningless: failing loudly is right here.
#[allow(clippy::unwrap_used)]
pub fn bench_echo(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    client: &mut EchoServiceClient<Channel>,
) {
    c.bench_function("baseline/tonic_echo", |b| {
        b.iter(|| {
            let reply = rt
                .block_on(client.echo(EchoRequest {
                    payload: vec![7u8; 64],
                }))
                .unwrap();
            black_box(reply)
        })
    });
}
