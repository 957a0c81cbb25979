//! The event loop, in simulated seconds.
//!
//! Events, ordered by (time, kind, sequence) so that a run is deterministic: at one instant
//! completions come first (they free resources), then rescale completions, node failures and
//! recoveries, arrivals, and last the planner tick.
//!
//! - **Arrival**: the original operator creates the TrainingJob (phase Creating) and its trainer
//!   Job with `parallelism` = min; the trainer pods are pending.
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

use super::metrics::{HeldBy, JobOutcome, TickSample};
use super::scenario::{Scenario, SchedulerKind};
use super::scheduler::{NAMESPACE, World};
use super::speedup::SpeedupModel;
use super::trace::{TraceJob, replicas};
use crate::api::priority::resolve_priority;
use crate::api::speedup::SpeedupCurve;
use crate::api::{JobKey, Quantity, Resources, TrainingJobPhase, fulfillment_of};
use crate::cluster::JobInfo;
use crate::planner::{self, PlannerConfig, Policy};

pub use super::metrics::RunResult;

/// Bytes in a MiB.
const MIB: i64 = 1 << 20;

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
    pass_ms: Vec<f64>,
    /// Σ nodes spanned × seconds, and Σ seconds, of multi-worker jobs.
    spanned: (f64, f64),
    /// Ticks at which a job had at least one but fewer than min trainers bound.
    partial_gang_ticks: u64,
    /// Job-seconds by what held each live job at its plan's size (see [`HeldBy`]).
    held_by: [f64; HeldBy::COUNT],
    /// Jobs seen so at least once.
    partial_gang_jobs: std::collections::BTreeSet<usize>,
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
        for (i, t) in trace.iter().enumerate() {
            let key = JobKey::new(NAMESPACE, t.id.clone());
            let trainer = Resources::new(
                t.cpus_per_worker * 1000,
                t.mem_mib_per_worker * MIB,
                t.gpus_per_worker,
            );
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
                    Quantity::from_units(t.mem_mib_per_worker * MIB),
                ],
                priority: priority.value,
                priority_class: priority.class,
                created: t.submit_s as i64,
                phase: TrainingJobPhase::Creating,
                stored_parallelism: Some(min),
                last_scale: None,
                speedup: Some(curve),
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
            });
        }
        let config = PlannerConfig {
            policy,
            max_load_desired: scenario.max_load_desired,
            now: 0,
            cooldown_s: scenario.cooldown_s,
            min_marginal_speedup: scenario.min_marginal_speedup,
            ..PlannerConfig::default()
        };
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
            pass_ms: Vec::new(),
            spanned: (0.0, 0.0),
            partial_gang_ticks: 0,
            held_by: [0.0; HeldBy::COUNT],
            partial_gang_jobs: Default::default(),
        };
        for (i, t) in trace.iter().enumerate() {
            engine.push(t.submit_s, Event::Arrival { job: i });
        }
        for (f, fault) in scenario.faults.iter().enumerate() {
            engine.push(fault.at_s, Event::NodeDown { fault: f });
        }
        engine.push(0.0, Event::Tick);
        engine
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
            if let Some(h) = self.scenario.horizon_s
                && now > h
            {
                tracing::info!(
                    policy = self.policy.as_str(),
                    horizon_s = h,
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
            .map(|(t, r)| JobOutcome {
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
            .set_trainer_job(key, Some(Some(run.parallelism)));
        // No pod exists yet: nothing bound can go.
        self.world
            .scale_to(job, run.parallelism.max(0) as u32, now as i64);
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
        self.world.remove_job_pods(job);
        let key = self.world.jobs[job].key.clone();
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

    /// One planner pass, its application, and a scheduling pass. Returns whether anything changed.
    fn tick(&mut self, now: f64) -> bool {
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

        let mut changed = false;
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
                if self.world.scale_to(job, target as u32, now as i64) {
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
        self.samples.push(TickSample {
            time_s: now,
            gpus_bound: used.gpu,
            gpus_capacity: cap.gpu,
            gpu_util: ratio(used.gpu, cap.gpu),
            cpu_util: ratio(used.cpu_milli, cap.cpu_milli),
            mem_util: ratio(used.memory, cap.memory),
            queue_len: queue,
            running_jobs: running,
            pending_trainers: self.world.pending_pods() as u32,
            stranded_gpus: stranded,
            gpus_free_blocked,
            fulfillment_avg: (fulfillment.1 > 0).then(|| fulfillment.0 / f64::from(fulfillment.1)),
            pass_ms: self.pass_ms.last().copied().unwrap_or(0.0),
        });
    }
}
