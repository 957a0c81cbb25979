//! The work behind each CLI subcommand, kept out of `main.rs` so tests can call it.

pub mod crd;
pub mod plan;
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
