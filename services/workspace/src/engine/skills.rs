//! Skill packages as the storage RPCs see them: pages of a cell's skills and deleting one (import
//! is [`crate::skills::Skills::import`] as it is). Must never list another cell's skills.

use crate::{engine::Workspace, error::WsError, skills::SkillPackage};

impl Workspace {
    /// A cell's skills after `after` (by name; empty: from the first), at most `page`, and the
    /// name to continue after (empty at the end).
    pub async fn skill_page(
        &self,
        cell: &str,
        after: &str,
        page: usize,
    ) -> Result<(Vec<SkillPackage>, String), WsError> {
        let mut skills: Vec<SkillPackage> = self
            .skills()
            .list(cell)
            .await?
            .into_iter()
            .filter(|s| after.is_empty() || s.name.as_str() > after)
            .collect();
        let next = if skills.len() > page {
            skills
                .get(page - 1)
                .map(|s| s.name.clone())
                .unwrap_or_default()
        } else {
            String::new()
        };
        skills.truncate(page);
        Ok((skills, next))
    }

    /// Deletes a cell's skill; a skill that does not exist is `NOT_FOUND`.
    pub async fn delete_skill(&self, cell: &str, name: &str) -> Result<(), WsError> {
        if !self.skills().delete(cell, name).await? {
            return Err(WsError::not_found(format!("no skill {name}")));
        }
        Ok(())
    }
}
