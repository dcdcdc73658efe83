//! Metrics kept in a `prometheus-client` registry each service owns and renders, in the Prometheus
//! text format (0.0.4), on its HTTP port's `/metrics`; the same instruments also record into the
//! OpenTelemetry SDK's meters when the process pushes metrics over OTLP ([`crate::otlp_metrics`]).
//!
//! Every service has its own registry, so one process running several services (`toolplane up`)
//! still serves each service's metrics on that service's port only. Families have fixed label
//! names; one family holds at most [`MAX_SERIES`] label combinations, later combinations are
//! counted under the value `other` for every label, so a flood of distinct tool names cannot grow
//! memory without bound.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use opentelemetry::KeyValue;
use opentelemetry::metrics::Meter;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter as PromCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge as PromGauge;
use prometheus_client::metrics::histogram::Histogram as PromHistogram;

/// The `Content-Type` of [`Registry::render`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
/// Most label combinations one family keeps.
pub const MAX_SERIES: usize = 10_000;
/// Upper bounds (seconds) of every histogram's buckets, from 0.5 ms to a minute.
pub const BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// A series' labels by their Prometheus names.
type Labels = Vec<(Cow<'static, str>, String)>;
type HistogramFamily = Family<Labels, PromHistogram, Buckets>;

/// Makes each series of a histogram family with the family's bucket bounds.
#[derive(Debug, Clone, Copy)]
struct Buckets(&'static [f64]);

impl prometheus_client::metrics::family::MetricConstructor<PromHistogram> for Buckets {
    fn new_metric(&self) -> PromHistogram {
        PromHistogram::new(self.0.iter().copied())
    }
}

/// A family that is declared (`# HELP`, `# TYPE`) before it has a series: a fresh service shows
/// every metric it serves, which dashboards and checks can rely on.
#[derive(Debug)]
struct Declared<M>(M);

impl<M: EncodeMetric> EncodeMetric for Declared<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}

/// A Prometheus name for an OpenTelemetry one: dots become underscores.
fn prometheus_name(name: &'static str) -> Cow<'static, str> {
    if name.contains('.') {
        Cow::Owned(name.replace('.', "_"))
    } else {
        Cow::Borrowed(name)
    }
}

/// A family's label names (OpenTelemetry attribute keys, with dots, and their Prometheus names)
/// and how many label combinations it holds.
#[derive(Debug, Clone)]
struct LabelNames {
    names: &'static [&'static str],
    prometheus: Arc<[Cow<'static, str>]>,
    series: Arc<AtomicUsize>,
}

impl LabelNames {
    fn new(names: &'static [&'static str]) -> Self {
        LabelNames {
            names,
            prometheus: names.iter().map(|n| prometheus_name(n)).collect(),
            series: Arc::default(),
        }
    }

    /// The series' OpenTelemetry attributes.
    fn attributes(&self, set: &Labels) -> Vec<KeyValue> {
        self.names
            .iter()
            .zip(set)
            .map(|(k, (_, v))| KeyValue::new(*k, v.clone()))
            .collect()
    }

    /// The label set of `values` in the names' order, or all-`other` once the family is full.
    fn set<M: Clone, C>(&self, family: &Family<Labels, M, C>, values: &[&str]) -> Labels
    where
        C: prometheus_client::metrics::family::MetricConstructor<M>,
    {
        let set: Labels = self
            .prometheus
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), values.get(i).copied().unwrap_or("").to_owned()))
            .collect();
        if family.get(&set).is_some() {
            return set;
        }
        // Two threads adding the same new combination may both count it: the bound is
        // approximate, never exceeded by more than the number of racing threads.
        if self.series.fetch_add(1, Ordering::Relaxed) >= MAX_SERIES {
            self.series.fetch_sub(1, Ordering::Relaxed);
            self.prometheus
                .iter()
                .map(|n| (n.clone(), "other".to_owned()))
                .collect()
        } else {
            set
        }
    }
}

/// A monotonically increasing count.
#[derive(Debug, Clone)]
pub struct Counter {
    family: Family<Labels, PromCounter<f64, AtomicU64>>,
    labels: LabelNames,
    otel: Arc<OnceLock<opentelemetry::metrics::Counter<f64>>>,
}

impl Counter {
    /// Adds one to the series of these label values (in the family's label order).
    pub fn inc(&self, values: &[&str]) {
        self.add(values, 1.0);
    }

    pub fn add(&self, values: &[&str], by: f64) {
        let by = if by.is_finite() { by.max(0.0) } else { 0.0 };
        let set = self.labels.set(&self.family, values);
        if let Some(otel) = self.otel.get() {
            otel.add(by, &self.labels.attributes(&set));
        }
        self.family.get_or_create(&set).inc_by(by);
    }
}

/// A value that goes up and down.
#[derive(Debug, Clone)]
pub struct Gauge {
    family: Family<Labels, PromGauge<f64, AtomicU64>>,
    labels: LabelNames,
    otel: Arc<OnceLock<opentelemetry::metrics::Gauge<f64>>>,
}

impl Gauge {
    pub fn set(&self, values: &[&str], to: f64) {
        let set = self.labels.set(&self.family, values);
        if let Some(otel) = self.otel.get() {
            otel.record(to, &self.labels.attributes(&set));
        }
        self.family.get_or_create(&set).set(to);
    }
}

/// A distribution over its family's buckets ([`BUCKETS`] seconds unless made with
/// [`Registry::histogram_with_buckets`]).
#[derive(Debug, Clone)]
pub struct Histogram {
    family: HistogramFamily,
    labels: LabelNames,
    otel: Arc<OnceLock<opentelemetry::metrics::Histogram<f64>>>,
}

impl Histogram {
    pub fn observe(&self, values: &[&str], value: f64) {
        let value = if value.is_finite() {
            value.max(0.0)
        } else {
            0.0
        };
        let set = self.labels.set(&self.family, values);
        if let Some(otel) = self.otel.get() {
            otel.record(value, &self.labels.attributes(&set));
        }
        self.family.get_or_create(&set).observe(value);
    }
}

type Hook = Box<dyn Fn() + Send + Sync>;
/// Creates a family's OpenTelemetry instrument from a meter.
type Binder = Box<dyn Fn(&Meter) + Send + Sync>;

#[derive(Clone)]
enum Instrument {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
}

/// Registries pushed over OTLP when metric export is configured, each as its service.
static EXPORTED: Mutex<Vec<(String, std::sync::Weak<Registry>)>> = Mutex::new(Vec::new());

/// Pushes `registry` over OTLP as the metrics of `service` (the `service.name` resource
/// attribute) whenever the process exports metrics (`crate::init` with an OTLP endpoint).
/// Registries that are dropped stop being exported. Only what is recorded after both this call
/// and `init` is pushed; `/metrics` counts everything.
pub fn export(registry: &Arc<Registry>, service: &str) {
    {
        let mut exported = EXPORTED.lock().unwrap_or_else(PoisonError::into_inner);
        exported.retain(|(_, r)| r.strong_count() > 0);
        exported.push((service.to_owned(), Arc::downgrade(registry)));
    }
    crate::otlp_metrics::exported(registry, service);
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
    prom: Mutex<prometheus_client::registry::Registry>,
    instruments: Mutex<HashMap<&'static str, Instrument>>,
    hooks: Arc<Mutex<Vec<Hook>>>,
    meter: Mutex<Option<Meter>>,
    binders: Mutex<Vec<Binder>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `hook` before every render (and every OTLP collection): for gauges read from live
    /// state at scrape time.
    pub fn before_render(&self, hook: impl Fn() + Send + Sync + 'static) {
        lock(&self.hooks).push(Box::new(hook));
    }

    /// Records into `meter`'s instruments from now on (the OTLP push of this registry).
    pub(crate) fn attach(&self, meter: Meter) {
        for bind in lock(&self.binders).iter() {
            bind(&meter);
        }
        // Gauges refreshed by the render hooks are refreshed before each collection too: the
        // SDK runs observable callbacks before it reads the synchronous instruments.
        let hooks = Arc::clone(&self.hooks);
        let _refresh = meter
            .u64_observable_gauge("toolplane.metrics.refresh")
            .with_callback(move |_| run_hooks(&hooks))
            .build();
        *lock(&self.meter) = Some(meter);
    }

    fn bind(&self, binder: Binder) {
        if let Some(meter) = lock(&self.meter).as_ref() {
            binder(meter);
        }
        lock(&self.binders).push(binder);
    }

    pub fn counter(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Counter {
        if let Some(Instrument::Counter(c)) = lock(&self.instruments).get(name) {
            return c.clone();
        }
        let c = Counter {
            family: Family::default(),
            labels: LabelNames::new(labels),
            otel: Arc::default(),
        };
        // The encoder appends `_total` to a counter's name itself.
        let base = name.strip_suffix("_total").unwrap_or(name);
        lock(&self.prom).register(base, sentence(help), Declared(c.family.clone()));
        let otel = Arc::clone(&c.otel);
        self.bind(Box::new(move |m: &Meter| {
            let _ = otel.set(m.f64_counter(name).with_description(help).build());
        }));
        lock(&self.instruments).insert(name, Instrument::Counter(c.clone()));
        c
    }

    pub fn gauge(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Gauge {
        if let Some(Instrument::Gauge(g)) = lock(&self.instruments).get(name) {
            return g.clone();
        }
        let g = Gauge {
            family: Family::default(),
            labels: LabelNames::new(labels),
            otel: Arc::default(),
        };
        lock(&self.prom).register(name, sentence(help), Declared(g.family.clone()));
        let otel = Arc::clone(&g.otel);
        self.bind(Box::new(move |m: &Meter| {
            let _ = otel.set(m.f64_gauge(name).with_description(help).build());
        }));
        lock(&self.instruments).insert(name, Instrument::Gauge(g.clone()));
        g
    }

    /// A histogram of durations over [`BUCKETS`] seconds (unit `s` over OTLP).
    pub fn histogram(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Histogram {
        self.histogram_with_buckets(name, help, labels, "s", &BUCKETS)
    }

    /// A histogram named and labelled the OpenTelemetry way (`gen_ai.client.token.usage`, label
    /// `gen_ai.token.type`) over `buckets` (upper bounds, ascending) in `unit` (UCUM: `s`,
    /// `{token}`). `/metrics` shows it under the Prometheus names of the OpenTelemetry-to-
    /// Prometheus mapping: dots become underscores, and unit `s` adds `_seconds`
    /// (`gen_ai_client_operation_duration_seconds`, label `gen_ai_token_type`).
    pub fn histogram_with_buckets(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        unit: &'static str,
        buckets: &'static [f64],
    ) -> Histogram {
        if let Some(Instrument::Histogram(h)) = lock(&self.instruments).get(name) {
            return h.clone();
        }
        let h = Histogram {
            family: Family::new_with_constructor(Buckets(buckets)),
            labels: LabelNames::new(labels),
            otel: Arc::default(),
        };
        let mut prometheus = prometheus_name(name);
        if unit == "s" && !prometheus.ends_with("_seconds") {
            prometheus = Cow::Owned(format!("{prometheus}_seconds"));
        }
        lock(&self.prom).register(prometheus, sentence(help), Declared(h.family.clone()));
        let otel = Arc::clone(&h.otel);
        self.bind(Box::new(move |m: &Meter| {
            let _ = otel.set(
                m.f64_histogram(name)
                    .with_description(help)
                    .with_unit(unit)
                    .with_boundaries(buckets.to_vec())
                    .build(),
            );
        }));
        lock(&self.instruments).insert(name, Instrument::Histogram(h.clone()));
        h
    }

    /// Every family in the Prometheus text format (0.0.4), in registration order.
    pub fn render(&self) -> String {
        run_hooks(&self.hooks);
        let mut out = String::new();
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &lock(&self.prom))
        {
            tracing::warn!(error = %e, "metrics could not be encoded");
        }
        out
    }
}

/// `help` without its final period: the encoder ends every help text with one.
fn sentence(help: &str) -> &str {
    help.strip_suffix('.').unwrap_or(help)
}

fn run_hooks(hooks: &Mutex<Vec<Hook>>) {
    for hook in lock(hooks).iter() {
        hook();
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
        assert!(text.contains("# HELP t_calls_total Calls.\n"), "{text}");
        r.counter("t_unused_total", "Never counted.", &["tool"]);
        assert!(
            r.render().contains("# TYPE t_unused_total counter\n"),
            "a family without series is still declared"
        );
        assert!(
            text.contains("t_calls_total{tool=\"a\\\"b\",outcome=\"ok\"} 2.0\n"),
            "{text}"
        );
        assert!(
            text.contains("t_calls_total{tool=\"x\",outcome=\"system\"} 3.0\n"),
            "{text}"
        );
        assert!(text.contains("t_conn{state=\"connected\"} 2.0\n"), "{text}");
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
        assert!(text.contains("t_total{tool=\"other\"} 5.0\n"));
        assert_eq!(
            text.lines().filter(|l| l.starts_with("t_total{")).count(),
            MAX_SERIES + 1
        );
    }

    #[test]
    fn opentelemetry_named_histograms_render_under_their_prometheus_names() {
        static TOKENS: [f64; 3] = [1.0, 4.0, 16.0];
        let r = Registry::new();
        r.histogram_with_buckets(
            "gen_ai.client.token.usage",
            "Tokens.",
            &["gen_ai.token.type"],
            "{token}",
            &TOKENS,
        )
        .observe(&["input"], 5.0);
        r.histogram_with_buckets(
            "gen_ai.client.operation.duration",
            "Duration.",
            &["gen_ai.operation.name"],
            "s",
            &BUCKETS,
        )
        .observe(&["chat"], 0.2);
        let text = r.render();
        assert!(
            text.contains("# TYPE gen_ai_client_token_usage histogram\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "gen_ai_client_token_usage_bucket{gen_ai_token_type=\"input\",le=\"4\"} 0\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "gen_ai_client_token_usage_bucket{gen_ai_token_type=\"input\",le=\"16\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name=\"chat\"} 1\n"
            ),
            "{text}"
        );
    }
}
