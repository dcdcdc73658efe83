//! `toolplane`: the command-line entry point. Parses the command line, starts telemetry (logs on
//! stderr), runs the command on a tokio runtime and turns any failure into one line on stderr and
//! a non-zero exit status. Everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;
use toolplane::cli::{Cli, Command};
use toolplane::error::EXIT_FAILURE;

/// The process's allocator: mimalloc rather than glibc's malloc, which spends fewer cycles on the
/// many small, short-lived buffers of a tool call across threads (BENCHMARKS.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // The async runtime starts on another thread while this one parses the command line: each
    // takes a few hundred microseconds of a start that `toolplane up` wants short, and neither
    // needs the other ("`toolplane up`" in BENCHMARKS.md). A parse error or `--help` exits the
    // process from here, runtime and all.
    let building = std::thread::Builder::new()
        .name("toolplane-start".into())
        .spawn(|| {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
        });
    let cli = Cli::parse();
    let built = match building {
        Ok(thread) => thread
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the runtime's start panicked"))),
        Err(e) => Err(e),
    };
    let runtime = match built {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolplane: cli.io: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    runtime.block_on(async {
        // The bundled MCP server speaks on stdout and needs no logs; the plane logs what its
        // services do; client commands only log problems, so their output stays readable.
        let telemetry = match &cli.command {
            Command::DemoMcpServer | Command::Completions(_) => None,
            command => {
                // `toolplane` also matches the service crates (`toolplane_runtime`, …): a filter
                // target is a prefix.
                let directive = match command {
                    Command::Up(args) if !args.demo => "warn,toolplane=info",
                    Command::Up(_) => "warn",
                    _ => "error",
                };
                let config = toolplane_telemetry::TelemetryConfig::new("toolplane")
                    .with_service_version(env!("CARGO_PKG_VERSION"))
                    .with_default_directive(directive);
                match toolplane_telemetry::init(config) {
                    Ok(guard) => Some(guard),
                    Err(e) => {
                        eprintln!("toolplane: {e}");
                        return ExitCode::from(EXIT_FAILURE);
                    }
                }
            }
        };
        let code = match toolplane::cli::dispatch(cli).await {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("toolplane: {}", e.one_line());
                ExitCode::from(e.exit_code())
            }
        };
        drop(telemetry);
        code
    })
}
