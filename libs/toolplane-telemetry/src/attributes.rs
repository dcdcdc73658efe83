//! Span attributes that `tracing` fields cannot carry: a field holds one scalar, while some
//! OpenTelemetry attributes are arrays (`gen_ai.response.finish_reasons` is a `string[]`). Set on
//! the span's OpenTelemetry data directly; a span that is not exported ignores them.

use opentelemetry::{Array, StringValue, Value};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Sets `key` on `span` as an array of strings.
pub fn set_string_array(span: &tracing::Span, key: &'static str, values: &[String]) {
    let values: Vec<StringValue> = values.iter().map(|v| v.clone().into()).collect();
    span.set_attribute(key, Value::Array(Array::String(values)));
}
