//! The work behind each CLI subcommand, kept out of `main.rs` so tests can call it.

pub mod crd;
pub mod explain;
pub mod flags;
pub mod live;
pub mod plan;
pub mod progress;
pub mod run;
pub mod simulate;
pub mod state;
pub mod submit;
pub mod validate;

/// How a command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// Logs for the one-shot commands: `tracing` to stderr, `RUST_LOG` (default `warn`).
pub fn init_cli_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
