//! `toolplane profile put|get|ls|rm`: agent profiles through the catalog's `ProfileService`. A
//! profile file is checked for being a JSON object with an `id` before it is sent, so a malformed
//! file is one clear line; everything else about a profile is validated by the catalog.

use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;

use crate::cli::{ProfileCommand, ProfilePutArgs};
use crate::client::{Endpoints, MAX_MESSAGE_BYTES};
use crate::commands::read_input;
use crate::commands::tools::warnings_json;
use crate::convert::profile_json;
use crate::error::CliError;
use crate::output::{Out, line, table, warn};

/// Largest profile file read (the catalog refuses documents over 256 KiB).
const MAX_PROFILE_FILE_BYTES: u64 = 1024 * 1024;

pub async fn run(command: ProfileCommand, eps: &Endpoints, out: Out) -> Result<(), CliError> {
    // Parse the file before connecting: a malformed file is the user's to fix, whatever the plane.
    let put = match &command {
        ProfileCommand::Put(args) => Some(read_profile(args)?),
        _ => None,
    };
    let conn = eps.connect("catalog", &eps.catalog).await?;
    let mut profiles = ProfileServiceClient::new(conn.channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES);
    match command {
        ProfileCommand::Put(args) => {
            let Some((id, text)) = put else { return Ok(()) };
            let r = profiles
                .put_profile(pb::PutProfileRequest {
                    cell_id: eps.cell.clone(),
                    profile_id: id.clone(),
                    profile_json: text,
                    expected_version: args.expected_version,
                    validate_only: args.check,
                    request_id: String::new(),
                })
                .await
                .map_err(|s| conn.err(s))?
                .into_inner();
            if out.json {
                return out.json(&json!({
                    "profile": r.profile.as_ref().map(profile_json),
                    "checkedOnly": args.check,
                    "warnings": warnings_json(&r.warnings),
                }));
            }
            for w in &r.warnings {
                warn(&format!(
                    "{}: {}{}",
                    w.code,
                    w.message,
                    if w.subject.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", w.subject)
                    }
                ));
            }
            if args.check {
                line(&format!(
                    "profile `{id}` is valid ({} warnings); nothing stored",
                    r.warnings.len()
                ))
            } else {
                let version = r.profile.map(|p| p.version).unwrap_or_default();
                line(&format!("profile `{id}` stored, version {version}"))
            }
        }
        ProfileCommand::Get { id } => {
            let p = profiles
                .get_profile(pb::GetProfileRequest {
                    cell_id: eps.cell.clone(),
                    profile_id: id,
                })
                .await
                .map_err(|s| conn.err(s))?
                .into_inner()
                .profile
                .unwrap_or_default();
            if out.json {
                return out.json(&profile_json(&p));
            }
            // The document alone on stdout, so `profile get x > x.json` round-trips.
            eprintln!("profile `{}` version {}", p.profile_id, p.version);
            let doc: Value = serde_json::from_str(&p.profile_json)
                .unwrap_or(Value::String(p.profile_json.clone()));
            out.json(&doc)
        }
        ProfileCommand::Ls => {
            let mut all = Vec::new();
            let mut page_token = String::new();
            for _ in 0..1000 {
                let page = profiles
                    .list_profiles(pb::ListProfilesRequest {
                        cell_id: eps.cell.clone(),
                        page_size: 1000,
                        page_token: page_token.clone(),
                    })
                    .await
                    .map_err(|s| conn.err(s))?
                    .into_inner();
                all.extend(page.profiles);
                page_token = page.next_page_token;
                if page_token.is_empty() {
                    break;
                }
            }
            if out.json {
                return out.json(&Value::Array(all.iter().map(profile_json).collect()));
            }
            let rows: Vec<Vec<String>> = all
                .iter()
                .map(|p| {
                    vec![
                        p.profile_id.clone(),
                        p.version.to_string(),
                        p.display_name.clone(),
                        p.description.clone(),
                    ]
                })
                .collect();
            line(&table(&["ID", "VERSION", "NAME", "DESCRIPTION"], &rows))
        }
        ProfileCommand::Rm { id } => {
            let r = profiles
                .delete_profile(pb::DeleteProfileRequest {
                    cell_id: eps.cell.clone(),
                    profile_id: id.clone(),
                    expected_version: None,
                })
                .await
                .map_err(|s| conn.err(s))?
                .into_inner();
            if out.json {
                return out.json(&json!({"profileId": id, "deletedVersion": r.deleted_version}));
            }
            line(&format!(
                "profile `{id}` deleted (was version {})",
                r.deleted_version
            ))
        }
    }
}

/// The profile's id and text, or a one-line reason the file is not a profile document.
fn read_profile(args: &ProfilePutArgs) -> Result<(String, String), CliError> {
    let text = read_input(&args.file, "profile file", MAX_PROFILE_FILE_BYTES)?;
    let name = args.file.display();
    let doc: Value = serde_json::from_str(&text).map_err(|e| {
        CliError::InvalidInput(format!("the profile file {name} is not valid JSON: {e}"))
    })?;
    let Some(obj) = doc.as_object() else {
        return Err(CliError::InvalidInput(format!(
            "the profile file {name} must hold a JSON object"
        )));
    };
    match obj.get("id").and_then(Value::as_str) {
        Some(id) if !id.trim().is_empty() => Ok((id.to_owned(), text)),
        _ => Err(CliError::InvalidInput(format!(
            "the profile file {name} has no string `id`"
        ))),
    }
}
