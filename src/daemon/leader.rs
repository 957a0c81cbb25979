//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager), or none.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
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
