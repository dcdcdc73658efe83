//! Which of the plane's environment variables a registration may name: the one rule behind an
//! MCP registration's `inherit_env` and `header_env` and a model endpoint's `api_key_env`.
//!
//! A name the configuration does not list is refused when the registration is made, so a caller
//! can never have a secret of the plane's environment sent to a process or URL of its choosing.
//! This module only matches names; reading variables is the services' business.

use serde::{Deserialize, Serialize};

/// Environment variable names that may be named by registrations: exact names, or patterns with
/// one `*` standing for any run of characters (`*_API_KEY`, `MCP_*`). Empty allows nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EnvAllowList(Vec<String>);

impl EnvAllowList {
    pub fn new(entries: impl IntoIterator<Item = impl Into<String>>) -> EnvAllowList {
        EnvAllowList(entries.into_iter().map(Into::into).collect())
    }

    /// Parses a comma-separated list (`--env-allow OPENAI_API_KEY,*_TOKEN`); blanks are skipped.
    pub fn parse(list: &str) -> EnvAllowList {
        EnvAllowList::new(
            list.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        )
    }

    /// The entries as configured.
    pub fn entries(&self) -> &[String] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `name` may be named.
    pub fn allows(&self, name: &str) -> bool {
        self.0.iter().any(|entry| matches(entry, name))
    }
}

fn matches(entry: &str, name: &str) -> bool {
    match entry.split_once('*') {
        None => entry == name,
        Some((prefix, suffix)) => {
            name.len() >= prefix.len() + suffix.len()
                && name.starts_with(prefix)
                && name.ends_with(suffix)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_names_and_one_star_patterns() {
        let list = EnvAllowList::parse(" OPENAI_API_KEY, *_TOKEN ,MCP_*,, ");
        assert_eq!(list.entries(), ["OPENAI_API_KEY", "*_TOKEN", "MCP_*"]);
        let cases = [
            ("OPENAI_API_KEY", true),
            ("OPENAI_API_KEY2", false),
            ("GITHUB_TOKEN", true),
            ("_TOKEN", true),
            ("TOKEN", false),
            ("MCP_DOCS", true),
            ("AWS_SECRET_ACCESS_KEY", false),
            ("", false),
        ];
        for (name, allowed) in cases {
            assert_eq!(list.allows(name), allowed, "{name}");
        }
        assert!(!EnvAllowList::default().allows("PATH"));
        assert!(EnvAllowList::new(["*"]).allows("ANYTHING"));
        // Prefix and suffix may not overlap: `A*A` does not match `A`.
        assert!(!EnvAllowList::new(["A*A"]).allows("A"));
    }
}
