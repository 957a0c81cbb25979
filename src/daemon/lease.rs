//! client-go's leader election on a `coordination.k8s.io/v1` Lease, as one task: it creates the
//! Lease when absent, renews it with a resourceVersion precondition while leading, takes it over
//! when its record stopped changing for the lease duration (on this replica's own monotonic
//! clock), and releases it on shutdown. A field-selected watch of the Lease lets a follower
//! observe it without polling.

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event, watcher};
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// How long a follower waits, on its own clock, after the last change of the Lease record it saw
/// before it takes the Lease over (client-go's `LeaseDuration`; written as the Lease's
/// `leaseDurationSeconds`). It exceeds [`RENEW_DEADLINE`] by 5 s: the margin for clock skew
/// (rates of the replicas' monotonic clocks) and for a deposed leader's last writes in flight.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How long the leader acts after sending its last successful renewal (client-go's
/// `RenewDeadline`): it stops acting [`LEASE_DURATION`] − `RENEW_DEADLINE` = 5 s before any
/// follower may take the Lease over.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// How often the leader renews and a candidate tries again (client-go's `RetryPeriod`).
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// Bound of every Lease request: shorter than [`RETRY_PERIOD`], so a hanging request never
/// delays the next attempt.
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(1500);
/// `leaseDurationSeconds` of a released Lease, as client-go writes it.
const RELEASED_DURATION_S: i32 = 1;
/// Requests one attempt may make: a read, a write, and after a conflict a read and a write.
const MAX_STEPS: usize = 4;
/// First wait before a failed Lease watch is started afresh (doubling, reset by a full list).
const WATCH_BACKOFF: Duration = Duration::from_millis(500);
/// Longest wait between Lease watch restarts.
const MAX_WATCH_BACKOFF: Duration = Duration::from_secs(4);

/// Until when this replica may act (the send instant of its last successful renewal plus
/// [`RENEW_DEADLINE`]); `None` when it does not lead.
pub type Term = Option<Instant>;

/// Whether `term` lets this replica act at `now`.
pub fn holds(term: Term, now: Instant) -> bool {
    term.is_some_and(|until| now < until)
}

/// What this replica knows of the Lease.
#[derive(Debug, Clone, PartialEq)]
enum Observed {
    /// Nothing yet: read it before deciding.
    Unknown,
    /// The Lease does not exist.
    Absent,
    /// The Lease's record, its resourceVersion, and when (on this replica's clock) the record
    /// was last seen to change (client-go's `observedTime`).
    Present {
        spec: LeaseSpec,
        version: Option<String>,
        changed: Instant,
    },
}

/// What an attempt does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Read,
    Create,
    /// Write our record over the observed one; `take` when it names another holder or none.
    Write {
        take: bool,
    },
    /// Another holder's record changed less than its lease duration ago.
    Wait,
}

/// Why a Lease request did not succeed.
#[derive(Debug)]
enum Failure {
    /// 404: the Lease does not exist.
    Absent,
    /// 409: someone else wrote (or created) it first.
    Conflict,
    /// Any other error, or no answer within [`REQUEST_TIMEOUT`].
    Other(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Absent => f.write_str("404 NotFound"),
            Failure::Conflict => f.write_str("409 Conflict"),
            Failure::Other(e) => f.write_str(e),
        }
    }
}

/// The HTTP code of an API error: its `code`, else the one its `reason` implies.
fn api_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(s) if s.code != 0 => Some(s.code),
        kube::Error::Api(s) if s.is_not_found() => Some(404),
        kube::Error::Api(s) if s.is_already_exists() || s.is_conflict() => Some(409),
        _ => None,
    }
}

/// Runs `request` within [`REQUEST_TIMEOUT`].
async fn bounded<T>(request: impl Future<Output = Result<T, kube::Error>>) -> Result<T, Failure> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(match api_code(&e) {
            Some(404) => Failure::Absent,
            Some(409) => Failure::Conflict,
            _ => Failure::Other(e.to_string()),
        }),
        Err(_) => Err(Failure::Other(format!(
            "no answer within {REQUEST_TIMEOUT:?}"
        ))),
    }
}

/// The elector: one task owns the Lease's state and publishes this replica's [`Term`].
pub(crate) struct Elector {
    api: Api<Lease>,
    name: String,
    namespace: String,
    identity: String,
    observed: Observed,
    /// Whether the Lease was ever seen to exist (a later create is a re-creation).
    existed: bool,
    /// The resourceVersion of our last write, until the watch shows it: watch events before it
    /// are older than what we know, and a (re-)list may be too.
    awaiting: Option<String>,
    term: watch::Sender<Term>,
    /// When the last successful renewal (or acquisition) was sent.
    renewed: Option<Instant>,
    /// Renewals that failed since the last success, while leading.
    failures: u32,
}

impl Elector {
    pub(crate) fn new(
        api: Api<Lease>,
        name: &str,
        namespace: &str,
        identity: &str,
        term: watch::Sender<Term>,
    ) -> Self {
        Elector {
            api,
            name: name.to_string(),
            namespace: namespace.to_string(),
            identity: identity.to_string(),
            observed: Observed::Unknown,
            existed: false,
            awaiting: None,
            term,
            renewed: None,
            failures: 0,
        }
    }

    /// Competes for the Lease: an attempt at once and every [`RETRY_PERIOD`] after, and at once
    /// when the watch (`seen`: the Lease, or `None` when absent) shows the Lease absent or free,
    /// or held by another while this replica leads. Leadership lapses at the end of its term. On
    /// `stop` (or its sender dropped) the attempt in flight is abandoned and the Lease released.
    pub(crate) async fn run(
        mut self,
        mut seen: mpsc::Receiver<Option<Lease>>,
        mut stop: oneshot::Receiver<()>,
    ) {
        let mut next = Instant::now();
        let mut watching = true;
        loop {
            if Instant::now() >= next {
                let started = Instant::now();
                let stopped = tokio::select! {
                    biased;
                    _ = &mut stop => true,
                    _ = self.attempt() => false,
                };
                if stopped {
                    break;
                }
                next = started + RETRY_PERIOD;
            }
            let term = *self.term.borrow();
            tokio::select! {
                biased;
                _ = &mut stop => break,
                lease = seen.recv(), if watching => match lease {
                    Some(lease) => {
                        if self.observe(lease, Instant::now()) {
                            next = Instant::now();
                        }
                    }
                    None => watching = false,
                },
                _ = sleep_until(term), if term.is_some() => self.lapse(Instant::now()),
                _ = tokio::time::sleep_until(next) => {}
            }
        }
        self.release().await;
    }

    fn leads(&self, now: Instant) -> bool {
        holds(*self.term.borrow(), now)
    }

    fn holder(&self) -> Option<&str> {
        match &self.observed {
            Observed::Present { spec, .. } => Some(spec.holder_identity.as_deref().unwrap_or("")),
            _ => None,
        }
    }

    /// Records what the watch saw (nothing while it has not shown our last write yet); whether
    /// to attempt at once.
    fn observe(&mut self, lease: Option<Lease>, now: Instant) -> bool {
        if let Some(ours) = &self.awaiting {
            let version = lease
                .as_ref()
                .and_then(|l| l.metadata.resource_version.as_ref());
            if version != Some(ours) {
                return false;
            }
            self.awaiting = None;
        }
        match lease {
            None => {
                let news = self.observed != Observed::Absent;
                self.observed = Observed::Absent;
                news
            }
            Some(lease) => {
                self.record(lease, now);
                match self.holder() {
                    Some("") => true,
                    Some(holder) => holder != self.identity && self.leads(now),
                    None => false,
                }
            }
        }
    }

    /// Takes `lease` as the observed one; its record counts as changed (at `now`) unless its
    /// spec equals the one observed before.
    fn record(&mut self, lease: Lease, now: Instant) {
        let spec = lease.spec.unwrap_or_default();
        let changed = match &self.observed {
            Observed::Present {
                spec: before,
                changed,
                ..
            } if *before == spec => *changed,
            _ => now,
        };
        self.existed = true;
        self.observed = Observed::Present {
            spec,
            version: lease.metadata.resource_version,
            changed,
        };
    }

    /// The next step on what is observed (client-go's `tryAcquireOrRenew`): renew our own
    /// record; take a record with no holder, or one whose holder's record has not changed for
    /// its lease duration on this replica's clock; wait otherwise.
    fn decide(&self, now: Instant) -> Step {
        match &self.observed {
            Observed::Unknown => Step::Read,
            Observed::Absent => Step::Create,
            Observed::Present { spec, changed, .. } => {
                let holder = spec.holder_identity.as_deref().unwrap_or("");
                if holder == self.identity {
                    Step::Write { take: false }
                } else if holder.is_empty() || now >= *changed + self.duration_of(spec) {
                    Step::Write { take: true }
                } else {
                    Step::Wait
                }
            }
        }
    }

    /// The lease duration a record asks for (client-go's `isLeaseValid` uses the record's);
    /// [`LEASE_DURATION`] when it names none or one that is not positive.
    fn duration_of(&self, spec: &LeaseSpec) -> Duration {
        match spec.lease_duration_seconds {
            Some(s) if s > 0 => Duration::from_secs(s.unsigned_abs().into()),
            None => LEASE_DURATION,
            Some(s) => {
                tracing::warn!(
                    lease = %self.name,
                    namespace = %self.namespace,
                    value = s,
                    "Lease spec.leaseDurationSeconds is not positive; using {LEASE_DURATION:?}"
                );
                LEASE_DURATION
            }
        }
    }

    /// One attempt to acquire or renew: at most [`MAX_STEPS`] requests. A leader whose view shows
    /// another holder reads the Lease first (a watch event may be older than its last write);
    /// after a 409 the Lease is read again and the decision made afresh; a 404 on a write makes
    /// it a create.
    async fn attempt(&mut self) {
        let now = Instant::now();
        let mut read = matches!(self.observed, Observed::Unknown)
            || (self.leads(now) && self.holder().is_some_and(|h| h != self.identity));
        for _ in 0..MAX_STEPS {
            if read {
                read = false;
                if let Err(e) = self.read().await {
                    self.failed("read", e);
                    return;
                }
            }
            let step = self.decide(Instant::now());
            let outcome = match step {
                Step::Read => {
                    read = true;
                    continue;
                }
                Step::Wait => {
                    self.step_down("another replica holds the Lease");
                    return;
                }
                Step::Create => self.create().await,
                Step::Write { take } => self.write(take).await,
            };
            match outcome {
                Ok(()) => return,
                Err(Failure::Conflict) => read = true,
                Err(Failure::Absent) => self.observed = Observed::Absent,
                Err(Failure::Other(e)) => {
                    self.failed(
                        if step == Step::Create {
                            "create"
                        } else {
                            "write"
                        },
                        e,
                    );
                    return;
                }
            }
        }
    }

    /// Logs a failed request and counts it against a leader's renewals.
    fn failed(&mut self, what: &str, error: impl std::fmt::Display) {
        self.lapse(Instant::now());
        if self.leads(Instant::now()) {
            self.failures += 1;
            tracing::warn!(lease = %self.name, namespace = %self.namespace, %error, failures = self.failures, "Lease {what} failed while leading");
        } else {
            tracing::debug!(lease = %self.name, namespace = %self.namespace, %error, "Lease {what} failed");
        }
    }

    async fn read(&mut self) -> Result<(), Failure> {
        match bounded(self.api.get(&self.name)).await {
            Ok(lease) => {
                self.record(lease, Instant::now());
                Ok(())
            }
            Err(Failure::Absent) => {
                self.observed = Observed::Absent;
                Ok(())
            }
            Err(Failure::Conflict) => Err(Failure::Other("409 on a read".into())),
            Err(e) => Err(e),
        }
    }

    /// The record this replica writes at `now`: its identity, [`LEASE_DURATION`], renewed now;
    /// acquired now with one more transition when taking, else as observed.
    fn ours(&self, take: bool, now: MicroTime) -> LeaseSpec {
        let before = match &self.observed {
            Observed::Present { spec, .. } => spec.clone(),
            _ => LeaseSpec::default(),
        };
        let transitions = before.lease_transitions.unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(LEASE_DURATION.as_secs().try_into().unwrap_or(i32::MAX)),
            acquire_time: if take {
                Some(now.clone())
            } else {
                before.acquire_time
            },
            renew_time: Some(now),
            lease_transitions: Some(if take {
                transitions.saturating_add(1)
            } else {
                transitions
            }),
            ..before
        }
    }

    async fn create(&mut self) -> Result<(), Failure> {
        let now = MicroTime(Timestamp::now());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(
                    LEASE_DURATION.as_secs().try_into().unwrap_or(i32::MAX),
                ),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        let sent = Instant::now();
        let created = match bounded(self.api.create(&PostParams::default(), &lease)).await {
            Ok(created) => created,
            // The namespace is missing: no retry within this attempt.
            Err(Failure::Absent) => {
                return Err(Failure::Other(format!(
                    "404 creating Lease {}/{}: namespace {:?} not found",
                    self.namespace, self.name, self.namespace
                )));
            }
            Err(e) => return Err(e),
        };
        tracing::info!(
            lease = %self.name,
            namespace = %self.namespace,
            recreated = self.existed,
            "{} the Lease",
            if self.existed { "recreated" } else { "created" }
        );
        self.renewed_at(sent);
        self.awaiting = created.metadata.resource_version.clone();
        self.observed = Observed::Unknown;
        self.record(created, Instant::now());
        Ok(())
    }

    /// Writes our record over the observed one, guarded by its resourceVersion.
    async fn write(&mut self, take: bool) -> Result<(), Failure> {
        let Observed::Present { version, .. } = &self.observed else {
            return Err(Failure::Other("no Lease observed to write over".into()));
        };
        let Some(version) = version.clone() else {
            return Err(Failure::Other(format!(
                "Lease {}/{} has no metadata.resourceVersion to write against",
                self.namespace, self.name
            )));
        };
        let spec = self.ours(take, MicroTime(Timestamp::now()));
        let patch = json!({"metadata": {"resourceVersion": version}, "spec": spec});
        let sent = Instant::now();
        let written = bounded(self.api.patch(
            &self.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        ))
        .await?;
        self.renewed_at(sent);
        self.awaiting = written.metadata.resource_version.clone();
        self.record(written, Instant::now());
        Ok(())
    }

    /// A write sent at `sent` succeeded: the term runs to `sent` + [`RENEW_DEADLINE`].
    fn renewed_at(&mut self, sent: Instant) {
        let now = Instant::now();
        self.lapse(now);
        if !self.leads(now) {
            tracing::info!(lease = %self.name, namespace = %self.namespace, identity = %self.identity, "acquired the Lease: leading");
        } else if self.failures > 0 {
            let since_renewal = self.renewed.map(|at| now - at).unwrap_or_default();
            tracing::info!(lease = %self.name, namespace = %self.namespace, failures = self.failures, ?since_renewal, "renewed the Lease after failures");
        }
        self.failures = 0;
        self.renewed = Some(sent);
        self.term.send_replace(Some(sent + RENEW_DEADLINE));
    }

    /// The term ended at `now` without a renewal: no longer leading.
    fn lapse(&mut self, now: Instant) {
        if self.term.borrow().is_some() && !self.leads(now) {
            self.step_down("no successful renewal within the renew deadline");
        }
    }

    /// Ends leadership at once (if leading), logging `why` and the time since the last renewal.
    fn step_down(&mut self, why: &str) {
        // A follower takes every watch event.
        self.awaiting = None;
        if self.term.send_replace(None).is_some() {
            let since_renewal = self.renewed.map(|at| at.elapsed()).unwrap_or_default();
            tracing::warn!(lease = %self.name, namespace = %self.namespace, ?since_renewal, deadline = ?RENEW_DEADLINE, "lost the Lease: {why}");
            self.failures = 0;
        }
    }

    /// Ends leadership, then, when the observed Lease names this replica, writes it with an
    /// empty holder (client-go's `ReleaseOnCancel`) so another replica takes over at once. A
    /// conflict re-reads it once; a replica the Lease does not name writes nothing.
    async fn release(&mut self) {
        self.term.send_replace(None);
        for _ in 0..2 {
            let ours = self.holder() == Some(self.identity.as_str());
            let version = match &self.observed {
                Observed::Present {
                    version: Some(v), ..
                } if ours => v.clone(),
                _ => return,
            };
            let now = MicroTime(Timestamp::now());
            let transitions = match &self.observed {
                Observed::Present { spec, .. } => spec.lease_transitions.unwrap_or(0),
                _ => 0,
            };
            let patch = json!({
                "metadata": {"resourceVersion": version},
                "spec": {
                    "holderIdentity": "",
                    "leaseDurationSeconds": RELEASED_DURATION_S,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": transitions,
                },
            });
            let released = bounded(self.api.patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            ))
            .await;
            match released {
                Ok(_) => {
                    tracing::info!(lease = %self.name, namespace = %self.namespace, "released the Lease");
                    return;
                }
                Err(Failure::Conflict) => {
                    if let Err(e) = self.read().await {
                        tracing::warn!(lease = %self.name, namespace = %self.namespace, error = %e, "could not release the Lease");
                        return;
                    }
                }
                Err(Failure::Absent) => return,
                Err(Failure::Other(e)) => {
                    tracing::warn!(lease = %self.name, namespace = %self.namespace, error = %e, "could not release the Lease");
                    return;
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Watches the Lease `name` (field-selected) and sends on `seen` every version of it, or `None`
/// when it is deleted or a (re-)list does not hold it. A failed watch is started afresh (it
/// re-lists) after a backoff. Ends when `seen` has no receiver.
pub(crate) async fn observe(api: Api<Lease>, name: String, seen: mpsc::Sender<Option<Lease>>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut backoff = WATCH_BACKOFF;
    loop {
        let mut stream = watcher(api.clone(), config.clone()).boxed();
        let mut listed: Option<Lease> = None;
        loop {
            let item = tokio::select! {
                _ = seen.closed() => return,
                item = stream.next() => item,
            };
            let send = match item {
                Some(Ok(Event::Init)) => {
                    listed = None;
                    continue;
                }
                Some(Ok(Event::InitApply(lease))) => {
                    if lease.metadata.name.as_deref() == Some(name.as_str()) {
                        listed = Some(lease);
                    }
                    continue;
                }
                Some(Ok(Event::InitDone)) => {
                    backoff = WATCH_BACKOFF;
                    listed.take()
                }
                Some(Ok(Event::Apply(lease))) => {
                    if lease.metadata.name.as_deref() != Some(name.as_str()) {
                        continue;
                    }
                    Some(lease)
                }
                Some(Ok(Event::Delete(lease))) => {
                    if lease.metadata.name.as_deref() != Some(name.as_str()) {
                        continue;
                    }
                    None
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, lease = %name, "Lease watch failed; restarting after backoff");
                    break;
                }
                None => break,
            };
            if seen.send(send).await.is_err() {
                return;
            }
        }
        tokio::select! {
            _ = seen.closed() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_WATCH_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, duration_s: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: duration_s,
            ..LeaseSpec::default()
        }
    }

    fn elector(observed: Observed) -> Elector {
        // Deciding sends nothing: the mock server's handle is dropped.
        let (service, _) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let client = kube::Client::new(service, "default");
        let (term, _) = watch::channel(None);
        let mut e = Elector::new(Api::namespaced(client, "ns"), "lead", "ns", "me", term);
        e.observed = observed;
        e
    }

    fn present(spec: LeaseSpec, changed: Instant) -> Observed {
        Observed::Present {
            spec,
            version: Some("1".into()),
            changed,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn decides_as_client_go_does() {
        let t0 = Instant::now();
        let s = |n| t0 + Duration::from_secs(n);
        assert_eq!(elector(Observed::Unknown).decide(t0), Step::Read);
        assert_eq!(elector(Observed::Absent).decide(t0), Step::Create);
        let ours = elector(present(spec(Some("me"), Some(15)), t0));
        assert_eq!(ours.decide(s(100)), Step::Write { take: false });
        for free in [None, Some("")] {
            let released = elector(present(spec(free, Some(1)), t0));
            assert_eq!(released.decide(t0), Step::Write { take: true }, "{free:?}");
        }
        let other = elector(present(spec(Some("other"), Some(15)), t0));
        assert_eq!(other.decide(s(14)), Step::Wait);
        assert_eq!(other.decide(s(15)), Step::Write { take: true });
        // The record's own duration, as client-go reads it; ours when it has none or a bad one.
        let long = elector(present(spec(Some("other"), Some(60)), t0));
        assert_eq!(long.decide(s(59)), Step::Wait);
        assert_eq!(long.decide(s(60)), Step::Write { take: true });
        for bad in [None, Some(0), Some(-5)] {
            let e = elector(present(spec(Some("other"), bad), t0));
            assert_eq!(e.decide(s(14)), Step::Wait, "{bad:?}");
            assert_eq!(e.decide(s(15)), Step::Write { take: true }, "{bad:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_record_changes_only_when_its_spec_does() {
        let t0 = Instant::now();
        let mut e = elector(Observed::Unknown);
        let lease = |holder: &str, version: &str, renewed_s: i64| Lease {
            metadata: ObjectMeta {
                name: Some("lead".into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(Timestamp::from_second(renewed_s).unwrap())),
                ..spec(Some(holder), Some(15))
            }),
        };
        e.record(lease("other", "1", 100), t0);
        let later = t0 + Duration::from_secs(5);
        e.record(lease("other", "2", 100), later);
        assert!(
            matches!(&e.observed, Observed::Present { changed, version, .. } if *changed == t0 && version.as_deref() == Some("2")),
            "a new resourceVersion with the same record is no change: {:?}",
            e.observed
        );
        e.record(lease("other", "3", 101), later);
        assert!(
            matches!(&e.observed, Observed::Present { changed, .. } if *changed == later),
            "a renewal is a change"
        );
        assert!(
            e.observe(None, later),
            "a deleted Lease is acted on at once"
        );
        assert!(!e.observe(None, later), "once");
        assert!(
            !e.observe(Some(lease("other", "4", 102)), later),
            "a follower waits"
        );
        assert!(
            e.observe(Some(lease("", "5", 103)), later),
            "a released Lease is taken at once"
        );

        // After our write at version 9, the watch's older events (and a list without it) are
        // not news; from version 9 on they are.
        e.awaiting = Some("9".into());
        let before = e.observed.clone();
        assert!(!e.observe(Some(lease("other", "8", 104)), later));
        assert!(!e.observe(None, later));
        assert_eq!(e.observed, before, "ignored");
        e.observe(Some(lease("me", "9", 105)), later);
        assert_eq!(e.awaiting, None);
        assert!(e.observe(None, later), "then a deletion counts");
    }

    #[tokio::test]
    async fn the_written_record_keeps_or_takes_the_acquisition() {
        let now = MicroTime(Timestamp::from_second(500).unwrap());
        let acquired = MicroTime(Timestamp::from_second(100).unwrap());
        let before = LeaseSpec {
            acquire_time: Some(acquired.clone()),
            lease_transitions: Some(3),
            ..spec(Some("me"), Some(15))
        };
        let e = elector(Observed::Present {
            spec: before,
            version: Some("9".into()),
            changed: Instant::now(),
        });
        let renewed = e.ours(false, now.clone());
        assert_eq!(renewed.holder_identity.as_deref(), Some("me"));
        assert_eq!(renewed.acquire_time, Some(acquired));
        assert_eq!(renewed.renew_time, Some(now.clone()));
        assert_eq!(renewed.lease_transitions, Some(3));
        assert_eq!(renewed.lease_duration_seconds, Some(15));
        let taken = e.ours(true, now.clone());
        assert_eq!(taken.acquire_time, Some(now));
        assert_eq!(taken.lease_transitions, Some(4));
    }
}
