//! The cluster model: nodes, pods and TrainingJobs, kept up to date one object at a time.

pub mod objects;
pub mod report;
mod snapshot;
mod state;

pub use objects::{JobInfo, NodeInfo, PodInfo, PodPhase, Role};
pub use snapshot::Snapshot;
pub use state::{ClusterState, JobSlot, NodeId, NodeSlot, TrainerPods};
