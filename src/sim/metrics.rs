//! What a run measures (per-tick samples, per-job outcomes) and its summary per policy.

use serde::Serialize;

use super::scenario::SchedulerKind;
use super::trace::{SIZE_BUCKETS, size_bucket};
use crate::planner::{Policy, Reason};

/// The cluster after one tick (planner pass, its application, a scheduling pass).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TickSample {
    pub time_s: f64,
    pub gpus_bound: i64,
    pub gpus_capacity: i64,
    /// Bound GPU requests / GPUs of schedulable nodes.
    pub gpu_util: f64,
    pub cpu_util: f64,
    pub mem_util: f64,
    /// Arrived, unfinished jobs with fewer than min trainers bound.
    pub queue_len: u32,
    /// Jobs with at least min trainers bound.
    pub running_jobs: u32,
    pub pending_trainers: u32,
    /// Free GPUs on nodes whose free CPU or memory fits no trainer of a job wanting more.
    pub stranded_gpus: i64,
    /// Free GPUs of up nodes when, after the binding pass, at least one GPU trainer is still
    /// pending; else 0.
    pub gpus_free_blocked: i64,
    /// Mean fulfillment `(bound - min) / (max - min)` over arrived elastic jobs.
    pub fulfillment_avg: Option<f64>,
    /// Wall time of the planner pass (not deterministic).
    pub pass_ms: f64,
}

/// What holds a live job at its plan's size, from the pass's reason: its gang does not fit yet,
/// room (it wants more and none fits), the cooldown, max-instance, or `goodput`'s marginal-gain
/// cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBy {
    Gang,
    Capacity,
    Cooldown,
    AtMax,
    Other,
}

impl HeldBy {
    pub const COUNT: usize = 5;
    /// Report names, in index order.
    pub const NAMES: [&'static str; HeldBy::COUNT] = [
        "waiting for gang",
        "capacity-limited",
        "cooldown",
        "at max",
        "other",
    ];

    /// What a pass's reason and target say of a job.
    pub fn of(reason: Reason, target: i32, max: i32) -> HeldBy {
        match reason {
            Reason::Starving => HeldBy::Gang,
            Reason::Cooldown => HeldBy::Cooldown,
            Reason::LowGain => HeldBy::Other,
            _ if target >= max => HeldBy::AtMax,
            Reason::OverMax => HeldBy::AtMax,
            _ => HeldBy::Capacity,
        }
    }
}

/// What happened to one job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobOutcome {
    pub id: String,
    pub req_workers: i32,
    /// `req_workers × gpus_per_worker` (0 for CPU-only jobs).
    pub req_gpus: i64,
    pub submit_s: f64,
    /// When it first had min trainers bound.
    pub start_s: Option<f64>,
    pub finish_s: Option<f64>,
    /// Changes of its bound trainers after the start.
    pub rescales: u32,
    /// Work done, in worker-seconds at the speedup model's rate.
    pub work_done_worker_s: f64,
    /// Σ worker replicas bound × seconds (held whether the job ran or waited below min).
    pub allocated_worker_s: f64,
    /// Σ GPUs bound × seconds.
    pub allocated_gpu_s: f64,
}

impl JobOutcome {
    /// Completion minus submit.
    pub fn jct_s(&self) -> Option<f64> {
        self.finish_s.map(|f| f - self.submit_s)
    }
}

/// The raw result of one policy's run.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub policy: Policy,
    pub scheduler: SchedulerKind,
    /// Simulated time of the last event processed.
    pub end_s: f64,
    /// The scenario's tick: each sample stands for this many seconds.
    pub interval_s: f64,
    /// In trace order.
    pub jobs: Vec<JobOutcome>,
    pub samples: Vec<TickSample>,
    pub pass_ms: Vec<f64>,
    /// Σ over jobs of nodes spanned × seconds, and Σ seconds, while a job had at least min and
    /// at least 2 trainers bound.
    pub nodes_spanned: (f64, f64),
    /// Σ seconds that bound pods waited pending, and how many pods were bound.
    pub pending_wait: (f64, u64),
    /// Ticks, summed over jobs, at which a job had at least one but fewer than min trainers
    /// bound.
    pub partial_gang_ticks: u64,
    /// Job-seconds by what held each live job at its size, indexed by [`HeldBy`].
    pub held_by: [f64; HeldBy::COUNT],
    /// Jobs observed so at least once.
    pub partial_gang_jobs: usize,
}

/// The per-policy entry of `summary.json` (exactly the keys of the format).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicySummary {
    pub policy: Policy,
    pub scheduler: SchedulerKind,
    pub jobs_total: usize,
    pub jobs_completed: usize,
    pub avg_jct_s: Option<f64>,
    pub p50_jct_s: Option<f64>,
    pub p99_jct_s: Option<f64>,
    pub makespan_s: Option<f64>,
    pub avg_queue_s: Option<f64>,
    pub gpu_util: f64,
    pub cpu_util: f64,
    pub mem_util: f64,
    pub stranded_gpus_avg: f64,
    pub rescales_per_job: f64,
    /// GPU-hours held by the jobs' trainers (bound, running or not).
    pub gpu_hours: f64,
    /// Useful worker-seconds (work done) over worker-seconds held: below 1 by sublinear speedup,
    /// rescale pauses and gangs waiting below min.
    pub goodput: Option<f64>,
    pub fulfillment_avg: Option<f64>,
    /// Time-weighted mean of the nodes spanned by jobs with at least min and 2 trainers bound.
    pub nodes_spanned_avg: Option<f64>,
    /// Σ over ticks up to the last completion of `gpus_free_blocked × interval_s`, in hours.
    pub stranded_gpu_hours: f64,
    /// Mean seconds from creation to binding of the pods that were bound.
    pub pod_pending_avg_s: Option<f64>,
    pub partial_gang_ticks: u64,
    pub partial_gang_jobs: usize,
    /// Share of live job-time by what held the job at its size ([`HeldBy::NAMES`]).
    pub held_by: std::collections::BTreeMap<&'static str, f64>,
    pub pass_ms_p50: f64,
    pub pass_ms_p99: f64,
    pub pass_ms_max: f64,
}

/// JCT of the jobs of one size bucket.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BucketJct {
    pub policy: Policy,
    pub scheduler: SchedulerKind,
    pub bucket: &'static str,
    pub jobs: usize,
    pub completed: usize,
    pub avg_jct_s: Option<f64>,
    pub p99_jct_s: Option<f64>,
}

/// Nearest-rank percentile (`q` in 0..=1) of sorted values.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted.get(rank.min(sorted.len()) - 1).copied()
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

impl RunResult {
    /// `policy/scheduler`, the name of the run in tables and plots.
    pub fn label(&self) -> String {
        format!("{}/{}", self.policy.as_str(), self.scheduler.as_str())
    }

    /// Completed jobs only.
    pub fn jcts(&self) -> Vec<f64> {
        sorted(self.jobs.iter().filter_map(JobOutcome::jct_s).collect())
    }

    /// Jobs that did not complete.
    pub fn unfinished(&self) -> usize {
        self.jobs.iter().filter(|j| j.finish_s.is_none()).count()
    }

    /// The summary of this run.
    pub fn summary(&self) -> PolicySummary {
        let jcts = self.jcts();
        let first_submit = self.jobs.iter().map(|j| j.submit_s).reduce(f64::min);
        let last_finish = self.jobs.iter().filter_map(|j| j.finish_s).reduce(f64::max);
        // Samples up to the last completion (the makespan window); all when none completed.
        let window: Vec<&TickSample> = match last_finish {
            Some(end) => self.samples.iter().filter(|s| s.time_s <= end).collect(),
            None => self.samples.iter().collect(),
        };
        let avg = |f: &dyn Fn(&TickSample) -> f64| mean(window.iter().map(|s| f(s))).unwrap_or(0.0);
        let pass = sorted(self.pass_ms.clone());
        let total_rescales: u64 = self.jobs.iter().map(|j| u64::from(j.rescales)).sum();
        PolicySummary {
            policy: self.policy,
            scheduler: self.scheduler,
            jobs_total: self.jobs.len(),
            jobs_completed: jcts.len(),
            avg_jct_s: mean(jcts.iter().copied()),
            p50_jct_s: percentile(&jcts, 0.5),
            p99_jct_s: percentile(&jcts, 0.99),
            makespan_s: first_submit.zip(last_finish).map(|(a, b)| b - a),
            avg_queue_s: mean(
                self.jobs
                    .iter()
                    .filter_map(|j| j.start_s.map(|s| s - j.submit_s)),
            ),
            gpu_util: avg(&|s| s.gpu_util),
            cpu_util: avg(&|s| s.cpu_util),
            mem_util: avg(&|s| s.mem_util),
            stranded_gpus_avg: avg(&|s| s.stranded_gpus as f64),
            rescales_per_job: if self.jobs.is_empty() {
                0.0
            } else {
                total_rescales as f64 / self.jobs.len() as f64
            },
            gpu_hours: self.jobs.iter().map(|j| j.allocated_gpu_s).sum::<f64>() / 3600.0,
            goodput: {
                let held: f64 = self.jobs.iter().map(|j| j.allocated_worker_s).sum();
                let useful: f64 = self.jobs.iter().map(|j| j.work_done_worker_s).sum();
                (held > 0.0).then(|| useful / held)
            },
            fulfillment_avg: mean(window.iter().filter_map(|s| s.fulfillment_avg)),
            nodes_spanned_avg: (self.nodes_spanned.1 > 0.0)
                .then(|| self.nodes_spanned.0 / self.nodes_spanned.1),
            stranded_gpu_hours: window
                .iter()
                .map(|s| s.gpus_free_blocked as f64 * self.interval_s / 3600.0)
                .sum(),
            pod_pending_avg_s: (self.pending_wait.1 > 0)
                .then(|| self.pending_wait.0 / self.pending_wait.1 as f64),
            partial_gang_ticks: self.partial_gang_ticks,
            partial_gang_jobs: self.partial_gang_jobs,
            held_by: {
                let total: f64 = self.held_by.iter().sum();
                HeldBy::NAMES
                    .iter()
                    .zip(self.held_by)
                    .map(|(name, t)| (*name, if total > 0.0 { t / total } else { 0.0 }))
                    .collect()
            },
            pass_ms_p50: percentile(&pass, 0.5).unwrap_or(0.0),
            pass_ms_p99: percentile(&pass, 0.99).unwrap_or(0.0),
            pass_ms_max: pass.last().copied().unwrap_or(0.0),
        }
    }

    /// JCT by requested workers: 1, 2-4, 8, >=16 (`other` when any job is so).
    pub fn jct_by_size(&self) -> Vec<BucketJct> {
        SIZE_BUCKETS
            .iter()
            .filter_map(|&bucket| {
                let jobs: Vec<&JobOutcome> = self
                    .jobs
                    .iter()
                    .filter(|j| size_bucket(j.req_workers) == bucket)
                    .collect();
                if jobs.is_empty() && bucket == "other" {
                    return None;
                }
                let jcts = sorted(jobs.iter().filter_map(|j| j.jct_s()).collect());
                Some(BucketJct {
                    policy: self.policy,
                    scheduler: self.scheduler,
                    bucket,
                    jobs: jobs.len(),
                    completed: jcts.len(),
                    avg_jct_s: mean(jcts.iter().copied()),
                    p99_jct_s: percentile(&jcts, 0.99),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), Some(2.0));
        assert_eq!(percentile(&v, 0.99), Some(4.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
