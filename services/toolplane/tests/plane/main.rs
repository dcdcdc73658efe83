//! The whole plane end to end, over real sockets: `toolplane up` and the four services with real
//! MCP servers, model servers, clients and a browser. One test binary, one module per area: every
//! module links the whole plane, and one binary links it once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod balancer;
mod cli_support;
mod common;

mod agents;
mod auth_matrix;
mod cli_admin;
mod cli_auth;
mod cli_completions;
mod cli_up;
mod cluster;
mod console;
mod error_details;
mod external_credential;
mod hostile;
mod mcp_face;
mod mcp_live;
mod metrics;
mod metrics_promtool;
mod model_http;
mod mtls;
mod plane_reflection;
mod retry_creates;
mod runtime_approvals;
mod runtime_cycle;
mod runtime_external;
mod runtime_host;
mod runtime_loop;
mod runtime_mcp;
mod runtime_turns;
mod traces;
