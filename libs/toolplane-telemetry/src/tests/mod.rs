//! Tests that cross module boundaries: trace context travelling from a client span through real
//! metadata to a server span, and spans leaving the process through OTLP to a collector. Nothing
//! here leaves loopback.

mod collector;
mod end_to_end;

pub(crate) use collector::FakeCollector;
