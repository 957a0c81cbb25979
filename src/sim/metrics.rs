//! What a run measures (per-tick samples, per-job outcomes) and its summary per policy.

use serde::Serialize;

use super::scenario::SchedulerKind;
use super::trace::{SIZE_BUCKETS, size_bucket};
use crate::planner::{Policy, Reason};

/// The cluster after one tick (planner pass, its application, a scheduling pass).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TickSample {
    /// The (first) tick's time.
    pub time_s: f64,
    /// Ticks this sample stands for: 1, or more where a long run merges the ticks of a bucket
    /// (its rates and averages are then means over them, its counts the last tick's).
    pub ticks: u32,
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
    pub stranded_gpus: f64,
    /// Free GPUs of up nodes when, after the binding pass, at least one GPU trainer is still
    /// pending; else 0.
    pub gpus_free_blocked: f64,
    /// Mean fulfillment `(bound - min) / (max - min)` over arrived elastic jobs.
    pub fulfillment_avg: Option<f64>,
    /// Wall time of the planner pass (not deterministic).
    pub pass_ms: f64,
    /// Per Kueue queue (empty without queues): GPUs of its jobs bound, and admitted.
    pub queues: Vec<QueueGpus>,
}

impl TickSample {
    /// Folds the next tick of the same bucket in: rates and averages become means weighted by
    /// ticks, counts and the queues take the later tick's.
    pub fn merge(&mut self, next: &TickSample) {
        let (a, b) = (f64::from(self.ticks), f64::from(next.ticks));
        let mean = |x: f64, y: f64| (x * a + y * b) / (a + b);
        self.gpu_util = mean(self.gpu_util, next.gpu_util);
        self.cpu_util = mean(self.cpu_util, next.cpu_util);
        self.mem_util = mean(self.mem_util, next.mem_util);
        self.stranded_gpus = mean(self.stranded_gpus, next.stranded_gpus);
        self.gpus_free_blocked = mean(self.gpus_free_blocked, next.gpus_free_blocked);
        self.pass_ms = mean(self.pass_ms, next.pass_ms);
        // Over the ticks that had an elastic job: kept as a mean over all of them.
        self.fulfillment_avg = match (self.fulfillment_avg, next.fulfillment_avg) {
            (Some(x), Some(y)) => Some(mean(x, y)),
            (x, y) => x.or(y),
        };
        self.gpus_bound = next.gpus_bound;
        self.gpus_capacity = next.gpus_capacity;
        self.queue_len = next.queue_len;
        self.running_jobs = next.running_jobs;
        self.pending_trainers = next.pending_trainers;
        self.queues.clone_from(&next.queues);
        self.ticks += next.ticks;
    }
}

/// One Kueue queue's GPUs after a tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct QueueGpus {
    /// Bound to its jobs' trainers.
    pub bound: i64,
    /// Held by its jobs' admitted Workloads.
    pub admitted: i64,
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
    /// Its Kueue queue (index in the scenario's `queues`), when the scenario has queues.
    pub queue: Option<usize>,
}

impl JobOutcome {
    /// Completion minus submit.
    pub fn jct_s(&self) -> Option<f64> {
        self.finish_s.map(|f| f - self.submit_s)
    }
}

/// One Kueue queue over a run: the shares of the cluster's GPUs its jobs held and wanted,
/// summed over the ticks at which it had waiting work (an arrived, unfinished GPU job below its
/// max: pending, not admitted, or able to grow).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueTicks {
    pub name: String,
    /// GPU nominal quota.
    pub nominal_gpus: i64,
    /// The cluster's GPUs (shares are of these).
    pub cluster_gpus: i64,
    /// Ticks at which it had waiting work.
    pub waiting_ticks: u64,
    /// Σ over those ticks of its jobs' bound GPUs / cluster GPUs.
    pub used_share: f64,
    /// Σ over those ticks of its demand / cluster GPUs, the demand being its arrived, unfinished
    /// jobs' max × GPUs per worker, at most the cluster's GPUs.
    pub demand_share: f64,
    /// Σ over those ticks of min(nominal, demand) / cluster GPUs.
    pub entitled_share: f64,
    /// Scale-ups of its jobs that Kueue could not admit at once (the planner asked beyond the
    /// quota; 0 when its quota arithmetic and Kueue's agree).
    pub deferred_scale_ups: u64,
}

impl QueueTicks {
    /// Adds one tick at which the queue had waiting work: `used` GPUs bound, `demand` GPUs wanted.
    pub fn add(&mut self, used: i64, demand: i64) {
        let cluster = self.cluster_gpus.max(1) as f64;
        let demand = demand.clamp(0, self.cluster_gpus.max(0));
        self.waiting_ticks += 1;
        self.used_share += used as f64 / cluster;
        self.demand_share += demand as f64 / cluster;
        self.entitled_share += self.nominal_gpus.min(demand) as f64 / cluster;
    }
}

/// The per-queue line of `queues.csv` and of the queue table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueSummary {
    pub policy: Policy,
    pub scheduler: SchedulerKind,
    pub queue: String,
    pub nominal_gpus: i64,
    /// Nominal GPUs / cluster GPUs.
    pub nominal_share: f64,
    /// Hours (ticks × interval) at which it had waiting work.
    pub waiting_h: f64,
    /// Mean share of the cluster's GPUs its jobs held while it had waiting work.
    pub used_share: Option<f64>,
    /// Mean demand share over the same ticks.
    pub demand_share: Option<f64>,
    /// Mean of min(nominal share, demand share) over the same ticks: what its quota entitles it
    /// to.
    pub entitled_share: Option<f64>,
    pub jobs: usize,
    pub completed: usize,
    pub avg_jct_s: Option<f64>,
    pub p99_jct_s: Option<f64>,
    pub deferred_scale_ups: u64,
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
    /// Per Kueue queue, in the scenario's order (empty without queues).
    pub queues: Vec<QueueTicks>,
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
    /// The longest wait from submit to the first time at min (to the run's end for a job that
    /// never started).
    pub max_queue_s: Option<f64>,
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

/// Σ value × weight / Σ weight; with weights of 1 exactly [`mean`].
fn weighted_mean(values: impl Iterator<Item = (f64, f64)>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0.0), |(s, n), (v, w)| (s + v * w, n + w));
    (n > 0.0).then(|| sum / n)
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
        let avg = |f: &dyn Fn(&TickSample) -> f64| {
            weighted_mean(window.iter().map(|s| (f(s), f64::from(s.ticks)))).unwrap_or(0.0)
        };
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
            max_queue_s: self
                .jobs
                .iter()
                .filter(|j| j.submit_s <= self.end_s)
                .map(|j| j.start_s.unwrap_or(self.end_s) - j.submit_s)
                .reduce(f64::max),
            gpu_util: avg(&|s| s.gpu_util),
            cpu_util: avg(&|s| s.cpu_util),
            mem_util: avg(&|s| s.mem_util),
            stranded_gpus_avg: avg(&|s| s.stranded_gpus),
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
            fulfillment_avg: weighted_mean(
                window
                    .iter()
                    .filter_map(|s| s.fulfillment_avg.map(|f| (f, f64::from(s.ticks)))),
            ),
            nodes_spanned_avg: (self.nodes_spanned.1 > 0.0)
                .then(|| self.nodes_spanned.0 / self.nodes_spanned.1),
            stranded_gpu_hours: window
                .iter()
                .map(|s| s.gpus_free_blocked * f64::from(s.ticks) * self.interval_s / 3600.0)
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

    /// Per Kueue queue: shares while it had waiting work, and its jobs' JCT.
    pub fn queue_summaries(&self) -> Vec<QueueSummary> {
        self.queues
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let jobs: Vec<&JobOutcome> =
                    self.jobs.iter().filter(|j| j.queue == Some(i)).collect();
                let jcts = sorted(jobs.iter().filter_map(|j| j.jct_s()).collect());
                let ticks = q.waiting_ticks as f64;
                let per_tick = |sum: f64| (q.waiting_ticks > 0).then(|| sum / ticks);
                QueueSummary {
                    policy: self.policy,
                    scheduler: self.scheduler,
                    queue: q.name.clone(),
                    nominal_gpus: q.nominal_gpus,
                    nominal_share: q.nominal_gpus as f64 / q.cluster_gpus.max(1) as f64,
                    waiting_h: ticks * self.interval_s / 3600.0,
                    used_share: per_tick(q.used_share),
                    demand_share: per_tick(q.demand_share),
                    entitled_share: per_tick(q.entitled_share),
                    jobs: jobs.len(),
                    completed: jcts.len(),
                    avg_jct_s: mean(jcts.iter().copied()),
                    p99_jct_s: percentile(&jcts, 0.99),
                    deferred_scale_ups: q.deferred_scale_ups,
                }
            })
            .collect()
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

    #[test]
    fn queue_ticks_cap_demand_at_the_cluster_and_entitle_min_of_quota_and_demand() {
        let mut q = QueueTicks {
            name: "a".into(),
            nominal_gpus: 4,
            cluster_gpus: 16,
            ..QueueTicks::default()
        };
        q.add(2, 2); // demand below quota: entitled to its demand
        q.add(8, 40); // demand above the cluster: capped at 16; entitled to its quota
        assert_eq!(q.waiting_ticks, 2);
        assert_eq!(q.used_share, 10.0 / 16.0);
        assert_eq!(q.demand_share, 18.0 / 16.0);
        assert_eq!(q.entitled_share, 6.0 / 16.0);
    }
}
