//! The admin and user commands against a running plane, one module per noun. Each connects to the
//! services it needs, makes its requests and prints the answer for a person or as JSON; none keeps
//! state between invocations.

pub mod approvals;
pub mod audit;
pub mod mcp;
pub mod mcp_serve;
pub mod profile;
pub mod run;
pub mod token;
pub mod tools;

use crate::error::CliError;

/// Reads a file the user named (`-` is stdin), with a size limit so a wrong path cannot exhaust
/// memory.
pub fn read_input(path: &std::path::Path, what: &str, limit: u64) -> Result<String, CliError> {
    use std::io::Read as _;
    let mut text = String::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().take(limit + 1).read_to_string(&mut text)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(limit + 1).read_to_string(&mut text))
    };
    read.map_err(|e| {
        CliError::InvalidInput(format!("cannot read the {what} {}: {e}", path.display()))
    })?;
    if text.len() as u64 > limit {
        return Err(CliError::InvalidInput(format!(
            "the {what} {} is larger than {limit} bytes",
            path.display()
        )));
    }
    Ok(text)
}
