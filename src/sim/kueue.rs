//! Kueue's admission as the simulated cluster plays it, for a scenario's `queues`.
//!
//! Each queue is a ClusterQueue of flavor [`FLAVOR`] whose GPU nominal quota is the queue's
//! `gpus` (its borrowing limit the queue's `borrowing_limit`) and whose CPU and memory quotas are
//! the whole cluster's, all in the scenario's cohort when it has one, with a LocalQueue of the
//! same name. Each job's trainer Job is labelled for its queue, and its Workloads follow Kueue's
//! elastic workload slices:
//!
//! - On arrival its first Workload asks for the job's first size (its min; a rigid `static` job
//!   its size) and waits, the trainer Job suspended (no pods, no room). Every tick, before the
//!   planner pass, waiting Workloads are admitted as Kueue's `BestEffortFIFO` does: each queue
//!   offers its head (highest priority, then oldest) in turn, the heads that need no borrowing
//!   first, then by priority and age; a head that does not fit is passed over until the next
//!   tick and the one behind it becomes the head.
//! - An admitted job's Workload follows the size trainscale gives it: a scale-down updates it in
//!   place and frees quota at once; a scale-up is a new slice replacing it, admitted at once
//!   when the quota allows (the planner checked it), else it waits like an arriving Workload and
//!   the new pods stay gated.
//! - A finished job's Workloads go, and their quota with them.
//!
//! Quota arithmetic is Kueue's (`pkg/cache/scheduler/resource_node.go`) for a flat cohort
//! without lending limits: a queue can take `min(Σ nominal − Σ used` over the cohort`,
//! nominal − used + borrowing limit)`; without a cohort, `nominal − used`. Kueue's preemption
//! (reclaiming lent quota, priorities) is not played: trainscale gives lent quota back by
//! shrinking elastic jobs (`planner::quota`), which the simulation applies before any scale-up
//! of the same tick.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use super::scenario::QueueSet;
use crate::api::kueue::{
    Admission, CONDITION_ADMITTED, CONDITION_QUOTA_RESERVED, ClusterQueue, ClusterQueueSpec,
    FlavorQuotas, LocalQueue, LocalQueueSpec, PodSet, PodSetAssignment, ResourceFlavor,
    ResourceGroup, ResourceQuota, SLICE_REPLACEMENT_FOR, Workload, WorkloadCondition, WorkloadSpec,
    WorkloadStatus,
};
use crate::api::{GPU_RESOURCE_NAMES, Resources};

/// The one ResourceFlavor every queue's quota is of.
pub const FLAVOR: &str = "default";

/// The resources quota is kept in: GPUs, CPU (thousandths), memory (bytes).
const R: usize = 3;
const GPU: usize = 0;

type Amounts = [i64; R];

fn amounts(r: Resources) -> Amounts {
    [r.gpu, r.cpu_milli, r.memory]
}

const CPU: usize = 1;

/// Kueue's names of the resources of [`Amounts`].
const NAMES: [&str; R] = [GPU_RESOURCE_NAMES[0], "cpu", "memory"];

/// An amount of resource `r` as a quantity.
fn quantity(r: usize, amount: i64) -> Quantity {
    if r == CPU {
        Quantity(format!("{amount}m"))
    } else {
        Quantity(amount.to_string())
    }
}

/// One ClusterQueue's quota and usage.
#[derive(Debug, Clone)]
struct QueueUse {
    nominal: Amounts,
    /// GPUs it may borrow beyond its nominal quota.
    borrowing_limit: Option<i64>,
    used: Amounts,
}

/// One job's Workloads: an admitted slice and a waiting one, either or both.
#[derive(Debug, Clone)]
struct JobWorkload {
    queue: usize,
    /// What one worker is charged.
    per_worker: Amounts,
    priority: i32,
    /// The admitted slice: number, workers, creation time.
    admitted: Option<(u32, i32, f64)>,
    /// The waiting Workload (the first, or a scale-up slice): number, workers asked, creation
    /// time, place in its queue.
    waiting: Option<(u32, i32, f64, u64)>,
    /// Slices made so far.
    slices: u32,
}

impl JobWorkload {
    fn admitted_count(&self) -> i32 {
        self.admitted.map_or(0, |(_, count, _)| count)
    }
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

/// The queues' quota and usage, and every job's Workloads.
#[derive(Debug, Clone)]
pub struct KueuePlay {
    queues: Vec<QueueUse>,
    /// ClusterQueue (and LocalQueue) names.
    names: Vec<String>,
    cohort: Option<String>,
    /// By trace job; `None` for a job without a queue.
    jobs: Vec<Option<JobWorkload>>,
    /// Waiting Workloads per queue, in queue order: (priority descending, arrival, job).
    waiting: Vec<BTreeSet<(Reverse<i32>, u64, usize)>>,
    next_order: u64,
    /// Jobs whose Workloads changed since [`KueuePlay::take_changed`].
    changed: BTreeSet<usize>,
    /// Per queue, scale-ups that did not fit at once (the planner's quota and this one
    /// disagreed).
    deferred: Vec<u64>,
}

impl KueuePlay {
    /// The ClusterQueues of `queues`, CPU and memory quota `cluster`'s each; `jobs` gives each
    /// trace job's queue, trainer request and priority.
    pub fn new(
        queues: &QueueSet,
        cluster: Resources,
        jobs: impl IntoIterator<Item = Option<(usize, Resources, i32)>>,
    ) -> KueuePlay {
        let uses: Vec<QueueUse> = queues
            .queues
            .iter()
            .map(|q| QueueUse {
                nominal: [q.gpus, cluster.cpu_milli, cluster.memory],
                borrowing_limit: q.borrowing_limit,
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
                    slices: 0,
                })
            })
            .collect();
        KueuePlay {
            waiting: vec![BTreeSet::new(); uses.len()],
            queues: uses,
            names: queues.queues.iter().map(|q| q.name.clone()).collect(),
            cohort: queues.cohort.clone(),
            jobs,
            next_order: 0,
            changed: BTreeSet::new(),
            deferred: vec![0; queues.queues.len()],
        }
    }

    /// The queue of `job`, if it has one.
    pub fn queue_of(&self, job: usize) -> Option<usize> {
        self.jobs.get(job)?.as_ref().map(|w| w.queue)
    }

    /// The name of queue `q` (its ClusterQueue and LocalQueue).
    pub fn queue_name(&self, q: usize) -> Option<&str> {
        self.names.get(q).map(String::as_str)
    }

    /// Workers admitted for `job` (0 before its first admission); `None` for a job without a
    /// queue.
    pub fn admitted(&self, job: usize) -> Option<i32> {
        let w = self.jobs.get(job)?.as_ref()?;
        Some(w.admitted_count())
    }

    /// GPUs admitted in queue `q`.
    pub fn used_gpus(&self, q: usize) -> i64 {
        self.queues.get(q).map_or(0, |u| u.used[GPU])
    }

    /// Scale-ups of queue `q`'s jobs that did not fit at once.
    pub fn deferred_scale_ups(&self, q: usize) -> u64 {
        self.deferred.get(q).copied().unwrap_or(0)
    }

    /// Queues.
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// What queue `q` can still take of resource `r`.
    fn available(&self, q: usize, r: usize) -> i64 {
        let u = &self.queues[q];
        let own = u.nominal[r] - u.used[r];
        if self.cohort.is_none() {
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
        (0..R).any(|r| {
            u.used[r].saturating_add(w.per_worker[r].saturating_mul(i64::from(workers.max(0))))
                > u.nominal[r]
        })
    }

    /// Charges `workers` (negative: frees) of `job` to its queue.
    fn charge(&mut self, job: usize, workers: i32) {
        let Some(w) = self.jobs[job].as_ref() else {
            return;
        };
        let (q, per) = (w.queue, w.per_worker);
        for (r, each) in per.iter().enumerate() {
            self.queues[q].used[r] += each * i64::from(workers);
        }
    }

    /// Makes `job`'s waiting Workload ask for `count` workers: a new one (a new slice when the
    /// job is admitted) queued last, or the waiting one updated in place.
    fn wait_for(&mut self, job: usize, count: i32, now: f64) {
        let order = self.next_order;
        let Some(w) = self.jobs[job].as_mut() else {
            return;
        };
        self.changed.insert(job);
        if let Some((_, asked, _, _)) = w.waiting.as_mut() {
            *asked = count;
            return;
        }
        self.next_order += 1;
        w.waiting = Some((w.slices, count, now, order));
        w.slices += 1;
        self.waiting[w.queue].insert((Reverse(w.priority), order, job));
    }

    /// Drops `job`'s waiting Workload.
    fn drop_waiting(&mut self, job: usize) {
        if let Some(w) = self.jobs[job].as_mut()
            && let Some((_, _, _, order)) = w.waiting.take()
        {
            self.waiting[w.queue].remove(&(Reverse(w.priority), order, job));
            self.changed.insert(job);
        }
    }

    /// A job arrived at `now`: its Workload asks for `count` workers and waits for admission.
    pub fn submit(&mut self, job: usize, count: i32, now: f64) {
        if self.jobs.get(job).is_some_and(Option::is_some) {
            self.wait_for(job, count, now);
        }
    }

    /// trainscale set `job`'s size to `target` at `now`; returns the workers admitted after it:
    /// `target` for a scale-down or a scale-up that fits, else the workers admitted before (the
    /// slice waits). A job not yet admitted only changes what its waiting Workload asks.
    pub fn resize(&mut self, job: usize, target: i32, now: f64) -> i32 {
        let Some(w) = self.jobs.get(job).and_then(Option::as_ref) else {
            return target;
        };
        let Some((slice, admitted, created)) = w.admitted else {
            self.wait_for(job, target, now);
            return 0;
        };
        if target == admitted {
            self.drop_waiting(job);
            return target;
        }
        let fits = target < admitted || self.fits(w, target - admitted);
        if !fits {
            self.deferred[w.queue] += 1;
            tracing::debug!(job, admitted, target, "scale-up slice waits for quota");
            self.wait_for(job, target, now);
            return admitted;
        }
        self.drop_waiting(job);
        self.charge(job, target - admitted);
        self.changed.insert(job);
        if let Some(w) = self.jobs[job].as_mut() {
            w.admitted = Some(if target < admitted {
                // A scale-down updates the admitted slice in place.
                (slice, target, created)
            } else {
                // A scale-up is a new slice, admitted at once; the old one is replaced.
                w.slices += 1;
                (w.slices - 1, target, now)
            });
        }
        target
    }

    /// `job` finished: its Workloads and their quota go.
    pub fn finish(&mut self, job: usize) {
        self.drop_waiting(job);
        let Some(w) = self.jobs.get_mut(job).and_then(Option::as_mut) else {
            return;
        };
        let held = w.admitted.take().map_or(0, |(_, count, _)| count);
        self.charge(job, -held);
        self.changed.insert(job);
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
                let asked = w.waiting.map_or(0, |(_, count, _, _)| count);
                let extra = asked - w.admitted_count();
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
                if !self.fits(w, extra) {
                    skipped[w.queue].insert(job);
                    continue;
                }
                let first = w.admitted.is_none();
                let count = w.admitted_count() + extra;
                let Some((slice, _, created, _)) = w.waiting else {
                    continue;
                };
                self.drop_waiting(job);
                self.charge(job, extra);
                if let Some(w) = self.jobs[job].as_mut() {
                    w.admitted = Some((slice, count, created));
                }
                out.push(Admitted { job, count, first });
            }
        }
        out
    }

    /// The jobs whose Workloads changed since the last call.
    pub fn take_changed(&mut self) -> BTreeSet<usize> {
        std::mem::take(&mut self.changed)
    }

    // ----- Kueue's objects, as the cluster model reads them -----

    /// The ResourceFlavor, the ClusterQueues and the LocalQueues (in `namespace`).
    pub fn queue_objects(
        &self,
        namespace: &str,
    ) -> (ResourceFlavor, Vec<ClusterQueue>, Vec<LocalQueue>) {
        let flavor = ResourceFlavor {
            metadata: ObjectMeta {
                name: Some(FLAVOR.to_string()),
                ..ObjectMeta::default()
            },
        };
        let mut cqs = Vec::with_capacity(self.queues.len());
        let mut lqs = Vec::with_capacity(self.queues.len());
        for (name, u) in self.names.iter().zip(&self.queues) {
            let resources = (0..R)
                .map(|r| ResourceQuota {
                    name: NAMES[r].to_string(),
                    nominal_quota: Some(quantity(r, u.nominal[r])),
                    borrowing_limit: u
                        .borrowing_limit
                        .filter(|_| r == GPU)
                        .map(|b| quantity(r, b)),
                    lending_limit: None,
                })
                .collect::<Vec<_>>();
            cqs.push(ClusterQueue {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..ObjectMeta::default()
                },
                spec: ClusterQueueSpec {
                    resource_groups: vec![ResourceGroup {
                        covered_resources: resources.iter().map(|r| r.name.clone()).collect(),
                        flavors: vec![FlavorQuotas {
                            name: FLAVOR.to_string(),
                            resources,
                        }],
                    }],
                    cohort_name: self.cohort.clone(),
                    fair_sharing: None,
                    stop_policy: None,
                },
            });
            lqs.push(LocalQueue {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(namespace.to_string()),
                    ..ObjectMeta::default()
                },
                spec: LocalQueueSpec {
                    cluster_queue: Some(name.clone()),
                },
            });
        }
        (flavor, cqs, lqs)
    }

    /// `job`'s Workloads now, as Kueue keeps them: `<job>-<slice>` in `namespace`, owned by its
    /// trainer Job `trainer_job`; the admitted slice (reserved and admitted in its
    /// ClusterQueue) and the waiting one (naming the admitted slice it replaces, if any).
    pub fn workloads(
        &self,
        job: usize,
        job_name: &str,
        trainer_job: &str,
        namespace: &str,
    ) -> Vec<Workload> {
        let Some(w) = self.jobs.get(job).and_then(Option::as_ref) else {
            return Vec::new();
        };
        let name = |slice: u32| format!("{job_name}-{slice:04}");
        let queue = self.names.get(w.queue).cloned().unwrap_or_default();
        let meta = |slice: u32, created: f64, replaces: Option<u32>| ObjectMeta {
            name: Some(name(slice)),
            namespace: Some(namespace.to_string()),
            creation_timestamp: k8s_openapi::jiff::Timestamp::from_second(created as i64)
                .ok()
                .map(Time),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".to_string(),
                kind: "Job".to_string(),
                name: trainer_job.to_string(),
                uid: format!("{namespace}/{trainer_job}"),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            annotations: replaces.map(|r| {
                BTreeMap::from([(
                    SLICE_REPLACEMENT_FOR.to_string(),
                    format!("{namespace}/{}", name(r)),
                )])
            }),
            ..ObjectMeta::default()
        };
        // A worker's requests, as the trainer Job's pod template gives them to Kueue.
        let template = PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "worker".to_string(),
                    resources: Some(ResourceRequirements {
                        requests: Some(
                            (0..R)
                                .filter(|&r| w.per_worker[r] > 0)
                                .map(|r| (NAMES[r].to_string(), quantity(r, w.per_worker[r])))
                                .collect(),
                        ),
                        ..ResourceRequirements::default()
                    }),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
        };
        let spec = |count: i32| WorkloadSpec {
            pod_sets: vec![PodSet {
                name: "worker".to_string(),
                count,
                template: Some(template.clone()),
            }],
            queue_name: Some(queue.clone()),
        };
        let mut out = Vec::with_capacity(2);
        if let Some((slice, count, created)) = w.admitted {
            // The resources a worker requests, each charged to the flavor.
            let requested: Vec<usize> = (0..R).filter(|&r| w.per_worker[r] > 0).collect();
            let condition = |type_: &str| WorkloadCondition {
                type_: type_.to_string(),
                status: "True".to_string(),
                reason: Some(type_.to_string()),
            };
            out.push(Workload {
                metadata: meta(slice, created, None),
                spec: spec(count),
                status: Some(WorkloadStatus {
                    admission: Some(Admission {
                        cluster_queue: queue.clone(),
                        pod_set_assignments: vec![PodSetAssignment {
                            name: "worker".to_string(),
                            flavors: requested
                                .iter()
                                .map(|&r| (NAMES[r].to_string(), FLAVOR.to_string()))
                                .collect(),
                            resource_usage: requested
                                .iter()
                                .map(|&r| {
                                    let total = w.per_worker[r] * i64::from(count);
                                    (NAMES[r].to_string(), quantity(r, total))
                                })
                                .collect(),
                            count: Some(count),
                        }],
                    }),
                    conditions: vec![
                        condition(CONDITION_QUOTA_RESERVED),
                        condition(CONDITION_ADMITTED),
                    ],
                    reclaimable_pods: Vec::new(),
                }),
            });
        }
        if let Some((slice, asked, created, _)) = w.waiting {
            let replaces = w.admitted.map(|(s, _, _)| s);
            out.push(Workload {
                metadata: meta(slice, created, replaces),
                spec: spec(asked),
                status: None,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::scenario::QueueSpec;

    const GIB: i64 = 1 << 30;

    /// Queues `a` and `b` of 4 GPUs each (in cohort `c` when `cohort`), 1-GPU trainers, even jobs
    /// in `a`, odd ones in `b`.
    fn play(cohort: bool, borrowing_limit: Option<i64>, jobs: usize) -> KueuePlay {
        let queue = |name: &str, borrowing_limit| QueueSpec {
            name: name.into(),
            vcs: vec![name.into()],
            catch_all: false,
            gpus: 4,
            borrowing_limit,
        };
        let trainer = Resources::new(1000, GIB, 1);
        KueuePlay::new(
            &QueueSet {
                cohort: cohort.then(|| "c".to_string()),
                queues: vec![queue("a", borrowing_limit), queue("b", None)],
            },
            Resources::new(64_000, 64 * GIB, 8),
            (0..jobs).map(|j| Some((j % 2, trainer, 0))),
        )
    }

    #[test]
    fn workloads_are_admitted_fifo_and_a_large_head_blocks_nothing_behind_it() {
        let mut k = play(false, None, 6);
        k.submit(0, 3, 0.0);
        k.submit(2, 2, 1.0); // does not fit behind job 0: passed over
        k.submit(4, 1, 2.0); // fits: admitted though job 2 is older
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
        k.submit(0, 4, 0.0);
        k.submit(2, 1, 0.0);
        assert_eq!(k.admit().len(), 1);
        assert_eq!(k.resize(0, 5, 60.0), 4, "the slice waits");
        assert_eq!(k.deferred_scale_ups(0), 1);
    }

    #[test]
    fn a_cohort_lends_unused_quota_up_to_the_borrowing_limit() {
        let mut k = play(true, Some(2), 4);
        k.submit(0, 4, 0.0);
        assert_eq!(k.admit().len(), 1);
        // Queue a borrows 2 of queue b's idle GPUs, no more.
        assert_eq!(k.resize(0, 6, 60.0), 6);
        assert_eq!(k.resize(0, 7, 120.0), 6);
        assert_eq!(k.used_gpus(0), 6);
        // Queue b has 2 left; its head of 3 waits, and the pending slice of job 0 too.
        k.submit(1, 3, 130.0);
        assert!(k.admit().is_empty());
        // A scale-down drops the pending slice and frees a GPU: b's head fits.
        assert_eq!(k.resize(0, 5, 180.0), 5);
        assert_eq!(k.admit()[0].job, 1);
        assert_eq!((k.used_gpus(0), k.used_gpus(1)), (5, 3));
    }

    #[test]
    fn heads_that_need_no_borrowing_go_first() {
        let mut k = play(true, None, 4);
        k.submit(0, 2, 0.0);
        k.submit(1, 2, 0.0);
        assert_eq!(k.admit().len(), 2);
        assert_eq!(k.resize(0, 4, 60.0), 4);
        // 2 GPUs left in the cohort. Queue a's head (older) would borrow them, queue b's fits
        // its nominal quota: queue b's goes first and takes them.
        k.submit(2, 2, 70.0);
        k.submit(3, 2, 80.0);
        let got: Vec<usize> = k.admit().iter().map(|a| a.job).collect();
        assert_eq!(got, vec![3]);
        assert_eq!(k.admitted(2), Some(0));
    }

    #[test]
    fn slices_read_back_as_the_model_derives_admission() {
        use crate::cluster::quota::{Admission as Derived, derive, read_workload};
        let mut k = play(false, None, 2);
        let derived = |k: &KueuePlay| {
            let infos: Vec<_> = k
                .workloads(0, "j", "j-trainer", "sim")
                .iter()
                .map(|w| read_workload(w).unwrap())
                .collect();
            let refs: Vec<_> = infos.iter().collect();
            derive(&refs).0
        };
        k.submit(0, 1, 0.0);
        assert_eq!(derived(&k), Derived::NotAdmitted);
        k.admit();
        assert_eq!(derived(&k), Derived::Admitted { count: 1 });
        let wl = &k.workloads(0, "j", "j-trainer", "sim")[0];
        let info = read_workload(wl).unwrap();
        assert_eq!(info.cluster_queue.as_deref(), Some("a"));
        assert_eq!(
            info.usage,
            vec![
                (("default".into(), "cpu".into()), 1000),
                (("default".into(), "memory".into()), GIB),
                (("default".into(), GPU_RESOURCE_NAMES[0].into()), 1),
            ]
        );
        // A scale-up that fits: a new slice, the old one gone.
        assert_eq!(k.resize(0, 3, 60.0), 3);
        let names: Vec<_> = k
            .workloads(0, "j", "j-trainer", "sim")
            .iter()
            .map(|w| w.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, vec!["j-0001"]);
        assert_eq!(derived(&k), Derived::Admitted { count: 3 });
        // One that does not: a pending slice replacing the admitted one.
        assert_eq!(k.resize(0, 6, 120.0), 3);
        assert!(matches!(
            derived(&k),
            Derived::SlicePending {
                admitted_count: 3,
                asked: 6,
                ..
            }
        ));
        k.finish(0);
        assert!(k.workloads(0, "j", "j-trainer", "sim").is_empty());
        assert_eq!(k.take_changed(), BTreeSet::from([0]));
    }
}
