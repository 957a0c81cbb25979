//! A job's admission as Kueue's Workloads say it, by the rules of Kueue's workload slicing
//! (`pkg/workloadslicing`): the active slice is the newest unfinished, not evicted Workload that
//! holds quota; a newer one naming it in `kueue.x-k8s.io/workload-slice-replacement-for` and not
//! yet admitted is a pending scale-up.

use std::sync::Arc;

use super::read::WorkloadInfo;

/// Where a job stands with Kueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// No Workload holds quota for it (none yet, or waiting for quota): it holds no room and is
    /// not resized.
    NotAdmitted,
    /// Admitted for `count` workers (`podSetAssignments[].count`: under a partial admission,
    /// fewer than the job asks).
    Admitted { count: i32 },
    /// Admitted for `admitted_count` workers; the scale-up slice `slice` (asking `asked`) waits
    /// for quota.
    SlicePending {
        admitted_count: i32,
        slice: Arc<str>,
        asked: i32,
    },
    /// Kueue is moving it (an eviction, a slice hand-over): not resized until it settles.
    InFlight(String),
}

/// The admission that `workloads` (a job's, in any order) stand for, and the active slice.
pub fn derive<'w>(workloads: &[&'w WorkloadInfo]) -> (Admission, Option<&'w WorkloadInfo>) {
    let mut live: Vec<&WorkloadInfo> = workloads.iter().copied().filter(|w| !w.finished).collect();
    live.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    // Eviction is two writes: the condition, then the release of the reservation. In between the
    // quota is on its way back.
    if let Some(w) = live.iter().find(|w| w.reserved && w.evicted.is_some()) {
        let why = w.evicted.as_deref().unwrap_or("Evicted");
        return (
            Admission::InFlight(format!(
                "Workload {} is being evicted by Kueue ({why})",
                w.name
            )),
            None,
        );
    }
    let Some(active) = live.iter().rev().find(|w| w.reserved).copied() else {
        return (Admission::NotAdmitted, None);
    };
    let key = active.reference();
    // An older slice still holding quota: the hand-over to the active one is under way.
    if let Some(old) = live
        .iter()
        .find(|w| w.reserved && !std::ptr::eq(**w, active))
    {
        let why = if active.replaces.as_deref() == Some(old.reference().as_str()) {
            format!("Workload {} is being replaced by {}", old.name, active.name)
        } else {
            format!(
                "Workloads {} and {} both hold quota (Kueue finishes one)",
                old.name, active.name
            )
        };
        return (Admission::InFlight(why), Some(active));
    }
    let count = active.worker.as_ref().map_or(0, |w| w.admitted);
    let pending = live.iter().rev().find(|w| {
        !w.reserved && w.evicted.is_none() && w.replaces.as_deref() == Some(key.as_str())
    });
    let admission = match pending {
        Some(slice) => Admission::SlicePending {
            admitted_count: count,
            slice: Arc::clone(&slice.name),
            asked: slice.worker.as_ref().map_or(0, |w| w.asked),
        },
        None => Admission::Admitted { count },
    };
    (admission, Some(active))
}
