//! Watch events on their way into the store while passes plan on snapshots of it.
//!
//! A pass plans on the store's `Arc` (a snapshot, shared); copying the store to apply an event
//! meanwhile costs ~53 ms at 100,000 pods, more than the pass. So events that arrive while a
//! snapshot is out are held here and applied, in order, once no pass shares the store: an
//! event's lag is at most the rest of the pass it arrived during.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::metrics;
use super::store::Store;

/// The store behind a lock, as an `Arc` a pass can keep while events go on.
pub type SharedStore = Mutex<Arc<Store>>;

/// Locks the shared store.
pub fn lock(store: &SharedStore) -> MutexGuard<'_, Arc<Store>> {
    // A panic while holding the lock leaves a state that is still consistent per event.
    store
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Events held until the store is not shared, each with when it arrived.
#[derive(Debug)]
pub struct EventGate<T> {
    held: Vec<(Instant, T)>,
}

/// What one [`EventGate::apply`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Applied {
    /// Whether the store was synced before and after the events.
    pub was_ready: bool,
    pub ready: bool,
    /// Events applied and the longest time one of them waited.
    pub events: usize,
    pub max_lag: Duration,
}

impl<T> Default for EventGate<T> {
    fn default() -> Self {
        EventGate { held: Vec::new() }
    }
}

impl<T> EventGate<T> {
    /// Holds an event that has just arrived.
    pub fn hold(&mut self, event: T) {
        self.held.push((Instant::now(), event));
    }

    /// Whether no event waits.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Applies every held event with `apply`, in arrival order, unless a pass still shares the
    /// store (then `None`, and they keep waiting). Each event's wait is recorded in
    /// `trainscale_watch_event_lag_seconds`.
    pub fn apply(
        &mut self,
        store: &SharedStore,
        mut apply: impl FnMut(&mut Store, T),
    ) -> Option<Applied> {
        let mut shared = lock(store);
        let store = Arc::get_mut(&mut shared)?;
        let was_ready = store.synced();
        let events = self.held.len();
        let mut max_lag = Duration::ZERO;
        for (arrived, event) in self.held.drain(..) {
            apply(store, event);
            let lag = arrived.elapsed();
            metrics::watch_event_lag(lag);
            max_lag = max_lag.max(lag);
        }
        Some(Applied {
            was_ready,
            ready: store.synced(),
            events,
            max_lag,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_wait_while_a_snapshot_is_out_then_apply_in_order() {
        let store: SharedStore = Mutex::new(Arc::new(Store::new()));
        let mut gate = EventGate::default();
        gate.hold(1);
        gate.hold(2);
        let snapshot = Arc::clone(&lock(&store));
        let mut seen = Vec::new();
        assert_eq!(gate.apply(&store, |_, e| seen.push(e)), None);
        assert!(seen.is_empty() && !gate.is_empty());
        drop(snapshot);
        let applied = gate.apply(&store, |_, e| seen.push(e)).unwrap();
        assert_eq!((applied.events, seen), (2, vec![1, 2]));
        assert!(gate.is_empty());
    }
}
