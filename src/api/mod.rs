//! The job APIs (TrainingJob, PaddleJob; the PyTorch kinds, the elastic batch/v1 Job and the JobSet, which trainscale only sizes): CRD types, quantities, helper methods, validation and manifest loading.

mod embedded;
mod error;
pub mod guard;
mod job;
mod jobset;
mod kind;
pub mod kueue;
pub mod manifest;
pub mod names;
pub mod note;
mod paddlejob;
pub mod priority;
pub mod progress;
mod pytorch;
pub mod quantity;
pub mod resource_names;
mod resources;
pub mod schema;
pub mod sizing;
pub mod speedup;
pub mod trainer_job;
mod types;
pub mod validate;

pub use embedded::Embedded;
pub use error::FieldError;
pub use job::{JobKey, fulfillment_of};
pub use jobset::*;
pub use kind::JobKind;
pub use paddlejob::*;
pub use pytorch::*;
pub use quantity::{Quantity, QuantityError};
pub use resources::{GPU_RESOURCE_NAMES, Resources, parse_resources, read_quantity, resources_of};
pub use types::*;

/// The CRD's API group.
pub const GROUP: &str = "paddlepaddle.org";
/// The CRD's version.
pub const VERSION: &str = "v1alpha1";
/// Pod label naming a trainer's TrainingJob.
pub const LABEL_TRAINER: &str = "paddle-job";
/// Pod label naming a master's TrainingJob.
pub const LABEL_MASTER: &str = "paddle-job-master";
/// Pod label naming a pserver's TrainingJob.
pub const LABEL_PSERVER: &str = "paddle-job-pserver";
/// Pod label naming a PaddleJob (seed 001: `kubectl get pods -l paddle-job-name=<name>`), on every
/// pod of the job besides its role label.
pub const LABEL_PADDLE_JOB: &str = "paddle-job-name";
