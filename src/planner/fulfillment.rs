//! Placeholder until the policy lands.

use super::{JobPlan, PlannerConfig};
use crate::cluster::ClusterState;

pub fn plan(_state: &ClusterState, _config: &PlannerConfig) -> (Vec<JobPlan>, Vec<String>) {
    (Vec::new(), vec!["policy not implemented yet".to_string()])
}
