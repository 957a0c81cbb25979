//! Minimal job creation (design §5): from a TrainingJob or a PaddleJob, the master and pserver
//! ReplicaSets, the trainer Job, the trainer-count ConfigMap and optionally a PodGroup, all owned by
//! the job so deletion cascades; the job's phase and per-role status; its spec warnings as Events.
//!
//! [`run_operator`] runs the kube-rs `Controller`s, which read the owned objects from shared,
//! watch-fed caches ([`Caches`]); the rest is pure and tested without a cluster.

pub mod cache;
pub mod cached;
mod config;
pub mod controller;
mod error;
pub mod names;
pub mod phase;
pub mod pod;
pub mod podgroup;
pub mod resources;

pub use cache::{CacheWriters, Caches};
pub use config::{OperatorConfig, PodGroupMode};
pub use controller::{
    Context, reconcile, reconcile_kind, reconcile_paddle_job, run_operator, run_operator_in,
};
pub use error::OperatorError;
pub use resources::{Desired, desired};
