//! `toolplane.v1.TokenService`: the plane's bearer tokens, created, listed and revoked by admins
//! (docs/auth.md, "Tokens over gRPC"). The tokens live in the token store the catalog's
//! authenticator verifies (or, with authentication off, the catalog's store under
//! [`TOKEN_NAMESPACE`]); the secret of a new token is answered once, only its
//! hash is kept.
//!
//! Who manages which tokens: an admin the tokens of its own cell; an admin of the default cell
//! (the plane's operator, and the bootstrap admin) those of every cell, since otherwise nobody
//! could make the first token of a new cell. A token of a cell the caller may not manage is
//! answered as not found, exactly like a token id that does not exist.
//!
//! Every token made or revoked leaves an admin audit record in the token's cell.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::server::NamedService;
use tonic::{Request, Response, Status};
use toolplane_auth::{
    AdminKind, AuthError, Caller, CallerKind, NewToken, Role, TokenInfo, TokenStore,
};
use toolplane_proto::idempotency::Replays;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::token_service_server::{TokenService, TokenServiceServer};
use toolplane_serve::{LimitMessages, MessageLimits};

use crate::audit::CatalogAudit;
use crate::cell::DEFAULT_CELL;

/// The store namespace (of the catalog's store) the plane's tokens live in.
pub const TOKEN_NAMESPACE: &str = "auth";

/// The token service over a token store.
#[derive(Debug, Clone)]
pub struct TokenGrpc {
    tokens: TokenStore,
    audit: CatalogAudit,
    /// `CreateToken`'s answers per `request_id` (docs/errors.md, "Retrying creates").
    creates: Arc<Replays<pb::CreateTokenRequest, pb::CreateTokenResponse>>,
}

impl TokenGrpc {
    pub fn new(tokens: TokenStore) -> TokenGrpc {
        TokenGrpc {
            tokens,
            audit: CatalogAudit::default(),
            creates: Arc::default(),
        }
    }

    /// The same service, recording every token made or revoked in `audit`.
    #[must_use]
    pub fn with_audit(mut self, audit: CatalogAudit) -> TokenGrpc {
        self.audit = audit;
        self
    }

    /// The generated server, ready for `toolplane_serve::Services::add_service`.
    pub fn server(self) -> TokenServer {
        TokenServer(TokenServiceServer::new(self))
    }
}

fn caller<T>(request: &Request<T>) -> Caller {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(|| Caller::auth_off(DEFAULT_CELL))
}

/// The caller's own cell (the default cell for a caller without one).
fn own_cell(caller: &Caller) -> &str {
    if caller.cell.is_empty() {
        DEFAULT_CELL
    } else {
        &caller.cell
    }
}

/// True for the plane's operator: an admin of the default cell (authentication off included).
fn operator(caller: &Caller) -> bool {
    caller.kind == CallerKind::AuthOff || own_cell(caller) == DEFAULT_CELL
}

fn manages(caller: &Caller, cell: &str) -> bool {
    operator(caller) || own_cell(caller) == cell
}

fn status(e: AuthError) -> Status {
    let status = e.to_status();
    if status.code() != tonic::Code::Internal {
        return status;
    }
    tracing::error!(code = e.code(), error = %e, "token service failed");
    toolplane_proto::status::status(
        tonic::Code::Internal,
        e.code(),
        "the token store failed",
        toolplane_proto::status::Details::new().meta("service", "catalog"),
    )
}

fn info_pb(t: &TokenInfo) -> pb::TokenInfo {
    pb::TokenInfo {
        token_id: t.id.clone(),
        name: t.name.clone(),
        cell_id: t.cell.clone(),
        role: t.role.as_str().to_owned(),
        created_at_unix_ms: t.created_at_unix_ms,
        expires_at_unix_ms: t.expires_at_unix_ms,
        revoked: t.revoked,
    }
}

#[tonic::async_trait]
impl TokenService for TokenGrpc {
    async fn create_token(
        &self,
        request: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreateTokenResponse>, Status> {
        let caller = caller(&request);
        let r = request.into_inner();
        let cell = if r.cell_id.is_empty() {
            own_cell(&caller).to_owned()
        } else {
            r.cell_id.clone()
        };
        if !manages(&caller, &cell) {
            return Err(status(AuthError::WrongCell { cell }));
        }
        let role: Role = r.role.parse().map_err(status)?;
        let keyed = pb::CreateTokenRequest {
            cell_id: cell.clone(),
            ..r.clone()
        };
        let answer = self.creates.once(&cell, &r.request_id, &keyed, || async {
            let name = if r.name.is_empty() {
                role.as_str().to_owned()
            } else {
                r.name.clone()
            };
            let created = self
                .tokens
                .create(NewToken {
                    name,
                    cell: cell.clone(),
                    role,
                    expires_at_unix_ms: r.expires_at_unix_ms,
                })
                .await
                .map_err(status)?;
            tracing::info!(token_id = %created.info.id, by = %caller.principal, "token created over gRPC");
            let info = &created.info;
            let summary = format!("token `{}` ({}) created", info.name, info.role);
            self.audit
                .record(
                    &caller,
                    AdminKind::Token,
                    "CreateToken",
                    &info.cell,
                    &info.id,
                    summary,
                )
                .await;
            Ok(pb::CreateTokenResponse {
                token: Some(info_pb(&created.info)),
                secret: created.secret.expose().to_owned(),
            })
        });
        Ok(Response::new(answer.await?))
    }

    async fn list_tokens(
        &self,
        request: Request<pb::ListTokensRequest>,
    ) -> Result<Response<pb::ListTokensResponse>, Status> {
        let caller = caller(&request);
        let cell = request.into_inner().cell_id;
        if !cell.is_empty() && !manages(&caller, &cell) {
            return Err(status(AuthError::WrongCell { cell }));
        }
        let tokens = self.tokens.list().await.map_err(status)?;
        let shown = tokens
            .iter()
            .filter(|t| {
                if !cell.is_empty() {
                    t.cell == cell
                } else {
                    operator(&caller) || t.cell == own_cell(&caller)
                }
            })
            .map(info_pb)
            .collect();
        Ok(Response::new(pb::ListTokensResponse { tokens: shown }))
    }

    async fn revoke_token(
        &self,
        request: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        let caller = caller(&request);
        let id = request.into_inner().token_id;
        let tokens = self.tokens.list().await.map_err(status)?;
        let visible = tokens
            .iter()
            .any(|t| t.id == id && manages(&caller, &t.cell));
        if !visible {
            return Err(status(AuthError::TokenNotFound { id }));
        }
        let revoked = self.tokens.revoke(&id).await.map_err(status)?;
        let summary = format!("token `{}` ({}) revoked", revoked.name, revoked.role);
        self.audit
            .record(
                &caller,
                AdminKind::Token,
                "RevokeToken",
                &revoked.cell,
                &revoked.id,
                summary,
            )
            .await;
        tracing::info!(token_id = %id, by = %caller.principal, "token revoked over gRPC");
        Ok(Response::new(pb::RevokeTokenResponse {
            token: Some(info_pb(&revoked)),
        }))
    }
}

/// The generated token server with message limits, as `toolplane_serve` serves every server.
#[derive(Debug, Clone)]
pub struct TokenServer(TokenServiceServer<TokenGrpc>);

impl NamedService for TokenServer {
    const NAME: &'static str = <TokenServiceServer<TokenGrpc> as NamedService>::NAME;
}

impl LimitMessages for TokenServer {
    fn limit_messages(self, limits: MessageLimits) -> Self {
        let mut server = self.0;
        if let Some(bytes) = limits.decoding {
            server = server.max_decoding_message_size(bytes);
        }
        if let Some(bytes) = limits.encoding {
            server = server.max_encoding_message_size(bytes);
        }
        TokenServer(server)
    }
}

impl tower_service::Service<http::Request<Body>> for TokenServer {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future =
        <TokenServiceServer<TokenGrpc> as tower_service::Service<http::Request<Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        <TokenServiceServer<TokenGrpc> as tower_service::Service<http::Request<Body>>>::poll_ready(
            &mut self.0,
            cx,
        )
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        tower_service::Service::call(&mut self.0, request)
    }
}
