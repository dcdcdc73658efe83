//! What a service asks of telemetry ([`TelemetryConfig`]) and how that combines with the standard
//! OpenTelemetry environment variables into one decision: which service name, whether and where
//! spans are exported, which log filter applies.
//!
//! Resolution is a pure function of the config and an environment lookup, so every rule here is
//! tested without touching the process environment. It never installs anything and never opens
//! a connection; [`crate::init`] does that with the result.

use tracing_subscriber::EnvFilter;

/// `true` (any case) turns the OpenTelemetry SDK off: no spans are exported.
pub(crate) const OTEL_SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
/// Overrides the service name a binary passes in its [`TelemetryConfig`].
pub(crate) const OTEL_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
/// Trace-specific OTLP endpoint; wins over the generic one.
pub(crate) const OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// Generic OTLP endpoint for every signal.
pub(crate) const OTEL_EXPORTER_OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// Trace-specific OTLP protocol; only `grpc` is built in.
pub(crate) const OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
/// Generic OTLP protocol; only `grpc` is built in.
pub(crate) const OTEL_EXPORTER_OTLP_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
/// Metric-specific OTLP endpoint; wins over the generic one.
pub(crate) const OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
/// `otlp` (the default) pushes metrics; `none` or `prometheus` (served on /metrics anyway) do not.
pub(crate) const OTEL_METRICS_EXPORTER: &str = "OTEL_METRICS_EXPORTER";
/// Milliseconds between metric pushes.
pub(crate) const OTEL_METRIC_EXPORT_INTERVAL: &str = "OTEL_METRIC_EXPORT_INTERVAL";
const DEFAULT_METRIC_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
/// The log filter, in `tracing_subscriber::EnvFilter` syntax.
pub(crate) const RUST_LOG: &str = "RUST_LOG";

const DEFAULT_DIRECTIVE: &str = "info";

/// What a service binary tells [`crate::init`] about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TelemetryConfig {
    service_name: String,
    service_version: Option<String>,
    default_directive: String,
    /// Variables read as if the environment set them (winning over it).
    vars: Vec<(String, String)>,
}

impl TelemetryConfig {
    /// A service called `service_name` (the `service.name` resource attribute unless
    /// `OTEL_SERVICE_NAME` is set), logging at `info` unless `RUST_LOG` says otherwise.
    pub fn new(service_name: impl Into<String>) -> Self {
        Self {
            service_name: service_name.into(),
            service_version: None,
            default_directive: DEFAULT_DIRECTIVE.to_owned(),
            vars: Vec::new(),
        }
    }

    /// Reads `name` as `value` whatever the environment says: an embedder (or a test) configures
    /// export with the same variables an operator would set (`OTEL_EXPORTER_OTLP_ENDPOINT`, …)
    /// without touching the process environment.
    #[must_use]
    pub fn with_var(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.vars.push((name.into(), value.into()));
        self
    }

    /// What `name` reads as: a [`TelemetryConfig::with_var`] value, else `env`'s.
    pub(crate) fn lookup(
        &self,
        name: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Option<String> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .or_else(|| env(name))
    }

    /// Records `service.version` on every exported span, typically `env!("CARGO_PKG_VERSION")`.
    #[must_use]
    pub fn with_service_version(mut self, version: impl Into<String>) -> Self {
        self.service_version = Some(version.into());
        self
    }

    /// The log filter used when `RUST_LOG` is unset or unparsable, in `EnvFilter` syntax
    /// (`"info"`, `"info,toolplane_runtime=debug"`). An unparsable default falls back to `info`.
    #[must_use]
    pub fn with_default_directive(mut self, directive: impl Into<String>) -> Self {
        self.default_directive = directive.into();
        self
    }

    /// The service name as configured in code, before `OTEL_SERVICE_NAME` is applied.
    pub fn service_name(&self) -> &str {
        &self.service_name
    }

    /// The service version, if one was configured.
    pub fn service_version(&self) -> Option<&str> {
        self.service_version.as_deref()
    }
}

/// Where spans go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Export {
    /// Spans stay in the process; only logs are written.
    Off(ExportOff),
    /// Spans are batched and sent over OTLP/gRPC to `endpoint`, taken from `variable`.
    Otlp {
        endpoint: String,
        variable: &'static str,
    },
}

/// Why spans are not exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExportOff {
    /// `OTEL_SDK_DISABLED=true`.
    SdkDisabled,
    /// Neither OTLP endpoint variable is set.
    NoEndpoint,
}

impl ExportOff {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ExportOff::SdkDisabled => "otel_sdk_disabled",
            ExportOff::NoEndpoint => "no_otlp_endpoint",
        }
    }
}

/// A configuration problem that does not stop the service; [`crate::init`] logs each one once
/// the subscriber is installed (before that there is nowhere to log to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConfigWarning {
    /// An OTLP protocol other than `grpc` was asked for; spans go over gRPC anyway.
    UnsupportedProtocol {
        variable: &'static str,
        value: String,
    },
    /// `RUST_LOG` (or the configured default) did not parse; `fallback` is used instead.
    InvalidLogFilter {
        source: &'static str,
        error: String,
        fallback: String,
    },
}

/// The outcome of resolving a [`TelemetryConfig`] against the environment.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub(crate) service_name: String,
    pub(crate) service_version: Option<String>,
    pub(crate) export: Export,
    /// Where and how often metrics are pushed over OTLP; `None` when they are not.
    pub(crate) metrics: Option<(String, std::time::Duration)>,
    pub(crate) log_filter: EnvFilter,
    pub(crate) warnings: Vec<ConfigWarning>,
}

/// Combines `config` with the environment as seen through `env` (an unset and an empty
/// variable are the same, as the OpenTelemetry specification asks).
pub(crate) fn resolve(config: &TelemetryConfig, env: impl Fn(&str) -> Option<String>) -> Resolved {
    let var = |name: &str| env(name).filter(|value| !value.trim().is_empty());
    let mut warnings = Vec::new();

    let service_name = var(OTEL_SERVICE_NAME).unwrap_or_else(|| config.service_name.clone());

    let sdk_disabled =
        var(OTEL_SDK_DISABLED).is_some_and(|value| value.trim().eq_ignore_ascii_case("true"));
    let endpoint = [
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
        OTEL_EXPORTER_OTLP_ENDPOINT,
    ]
    .into_iter()
    .find_map(|variable| var(variable).map(|endpoint| (variable, endpoint)));
    let export = match (sdk_disabled, endpoint) {
        (true, _) => Export::Off(ExportOff::SdkDisabled),
        (false, None) => Export::Off(ExportOff::NoEndpoint),
        (false, Some((variable, endpoint))) => Export::Otlp {
            endpoint: endpoint.trim().to_owned(),
            variable,
        },
    };
    if matches!(export, Export::Otlp { .. }) {
        let protocol = [
            OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
            OTEL_EXPORTER_OTLP_PROTOCOL,
        ]
        .into_iter()
        .find_map(|variable| var(variable).map(|value| (variable, value)));
        if let Some((variable, value)) = protocol
            && value.trim() != "grpc"
        {
            warnings.push(ConfigWarning::UnsupportedProtocol { variable, value });
        }
    }

    let push_metrics = !sdk_disabled
        && var(OTEL_METRICS_EXPORTER).is_none_or(|v| v.trim().eq_ignore_ascii_case("otlp"));
    let metrics = [
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
        OTEL_EXPORTER_OTLP_ENDPOINT,
    ]
    .into_iter()
    .find_map(var)
    .filter(|_| push_metrics)
    .map(|endpoint| {
        let interval = var(OTEL_METRIC_EXPORT_INTERVAL)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map_or(DEFAULT_METRIC_INTERVAL, std::time::Duration::from_millis);
        (endpoint.trim().to_owned(), interval)
    });

    let log_filter = log_filter(&config.default_directive, var(RUST_LOG), &mut warnings);

    Resolved {
        service_name,
        service_version: config.service_version.clone(),
        export,
        metrics,
        log_filter,
        warnings,
    }
}

/// `RUST_LOG` if it parses, else the configured default, else `info`. A typo in `RUST_LOG`
/// must not keep a service from starting, so it degrades with a warning instead of failing.
fn log_filter(
    default_directive: &str,
    rust_log: Option<String>,
    warnings: &mut Vec<ConfigWarning>,
) -> EnvFilter {
    if let Some(rust_log) = rust_log {
        match EnvFilter::try_new(&rust_log) {
            Ok(filter) => return filter,
            Err(error) => warnings.push(ConfigWarning::InvalidLogFilter {
                source: RUST_LOG,
                error: error.to_string(),
                fallback: default_directive.to_owned(),
            }),
        }
    }
    match EnvFilter::try_new(default_directive) {
        Ok(filter) => filter,
        Err(error) => {
            warnings.push(ConfigWarning::InvalidLogFilter {
                source: "default_directive",
                error: error.to_string(),
                fallback: DEFAULT_DIRECTIVE.to_owned(),
            });
            EnvFilter::new(DEFAULT_DIRECTIVE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve_with(config: &TelemetryConfig, vars: &[(&str, &str)]) -> Resolved {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        resolve(config, |name| vars.get(name).cloned())
    }

    #[test]
    fn metrics_are_pushed_to_their_endpoint_unless_another_exporter_is_named() {
        let config = TelemetryConfig::new("runtime");
        let r = resolve_with(&config, &[(OTEL_EXPORTER_OTLP_ENDPOINT, "http://c:4317")]);
        assert_eq!(
            r.metrics,
            Some(("http://c:4317".to_owned(), DEFAULT_METRIC_INTERVAL))
        );
        let r = resolve_with(
            &config,
            &[
                (OTEL_EXPORTER_OTLP_ENDPOINT, "http://c:4317"),
                (OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, "http://m:4317"),
                (OTEL_METRIC_EXPORT_INTERVAL, "250"),
            ],
        );
        assert_eq!(
            r.metrics,
            Some((
                "http://m:4317".to_owned(),
                std::time::Duration::from_millis(250)
            ))
        );
        for (name, value) in [(OTEL_METRICS_EXPORTER, "none"), (OTEL_SDK_DISABLED, "true")] {
            let r = resolve_with(
                &config,
                &[
                    (OTEL_EXPORTER_OTLP_ENDPOINT, "http://c:4317"),
                    (name, value),
                ],
            );
            assert_eq!(r.metrics, None, "{name}={value}");
        }
    }

    #[test]
    fn no_endpoint_means_plain_logs() {
        let resolved = resolve_with(&TelemetryConfig::new("catalog"), &[]);
        assert_eq!(resolved.export, Export::Off(ExportOff::NoEndpoint));
        assert_eq!(resolved.service_name, "catalog");
        assert!(resolved.warnings.is_empty());
        assert_eq!(resolved.log_filter.to_string(), "info");
    }

    #[test]
    fn generic_endpoint_turns_export_on() {
        let resolved = resolve_with(
            &TelemetryConfig::new("catalog"),
            &[(OTEL_EXPORTER_OTLP_ENDPOINT, "http://collector:4317")],
        );
        assert_eq!(
            resolved.export,
            Export::Otlp {
                endpoint: "http://collector:4317".to_owned(),
                variable: OTEL_EXPORTER_OTLP_ENDPOINT,
            }
        );
    }

    #[test]
    fn traces_endpoint_wins_over_generic_endpoint() {
        let resolved = resolve_with(
            &TelemetryConfig::new("catalog"),
            &[
                (OTEL_EXPORTER_OTLP_ENDPOINT, "http://generic:4317"),
                (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "http://traces:4317"),
            ],
        );
        assert_eq!(
            resolved.export,
            Export::Otlp {
                endpoint: "http://traces:4317".to_owned(),
                variable: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
            }
        );
    }

    #[test]
    fn empty_endpoint_counts_as_unset() {
        let resolved = resolve_with(
            &TelemetryConfig::new("catalog"),
            &[
                (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, " "),
                (OTEL_EXPORTER_OTLP_ENDPOINT, ""),
            ],
        );
        assert_eq!(resolved.export, Export::Off(ExportOff::NoEndpoint));
    }

    #[test]
    fn sdk_disabled_wins_over_an_endpoint_in_any_case() {
        for value in ["true", "TRUE", " True "] {
            let resolved = resolve_with(
                &TelemetryConfig::new("catalog"),
                &[
                    (OTEL_SDK_DISABLED, value),
                    (OTEL_EXPORTER_OTLP_ENDPOINT, "http://collector:4317"),
                ],
            );
            assert_eq!(
                resolved.export,
                Export::Off(ExportOff::SdkDisabled),
                "{value:?}"
            );
        }
    }

    #[test]
    fn sdk_disabled_other_than_true_keeps_export_on() {
        let resolved = resolve_with(
            &TelemetryConfig::new("catalog"),
            &[
                (OTEL_SDK_DISABLED, "false"),
                (OTEL_EXPORTER_OTLP_ENDPOINT, "http://collector:4317"),
            ],
        );
        assert!(matches!(resolved.export, Export::Otlp { .. }));
    }

    #[test]
    fn otel_service_name_overrides_config() {
        let resolved = resolve_with(
            &TelemetryConfig::new("catalog").with_service_version("1.2.3"),
            &[(OTEL_SERVICE_NAME, "catalog-eu-1")],
        );
        assert_eq!(resolved.service_name, "catalog-eu-1");
        assert_eq!(resolved.service_version.as_deref(), Some("1.2.3"));
    }

    #[test]
    fn non_grpc_protocol_is_warned_about_only_when_exporting() {
        let exporting = resolve_with(
            &TelemetryConfig::new("catalog"),
            &[
                (OTEL_EXPORTER_OTLP_ENDPOINT, "http://collector:4318"),
                (OTEL_EXPORTER_OTLP_PROTOCOL, "http/protobuf"),
            ],
        );
        assert_eq!(
            exporting.warnings,
            vec![ConfigWarning::UnsupportedProtocol {
                variable: OTEL_EXPORTER_OTLP_PROTOCOL,
                value: "http/protobuf".to_owned(),
            }]
        );

        let grpc = resolve_with(
            &TelemetryConfig::new("catalog"),
            &[
                (OTEL_EXPORTER_OTLP_ENDPOINT, "http://collector:4317"),
                (OTEL_EXPORTER_OTLP_PROTOCOL, "http/protobuf"),
                (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, "grpc"),
            ],
        );
        assert!(grpc.warnings.is_empty());

        let not_exporting = resolve_with(
            &TelemetryConfig::new("catalog"),
            &[(OTEL_EXPORTER_OTLP_PROTOCOL, "http/protobuf")],
        );
        assert!(not_exporting.warnings.is_empty());
    }

    #[test]
    fn rust_log_replaces_the_default_directive() {
        let resolved = resolve_with(
            &TelemetryConfig::new("catalog"),
            &[(RUST_LOG, "warn,toolplane_catalog=debug")],
        );
        assert!(resolved.warnings.is_empty());
        let filter = resolved.log_filter.to_string();
        assert!(filter.contains("toolplane_catalog=debug"), "{filter}");
        assert!(filter.contains("warn"), "{filter}");
    }

    #[test]
    fn invalid_rust_log_falls_back_to_the_default_with_a_warning() {
        let resolved = resolve_with(
            &TelemetryConfig::new("catalog").with_default_directive("debug"),
            &[(RUST_LOG, "toolplane=notalevel")],
        );
        assert_eq!(resolved.log_filter.to_string(), "debug");
        assert!(matches!(
            resolved.warnings.as_slice(),
            [ConfigWarning::InvalidLogFilter { source: RUST_LOG, fallback, .. }] if fallback == "debug"
        ));
    }

    #[test]
    fn invalid_default_directive_falls_back_to_info() {
        let resolved = resolve_with(
            &TelemetryConfig::new("catalog").with_default_directive("x=notalevel"),
            &[],
        );
        assert_eq!(resolved.log_filter.to_string(), "info");
        assert_eq!(resolved.warnings.len(), 1);
    }
}
