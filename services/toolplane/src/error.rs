//! The CLI's one error type. Every failure a user sees is one line that starts with a stable code
//! (`cli.unreachable: …`, or the code a service put at the start of its status message) and maps
//! to one exit status. It never decides anything about a run: a run that ended badly is reported
//! with the runtime's own failure code.

use crate::plane::PlaneError;

/// Exit status of input the CLI or a service refused: malformed, naming nothing that exists, or
/// taken (clap uses it for usage errors too).
pub const EXIT_INVALID_INPUT: u8 = 2;
/// Exit status of everything else that went wrong (a service failed, a run did not complete).
pub const EXIT_FAILURE: u8 = 1;

/// The CLI's codes, with their class and meaning; mirrored by the "CLI" section of
/// `docs/errors.md`.
pub const CODES: &[(&str, &str, &str)] = &[
    (
        "cli.unreachable",
        "system",
        "a service could not be reached at its address (nothing listens there, or it did not answer in time)",
    ),
    (
        "cli.invalid_address",
        "invalid_input",
        "a `--runtime`, `--catalog`, `--workspace` or `--mcp-proxy` address is not a valid URL",
    ),
    (
        "cli.invalid_input",
        "invalid_input",
        "a file or argument given to the CLI is malformed: a profile or script that is not JSON, a missing command, a bad flag combination",
    ),
    (
        "cli.not_found",
        "invalid_input",
        "a named MCP server (by display name or id) does not exist in the cell",
    ),
    (
        "cli.rpc_failed",
        "system",
        "a service answered with a status whose message carries no code of its own",
    ),
    (
        "cli.run_failed",
        "system",
        "a run the CLI followed ended other than completed; the message carries the run's own failure code",
    ),
    (
        "cli.demo_failed",
        "system",
        "`toolplane up --demo` could not set up or start its demo run",
    ),
    (
        "cli.io",
        "system",
        "reading a file or writing the output failed",
    ),
    (
        "plane.bind_failed",
        "system",
        "`toolplane up` could not bind a port (in use, or an address that cannot be bound); nothing starts",
    ),
    (
        "plane.start_failed",
        "system",
        "`toolplane up` could not start a service (its storage could not be opened, or it failed while starting); the message names the service",
    ),
];

/// What went wrong, as the user sees it.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(
        "cli.unreachable: cannot reach the {service} at {url}: {reason} (is `toolplane up` running there?)"
    )]
    Unreachable {
        service: &'static str,
        url: String,
        reason: String,
    },
    #[error("cli.invalid_address: {0}")]
    InvalidAddress(String),
    #[error("cli.invalid_input: {0}")]
    InvalidInput(String),
    #[error("cli.not_found: {0}")]
    NotFound(String),
    /// A service refused or failed the request. `message` already starts with the service's code.
    #[error("{message}")]
    Rpc { code: tonic::Code, message: String },
    #[error("cli.run_failed: run {run_id} ended {status}{failure}")]
    RunFailed {
        run_id: String,
        status: String,
        failure: String,
    },
    #[error("cli.demo_failed: {0}")]
    Demo(String),
    #[error("cli.io: {0}")]
    Io(String),
    /// Authentication refused the start or the credential; the message carries its `auth.*`
    /// code.
    #[error("{0}")]
    Auth(String),
    #[error(transparent)]
    Plane(#[from] PlaneError),
}

impl CliError {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::InvalidAddress(_)
            | CliError::InvalidInput(_)
            | CliError::NotFound(_)
            | CliError::Auth(_) => EXIT_INVALID_INPUT,
            // The request named something malformed, missing or taken: the user changes the input.
            CliError::Rpc {
                code:
                    tonic::Code::InvalidArgument | tonic::Code::NotFound | tonic::Code::AlreadyExists,
                ..
            } => EXIT_INVALID_INPUT,
            _ => EXIT_FAILURE,
        }
    }

    /// The message on one line: service messages may quote multi-line text (a server's stderr).
    pub fn one_line(&self) -> String {
        one_line(&self.to_string())
    }
}

/// Collapses every run of whitespace (newlines included) into one space.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `message` starts with a `namespace.snake_case:` code.
pub fn has_code(message: &str) -> bool {
    let Some((code, _)) = message.split_once(':') else {
        return false;
    };
    let Some((ns, name)) = code.split_once('.') else {
        return false;
    };
    let word = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
    };
    word(ns) && name.split('.').all(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coded_messages_are_recognised() {
        assert!(has_code("profile.invalid: unknown field `tols`"));
        assert!(has_code("mcp-proxy.x: y"));
        assert!(!has_code("transport error"));
        assert!(!has_code("Connection refused: x"));
        assert!(!has_code("http://127.0.0.1:1: nope"));
    }

    #[test]
    fn messages_fit_on_one_line() {
        assert_eq!(one_line("a\n  b\tc\n"), "a b c");
    }

    #[test]
    fn every_code_is_documented() {
        let doc = include_str!("../../../docs/errors.md");
        for (code, class, _) in CODES {
            assert!(
                doc.contains(&format!("| `{code}` | {class} |")),
                "{code} is missing from docs/errors.md"
            );
        }
    }
}
