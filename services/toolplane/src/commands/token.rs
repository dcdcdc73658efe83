//! `toolplane token create|ls|revoke`: bearer tokens through the catalog's `TokenService`
//! (docs/auth.md). A new token's secret is printed once, on stdout alone, so
//! `toolplane token create … > agent.token` keeps it; nothing lists it again.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::token_service_client::TokenServiceClient;

use crate::cli::TokenCommand;
use crate::client::{Conn, Endpoints};
use crate::error::CliError;
use crate::output::{Out, line, table};

pub async fn run(command: TokenCommand, eps: &Endpoints, out: Out) -> Result<(), CliError> {
    // Check the lifetime before connecting: a typo is the user's to fix, whatever the plane.
    let expires_at = match &command {
        TokenCommand::Create {
            expires: Some(d), ..
        } => Some(expiry(d)?),
        _ => None,
    };
    let conn = Conn::connect("catalog", &eps.catalog).await?;
    let mut tokens = TokenServiceClient::new(conn.channel.clone());
    match command {
        TokenCommand::Create { role, name, .. } => {
            let r = tokens
                .create_token(pb::CreateTokenRequest {
                    cell_id: eps.cell.clone(),
                    role,
                    name,
                    expires_at_unix_ms: expires_at,
                    request_id: String::new(),
                })
                .await
                .map_err(|s| conn.err(s))?
                .into_inner();
            let info = r.token.unwrap_or_default();
            if out.json {
                return out.json(&json!({"token": token_json(&info), "secret": r.secret}));
            }
            eprintln!(
                "token {} ({}, {} of cell {}) created; its secret is shown this once:",
                info.token_id, info.name, info.role, info.cell_id
            );
            line(&r.secret)
        }
        TokenCommand::Ls => {
            let r = tokens
                .list_tokens(pb::ListTokensRequest {
                    cell_id: eps.cell.clone(),
                })
                .await
                .map_err(|s| conn.err(s))?
                .into_inner();
            if out.json {
                return out.json(&Value::Array(r.tokens.iter().map(token_json).collect()));
            }
            let rows: Vec<Vec<String>> = r
                .tokens
                .iter()
                .map(|t| {
                    vec![
                        t.token_id.clone(),
                        t.name.clone(),
                        t.cell_id.clone(),
                        t.role.clone(),
                        t.expires_at_unix_ms
                            .map_or_else(|| "never".to_owned(), |ms| ms.to_string()),
                        if t.revoked { "revoked" } else { "active" }.to_owned(),
                    ]
                })
                .collect();
            line(&table(
                &["ID", "NAME", "CELL", "ROLE", "EXPIRES (UNIX MS)", "STATE"],
                &rows,
            ))
        }
        TokenCommand::Revoke { id } => {
            let r = tokens
                .revoke_token(pb::RevokeTokenRequest {
                    token_id: id.clone(),
                })
                .await
                .map_err(|s| conn.err(s))?
                .into_inner();
            if out.json {
                return out.json(&token_json(&r.token.unwrap_or_default()));
            }
            line(&format!("token {id} revoked"))
        }
    }
}

fn token_json(t: &pb::TokenInfo) -> Value {
    json!({
        "tokenId": t.token_id,
        "name": t.name,
        "cellId": t.cell_id,
        "role": t.role,
        "createdAtUnixMs": t.created_at_unix_ms,
        "expiresAtUnixMs": t.expires_at_unix_ms,
        "revoked": t.revoked,
    })
}

/// `now + d` in Unix milliseconds, for a lifetime like `90s`, `30m`, `12h` or `30d`.
fn expiry(d: &str) -> Result<u64, CliError> {
    let bad = || {
        CliError::InvalidInput(format!(
            "--expires {d:?}: expected a number with s, m, h or d (e.g. 30d)"
        ))
    };
    let split = d.len().checked_sub(1).ok_or_else(bad)?;
    let (number, unit) = d.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        "d" => n.checked_mul(86_400),
        _ => None,
    }
    .filter(|s| *s > 0)
    .ok_or_else(bad)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let at = now.saturating_add(Duration::from_secs(secs));
    Ok(u64::try_from(at.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_have_a_unit_and_are_positive() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let day = expiry("1d").unwrap();
        assert!(day >= now + 86_400_000 && day < now + 86_460_000);
        for bad in ["", "d", "10", "0d", "-1d", "1w", "1.5h"] {
            assert!(expiry(bad).is_err(), "{bad}");
        }
    }
}
