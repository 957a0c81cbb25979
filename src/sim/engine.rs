//! The event loop, in simulated seconds.
//!
//! Events, ordered by (time, kind, sequence) so that a run is deterministic: at one instant
//! completions come first (they free resources), then rescale completions, node failures and
//! recoveries, arrivals, and last the planner tick.
//!
//! - **Arrival**: the original operator creates the TrainingJob (phase Creating) and its trainer
//!   Job with `parallelism` = min; the trainer pods are pending.
//! - **Under Kueue** (a scenario with `queues`): an arriving job's trainer Job is suspended until
//!   its Workload is admitted; each tick starts with Kueue's admission round and brings the
//!   cluster model's Workloads up to date (see [`super::kueue`]); a new target beyond what the
//!   quota admits leaves the extra pods gated.
//! - **Tick** (every `interval_s`): one planner pass over the [`ClusterState`](crate::cluster::ClusterState);
//!   the trainer Job controller applies each new target (pods of the indexes at or above it
//!   deleted, pending or bound; pods of missing indexes below it created); pending pods are bound
//!   where the plan placed them (`trainscale`) or by the kube-scheduler model (`kube-scheduler`).
//! - **Rescale done**: a job whose bound trainers changed (and has at least min) makes no
//!   progress for `rescale_cost_s`, then runs at the speedup of its replicas (one per GPU) and of
//!   whether its trainers span more than one node.
//! - **Completion**: the job has accumulated `work_worker_s`; its pods and objects are deleted.
//! - **Node down / up**: trainers on a failed node are lost; the job goes on with the rest, or
//!   waits below min, while its controller recreates the lost indexes as pending pods.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use ordered_float::OrderedFloat;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

use super::horizon;
use super::kueue::KueuePlay;
use super::metrics::{HeldBy, JobOutcome, QueueGpus, QueueTicks, TickSample};
use super::scenario::{Scenario, SchedulerKind};
use super::scheduler::{NAMESPACE, World};
use super::speedup::SpeedupModel;
use super::trace::{TraceJob, replicas};
use crate::api::priority::resolve_priority;
use crate::api::speedup::SpeedupCurve;
use crate::api::{JobKey, Quantity, Resources, TrainingJobPhase, fulfillment_of};
use crate::cluster::{JobInfo, ProgressEstimate};
use crate::operator::names::trainer_name;
use crate::planner::{self, PlannerConfig, Policy};

pub use super::metrics::RunResult;

/// Bytes in a MiB.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    // Variant order is the order of events at the same instant.
    Completion { job: usize, version: u64 },
    RescaleDone { job: usize, version: u64 },
    NodeDown { fault: usize },
    NodeUp { node: usize },
    Arrival { job: usize },
    Tick,
}

impl Event {
    fn rank(&self) -> u8 {
        match self {
            Event::Completion { .. } => 0,
            Event::RescaleDone { .. } => 1,
            Event::NodeDown { .. } => 2,
            Event::NodeUp { .. } => 3,
            Event::Arrival { .. } => 4,
            Event::Tick => 5,
        }
    }
}

/// An event in the queue: (time, kind rank, sequence, event).
type Queued = (OrderedFloat<f64>, u8, u64, Event);

/// Progress of one job.
#[derive(Debug, Clone)]
struct JobRun {
    info: JobInfo,
    /// Trainer Job parallelism.
    parallelism: i32,
    work_done: f64,
    last_t: f64,
    /// Worker-seconds per second right now.
    rate: f64,
    /// Invalidates scheduled completion / rescale-done events.
    version: u64,
    arrived: bool,
    started: Option<f64>,
    finished: Option<f64>,
    rescales: u32,
    /// Nodes spanned since `span_since`, while at least min and at least 2 trainers are bound.
    span_nodes: Option<u32>,
    span_since: f64,
    /// Worker replicas and GPUs bound since `last_t`, and their totals × seconds so far.
    bound_replicas: u32,
    bound_gpus: i64,
    allocated_worker_s: f64,
    allocated_gpu_s: f64,
    /// How the job reports progress (`None`: it does not).
    reports: Option<Reporting>,
}

/// How one job reports its progress: its estimated total off its true work by `factor`, in
/// seconds of one trainer at `one_rate` worker-seconds per second, next at `next_s`.
#[derive(Debug, Clone, Copy)]
struct Reporting {
    factor: f64,
    one_rate: f64,
    next_s: f64,
}

/// A job past its estimated total reports this share of that total as left (it cannot know how
/// much more it needs, only that it is not done).
const PAST_TOTAL_LEFT: f64 = 0.01;

/// The remaining work a job reports, in seconds of one trainer: its estimated total (true work
/// × `factor`) less the work done, at least [`PAST_TOTAL_LEFT`] of the estimate once past it.
fn reported_remaining(work: f64, done: f64, r: &Reporting) -> f64 {
    let total = work * r.factor;
    let left = total - done;
    let left = if left > 0.0 {
        left
    } else {
        total * PAST_TOTAL_LEFT
    };
    left / r.one_rate
}

/// Draws which jobs report (probability `share`) and the factor each one's estimate is off
/// (`exp(σ·z)`, `z` standard normal by Box–Muller), in trace order, from a stream of its own
/// seeded by `seed` (so faults draw as without it). Every job draws the same three numbers
/// whatever the settings.
fn draw_reports(seed: u64, jobs: usize, share: f64, sigma: f64) -> Vec<Option<f64>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(0x70_72_6f_67);
    let mut unit = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (0..jobs)
        .map(|_| {
            let (pick, u1, u2) = (unit(), unit(), unit());
            // u1 in (0, 1] keeps the logarithm finite.
            let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            (pick < share).then(|| (sigma * z).exp())
        })
        .collect()
}

/// What one pass's plan says of one live job: its target and where its new trainers go
/// (simulated node indices and counts).
struct Decision {
    job: usize,
    target: i32,
    places: Vec<(usize, u32)>,
    held_by: HeldBy,
}

/// The speedup curve `goodput` plans a trace job with: the model's speedup of its application
/// at 1 to `max` trainers relative to one, counted as spanning nodes when the trainers' GPUs
/// exceed the largest node's (`node_gpus`).
fn curve_of(model: &SpeedupModel, t: &TraceJob, max: i32, node_gpus: i64) -> SpeedupCurve {
    let at = |n: u32| {
        let multi_node = i64::from(n) * t.gpus_per_worker > node_gpus;
        model.speedup(&t.application, replicas(n, t.gpus_per_worker), multi_node)
    };
    let one = at(1);
    let table: Vec<f64> = (1..=max.max(1) as u32).map(|n| at(n) / one).collect();
    SpeedupCurve::from_table(&table)
}

/// One simulation of one policy.
pub struct Engine<'a> {
    scenario: &'a Scenario,
    trace: &'a [TraceJob],
    speedup: &'a SpeedupModel,
    policy: Policy,
    scheduler: SchedulerKind,
    config: PlannerConfig,
    world: World,
    runs: Vec<JobRun>,
    key_index: HashMap<JobKey, usize>,
    /// Arrived, unfinished jobs.
    active: std::collections::BTreeSet<usize>,
    heap: BinaryHeap<Reverse<Queued>>,
    seq: u64,
    rng: ChaCha8Rng,
    /// Fault events not yet processed.
    faults_pending: usize,
    /// Jobs arrived so far.
    arrived: usize,
    completed: usize,
    samples: Vec<TickSample>,
    /// Where the run stops (see [`horizon`](super::horizon)).
    horizon_s: f64,
    /// Ticks within one bucket of this width share one sample: the tick, doubled each time the
    /// samples reach [`horizon::MAX_SAMPLES`].
    sample_width_s: f64,
    pass_ms: Vec<f64>,
    /// Σ nodes spanned × seconds, and Σ seconds, of multi-worker jobs.
    spanned: (f64, f64),
    /// Ticks at which a job had at least one but fewer than min trainers bound.
    partial_gang_ticks: u64,
    /// Job-seconds by what held each live job at its plan's size (see [`HeldBy`]).
    held_by: [f64; HeldBy::COUNT],
    /// Jobs seen so at least once.
    partial_gang_jobs: std::collections::BTreeSet<usize>,
    /// Kueue's admission, with the scenario's `queues`.
    kueue: Option<KueuePlay>,
    /// Per queue, the shares while it had waiting work.
    queue_ticks: Vec<QueueTicks>,
    /// Per job, the names of its Workloads in the cluster model.
    workloads: Vec<Vec<String>>,
}

impl<'a> Engine<'a> {
    /// Sets up the cluster and the arrivals of a scenario's trace for one policy and scheduler.
    pub fn new(
        scenario: &'a Scenario,
        trace: &'a [TraceJob],
        speedup: &'a SpeedupModel,
        policy: Policy,
        scheduler: SchedulerKind,
    ) -> Engine<'a> {
        let mut nodes = Vec::new();
        for pool in &scenario.node_pools {
            for i in 0..pool.count {
                nodes.push((
                    format!("{}-{i:03}", pool.name),
                    pool.name.clone(),
                    pool.allocatable,
                ));
            }
        }
        let mut world = World::new(nodes);
        for (name, value) in &scenario.priority_classes {
            world.state.set_priority_class(name, Some(*value));
        }
        let mut runs = Vec::with_capacity(trace.len());
        let mut key_index = HashMap::with_capacity(trace.len());
        // The GPUs of the largest node: `goodput`'s curves count a job whose trainers' GPUs
        // exceed it as spanning nodes.
        let node_gpus = scenario
            .node_pools
            .iter()
            .map(|p| p.allocatable.gpu)
            .max()
            .unwrap_or(0);
        let mut curves: HashMap<(&str, i64, i32), Arc<SpeedupCurve>> = HashMap::new();
        let factors = draw_reports(
            scenario.seed,
            trace.len(),
            scenario.progress.share,
            scenario.progress.sigma,
        );
        for (i, t) in trace.iter().enumerate() {
            let key = JobKey::new(NAMESPACE, t.id.clone());
            let trainer = t.worker();
            let priority = resolve_priority(
                scenario.vc_priorities.get(&t.vc).map_or("", String::as_str),
                &scenario.priority_classes,
            );
            // A rigid job (`static`) is a gang of its requested size that never changes.
            let (min, max) = if policy == Policy::Static {
                (t.req_workers, t.req_workers)
            } else {
                (t.min_workers, t.max_workers)
            };
            let curve = curves
                .entry((t.application.as_str(), t.gpus_per_worker, max))
                .or_insert_with(|| Arc::new(curve_of(speedup, t, max, node_gpus)))
                .clone();
            let info = JobInfo {
                min,
                max,
                trainer,
                exact: [
                    Quantity::from_units(t.gpus_per_worker),
                    Quantity::from_units(t.cpus_per_worker),
                    Quantity::from_units(trainer.memory),
                ],
                priority: priority.value,
                priority_class: priority.class,
                created: t.submit_s as i64,
                phase: TrainingJobPhase::Creating,
                stored_parallelism: Some(min),
                last_scale: None,
                speedup: Some(curve),
                progress: None,
            };
            let w = world.add_job(key.clone(), trainer);
            world.jobs[w].priority = priority.value;
            key_index.insert(key, i);
            runs.push(JobRun {
                info,
                parallelism: 0,
                work_done: 0.0,
                last_t: 0.0,
                rate: 0.0,
                version: 0,
                arrived: false,
                started: None,
                finished: None,
                rescales: 0,
                span_nodes: None,
                span_since: 0.0,
                bound_replicas: 0,
                bound_gpus: 0,
                allocated_worker_s: 0.0,
                allocated_gpu_s: 0.0,
                reports: factors[i]
                    .filter(|_| policy == Policy::Progress)
                    .map(|factor| Reporting {
                        factor,
                        one_rate: speedup
                            .speedup(
                                &t.application,
                                replicas(1, t.gpus_per_worker),
                                t.gpus_per_worker > node_gpus,
                            )
                            .max(f64::MIN_POSITIVE),
                        next_s: t.submit_s,
                    }),
            });
        }
        let (kueue, queue_ticks) = match &scenario.queues {
            Some(queues) => {
                let cluster = scenario
                    .node_pools
                    .iter()
                    .fold(Resources::default(), |acc, p| {
                        let n = i64::from(p.count);
                        Resources::new(
                            acc.cpu_milli + p.allocatable.cpu_milli * n,
                            acc.memory + p.allocatable.memory * n,
                            acc.gpu + p.allocatable.gpu * n,
                        )
                    });
                let play = KueuePlay::new(
                    queues,
                    cluster,
                    trace.iter().zip(&runs).map(|(t, r)| {
                        queues
                            .queue_of(&t.vc)
                            .map(|q| (q, r.info.trainer, r.info.priority))
                    }),
                );
                let ticks = queues
                    .queues
                    .iter()
                    .map(|q| QueueTicks {
                        name: q.name.clone(),
                        nominal_gpus: q.gpus,
                        cluster_gpus: cluster.gpu,
                        ..QueueTicks::default()
                    })
                    .collect();
                (Some(play), ticks)
            }
            None => (None, Vec::new()),
        };
        let config = PlannerConfig {
            policy,
            max_load_desired: scenario.max_load_desired,
            now: 0,
            cooldown_s: scenario.cooldown_s,
            min_marginal_speedup: scenario.min_marginal_speedup,
            progress_min_marginal_speedup: scenario.progress_min_marginal_speedup,
            progress_spare_min_marginal_speedup: scenario.progress_spare_min_marginal_speedup,
            starvation_bound_s: scenario.starvation_bound_s,
            ..PlannerConfig::default()
        };
        let horizon_s = horizon::horizon_s(scenario, trace);
        let mut engine = Engine {
            scenario,
            trace,
            speedup,
            policy,
            scheduler,
            config,
            world,
            runs,
            key_index,
            active: Default::default(),
            heap: BinaryHeap::new(),
            seq: 0,
            rng: ChaCha8Rng::seed_from_u64(scenario.seed),
            faults_pending: scenario.faults.len(),
            arrived: 0,
            completed: 0,
            samples: Vec::new(),
            horizon_s,
            sample_width_s: scenario.interval_s,
            pass_ms: Vec::new(),
            spanned: (0.0, 0.0),
            partial_gang_ticks: 0,
            held_by: [0.0; HeldBy::COUNT],
            partial_gang_jobs: Default::default(),
            kueue,
            queue_ticks,
            workloads: Vec::new(),
        };
        engine.feed_queues();
        for (i, t) in trace.iter().enumerate() {
            engine.push(t.submit_s, Event::Arrival { job: i });
        }
        for (f, fault) in scenario.faults.iter().enumerate() {
            engine.push(fault.at_s, Event::NodeDown { fault: f });
        }
        engine.push(0.0, Event::Tick);
        engine
    }

    /// Puts Kueue's ResourceFlavor, ClusterQueues and LocalQueues into the cluster model.
    fn feed_queues(&mut self) {
        let Some(kueue) = &self.kueue else {
            return;
        };
        self.workloads = vec![Vec::new(); self.runs.len()];
        let (flavor, cqs, lqs) = kueue.queue_objects(NAMESPACE);
        let state = &mut self.world.state;
        let mut results = vec![state.apply_resource_flavor(&flavor)];
        results.extend(cqs.iter().map(|cq| state.apply_cluster_queue(cq)));
        results.extend(lqs.iter().map(|lq| state.apply_local_queue(lq)));
        for e in results.into_iter().filter_map(Result::err) {
            tracing::warn!(error = %e, "simulated Kueue object rejected by the cluster model");
        }
    }

    /// Brings the cluster model's Workloads of the jobs whose Workloads changed up to date.
    fn feed_workloads(&mut self) {
        let Some(kueue) = self.kueue.as_mut() else {
            return;
        };
        for job in kueue.take_changed() {
            let name = &self.trace[job].id;
            let wanted = kueue.workloads(job, name, &trainer_name(name), NAMESPACE);
            let Some(fed) = self.workloads.get_mut(job) else {
                continue;
            };
            for old in fed.iter() {
                if !wanted
                    .iter()
                    .any(|w| w.metadata.name.as_deref() == Some(old.as_str()))
                {
                    self.world.state.delete_workload(NAMESPACE, old);
                }
            }
            fed.clear();
            for w in &wanted {
                if let Err(e) = self.world.state.apply_workload(w) {
                    tracing::warn!(error = %e, "simulated Workload rejected by the cluster model");
                }
                fed.extend(w.metadata.name.clone());
            }
        }
    }

    fn push(&mut self, t: f64, event: Event) {
        self.seq += 1;
        self.heap
            .push(Reverse((OrderedFloat(t), event.rank(), self.seq, event)));
    }

    /// Runs to the end: every job finished, the horizon passed, or nothing can change any more.
    /// `progress(jobs_done, jobs_total)` is called as jobs finish.
    pub fn run(mut self, progress: &mut dyn FnMut(usize, usize)) -> RunResult {
        let total = self.trace.len();
        let stall_limit =
            (self.scenario.cooldown_s as f64 / self.scenario.interval_s).ceil() as u32 + 3;
        let mut stalled = 0u32;
        let mut end = 0.0f64;
        while let Some(Reverse((OrderedFloat(now), _, _, event))) = self.heap.pop() {
            if now > self.horizon_s {
                tracing::info!(
                    policy = self.policy.as_str(),
                    horizon_s = self.horizon_s,
                    "horizon reached"
                );
                break;
            }
            end = now;
            match event {
                Event::Arrival { job } => self.arrive(job, now),
                Event::Completion { job, version } => {
                    if self.runs[job].version == version && self.runs[job].finished.is_none() {
                        self.complete(job, now);
                        progress(self.completed, total);
                    }
                }
                Event::RescaleDone { job, version } => {
                    if self.runs[job].version == version {
                        self.start_running(job, now);
                    }
                }
                Event::NodeDown { fault } => {
                    self.faults_pending -= 1;
                    self.fail(fault, now);
                }
                Event::NodeUp { node } => {
                    self.faults_pending -= 1;
                    self.world.set_up(node, true);
                }
                Event::Tick => {
                    let changed = self.tick(now);
                    if self.completed == total {
                        break;
                    }
                    let arrivals_left = self.arrived < total;
                    let progressing = self
                        .active
                        .iter()
                        .any(|&j| self.runs[j].started.is_some() && self.is_running(j));
                    if changed || arrivals_left || progressing || self.faults_pending > 0 {
                        stalled = 0;
                    } else {
                        stalled += 1;
                    }
                    if stalled >= stall_limit {
                        tracing::warn!(
                            policy = self.policy.as_str(),
                            unfinished = total - self.completed,
                            at_s = now,
                            "no job can make progress any more; stopping"
                        );
                        break;
                    }
                    self.push(now + self.scenario.interval_s, Event::Tick);
                }
            }
        }
        let still: Vec<usize> = self.active.iter().copied().collect();
        for job in still {
            self.accrue(job, end);
            self.account_span(job, end);
        }
        let outcomes = self
            .trace
            .iter()
            .zip(&self.runs)
            .enumerate()
            .map(|(i, (t, r))| JobOutcome {
                id: t.id.clone(),
                req_workers: t.req_workers,
                req_gpus: t.gpus_per_worker * i64::from(t.req_workers),
                submit_s: t.submit_s,
                start_s: r.started,
                finish_s: r.finished,
                rescales: r.rescales,
                work_done_worker_s: r.work_done,
                allocated_worker_s: r.allocated_worker_s,
                allocated_gpu_s: r.allocated_gpu_s,
                queue: self.kueue.as_ref().and_then(|k| k.queue_of(i)),
            })
            .collect();
        RunResult {
            policy: self.policy,
            scheduler: self.scheduler,
            end_s: end,
            interval_s: self.scenario.interval_s,
            jobs: outcomes,
            samples: self.samples,
            pass_ms: self.pass_ms,
            nodes_spanned: self.spanned,
            pending_wait: self.world.pending_wait,
            partial_gang_ticks: self.partial_gang_ticks,
            held_by: self.held_by,
            partial_gang_jobs: self.partial_gang_jobs.len(),
            queues: self
                .queue_ticks
                .into_iter()
                .enumerate()
                .map(|(q, t)| QueueTicks {
                    deferred_scale_ups: self.kueue.as_ref().map_or(0, |k| k.deferred_scale_ups(q)),
                    ..t
                })
                .collect(),
        }
    }

    fn is_running(&self, job: usize) -> bool {
        self.world.bound(job) as i32 >= self.runs[job].info.min
    }

    fn arrive(&mut self, job: usize, now: f64) {
        self.arrived += 1;
        let run = &mut self.runs[job];
        run.arrived = true;
        run.last_t = now;
        run.parallelism = run.info.min;
        let key = self.world.jobs[job].key.clone();
        self.world
            .state
            .set_training_job(key.clone(), Some(run.info.clone()));
        self.world
            .state
            .set_trainer_job(key.clone(), Some(Some(run.parallelism)));
        match self.kueue.as_mut().filter(|k| k.queue_of(job).is_some()) {
            // The trainer Job carries its queue's label; Kueue suspends it until its Workload is
            // admitted: no pods yet.
            Some(kueue) => {
                kueue.submit(job, run.parallelism, now);
                let queue = kueue.queue_of(job).and_then(|q| kueue.queue_name(q));
                let trainer = trainer_name(&key.name);
                self.world
                    .state
                    .set_trainer_job_queue(&key, Some((&trainer, queue)));
                self.world.state.set_trainer_job_suspended(&key, true);
            }
            // No pod exists yet: nothing bound can go.
            None => {
                self.world
                    .scale_to(job, run.parallelism.max(0) as u32, now as i64);
            }
        }
        self.active.insert(job);
    }

    /// Adds the work done and the workers and GPUs held since the last update.
    fn accrue(&mut self, job: usize, now: f64) {
        let r = &mut self.runs[job];
        let dt = now - r.last_t;
        r.work_done += r.rate * dt;
        r.allocated_worker_s += f64::from(r.bound_replicas) * dt;
        r.allocated_gpu_s += r.bound_gpus as f64 * dt;
        r.last_t = now;
    }

    /// Records what `job` holds from now on (after [`Engine::accrue`]).
    fn hold(&mut self, job: usize) {
        let bound = self.world.bound(job);
        let gpus_per_worker = self.trace[job].gpus_per_worker;
        let r = &mut self.runs[job];
        r.bound_replicas = replicas(bound, gpus_per_worker);
        r.bound_gpus = i64::from(bound) * gpus_per_worker;
    }

    /// Adds the nodes spanned since the last change to the totals, and starts a new interval with
    /// the bound trainers now (counted while at least min and at least 2 are bound).
    fn account_span(&mut self, job: usize, now: f64) {
        let bound = self.world.bound(job);
        let counted = self.runs[job].finished.is_none()
            && bound >= 2
            && bound as i32 >= self.runs[job].info.min;
        let nodes = counted.then(|| self.world.nodes_spanned(job));
        let r = &mut self.runs[job];
        if let Some(n) = r.span_nodes {
            let dt = now - r.span_since;
            self.spanned.0 += f64::from(n) * dt;
            self.spanned.1 += dt;
        }
        r.span_nodes = nodes;
        r.span_since = now;
    }

    /// The bound trainers of `job` changed: it pauses for the rescale cost (or waits below min).
    fn reallocated(&mut self, job: usize, now: f64) {
        self.accrue(job, now);
        self.hold(job);
        self.account_span(job, now);
        let running = self.is_running(job);
        let r = &mut self.runs[job];
        r.version += 1;
        r.rate = 0.0;
        if !running {
            return;
        }
        if r.started.is_none() {
            r.started = Some(now);
            r.info.phase = TrainingJobPhase::Running;
            let info = r.info.clone();
            let key = self.world.jobs[job].key.clone();
            self.world.state.set_training_job(key, Some(info));
        } else {
            r.rescales += 1;
        }
        let version = r.version;
        if self.scenario.rescale_cost_s > 0.0 {
            self.push(
                now + self.scenario.rescale_cost_s,
                Event::RescaleDone { job, version },
            );
        } else {
            self.start_running(job, now);
        }
    }

    /// The rescale is over: progress at the speedup of the bound trainers.
    fn start_running(&mut self, job: usize, now: f64) {
        self.accrue(job, now);
        if !self.is_running(job) {
            return;
        }
        let t = &self.trace[job];
        let n = replicas(self.world.bound(job), t.gpus_per_worker);
        let multi_node = self.world.nodes_spanned(job) > 1;
        let rate = self.speedup.speedup(&t.application, n, multi_node);
        let r = &mut self.runs[job];
        r.version += 1;
        r.rate = rate;
        if rate > 0.0 {
            let left = (self.trace[job].work_worker_s - r.work_done).max(0.0);
            let version = r.version;
            self.push(now + left / rate, Event::Completion { job, version });
        }
    }

    fn complete(&mut self, job: usize, now: f64) {
        self.accrue(job, now);
        let r = &mut self.runs[job];
        r.finished = Some(now);
        r.rate = 0.0;
        r.bound_replicas = 0;
        r.bound_gpus = 0;
        r.version += 1;
        self.completed += 1;
        self.account_span(job, now);
        self.active.remove(&job);
        if let Some(kueue) = self.kueue.as_mut() {
            kueue.finish(job);
        }
        self.world.remove_job_pods(job);
        let key = self.world.jobs[job].key.clone();
        if self.kueue.is_some() {
            self.world.state.set_trainer_job_queue(&key, None);
        }
        self.world.state.set_trainer_job(key.clone(), None);
        self.world.state.set_training_job(key, None);
    }

    fn fail(&mut self, fault: usize, now: f64) {
        let f = &self.scenario.faults[fault];
        let mut candidates: Vec<usize> = (0..self.world.nodes.len())
            .filter(|&n| self.world.nodes[n].up && self.world.nodes[n].pool == f.node_pool)
            .collect();
        let mut picked = Vec::new();
        while picked.len() < f.count as usize && !candidates.is_empty() {
            let i = (self.rng.next_u64() % candidates.len() as u64) as usize;
            picked.push(candidates.remove(i));
        }
        let down_for = f.down_for_s;
        for node in picked {
            tracing::debug!(node = %self.world.nodes[node].name, at_s = now, "node down");
            for job in self.world.fail_node(node, now as i64) {
                self.reallocated(job, now);
            }
            if let Some(d) = down_for {
                self.faults_pending += 1;
                self.push(now + d, Event::NodeUp { node });
            }
        }
    }

    /// Kueue admits the Workloads that fit: a job's first unsuspends its trainer Job, whose pods
    /// are created; a scale-up slice ungates the pods it adds. Returns whether any was admitted.
    fn admit_workloads(&mut self, now: f64) -> bool {
        let Some(kueue) = self.kueue.as_mut() else {
            return false;
        };
        let admitted = kueue.admit();
        for a in &admitted {
            if a.first {
                let key = self.world.jobs[a.job].key.clone();
                self.world.state.set_trainer_job_suspended(&key, false);
            }
            let pods = a.count.min(self.runs[a.job].parallelism).max(0);
            self.world.scale_to(a.job, pods as u32, now as i64);
        }
        !admitted.is_empty()
    }

    /// One Kueue admission round, a planner pass, its application, and a scheduling pass.
    /// Returns whether anything changed.
    fn tick(&mut self, now: f64) -> bool {
        let admitted = self.admit_workloads(now);
        self.feed_workloads();
        self.report_progress(now);
        self.config.now = now as i64;
        let started = Instant::now();
        let plan = planner::plan(&self.world.state, &self.config);
        self.pass_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        for w in &plan.warnings {
            tracing::debug!(policy = self.policy.as_str(), warning = %w, "planner");
        }

        // The plan borrows the state; read what applies to each job before changing it.
        let decisions: Vec<Decision> = plan
            .jobs
            .iter()
            .filter_map(|jp| {
                let &job = self.key_index.get(&*jp.key)?;
                let run = &self.runs[job];
                if run.finished.is_some() || !run.arrived {
                    return None;
                }
                let places = jp
                    .placements
                    .iter()
                    .filter_map(|p| self.world.node_of_id(p.node).map(|n| (n, p.trainers)))
                    .collect();
                Some(Decision {
                    job,
                    target: jp.target.max(0),
                    places,
                    held_by: HeldBy::of(jp.reason, jp.target, jp.max),
                })
            })
            .collect();
        drop(plan);
        // Under Kueue, shrinks first: the quota they give back is Kueue's to admit the scale-ups
        // with, as the planner counted it (a stable sort keeps the plan's order otherwise).
        let mut decisions = decisions;
        if self.kueue.is_some() {
            decisions.sort_by_key(|d| d.target >= self.runs[d.job].parallelism);
        }

        let mut changed = admitted;
        let mut dirty = std::collections::BTreeSet::new();
        let mut placements: HashMap<usize, Vec<(usize, u32)>> = HashMap::new();
        for Decision {
            job,
            target,
            places,
            held_by,
        } in decisions
        {
            self.held_by[held_by as usize] += self.scenario.interval_s;
            if target != self.runs[job].parallelism {
                changed = true;
                let r = &mut self.runs[job];
                r.parallelism = target;
                r.info.last_scale = Some(now as i64);
                let info = r.info.clone();
                let key = self.world.jobs[job].key.clone();
                self.world.state.set_training_job(key.clone(), Some(info));
                self.world.state.set_trainer_job(key, Some(Some(target)));
                // Under Kueue, pods beyond the admitted workers stay gated (not bindable).
                let pods = match self.kueue.as_mut().filter(|k| k.queue_of(job).is_some()) {
                    Some(kueue) => kueue.resize(job, target, now),
                    None => target,
                };
                if self.world.scale_to(job, pods.max(0) as u32, now as i64) {
                    dirty.insert(job);
                }
            }
            if !places.is_empty() {
                placements.insert(job, places);
            }
        }
        let runs = &self.runs;
        let min = |j: usize| runs[j].info.min.max(0) as u32;
        let gang = self.scenario.gang_scheduling;
        let bound_jobs = match self.scheduler {
            SchedulerKind::Trainscale => {
                self.world.schedule(&mut placements, &min, gang, now as i64)
            }
            SchedulerKind::KubeScheduler => self.world.schedule_kube(now as i64),
        };
        for job in bound_jobs {
            changed = true;
            dirty.insert(job);
        }
        for job in dirty {
            self.reallocated(job, now);
        }
        self.sample(now);
        changed
    }

    /// The live jobs whose report is due write their remaining work (see
    /// [`reported_remaining`]) where the planner reads it.
    fn report_progress(&mut self, now: f64) {
        let due: Vec<usize> = self
            .active
            .iter()
            .copied()
            .filter(|&j| self.runs[j].reports.is_some_and(|r| r.next_s <= now))
            .collect();
        for job in due {
            self.accrue(job, now);
            let work = self.trace[job].work_worker_s;
            let r = &mut self.runs[job];
            let Some(reporting) = r.reports.as_mut() else {
                continue;
            };
            reporting.next_s = now + self.scenario.progress.interval_s;
            r.info.progress = Some(ProgressEstimate {
                remaining_worker_s: reported_remaining(work, r.work_done, reporting),
            });
            let info = r.info.clone();
            let key = self.world.jobs[job].key.clone();
            self.world.state.set_training_job(key, Some(info));
        }
    }

    fn sample(&mut self, now: f64) {
        let state = &self.world.state;
        let cap = state.total_capacity();
        let used = state.bound_requests();
        let ratio = |u: i64, c: i64| if c > 0 { u as f64 / c as f64 } else { 0.0 };
        let mut queue = 0u32;
        let mut running = 0u32;
        let mut fulfillment = (0.0, 0u32);
        // Smallest trainer of a job that wants more room (pending pods, or below max).
        let mut wanting: Vec<Resources> = Vec::new();
        for &j in &self.active {
            let info = &self.runs[j].info;
            let bound = self.world.bound(j) as i32;
            if bound >= info.min {
                running += 1;
            } else {
                queue += 1;
                if bound >= 1 {
                    self.partial_gang_ticks += 1;
                    self.partial_gang_jobs.insert(j);
                }
            }
            if info.min < info.max {
                fulfillment.0 +=
                    fulfillment_of(bound.into(), info.min.into(), info.max.into()).clamp(0.0, 1.0);
                fulfillment.1 += 1;
            }
            if (bound < info.max || !self.world.jobs[j].pending.is_empty())
                && info.trainer.gpu > 0
                && !wanting.contains(&info.trainer)
            {
                wanting.push(info.trainer);
            }
        }
        let mut queue_gpus = Vec::new();
        if let Some(kueue) = &self.kueue {
            // Per queue: GPUs bound, GPUs wanted, whether a GPU job is below its max.
            let mut per_queue = vec![(0i64, 0i64, false); kueue.queue_count()];
            for &j in &self.active {
                let Some(slot) = kueue.queue_of(j).and_then(|q| per_queue.get_mut(q)) else {
                    continue;
                };
                let info = &self.runs[j].info;
                let gpus = self.trace[j].gpus_per_worker;
                let bound = self.world.bound(j) as i32;
                slot.0 += i64::from(bound) * gpus;
                slot.1 += i64::from(info.max.max(0)) * gpus;
                slot.2 |= gpus > 0 && bound < info.max;
            }
            for (q, (used, demand, waiting)) in per_queue.into_iter().enumerate() {
                if waiting && let Some(t) = self.queue_ticks.get_mut(q) {
                    t.add(used, demand);
                }
                queue_gpus.push(QueueGpus {
                    bound: used,
                    admitted: kueue.used_gpus(q),
                });
            }
        }
        let mut stranded = 0i64;
        if !wanting.is_empty() {
            for n in &self.world.nodes {
                if let Some(slot) = state.node(n.id).filter(|s| s.schedulable()) {
                    let free = slot.free();
                    if free.gpu > 0 && !wanting.iter().any(|t| t.fits_in(&free)) {
                        stranded += free.gpu;
                    }
                }
            }
        }
        // Free GPUs of up nodes while a GPU trainer is still pending after the binding pass.
        let gpus_free_blocked = if self.world.pending_requests().any(|r| r.gpu > 0) {
            self.world
                .nodes
                .iter()
                .filter_map(|n| state.node(n.id).filter(|s| n.up && s.schedulable()))
                .map(|s| s.free().gpu.max(0))
                .sum()
        } else {
            0
        };
        self.record(TickSample {
            time_s: now,
            ticks: 1,
            gpus_bound: used.gpu,
            gpus_capacity: cap.gpu,
            gpu_util: ratio(used.gpu, cap.gpu),
            cpu_util: ratio(used.cpu_milli, cap.cpu_milli),
            mem_util: ratio(used.memory, cap.memory),
            queue_len: queue,
            running_jobs: running,
            pending_trainers: self.world.pending_pods() as u32,
            stranded_gpus: stranded as f64,
            gpus_free_blocked: gpus_free_blocked as f64,
            fulfillment_avg: (fulfillment.1 > 0).then(|| fulfillment.0 / f64::from(fulfillment.1)),
            pass_ms: self.pass_ms.last().copied().unwrap_or(0.0),
            queues: queue_gpus,
        });
    }

    /// Keeps a tick's sample, merged into the last one when both fall in one bucket of
    /// `sample_width_s` (never while a bucket is one tick); at [`horizon::MAX_SAMPLES`] samples
    /// the bucket doubles and the kept samples merge pairwise.
    fn record(&mut self, sample: TickSample) {
        if self.sample_width_s > self.scenario.interval_s {
            keep_merged(&mut self.samples, sample, self.sample_width_s);
        } else {
            self.samples.push(sample);
        }
        if self.samples.len() >= horizon::MAX_SAMPLES {
            self.sample_width_s *= 2.0;
            let mut merged = Vec::with_capacity(horizon::MAX_SAMPLES / 2 + 1);
            for s in self.samples.drain(..) {
                keep_merged(&mut merged, s, self.sample_width_s);
            }
            self.samples = merged;
        }
    }
}

/// Appends `sample` to `samples`, or merges it into the last one when both fall in one bucket of
/// `width` seconds.
fn keep_merged(samples: &mut Vec<TickSample>, sample: TickSample, width: f64) {
    let bucket = |t: f64| (t / width).floor();
    match samples.last_mut() {
        Some(last) if bucket(last.time_s) == bucket(sample.time_s) => last.merge(&sample),
        _ => samples.push(sample),
    }
}
