//! Which watch caches have synced and which keep failing, and why: shared by the daemon's
//! watches and the operator's caches, read by `/readyz` and the cache metrics.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a watch may keep failing (no list or event since its first error), or a cache stay
/// without its first listing, before readiness fails naming it: longer than a few retries of
/// the watchers' backoff (0.8 s doubling), far shorter than a Deployment's patience.
pub const SYNC_GRACE: Duration = Duration::from_secs(10);

/// One cache's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSync {
    /// Its first complete listing arrived.
    pub synced: bool,
    /// Since when it is watched (or, after a failure cleared, since it recovered).
    pub since: Instant,
    /// The first error of the current run of failures and the latest error's reason.
    pub failing: Option<(Instant, String)>,
}

/// A cache that blocks readiness: its resource and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub resource: String,
    pub reason: String,
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cache {} cannot sync: {}", self.resource, self.reason)
    }
}

/// The watch caches of this process by resource name (`pods`, `configmaps`, ...); cloning
/// shares them.
#[derive(Debug, Clone, Default)]
pub struct SyncReport {
    caches: Arc<Mutex<BTreeMap<String, CacheSync>>>,
}

impl SyncReport {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, CacheSync>> {
        self.caches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `resource` is watched from `now` on, not synced yet (kept as it is when already known).
    pub fn expect(&self, resource: &str, now: Instant) {
        self.lock()
            .entry(resource.to_string())
            .or_insert(CacheSync {
                synced: false,
                since: now,
                failing: None,
            });
    }

    /// `resource` delivered its complete listing: synced, no longer failing.
    pub fn listed(&self, resource: &str, now: Instant) {
        let mut caches = self.lock();
        let entry = caches.entry(resource.to_string()).or_insert(CacheSync {
            synced: true,
            since: now,
            failing: None,
        });
        entry.synced = true;
        if entry.failing.take().is_some() {
            entry.since = now;
        }
    }

    /// `resource` delivered an event: its watch works again.
    pub fn delivered(&self, resource: &str, now: Instant) {
        if let Some(entry) = self.lock().get_mut(resource)
            && entry.failing.take().is_some()
        {
            entry.since = now;
        }
    }

    /// `resource`'s watch or list failed with `reason`.
    pub fn failed(&self, resource: &str, reason: String, now: Instant) {
        let mut caches = self.lock();
        let entry = caches.entry(resource.to_string()).or_insert(CacheSync {
            synced: false,
            since: now,
            failing: None,
        });
        let first = entry.failing.as_ref().map_or(now, |(at, _)| *at);
        entry.failing = Some((first, reason));
    }

    /// `resource` is no longer watched (its kind was dropped, or the operator stopped).
    pub fn forget(&self, resource: &str) {
        self.lock().remove(resource);
    }

    /// The caches that block readiness at `now`: failing for at least `grace`, or watched for
    /// `grace` without a first listing; by resource name.
    pub fn blocked(&self, now: Instant, grace: Duration) -> Vec<Blocked> {
        self.lock()
            .iter()
            .filter_map(|(resource, c)| {
                let reason = match &c.failing {
                    Some((first, reason)) if now.saturating_duration_since(*first) >= grace => {
                        reason.clone()
                    }
                    Some(_) => return None,
                    None if !c.synced && now.saturating_duration_since(c.since) >= grace => {
                        "no complete listing yet".to_string()
                    }
                    None => return None,
                };
                Some(Blocked {
                    resource: resource.clone(),
                    reason,
                })
            })
            .collect()
    }

    /// Every cache's state, by resource name.
    pub fn states(&self) -> Vec<(String, CacheSync)> {
        self.lock()
            .iter()
            .map(|(r, c)| (r.clone(), c.clone()))
            .collect()
    }
}

/// The API server's Status a watch error carries, if it carries one.
pub fn watch_error_status(error: &kube::runtime::watcher::Error) -> Option<&kube::core::Status> {
    use kube::runtime::watcher::Error;
    match error {
        Error::InitialListFailed(kube::Error::Api(s))
        | Error::WatchStartFailed(kube::Error::Api(s))
        | Error::WatchFailed(kube::Error::Api(s)) => Some(s),
        Error::WatchError(s) => Some(s),
        _ => None,
    }
}

/// The short reason of a watch error: the API server's Status reason (`Forbidden`, `NotFound`,
/// `ServiceUnavailable`, ...) with its message, or the error itself.
pub fn watch_error_reason(error: &kube::runtime::watcher::Error) -> String {
    let Some(status) = watch_error_status(error) else {
        return error.to_string();
    };
    let reason = if status.reason.is_empty() {
        format!("HTTP {}", status.code)
    } else {
        status.reason.clone()
    };
    if status.message.is_empty() {
        reason
    } else {
        format!("{reason}: {}", status.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_failing_past_the_grace_blocks_until_it_lists() {
        let t0 = Instant::now();
        let report = SyncReport::default();
        report.expect("configmaps", t0);
        report.expect("jobs", t0);
        report.listed("jobs", t0);
        report.failed("configmaps", "Forbidden: no".into(), t0);
        assert!(
            report
                .blocked(t0 + Duration::from_secs(9), SYNC_GRACE)
                .is_empty()
        );
        report.failed(
            "configmaps",
            "Forbidden: still no".into(),
            t0 + Duration::from_secs(5),
        );
        let blocked = report.blocked(t0 + SYNC_GRACE, SYNC_GRACE);
        assert_eq!(
            blocked,
            vec![Blocked {
                resource: "configmaps".into(),
                reason: "Forbidden: still no".into()
            }]
        );
        assert_eq!(
            blocked[0].to_string(),
            "cache configmaps cannot sync: Forbidden: still no"
        );
        report.listed("configmaps", t0 + Duration::from_secs(11));
        assert!(
            report
                .blocked(t0 + Duration::from_secs(30), SYNC_GRACE)
                .is_empty()
        );
    }

    #[test]
    fn a_cache_without_a_listing_blocks_after_the_grace_and_a_forgotten_one_never() {
        let t0 = Instant::now();
        let report = SyncReport::default();
        report.expect("podgroups", t0);
        assert!(
            report
                .blocked(t0 + Duration::from_secs(3), SYNC_GRACE)
                .is_empty()
        );
        assert_eq!(
            report.blocked(t0 + SYNC_GRACE, SYNC_GRACE)[0].reason,
            "no complete listing yet"
        );
        report.forget("podgroups");
        assert!(report.blocked(t0 + SYNC_GRACE, SYNC_GRACE).is_empty());
    }

    #[test]
    fn an_event_after_errors_clears_the_failure() {
        let t0 = Instant::now();
        let report = SyncReport::default();
        report.listed("pods", t0);
        report.failed("pods", "ServiceUnavailable".into(), t0);
        report.delivered("pods", t0 + Duration::from_secs(2));
        assert!(
            report
                .blocked(t0 + Duration::from_secs(60), SYNC_GRACE)
                .is_empty()
        );
        // A new run of failures counts from its own first error.
        report.failed(
            "pods",
            "ServiceUnavailable".into(),
            t0 + Duration::from_secs(60),
        );
        assert!(
            report
                .blocked(t0 + Duration::from_secs(65), SYNC_GRACE)
                .is_empty()
        );
        assert_eq!(
            report
                .blocked(t0 + Duration::from_secs(70), SYNC_GRACE)
                .len(),
            1
        );
    }
}
