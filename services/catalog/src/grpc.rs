//! The gRPC services: `toolplane.v1.CatalogService` and `toolplane.v1.ProfileService`.
//!
//! Thin: each handler parses its request into domain values (through `convert` and the id
//! parsers), calls the catalog, and converts the answer back. Failures become statuses whose
//! message starts with the code. No rule lives here that HTTP would need too. Every successful
//! change of a host, profile or policy leaves an admin audit record (`crate::audit`).

use std::sync::Arc;

use tonic::{Request, Response, Status};
use toolplane_auth::AdminKind;
use toolplane_proto::idempotency::Replays;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_server::CatalogService;
use toolplane_proto::v1::profile_service_server::ProfileService;

use crate::audit::{CatalogAudit, caller_of};
use crate::cell::{ActorId, CellId, parse_segment};
use crate::convert;
use crate::error::{CatalogCode, CatalogError};
use crate::hosts::RegisterHost;
use crate::profiles::{PutProfile, StoredProfile};
use crate::query::{self, ListFilter, PageToken};
use crate::state::Catalog;
use crate::tools::{ListRequest, Measure, Row};

/// gRPC page defaults: 100 per page, at most 1,000.
const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

/// Serves both gRPC services over one catalog.
#[derive(Debug, Clone)]
pub struct CatalogGrpc {
    catalog: Arc<Catalog>,
    audit: CatalogAudit,
    /// `PutProfile`'s answers per `request_id` (docs/errors.md, "Retrying creates").
    puts: Arc<Replays<pb::PutProfileRequest, pb::PutProfileResponse>>,
}

impl CatalogGrpc {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        CatalogGrpc {
            catalog,
            audit: CatalogAudit::default(),
            puts: Arc::default(),
        }
    }

    /// The same service, recording its admin changes in `audit`.
    #[must_use]
    pub fn with_audit(mut self, audit: CatalogAudit) -> Self {
        self.audit = audit;
        self
    }
}

fn sources_filter(values: &[i32]) -> Vec<toolplane_core::catalog::ToolSource> {
    values
        .iter()
        .filter_map(|v| convert::source_from_proto(*v))
        .collect()
}

fn optional(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

fn stored_to_proto(s: &StoredProfile) -> pb::Profile {
    convert::profile_to_proto(&s.record, &s.profile)
}

#[tonic::async_trait]
impl CatalogService for CatalogGrpc {
    async fn list_tools(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let filter = ListFilter::new(
            sources_filter(&r.sources),
            r.categories
                .iter()
                .filter_map(|c| convert::category_from_proto(*c))
                .collect(),
            r.include_unusable,
            &r.provider,
            &r.query,
        )?;
        let profile_id = optional(&r.profile_id)
            .map(|p| parse_segment("profile id", &p))
            .transpose()?;
        let actor = ActorId::parse_optional(&r.actor_id)?;
        if actor.is_some() && profile_id.is_none() {
            return Err(CatalogError::invalid_request("actor_id needs profile_id").into());
        }
        let page = self
            .catalog
            .list_tools(ListRequest {
                cell,
                filter,
                profile_id,
                actor,
                page_size: query::page_size(r.page_size, DEFAULT_PAGE, MAX_PAGE),
                token: PageToken::decode(&r.page_token)?,
                budget: self.catalog.config.limits.max_response_bytes,
                measure: Measure::Proto,
            })
            .await?;
        let tools = page
            .rows
            .iter()
            .map(|row| match row {
                Row::Prepared(i) => page.assembled.tools[*i].proto.clone(),
                Row::View(l) => convert::listing_to_proto(l, None),
            })
            .collect();
        Ok(Response::new(pb::ListToolsResponse {
            tools,
            next_page_token: page.next.map(|t| t.encode()).unwrap_or_default(),
            omitted: page
                .omitted
                .iter()
                .map(convert::omission_to_proto)
                .collect(),
            sources: page.sources.iter().map(convert::status_to_proto).collect(),
        }))
    }

    async fn get_tool(
        &self,
        request: Request<pb::GetToolRequest>,
    ) -> Result<Response<pb::GetToolResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let (assembled, i) = self.catalog.get_tool(&cell, &r.tool_id).await?;
        Ok(Response::new(pb::GetToolResponse {
            tool: Some(assembled.tools[i].proto.clone()),
        }))
    }

    async fn describe_tools(
        &self,
        request: Request<pb::DescribeToolsRequest>,
    ) -> Result<Response<pb::DescribeToolsResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let profile_id = optional(&r.profile_id)
            .map(|p| parse_segment("profile id", &p))
            .transpose()?;
        let actor = ActorId::parse_optional(&r.actor_id)?;
        let filter = ListFilter::new(sources_filter(&r.sources), Vec::new(), false, "", "")?;
        let d = self
            .catalog
            .describe_tools(
                &cell,
                &r.tool_ids,
                profile_id.as_deref(),
                actor.as_ref(),
                &filter,
            )
            .await?;
        Ok(Response::new(pb::DescribeToolsResponse {
            text: d.text,
            tools: d
                .tools
                .into_iter()
                .map(|(tool_id, title, text)| pb::ToolDescription {
                    tool_id,
                    title,
                    text,
                })
                .collect(),
        }))
    }

    async fn register_tools(
        &self,
        request: Request<pb::RegisterToolsRequest>,
    ) -> Result<Response<pb::RegisterToolsResponse>, Status> {
        let caller = caller_of(&request);
        let r = crate::cells::scoped(request)?;
        let size = prost::Message::encoded_len(&r);
        let max = self.catalog.config.limits.max_registration_bytes;
        if size > max {
            return Err(CatalogError::new(
                CatalogCode::InvalidRegistration,
                format!("the registration is {size} bytes, over {max}"),
            )
            .into());
        }
        let cell = CellId::parse(&r.cell_id)?;
        let host_id = parse_segment("host id", &r.host_id)?;
        let endpoint = r.endpoint.ok_or_else(|| {
            CatalogError::new(
                CatalogCode::InvalidRegistration,
                "the registration has no endpoint",
            )
        })?;
        let max_tools = self.catalog.config.limits.max_tools_per_host;
        if r.tools.len() > max_tools {
            return Err(CatalogError::new(
                CatalogCode::InvalidRegistration,
                format!(
                    "the registration has {} tools, over the {max_tools} a host may register",
                    r.tools.len()
                ),
            )
            .into());
        }
        let tools = r
            .tools
            .into_iter()
            .map(|t| convert::registration_from_proto(&host_id, t))
            .collect::<Result<Vec<_>, _>>()?;
        let (host, warnings) = self
            .catalog
            .register_host(RegisterHost {
                cell: cell.clone(),
                host_id,
                display_name: r.display_name,
                endpoint: convert::endpoint_from_proto(endpoint),
                tools,
                expected_generation: r.expected_generation,
            })
            .await?;
        let summary = format!(
            "external tool host registered: generation {}, {} tools",
            host.generation,
            host.tools.len()
        );
        self.audit
            .record(
                &caller,
                AdminKind::Registration,
                "RegisterTools",
                cell.as_str(),
                &host.host_id,
                summary,
            )
            .await;
        Ok(Response::new(pb::RegisterToolsResponse {
            host: Some(convert::host_to_proto(&host)),
            warnings: warnings.iter().map(convert::diagnostic_to_proto).collect(),
        }))
    }

    async fn deregister_tools(
        &self,
        request: Request<pb::DeregisterToolsRequest>,
    ) -> Result<Response<pb::DeregisterToolsResponse>, Status> {
        let caller = caller_of(&request);
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let removed = self
            .catalog
            .deregister_host(&cell, &r.host_id, r.expected_generation)
            .await?;
        let summary = format!(
            "external tool host removed with {} tools",
            removed.tools.len()
        );
        self.audit
            .record(
                &caller,
                AdminKind::Registration,
                "DeregisterTools",
                cell.as_str(),
                &r.host_id,
                summary,
            )
            .await;
        Ok(Response::new(pb::DeregisterToolsResponse {
            removed_tool_ids: removed
                .tools
                .iter()
                .map(|t| t.descriptor.id().to_string())
                .collect(),
        }))
    }

    async fn list_tool_hosts(
        &self,
        request: Request<pb::ListToolHostsRequest>,
    ) -> Result<Response<pb::ListToolHostsResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let page = self
            .catalog
            .list_hosts(
                &cell,
                query::page_size(r.page_size, DEFAULT_PAGE, MAX_PAGE),
                &query::cursor("catalog.hosts", &r.page_token)?,
            )
            .await?;
        Ok(Response::new(pb::ListToolHostsResponse {
            hosts: page.hosts.iter().map(convert::host_to_proto).collect(),
            next_page_token: query::next_token("catalog.hosts", page.next),
        }))
    }

    async fn refresh_sources(
        &self,
        request: Request<pb::RefreshSourcesRequest>,
    ) -> Result<Response<pb::RefreshSourcesResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let c = self.catalog.cell(&cell).await?;
        let statuses = self.catalog.refresh(&c).await;
        Ok(Response::new(pb::RefreshSourcesResponse {
            sources: statuses.iter().map(convert::status_to_proto).collect(),
        }))
    }
}

#[tonic::async_trait]
impl ProfileService for CatalogGrpc {
    async fn put_profile(
        &self,
        request: Request<pb::PutProfileRequest>,
    ) -> Result<Response<pb::PutProfileResponse>, Status> {
        let caller = caller_of(&request);
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        if !r.profile_id.is_empty() {
            parse_segment("profile id", &r.profile_id)?;
        }
        let answer = self.puts.once(&r.cell_id, &r.request_id, &r, || async {
            let (stored, warnings) = self
                .catalog
                .put_profile(PutProfile {
                    cell: &cell,
                    profile_id: &r.profile_id,
                    text: &r.profile_json,
                    expected_version: r.expected_version,
                    validate_only: r.validate_only,
                })
                .await?;
            if !r.validate_only {
                let summary = format!("profile written: version {}", stored.record.version);
                self.audit
                    .record(
                        &caller,
                        AdminKind::Profile,
                        "PutProfile",
                        cell.as_str(),
                        &stored.record.profile_id,
                        summary,
                    )
                    .await;
            }
            Ok(pb::PutProfileResponse {
                profile: Some(stored_to_proto(&stored)),
                warnings: warnings.iter().map(convert::diagnostic_to_proto).collect(),
            })
        });
        Ok(Response::new(answer.await?))
    }

    async fn get_profile(
        &self,
        request: Request<pb::GetProfileRequest>,
    ) -> Result<Response<pb::GetProfileResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let stored = self.catalog.profile(&cell, &r.profile_id).await?;
        Ok(Response::new(pb::GetProfileResponse {
            profile: Some(stored_to_proto(&stored)),
        }))
    }

    async fn list_profiles(
        &self,
        request: Request<pb::ListProfilesRequest>,
    ) -> Result<Response<pb::ListProfilesResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let page = self
            .catalog
            .list_profiles(
                &cell,
                query::page_size(r.page_size, DEFAULT_PAGE, MAX_PAGE),
                &query::cursor("catalog.profiles", &r.page_token)?,
            )
            .await?;
        Ok(Response::new(pb::ListProfilesResponse {
            profiles: page.profiles.iter().map(stored_to_proto).collect(),
            next_page_token: query::next_token("catalog.profiles", page.next),
        }))
    }

    async fn delete_profile(
        &self,
        request: Request<pb::DeleteProfileRequest>,
    ) -> Result<Response<pb::DeleteProfileResponse>, Status> {
        let caller = caller_of(&request);
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let deleted_version = self
            .catalog
            .delete_profile(&cell, &r.profile_id, r.expected_version)
            .await?;
        let summary = format!("profile deleted at version {deleted_version}");
        self.audit
            .record(
                &caller,
                AdminKind::Profile,
                "DeleteProfile",
                cell.as_str(),
                &r.profile_id,
                summary,
            )
            .await;
        Ok(Response::new(pb::DeleteProfileResponse { deleted_version }))
    }

    async fn put_platform_policy(
        &self,
        request: Request<pb::PutPlatformPolicyRequest>,
    ) -> Result<Response<pb::PutPlatformPolicyResponse>, Status> {
        let caller = caller_of(&request);
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let (record, warnings) = self
            .catalog
            .put_platform_policy(&cell, &r.policy_json, r.expected_version)
            .await?;
        let summary = format!("platform policy written: version {}", record.version);
        self.audit
            .record(
                &caller,
                AdminKind::Policy,
                "PutPlatformPolicy",
                cell.as_str(),
                "platform",
                summary,
            )
            .await;
        Ok(Response::new(pb::PutPlatformPolicyResponse {
            policy: Some(convert::policy_doc_to_proto(Some(&record))),
            warnings: warnings.iter().map(convert::diagnostic_to_proto).collect(),
        }))
    }

    async fn get_platform_policy(
        &self,
        request: Request<pb::GetPlatformPolicyRequest>,
    ) -> Result<Response<pb::GetPlatformPolicyResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let stored = self.catalog.platform_policy(&cell).await?;
        Ok(Response::new(pb::GetPlatformPolicyResponse {
            policy: Some(convert::policy_doc_to_proto(
                stored.as_ref().map(|s| &s.record),
            )),
        }))
    }

    async fn put_user_policy(
        &self,
        request: Request<pb::PutUserPolicyRequest>,
    ) -> Result<Response<pb::PutUserPolicyResponse>, Status> {
        let caller = caller_of(&request);
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let actor = ActorId::parse(&r.actor_id)?;
        let (record, warnings) = self
            .catalog
            .put_user_policy(&cell, &actor, &r.policy_json, r.expected_version)
            .await?;
        let summary = format!("user policy written: version {}", record.version);
        self.audit
            .record(
                &caller,
                AdminKind::Policy,
                "PutUserPolicy",
                cell.as_str(),
                &format!("user/{}", actor.as_str()),
                summary,
            )
            .await;
        Ok(Response::new(pb::PutUserPolicyResponse {
            policy: Some(convert::policy_doc_to_proto(Some(&record))),
            warnings: warnings.iter().map(convert::diagnostic_to_proto).collect(),
        }))
    }

    async fn get_user_policy(
        &self,
        request: Request<pb::GetUserPolicyRequest>,
    ) -> Result<Response<pb::GetUserPolicyResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let actor = ActorId::parse(&r.actor_id)?;
        let stored = self.catalog.user_policy(&cell, &actor).await?;
        Ok(Response::new(pb::GetUserPolicyResponse {
            policy: Some(convert::policy_doc_to_proto(
                stored.as_ref().map(|s| &s.record),
            )),
        }))
    }

    async fn resolve_profile(
        &self,
        request: Request<pb::ResolveProfileRequest>,
    ) -> Result<Response<pb::ResolveProfileResponse>, Status> {
        let r = crate::cells::scoped(request)?;
        let cell = CellId::parse(&r.cell_id)?;
        let actor = ActorId::parse_optional(&r.actor_id)?;
        let resolved = self
            .catalog
            .resolve_profile(&cell, &r.profile_id, actor.as_ref())
            .await?;
        Ok(Response::new(pb::ResolveProfileResponse {
            profile: Some(stored_to_proto(&resolved.profile)),
            platform_policy: Some(convert::policy_doc_to_proto(resolved.platform.as_ref())),
            user_policy: Some(convert::policy_doc_to_proto(resolved.user.as_ref())),
            tools: resolved
                .tools
                .iter()
                .map(|(l, e)| convert::listing_to_proto(l, e.as_ref()))
                .collect(),
            sources: resolved
                .sources
                .iter()
                .map(convert::status_to_proto)
                .collect(),
        }))
    }
}
