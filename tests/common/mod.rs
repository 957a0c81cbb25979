//! Helpers shared by the planner tests: build small states and apply a plan the way the
//! kube-scheduler and the Job controller would.

#![allow(dead_code)]

use trainscale::api::{JobKey, Resources};
use trainscale::cluster::{ClusterState, JobInfo, NodeInfo};

pub const GIB: i64 = 1 << 30;

pub fn add_node(state: &mut ClusterState, name: &str, cpu_milli: i64, mem_gib: i64, gpu: i64) {
    state.set_node(
        name,
        Some(NodeInfo {
            allocatable: Resources::new(cpu_milli, mem_gib * GIB, gpu),
            schedulable: true,
        }),
    );
}

pub fn job_info(min: i32, max: i32, trainer: Resources) -> JobInfo {
    trainscale::testkit::job_info(min, max, trainer, 0)
}

/// Adds a job with `bound` trainers on the given nodes and `current` as its parallelism; the
/// trainers not bound are pending pods.
pub fn add_job(
    state: &mut ClusterState,
    name: &str,
    info: JobInfo,
    current: i32,
    bound_on: &[&str],
) {
    let key = JobKey::new("ns", name);
    let trainer = info.trainer;
    state.set_training_job(key.clone(), Some(info));
    state.set_trainer_job(key.clone(), Some(Some(current)));
    for (i, node) in bound_on.iter().enumerate() {
        add_trainer(state, &key, &format!("{name}-b{i}"), Some(node), trainer);
    }
    for i in bound_on.len()..current.max(0) as usize {
        add_trainer(state, &key, &format!("{name}-p{i}"), None, trainer);
    }
}

#[allow(unused_imports)]
pub use trainscale::testkit::{add_trainer, apply_plan};
