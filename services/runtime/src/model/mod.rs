//! Model endpoints: what an endpoint is ([`provider::Endpoint`], from a run spec or a profile) and
//! the HTTP client that calls it ([`provider::ModelClient`], including the in-process scripted
//! provider). A leaf of the runtime's layers: it knows no run, invocation or peer.

mod body;
pub mod egress;
mod endpoint;
pub mod provider;
mod request;
pub mod retry_after;
mod script;
pub mod semconv;
