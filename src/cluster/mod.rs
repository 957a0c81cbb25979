//! The cluster model: nodes, pods, PriorityClasses, jobs of every kind and Kueue's quota, kept up to date one object at a time.

pub mod filters;
pub mod kinds;
pub mod objects;
pub mod quota;
pub mod report;
mod snapshot;
mod state;
pub mod sync;

pub use objects::{JobInfo, NodeInfo, PodInfo, PodPhase, ProgressEstimate, Role};
pub use snapshot::{DumpError, Snapshot};
pub use state::{
    ClusterState, DEFAULT_NODE_PODS, IgnoredProgress, JobSlot, MAX_NODE_PODS, NodeId, NodeSlot,
    Sizes, TrainerPods,
};
