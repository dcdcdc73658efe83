//! Roles and callers. Owns the order of roles (admin ⊇ agent ⊇ reader) and the [`Caller`] the
//! layer hands to handlers; must never know how a credential was verified.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::AuthError;

/// What a caller may do. Ordered: a higher role may do everything a lower one may.
///
/// - `reader`: listings, runs, invocations, snapshots, journals, audit objects, chats, skills.
/// - `agent`: everything a reader may, plus runs, invocations and tool calls.
/// - `admin`: everything, including tokens, registrations, policies, profiles, skill imports
///   and the plane's internal writes (workspace lifecycle, audit objects, journal appends,
///   `ToolExecutor/Execute`), which one service makes on another's behalf.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Reader,
    Agent,
    Admin,
}

impl Role {
    /// Every role, lowest first.
    pub const ALL: [Role; 3] = [Role::Reader, Role::Agent, Role::Admin];

    /// The role's name as configured and shown: `reader`, `agent`, `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Agent => "agent",
            Role::Admin => "admin",
        }
    }

    /// True when a caller with this role may do what `required` allows.
    pub fn includes(self, required: Role) -> bool {
        self >= required
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = AuthError;

    fn from_str(name: &str) -> Result<Role, AuthError> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == name)
            .ok_or_else(|| AuthError::InvalidRole {
                role: name.chars().take(32).collect(),
            })
    }
}

/// How a caller proved who it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallerKind {
    /// A toolplane token (`tp_…`); the principal is the token's id.
    Token,
    /// A JWT of the operator's identity provider; the principal is its `sub` claim.
    Jwt,
    /// Authentication is off: every request is this default-cell admin.
    AuthOff,
    /// A client certificate verified during the connection's TLS handshake; the principal is
    /// the certificate's identity (a SAN URI, docs/auth.md "mTLS between services").
    Certificate,
}

/// The caller a connection's transport vouches for: the identity of a client certificate
/// verified during the TLS handshake, or none. A server puts it into the extensions of every
/// request of that connection; [`crate::AuthLayer`] uses it for a request that carries no
/// bearer credential (a credential, when sent, always wins).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransportCaller(pub Option<Caller>);

/// Who is calling: put into each request's extensions by [`crate::AuthLayer`], read by handlers
/// with `request.extensions().get::<Caller>()`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Caller {
    /// The cell the caller acts in.
    pub cell: String,
    pub role: Role,
    /// The token id, the JWT subject or the certificate's identity; never a secret.
    pub principal: String,
    pub kind: CallerKind,
}

impl Caller {
    /// The caller every request is when authentication is off: an admin of `cell`.
    pub fn auth_off(cell: &str) -> Caller {
        Caller {
            cell: cell.to_owned(),
            role: Role::Admin,
            principal: "anonymous".to_owned(),
            kind: CallerKind::AuthOff,
        }
    }

    /// Refuses a request for a cell other than the caller's (`auth.permission_denied`). Handlers
    /// call it with the cell their request names; a credential is bound to one cell.
    pub fn check_cell(&self, cell: &str) -> Result<(), AuthError> {
        if self.cell == cell {
            Ok(())
        } else {
            Err(AuthError::WrongCell {
                cell: cell.chars().take(64).collect(),
            })
        }
    }

    /// The cell a request acts in, from the credential, never from the request. With
    /// authentication off it is the request's cell as named (empty stays empty: each service
    /// keeps its own meaning of an empty cell). Otherwise an empty cell is the caller's, and a
    /// request naming another cell is refused (`auth.permission_denied`, whether that cell exists
    /// or not).
    pub fn scope(&self, requested: &str) -> Result<String, AuthError> {
        if self.kind == CallerKind::AuthOff {
            return Ok(requested.to_owned());
        }
        if requested.is_empty() {
            return Ok(self.cell.clone());
        }
        self.check_cell(requested)?;
        Ok(self.cell.clone())
    }

    /// The one cell whose records this caller may see; `None` (every cell) with authentication
    /// off. A record of another cell is answered as not found, exactly like a missing one.
    pub fn visible_cell(&self) -> Option<&str> {
        match self.kind {
            CallerKind::AuthOff => None,
            CallerKind::Token | CallerKind::Jwt | CallerKind::Certificate => Some(&self.cell),
        }
    }

    /// True when a record of `cell` is visible to this caller.
    pub fn sees(&self, cell: &str) -> bool {
        self.visible_cell().is_none_or(|own| own == cell)
    }

    /// Refuses a caller whose role does not include `required` (`auth.permission_denied`).
    pub fn check_role(&self, required: Role) -> Result<(), AuthError> {
        if self.role.includes(required) {
            Ok(())
        } else {
            Err(AuthError::PermissionDenied {
                role: self.role,
                required,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_nest_admin_over_agent_over_reader() {
        let table = [
            (Role::Admin, Role::Admin, true),
            (Role::Admin, Role::Agent, true),
            (Role::Admin, Role::Reader, true),
            (Role::Agent, Role::Admin, false),
            (Role::Agent, Role::Agent, true),
            (Role::Agent, Role::Reader, true),
            (Role::Reader, Role::Admin, false),
            (Role::Reader, Role::Agent, false),
            (Role::Reader, Role::Reader, true),
        ];
        for (have, need, ok) in table {
            assert_eq!(have.includes(need), ok, "{have} for {need}");
        }
    }

    #[test]
    fn role_names_round_trip_and_unknown_ones_fail() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
        }
        assert_eq!(
            "root".parse::<Role>().unwrap_err().code(),
            "auth.invalid_role"
        );
        assert!("Admin".parse::<Role>().is_err());
    }

    #[test]
    fn a_caller_is_bound_to_its_cell() {
        let caller = Caller {
            cell: "a".into(),
            role: Role::Agent,
            principal: "tok_1".into(),
            kind: CallerKind::Token,
        };
        assert!(caller.check_cell("a").is_ok());
        let err = caller.check_cell("b").unwrap_err();
        assert_eq!(err.code(), "auth.permission_denied");
        assert!(caller.check_role(Role::Reader).is_ok());
        assert!(caller.check_role(Role::Admin).is_err());
    }

    #[test]
    fn the_scope_comes_from_the_credential_unless_auth_is_off() {
        let caller = Caller {
            cell: "a".into(),
            role: Role::Admin,
            principal: "tok_1".into(),
            kind: CallerKind::Token,
        };
        assert_eq!(caller.scope("").unwrap(), "a");
        assert_eq!(caller.scope("a").unwrap(), "a");
        assert_eq!(
            caller.scope("b").unwrap_err().code(),
            "auth.permission_denied"
        );
        assert_eq!(caller.visible_cell(), Some("a"));
        assert!(caller.sees("a") && !caller.sees("b"));

        let off = Caller::auth_off("default");
        assert_eq!(off.scope("").unwrap(), "");
        assert_eq!(off.scope("b").unwrap(), "b");
        assert_eq!(off.visible_cell(), None);
        assert!(off.sees("a") && off.sees("b"));
    }
}
