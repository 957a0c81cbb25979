//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager), or none.
//!
//! kube-lease-manager keeps saying "leader" while its renewals fail, so leadership here also
//! needs a renewal of our Lease, seen by a watch of that Lease, less than [`RENEW_DEADLINE`] ago.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Seconds a lease stays valid after its last renewal.
const LEASE_DURATION_S: u64 = 15;
/// Seconds before expiry the holder renews: every `LEASE_DURATION_S - LEASE_GRACE_S` = 5 s, so a
/// failed renewal and its retries (kube-lease-manager backs off 1-2 s, then 2-4 s) fit within
/// [`RENEW_DEADLINE`].
const LEASE_GRACE_S: u64 = 10;
/// How long this replica acts as leader after the last successful renewal of its Lease, like
/// client-go's `RenewDeadline`. kube-lease-manager never gives up leadership while renewals fail;
/// stopping 10 s after the last renewal leaves 5 s, before the Lease expires (15 s) and another
/// replica may take it, for clock skew and for in-flight work to stop.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// First wait before a failed Lease watch is started afresh (doubling, reset by a full list).
const WATCH_BACKOFF: Duration = Duration::from_millis(500);
/// Longest wait between Lease watch restarts: well under [`RENEW_DEADLINE`].
const MAX_WATCH_BACKOFF: Duration = Duration::from_secs(4);

/// Whether this replica may act.
pub enum Leadership {
    /// No election: always the leader.
    Always,
    Lease {
        /// Leader while kube-lease-manager says so and within [`RENEW_DEADLINE`] of a renewal.
        state: watch::Receiver<bool>,
        /// Ends the deadline task, which holds kube-lease-manager's only state receiver.
        stop: oneshot::Sender<()>,
        deadline: JoinHandle<()>,
        renewals: JoinHandle<()>,
        manager: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
    },
}

impl Leadership {
    /// Starts competing for the lease `name` in `namespace` as `identity`.
    pub async fn elect(
        client: Client,
        name: &str,
        namespace: &str,
        identity: &str,
    ) -> Result<Self, LeaseManagerError> {
        let manager = LeaseManagerBuilder::new(client.clone(), name)
            .with_namespace(namespace)
            .with_identity(identity)
            .with_duration(LEASE_DURATION_S)
            .with_grace(LEASE_GRACE_S)
            .with_field_manager("trainscale")
            .build()
            .await?;
        // Watching before competing, so the acquisition is seen as an event.
        let (renewed_tx, renewed) = watch::channel(None);
        let renewals = tokio::spawn(watch_renewals(
            Api::namespaced(client, namespace),
            name.to_string(),
            identity.to_string(),
            renewed_tx,
        ));
        let (leads, manager) = manager.watch().await;
        let (state_tx, state) = watch::channel(false);
        let (stop, stop_rx) = oneshot::channel();
        let deadline = tokio::spawn(enforce_deadline(
            leads,
            renewed,
            state_tx,
            stop_rx,
            RENEW_DEADLINE,
        ));
        Ok(Leadership::Lease {
            state,
            stop,
            deadline,
            renewals,
            manager,
        })
    }

    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        match self {
            Leadership::Always => true,
            Leadership::Lease { state, .. } => *state.borrow(),
        }
    }

    /// A fence for writes: held while this replica leads.
    pub fn fence(&self) -> Fence {
        match self {
            Leadership::Always => Fence::Always,
            Leadership::Lease { state, .. } => Fence::Lease(state.clone()),
        }
    }

    /// Resolves when leadership changes; never, without election.
    pub async fn changed(&mut self) {
        match self {
            Leadership::Always => std::future::pending().await,
            Leadership::Lease { state, .. } => {
                if state.changed().await.is_err() {
                    // The deadline task ended; nothing more will change.
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// Releases the lease (if held) so another replica can take over at once. Fences still
    /// around turn not held first.
    pub async fn release(self) {
        if let Leadership::Lease {
            state,
            stop,
            deadline,
            renewals,
            manager,
        } = self
        {
            drop(state);
            let _ = stop.send(());
            // Once the deadline task has dropped its receiver, kube-lease-manager releases.
            if let Err(e) = deadline.await {
                tracing::warn!(error = %e, "the lease deadline task failed");
            }
            renewals.abort();
            match tokio::time::timeout(Duration::from_secs(5), manager).await {
                Ok(Ok(Ok(_))) => tracing::info!("released the leader lease"),
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "could not release the leader lease"),
                Ok(Err(e)) => tracing::warn!(error = %e, "the lease task failed"),
                Err(_) => tracing::warn!("timed out releasing the leader lease"),
            }
        }
    }
}

/// Whether to act at `now`, and until when unless renewed again: while `leads` (what
/// kube-lease-manager says) and the last renewal, `renewed`, is less than `deadline` ago.
fn acting(
    leads: bool,
    renewed: Option<Instant>,
    now: Instant,
    deadline: Duration,
) -> (bool, Option<Instant>) {
    match renewed.and_then(|at| at.checked_add(deadline)) {
        Some(until) if leads && now < until => (true, Some(until)),
        _ => (false, None),
    }
}

/// Publishes on `out` whether this replica may act ([`acting`]), waking at the deadline; logs a
/// warning when the deadline ends leadership. Ends on `stop` (or its sender dropped), when `out`
/// has no receiver left, or when kube-lease-manager's task ended; publishes `false` then.
async fn enforce_deadline(
    mut leads: watch::Receiver<bool>,
    mut renewed: watch::Receiver<Option<Instant>>,
    out: watch::Sender<bool>,
    mut stop: oneshot::Receiver<()>,
    deadline: Duration,
) {
    let mut renewals_open = true;
    let mut lapsed = false;
    loop {
        let lead = *leads.borrow_and_update();
        let last = *renewed.borrow_and_update();
        let (act, until) = acting(lead, last, Instant::now(), deadline);
        let was = *out.borrow();
        if was && !act && lead {
            lapsed = true;
            let since_renewal = last.map(|at| at.elapsed()).unwrap_or_default();
            tracing::warn!(
                ?since_renewal,
                ?deadline,
                "no successful Lease renewal within the renew deadline: no longer acting as leader"
            );
        } else if act && lapsed {
            lapsed = false;
            tracing::info!("the Lease was renewed again: acting as leader");
        }
        out.send_if_modified(|v| std::mem::replace(v, act) != act);
        tokio::select! {
            biased;
            _ = &mut stop => break,
            _ = out.closed() => break,
            changed = leads.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            changed = renewed.changed(), if renewals_open => {
                if changed.is_err() {
                    renewals_open = false;
                }
            }
            _ = sleep_until(until) => {}
        }
    }
    out.send_if_modified(|v| std::mem::replace(v, false));
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The `renewTime` of `lease` when it is the Lease `name`, held by `identity`, and newer than
/// `last` (the previous one seen).
fn renewal(
    lease: &Lease,
    name: &str,
    identity: &str,
    last: Option<Timestamp>,
) -> Option<Timestamp> {
    if lease.metadata.name.as_deref() != Some(name) {
        return None;
    }
    let spec = lease.spec.as_ref()?;
    if spec.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    let at = spec.renew_time.as_ref()?.0;
    last.is_none_or(|last| at > last).then_some(at)
}

/// Watches the Lease `name` (field-selected) and publishes on `renewed` the local time at which
/// each [`renewal`] by `identity` was seen. A failed watch is started afresh (it re-lists) after
/// a backoff. Ends when `renewed` has no receiver.
async fn watch_renewals(
    api: Api<Lease>,
    name: String,
    identity: String,
    renewed: watch::Sender<Option<Instant>>,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut last: Option<Timestamp> = None;
    let mut backoff = WATCH_BACKOFF;
    loop {
        let mut stream = watcher(api.clone(), config.clone()).boxed();
        loop {
            let item = tokio::select! {
                _ = renewed.closed() => return,
                item = stream.next() => item,
            };
            match item {
                Some(Ok(Event::Apply(lease) | Event::InitApply(lease))) => {
                    if let Some(at) = renewal(&lease, &name, &identity, last) {
                        last = Some(at);
                        renewed.send_replace(Some(Instant::now()));
                        tracing::debug!(renew_time = %at, "Lease renewal seen");
                    }
                }
                Some(Ok(Event::InitDone)) => backoff = WATCH_BACKOFF,
                Some(Ok(Event::Init | Event::Delete(_))) => {}
                Some(Err(e)) => {
                    tracing::warn!(error = %e, lease = %name, "Lease watch failed; restarting after backoff");
                    break;
                }
                None => break,
            }
        }
        tokio::select! {
            _ = renewed.closed() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_WATCH_BACKOFF);
    }
}

/// Whether writes are still allowed: a deposed leader issues no further writes. Every write
/// batch checks [`Fence::held`] before each write and is cancelled when [`Fence::lost`] resolves.
#[derive(Debug, Clone)]
pub enum Fence {
    /// No election: always held.
    Always,
    /// Held while this replica leads (see [`Leadership`]).
    Lease(watch::Receiver<bool>),
}

impl Fence {
    /// A fence whose holding follows `state` (tests, and [`Leadership::fence`]).
    pub fn following(state: watch::Receiver<bool>) -> Self {
        Fence::Lease(state)
    }

    /// Whether this replica still leads.
    pub fn held(&self) -> bool {
        match self {
            Fence::Always => true,
            Fence::Lease(state) => *state.borrow(),
        }
    }

    /// Resolves once this replica does not lead (at once when it does not now); never without
    /// election. Leadership whose task ended counts as lost.
    pub async fn lost(&self) {
        match self {
            Fence::Always => std::future::pending().await,
            Fence::Lease(state) => {
                let mut state = state.clone();
                let _ = state.wait_for(|held| !*held).await;
            }
        }
    }
}

/// How long a leader-only task may take to stop gracefully before it is aborted.
pub const TASK_STOP_GRACE: Duration = Duration::from_secs(5);

/// A future that resolves when a [`LeaderTask`] is told to stop (or its owner goes away).
pub type StopSignal = Pin<Box<dyn Future<Output = ()> + Send>>;

type Starter = Box<dyn Fn(StopSignal) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Work that runs only while this replica leads (the operator in `trainscale run`): started
/// when leadership is gained, stopped when it is lost or at shutdown, restarted (on the next
/// [`LeaderTask::follow`]) if it ended on its own while still leader.
///
/// Stopping first resolves the task's [`StopSignal`] (a graceful stop: the operator finishes its
/// in-flight reconciles) and aborts the task if it has not ended within [`TASK_STOP_GRACE`]
/// (or the grace given to [`LeaderTask::with_grace`]).
pub struct LeaderTask {
    name: &'static str,
    start: Starter,
    grace: Duration,
    running: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl LeaderTask {
    /// A task named `name` (for logs) whose future `start` builds from its stop signal.
    pub fn new<F, Fut>(name: &'static str, start: F) -> Self
    where
        F: Fn(StopSignal) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        LeaderTask {
            name,
            start: Box::new(move |stop| Box::pin(start(stop))),
            grace: TASK_STOP_GRACE,
            running: None,
        }
    }

    /// Replaces the graceful-stop bound ([`TASK_STOP_GRACE`]).
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Whether the task is running now.
    pub fn is_running(&self) -> bool {
        self.running
            .as_ref()
            .is_some_and(|(_, handle)| !handle.is_finished())
    }

    /// Brings the task in line with leadership: starts it (again, if it ended) while leader,
    /// stops it otherwise.
    pub async fn follow(&mut self, leader: bool) {
        if leader {
            if let Some((_, handle)) = &self.running
                && handle.is_finished()
            {
                tracing::warn!(task = self.name, "ended while leader; restarting");
                self.running = None;
            }
            if self.running.is_none() {
                let (tx, rx) = oneshot::channel::<()>();
                let stop: StopSignal = Box::pin(async move {
                    // Resolves on the stop message or when the sender is dropped.
                    let _ = rx.await;
                });
                tracing::info!(task = self.name, "leader: starting");
                self.running = Some((tx, tokio::spawn((self.start)(stop))));
            }
        } else if self.running.is_some() {
            tracing::info!(task = self.name, "not leader: stopping");
            self.stop().await;
        }
    }

    /// Stops the task if it runs: gracefully, then by abort after the grace period.
    pub async fn stop(&mut self) {
        let Some((tx, mut handle)) = self.running.take() else {
            return;
        };
        let _ = tx.send(());
        match tokio::time::timeout(self.grace, &mut handle).await {
            Ok(Ok(())) => tracing::info!(task = self.name, "stopped"),
            Ok(Err(e)) => tracing::warn!(task = self.name, error = %e, "ended abnormally"),
            Err(_) => {
                tracing::warn!(task = self.name, grace = ?self.grace, "did not stop in time; aborted");
                handle.abort();
                let _ = handle.await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    use super::*;

    fn lease(name: &str, holder: Option<&str>, renewed_s: Option<i64>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: renewed_s.map(|s| MicroTime(Timestamp::from_second(s).unwrap())),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_renewal_is_our_holder_with_a_newer_renew_time() {
        let at = |s| Some(Timestamp::from_second(s).unwrap());
        let ours = lease("lead", Some("me"), Some(100));
        assert_eq!(renewal(&ours, "lead", "me", None), at(100), "first seen");
        assert_eq!(renewal(&ours, "lead", "me", at(99)), at(100), "newer");
        assert_eq!(
            renewal(&ours, "lead", "me", at(100)),
            None,
            "the same renewal"
        );
        assert_eq!(renewal(&ours, "lead", "me", at(101)), None, "older");
        let other = lease("lead", Some("other"), Some(200));
        assert_eq!(
            renewal(&other, "lead", "me", at(100)),
            None,
            "another holder"
        );
        let released = lease("lead", None, None);
        assert_eq!(renewal(&released, "lead", "me", None), None, "released");
        let unrenewed = lease("lead", Some("me"), None);
        assert_eq!(
            renewal(&unrenewed, "lead", "me", None),
            None,
            "no renewTime"
        );
        let elsewhere = lease("another-lease", Some("me"), Some(300));
        assert_eq!(
            renewal(&elsewhere, "lead", "me", None),
            None,
            "another Lease"
        );
    }

    /// The deadline task with its inputs: kube-lease-manager's state, the last renewal seen.
    struct Deadline {
        leads: watch::Sender<bool>,
        renewed: watch::Sender<Option<Instant>>,
        state: watch::Receiver<bool>,
        stop: oneshot::Sender<()>,
        task: JoinHandle<()>,
    }

    fn deadline_task() -> Deadline {
        let (leads, leads_rx) = watch::channel(false);
        let (renewed, renewed_rx) = watch::channel(None);
        let (out, state) = watch::channel(false);
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(enforce_deadline(
            leads_rx,
            renewed_rx,
            out,
            stop_rx,
            RENEW_DEADLINE,
        ));
        Deadline {
            leads,
            renewed,
            state,
            stop,
            task,
        }
    }

    /// Lets the deadline task run (paused time: 1 ms passes).
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    // Paused time needs tokio's `test-util`, which the dev-dependency tower-test brings.
    #[tokio::test(start_paused = true)]
    async fn leadership_ends_at_the_renew_deadline_and_returns_with_a_renewal() {
        let mut d = deadline_task();
        d.leads.send_replace(true);
        settle().await;
        assert!(!*d.state.borrow(), "no renewal seen yet");

        let renewed_at = Instant::now();
        d.renewed.send_replace(Some(renewed_at));
        settle().await;
        assert!(*d.state.borrow(), "leads and renewed");
        // Renewals fail from here on; kube-lease-manager still says leader.
        tokio::time::sleep_until(renewed_at + RENEW_DEADLINE - Duration::from_millis(5)).await;
        assert!(*d.state.borrow(), "still within the deadline");
        tokio::time::timeout(RENEW_DEADLINE, d.state.wait_for(|held| !*held))
            .await
            .expect("lost by the deadline")
            .unwrap();
        let lapsed = renewed_at.elapsed();
        assert!(
            lapsed >= RENEW_DEADLINE && lapsed < RENEW_DEADLINE + Duration::from_millis(10),
            "lost {lapsed:?} after the last renewal"
        );
        assert!(*d.leads.borrow(), "kube-lease-manager never said otherwise");

        // A renewal succeeds again: leader again, for another deadline.
        d.renewed.send_replace(Some(Instant::now()));
        settle().await;
        assert!(*d.state.borrow(), "renewed again");
        tokio::time::sleep(RENEW_DEADLINE / 2).await;
        assert!(*d.state.borrow());

        // kube-lease-manager says not leader (a takeover): lost at once, renewal or not.
        d.leads.send_replace(false);
        settle().await;
        assert!(!*d.state.borrow(), "kube-lease-manager lost it");
        d.renewed.send_replace(Some(Instant::now()));
        settle().await;
        assert!(!*d.state.borrow(), "a renewal alone is not leadership");
        d.leads.send_replace(true);
        settle().await;
        assert!(*d.state.borrow(), "won back");

        // Release: the fence turns not held, and kube-lease-manager's receiver is gone (so its
        // task releases the Lease) without waiting for the fence.
        let fence = Fence::following(d.state.clone());
        let _ = d.stop.send(());
        d.task.await.unwrap();
        assert!(!fence.held());
        tokio::time::timeout(Duration::from_millis(1), d.leads.closed())
            .await
            .expect("the deadline task dropped kube-lease-manager's receiver");
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_task_ends_when_no_one_follows_it() {
        let d = deadline_task();
        drop(d.state);
        tokio::time::timeout(Duration::from_millis(1), d.task)
            .await
            .expect("ended")
            .unwrap();
        assert!(d.leads.is_closed() && d.renewed.is_closed());
        drop(d.stop);
    }

    #[test]
    fn acting_needs_both_leadership_and_a_recent_renewal() {
        let now = Instant::now();
        let deadline = Duration::from_secs(10);
        let ago = |s| now.checked_sub(Duration::from_secs(s));
        assert_eq!(acting(true, None, now, deadline), (false, None));
        assert_eq!(
            acting(true, ago(3), now, deadline),
            (true, Some(now + Duration::from_secs(7)))
        );
        assert_eq!(acting(false, ago(3), now, deadline), (false, None));
        assert_eq!(acting(true, ago(10), now, deadline), (false, None));
        assert_eq!(acting(true, ago(11), now, deadline), (false, None));
    }

    /// Counts starts and graceful stops.
    fn counting() -> (LeaderTask, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let starts = Arc::new(AtomicUsize::new(0));
        let stops = Arc::new(AtomicUsize::new(0));
        let (s, t) = (starts.clone(), stops.clone());
        let task = LeaderTask::new("test", move |stop: StopSignal| {
            s.fetch_add(1, Ordering::SeqCst);
            let t = t.clone();
            async move {
                stop.await;
                t.fetch_add(1, Ordering::SeqCst);
            }
        });
        (task, starts, stops)
    }

    #[tokio::test]
    async fn runs_only_while_leader() {
        let (mut task, starts, stops) = counting();
        task.follow(false).await;
        assert!(!task.is_running());
        task.follow(true).await;
        task.follow(true).await;
        assert!(task.is_running());
        assert_eq!(starts.load(Ordering::SeqCst), 1, "one start per gain");
        task.follow(false).await;
        assert!(!task.is_running());
        assert_eq!(stops.load(Ordering::SeqCst), 1, "stopped gracefully");
        task.follow(true).await;
        assert_eq!(starts.load(Ordering::SeqCst), 2, "resumed on regaining");
        task.stop().await;
        assert_eq!(stops.load(Ordering::SeqCst), 2);
        assert!(!task.is_running());
    }

    #[tokio::test]
    async fn restarts_a_task_that_ended_while_leader() {
        let starts = Arc::new(AtomicUsize::new(0));
        let s = starts.clone();
        let mut task = LeaderTask::new("short", move |_stop: StopSignal| {
            s.fetch_add(1, Ordering::SeqCst);
            async {}
        });
        task.follow(true).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!task.is_running());
        task.follow(true).await;
        assert_eq!(starts.load(Ordering::SeqCst), 2);
        task.stop().await;
    }

    #[tokio::test]
    async fn aborts_a_task_that_ignores_stop() {
        let mut task =
            LeaderTask::new("stubborn", |_stop: StopSignal| std::future::pending::<()>())
                .with_grace(Duration::from_millis(50));
        task.follow(true).await;
        assert!(task.is_running());
        task.stop().await;
        assert!(!task.is_running());
    }
}
