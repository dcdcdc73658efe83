//! The first admin token: made once, written 0600, never overwritten.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test fixtures fail loudly

use crate::common;

use std::os::unix::fs::PermissionsExt;

use common::*;
use toolplane_auth::{Role, admin_token_path, bootstrap_admin_token};

#[tokio::test]
async fn the_first_start_writes_one_admin_token_and_later_starts_do_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let tokens = token_store();
    assert!(
        bootstrap_admin_token(&tokens, &data_dir, "default")
            .await
            .unwrap()
    );

    let path = admin_token_path(&data_dir);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let secret = std::fs::read_to_string(&path).unwrap();
    let caller = tokens.verify(secret.trim()).await.unwrap();
    assert_eq!(
        (caller.cell.as_str(), caller.role),
        ("default", Role::Admin)
    );
    let listed = tokens.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "bootstrap-admin");
    assert!(!format!("{listed:?}").contains(secret.trim()));

    assert!(
        !bootstrap_admin_token(&tokens, &data_dir, "default")
            .await
            .unwrap()
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), secret);
    assert_eq!(tokens.list().await.unwrap().len(), 1);

    // Deleting the file does not mint another admin token.
    std::fs::remove_file(&path).unwrap();
    assert!(
        !bootstrap_admin_token(&tokens, &data_dir, "default")
            .await
            .unwrap()
    );
    assert!(!path.exists());
    // No temp file is left next to it.
    assert_eq!(std::fs::read_dir(&data_dir).unwrap().count(), 0);
}

#[tokio::test]
async fn a_file_left_by_an_interrupted_start_is_stored_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let first = token_store();
    assert!(
        bootstrap_admin_token(&first, dir.path(), "default")
            .await
            .unwrap()
    );
    let path = admin_token_path(dir.path());
    let secret = std::fs::read_to_string(&path).unwrap();

    // A store that lost the token (the crash came before it was stored) takes the file's secret.
    let empty = token_store();
    assert!(
        bootstrap_admin_token(&empty, dir.path(), "default")
            .await
            .unwrap()
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), secret);
    assert!(empty.verify(secret.trim()).await.is_ok());

    std::fs::write(&path, "junk").unwrap();
    let err = bootstrap_admin_token(&token_store(), dir.path(), "default")
        .await
        .unwrap_err();
    assert_eq!(err.code(), "auth.invalid_request");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "junk");
}
