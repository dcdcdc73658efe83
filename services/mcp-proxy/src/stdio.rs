//! The stdio transport: an MCP server as a child process, one JSON-RPC message per
//! line on its stdin and stdout, its stderr captured into the proxy's logs.
//!
//! The proxy owns this transport rather than using rmcp's child-process transport because it
//! must tell failures apart: a line that is not JSON means the stream can no longer be trusted,
//! so the connection is ended and the in-flight calls learn *why* ([`Violation`]); a well-formed
//! response of the wrong shape fails only its own request at once instead of leaving it to its
//! deadline; a line over the size cap is never buffered. Every child is reaped: one task owns the
//! process, waits for it and kills it when the transport is closed or dropped. This module never
//! decides what a failure means for a call; it only reports it.

use std::collections::{BTreeMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ErrorCode, ErrorData, RequestId, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::children::{self, ChildLimits};

/// Environment variables a stdio server inherits from the proxy besides the ones its registration
/// names: enough to find programs and behave like a normal process, no credentials.
pub const BASE_ENV: &[&str] = &["PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ"];
/// Prefix of the messages of error responses the transport makes up for malformed responses; the
/// executor recognises it.
pub const MALFORMED_MARKER: &str = "toolplane: malformed response: ";
/// How long a closed server may take to exit on its own before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Lines of stderr kept for error messages.
const STDERR_TAIL: usize = 8;
/// Longest stderr line kept, in bytes; the rest of a longer line is read and dropped, never
/// buffered.
pub const MAX_STDERR_LINE: usize = 8 * 1024;
/// Starting size of an outgoing message's buffer: most requests fit without growing it.
const SEND_BUFFER_HINT: usize = 512;
/// Read buffer on the server's stdout: a typical response is read in one system call.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Why a connection stopped trusting its server's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// The server wrote a line that is not JSON.
    Malformed(String),
    /// The server wrote a line over the transport's cap.
    Oversized(usize),
}

/// Shared, settable-once record of a violation.
pub type ViolationCell = Arc<Mutex<Option<Violation>>>;

pub fn read_violation(cell: &ViolationCell) -> Option<Violation> {
    cell.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

fn set_violation(cell: &ViolationCell, v: Violation) {
    let mut slot = cell.lock().unwrap_or_else(PoisonError::into_inner);
    if slot.is_none() {
        *slot = Some(v);
    }
}

/// The last lines a server wrote to stderr.
pub type StderrTail = Arc<Mutex<VecDeque<String>>>;

/// What a stdio server needs to start.
#[derive(Debug, Clone)]
pub struct StdioSpec {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub inherit_env: Vec<String>,
    pub cwd: Option<String>,
    /// Longest line accepted from the server.
    pub max_line_bytes: usize,
    /// Resource limits of the process.
    pub rlimits: ChildLimits,
    /// For logs.
    pub server_id: String,
}

/// A started child process with its transport.
#[derive(Debug)]
pub struct StdioTransport {
    reader: LineReader,
    writer: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    kill: Option<oneshot::Sender<()>>,
    exit: watch::Receiver<Option<String>>,
    violation: ViolationCell,
    dead: CancellationToken,
    server_id: String,
    /// Sees every line before it is parsed, for the listing fields rmcp drops.
    raw_listing: Option<crate::raw_listing::RawListing>,
}

/// Handles to watch a started child from outside its transport.
#[derive(Debug, Clone)]
pub struct ChildWatch {
    pub pid: Option<u32>,
    /// `Some(description)` once the process has exited and been reaped.
    pub exit: watch::Receiver<Option<String>>,
    pub stderr: StderrTail,
}

impl StdioTransport {
    /// Starts the process. `dead` is cancelled when the transport ends (EOF, violation, close).
    pub fn spawn(
        spec: &StdioSpec,
        violation: ViolationCell,
        dead: CancellationToken,
    ) -> std::io::Result<(StdioTransport, ChildWatch)> {
        let mut cmd = match spec.rlimits.launcher() {
            Some(line) => {
                let mut cmd = Command::new("/bin/sh");
                cmd.args(["-c", &line, "sh", &spec.command]);
                cmd
            }
            None => Command::new(&spec.command),
        };
        cmd.args(&spec.args)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group: a Ctrl-C at the proxy's terminal does not reach the servers
            // before the proxy has closed them in order.
            .process_group(0);
        for name in BASE_ENV
            .iter()
            .copied()
            .chain(spec.inherit_env.iter().map(String::as_str))
        {
            if let Some(value) = std::env::var_os(name) {
                cmd.env(name, value);
            }
        }
        cmd.envs(&spec.env);
        if let Some(cwd) = &spec.cwd
            && !cwd.is_empty()
        {
            cmd.current_dir(cwd);
        }
        let mut child = cmd.spawn()?;
        let pid = child.id();
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("child stdin missing"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("child stdout missing"))?;
        let stderr = child.stderr.take();

        // The whole group goes when the proxy dies, even without a chance to close it.
        if let Some(pid) = pid {
            children::guard_group(pid);
        }

        let tail: StderrTail = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(stderr) = stderr {
            tokio::spawn(log_stderr(
                BufReader::new(stderr),
                Arc::clone(&tail),
                spec.server_id.clone(),
            ));
        }

        let (kill_tx, kill_rx) = oneshot::channel::<()>();
        let (exit_tx, exit_rx) = watch::channel(None);
        let server_id = spec.server_id.clone();
        let dead_on_exit = dead.clone();
        tokio::spawn(async move {
            // Either the process exits by itself or the transport asks (or is dropped, which
            // resolves `kill_rx` too); in both cases it is waited for, so no zombie stays.
            let status = tokio::select! {
                status = child.wait() => status,
                _ = kill_rx => {
                    // The group before the leader is reaped: its id cannot be reused meanwhile.
                    match pid {
                        Some(pid) => children::kill_group(pid),
                        None => { let _ = child.start_kill(); }
                    }
                    child.wait().await
                }
            };
            // Whatever the server started dies with it (a crash, an exit, a kill alike).
            if let Some(pid) = pid {
                children::kill_group(pid);
                children::release_group(pid);
            }
            let described = match status {
                Ok(s) => format!("exited with {s}"),
                Err(e) => format!("could not be waited for: {e}"),
            };
            tracing::info!(server_id = %server_id, pid, status = %described, "mcp server process ended");
            let _ = exit_tx.send(Some(described));
            dead_on_exit.cancel();
        });

        let transport = StdioTransport {
            reader: LineReader::new(stdout, spec.max_line_bytes),
            writer: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
            kill: Some(kill_tx),
            exit: exit_rx.clone(),
            violation,
            dead,
            server_id: spec.server_id.clone(),
            raw_listing: None,
        };
        Ok((
            transport,
            ChildWatch {
                pid,
                exit: exit_rx,
                stderr: tail,
            },
        ))
    }
}

impl StdioTransport {
    /// Lets `raw` see every line the server writes before it is parsed.
    pub fn with_raw_listing(mut self, raw: crate::raw_listing::RawListing) -> StdioTransport {
        self.raw_listing = Some(raw);
        self
    }
}

/// Logs a server's stderr line by line and keeps the last lines in `tail`.
async fn log_stderr(mut read: impl AsyncBufRead + Unpin, tail: StderrTail, server_id: String) {
    let mut buf = Vec::new();
    while let Ok(Some(cut)) = read_capped_line(&mut read, &mut buf, MAX_STDERR_LINE).await {
        let mut line = String::from_utf8_lossy(&buf).trim_end().to_owned();
        if line.is_empty() {
            continue;
        }
        if cut {
            line.push_str(" …");
        }
        tracing::info!(server_id = %server_id, line = %line, "mcp server stderr");
        let mut t = tail.lock().unwrap_or_else(PoisonError::into_inner);
        if t.len() == STDERR_TAIL {
            t.pop_front();
        }
        t.push_back(line);
    }
}

/// Reads one line into `buf` (cleared first), keeping at most `cap` bytes of it; the rest of a
/// longer line is consumed without being stored. `Some(true)` when the line was cut, `None` at
/// the end of the stream.
async fn read_capped_line(
    read: &mut (impl AsyncBufRead + Unpin),
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut cut = false;
    let mut any = false;
    loop {
        let available = read.fill_buf().await?;
        if available.is_empty() {
            return Ok(any.then_some(cut));
        }
        any = true;
        let newline = available.iter().position(|b| *b == b'\n');
        let take = newline.map_or(available.len(), |i| i + 1);
        let line = &available[..take];
        let content = line.strip_suffix(b"\n").unwrap_or(line);
        let room = cap.saturating_sub(buf.len());
        cut |= content.len() > room;
        buf.extend_from_slice(&content[..content.len().min(room)]);
        read.consume(take);
        if newline.is_some() {
            return Ok(Some(cut));
        }
    }
}

enum LineRead {
    Line,
    Oversized(usize),
    Eof,
    Io(std::io::Error),
}

/// Reads `\n`-terminated lines without buffering more than the cap. Cancel-safe: a partial line
/// stays in `buf` when the future is dropped, and the next call resumes it (rmcp polls
/// `receive` inside `select!`).
#[derive(Debug)]
struct LineReader {
    read: BufReader<ChildStdout>,
    buf: Vec<u8>,
    max: usize,
    discarding: Option<usize>,
}

impl LineReader {
    fn new(stdout: ChildStdout, max: usize) -> LineReader {
        LineReader {
            read: BufReader::with_capacity(READ_BUFFER_BYTES, stdout),
            buf: Vec::new(),
            max,
            discarding: None,
        }
    }

    async fn next_line(&mut self) -> LineRead {
        loop {
            let available = match self.read.fill_buf().await {
                Ok(b) => b,
                Err(e) => return LineRead::Io(e),
            };
            if available.is_empty() {
                return LineRead::Eof;
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            match self.discarding.as_mut() {
                Some(seen) => *seen += take,
                None if self.buf.len() + take > self.max.saturating_add(1) => {
                    self.discarding = Some(self.buf.len() + take);
                    self.buf = Vec::new();
                }
                None => self.buf.extend_from_slice(&available[..take]),
            }
            self.read.consume(take);
            if newline.is_some() {
                if let Some(seen) = self.discarding.take() {
                    return LineRead::Oversized(seen);
                }
                return LineRead::Line;
            }
        }
    }
}

/// Parses one line the server wrote. `Err` means the stream is not JSON-RPC and must be ended.
fn parse_line(line: &[u8]) -> Result<Option<ServerJsonRpcMessage>, String> {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    match serde_json::from_slice::<ServerJsonRpcMessage>(line) {
        Ok(msg) => Ok(Some(msg)),
        Err(e) => match serde_json::from_slice::<Value>(line) {
            // Valid JSON of the wrong shape. A response (it has an id and a result or error)
            // fails its own request now; anything else (an unknown notification) is skipped.
            Ok(value) => {
                let id = value
                    .get("id")
                    .and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok());
                let is_response = value.get("result").is_some() || value.get("error").is_some();
                match (id, is_response) {
                    (Some(id), true) => Ok(Some(ServerJsonRpcMessage::error(
                        ErrorData::new(
                            ErrorCode::INTERNAL_ERROR,
                            format!("{MALFORMED_MARKER}{e}"),
                            None,
                        ),
                        Some(id),
                    ))),
                    _ => Ok(None),
                }
            }
            Err(_) => Err(format!("the server wrote a line that is not JSON: {e}")),
        },
    }
}

impl Transport<RoleClient> for StdioTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = Arc::clone(&self.writer);
        async move {
            // The message and its newline go out in one write: one syscall per message, and the
            // server never sees a line without its end.
            let mut bytes = Vec::with_capacity(SEND_BUFFER_HINT);
            serde_json::to_writer(&mut bytes, &item).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
            let mut guard = writer.lock().await;
            let Some(stdin) = guard.as_mut() else {
                return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
            };
            stdin.write_all(&bytes).await?;
            stdin.flush().await
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            match self.reader.next_line().await {
                LineRead::Line => {}
                LineRead::Oversized(n) => {
                    tracing::warn!(server_id = %self.server_id, bytes = n, cap = self.reader.max, "mcp server message over the size cap; closing the connection");
                    set_violation(&self.violation, Violation::Oversized(n));
                    self.dead.cancel();
                    return None;
                }
                LineRead::Eof => {
                    self.dead.cancel();
                    return None;
                }
                LineRead::Io(e) => {
                    tracing::warn!(server_id = %self.server_id, error = %e, "reading from mcp server failed");
                    self.dead.cancel();
                    return None;
                }
            }
            let line = std::mem::take(&mut self.reader.buf);
            let trimmed = line.strip_suffix(b"\n").unwrap_or(&line);
            let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
            if trimmed.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if let Some(raw) = &self.raw_listing {
                raw.observe(trimmed);
            }
            match parse_line(trimmed) {
                Ok(Some(msg)) => return Some(msg),
                Ok(None) => continue,
                Err(why) => {
                    tracing::warn!(server_id = %self.server_id, reason = %why, "mcp server broke the protocol; closing the connection");
                    set_violation(&self.violation, Violation::Malformed(why));
                    self.dead.cancel();
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.dead.cancel();
        // Closing stdin is the MCP way to ask a stdio server to stop; it gets a grace period
        // before it is killed.
        drop(self.writer.lock().await.take());
        let mut exit = self.exit.clone();
        let exited = tokio::time::timeout(EXIT_GRACE, exit.wait_for(Option::is_some))
            .await
            .is_ok();
        if !exited && let Some(kill) = self.kill.take() {
            let _ = kill.send(());
            let _ = tokio::time::timeout(EXIT_GRACE, exit.wait_for(Option::is_some)).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn wrong_shaped_responses_fail_their_request_and_garbage_ends_the_stream() {
        let msg =
            parse_line(br#"{"jsonrpc":"2.0","id":7,"result":{"content":"x","isError":"no"}}"#);
        // Either rmcp accepts it as some result (the executor then reports it as malformed), or
        // the transport turns it into an error for request 7.
        match msg.unwrap() {
            Some(ServerJsonRpcMessage::Error(e)) => {
                assert_eq!(e.id, Some(RequestId::Number(7)));
                assert!(e.error.message.starts_with(MALFORMED_MARKER));
            }
            Some(ServerJsonRpcMessage::Response(r)) => assert_eq!(r.id, RequestId::Number(7)),
            other => panic!("unexpected {other:?}"),
        }
        assert!(parse_line(b"this is {not json").is_err());
    }

    #[tokio::test]
    async fn stderr_lines_are_capped_without_buffering_the_rest() {
        let long = "x".repeat(100_000);
        let input = format!("short\n{long}\nexact\nlast without newline");
        let mut read = BufReader::with_capacity(1024, input.as_bytes());
        let mut buf = Vec::new();
        let mut lines = Vec::new();
        while let Some(cut) = read_capped_line(&mut read, &mut buf, 5).await.unwrap() {
            assert!(buf.capacity() < 2048, "the long line was buffered");
            lines.push((String::from_utf8(buf.clone()).unwrap(), cut));
        }
        let expected = [
            ("short", false),
            ("xxxxx", true),
            ("exact", false),
            ("last ", true),
        ];
        let lines: Vec<_> = lines.iter().map(|(l, c)| (l.as_str(), *c)).collect();
        assert_eq!(lines, expected);
    }
}
