//! The one table of what each request path requires: every RPC of every toolplane service, gRPC
//! health and reflection, and the services' HTTP paths. Owns the decision per path; must never
//! look at a request's body. A test parses `proto/toolplane/v1/*.proto` and fails when an RPC has
//! no row, and `docs/auth.md` mirrors the table (also checked by a test).

use crate::Role;

/// What a path requires of its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// No credential needed (health checks).
    Open,
    /// A verified caller whose role includes this one.
    Role(Role),
}

use Requirement::Open;
const READER: Requirement = Requirement::Role(Role::Reader);
const AGENT: Requirement = Requirement::Role(Role::Agent);
const ADMIN: Requirement = Requirement::Role(Role::Admin);

/// Every gRPC method of the toolplane services, by its path `/{package.Service}/{Method}`.
pub const RPC_ROLES: &[(&str, Requirement)] = &[
    // catalog.proto
    ("/toolplane.v1.CatalogService/ListTools", READER),
    ("/toolplane.v1.CatalogService/GetTool", READER),
    ("/toolplane.v1.CatalogService/DescribeTools", READER),
    ("/toolplane.v1.CatalogService/RegisterTools", ADMIN),
    ("/toolplane.v1.CatalogService/DeregisterTools", ADMIN),
    ("/toolplane.v1.CatalogService/ListToolHosts", READER),
    ("/toolplane.v1.CatalogService/RefreshSources", ADMIN),
    // profile.proto
    ("/toolplane.v1.ProfileService/PutProfile", ADMIN),
    ("/toolplane.v1.ProfileService/GetProfile", READER),
    ("/toolplane.v1.ProfileService/ListProfiles", READER),
    ("/toolplane.v1.ProfileService/DeleteProfile", ADMIN),
    ("/toolplane.v1.ProfileService/PutPlatformPolicy", ADMIN),
    ("/toolplane.v1.ProfileService/GetPlatformPolicy", READER),
    ("/toolplane.v1.ProfileService/PutUserPolicy", ADMIN),
    ("/toolplane.v1.ProfileService/GetUserPolicy", READER),
    ("/toolplane.v1.ProfileService/ResolveProfile", READER),
    // runtime.proto
    ("/toolplane.v1.RuntimeService/CreateRun", AGENT),
    ("/toolplane.v1.RuntimeService/StartRun", AGENT),
    ("/toolplane.v1.RuntimeService/GetRun", READER),
    ("/toolplane.v1.RuntimeService/ListRuns", READER),
    ("/toolplane.v1.RuntimeService/CancelRun", AGENT),
    ("/toolplane.v1.RuntimeService/WatchRun", READER),
    ("/toolplane.v1.RuntimeService/OpenInvocation", AGENT),
    ("/toolplane.v1.RuntimeService/ExecuteToolCalls", AGENT),
    ("/toolplane.v1.RuntimeService/CloseInvocation", AGENT),
    ("/toolplane.v1.RuntimeService/GetInvocation", READER),
    ("/toolplane.v1.RuntimeService/ListInvocations", READER),
    ("/toolplane.v1.RuntimeService/GetSnapshot", READER),
    // Approvals: readers see them, agents and admins decide.
    ("/toolplane.v1.RuntimeService/ListApprovals", READER),
    ("/toolplane.v1.RuntimeService/DecideApproval", AGENT),
    ("/toolplane.v1.RuntimeService/AnswerQuestion", AGENT),
    ("/toolplane.v1.RuntimeService/CollectToolResults", AGENT),
    // workspace.proto: reads are reader; the writes only the runtime makes (they shape the
    // audit trail) are admin; a chat message from the host is agent; skills are admin.
    ("/toolplane.v1.WorkspaceService/CreateRunWorkspace", ADMIN),
    ("/toolplane.v1.WorkspaceService/GetRunWorkspace", READER),
    (
        "/toolplane.v1.WorkspaceService/OpenInvocationWorkspace",
        ADMIN,
    ),
    (
        "/toolplane.v1.WorkspaceService/CloseInvocationWorkspace",
        ADMIN,
    ),
    ("/toolplane.v1.WorkspaceService/PutAuditObject", ADMIN),
    ("/toolplane.v1.WorkspaceService/GetObject", READER),
    ("/toolplane.v1.WorkspaceService/ListObjects", READER),
    ("/toolplane.v1.WorkspaceService/ReadFile", READER),
    ("/toolplane.v1.WorkspaceService/AppendJournal", ADMIN),
    ("/toolplane.v1.WorkspaceService/AppendJournals", ADMIN),
    ("/toolplane.v1.WorkspaceService/ReadJournal", READER),
    ("/toolplane.v1.WorkspaceService/FollowJournal", READER),
    ("/toolplane.v1.WorkspaceService/AppendChatMessage", AGENT),
    ("/toolplane.v1.WorkspaceService/CommitRunMessage", ADMIN),
    ("/toolplane.v1.WorkspaceService/ListChatMessages", READER),
    ("/toolplane.v1.WorkspaceService/ImportSkill", ADMIN),
    ("/toolplane.v1.WorkspaceService/ListSkills", READER),
    ("/toolplane.v1.WorkspaceService/DeleteSkill", ADMIN),
    (
        "/toolplane.v1.WorkspaceService/PutWorldInfoActivation",
        ADMIN,
    ),
    ("/toolplane.v1.WorkspaceService/PromotePersist", ADMIN),
    ("/toolplane.v1.WorkspaceService/FinishRunWorkspace", ADMIN),
    ("/toolplane.v1.WorkspaceService/AcquireRunLease", ADMIN),
    ("/toolplane.v1.WorkspaceService/RenewRunLease", ADMIN),
    ("/toolplane.v1.WorkspaceService/ReleaseRunLease", ADMIN),
    // mcp_proxy.proto
    ("/toolplane.v1.McpProxyService/UpsertServer", ADMIN),
    ("/toolplane.v1.McpProxyService/DeregisterServer", ADMIN),
    ("/toolplane.v1.McpProxyService/SetServerState", ADMIN),
    ("/toolplane.v1.McpProxyService/SetToolPermission", ADMIN),
    ("/toolplane.v1.McpProxyService/RefreshServer", ADMIN),
    ("/toolplane.v1.McpProxyService/GetServer", READER),
    ("/toolplane.v1.McpProxyService/ListServers", READER),
    ("/toolplane.v1.McpProxyService/ListCachedTools", READER),
    // executor.proto: called by the runtime, which executes tool calls on an agent's behalf
    // after its gate and governance; an agent never calls an executor directly.
    ("/toolplane.v1.ToolExecutor/Execute", ADMIN),
    // auth.proto: tokens are an admin's.
    ("/toolplane.v1.TokenService/CreateToken", ADMIN),
    ("/toolplane.v1.TokenService/ListTokens", ADMIN),
    ("/toolplane.v1.TokenService/RevokeToken", ADMIN),
    // admin_audit.proto: the record of administrative changes is an admin's.
    ("/toolplane.v1.AdminAuditService/ListAdminAudit", ADMIN),
    // gRPC health stays open for probes and load balancers.
    ("/grpc.health.v1.Health/Check", Open),
    ("/grpc.health.v1.Health/Watch", Open),
    ("/grpc.health.v1.Health/List", Open),
    // Reflection describes the API (names, messages, comments), never data: any reader.
    (
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        READER,
    ),
    (
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        READER,
    ),
];

/// The services' HTTP paths (catalog, every service's metrics server, the runtime's MCP face and
/// web console).
pub const HTTP_ROLES: &[(&str, Requirement)] = &[
    ("/healthz", Open),
    ("/metrics", READER),
    ("/tools", READER),
    ("/tools/descriptions", READER),
    ("/tools/omitted", READER),
    ("/sources", READER),
    // The runtime's MCP face: a session runs tools, as `ExecuteToolCalls` does.
    ("/mcp", AGENT),
    // The runtime's web console: the page, its stylesheet and script hold no data and are open;
    // what it shows needs a reader, deciding an agent (as `DecideApproval`, `AnswerQuestion`).
    ("/console", Open),
    ("/console/console.css", Open),
    ("/console/console.js", Open),
    ("/console/runs", READER),
    ("/console/run", READER),
    ("/console/approvals", READER),
    ("/console/events", READER),
    ("/console/decide", AGENT),
    ("/console/answer", AGENT),
];

/// What a request for `path` requires. A path in neither table requires `admin`: a path added
/// without a row fails closed rather than open.
pub fn requirement(path: &str) -> Requirement {
    RPC_ROLES
        .iter()
        .chain(HTTP_ROLES)
        .find(|(known, _)| *known == path)
        .map_or(ADMIN, |(_, requirement)| *requirement)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every `service X { rpc Y(` of `proto/toolplane/v1/*.proto`, as `/toolplane.v1.X/Y`.
    fn proto_rpcs() -> BTreeSet<String> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto/toolplane/v1");
        let mut rpcs = BTreeSet::new();
        let mut files = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|ext| ext != "proto") {
                continue;
            }
            files += 1;
            let text = std::fs::read_to_string(&path).unwrap();
            let mut service = None;
            for line in text.lines().map(str::trim) {
                if let Some(rest) = line.strip_prefix("service ") {
                    service = rest.split_whitespace().next().map(str::to_owned);
                } else if let Some(rest) = line.strip_prefix("rpc ") {
                    let method = rest.split('(').next().unwrap().trim();
                    let service = service.as_ref().expect("rpc outside a service");
                    rpcs.insert(format!("/toolplane.v1.{service}/{method}"));
                } else if line == "}" {
                    service = None;
                }
            }
        }
        assert!(files >= 6, "read {files} proto files from {dir}");
        rpcs
    }

    #[test]
    fn every_rpc_of_every_proto_has_a_row_and_every_row_an_rpc() {
        let rpcs = proto_rpcs();
        assert!(rpcs.len() > 50, "parsed only {} rpcs", rpcs.len());
        let missing: Vec<_> = rpcs
            .iter()
            .filter(|rpc| !RPC_ROLES.iter().any(|(path, _)| path == rpc))
            .collect();
        assert!(
            missing.is_empty(),
            "RPCs without a role in RPC_ROLES: {missing:?}"
        );
        let stale: Vec<_> = RPC_ROLES
            .iter()
            .map(|(path, _)| *path)
            .filter(|path| path.starts_with("/toolplane.") && !rpcs.contains(*path))
            .collect();
        assert!(
            stale.is_empty(),
            "rows for RPCs that do not exist: {stale:?}"
        );
    }

    #[test]
    fn no_path_has_two_rows() {
        let mut seen = BTreeSet::new();
        for (path, _) in RPC_ROLES.iter().chain(HTTP_ROLES) {
            assert!(seen.insert(*path), "{path} has two rows");
        }
    }

    #[test]
    fn health_is_open_reflection_needs_a_reader_unknown_paths_need_an_admin() {
        assert_eq!(requirement("/grpc.health.v1.Health/Check"), Open);
        assert_eq!(requirement("/healthz"), Open);
        assert_eq!(
            requirement("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
            READER
        );
        assert_eq!(requirement("/toolplane.v1.RuntimeService/StartRun"), AGENT);
        assert_eq!(
            requirement("/toolplane.v1.CatalogService/ListTools"),
            READER
        );
        assert_eq!(
            requirement("/toolplane.v1.ProfileService/PutProfile"),
            ADMIN
        );
        assert_eq!(requirement("/toolplane.v1.NewService/Anything"), ADMIN);
        assert_eq!(requirement("/grpc.health.v1.Health/Check/"), ADMIN);
        assert_eq!(requirement(""), ADMIN);
    }

    /// `docs/auth.md` has one table row per path, with the same requirement as the code.
    #[test]
    fn docs_auth_md_mirrors_the_table() {
        let doc = include_str!("../../../docs/auth.md");
        for (path, requirement) in RPC_ROLES.iter().chain(HTTP_ROLES) {
            let want = match requirement {
                Open => "open",
                Requirement::Role(role) => role.as_str(),
            };
            let row = format!("| `{path}` | {want} |");
            assert!(doc.contains(&row), "docs/auth.md misses the row `{row}`");
        }
        let rows = doc.lines().filter(|line| line.starts_with("| `/")).count();
        assert_eq!(
            rows,
            RPC_ROLES.len() + HTTP_ROLES.len(),
            "docs/auth.md has rows for paths the code does not know"
        );
    }
}
