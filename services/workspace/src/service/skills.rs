//! The skill RPCs (`ImportSkill`, `ListSkills`, `DeleteSkill`): each validates its cell, calls
//! the engine ([`crate::skills`]) and converts the answer; imports and deletions leave an admin
//! audit record ([`super::audit`]).

use toolplane_auth::{AdminAuditLog, Caller};
use toolplane_proto::v1 as pb;

use super::{audit, cell_of};
use crate::{convert, engine::Workspace, error::WsError};

pub(super) async fn import(
    ws: &Workspace,
    log: Option<&AdminAuditLog>,
    caller: &Caller,
    r: pb::ImportSkillRequest,
) -> Result<pb::ImportSkillResponse, WsError> {
    let cell = cell_of(&r.cell_id)?;
    let (skill, warnings) = ws
        .skills()
        .import(&cell, &r.source_path, &r.name, r.replace)
        .await?;
    let summary = format!(
        "skill imported: version `{}`, {} files",
        skill.version,
        skill.files.len()
    );
    audit::skill_changed(log, caller, "ImportSkill", &cell, &skill.name, summary).await;
    Ok(pb::ImportSkillResponse {
        skill: Some(convert::skill(&skill)),
        warnings: warnings
            .into_iter()
            .map(|w| pb::Diagnostic {
                code: w.code.to_owned(),
                message: w.message,
                subject: w.subject,
            })
            .collect(),
    })
}

pub(super) async fn list(
    ws: &Workspace,
    r: pb::ListSkillsRequest,
) -> Result<pb::ListSkillsResponse, WsError> {
    let cell = cell_of(&r.cell_id)?;
    let page = convert::page_size(r.page_size, 100, 1000);
    let after = convert::page_cursor("workspace.skills", &r.page_token)?;
    let (skills, next) = ws.skill_page(&cell, &after, page).await?;
    Ok(pb::ListSkillsResponse {
        skills: skills.iter().map(convert::skill).collect(),
        next_page_token: convert::page_token("workspace.skills", &next),
    })
}

pub(super) async fn delete(
    ws: &Workspace,
    log: Option<&AdminAuditLog>,
    caller: &Caller,
    r: pb::DeleteSkillRequest,
) -> Result<pb::DeleteSkillResponse, WsError> {
    let cell = cell_of(&r.cell_id)?;
    ws.delete_skill(&cell, &r.name).await?;
    audit::skill_changed(
        log,
        caller,
        "DeleteSkill",
        &cell,
        &r.name,
        "skill deleted".to_owned(),
    )
    .await;
    Ok(pb::DeleteSkillResponse {})
}
