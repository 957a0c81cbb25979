//! Leader election against kube's mock service, in paused time: a small fake API server answers
//! the Lease watch (its list, and watches held open until the test sends an event) and hands
//! every other Lease request to the test, which checks it and answers by hand, at the instant it
//! was sent (time stands still while a request is in flight).

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tower_test::mock::{self, SendResponse};
use trainscale::daemon::leader::{LEASE_DURATION, Leadership, RENEW_DEADLINE, RETRY_PERIOD};

#[path = "support/mock_api.rs"]
mod mock_api;

use mock_api::{MockHandle, api_status, respond};

const NS: &str = "trainscale-system";
const NAME: &str = "trainscale-leader";
const ME: &str = "replica-a";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/trainscale-system/leases";
/// A `renewTime` far in the future: an elector that read the holder's clock would wait for it.
const FUTURE: &str = "2100-01-01T00:00:00.000000Z";

/// A `renewTime` `s` seconds after [`FUTURE`].
fn future(s: u64) -> String {
    format!("2100-01-01T00:{:02}:{:02}.000000Z", s / 60, s % 60)
}

/// Lets the other tasks run (the elector takes in an answer) without time passing.
async fn settle() {
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
}

fn lease_path() -> String {
    format!("{LEASES}/{NAME}")
}

/// A Lease as the server answers it.
fn lease(holder: &str, version: u64, renewed: &str, transitions: i64) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": NAME, "namespace": NS, "resourceVersion": version.to_string()},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": renewed,
            "leaseTransitions": transitions,
        },
    })
}

/// A Lease request the test answers.
struct Call {
    method: Method,
    path: String,
    body: Value,
    /// When it was sent (paused time does not move while it waits for the test).
    at: Instant,
    send: SendResponse<Response<Body>>,
}

/// The test's side of the fake server.
struct Fake {
    calls: mpsc::UnboundedReceiver<Call>,
    events: mpsc::UnboundedSender<Value>,
    /// The last resourceVersion the server handed out.
    version: u64,
    /// Watch and list requests seen: (query, is a watch).
    watch_log: std::sync::Arc<std::sync::Mutex<Vec<(String, bool)>>>,
}

impl Fake {
    /// The next Lease request (time runs on to it).
    async fn next(&mut self) -> Call {
        tokio::time::timeout(Duration::from_secs(120), self.calls.recv())
            .await
            .expect("no Lease request within 120 s")
            .expect("the fake server ended")
    }

    /// The next Lease request, checked for method and path.
    async fn expect(&mut self, method: Method, path: &str) -> Call {
        let call = self.next().await;
        assert_eq!(
            (&call.method, call.path.as_str()),
            (&method, path),
            "body {}",
            call.body
        );
        call
    }

    /// Asserts that no Lease request is sent before `until`.
    async fn nothing_until(&mut self, until: Instant) {
        if let Ok(Some(call)) = tokio::time::timeout_at(until, self.calls.recv()).await {
            panic!(
                "unexpected {} {} at +{:?} before +{:?}: {}",
                call.method,
                call.path,
                call.at.elapsed(),
                until.elapsed(),
                call.body
            );
        }
    }

    /// A fresh resourceVersion.
    fn bump(&mut self) -> u64 {
        self.version += 1;
        self.version
    }

    /// Answers `call` with `lease` (201 for a create) and shows it to watchers, as the API
    /// server would.
    fn ok(&mut self, call: Call, lease: Value) {
        let (status, kind) = if call.method == Method::POST {
            (StatusCode::CREATED, "ADDED")
        } else {
            (StatusCode::OK, "MODIFIED")
        };
        respond(call.send, status, lease.clone());
        if call.method != Method::GET {
            self.event(kind, lease);
        }
    }

    /// Answers `call` with the written body as stored at a new resourceVersion.
    fn store(&mut self, call: Call) -> Value {
        let version = self.bump();
        let mut stored = call.body.clone();
        stored["apiVersion"] = json!("coordination.k8s.io/v1");
        stored["kind"] = json!("Lease");
        stored["metadata"] =
            json!({"name": NAME, "namespace": NS, "resourceVersion": version.to_string()});
        self.ok(call, stored.clone());
        stored
    }

    fn fail(&mut self, call: Call, code: u16, reason: &str) {
        respond(
            call.send,
            StatusCode::from_u16(code).unwrap(),
            api_status(code, reason, "answered by the test"),
        );
    }

    /// A watch event (`ADDED`, `MODIFIED`, `DELETED`) for the Lease.
    fn event(&mut self, kind: &str, lease: Value) {
        let _ = self.events.send(json!({"type": kind, "object": lease}));
    }
}

/// The fake server: answers lists with the Lease as events left it, holds each watch until an
/// event arrives (then answers it and ends that watch: the watcher watches again from there),
/// and forwards every other request to the test.
async fn serve(
    mut handle: MockHandle,
    mut listed: Option<Value>,
    calls: mpsc::UnboundedSender<Call>,
    mut events: mpsc::UnboundedReceiver<Value>,
    log: std::sync::Arc<std::sync::Mutex<Vec<(String, bool)>>>,
) {
    let mut watch: Option<SendResponse<Response<Body>>> = None;
    let mut queued: Vec<Value> = Vec::new();
    let answer = |send: SendResponse<Response<Body>>, events: &mut Vec<Value>| {
        let lines: Vec<String> = events.drain(..).map(|e| e.to_string()).collect();
        send.send_response(
            Response::builder()
                .status(StatusCode::OK)
                .body(Body::from(format!("{}\n", lines.join("\n")).into_bytes()))
                .unwrap(),
        );
    };
    loop {
        tokio::select! {
            request = handle.next_request() => {
                let Some((req, send)) = request else { return };
                let query = req.uri().query().unwrap_or("").to_string();
                if req.method() == Method::GET && req.uri().path() == LEASES {
                    let watching = query.split('&').any(|p| p == "watch=true");
                    log.lock().unwrap().push((query, watching));
                    if !watching {
                        respond(send, StatusCode::OK, json!({
                            "apiVersion": "coordination.k8s.io/v1",
                            "kind": "LeaseList",
                            "metadata": {"resourceVersion": "1"},
                            "items": listed.iter().collect::<Vec<_>>(),
                        }));
                    } else if queued.is_empty() {
                        watch = Some(send);
                    } else {
                        answer(send, &mut queued);
                    }
                    continue;
                }
                let method = req.method().clone();
                let path = req.uri().path().to_string();
                let bytes = req.into_body().collect_bytes().await.unwrap();
                let body = if bytes.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_slice(&bytes).unwrap()
                };
                let call = Call { method, path, body, at: Instant::now(), send };
                if calls.send(call).is_err() {
                    return;
                }
            }
            event = events.recv() => {
                let Some(event) = event else { return };
                listed = (event["type"] != "DELETED").then(|| event["object"].clone());
                queued.push(event);
                if let Some(send) = watch.take() {
                    answer(send, &mut queued);
                }
            }
        }
    }
}

/// Elects `ME` against a fake server whose Lease is `listed`.
async fn start(listed: Option<Value>) -> (Leadership, Fake) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let (calls_tx, calls) = mpsc::unbounded_channel();
    let (events, events_rx) = mpsc::unbounded_channel();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let version = listed
        .as_ref()
        .and_then(|l| l["metadata"]["resourceVersion"].as_str())
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    tokio::spawn(serve(handle, listed, calls_tx, events_rx, log.clone()));
    let leadership = Leadership::elect(Client::new(service, "default"), NAME, NS, ME)
        .await
        .unwrap();
    let fake = Fake {
        calls,
        events,
        version,
        watch_log: log,
    };
    (leadership, fake)
}

/// The elector's first read finds no Lease; it creates one holding it. Answers both; returns
/// the stored Lease and when the create was sent.
async fn acquire_by_create(leadership: &mut Leadership, fake: &mut Fake) -> (Value, Instant) {
    let read = fake.expect(Method::GET, &lease_path()).await;
    fake.fail(read, 404, "NotFound");
    let create = fake.expect(Method::POST, LEASES).await;
    let sent = create.at;
    let stored = fake.store(create);
    tokio::time::timeout(Duration::from_secs(1), leadership.changed())
        .await
        .expect("leads once created");
    assert!(leadership.is_leader());
    (stored, sent)
}

fn spec_of(call: &Call) -> &Value {
    &call.body["spec"]
}

#[tokio::test(start_paused = true)]
async fn acquires_by_create_when_the_lease_is_absent() {
    let (mut leadership, mut fake) = start(None).await;
    let started = Instant::now();
    assert!(!leadership.is_leader(), "not before the Lease is held");

    let read = fake.expect(Method::GET, &lease_path()).await;
    assert_eq!(read.at, started, "the first attempt is at once");
    fake.fail(read, 404, "NotFound");
    let create = fake.expect(Method::POST, LEASES).await;
    let spec = spec_of(&create).clone();
    assert_eq!(create.body["metadata"]["name"], NAME);
    assert_eq!(create.body["metadata"]["namespace"], NS);
    assert_eq!(spec["holderIdentity"], ME);
    assert_eq!(spec["leaseDurationSeconds"], 15);
    assert_eq!(spec["leaseTransitions"], 0);
    assert!(spec["acquireTime"].is_string(), "{spec}");
    assert_eq!(spec["acquireTime"], spec["renewTime"]);
    let fence = leadership.fence();
    assert!(!fence.held(), "not before the create is answered");
    let sent = create.at;
    fake.store(create);
    leadership.changed().await;
    assert!(leadership.is_leader() && fence.held());
    assert_eq!(leadership.leads_until(), Some(sent + RENEW_DEADLINE));

    // The field-selected watch of the Lease: one list and a watch, no other read.
    let log = fake.watch_log.lock().unwrap().clone();
    assert!(log.len() >= 2, "{log:?}");
    assert!(
        log.iter()
            .all(|(query, _)| query.contains("fieldSelector=metadata.name%3Dtrainscale-leader")),
        "{log:?}"
    );
    assert!(!log[0].1 && log[1].1, "a list, then a watch: {log:?}");
}

#[tokio::test(start_paused = true)]
async fn the_leader_renews_every_retry_period_with_the_resource_version() {
    let (mut leadership, mut fake) = start(None).await;
    let (created, created_at) = acquire_by_create(&mut leadership, &mut fake).await;
    let mut known = created;
    let mut last = created_at;
    for _ in 0..5 {
        // Only renewals: no read of the Lease while it is ours.
        let renew = fake.expect(Method::PATCH, &lease_path()).await;
        assert_eq!(renew.at, last + RETRY_PERIOD);
        assert_eq!(
            renew.body["metadata"]["resourceVersion"], known["metadata"]["resourceVersion"],
            "the precondition is the version last written"
        );
        let spec = spec_of(&renew);
        assert_eq!(spec["holderIdentity"], ME);
        assert_eq!(spec["acquireTime"], known["spec"]["acquireTime"], "kept");
        assert_eq!(spec["leaseTransitions"], 0);
        assert_eq!(spec["leaseDurationSeconds"], 15);
        assert!(spec["renewTime"].is_string());
        last = renew.at;
        known = fake.store(renew);
        settle().await;
        assert!(leadership.is_leader());
        assert_eq!(leadership.leads_until(), Some(last + RENEW_DEADLINE));
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_deleted_while_leading_is_recreated() {
    let (mut leadership, mut fake) = start(None).await;
    let (_, created_at) = acquire_by_create(&mut leadership, &mut fake).await;

    // Deleted behind the leader's back, unseen by its watch: the renewal meets 404 and the
    // elector creates it again, leading throughout.
    let renew = fake.expect(Method::PATCH, &lease_path()).await;
    assert_eq!(renew.at, created_at + RETRY_PERIOD);
    fake.fail(renew, 404, "NotFound");
    let create = fake.expect(Method::POST, LEASES).await;
    assert_eq!(create.at, created_at + RETRY_PERIOD, "at once");
    assert_eq!(spec_of(&create)["holderIdentity"], ME);
    assert_eq!(spec_of(&create)["leaseTransitions"], 0);
    let recreated_at = create.at;
    let stored = fake.store(create);
    settle().await;
    assert!(leadership.is_leader());
    assert_eq!(
        leadership.leads_until(),
        Some(recreated_at + RENEW_DEADLINE)
    );

    // Deleted again, and the watch shows it: created again at once, not at the next renewal.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let deleted_at = Instant::now();
    fake.event("DELETED", stored);
    let create = fake.expect(Method::POST, LEASES).await;
    assert_eq!(create.at, deleted_at);
    fake.store(create);
    settle().await;
    assert_eq!(leadership.leads_until(), Some(deleted_at + RENEW_DEADLINE));

    // The leader never stopped leading.
    assert!(
        tokio::time::timeout(Duration::from_millis(1), leadership.changed())
            .await
            .is_err(),
        "leadership did not change"
    );
}

#[tokio::test(start_paused = true)]
async fn a_follower_takes_the_lease_only_after_lease_duration_without_change_on_its_own_clock() {
    // Another replica holds it, and its renewTime is far in the future: only the follower's
    // own clock counts.
    let held = lease("replica-b", 5, FUTURE, 3);
    let (mut leadership, mut fake) = start(Some(held.clone())).await;
    let started = Instant::now();
    let read = fake.expect(Method::GET, &lease_path()).await;
    fake.ok(read, held.clone());

    // The holder renews every 2 s for 20 s: the follower sends nothing.
    let mut last_change = started;
    for i in 1..=10 {
        tokio::time::sleep_until(started + RETRY_PERIOD * i).await;
        let version = fake.bump();
        fake.event(
            "MODIFIED",
            lease("replica-b", version, &future(i.into()), 3),
        );
        last_change = Instant::now();
    }
    // Then it stops: nothing for LEASE_DURATION after the last change the follower saw.
    fake.nothing_until(last_change + LEASE_DURATION).await;
    assert!(!leadership.is_leader());

    // At its first attempt from then on, it takes the Lease, guarded by what it last saw.
    let take = fake.expect(Method::PATCH, &lease_path()).await;
    assert!(
        take.at >= last_change + LEASE_DURATION
            && take.at < last_change + LEASE_DURATION + RETRY_PERIOD,
        "taken {:?} after the last change",
        take.at - last_change
    );
    assert_eq!(
        take.body["metadata"]["resourceVersion"],
        fake.version.to_string()
    );
    let spec = spec_of(&take).clone();
    assert_eq!(spec["holderIdentity"], ME);
    assert_eq!(spec["leaseTransitions"], 4, "one more transition");
    assert_ne!(spec["acquireTime"], held["spec"]["acquireTime"]);
    assert_eq!(spec["acquireTime"], spec["renewTime"]);
    let sent = take.at;
    fake.store(take);
    leadership.changed().await;
    assert!(leadership.is_leader());
    assert_eq!(leadership.leads_until(), Some(sent + RENEW_DEADLINE));
}

#[tokio::test(start_paused = true)]
async fn a_released_or_deleted_lease_is_taken_at_once_by_a_follower() {
    let held = lease("replica-b", 5, FUTURE, 3);
    let (mut leadership, mut fake) = start(Some(held.clone())).await;
    let read = fake.expect(Method::GET, &lease_path()).await;
    fake.ok(read, held);

    // The holder releases it (an empty holder): taken at once.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let version = fake.bump();
    let released = lease("", version, FUTURE, 3);
    fake.event("MODIFIED", released);
    let released_at = Instant::now();
    let take = fake.expect(Method::PATCH, &lease_path()).await;
    assert_eq!(take.at, released_at);
    assert_eq!(
        take.body["metadata"]["resourceVersion"],
        version.to_string()
    );
    assert_eq!(spec_of(&take)["leaseTransitions"], 4);
    // Someone else was faster: 409, re-read, another holder renewing: not leading, no write.
    fake.fail(take, 409, "Conflict");
    let reread = fake.expect(Method::GET, &lease_path()).await;
    assert_eq!(reread.at, released_at, "re-read at once");
    let version = fake.bump();
    let other = lease("replica-c", version, FUTURE, 4);
    fake.ok(reread, other.clone());
    settle().await;
    assert!(!leadership.is_leader());

    // replica-c's Lease is deleted: the follower creates it at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    fake.event("DELETED", other);
    let deleted_at = Instant::now();
    let create = fake.expect(Method::POST, LEASES).await;
    assert_eq!(create.at, deleted_at);
    // replica-c recreated it first: AlreadyExists, re-read, replica-c's: not leading.
    fake.fail(create, 409, "AlreadyExists");
    let reread = fake.expect(Method::GET, &lease_path()).await;
    let version = fake.bump();
    fake.ok(reread, lease("replica-c", version, FUTURE, 0));
    fake.nothing_until(deleted_at + LEASE_DURATION - Duration::from_millis(1))
        .await;
    assert!(!leadership.is_leader());
    assert!(
        tokio::time::timeout(Duration::from_millis(1), leadership.changed())
            .await
            .is_err(),
        "never led"
    );
}

#[tokio::test(start_paused = true)]
async fn renewals_that_fail_or_hang_end_leadership_at_the_renew_deadline_after_the_last_sent() {
    let (mut leadership, mut fake) = start(None).await;
    acquire_by_create(&mut leadership, &mut fake).await;
    let renew = fake.expect(Method::PATCH, &lease_path()).await;
    let last_sent = renew.at;
    // The answer comes late (1 s): the term counts from when it was sent, not answered.
    tokio::time::sleep(Duration::from_secs(1)).await;
    fake.store(renew);
    settle().await;
    let deadline = last_sent + RENEW_DEADLINE;
    assert_eq!(leadership.leads_until(), Some(deadline));
    let fence = leadership.fence();

    // From now on every renewal fails, or hangs (never answered).
    let failing = tokio::spawn(async move {
        let mut hanging = Vec::new();
        let mut sent = Vec::new();
        loop {
            let Some(call) = fake.calls.recv().await else {
                break;
            };
            assert_eq!(call.method, Method::PATCH, "{}", call.path);
            sent.push(call.at);
            match sent.len() % 3 {
                0 => fake.fail(call, 503, "ServiceUnavailable"),
                1 => hanging.push(call.send),
                _ => fake.fail(call, 500, "InternalError"),
            }
            if sent.len() == 6 {
                return (sent, hanging.len());
            }
        }
        (sent, hanging.len())
    });
    let lost = tokio::spawn({
        let fence = fence.clone();
        async move {
            fence.lost().await;
            Instant::now()
        }
    });

    tokio::time::sleep_until(deadline - Duration::from_millis(1)).await;
    assert!(leadership.is_leader() && fence.held(), "1 ms before");
    leadership.changed().await;
    assert_eq!(Instant::now(), deadline, "lost exactly at the deadline");
    assert!(!leadership.is_leader() && !fence.held());
    assert_eq!(leadership.leads_until(), None);
    assert_eq!(lost.await.unwrap(), deadline);

    let (sent, hung) = failing.await.unwrap();
    assert!(hung >= 2, "hanging renewals: {hung}");
    // A hanging renewal is given up within the request timeout: the next is on schedule.
    for (i, at) in sent.iter().enumerate() {
        assert_eq!(
            *at,
            last_sent + RETRY_PERIOD * (i as u32 + 1),
            "renewal {i}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_conflicting_renewal_rereads_and_loses_to_another_holder() {
    let (mut leadership, mut fake) = start(None).await;
    acquire_by_create(&mut leadership, &mut fake).await;

    // A first conflict: the re-read Lease is still ours (another field changed): renewed at
    // once with the version read.
    let renew = fake.expect(Method::PATCH, &lease_path()).await;
    let at = renew.at;
    let mut ours = renew.body.clone();
    fake.fail(renew, 409, "Conflict");
    let reread = fake.expect(Method::GET, &lease_path()).await;
    assert_eq!(reread.at, at);
    let version = fake.bump();
    ours["apiVersion"] = json!("coordination.k8s.io/v1");
    ours["kind"] = json!("Lease");
    ours["metadata"] = json!({"name": NAME, "namespace": NS, "resourceVersion": version.to_string(), "labels": {"a": "b"}});
    fake.ok(reread, ours);
    let again = fake.expect(Method::PATCH, &lease_path()).await;
    assert_eq!(again.at, at);
    assert_eq!(
        again.body["metadata"]["resourceVersion"],
        version.to_string()
    );
    fake.store(again);
    settle().await;
    assert_eq!(leadership.leads_until(), Some(at + RENEW_DEADLINE));

    // Then another replica holds it: 409, re-read, lost at once, and no write for
    // LEASE_DURATION while its holder renews.
    let renew = fake.expect(Method::PATCH, &lease_path()).await;
    let at = renew.at;
    fake.fail(renew, 409, "Conflict");
    let reread = fake.expect(Method::GET, &lease_path()).await;
    let version = fake.bump();
    fake.ok(reread, lease("replica-b", version, FUTURE, 1));
    leadership.changed().await;
    assert_eq!(Instant::now(), at, "lost on the re-read");
    assert!(!leadership.is_leader());
    fake.nothing_until(at + LEASE_DURATION - Duration::from_millis(1))
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_takeover_seen_by_the_watch_is_confirmed_by_a_read_and_ends_leadership() {
    let (mut leadership, mut fake) = start(None).await;
    let (_, created_at) = acquire_by_create(&mut leadership, &mut fake).await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    let version = fake.bump();
    let taken = lease("replica-b", version, FUTURE, 1);
    fake.event("MODIFIED", taken.clone());
    let seen_at = Instant::now();
    let read = fake.expect(Method::GET, &lease_path()).await;
    assert_eq!(read.at, seen_at, "read at once, before the next renewal");
    assert!(read.at < created_at + RETRY_PERIOD);
    fake.ok(read, taken);
    leadership.changed().await;
    assert_eq!(Instant::now(), seen_at);
    assert!(!leadership.is_leader());
    fake.nothing_until(seen_at + LEASE_DURATION - Duration::from_millis(1))
        .await;
}

#[tokio::test(start_paused = true)]
async fn the_leader_releases_with_an_empty_holder() {
    let (mut leadership, mut fake) = start(None).await;
    let (created, _) = acquire_by_create(&mut leadership, &mut fake).await;
    let fence = leadership.fence();
    let releasing = tokio::spawn(leadership.release());
    let release = fake.expect(Method::PATCH, &lease_path()).await;
    assert!(!fence.held(), "fences drop before the Lease is released");
    assert_eq!(
        release.body["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    let spec = spec_of(&release);
    assert_eq!(spec["holderIdentity"], "");
    assert_eq!(spec["leaseDurationSeconds"], 1);
    assert_eq!(spec["leaseTransitions"], 0, "kept");
    assert!(spec["renewTime"].is_string() && spec["acquireTime"].is_string());
    fake.store(release);
    tokio::time::timeout(Duration::from_secs(1), releasing)
        .await
        .expect("released")
        .unwrap();
    assert!(!fence.held());
}

#[tokio::test(start_paused = true)]
async fn a_follower_releasing_writes_nothing() {
    let held = lease("replica-b", 5, FUTURE, 3);
    let (leadership, mut fake) = start(Some(held.clone())).await;
    let read = fake.expect(Method::GET, &lease_path()).await;
    fake.ok(read, held);
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::time::timeout(Duration::from_secs(1), leadership.release())
        .await
        .expect("released at once");
    assert!(
        matches!(
            fake.calls.try_recv(),
            Err(mpsc::error::TryRecvError::Empty | mpsc::error::TryRecvError::Disconnected)
        ),
        "a follower wrote on release"
    );
}

#[tokio::test]
async fn an_empty_identity_is_refused() {
    let (service, _handle) = mock::pair::<Request<Body>, Response<Body>>();
    let error = Leadership::elect(Client::new(service, "default"), NAME, NS, "")
        .await
        .err()
        .expect("refused");
    assert_eq!(error.to_string(), "the Lease holder identity is empty");
}
