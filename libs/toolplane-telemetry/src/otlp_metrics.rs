//! OTLP/gRPC export of the services' metric registries: every interval
//! (`OTEL_METRIC_EXPORT_INTERVAL`, milliseconds, default 60 s) and once more at shutdown, each
//! registry handed to [`crate::metrics::export`] is sent as one `ResourceMetrics` whose
//! `service.name` is its service — cumulative sums for counters, gauges, and explicit-bucket
//! histograms in seconds. The endpoint is `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, else
//! `OTEL_EXPORTER_OTLP_ENDPOINT`. A failed push is logged and retried at the next interval.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::metrics::{BUCKETS, Kind, Series};

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..Default::default()
    }
}

/// One export request with every live registry, as of now.
pub(crate) fn request(start: u64, version: Option<&str>) -> ExportMetricsServiceRequest {
    let now = now_nanos();
    let mut resource_metrics = Vec::new();
    for (service, registry) in crate::metrics::exported() {
        let mut metrics = Vec::new();
        for family in registry.snapshot() {
            let attributes = |values: &[String]| -> Vec<KeyValue> {
                family
                    .labels
                    .iter()
                    .zip(values)
                    .map(|(k, v)| string_kv(k, v))
                    .collect()
            };
            let number = |values: &[String], v: f64| NumberDataPoint {
                attributes: attributes(values),
                start_time_unix_nano: start,
                time_unix_nano: now,
                value: Some(number_data_point::Value::AsDouble(v)),
                ..Default::default()
            };
            // Counters and gauges hold plain values.
            let numbers = || -> Vec<NumberDataPoint> {
                family
                    .series
                    .iter()
                    .filter_map(|(k, s)| match s {
                        Series::Value(v) => Some(number(k, *v)),
                        Series::Histogram { .. } => None,
                    })
                    .collect()
            };
            let data = match family.kind {
                Kind::Counter => metric::Data::Sum(Sum {
                    data_points: numbers(),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    is_monotonic: true,
                }),
                Kind::Gauge => metric::Data::Gauge(Gauge {
                    data_points: numbers(),
                }),
                Kind::Histogram => metric::Data::Histogram(Histogram {
                    data_points: family
                        .series
                        .iter()
                        .filter_map(|(k, s)| match s {
                            Series::Histogram {
                                buckets,
                                sum,
                                count,
                            } => {
                                // Stored cumulatively (≤ bound); OTLP wants each bucket's own
                                // count, plus the overflow bucket.
                                let mut counts = Vec::with_capacity(BUCKETS.len() + 1);
                                let mut below = 0;
                                for c in buckets {
                                    counts.push(c - below);
                                    below = *c;
                                }
                                counts.push(count - below);
                                Some(HistogramDataPoint {
                                    attributes: attributes(k),
                                    start_time_unix_nano: start,
                                    time_unix_nano: now,
                                    count: *count,
                                    sum: Some(*sum),
                                    bucket_counts: counts,
                                    explicit_bounds: BUCKETS.to_vec(),
                                    ..Default::default()
                                })
                            }
                            Series::Value(_) => None,
                        })
                        .collect(),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                }),
            };
            metrics.push(Metric {
                name: family.name.to_owned(),
                description: family.help.to_owned(),
                unit: if family.kind == Kind::Histogram {
                    "s".to_owned()
                } else {
                    String::new()
                },
                data: Some(data),
                ..Default::default()
            });
        }
        let mut attributes = vec![string_kv("service.name", &service)];
        if let Some(v) = version {
            attributes.push(string_kv("service.version", v));
        }
        resource_metrics.push(ResourceMetrics {
            resource: Some(Resource {
                attributes,
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "toolplane".to_owned(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    ExportMetricsServiceRequest { resource_metrics }
}

/// The running pusher; [`MetricsPusher::stop`] sends a last export and waits for it.
#[derive(Debug)]
pub(crate) struct MetricsPusher {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl MetricsPusher {
    pub(crate) fn start(
        endpoint: &str,
        interval: Duration,
        version: Option<String>,
    ) -> Option<Self> {
        let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
            .ok()?
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .connect_lazy();
        let (tx, mut rx) = oneshot::channel::<()>();
        let start = now_nanos();
        let task = tokio::spawn(async move {
            let mut client = MetricsServiceClient::new(channel);
            let mut tick = tokio::time::interval(interval);
            tick.tick().await;
            loop {
                let last = tokio::select! {
                    _ = tick.tick() => false,
                    _ = &mut rx => true,
                };
                let req = request(start, version.as_deref());
                if !req.resource_metrics.is_empty()
                    && let Err(status) = client.export(req).await
                {
                    tracing::warn!(code = ?status.code(), message = status.message(), "otlp metric export failed");
                }
                if last {
                    return;
                }
            }
        });
        Some(MetricsPusher {
            stop: Some(tx),
            task,
        })
    }

    /// Pushes once more and stops; waits at most `limit`.
    pub(crate) fn stop(mut self, limit: Duration) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let task = &mut self.task;
        crate::setup::block_on_current(async move {
            let _ = tokio::time::timeout(limit, task).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::metrics::Registry;

    #[test]
    fn each_registry_is_a_resource_with_its_service_name_and_cumulative_points() {
        let registry = Arc::new(Registry::new());
        crate::metrics::export(&registry, "toolplane-test-service");
        registry
            .counter("t_total", "T.", &["tool"])
            .add(&["a"], 3.0);
        let h = registry.histogram("t_seconds", "S.", &[]);
        h.observe(&[], 0.003);
        h.observe(&[], 120.0);
        let req = request(1, Some("9.9.9"));
        let ours = req
            .resource_metrics
            .iter()
            .find(|r| {
                r.resource.as_ref().is_some_and(|res| {
                    res.attributes.iter().any(|kv| {
                        kv.key == "service.name"
                            && kv.value.as_ref().and_then(|v| v.value.as_ref())
                                == Some(&any_value::Value::StringValue(
                                    "toolplane-test-service".into(),
                                ))
                    })
                })
            })
            .expect("the registry's resource");
        let metrics = &ours.scope_metrics[0].metrics;
        let Some(metric::Data::Sum(sum)) = &metrics[0].data else {
            panic!("a counter is a sum")
        };
        assert!(sum.is_monotonic);
        assert_eq!(
            sum.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        assert_eq!(
            sum.data_points[0].value,
            Some(number_data_point::Value::AsDouble(3.0))
        );
        let Some(metric::Data::Histogram(hist)) = &metrics[1].data else {
            panic!("a histogram")
        };
        let p = &hist.data_points[0];
        assert_eq!(p.count, 2);
        assert_eq!(p.explicit_bounds.len() + 1, p.bucket_counts.len());
        assert_eq!(p.bucket_counts.iter().sum::<u64>(), 2);
        // 3 ms lands in the (2.5 ms, 5 ms] bucket; 120 s overflows.
        assert_eq!(p.bucket_counts[3], 1);
        assert_eq!(*p.bucket_counts.last().unwrap(), 1);
        drop(registry);
        assert!(
            !request(1, None)
                .resource_metrics
                .iter()
                .any(|r| format!("{r:?}").contains("toolplane-test-service"))
        );
    }
}
