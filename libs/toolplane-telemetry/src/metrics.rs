//! Metrics in the Prometheus text format (0.0.4): counters, gauges and histograms with fixed label
//! names, kept in a [`Registry`] each service owns and renders on its HTTP port's `/metrics`.
//!
//! Every service has its own registry, so one process running several services (`toolplane up`)
//! still serves each service's metrics on that service's port only. A family holds at most
//! [`MAX_SERIES`] label combinations; later combinations are counted under the value `other` for
//! every label, so a flood of distinct tool names cannot grow memory without bound.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

/// The `Content-Type` of [`Registry::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Most label combinations one family keeps.
pub const MAX_SERIES: usize = 10_000;
/// Upper bounds (seconds) of every histogram's buckets, from 0.5 ms to a minute.
pub const BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Series {
    Value(f64),
    Histogram {
        buckets: [u64; BUCKETS.len()],
        sum: f64,
        count: u64,
    },
}

#[derive(Debug)]
struct Family {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    series: Mutex<BTreeMap<Vec<String>, Series>>,
}

impl Family {
    fn with<R>(&self, values: &[&str], f: impl FnOnce(&mut Series) -> R) -> R {
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let mut key: Vec<String> = self
            .labels
            .iter()
            .enumerate()
            .map(|(i, _)| values.get(i).copied().unwrap_or("").to_owned())
            .collect();
        if !series.contains_key(&key) && series.len() >= MAX_SERIES {
            key = vec!["other".to_owned(); self.labels.len()];
        }
        let kind = self.kind;
        let entry = series.entry(key).or_insert_with(|| match kind {
            Kind::Histogram => Series::Histogram {
                buckets: [0; BUCKETS.len()],
                sum: 0.0,
                count: 0,
            },
            _ => Series::Value(0.0),
        });
        f(entry)
    }
}

/// A monotonically increasing count.
#[derive(Debug, Clone)]
pub struct Counter(Arc<Family>);

impl Counter {
    /// Adds one to the series of these label values (in the family's label order).
    pub fn inc(&self, values: &[&str]) {
        self.add(values, 1.0);
    }

    pub fn add(&self, values: &[&str], by: f64) {
        self.0.with(values, |s| {
            if let Series::Value(v) = s {
                *v += by.max(0.0);
            }
        });
    }
}

/// A value that goes up and down.
#[derive(Debug, Clone)]
pub struct Gauge(Arc<Family>);

impl Gauge {
    pub fn set(&self, values: &[&str], to: f64) {
        self.0.with(values, |s| *s = Series::Value(to));
    }
}

/// A distribution of durations in seconds over [`BUCKETS`].
#[derive(Debug, Clone)]
pub struct Histogram(Arc<Family>);

impl Histogram {
    pub fn observe(&self, values: &[&str], seconds: f64) {
        let seconds = if seconds.is_finite() {
            seconds.max(0.0)
        } else {
            0.0
        };
        self.0.with(values, |s| {
            if let Series::Histogram {
                buckets,
                sum,
                count,
            } = s
            {
                for (i, bound) in BUCKETS.iter().enumerate() {
                    if seconds <= *bound {
                        buckets[i] += 1;
                    }
                }
                *sum += seconds;
                *count += 1;
            }
        });
    }
}

type Hook = Box<dyn Fn() + Send + Sync>;

/// A family as the OTLP exporter reads it.
pub(crate) struct FamilySnapshot {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
    pub series: Vec<(Vec<String>, Series)>,
}

/// Registries pushed over OTLP when metric export is configured, each as its service.
static EXPORTED: Mutex<Vec<(String, std::sync::Weak<Registry>)>> = Mutex::new(Vec::new());

/// Pushes `registry` over OTLP as the metrics of `service` (the `service.name` resource
/// attribute) whenever the process exports metrics (`crate::init` with an OTLP endpoint).
/// Registries that are dropped stop being exported.
pub fn export(registry: &Arc<Registry>, service: &str) {
    let mut exported = EXPORTED.lock().unwrap_or_else(PoisonError::into_inner);
    exported.retain(|(_, r)| r.strong_count() > 0);
    exported.push((service.to_owned(), Arc::downgrade(registry)));
}

/// The live exported registries.
pub(crate) fn exported() -> Vec<(String, Arc<Registry>)> {
    let mut exported = EXPORTED.lock().unwrap_or_else(PoisonError::into_inner);
    exported.retain(|(_, r)| r.strong_count() > 0);
    exported
        .iter()
        .filter_map(|(s, r)| r.upgrade().map(|r| (s.clone(), r)))
        .collect()
}

/// One service's metrics.
#[derive(Default)]
pub struct Registry {
    families: Mutex<Vec<Arc<Family>>>,
    hooks: Mutex<Vec<Hook>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `hook` before every render: for gauges read from live state at scrape time.
    pub fn before_render(&self, hook: impl Fn() + Send + Sync + 'static) {
        self.hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(hook));
    }

    fn family(
        &self,
        name: &'static str,
        help: &'static str,
        kind: Kind,
        labels: &'static [&'static str],
    ) -> Arc<Family> {
        let mut families = self.families.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = families.iter().find(|f| f.name == name) {
            return Arc::clone(f);
        }
        let f = Arc::new(Family {
            name,
            help,
            kind,
            labels,
            series: Mutex::new(BTreeMap::new()),
        });
        families.push(Arc::clone(&f));
        f
    }

    pub fn counter(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Counter {
        Counter(self.family(name, help, Kind::Counter, labels))
    }

    pub fn gauge(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Gauge {
        Gauge(self.family(name, help, Kind::Gauge, labels))
    }

    pub fn histogram(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Histogram {
        Histogram(self.family(name, help, Kind::Histogram, labels))
    }

    /// Every family with its series (after the render hooks ran), for the OTLP exporter.
    pub(crate) fn snapshot(&self) -> Vec<FamilySnapshot> {
        self.run_hooks();
        let families: Vec<Arc<Family>> = self
            .families
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        families
            .iter()
            .map(|f| FamilySnapshot {
                name: f.name,
                help: f.help,
                kind: f.kind,
                labels: f.labels,
                series: f
                    .series
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            })
            .collect()
    }

    fn run_hooks(&self) {
        for hook in self
            .hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            hook();
        }
    }

    /// Every family in the Prometheus text format, in registration order.
    pub fn render(&self) -> String {
        self.run_hooks();
        let families: Vec<Arc<Family>> = self
            .families
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut out = String::new();
        for f in families {
            let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.as_str());
            let series = f.series.lock().unwrap_or_else(PoisonError::into_inner);
            for (values, s) in series.iter() {
                let labels = label_text(f.labels, values, None);
                match s {
                    Series::Value(v) => {
                        let _ = writeln!(out, "{}{labels} {}", f.name, number(*v));
                    }
                    Series::Histogram {
                        buckets,
                        sum,
                        count,
                    } => {
                        for (bound, n) in BUCKETS.iter().zip(buckets) {
                            let le = label_text(f.labels, values, Some(&number(*bound)));
                            let _ = writeln!(out, "{}_bucket{le} {n}", f.name);
                        }
                        let inf = label_text(f.labels, values, Some("+Inf"));
                        let _ = writeln!(out, "{}_bucket{inf} {count}", f.name);
                        let _ = writeln!(out, "{}_sum{labels} {}", f.name, number(*sum));
                        let _ = writeln!(out, "{}_count{labels} {count}", f.name);
                    }
                }
            }
        }
        out
    }
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn label_text(names: &[&str], values: &[String], le: Option<&str>) -> String {
    let mut parts: Vec<String> = names
        .iter()
        .zip(values)
        .map(|(n, v)| format!("{n}=\"{}\"", escape(v)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// A service's HTTP port's routes: `GET /metrics` (this registry) and `GET /healthz`.
pub fn router(registry: Arc<Registry>) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let body = registry.render();
                async move { ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], body) }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
}

/// A service's HTTP port: `GET /metrics` (this registry) and `GET /healthz`.
#[derive(Debug)]
pub struct MetricsServer {
    addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// Serves `registry` on `listener` until [`MetricsServer::stop`] (or drop).
    pub fn start(
        listener: tokio::net::TcpListener,
        registry: Arc<Registry>,
    ) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let app = router(registry);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "the metrics server stopped");
            }
        });
        Ok(MetricsServer {
            addr,
            stop: Some(tx),
            task,
        })
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Stops serving and waits for the server to end.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_gauges_and_histograms_render_as_prometheus_text() {
        let r = Registry::new();
        let calls = r.counter("t_calls_total", "Calls.", &["tool", "outcome"]);
        calls.inc(&["a\"b", "ok"]);
        calls.inc(&["a\"b", "ok"]);
        calls.add(&["x", "system"], 3.0);
        r.gauge("t_conn", "Connections.", &["state"])
            .set(&["connected"], 2.0);
        let h = r.histogram("t_seconds", "Latency.", &[]);
        h.observe(&[], 0.003);
        h.observe(&[], 0.2);
        let text = r.render();
        assert!(text.contains("# TYPE t_calls_total counter\n"), "{text}");
        assert!(
            text.contains("t_calls_total{tool=\"a\\\"b\",outcome=\"ok\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("t_calls_total{tool=\"x\",outcome=\"system\"} 3\n"),
            "{text}"
        );
        assert!(text.contains("t_conn{state=\"connected\"} 2\n"), "{text}");
        assert!(
            text.contains("t_seconds_bucket{le=\"0.0025\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("t_seconds_bucket{le=\"0.005\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("t_seconds_bucket{le=\"+Inf\"} 2\n"), "{text}");
        assert!(text.contains("t_seconds_count 2\n"), "{text}");
        assert!(text.contains("t_seconds_sum 0.203\n"), "{text}");
    }

    #[test]
    fn a_flood_of_label_values_folds_into_other() {
        let r = Registry::new();
        let c = r.counter("t_total", "T.", &["tool"]);
        for i in 0..MAX_SERIES + 5 {
            c.inc(&[&format!("tool-{i}")]);
        }
        let text = r.render();
        assert!(text.contains("t_total{tool=\"other\"} 5\n"));
        assert_eq!(
            text.lines().filter(|l| l.starts_with("t_total{")).count(),
            MAX_SERIES + 1
        );
    }
}
