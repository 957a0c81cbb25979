//! Kueue's admission as the simulated cluster plays it, for a scenario's `queues`.
//!
//! Each queue is a ClusterQueue whose GPU nominal quota is the queue's `gpus` (its borrowing
//! limit the queue's `borrowing_limit`) and whose CPU and memory quotas are the whole cluster's,
//! all in the scenario's cohort when it has one. Each job has one Workload in its queue:
//!
//! - On arrival it asks for the job's first size (its min; a rigid `static` job its size) and
//!   waits. Every tick, before the planner pass, waiting Workloads are admitted as Kueue's
//!   `BestEffortFIFO` does: each queue offers its head (highest priority, then oldest) in turn,
//!   the heads that need no borrowing first, then by priority and age; a head that does not fit
//!   is passed over until the next tick and the one behind it becomes the head. A job not
//!   admitted is suspended: no pods, no room.
//! - An admitted job's Workload follows the size trainscale gives it: a scale-down frees quota
//!   at once; a scale-up (a new Workload slice) is admitted at once when the quota allows (the
//!   planner checked it), else it waits like an arriving Workload and the new pods stay gated.
//! - A finished job's Workload frees its quota.
//!
//! Quota arithmetic is Kueue's (`pkg/cache/scheduler/resource_node.go`) for a flat cohort
//! without lending limits: a queue can take `min(Σ nominal − Σ used` over the cohort`,
//! nominal − used + borrowing limit)`; without a cohort, `nominal − used`. Kueue's preemption
//! (reclaiming lent quota, priorities) is not played: trainscale does not cause it.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use crate::api::Resources;

/// The resources quota is kept in: GPUs, CPU (thousandths), memory (bytes).
const R: usize = 3;
const GPU: usize = 0;

type Amounts = [i64; R];

fn amounts(r: Resources) -> Amounts {
    [r.gpu, r.cpu_milli, r.memory]
}

/// One ClusterQueue's quota and usage.
#[derive(Debug, Clone)]
struct QueueUse {
    nominal: Amounts,
    /// GPUs it may borrow beyond its nominal quota.
    borrowing_limit: Option<i64>,
    used: Amounts,
}

/// One job's Workload.
#[derive(Debug, Clone)]
struct JobWorkload {
    queue: usize,
    /// What one worker is charged.
    per_worker: Amounts,
    priority: i32,
    /// Workers admitted; `None` before the first admission.
    admitted: Option<i32>,
    /// Workers a waiting Workload (the first, or a scale-up slice) asks for, and its place in
    /// its queue.
    waiting: Option<(i32, u64)>,
    finished: bool,
}

/// An admission made by [`KueuePlay::admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub job: usize,
    /// Workers admitted now.
    pub count: i32,
    /// Its first admission (the trainer Job is unsuspended), not a scale-up slice.
    pub first: bool,
}

/// The queues' quota and usage, and every job's Workload.
#[derive(Debug, Clone)]
pub struct KueuePlay {
    queues: Vec<QueueUse>,
    /// All queues are in one cohort.
    cohort: bool,
    /// By trace job; `None` for a job without a queue.
    jobs: Vec<Option<JobWorkload>>,
    /// Waiting Workloads per queue, in queue order: (priority descending, arrival, job).
    waiting: Vec<BTreeSet<(Reverse<i32>, u64, usize)>>,
    next_order: u64,
    /// Scale-ups that did not fit at once (the planner's quota and this one disagreed).
    pub deferred_scale_ups: u64,
}

impl KueuePlay {
    /// Queues of `(GPU nominal quota, GPU borrowing limit)`, CPU and memory quota `cluster`'s
    /// each, in one cohort when `cohort`; `jobs` gives each trace job's queue, trainer request
    /// and priority.
    pub fn new(
        queues: impl IntoIterator<Item = (i64, Option<i64>)>,
        cohort: bool,
        cluster: Resources,
        jobs: impl IntoIterator<Item = Option<(usize, Resources, i32)>>,
    ) -> KueuePlay {
        let queues: Vec<QueueUse> = queues
            .into_iter()
            .map(|(gpus, borrowing_limit)| QueueUse {
                nominal: [gpus, cluster.cpu_milli, cluster.memory],
                borrowing_limit,
                used: [0; R],
            })
            .collect();
        let jobs = jobs
            .into_iter()
            .map(|j| {
                j.map(|(queue, trainer, priority)| JobWorkload {
                    queue,
                    per_worker: amounts(trainer),
                    priority,
                    admitted: None,
                    waiting: None,
                    finished: false,
                })
            })
            .collect();
        KueuePlay {
            waiting: vec![BTreeSet::new(); queues.len()],
            queues,
            cohort,
            jobs,
            next_order: 0,
            deferred_scale_ups: 0,
        }
    }

    /// The queue of `job`, if it has one.
    pub fn queue_of(&self, job: usize) -> Option<usize> {
        self.jobs.get(job)?.as_ref().map(|w| w.queue)
    }

    /// Workers admitted for `job` (0 before its first admission); `None` for a job without a
    /// queue.
    pub fn admitted(&self, job: usize) -> Option<i32> {
        let w = self.jobs.get(job)?.as_ref()?;
        Some(w.admitted.unwrap_or(0))
    }

    /// Whether `job` was ever admitted (its trainer Job is not suspended).
    pub fn is_admitted(&self, job: usize) -> bool {
        self.jobs
            .get(job)
            .and_then(Option::as_ref)
            .is_some_and(|w| w.admitted.is_some())
    }

    /// GPUs admitted in queue `q`.
    pub fn used_gpus(&self, q: usize) -> i64 {
        self.queues.get(q).map_or(0, |u| u.used[GPU])
    }

    /// GPU nominal quota of queue `q`.
    pub fn nominal_gpus(&self, q: usize) -> i64 {
        self.queues.get(q).map_or(0, |u| u.nominal[GPU])
    }

    /// Queues.
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// What queue `q` can still take of resource `r`.
    fn available(&self, q: usize, r: usize) -> i64 {
        let u = &self.queues[q];
        let own = u.nominal[r] - u.used[r];
        if !self.cohort {
            return own;
        }
        let cohort: i64 = self.queues.iter().map(|o| o.nominal[r] - o.used[r]).sum();
        match u.borrowing_limit {
            Some(limit) if r == GPU => cohort.min(own + limit),
            _ => cohort,
        }
    }

    /// Whether `workers` more workers of a job fit its queue now.
    fn fits(&self, w: &JobWorkload, workers: i32) -> bool {
        (0..R).all(|r| {
            let need = w.per_worker[r].saturating_mul(i64::from(workers.max(0)));
            need == 0 || need <= self.available(w.queue, r)
        })
    }

    /// Whether `workers` more workers of a job would take its queue beyond its nominal quota.
    fn borrows(&self, w: &JobWorkload, workers: i32) -> bool {
        let u = &self.queues[w.queue];
        (0..R).any(|r| u.used[r] + w.per_worker[r] * i64::from(workers.max(0)) > u.nominal[r])
    }

    fn charge(&mut self, job: usize, workers: i32) {
        let Some(w) = self.jobs[job].as_ref() else {
            return;
        };
        let (q, per) = (w.queue, w.per_worker);
        for (r, each) in per.iter().enumerate() {
            self.queues[q].used[r] += each * i64::from(workers);
        }
    }

    /// Queues a Workload of `count` workers for `job` (its first, or a scale-up slice).
    fn enqueue(&mut self, job: usize, count: i32) {
        let order = self.next_order;
        self.next_order += 1;
        let Some(w) = self.jobs[job].as_mut() else {
            return;
        };
        if let Some((_, old)) = w.waiting.replace((count, order)) {
            self.waiting[w.queue].remove(&(Reverse(w.priority), old, job));
        }
        self.waiting[w.queue].insert((Reverse(w.priority), order, job));
    }

    fn dequeue(&mut self, job: usize) {
        if let Some(w) = self.jobs[job].as_mut()
            && let Some((_, order)) = w.waiting.take()
        {
            self.waiting[w.queue].remove(&(Reverse(w.priority), order, job));
        }
    }

    /// A job arrived: its Workload asks for `count` workers and waits for admission.
    pub fn submit(&mut self, job: usize, count: i32) {
        if self.jobs.get(job).is_some_and(Option::is_some) {
            self.enqueue(job, count);
        }
    }

    /// trainscale set `job`'s size to `target`; returns the workers admitted after it: `target`
    /// for a scale-down or a scale-up that fits, else the workers admitted before (the slice
    /// waits). A job not yet admitted only changes what its waiting Workload asks.
    pub fn resize(&mut self, job: usize, target: i32) -> i32 {
        let Some(w) = self.jobs.get(job).and_then(Option::as_ref) else {
            return target;
        };
        let Some(admitted) = w.admitted else {
            self.enqueue(job, target);
            return 0;
        };
        if target <= admitted || self.fits(w, target - admitted) {
            self.dequeue(job);
            self.charge(job, target - admitted);
        } else {
            self.deferred_scale_ups += 1;
            tracing::debug!(job, admitted, target, "scale-up slice waits for quota");
            self.enqueue(job, target);
            return admitted;
        }
        if let Some(w) = self.jobs[job].as_mut() {
            w.admitted = Some(target);
        }
        target
    }

    /// `job` finished: its quota goes back.
    pub fn finish(&mut self, job: usize) {
        self.dequeue(job);
        let Some(w) = self.jobs.get_mut(job).and_then(Option::as_mut) else {
            return;
        };
        w.finished = true;
        let held = w.admitted.take().unwrap_or(0);
        self.charge(job, -held);
    }

    /// One admission round: every waiting Workload that fits is admitted, queue heads in
    /// Kueue's order (see the module docs). Returns the admissions in the order made.
    pub fn admit(&mut self) -> Vec<Admitted> {
        let mut out = Vec::new();
        // Per queue, the waiting Workloads passed over this round.
        let mut skipped: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); self.queues.len()];
        loop {
            let mut heads: Vec<(bool, Reverse<i32>, u64, usize, i32)> = Vec::new();
            for (q, waiting) in self.waiting.iter().enumerate() {
                let Some(&(prio, order, job)) =
                    waiting.iter().find(|(_, _, j)| !skipped[q].contains(j))
                else {
                    continue;
                };
                let Some(w) = self.jobs[job].as_ref() else {
                    continue;
                };
                let asked = w.waiting.map_or(0, |(count, _)| count);
                let extra = asked - w.admitted.unwrap_or(0);
                heads.push((self.borrows(w, extra), prio, order, job, extra));
            }
            if heads.is_empty() {
                break;
            }
            heads.sort();
            for (_, _, _, job, extra) in heads {
                let Some(w) = self.jobs[job].as_ref() else {
                    continue;
                };
                let q = w.queue;
                if !self.fits(w, extra) {
                    skipped[q].insert(job);
                    continue;
                }
                let first = w.admitted.is_none();
                let count = w.admitted.unwrap_or(0) + extra;
                self.dequeue(job);
                self.charge(job, extra);
                if let Some(w) = self.jobs[job].as_mut() {
                    w.admitted = Some(count);
                }
                out.push(Admitted { job, count, first });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: i64 = 1 << 30;

    /// Two queues of 4 GPUs each (in one cohort when `cohort`), 1-GPU trainers.
    fn play(cohort: bool, borrowing_limit: Option<i64>, jobs: usize) -> KueuePlay {
        let trainer = Resources::new(1000, GIB, 1);
        KueuePlay::new(
            [(4, borrowing_limit), (4, None)],
            cohort,
            Resources::new(64_000, 64 * GIB, 8),
            (0..jobs).map(|j| Some((j % 2, trainer, 0))),
        )
    }

    #[test]
    fn workloads_are_admitted_fifo_and_a_large_head_blocks_nothing_behind_it() {
        let mut k = play(false, None, 6);
        k.submit(0, 3);
        k.submit(2, 2); // does not fit behind job 0: passed over
        k.submit(4, 1); // fits: admitted though job 2 is older
        let got: Vec<(usize, i32)> = k.admit().iter().map(|a| (a.job, a.count)).collect();
        assert_eq!(got, vec![(0, 3), (4, 1)]);
        assert_eq!(k.used_gpus(0), 4);
        assert_eq!(k.admitted(2), Some(0));
        k.finish(0);
        assert_eq!(
            k.admit()[0],
            Admitted {
                job: 2,
                count: 2,
                first: true
            }
        );
        assert_eq!(k.used_gpus(0), 3);
    }

    #[test]
    fn without_a_cohort_a_queue_never_borrows() {
        let mut k = play(false, None, 4);
        k.submit(0, 4);
        k.submit(2, 1);
        assert_eq!(k.admit().len(), 1);
        assert_eq!(k.resize(0, 5), 4, "the slice waits");
        assert_eq!(k.deferred_scale_ups, 1);
    }

    #[test]
    fn a_cohort_lends_unused_quota_up_to_the_borrowing_limit() {
        let mut k = play(true, Some(2), 4);
        k.submit(0, 4);
        assert_eq!(k.admit().len(), 1);
        // Queue 0 borrows 2 of queue 1's idle GPUs, no more.
        assert_eq!(k.resize(0, 6), 6);
        assert_eq!(k.resize(0, 7), 6);
        assert_eq!(k.used_gpus(0), 6);
        // Queue 1 has 2 left; its head of 3 waits, and a scale-down frees it nothing.
        k.submit(1, 3);
        assert!(k.admit().is_empty());
        assert_eq!(k.resize(0, 5), 5);
        assert_eq!(k.admit()[0].job, 1);
        assert_eq!((k.used_gpus(0), k.used_gpus(1)), (5, 3));
    }

    #[test]
    fn heads_that_need_no_borrowing_go_first() {
        let mut k = play(true, None, 4);
        k.submit(0, 2);
        k.submit(1, 2);
        assert_eq!(k.admit().len(), 2);
        assert_eq!(k.resize(0, 4), 4);
        // 2 GPUs left in the cohort. Queue 0's head (older) would borrow them, queue 1's fits
        // its nominal quota: queue 1's goes first and takes them.
        k.submit(2, 2);
        k.submit(3, 2);
        let got: Vec<usize> = k.admit().iter().map(|a| a.job).collect();
        assert_eq!(got, vec![3]);
        assert_eq!(k.admitted(2), Some(0));
    }
}
