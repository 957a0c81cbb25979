//! trainscale: an elastic scheduler and autoscaler for PaddlePaddle TrainingJobs on Kubernetes.

pub mod api;
pub mod cluster;
pub mod commands;
pub mod daemon;
pub mod operator;
pub mod planner;
pub mod sim;
pub mod testkit;
