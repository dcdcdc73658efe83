//! `toolplane run start|watch|get|cancel|ls|cat` and `toolplane events`: runtime-driven runs started
//! from the command line (a model endpoint from flags or `OPENAI_*`, or a script file), followed
//! through `WatchRun` as a timeline, and inspected afterwards. A followed run that ends other than
//! completed is a non-zero exit with the run's own failure code on one line.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;
use toolplane_proto::v1::workspace_service_client::WorkspaceServiceClient;

use crate::cli::{EventsArgs, Provider, RunCommand, RunStartArgs};
use crate::client::{Conn, Endpoints, MAX_MESSAGE_BYTES};
use crate::commands::read_input;
use crate::convert::{
    driver_name, event_json, mode_name, run_is_terminal, run_json, run_status_name,
};
use crate::error::CliError;
use crate::output::{Out, line, table};
use crate::timeline::Timeline;

type Runtime = RuntimeServiceClient<crate::client::AuthChannel>;

/// Largest script file read (the runtime accepts requests up to 16 MiB).
const MAX_SCRIPT_BYTES: u64 = 15 * 1024 * 1024;
/// How often a watch that ended before its run did is resumed.
const MAX_RESUMES: usize = 20;

pub fn runtime_client(conn: &Conn) -> Runtime {
    RuntimeServiceClient::new(conn.channel.clone()).max_decoding_message_size(MAX_MESSAGE_BYTES)
}

pub async fn run(command: RunCommand, eps: &Endpoints, out: Out) -> Result<u8, CliError> {
    // Check a run spec before connecting: a bad script file is the user's to fix.
    let spec = match &command {
        RunCommand::Start(args) => Some(run_spec(args, eps)?),
        _ => None,
    };
    if let RunCommand::Cat { run_id, path } = &command {
        return cat(eps, run_id, path, out).await;
    }
    let conn = eps.connect("runtime", &eps.runtime).await?;
    let mut rt = runtime_client(&conn);
    match command {
        RunCommand::Start(args) => {
            let Some(spec) = spec else { return Ok(0) };
            let model = describe_model(spec.model.as_ref());
            let run = rt
                .start_run(pb::StartRunRequest {
                    spec: Some(spec),
                    request_id: String::new(),
                })
                .await
                .map_err(|s| conn.err(s))?
                .into_inner()
                .run
                .unwrap_or_default();
            if args.detach {
                if out.json {
                    out.json(&run_json(&run))?;
                } else {
                    line(&run.run_id)?;
                }
                return Ok(0);
            }
            if !out.json {
                line(&format!(
                    "run {} started: profile {}, {model}",
                    run.run_id, run.profile_id
                ))?;
            }
            let mut timeline = Timeline::new(false, false);
            let run = follow(&conn, &mut rt, &run.run_id, 1, &mut timeline, out).await?;
            finish(&run, out)
        }
        RunCommand::Watch(args) => {
            let mut timeline = Timeline::new(args.all, false);
            let run = follow(
                &conn,
                &mut rt,
                &args.run_id,
                args.from_seq,
                &mut timeline,
                out,
            )
            .await?;
            finish(&run, out)
        }
        RunCommand::Get { run_id } => {
            let run = get(&conn, &mut rt, &run_id).await?;
            if out.json {
                out.json(&run_json(&run))?;
            } else {
                line(&describe_run(&run))?;
            }
            Ok(0)
        }
        RunCommand::Cancel { run_id, reason } => {
            let run = rt
                .cancel_run(pb::CancelRunRequest {
                    run_id: run_id.clone(),
                    reason,
                })
                .await
                .map_err(|s| conn.err(s))?
                .into_inner()
                .run
                .unwrap_or_default();
            if out.json {
                out.json(&run_json(&run))?;
            } else {
                line(&format!("run {run_id}: {}", run_status_name(run.status)))?;
            }
            Ok(0)
        }
        // Answered above, from the workspace service alone.
        RunCommand::Cat { .. } => Ok(0),
        RunCommand::Ls { limit } => {
            let runs = rt
                .list_runs(pb::ListRunsRequest {
                    cell_id: eps.cell.clone(),
                    page_size: limit.clamp(1, 1000),
                    ..Default::default()
                })
                .await
                .map_err(|s| conn.err(s))?
                .into_inner()
                .runs;
            if out.json {
                out.json(&Value::Array(runs.iter().map(run_json).collect()))?;
            } else {
                let now = now_ms();
                let rows: Vec<Vec<String>> = runs
                    .iter()
                    .map(|r| {
                        vec![
                            r.run_id.clone(),
                            run_status_name(r.status).to_owned(),
                            r.profile_id.clone(),
                            driver_name(r.driver).to_owned(),
                            r.chat
                                .as_ref()
                                .map(|c| c.chat_id.clone())
                                .unwrap_or_default(),
                            ago(now, r.created_at_unix_ms),
                        ]
                    })
                    .collect();
                line(&table(
                    &["RUN", "STATUS", "PROFILE", "DRIVER", "CHAT", "CREATED"],
                    &rows,
                ))?;
            }
            Ok(0)
        }
    }
}

/// `toolplane events <run>`: the stored journal as a timeline with audit paths (or followed).
pub async fn events(args: EventsArgs, eps: &Endpoints, out: Out) -> Result<(), CliError> {
    let conn = eps.connect("runtime", &eps.runtime).await?;
    let mut rt = runtime_client(&conn);
    let mut timeline = Timeline::new(args.all, true);
    if args.follow {
        follow(
            &conn,
            &mut rt,
            &args.run_id,
            args.from_seq,
            &mut timeline,
            out,
        )
        .await?;
        return Ok(());
    }
    let mut stream = rt
        .watch_run(pb::WatchRunRequest {
            run_id: args.run_id.clone(),
            from_seq: args.from_seq,
            history_only: true,
        })
        .await
        .map_err(|s| conn.err(s))?
        .into_inner();
    let mut all = Vec::new();
    while let Some(item) = stream.message().await.map_err(|s| conn.err(s))? {
        let Some(event) = item.event else { continue };
        if out.json {
            all.push(event_json(&event));
        } else {
            for l in timeline.render(&event) {
                line(&l)?;
            }
        }
    }
    if out.json {
        out.json(&Value::Array(all))?;
    }
    Ok(())
}

async fn get(conn: &Conn, rt: &mut Runtime, run_id: &str) -> Result<pb::Run, CliError> {
    Ok(rt
        .get_run(pb::GetRunRequest {
            run_id: run_id.to_owned(),
        })
        .await
        .map_err(|s| conn.err(s))?
        .into_inner()
        .run
        .unwrap_or_default())
}

/// Streams a run's journal from `from_seq`, printing each event as it arrives, until the run ends;
/// returns the run as it ended. A stream that ends early (the runtime restarted a connection) is
/// resumed after the last event seen.
pub async fn follow(
    conn: &Conn,
    rt: &mut Runtime,
    run_id: &str,
    from_seq: u64,
    timeline: &mut Timeline,
    out: Out,
) -> Result<pb::Run, CliError> {
    let mut next = from_seq.max(1);
    for _ in 0..MAX_RESUMES {
        let mut stream = rt
            .watch_run(pb::WatchRunRequest {
                run_id: run_id.to_owned(),
                from_seq: next,
                history_only: false,
            })
            .await
            .map_err(|s| conn.err(s))?
            .into_inner();
        while let Some(item) = stream.message().await.map_err(|s| conn.err(s))? {
            let Some(event) = item.event else { continue };
            next = next.max(event.seq + 1);
            if out.json {
                out.json_line(&event_json(&event))?;
            } else {
                for l in timeline.render(&event) {
                    line(&l)?;
                }
            }
        }
        let run = get(conn, rt, run_id).await?;
        if run_is_terminal(run.status) {
            return Ok(run);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(CliError::Rpc {
        code: tonic::Code::Unavailable,
        message: format!(
            "cli.rpc_failed: the runtime kept ending the watch of run {run_id} before the run ended"
        ),
    })
}

/// The exit status of a followed run: 0 when it completed; otherwise its failure as the error.
pub fn finish(run: &pb::Run, out: Out) -> Result<u8, CliError> {
    if out.json {
        out.json_line(&json!({"run": run_json(run)}))?;
    }
    if run.status == pb::RunStatus::Completed as i32 {
        if !out.json {
            line(&format!(
                "run {} completed; its timeline with audit paths: toolplane events {}",
                run.run_id, run.run_id
            ))?;
        }
        return Ok(0);
    }
    Err(run_failed(run))
}

pub fn run_failed(run: &pb::Run) -> CliError {
    let failure = match &run.failure {
        Some(f) => {
            let message = f
                .message
                .strip_prefix(f.code.as_str())
                .map(|m| m.trim_start_matches([':', ' ']))
                .unwrap_or(&f.message);
            format!(": {}: {message}", f.code)
        }
        None => String::new(),
    };
    CliError::RunFailed {
        run_id: run.run_id.clone(),
        status: run_status_name(run.status).to_owned(),
        failure,
    }
}

fn provider_env_key(provider: Provider) -> &'static str {
    match provider {
        Provider::Openai | Provider::OpenaiResponses => "OPENAI_API_KEY",
        Provider::Anthropic => "ANTHROPIC_API_KEY",
        Provider::Gemini => "GEMINI_API_KEY",
    }
}

/// The script file's text, checked to be a script the runtime will accept.
fn read_script(path: &std::path::Path) -> Result<String, CliError> {
    let text = read_input(path, "script file", MAX_SCRIPT_BYTES)?;
    let name = path.display();
    let doc: Value = serde_json::from_str(&text).map_err(|e| {
        CliError::InvalidInput(format!("the script file {name} is not valid JSON: {e}"))
    })?;
    let turns = match &doc {
        Value::Array(t) => t,
        Value::Object(o) => match o.get("turns") {
            Some(Value::Array(t)) => t,
            _ => {
                return Err(CliError::InvalidInput(format!(
                    "the script file {name} needs a `turns` array of assistant messages"
                )));
            }
        },
        _ => {
            return Err(CliError::InvalidInput(format!(
                "the script file {name} must be {{\"turns\": [...]}} or an array of turns"
            )));
        }
    };
    if turns.is_empty() {
        return Err(CliError::InvalidInput(format!(
            "the script file {name} has no turns"
        )));
    }
    Ok(text)
}

/// The model endpoint of a run: a script, the flags, `OPENAI_*` from the environment, or none
/// (the profile's own endpoint).
fn model_endpoint(args: &RunStartArgs) -> Result<Option<pb::ModelEndpoint>, CliError> {
    if let Some(path) = &args.script {
        return Ok(Some(pb::ModelEndpoint {
            kind: pb::ModelEndpointKind::Scripted as i32,
            script_json: Some(read_script(path)?),
            ..Default::default()
        }));
    }
    let key_var = args.api_key_env.clone().or_else(|| {
        let var = provider_env_key(args.provider);
        std::env::var_os(var).map(|_| var.to_owned())
    });
    let base_url = match (&args.base_url, args.provider) {
        // Neither says which model to call: the profile's own endpoint is used.
        (None, _) if args.model.is_none() => return Ok(None),
        (Some(url), _) => url.clone(),
        (None, Provider::Openai | Provider::OpenaiResponses) => {
            "https://api.openai.com/v1".to_owned()
        }
        (None, Provider::Anthropic) => "https://api.anthropic.com/v1".to_owned(),
        (None, Provider::Gemini) => "https://generativelanguage.googleapis.com/v1beta".to_owned(),
    };
    let Some(model) = args.model.clone().filter(|m| !m.trim().is_empty()) else {
        return Err(CliError::InvalidInput(format!(
            "--model (or OPENAI_MODEL) is required to call {base_url}"
        )));
    };
    let (kind, format) = match args.provider {
        Provider::Openai => (
            pb::ModelEndpointKind::OpenaiCompatible,
            pb::ProviderFormat::Unspecified,
        ),
        Provider::OpenaiResponses => (
            pb::ModelEndpointKind::OpenaiCompatible,
            pb::ProviderFormat::OpenaiResponses,
        ),
        Provider::Anthropic => (
            pb::ModelEndpointKind::Anthropic,
            pb::ProviderFormat::Unspecified,
        ),
        Provider::Gemini => (
            pb::ModelEndpointKind::Gemini,
            pb::ProviderFormat::Unspecified,
        ),
    };
    Ok(Some(pb::ModelEndpoint {
        kind: kind as i32,
        base_url,
        model,
        api_key_env: key_var,
        provider_format: format as i32,
        ..Default::default()
    }))
}

fn run_spec(args: &RunStartArgs, eps: &Endpoints) -> Result<pb::RunSpec, CliError> {
    let model = model_endpoint(args)?;
    let message = match (&args.message, &model) {
        (Some(m), _) => m.clone(),
        (None, Some(m)) if m.kind == pb::ModelEndpointKind::Scripted as i32 => "Run the script.".to_owned(),
        (None, _) => return Err(CliError::InvalidInput("give the task as the message: toolplane run start \"Write a haiku into output/main.md\"".into())),
    };
    Ok(pb::RunSpec {
        cell_id: eps.cell.clone(),
        run_id: args.run_id.clone().unwrap_or_default(),
        profile_id: args.profile.clone(),
        model,
        max_rounds: args.max_rounds.unwrap_or(0),
        initial_user_message: message,
        mode: if args.background {
            pb::RunMode::Background
        } else {
            pb::RunMode::Foreground
        } as i32,
        chat: Some(pb::ChatBinding {
            chat_id: args.chat.clone(),
            message_id: None,
        }),
        ..Default::default()
    })
}

fn describe_model(m: Option<&pb::ModelEndpoint>) -> String {
    match m {
        None => "the profile's model".to_owned(),
        Some(m) if m.kind == pb::ModelEndpointKind::Scripted as i32 => "scripted model".to_owned(),
        Some(m) => format!("model {} at {}", m.model, m.base_url),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn ago(now: i64, then: i64) -> String {
    let s = (now - then).max(0) / 1000;
    match s {
        0..=59 => format!("{s}s ago"),
        60..=3599 => format!("{}m ago", s / 60),
        3600..=86_399 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

fn describe_run(r: &pb::Run) -> String {
    let mut lines = vec![format!("run {}  {}", r.run_id, run_status_name(r.status))];
    let chat = r
        .chat
        .as_ref()
        .map(|c| c.chat_id.clone())
        .unwrap_or_default();
    lines.push(format!("  profile     {}", r.profile_id));
    lines.push(format!(
        "  driver      {} · {} · chat {chat}",
        driver_name(r.driver),
        mode_name(r.mode)
    ));
    lines.push(format!(
        "  created     {}",
        ago(now_ms(), r.created_at_unix_ms)
    ));
    if run_is_terminal(r.status) {
        lines.push(format!(
            "  took        {:.3} s",
            (r.updated_at_unix_ms - r.created_at_unix_ms).max(0) as f64 / 1000.0
        ));
    }
    lines.push(format!(
        "  committed   {}",
        if r.committed { "yes" } else { "no" }
    ));
    lines.push(format!("  timeline    toolplane events {}", r.run_id));
    if !r.root_invocation_id.is_empty() {
        lines.push(format!("  invocation  {}", r.root_invocation_id));
    }
    if let Some(f) = &r.failure {
        lines.push(format!(
            "  failure     {}: {}{}",
            f.code,
            f.message,
            if f.retryable { " (retryable)" } else { "" }
        ));
    }
    lines.join("\n")
}

/// `toolplane run cat`: one file or audit object of a run, from the workspace service. Text as it
/// is (with a final newline if it has none); other bytes as they are; `--json` gives the text with
/// its path and size, and refuses bytes that are not UTF-8.
async fn cat(eps: &Endpoints, run_id: &str, path: &str, out: Out) -> Result<u8, CliError> {
    let conn = eps.connect("workspace service", &eps.workspace).await?;
    let object = WorkspaceServiceClient::new(conn.channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .get_object(pb::GetObjectRequest {
            run_id: run_id.to_owned(),
            path: path.to_owned(),
            cell_id: eps.cell.clone(),
        })
        .await
        .map_err(|s| conn.err(s))?
        .into_inner();
    let text = std::str::from_utf8(&object.content).ok();
    if out.json {
        let Some(text) = text else {
            return Err(CliError::InvalidInput(format!(
                "{path} holds {} bytes that are not UTF-8 text; read it without --json",
                object.content.len()
            )));
        };
        return out
            .json(&json!({
                "runId": run_id,
                "path": path,
                "size": object.content.len(),
                "contentType": object.content_type,
                "sha256": object.sha256,
                "content": text,
            }))
            .map(|()| 0);
    }
    let mut stdout = std::io::stdout().lock();
    let written = std::io::Write::write_all(&mut stdout, &object.content).and_then(|()| {
        if text.is_some() && !object.content.is_empty() && !object.content.ends_with(b"\n") {
            std::io::Write::write_all(&mut stdout, b"\n")?;
        }
        std::io::Write::flush(&mut stdout)
    });
    match written {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(CliError::Io(format!("writing to stdout: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn start_args(extra: &[&str]) -> RunStartArgs {
        let mut argv = vec!["toolplane", "run", "start"];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Run(RunCommand::Start(a)) => a,
            _ => panic!("not run start"),
        }
    }

    #[test]
    fn a_malformed_script_is_refused_before_anything_is_sent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        std::fs::write(&path, "{\"turns\": [").unwrap();
        let err = model_endpoint(&start_args(&["--script", path.to_str().unwrap()])).unwrap_err();
        assert!(
            err.one_line()
                .starts_with("cli.invalid_input: the script file"),
            "{}",
            err.one_line()
        );
        std::fs::write(&path, "{\"steps\": []}").unwrap();
        let err = model_endpoint(&start_args(&["--script", path.to_str().unwrap()])).unwrap_err();
        assert!(err.one_line().contains("`turns`"), "{}", err.one_line());
    }

    #[test]
    fn flags_make_an_openai_compatible_endpoint_with_the_key_named_not_sent() {
        let m = model_endpoint(&start_args(&[
            "x",
            "--base-url",
            "http://127.0.0.1:8000/v1",
            "--model",
            "qwen",
            "--api-key-env",
            "MY_KEY",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(m.kind, pb::ModelEndpointKind::OpenaiCompatible as i32);
        assert_eq!(m.base_url, "http://127.0.0.1:8000/v1");
        assert_eq!(m.api_key_env.as_deref(), Some("MY_KEY"));
        let err = model_endpoint(&start_args(&[
            "x",
            "--base-url",
            "http://127.0.0.1:8000/v1",
        ]))
        .unwrap_err();
        assert!(err.one_line().contains("--model"), "{}", err.one_line());
    }

    #[test]
    fn a_failed_run_names_its_code_once() {
        let run = pb::Run {
            run_id: "r1".into(),
            status: pb::RunStatus::Failed as i32,
            failure: Some(pb::ErrorInfo {
                code: "model.call_failed".into(),
                message: "model.call_failed: the script ended after 2 turns".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            run_failed(&run).one_line(),
            "cli.run_failed: run r1 ended failed: model.call_failed: the script ended after 2 turns"
        );
    }
}
