//! Shared plumbing for toolplane's benchmarks.
//!
//! Every benchmark measures its subject next to a baseline in the same process (usually the bare
//! tonic echo of `toolplane-testkit`), then reports the ratio of the two medians against the
//! target an issue names. Absolute times differ between machines; the ratio is what is kept in
//! `BENCHMARKS.md`.

use std::path::{Path, PathBuf};

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
