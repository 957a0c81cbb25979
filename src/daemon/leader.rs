//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go does it (our own elector,
//! [`super::lease`]), or none; the fence every write checks; leader-only tasks.
//!
//! Leading lasts until [`RENEW_DEADLINE`] after the last successful renewal was *sent*, on this
//! replica's monotonic clock: a renewal that fails or hangs does not extend it.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::lease::{Elector, Term, holds, observe};
pub use super::lease::{LEASE_DURATION, RENEW_DEADLINE, REQUEST_TIMEOUT, RETRY_PERIOD};

/// How long [`Leadership::release`] waits for the Lease to be released.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why leader election cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    /// A name the Lease needs is empty.
    #[error("the Lease {field} is empty")]
    Empty { field: &'static str },
}

/// Whether this replica may act.
pub enum Leadership {
    /// No election: always the leader.
    Always,
    /// Elected on a Lease.
    Lease(Elected),
}

/// Leadership on a Lease: the elector's task and the term it publishes.
pub struct Elected {
    term: watch::Receiver<Term>,
    /// Leadership as [`Leadership::changed`] last reported it.
    reported: bool,
    stop: oneshot::Sender<()>,
    elector: JoinHandle<()>,
    watch: JoinHandle<()>,
}

impl Elected {
    fn leads(&self) -> bool {
        self.term.has_changed().is_ok() && holds(*self.term.borrow(), Instant::now())
    }
}

impl Leadership {
    /// Starts competing for the Lease `name` in `namespace` as `identity`; leading comes later
    /// (see [`Leadership::changed`]).
    pub async fn elect(
        client: kube::Client,
        name: &str,
        namespace: &str,
        identity: &str,
    ) -> Result<Self, ElectionError> {
        for (value, field) in [
            (name, "name"),
            (namespace, "namespace"),
            (identity, "holder identity"),
        ] {
            if value.is_empty() {
                return Err(ElectionError::Empty { field });
            }
        }
        let api = kube::Api::namespaced(client, namespace);
        let (seen_tx, seen) = mpsc::channel(16);
        let watch = tokio::spawn(observe(api.clone(), name.to_string(), seen_tx));
        let (term_tx, term) = watch::channel(None);
        let (stop, stop_rx) = oneshot::channel();
        let elector = Elector::new(api, name, namespace, identity, term_tx);
        let elector = tokio::spawn(elector.run(seen, stop_rx));
        Ok(Leadership::Lease(Elected {
            term,
            reported: false,
            stop,
            elector,
            watch,
        }))
    }

    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        match self {
            Leadership::Always => true,
            Leadership::Lease(elected) => elected.leads(),
        }
    }

    /// Until when this replica leads unless it renews again; `None` when it does not lead, or
    /// without election.
    pub fn leads_until(&self) -> Option<Instant> {
        match self {
            Leadership::Always => None,
            Leadership::Lease(elected) => {
                let term = *elected.term.borrow();
                term.filter(|_| elected.leads())
            }
        }
    }

    /// A fence for writes: held while this replica leads.
    pub fn fence(&self) -> Fence {
        match self {
            Leadership::Always => Fence::Always,
            Leadership::Lease(elected) => Fence::Lease(elected.term.clone()),
        }
    }

    /// Resolves when [`Leadership::is_leader`] differs from what this last reported (from not
    /// leading, at first): on an acquisition, a loss, and at the end of a term that was not
    /// renewed. Never, without election.
    pub async fn changed(&mut self) {
        let Leadership::Lease(elected) = self else {
            return std::future::pending().await;
        };
        loop {
            let term = *elected.term.borrow_and_update();
            let leads = elected.leads();
            if leads != elected.reported {
                elected.reported = leads;
                return;
            }
            tokio::select! {
                changed = elected.term.changed() => {
                    if changed.is_err() && !elected.reported {
                        // The elector ended; nothing more will change.
                        return std::future::pending().await;
                    }
                }
                _ = sleep_until(term), if leads => {}
            }
        }
    }

    /// Ends leadership (fences still around turn not held first) and, when the Lease names this
    /// replica, releases it so another replica takes over at once.
    pub async fn release(self) {
        let Leadership::Lease(elected) = self else {
            return;
        };
        let Elected {
            term,
            stop,
            mut elector,
            watch,
            ..
        } = elected;
        drop(term);
        let _ = stop.send(());
        match tokio::time::timeout(RELEASE_TIMEOUT, &mut elector).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "the leader election task failed"),
            Err(_) => {
                tracing::warn!("timed out releasing the leader Lease");
                elector.abort();
            }
        }
        watch.abort();
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Whether writes are still allowed: a deposed leader issues no further writes. Every write
/// batch checks [`Fence::held`] before each write and is cancelled when [`Fence::lost`] resolves.
#[derive(Debug, Clone)]
pub enum Fence {
    /// No election: always held.
    Always,
    /// Held while the flag is true (tests; leadership decided elsewhere).
    Following(watch::Receiver<bool>),
    /// Held until the end of the elector's term (see [`Leadership`]); not once the elector ended.
    Lease(watch::Receiver<Term>),
}

impl Fence {
    /// A fence whose holding follows `state`.
    pub fn following(state: watch::Receiver<bool>) -> Self {
        Fence::Following(state)
    }

    /// Whether this replica still leads.
    pub fn held(&self) -> bool {
        match self {
            Fence::Always => true,
            Fence::Following(state) => *state.borrow(),
            Fence::Lease(term) => {
                term.has_changed().is_ok() && holds(*term.borrow(), Instant::now())
            }
        }
    }

    /// Resolves once this replica does not lead (at once when it does not now): at the end of
    /// the term at the latest; never without election. A fence whose leadership ended (its
    /// sender gone) counts as lost.
    pub async fn lost(&self) {
        match self {
            Fence::Always => std::future::pending().await,
            Fence::Following(state) => {
                let mut state = state.clone();
                let _ = state.wait_for(|held| !*held).await;
            }
            Fence::Lease(term) => {
                let mut term = term.clone();
                loop {
                    let until = *term.borrow_and_update();
                    if !holds(until, Instant::now()) {
                        return;
                    }
                    tokio::select! {
                        changed = term.changed() => {
                            if changed.is_err() {
                                return;
                            }
                        }
                        _ = sleep_until(until) => {}
                    }
                }
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

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lease_fence_holds_until_the_end_of_the_term() {
        let (term, rx) = watch::channel(None);
        let fence = Fence::Lease(rx);
        assert!(!fence.held(), "no term");
        tokio::time::timeout(Duration::from_millis(1), fence.lost())
            .await
            .expect("lost at once without a term");

        let until = Instant::now() + RENEW_DEADLINE;
        term.send_replace(Some(until));
        assert!(fence.held());
        let lost = tokio::spawn({
            let fence = fence.clone();
            async move {
                fence.lost().await;
                Instant::now()
            }
        });
        tokio::time::sleep_until(until - Duration::from_millis(1)).await;
        assert!(fence.held(), "1 ms before the end");
        // A renewal extends it; the fence follows without anyone publishing `false`.
        let extended = until + RETRY_PERIOD;
        term.send_replace(Some(extended));
        tokio::time::sleep_until(until).await;
        assert!(fence.held(), "extended");
        tokio::time::sleep_until(extended).await;
        assert!(!fence.held(), "at the end of the term");
        assert_eq!(lost.await.unwrap(), extended, "lost() resolves at the end");

        term.send_replace(Some(Instant::now() + RENEW_DEADLINE));
        assert!(fence.held());
        drop(term);
        assert!(!fence.held(), "the elector is gone");
        tokio::time::timeout(Duration::from_millis(1), fence.lost())
            .await
            .expect("lost once the elector is gone");
    }

    #[tokio::test]
    async fn a_following_fence_follows_its_flag() {
        let (tx, rx) = watch::channel(true);
        let fence = Fence::following(rx);
        assert!(fence.held());
        tx.send_replace(false);
        assert!(!fence.held());
        fence.lost().await;
        assert!(Fence::Always.held());
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
