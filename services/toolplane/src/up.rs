//! `toolplane up`: the four services in this process ([`crate::plane`]), each on its own port
//! over real gRPC with storage under one data directory, the endpoints printed, optionally the
//! demo run, and a clean stop on Ctrl-C or SIGTERM (a second Ctrl-C stops at once). It composes the
//! plane; it never changes how a service behaves. With `--auth` every service asks who is
//! calling; without it the plane refuses to bind beyond loopback unless told
//! `--insecure-no-auth-on-network` (docs/auth.md).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde_json::json;
use toolplane_serve::Signals;

use crate::cli::UpArgs;
use crate::client::{Credential, Endpoints};
use crate::error::CliError;
use crate::output::{Out, line, warn};
use crate::plane::{Plane, PlaneConfig};

/// Exit status after an interrupt that cut a `--once` demo short (128 + SIGINT).
const EXIT_INTERRUPTED: u8 = 130;

pub async fn up(args: UpArgs, out: Out) -> Result<u8, CliError> {
    let mut cfg = PlaneConfig::new(args.data_dir.clone());
    cfg.host = args.host;
    cfg.runtime_port = args.runtime_port;
    cfg.catalog_port = args.catalog_port;
    cfg.catalog_http_port = args.catalog_http_port;
    cfg.workspace_port = args.workspace_port;
    cfg.mcp_proxy_port = args.mcp_proxy_port;
    cfg.runtime_http_port = args.runtime_http_port;
    cfg.workspace_http_port = args.workspace_http_port;
    cfg.mcp_proxy_http_port = args.mcp_proxy_http_port;
    if let Some(list) = &args.env_allow {
        let extra = toolplane_core::envallow::EnvAllowList::parse(list);
        for allow in [
            &mut cfg.mcp_proxy.processes.env_allow,
            &mut cfg.runtime.env_allow,
        ] {
            *allow = toolplane_core::envallow::EnvAllowList::new(
                allow.entries().iter().chain(extra.entries()).cloned(),
            );
        }
    }
    if let Some(list) = &args.mcp_allowed_hosts {
        cfg.runtime.mcp_allowed_hosts = list
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
            .collect();
    }
    cfg.profiles_dir = match args.profiles_dir {
        Some(dir) if !dir.is_dir() => {
            return Err(CliError::InvalidInput(format!(
                "the profiles directory {} does not exist",
                dir.display()
            )));
        }
        Some(dir) => Some(dir),
        // The shipped profiles are picked up when run from a checkout.
        None => Some(PathBuf::from("profiles")).filter(|d| d.is_dir()),
    };
    let exposed = SocketAddr::new(args.host, args.runtime_port);
    args.auth
        .check_exposure("plane", &[exposed])
        .map_err(CliError::Auth)?;
    if !args.host.is_loopback() && !args.auth.auth {
        warn(&format!(
            "binding {} without --auth: anyone who can reach this address can use the plane, and start processes through stdio MCP registrations",
            args.host
        ));
    }
    let auth = args
        .auth
        .start(&args.data_dir)
        .await
        .map_err(CliError::Auth)?;
    cfg.auth = auth.authenticator.clone();

    let plane = Plane::up(cfg).await?;
    // Listened for before the banner, so a Ctrl-C the moment the plane says it is up stops it
    // cleanly instead of killing the process.
    let mut signals = Signals::listen();
    let eps = Endpoints {
        runtime: plane.runtime_url(),
        catalog: plane.catalog_url(),
        workspace: plane.workspace_url(),
        mcp_proxy: plane.mcp_proxy_url(),
        cell: String::new(),
        // The demo runs in this process, as the plane's own service credential.
        credential: plane
            .service_token()
            .map(|secret| Credential::token(secret.expose()))
            .unwrap_or_default(),
    };
    let admin_token = auth.bootstrapped.as_ref().map(|p| p.display().to_string());
    if out.json {
        out.json_line(&json!({
            "event": "up",
            "runtime": eps.runtime,
            "catalog": eps.catalog,
            "catalogHttp": plane.catalog_http_url(),
            "workspace": eps.workspace,
            "mcpProxy": eps.mcp_proxy,
            "console": format!("{}/console", plane.metrics_urls()[0]),
            "metrics": plane.metrics_urls().iter().map(|u| format!("{u}/metrics")).chain([format!("{}/metrics", plane.catalog_http_url())]).collect::<Vec<_>>(),
            "dataDir": args.data_dir,
            "auth": args.auth.auth,
            "adminTokenWritten": admin_token,
        }))?;
    } else {
        // One write: a reader of the output sees the whole banner at once.
        let [rt_metrics, ws_metrics, mcp_metrics] = plane.metrics_urls();
        let catalog_http = plane.catalog_http_url();
        let mut banner = format!(
            "toolplane is up (data in {})\n  console     {rt_metrics}/console\n  runtime     {}\n  catalog     {}   (HTTP {catalog_http}/tools)\n  workspace   {}\n  mcp-proxy   {}\n  metrics     {rt_metrics}/metrics {ws_metrics}/metrics {mcp_metrics}/metrics {catalog_http}/metrics",
            args.data_dir.display(),
            eps.runtime,
            eps.catalog,
            eps.workspace,
            eps.mcp_proxy,
        );
        if args.auth.auth {
            banner.push_str(
                "\n  auth        on: every request needs `authorization: Bearer <token>`",
            );
        }
        if let Some(path) = &admin_token {
            banner.push_str(&format!(
                "\n  admin token written to {path} (mode 0600; the CLI on this machine uses it when TOOLPLANE_TOKEN is unset)"
            ));
        }
        if !args.demo {
            banner.push_str("\nPress Ctrl-C to stop.");
        }
        line(&banner)?;
    }

    if args.demo {
        let demo = tokio::select! {
            r = crate::demo::run(&eps, out) => Some(r),
            () = signals.recv() => None,
        };
        match demo {
            None => {
                stop(plane, &mut signals, out).await?;
                return Ok(if args.once { EXIT_INTERRUPTED } else { 0 });
            }
            Some(Err(e)) => {
                stop(plane, &mut signals, out).await?;
                return Err(e);
            }
            Some(Ok(run)) if args.once => {
                stop(plane, &mut signals, out).await?;
                return if run.status == toolplane_proto::v1::RunStatus::Completed as i32 {
                    Ok(0)
                } else {
                    Err(crate::commands::run::run_failed(&run))
                };
            }
            Some(Ok(_)) => {
                if !out.json {
                    line(
                        "The plane keeps serving; try `toolplane tools ls` or `toolplane events <run>` in another terminal. Press Ctrl-C to stop.",
                    )?;
                }
            }
        }
    }
    signals.recv().await;
    stop(plane, &mut signals, out).await?;
    Ok(0)
}

/// Stops the services in order; a second Ctrl-C during the stop exits at once.
async fn stop(plane: Plane, signals: &mut Signals, out: Out) -> Result<(), CliError> {
    if !out.json {
        line("stopping…")?;
    }
    tokio::select! {
        () = plane.shutdown() => {}
        () = signals.recv() => {
            eprintln!("toolplane: stopped without waiting for the services to finish");
            std::process::exit(i32::from(EXIT_INTERRUPTED));
        }
    }
    if out.json {
        out.json_line(&json!({"event": "stopped"}))
    } else {
        line("stopped")
    }
}
