//! The first admin token. Owns when a service makes one (the token store holds no token yet) and
//! how its secret reaches the operator (`<data-dir>/admin.token`, mode 0600, created atomically
//! and never overwritten); must never print the secret.
//!
//! The file is written before the token is stored, so a crash between the two leaves a file
//! whose secret the next start stores (the store is still empty), never a stored admin token
//! nobody can read.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::token::{NewToken, TOKEN_PREFIX, TokenSecret};
use crate::{AuthError, Role, TokenStore};

/// The file, in a service's data directory, that holds the bootstrap admin token's secret.
pub const ADMIN_TOKEN_FILE: &str = "admin.token";
/// The bootstrap token's name in listings.
pub const BOOTSTRAP_TOKEN_NAME: &str = "bootstrap-admin";

/// `<data_dir>/admin.token`.
pub fn admin_token_path(data_dir: &Path) -> PathBuf {
    data_dir.join(ADMIN_TOKEN_FILE)
}

/// On a service's first start with authentication on (no token stored yet): creates an admin
/// token of `cell` and writes its secret to `<data_dir>/admin.token` (mode 0600). Returns whether
/// it created the token, so the service can tell the operator where to find it. Does nothing
/// when the store already holds a token; never overwrites an existing file (if one exists while
/// the store is empty, its secret becomes the admin token).
pub async fn bootstrap_admin_token(
    tokens: &TokenStore,
    data_dir: &Path,
    cell: &str,
) -> Result<bool, AuthError> {
    if tokens.has_any().await? {
        return Ok(false);
    }
    let path = admin_token_path(data_dir);
    let secret = match read_secret(&path)? {
        Some(secret) => secret,
        None => {
            let secret = TokenStore::new_secret()?;
            write_create_only(&path, secret.expose())?;
            secret
        }
    };
    let new = NewToken {
        name: BOOTSTRAP_TOKEN_NAME.to_owned(),
        cell: cell.to_owned(),
        role: Role::Admin,
        expires_at_unix_ms: None,
    };
    tokens.create_with_secret(new, secret).await?;
    tracing::info!(path = %path.display(), cell, "bootstrap admin token created");
    Ok(true)
}

/// The secret in an existing token file, or `None` when there is no file.
fn read_secret(path: &Path) -> Result<Option<TokenSecret>, AuthError> {
    match fs::read_to_string(path) {
        Ok(text) => {
            let secret = text.trim();
            if !secret.starts_with(TOKEN_PREFIX) || secret.len() < TOKEN_PREFIX.len() + 64 {
                return Err(AuthError::InvalidRequest(format!(
                    "{} exists but does not hold a toolplane token",
                    path.display()
                )));
            }
            Ok(Some(TokenSecret::from_file(secret)))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(AuthError::io(format!("read {}", path.display()), error)),
    }
}

/// Writes `secret` to `path` with mode 0600, all or nothing: a temp file is written and synced,
/// then hard-linked to `path` (which fails if `path` exists, so nothing is ever overwritten).
fn write_create_only(path: &Path, secret: &str) -> Result<(), AuthError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| AuthError::io(format!("create {}", dir.display()), e))?;
    let temp = dir.join(format!(".{ADMIN_TOKEN_FILE}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&temp);
    let written = write_synced(&temp, secret).and_then(|()| fs::hard_link(&temp, path));
    let _ = fs::remove_file(&temp);
    written.map_err(|e| AuthError::io(format!("create {}", path.display()), e))?;
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Creates `temp` (mode 0600, never an existing file) holding `secret`, synced to disk.
fn write_synced(temp: &Path, secret: &str) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(temp)?;
    file.write_all(format!("{secret}\n").as_bytes())?;
    file.sync_all()
}
