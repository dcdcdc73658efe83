//! How the CLI writes its answers: aligned tables and short lines for a person on stdout, JSON
//! for scripts (`--json`), progress notes on stderr only when stderr is a terminal. It never
//! writes an error: `main` prints the one error line.

use std::io::{IsTerminal, Write};

use serde_json::Value;

use crate::error::CliError;

/// Where and how to write answers.
#[derive(Debug, Clone, Copy)]
pub struct Out {
    /// Print JSON instead of text.
    pub json: bool,
}

impl Out {
    /// Prints one JSON document, pretty.
    pub fn json(&self, value: &Value) -> Result<(), CliError> {
        let text = serde_json::to_string_pretty(value)
            .map_err(|e| CliError::Io(format!("encoding json: {e}")))?;
        line(&text)
    }

    /// Prints one JSON document on one line (for streams: one event per line).
    pub fn json_line(&self, value: &Value) -> Result<(), CliError> {
        line(&value.to_string())
    }
}

/// Writes one line to stdout. A closed pipe (`toolplane events r | head`) is not an error worth a
/// panic: it ends the output quietly.
pub fn line(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::Io(format!("writing to stdout: {e}"))),
    }
}

/// A progress note for a person watching: on stderr, and only when it is a terminal, so scripts
/// and logs stay clean.
pub fn progress(text: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("{text}");
    }
}

/// A warning worth reading whatever stderr is.
pub fn warn(text: &str) {
    eprintln!("warning: {text}");
}

/// Columns aligned to the widest cell; the last column is not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let columns = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let render = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(cell);
                s.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        s.trim_end().to_owned()
    };
    let mut lines = vec![render(headers.to_vec())];
    for row in rows {
        lines.push(render(row.iter().map(String::as_str).collect()));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["ID", "USABLE"],
            &[
                vec!["builtin:dice.roll".into(), "yes".into()],
                vec!["x".into(), "no".into()],
            ],
        );
        assert_eq!(
            t,
            "ID                 USABLE\nbuiltin:dice.roll  yes\nx                  no"
        );
    }
}
