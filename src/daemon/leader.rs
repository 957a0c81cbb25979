//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager), or none.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// Seconds a lease stays valid after its last renewal.
const LEASE_DURATION_S: u64 = 15;
/// Seconds before expiry the holder renews.
const LEASE_GRACE_S: u64 = 5;

/// Whether this replica may act.
pub enum Leadership {
    /// No election: always the leader.
    Always,
    Lease {
        state: watch::Receiver<bool>,
        task: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
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
        let manager = LeaseManagerBuilder::new(client, name)
            .with_namespace(namespace)
            .with_identity(identity)
            .with_duration(LEASE_DURATION_S)
            .with_grace(LEASE_GRACE_S)
            .with_field_manager("trainscale")
            .build()
            .await?;
        let (state, task) = manager.watch().await;
        Ok(Leadership::Lease { state, task })
    }

    /// Whether this replica holds the lease now.
    pub fn is_leader(&self) -> bool {
        match self {
            Leadership::Always => true,
            Leadership::Lease { state, .. } => *state.borrow(),
        }
    }

    /// A fence for writes: held while this replica holds the lease.
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
                    // The lease task ended; nothing more will change.
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// Releases the lease (if held) so another replica can take over at once.
    pub async fn release(self) {
        if let Leadership::Lease { state, task } = self {
            drop(state);
            match tokio::time::timeout(Duration::from_secs(5), task).await {
                Ok(Ok(Ok(_))) => tracing::info!("released the leader lease"),
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "could not release the leader lease"),
                Ok(Err(e)) => tracing::warn!(error = %e, "the lease task failed"),
                Err(_) => tracing::warn!("timed out releasing the leader lease"),
            }
        }
    }
}

/// Whether writes are still allowed: a deposed leader issues no further writes. Every write
/// batch checks [`Fence::held`] before each write and is cancelled when [`Fence::lost`] resolves.
#[derive(Debug, Clone)]
pub enum Fence {
    /// No election: always held.
    Always,
    /// Held while the lease watch says this replica leads.
    Lease(watch::Receiver<bool>),
}

impl Fence {
    /// A fence whose holding follows `state` (tests, and [`Leadership::fence`]).
    pub fn following(state: watch::Receiver<bool>) -> Self {
        Fence::Lease(state)
    }

    /// Whether this replica still holds the lease.
    pub fn held(&self) -> bool {
        match self {
            Fence::Always => true,
            Fence::Lease(state) => *state.borrow(),
        }
    }

    /// Resolves once the lease is not held (at once when it is not held now); never without
    /// election. A lease task that ended counts as lost.
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

    use super::*;

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
