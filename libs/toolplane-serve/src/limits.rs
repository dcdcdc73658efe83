//! Message-size limits of the generated gRPC servers. tonic sets them per generated server type
//! (an inherent method, not a trait), so this module names every server of the wire contract once
//! and gives them one trait; [`crate::Services::add_service`] applies a service's limits through it.

use toolplane_proto::testing::v1::echo_service_server;
use toolplane_proto::v1::{
    admin_audit_service_server, catalog_service_server, mcp_proxy_service_server,
    profile_service_server, runtime_service_server, tool_executor_server, workspace_service_server,
};

/// The largest gRPC message a server decodes and encodes; `None` keeps tonic's default (4 MiB
/// decoded, no limit encoded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageLimits {
    pub decoding: Option<usize>,
    pub encoding: Option<usize>,
}

/// A generated server whose message-size limits can be set.
pub trait LimitMessages: Sized {
    fn limit_messages(self, limits: MessageLimits) -> Self;
}

macro_rules! limit_messages {
    ($($module:ident :: $server:ident < $service:ident >),* $(,)?) => {$(
        impl<T: $module::$service> LimitMessages for $module::$server<T> {
            fn limit_messages(self, limits: MessageLimits) -> Self {
                let mut server = self;
                if let Some(bytes) = limits.decoding {
                    server = server.max_decoding_message_size(bytes);
                }
                if let Some(bytes) = limits.encoding {
                    server = server.max_encoding_message_size(bytes);
                }
                server
            }
        }
    )*};
}

limit_messages!(
    catalog_service_server::CatalogServiceServer<CatalogService>,
    profile_service_server::ProfileServiceServer<ProfileService>,
    runtime_service_server::RuntimeServiceServer<RuntimeService>,
    workspace_service_server::WorkspaceServiceServer<WorkspaceService>,
    mcp_proxy_service_server::McpProxyServiceServer<McpProxyService>,
    tool_executor_server::ToolExecutorServer<ToolExecutor>,
    echo_service_server::EchoServiceServer<EchoService>,
    admin_audit_service_server::AdminAuditServiceServer<AdminAuditService>,
);
