//! The daemon's main loop: watch into the store, pass on a debounced change or the periodic tick
//! while leader, serve metrics and probes, shut down on request.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kube::Client;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::{Notify, watch};
use tokio::time::MissedTickBehavior;

use super::DaemonError;
use super::actuator::{Actuator, Outcome, Rescale, WriteLimits};
use super::config::{DaemonConfig, UNFILLED_RESERVATIONS};
use super::gate::{EventGate, SharedStore, lock};
use super::http::{self, Health};
use super::leader::{Fence, LeaderTask, Leadership, StopSignal};
use super::metrics;
use super::pass::{PassWork, prepare};
use super::scheduling::{BindOutcome, Binder, Cut, Limits, Memory, Settings};
use super::sizing::{Decision, SizingUpdate};
use super::store::{Kind, Store, WatchEvent};
use super::watch::{KindSelection, WatchError, forbidden, select_kinds, watch_all};
use crate::api::{JobKey, ScaleResults};
use crate::cluster::sync::{SyncReport, watch_error_reason};
use crate::operator::run_operator_in;
use crate::planner::PlannerConfig;
use k8s_openapi::jiff::Timestamp;

/// Runs the daemon until `shutdown` resolves.
pub async fn run(
    client: Client,
    config: DaemonConfig,
    metrics_handle: Option<PrometheusHandle>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DaemonError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    // Three intervals, but never under 15 s: a loaded node must not fail liveness at `--interval 1s`.
    let health = Arc::new(Health::new(
        (config.interval * 3).max(Duration::from_secs(15)),
    ));
    let listener = http::bind(config.metrics_addr)
        .await
        .map_err(|source| DaemonError::Bind {
            addr: config.metrics_addr,
            source,
        })?;
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    }
    let server = tokio::spawn(http::serve(
        listener,
        metrics_handle,
        health.clone(),
        stop_rx.clone(),
    ));

    let kinds = select_kinds(&client, config.kinds.as_deref(), config.discovery_interval).await;
    let mut initial = match config.namespace.as_deref() {
        Some(ns) => Store::for_namespace(ns),
        None => Store::new(),
    };
    initial.expect_job_kinds(&kinds.now);
    let store: Arc<SharedStore> = Arc::new(Mutex::new(Arc::new(initial)));
    let changed = Arc::new(Notify::new());
    let released = Arc::new(Notify::new());
    let watching = tokio::spawn(consume_watch(
        client.clone(),
        (config.namespace.clone(), kinds),
        store.clone(),
        changed.clone(),
        released.clone(),
        health.clone(),
        stop_rx.clone(),
    ));

    // A shutdown request turns `requested` true at once, so a pass under way sees it (its
    // scheduling stage and the actuator's writes stop at it); the loop then ends.
    let (requested_tx, requested) = watch::channel(false);
    let forward = tokio::spawn(async move {
        shutdown.await;
        let _ = requested_tx.send(true);
    });
    let mut shutdown = requested.clone();
    let mut leadership = if config.leader_elect {
        tokio::select! {
            elected = Leadership::elect(client.clone(), &config.lease_name, &config.lease_namespace, &config.identity) => {
                elected.map_err(DaemonError::Lease)?
            }
            _ = shutdown.wait_for(|s| *s) => {
                let _ = stop_tx.send(true);
                forward.abort();
                return Ok(());
            }
        }
    } else {
        Leadership::Always
    };
    metrics::leader(leadership.is_leader());
    let mut operator = operator_task(&client, &config, leadership.fence(), health.sync());
    if let Some(task) = operator.as_mut() {
        task.follow(leadership.is_leader()).await;
        metrics::operator_running(task.is_running());
    }

    let binder = config
        .scheduler_name
        .as_deref()
        .map(|name| Binder::new(client.clone(), name, &config.identity, leadership.fence()));
    let daemon = Daemon {
        binder,
        actuator: Actuator::new(client, &config.identity)
            .with_fence(leadership.fence())
            .with_health(health.clone()),
        store,
        health,
        released,
        stop: requested,
        scheduling: Mutex::new(Memory::default()),
        progress_warned: Mutex::new(HashSet::new()),
        config,
    };
    // Flags refuse a zero interval; a config built in code must not panic either.
    let mut tick = tokio::time::interval(daemon.config.interval.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut pending_since: Option<tokio::time::Instant> = None;
    loop {
        let deadline = pending_since.map(|t| t + daemon.config.debounce);
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            _ = leadership.changed() => {
                let leader = leadership.is_leader();
                metrics::leader(leader);
                tracing::info!(leader, "leadership changed");
                if let Some(task) = operator.as_mut() {
                    task.follow(leader).await;
                    metrics::operator_running(task.is_running());
                }
                if leader {
                    pending_since.get_or_insert_with(tokio::time::Instant::now);
                }
            }
            _ = tick.tick() => {
                pending_since = None;
                if let Some(task) = operator.as_mut() {
                    // Also restarts an operator that ended on its own while leader.
                    task.follow(leadership.is_leader()).await;
                    metrics::operator_running(task.is_running());
                }
                daemon.pass(leadership.is_leader()).await;
            }
            _ = changed.notified(), if pending_since.is_none() => {
                pending_since = Some(tokio::time::Instant::now());
            }
            _ = sleep_until(deadline), if deadline.is_some() => {
                pending_since = None;
                daemon.pass(leadership.is_leader()).await;
            }
        }
    }

    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    // The operator stops acting before the lease is handed over.
    if let Some(task) = operator.as_mut() {
        task.stop().await;
        metrics::operator_running(false);
    }
    // The actuator's and the operator's fences go before the Lease does.
    drop(daemon);
    drop(operator);
    leadership.release().await;
    forward.abort();
    let _ = tokio::time::timeout(Duration::from_secs(5), watching).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    Ok(())
}

/// The operator as a leader-only task, when configured and not a dry run.
///
/// Losing the lease drops the operator at once (in-flight reconciles cancelled, no further
/// writes); a shutdown while leader stops it gracefully.
fn operator_task(
    client: &Client,
    config: &DaemonConfig,
    fence: Fence,
    sync: &SyncReport,
) -> Option<LeaderTask> {
    let operator = config.operator.clone()?;
    if config.dry_run {
        tracing::info!(
            "dry run: the operator is not started (it would create ReplicaSets, Jobs, ConfigMaps and PodGroups and write TrainingJob status)"
        );
        return None;
    }
    let client = client.clone();
    let namespace = config.namespace.clone();
    let sync = sync.clone();
    Some(LeaderTask::new("operator", move |stop: StopSignal| {
        let (client, operator, namespace) = (client.clone(), operator.clone(), namespace.clone());
        let (fence, sync) = (fence.clone(), sync.clone());
        async move {
            let run = run_operator_in(client, operator, namespace, &sync, stop);
            tokio::select! {
                biased;
                _ = fence.lost() => tracing::warn!("leader lease lost: operator stopped at once"),
                result = run => {
                    if let Err(e) = result {
                        tracing::error!(error = %e, "operator failed");
                    }
                }
            }
        }
    }))
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Feeds the watch streams into the store until stopped. Events that arrive while a pass plans
/// on a snapshot wait in an [`EventGate`] and are applied as soon as the pass lets go
/// (`released`), so an event's lag is at most the rest of that pass.
async fn consume_watch(
    client: Client,
    (namespace, kinds): (Option<String>, KindSelection),
    store: Arc<SharedStore>,
    changed: Arc<Notify>,
    released: Arc<Notify>,
    health: Arc<Health>,
    mut stop: watch::Receiver<bool>,
) {
    let started = Instant::now();
    let mut expected = vec![Kind::Node, Kind::Pod, Kind::Job, Kind::PriorityClass];
    if namespace.is_some() {
        expected.push(Kind::ForeignPod);
    }
    expected.extend(
        kinds
            .now
            .iter()
            .filter(|k| k.has_own_watch())
            .map(|k| Kind::JobObject(*k)),
    );
    for kind in expected {
        health.sync().expect(kind.resource(), started);
    }
    let mut watches = watch_all(client, namespace.as_deref(), &kinds);
    let mut gate = EventGate::default();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            _ = released.notified(), if !gate.is_empty() => {}
            next = watches.events.recv() => match next {
                None => break,
                Some(item) => gate.hold(item),
            },
        }
        let applied = gate.apply(&store, |store, item| {
            apply_watch_item(store, item, &changed, &health)
        });
        if let Some(applied) = applied
            && applied.ready != applied.was_ready
        {
            tracing::info!("caches synced");
            health.set_ready(applied.ready);
            metrics::ready(applied.ready);
        }
    }
}

/// Applies one watch event or error to the store.
fn apply_watch_item(
    store: &mut Store,
    item: Result<WatchEvent, WatchError>,
    changed: &Notify,
    health: &Health,
) {
    match item {
        Ok(event) => {
            health.watch_delivered();
            let (kind, listed) = event.kind_and_listed();
            if listed {
                health.sync().listed(kind.resource(), Instant::now());
            } else {
                health.sync().delivered(kind.resource(), Instant::now());
            }
            if let Some(kind) = event.restarted_kind()
                && store.listed_kind(kind)
            {
                metrics::watch_restart(kind.as_str());
                tracing::info!(kind = kind.as_str(), "watch restarted; relisting");
            }
            if store.handle(event) {
                changed.notify_one();
            }
        }
        Err(e) if e.dropped => {
            // A kind discovery found and the server refuses: the others go on without it. A
            // 403 (RBAC) keeps readiness failing, naming it, until the kind lists again; a 404
            // (its CRD was removed) is a kind no longer served.
            let reason = watch_error_reason(&e.error);
            if forbidden(&e.error) {
                health
                    .sync()
                    .failed(e.kind.resource(), reason.clone(), Instant::now());
            } else {
                health.sync().forget(e.kind.resource());
            }
            store.drop_kind(e.kind);
            metrics::watch_error(e.kind.as_str());
            tracing::warn!(kind = e.kind.as_str(), resource = e.kind.resource(), %reason, "watch refused; the kind is not sized until discovery finds it again");
            changed.notify_one();
        }
        Err(e) => {
            health.watch_failed();
            let reason = watch_error_reason(&e.error);
            health
                .sync()
                .failed(e.kind.resource(), reason.clone(), Instant::now());
            // No pass until this kind has re-listed: the server may hold other contents now.
            store.begin_relist(e.kind);
            metrics::watch_error(e.kind.as_str());
            tracing::warn!(kind = e.kind.as_str(), resource = e.kind.resource(), %reason, "watch error; re-listing after backoff");
        }
    }
}

struct Daemon {
    actuator: Actuator,
    /// The scheduler role's writer; `None` when it is off.
    binder: Option<Binder>,
    store: Arc<SharedStore>,
    health: Arc<Health>,
    /// Told when a pass lets go of its snapshot (held watch events may then be applied).
    released: Arc<Notify>,
    /// Turns true when shutdown is requested (a pass under way stops writing).
    stop: watch::Receiver<bool>,
    /// What the scheduler role's last pass left for the next (gang waits, unfilled positions).
    scheduling: Mutex<Memory>,
    /// Jobs whose ignored progress report was warned about, so each is warned once.
    progress_warned: Mutex<HashSet<JobKey>>,
    config: DaemonConfig,
}

/// Seconds since the epoch (0 if the clock is before it).
fn unix_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Daemon {
    /// Gives back the held room the pass released (room gone, timed-out gangs, positions whose
    /// pod never came), then holds the room of every planned position (pods about to be bound,
    /// and pods not created yet) in the store, so the next pass plans around it.
    fn hold_reservations(&self, work: &PassWork, now: i64) {
        let a = &work.assignments;
        if a.reserves.is_empty() && a.unreserve.is_empty() {
            return;
        }
        let expires = now.saturating_add(self.config.reservation_ttl.as_secs() as i64);
        let mut store = lock(&self.store);
        let state = Arc::make_mut(&mut store).state_mut();
        for (job, index) in &a.unreserve {
            state.unreserve(job, *index);
        }
        for r in &a.reserves {
            state.reserve(&r.job, r.index, &r.node, r.requests, expires, r.assumed);
        }
    }

    /// The scheduler role's settings for a pass at `now`, with what the last pass left.
    fn scheduler_settings(&self, now: i64) -> Option<Settings> {
        let name = self.config.scheduler_name.as_deref()?;
        let ttl = self.config.reservation_ttl.as_secs() as i64;
        let memory = self
            .scheduling
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        Some(Settings {
            name: name.to_string(),
            now,
            gang_timeout: self.config.gang_timeout.as_secs() as i64,
            gang_back_off: ttl,
            unfilled_limit: ttl.saturating_mul(i64::from(UNFILLED_RESERVATIONS)),
            memory,
        })
    }

    /// Logs a warning for each job whose progress report is newly ignored for a reason that
    /// warns (stale; malformed ones are warned with the job's spec warnings).
    fn warn_progress(&self, ignored: &[crate::cluster::IgnoredProgress]) {
        let mut warned = self
            .progress_warned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now: HashSet<JobKey> = ignored
            .iter()
            .filter(|i| i.warning.is_some())
            .map(|i| i.key.clone())
            .collect();
        for i in ignored {
            if let Some(w) = &i.warning
                && !warned.contains(&i.key)
            {
                tracing::warn!(job = %i.key, reason = i.why.reason(), warning = %w, "progress report ignored");
            }
        }
        *warned = now;
    }

    /// Keeps what this pass's scheduler role leaves for the next one.
    fn remember_scheduling(&self, memory: Memory) {
        *self
            .scheduling
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = memory;
    }

    /// The bounds of one of this pass's job write stages, starting now.
    fn write_limits(&self) -> WriteLimits {
        WriteLimits::from_now(self.config.apply_timeout, self.config.write_deadline)
    }

    /// A rescale that did not happen creates no pods: the positions it reserved go back.
    fn release_failed_growth(&self, work: &PassWork, outcomes: &[(JobKey, Outcome)]) {
        if work.assignments.reserves.is_empty() {
            return;
        }
        let failed = growth_not_applied(&work.rescales, outcomes);
        if failed.is_empty() {
            return;
        }
        let mut store = lock(&self.store);
        let state = Arc::make_mut(&mut store).state_mut();
        for r in failed {
            state.unreserve_from(&r.key, r.current.max(0) as u32);
        }
    }

    /// The scheduler role's writes, bounded by `--scheduling-deadline` and stopped at Lease loss
    /// or shutdown: binds (one that failed or was not sent gives its room back; the next pass
    /// retries from fresh state), then the unschedulable pods' condition and Event (only those
    /// whose condition changes, a few at a time), the gated pods' condition, then the timed-out
    /// gangs' Events.
    async fn schedule(&self, work: &PassWork) {
        let a = &work.assignments;
        for t in &a.timeouts {
            metrics::gang_timeout();
            tracing::warn!(job = %t.job, message = %t.message, "gang timed out; its room is released");
        }
        let Some(binder) = &self.binder else {
            return;
        };
        let changed = a.unschedulable.iter().filter(|u| !u.unchanged).count();
        if a.binds.is_empty() && changed == 0 && a.timeouts.is_empty() && work.gated.is_empty() {
            return;
        }
        let limits = Limits {
            until: tokio::time::Instant::now() + self.config.scheduling_deadline,
            stop: self.stop.clone(),
        };
        let (outcomes, mut cut) = binder.bind_all(&a.binds, &limits).await;
        let (mut bound, mut failed, mut unknown, mut not_sent) = (0, 0, 0, 0);
        let mut give_back = Vec::new();
        for (b, outcome) in a.binds.iter().zip(&outcomes) {
            match outcome {
                BindOutcome::Bound => {
                    bound += 1;
                    metrics::bind_latency(b.seen.elapsed());
                }
                // It may be bound: its room stays held (as sent) until the watch shows it or the
                // reservation lapses.
                BindOutcome::Unknown => unknown += 1,
                other => {
                    match other {
                        BindOutcome::Failed(_) => {
                            failed += 1;
                            tracing::warn!(pod = %format!("{}/{}", b.pod.0, b.pod.1), node = %b.node, outcome = ?other, "bind failed; retried next pass");
                        }
                        BindOutcome::NotSent => not_sent += 1,
                        _ => {}
                    }
                    if let Some(position) = &b.position {
                        give_back.push(position.clone());
                    }
                }
            }
        }
        if !give_back.is_empty() {
            let mut store = lock(&self.store);
            let state = Arc::make_mut(&mut store).state_mut();
            for (job, index) in &give_back {
                state.unreserve(job, *index);
            }
        }
        let mut reported = 0;
        if cut.is_none() {
            (reported, cut) = binder
                .report_all(&a.unschedulable, Timestamp::now(), &limits)
                .await;
        }
        if cut.is_none() {
            cut = binder
                .report_gated_all(&work.gated, Timestamp::now(), &limits)
                .await;
        }
        for t in &a.timeouts {
            if cut.is_some() {
                break;
            }
            let uid = lock(&self.store)
                .training_job(&t.job)
                .and_then(|m| m.uid.clone());
            cut = binder.report_gang_timeout(t, uid, &limits).await;
        }
        if let Some(why) = cut {
            metrics::scheduling_cut(why.as_str());
            if why == Cut::Shutdown {
                tracing::info!("scheduling stage stopped for shutdown");
            } else {
                tracing::warn!(
                    why = why.as_str(),
                    "scheduling stage cut short; the next pass goes on"
                );
            }
        }
        let reserved = lock(&self.store).state().reservations().count();
        metrics::scheduling(reserved, a.unschedulable.len());
        tracing::info!(
            bound,
            failed,
            unknown,
            not_sent,
            reserved,
            unschedulable = a.unschedulable.len(),
            reported,
            "bindings"
        );
    }

    /// Writes the sizing conditions that changed. A job rescaled this pass is left to the next
    /// pass, which decides it again at its new size; after a failed rescale the conditions are
    /// written at the resourceVersion the rescale's own writes left.
    async fn write_sizing(&self, work: &PassWork, outcomes: &[(JobKey, Outcome)]) {
        let mut writes = Vec::new();
        {
            let mut store = lock(&self.store);
            let store = Arc::make_mut(&mut store);
            for (u, step) in sizing_steps(&work.sizing, &work.rescales, outcomes) {
                match step {
                    SizingStep::Leave => {}
                    SizingStep::Explained => store.mark_explained(&u.key, u.decision, None),
                    SizingStep::Write(at) => writes.push((u, at)),
                }
            }
        }
        if writes.is_empty() {
            return;
        }
        let written = self
            .actuator
            .write_sizing_all(&writes, self.write_limits(), &self.stop)
            .await;
        tracing::info!(
            written = written.len(),
            tried = writes.len(),
            "sizing conditions"
        );
        let decisions: HashMap<&JobKey, (Decision, Option<&str>)> = writes
            .iter()
            .map(|(u, at)| (&u.key, (u.decision, at.as_deref())))
            .collect();
        let mut store = lock(&self.store);
        let store = Arc::make_mut(&mut store);
        for (key, conditions) in written {
            if let Some((decision, at)) = decisions.get(&key) {
                store.mark_explained(&key, *decision, Some((conditions, *at)));
            }
        }
    }

    fn planner_config(&self) -> PlannerConfig {
        let now = unix_seconds();
        PlannerConfig {
            policy: self.config.policy,
            max_load_desired: self.config.max_load_desired,
            now,
            cooldown_s: self.config.cooldown.as_secs() as i64,
            min_marginal_speedup: self.config.min_marginal_speedup,
            progress_min_marginal_speedup: self.config.progress_min_marginal_speedup,
            progress_spare_min_marginal_speedup: self.config.progress_spare_min_marginal_speedup,
            starvation_bound_s: self.config.starvation_bound.as_secs() as i64,
            ..PlannerConfig::default()
        }
    }

    /// One pass: observe always; plan and act only when synced and leader.
    async fn pass(&self, leader: bool) {
        let started = Instant::now();
        self.health.progressed();
        // Set on every pass so the exporter's idle timeout never drops them.
        metrics::leader(leader);
        metrics::caches(self.health.sync(), Instant::now());
        // The lock is held only to take a snapshot (an `Arc`): events keep flowing while the pass
        // plans on it off the async runtime.
        let now = unix_seconds();
        let snapshot = {
            let mut store = lock(&self.store);
            // Lapsed reservations give their room back before the pass plans.
            if store
                .state()
                .reservations()
                .any(|(_, _, r)| r.expires <= now)
            {
                Arc::make_mut(&mut store)
                    .state_mut()
                    .expire_reservations(now);
            }
            metrics::ready(store.synced());
            if !store.synced() || store.relisting() {
                tracing::debug!("pass skipped: caches not synced");
                return;
            }
            // The jobs' progress estimates at this pass's `now` (only with reports to read or
            // estimates to clear, so a pass without any copies nothing).
            if store.state().job_slots().any(|(_, s)| {
                s.progress.is_some() || s.info.as_ref().is_some_and(|i| i.progress.is_some())
            }) {
                let stale_after = self.config.progress_stale_after.as_secs() as i64;
                let state = Arc::make_mut(&mut store).state_mut();
                let ignored = state.estimate_progress(now, stale_after);
                let estimated = state
                    .jobs()
                    .filter(|(_, _, i)| i.progress.is_some())
                    .count();
                self.warn_progress(&ignored);
                metrics::progress(&ignored, estimated);
            } else {
                metrics::progress(&[], 0);
            }
            Arc::clone(&store)
        };
        let config = self.planner_config();
        let scheduler = self.scheduler_settings(now);
        let planned = tokio::task::spawn_blocking(move || {
            metrics::observe_state(snapshot.state());
            metrics::skipped_jobs(&snapshot.skipped_counts());
            leader.then(|| prepare(&snapshot, &config, scheduler.as_ref()))
        })
        .await;
        self.released.notify_one();
        let work: PassWork = match planned {
            Ok(Some(work)) => work,
            Ok(None) => {
                // Another replica schedules: what this one waited on is stale.
                self.remember_scheduling(Memory::default());
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "the planning task failed");
                return;
            }
        };
        self.remember_scheduling(work.assignments.memory.clone());
        metrics::observe_plan(&work.plan);
        for warning in &work.plan.warnings {
            tracing::debug!(%warning, "planner");
        }
        for job in &work.waiting {
            tracing::debug!(%job, "no trainer Job yet; not rescaled");
        }
        for job in &work.invalid {
            for problem in &job.problems {
                tracing::warn!(job = %job.key, field = %problem.field, problem = %problem.problem, "job has errors; not planned");
            }
            if !self.config.dry_run {
                if !self.actuator.may_write() {
                    break;
                }
                self.actuator.report_invalid(job).await;
            }
            Arc::make_mut(&mut lock(&self.store)).mark_reported(&job.key, &job.resource_version);
        }
        for job in &work.left_alone {
            for problem in &job.problems {
                tracing::info!(job = %job.key, field = %problem.field, why = %problem.problem, "left alone");
            }
            if !self.config.dry_run {
                if !self.actuator.may_write() {
                    break;
                }
                self.actuator.report_left_alone(job).await;
            }
            Arc::make_mut(&mut lock(&self.store)).mark_reported(&job.key, &job.resource_version);
        }
        for job in &work.warned {
            for problem in &job.problems {
                tracing::warn!(job = %job.key, field = %problem.field, problem = %problem.problem, "planned with a warning");
            }
            if !self.config.dry_run {
                if !self.actuator.may_write() {
                    break;
                }
                self.actuator.report_warnings(job).await;
            }
            Arc::make_mut(&mut lock(&self.store)).mark_warned(job);
        }
        if self.config.dry_run {
            for r in &work.rescales {
                tracing::info!(job = %r.key, current = r.current, target = r.target, reason = ?r.reason, "dry run: would rescale");
            }
            for b in &work.assignments.binds {
                tracing::info!(pod = %format!("{}/{}", b.pod.0, b.pod.1), node = %b.node, "dry run: would bind");
            }
            for t in &work.assignments.timeouts {
                tracing::info!(job = %t.job, message = %t.message, "dry run: would release a timed-out gang's room");
            }
            let mut store = lock(&self.store);
            let store = Arc::make_mut(&mut store);
            for u in &work.sizing {
                if u.write {
                    for d in &u.desired {
                        tracing::info!(job = %u.key, condition = d.type_, status = %d.status, reason = %d.reason, message = %d.message, "dry run: would set");
                    }
                }
                store.mark_explained(&u.key, u.decision, None);
            }
        } else {
            self.hold_reservations(&work, now);
            let outcomes = self
                .actuator
                .apply_all(&work.rescales, self.write_limits(), &self.stop)
                .await;
            self.release_failed_growth(&work, &outcomes);
            self.schedule(&work).await;
            self.write_sizing(&work, &outcomes).await;
        }
        metrics::pass_duration(started.elapsed());
    }
}

/// The growing rescales of a pass that did not happen: failed, of unknown result, or never
/// started (no outcome). One lookup per rescale: a first pass on a large cluster may grow tens of
/// thousands of jobs.
fn growth_not_applied<'a>(
    rescales: &'a [Rescale],
    outcomes: &[(JobKey, Outcome)],
) -> Vec<&'a Rescale> {
    let applied: HashSet<&JobKey> = outcomes
        .iter()
        .filter(|(_, o)| o.result == ScaleResults::True)
        .map(|(key, _)| key)
        .collect();
    rescales
        .iter()
        .filter(|r| r.target > r.current && !applied.contains(&r.key))
        .collect()
}

/// What a pass does with one job's sizing update.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SizingStep {
    /// Nothing this pass: its rescale was applied (the next pass decides at the new size), or
    /// not started (the stage's deadline, shutdown, a lost Lease: its conditions would describe
    /// a resize that has not happened).
    Leave,
    /// The object says so already: only remembered as explained.
    Explained,
    /// Written at this resourceVersion (the one a failed rescale's own writes left, if any).
    Write(Option<String>),
}

/// Each sizing update of a pass with what to do with it, given the pass's rescales and their
/// outcomes.
fn sizing_steps<'w>(
    sizing: &'w [SizingUpdate],
    rescales: &[Rescale],
    outcomes: &[(JobKey, Outcome)],
) -> Vec<(&'w SizingUpdate, SizingStep)> {
    let rescaled: HashMap<&JobKey, &Outcome> = outcomes.iter().map(|(k, o)| (k, o)).collect();
    let unsent: HashSet<&JobKey> = rescales
        .iter()
        .map(|r| &r.key)
        .filter(|key| !rescaled.contains_key(key))
        .collect();
    sizing
        .iter()
        .map(|u| {
            let step = match rescaled.get(&u.key) {
                None if unsent.contains(&u.key) => SizingStep::Leave,
                Some(o) if o.result == ScaleResults::True => SizingStep::Leave,
                _ if !u.write => SizingStep::Explained,
                Some(o) => {
                    SizingStep::Write(o.object_version.clone().or(u.resource_version.clone()))
                }
                None => SizingStep::Write(u.resource_version.clone()),
            };
            (u, step)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::Reason;

    fn rescale(name: &str, current: i32, target: i32) -> Rescale {
        Rescale {
            key: JobKey::new("ml", name),
            uid: None,
            resource_version: None,
            trainer_job: None,
            size_at: None,
            current,
            target,
            reason: Reason::ScaleUp,
        }
    }

    fn outcome(name: &str, result: ScaleResults) -> (JobKey, Outcome) {
        let outcome = Outcome {
            result,
            reason: String::new(),
            vanished: false,
            object_version: None,
        };
        (JobKey::new("ml", name), outcome)
    }

    /// Growth that failed, whose result is unknown or that was never started gives its
    /// positions back; applied growth and shrinks do not.
    #[test]
    fn growth_not_applied_is_failed_unknown_or_unstarted_growth() {
        let rescales = [
            rescale("applied", 2, 4),
            rescale("failed", 2, 4),
            rescale("unknown", 2, 4),
            rescale("unstarted", 2, 4),
            rescale("shrunk", 4, 2),
            rescale("shrink-failed", 4, 2),
        ];
        let outcomes = [
            outcome("applied", ScaleResults::True),
            outcome("failed", ScaleResults::False),
            outcome("unknown", ScaleResults::Unknown),
            outcome("shrunk", ScaleResults::True),
            outcome("shrink-failed", ScaleResults::False),
        ];
        let names: Vec<&str> = growth_not_applied(&rescales, &outcomes)
            .iter()
            .map(|r| &*r.key.name)
            .collect();
        assert_eq!(names, ["failed", "unknown", "unstarted"]);
    }

    fn update(name: &str, write: bool) -> SizingUpdate {
        SizingUpdate {
            key: JobKey::new("ml", name),
            decision: Decision {
                current: 2,
                target: 4,
                min: 1,
                max: 8,
                reason: Reason::ScaleUp,
            },
            resource_version: Some("7".into()),
            existing: Vec::new(),
            desired: Vec::new(),
            write,
        }
    }

    /// A job whose rescale was applied or not started gets no sizing write this pass; after a
    /// failed rescale the write goes at the version the rescale's writes left; a job not
    /// rescaled is written, or only remembered when its object says so already.
    #[test]
    fn sizing_steps_leave_applied_and_unstarted_rescales() {
        let sizing = [
            update("applied", true),
            update("unstarted", true),
            update("failed", true),
            update("unchanged", true),
            update("said", false),
        ];
        let rescales = [
            rescale("applied", 2, 4),
            rescale("unstarted", 2, 4),
            rescale("failed", 2, 4),
        ];
        let mut failed = outcome("failed", ScaleResults::False);
        failed.1.object_version = Some("9".into());
        let outcomes = [outcome("applied", ScaleResults::True), failed];
        let steps: Vec<(&str, SizingStep)> = sizing_steps(&sizing, &rescales, &outcomes)
            .into_iter()
            .map(|(u, step)| (&*u.key.name, step))
            .collect();
        assert_eq!(
            steps,
            [
                ("applied", SizingStep::Leave),
                ("unstarted", SizingStep::Leave),
                ("failed", SizingStep::Write(Some("9".into()))),
                ("unchanged", SizingStep::Write(Some("7".into()))),
                ("said", SizingStep::Explained),
            ]
        );
    }

    /// At a first pass's size (every one of 50,000 jobs grows), each rescale is looked up once:
    /// the answer names exactly the jobs whose growth did not happen.
    #[test]
    fn growth_not_applied_at_fifty_thousand_jobs() {
        let rescales: Vec<Rescale> = (0..50_000)
            .map(|i| rescale(&format!("job-{i:05}"), 8, 16))
            .collect();
        let outcomes: Vec<(JobKey, Outcome)> = (0..50_000)
            .filter(|i| i % 1_000 != 0)
            .map(|i| outcome(&format!("job-{i:05}"), ScaleResults::True))
            .collect();
        let missing = growth_not_applied(&rescales, &outcomes);
        assert_eq!(missing.len(), 50);
        assert!(missing.iter().all(|r| r.key.name.ends_with("000")));
    }
}
