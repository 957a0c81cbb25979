//! Kueue's objects in the cluster model, one event at a time (see `cluster::quota`). A job that
//! becomes left alone on Kueue's account gives back the room reserved for its positions, as a
//! suspended trainer Job does.

use super::ClusterState;
use crate::api::kueue::{ClusterQueue, LocalQueue, ResourceFlavor, Workload};
use crate::api::{FieldError, JobKey};
use crate::cluster::quota::{QuotaModel, read_cluster_queue, read_local_queue, read_workload};

impl ClusterState {
    /// Kueue's objects and what they say of jobs.
    pub fn quota(&self) -> &QuotaModel {
        &self.quota
    }

    /// Adds or updates a ResourceFlavor.
    pub fn apply_resource_flavor(&mut self, flavor: &ResourceFlavor) -> Result<(), FieldError> {
        match flavor.metadata.name.as_deref().filter(|n| !n.is_empty()) {
            Some(name) => {
                self.quota.apply_flavor(name);
                Ok(())
            }
            None => Err(FieldError::new(
                "ResourceFlavor",
                "metadata.name",
                "a ResourceFlavor needs a name",
            )),
        }
    }

    /// Removes a ResourceFlavor.
    pub fn delete_resource_flavor(&mut self, name: &str) {
        self.quota.delete_flavor(name);
    }

    /// Adds or updates a ClusterQueue. A malformed one is removed and its error returned.
    pub fn apply_cluster_queue(&mut self, cq: &ClusterQueue) -> Result<(), FieldError> {
        match read_cluster_queue(cq) {
            Ok(info) => {
                let held = self.quota.put_cluster_queue(info);
                self.release_held(held);
                Ok(())
            }
            Err(e) => {
                if let Some(name) = cq.metadata.name.as_deref() {
                    self.delete_cluster_queue(name);
                }
                Err(e)
            }
        }
    }

    /// Removes a ClusterQueue.
    pub fn delete_cluster_queue(&mut self, name: &str) {
        let held = self.quota.delete_cluster_queue(name);
        self.release_held(held);
    }

    /// Adds or updates a LocalQueue. A malformed one is removed and its error returned.
    pub fn apply_local_queue(&mut self, lq: &LocalQueue) -> Result<(), FieldError> {
        match read_local_queue(lq) {
            Ok(lq) => {
                let held = self
                    .quota
                    .put_local_queue(&lq.namespace, &lq.name, &lq.cluster_queue);
                self.release_held(held);
                Ok(())
            }
            Err(e) => {
                if let Some(name) = lq.metadata.name.as_deref() {
                    let namespace = lq.metadata.namespace.as_deref().unwrap_or("");
                    self.delete_local_queue(namespace, name);
                }
                Err(e)
            }
        }
    }

    /// Removes a LocalQueue.
    pub fn delete_local_queue(&mut self, namespace: &str, name: &str) {
        let held = self.quota.delete_local_queue(namespace, name);
        self.release_held(held);
    }

    /// Adds or updates a Workload. A malformed one is removed and its error returned.
    pub fn apply_workload(&mut self, workload: &Workload) -> Result<(), FieldError> {
        match read_workload(workload) {
            Ok(info) => {
                let held = self.quota.put_workload(info);
                self.release_held(held);
                Ok(())
            }
            Err(e) => {
                if let Some(name) = workload.metadata.name.as_deref() {
                    let namespace = workload.metadata.namespace.as_deref().unwrap_or("");
                    self.delete_workload(namespace, name);
                }
                Err(e)
            }
        }
    }

    /// Removes a Workload.
    pub fn delete_workload(&mut self, namespace: &str, name: &str) {
        let held = self.quota.delete_workload(namespace, name);
        self.release_held(held);
    }

    /// Records the queue label of job `key`'s object (called as the job is applied).
    pub(super) fn set_job_queue(&mut self, key: &JobKey, label: Option<&str>) {
        let held = self.quota.set_job_label(key, label);
        self.release_held(held);
    }

    /// Records job `key`'s trainer Job and its queue label (`None`: the trainer Job is gone).
    pub fn set_trainer_job_queue(&mut self, key: &JobKey, job: Option<(&str, Option<&str>)>) {
        let held = match job {
            Some((name, label)) => self.quota.set_trainer_job(key, name, label),
            None => self.quota.clear_trainer_job(key),
        };
        self.release_held(held);
    }

    /// Jobs that became left alone hold no room: what was reserved for their positions goes
    /// back.
    fn release_held(&mut self, keys: Vec<JobKey>) {
        for key in keys {
            self.unreserve_from(&key, 0);
        }
    }
}
