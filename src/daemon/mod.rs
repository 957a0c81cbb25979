//! The in-cluster daemon (`trainscale run`): watches feed the store, the planner runs on changes
//! and on a tick while this replica leads, the actuator writes the plan, and one HTTP port serves
//! metrics and probes.

pub mod actuator;
pub mod config;
pub mod gate;
pub mod http;
pub mod leader;
mod lease;
pub mod metrics;
pub mod pass;
pub mod requests;
mod runner;
pub mod scheduling;
pub mod sizing;
pub mod store;
pub mod watch;

use std::net::SocketAddr;

pub use actuator::{Actuator, Outcome, Rescale, WriteLimits};
pub use config::{DaemonConfig, parse_duration};
pub use runner::run;
pub use store::{Kind, Store, WatchEvent};

/// Why the daemon could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("leader election: {0}")]
    Lease(#[from] leader::ElectionError),
}
