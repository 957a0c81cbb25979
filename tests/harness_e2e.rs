//! The e2e harness itself (`tests/e2e/kmock_cluster.py`), checked against the running emulator
//! without the daemon: it answers as an API server that enforces RBAC would.
//!
//! - [`the_service_account_gets_what_deploy_grants_and_a_403_status_for_the_rest`]: the RBAC of
//!   `deploy/` enforced for the service account's token, the API server's 403 Status (cluster
//!   scope, namespace, subresource, named object, other group, non-resource path), 401 without a
//!   token, `/_harness/denied` and `?by=user`; a policy of `--rbac` files (resourceNames, a list
//!   naming its object by field selector); `--no-rbac`; a bad RBAC file refused with its field.
//! - [`writes_answer_as_the_api_server_does`]: 409 on a stale resourceVersion, 400 on a create
//!   into another namespace, the status subresource, `generation`, `deletecollection` by label
//!   and field selector, DELETE of a Lease, and a watch from before `/_harness/compact` (410).
//! - [`jobs_complete_suspend_and_their_pods_go_where_they_fit`]: `--nodes` of mixed shapes;
//!   `completions: 0` completes; a pod that fits nowhere stays Pending and Unschedulable until a
//!   node grows; first fit in name order with taints and node selectors; suspend and resume; a
//!   pod bound by another scheduler where it does not fit ends Failed `OutOfcpu` and counts.
//! - [`deleted_pods_terminate_for_their_grace_period`]: `--pod-grace`: a bound, running pod
//!   deleted or evicted terminates (`deletionTimestamp`, `deletionGracePeriodSeconds`), cannot be
//!   bound, and its kubelet removes it; grace 0, an ended or an unbound pod goes at once.
//! - [`the_harness_self_test_passes`]: `kmock_cluster.py --self-test`.
//! - [`the_kueue_model_passes_its_live_check`]: `kueue_check.py`, the emulator's Kueue model over HTTP.
//!
//! Gated like `daemon_e2e.rs` (`cfg(kmock)`, see `build.rs`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{
    DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::response::StatusSummary;
use kube::{Api, Client};
use serde_json::{Value, json};

#[path = "support/kmock_harness.rs"]
mod kmock_harness;

use kmock_harness::{Denial, admin_kubeconfig, denials};

const SA: &str = "system:serviceaccount:trainscale-system:trainscale";
const DEADLINE: Duration = Duration::from_secs(30);

/// Kills a child process when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn require_kmock() {
    let found = Command::new("python3")
        .args(["-c", "import kmock, yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "python3 with kmock is missing: pip install 'kmock==0.8.*' 'PyYAML==6.*' (CI installs it)"
    );
}

fn helper() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/kmock_cluster.py")
}

/// The emulator, its URL and kubeconfig (the service account's; `.admin` beside it).
struct Emulator {
    _child: Guard,
    url: String,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

/// Starts the emulator helper with `flags`; returns once it is READY.
fn spawn_emulator(flags: &[&str]) -> Emulator {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Guard(
        Command::new("python3")
            .arg(helper())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--lifetime", "90"])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the emulator helper"),
    );
    let mut ready = String::new();
    BufReader::new(child.0.stdout.take().expect("the helper's stdout"))
        .read_line(&mut ready)
        .expect("the helper says READY");
    let url = ready
        .strip_prefix("READY ")
        .unwrap_or_else(|| panic!("emulator said {ready:?}"))
        .trim()
        .to_string();
    Emulator {
        _child: child,
        url,
        kubeconfig,
        _dir: dir,
    }
}

async fn client_of(path: &Path) -> Client {
    let kc = Kubeconfig::read_from(path).expect("the emulator's kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("a client config");
    Client::try_from(config).expect("a client")
}

impl Emulator {
    /// A client with the service account's token.
    async fn sa(&self) -> Client {
        client_of(&self.kubeconfig).await
    }

    /// A client with the admin's token.
    async fn admin(&self) -> Client {
        client_of(&admin_kubeconfig(&self.kubeconfig)).await
    }

    /// A plain HTTP request (`token` as bearer): status code and JSON body.
    fn raw(&self, method: &str, path: &str, token: Option<&str>) -> (u16, Value) {
        let address = self.url.trim_start_matches("http://");
        let mut stream = TcpStream::connect(address).expect("the emulator answers");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("a read timeout");
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {address}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .expect("a request");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("a response");
        let (head, body) = response.split_once("\r\n\r\n").expect("headers and a body");
        let code = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("a status code");
        (code, serde_json::from_str(body).unwrap_or(Value::Null))
    }
}

/// The Status of a refused request.
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The Status refusing a POST of `body` to pod `name`'s `subresource`.
async fn refused_post(
    pods: &Api<Pod>,
    subresource: &str,
    name: &str,
    body: &Value,
) -> kube::core::Status {
    refusal(
        pods.create_subresource::<Value, Value>(subresource, name, &PostParams::default(), body)
            .await,
    )
}

fn denial(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Denial {
    Denial {
        user: SA.into(),
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        subresource: sub.into(),
        namespace: ns.into(),
        name: name.into(),
    }
}

async fn harness_get<T: serde::de::DeserializeOwned>(client: &Client, path: &str) -> T {
    let request = http::Request::get(path)
        .body(Vec::new())
        .expect("a request");
    client
        .request(request)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

async fn harness_post<T: serde::de::DeserializeOwned>(client: &Client, path: &str) -> T {
    let request = http::Request::post(path)
        .body(Vec::new())
        .expect("a request");
    client
        .request(request)
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

fn pod(name: &str, phase: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": phase},
    }))
    .expect("a Pod")
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn the_service_account_gets_what_deploy_grants_and_a_403_status_for_the_rest() {
    require_kmock();
    let emulator = spawn_emulator(&["--no-controllers"]);
    let (sa, admin) = (emulator.sa().await, emulator.admin().await);

    // Granted by deploy/rbac.yaml: pods listed cluster-wide, its Lease read in its namespace (a
    // 404 is an authorized answer), discovery.
    Api::<Pod>::all(sa.clone())
        .list(&ListParams::default())
        .await
        .expect("the service account lists pods");
    let lease = Api::<Lease>::namespaced(sa.clone(), "trainscale-system")
        .get_opt("trainscale-leader")
        .await
        .expect("the service account reads its Lease");
    assert!(lease.is_none());
    assert_eq!(
        emulator
            .raw("GET", "/apis/batch/v1", Some("trainscale-sa"))
            .0,
        200
    );

    // Denied: the exact Status of the API server.
    let s = refusal(
        Api::<Pod>::namespaced(sa.clone(), "ml")
            .create(&PostParams::default(), &pod("p", "Pending", json!({})))
            .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        s.message,
        format!(
            "pods is forbidden: User \"{SA}\" cannot create resource \"pods\" in API group \"\" in the namespace \"ml\""
        )
    );
    let details = s.details.expect("details");
    assert_eq!(
        (
            details.kind.as_str(),
            details.name.as_str(),
            details.group.as_str()
        ),
        ("pods", "", "")
    );
    let s = refusal(
        Api::<Job>::namespaced(sa.clone(), "ml")
            .delete("j", &DeleteParams::default())
            .await,
    );
    assert_eq!(
        s.message,
        format!(
            "jobs.batch \"j\" is forbidden: User \"{SA}\" cannot delete resource \"jobs\" in API group \"batch\" in the namespace \"ml\""
        )
    );
    let details = s.details.expect("details");
    assert_eq!(
        (
            details.kind.as_str(),
            details.name.as_str(),
            details.group.as_str()
        ),
        ("jobs", "j", "batch")
    );
    let s = refusal(
        Api::<Lease>::namespaced(sa.clone(), "default")
            .list(&ListParams::default())
            .await,
    );
    assert!(
        s.message.ends_with("cannot list resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"default\""),
        "the Role grants leases in trainscale-system only: {}",
        s.message
    );
    let (code, body) = emulator.raw(
        "POST",
        "/api/v1/namespaces/ml/pods/p/eviction",
        Some("trainscale-sa"),
    );
    assert_eq!(code, 403);
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": format!("pods \"p\" is forbidden: User \"{SA}\" cannot create resource \"pods/eviction\" in API group \"\" in the namespace \"ml\""),
               "reason": "Forbidden", "details": {"name": "p", "kind": "pods"}, "code": 403})
    );
    let (code, body) = emulator.raw("GET", "/api/v1/secrets", Some("trainscale-sa"));
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        format!(
            "secrets is forbidden: User \"{SA}\" cannot list resource \"secrets\" in API group \"\" at the cluster scope"
        )
    );
    let (code, body) = emulator.raw("GET", "/metrics", Some("trainscale-sa"));
    assert_eq!(code, 403);
    assert_eq!(
        body["message"],
        format!("forbidden: User \"{SA}\" cannot get path \"/metrics\"")
    );
    // No token, or an unknown one: 401.
    for token in [None, Some("nobody")] {
        let (code, body) = emulator.raw("GET", "/api/v1/pods", token);
        assert_eq!(
            (code, body["reason"].as_str()),
            (401, Some("Unauthorized")),
            "{token:?}"
        );
    }
    // The admin may do anything.
    Api::<Pod>::namespaced(admin.clone(), "ml")
        .create(&PostParams::default(), &pod("p", "Pending", json!({})))
        .await
        .expect("the admin creates a pod");

    // Every denial, in order.
    assert_eq!(
        denials(&admin).await,
        [
            denial("create", "", "pods", "", "ml", ""),
            denial("delete", "batch", "jobs", "", "ml", "j"),
            denial("list", "coordination.k8s.io", "leases", "", "default", ""),
            denial("create", "", "pods", "eviction", "ml", "p"),
            denial("list", "", "secrets", "", "", ""),
            denial("get", "", "", "", "", ""),
        ]
    );
    let by_user: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>> =
        harness_get(&admin, "/_harness/requests?by=user").await;
    assert_eq!(by_user[SA].get("create pods"), Some(&1), "{by_user:?}");
    assert_eq!(by_user["admin"].get("create pods"), Some(&1), "{by_user:?}");
    assert_eq!(
        by_user["-"].get("list pods"),
        Some(&2),
        "no token, or an unknown one"
    );

    // A policy of its own (--rbac): resourceNames grant the named Lease only; a list or watch
    // naming it by field selector counts as naming it.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let policy = dir.path().join("rbac.yaml");
    std::fs::write(
        &policy,
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: trainscale, namespace: trainscale-system}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: one-lease}\n\
         rules: [{apiGroups: [coordination.k8s.io], resources: [leases], resourceNames: [leader], verbs: [get, list, watch]}]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: one-lease, namespace: team}\n\
         roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: one-lease}\n\
         subjects: [{kind: Group, name: system:serviceaccounts:trainscale-system}]\n",
    )
    .expect("the policy file");
    let custom = spawn_emulator(&[
        "--no-controllers",
        "--rbac",
        policy.to_str().expect("a UTF-8 path"),
    ]);
    let leases: Api<Lease> = Api::namespaced(custom.sa().await, "team");
    assert!(leases.get_opt("leader").await.expect("granted").is_none());
    let s = refusal(leases.get("other").await);
    assert_eq!(s.details.expect("details").name, "other");
    refusal(leases.list(&ListParams::default()).await);
    leases
        .list(&ListParams::default().fields("metadata.name=leader"))
        .await
        .expect("a list naming the Lease by field selector");
    refusal(
        Api::<Pod>::all(custom.sa().await)
            .list(&ListParams::default())
            .await,
    );
    assert_eq!(denials(&custom.admin().await).await.len(), 3);

    // --no-rbac: anyone may do anything.
    let open = spawn_emulator(&["--no-controllers", "--no-rbac"]);
    assert_eq!(open.raw("GET", "/api/v1/nodes", None).0, 200);

    // A bad RBAC file: one line naming the file, object and field; exit status 2.
    std::fs::write(
        &policy,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: b}\nsubjects: []\n",
    )
    .expect("the policy file");
    let out = Command::new("python3")
        .arg(helper())
        .arg("--kubeconfig")
        .arg(dir.path().join("kubeconfig"))
        .arg("--rbac")
        .arg(&policy)
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs the emulator helper");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rbac.yaml: document 1: ClusterRoleBinding b: roleRef is required"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn writes_answer_as_the_api_server_does() {
    require_kmock();
    let emulator = spawn_emulator(&["--no-controllers"]);
    let admin = emulator.admin().await;

    // A Job (no controllers: nothing else writes it).
    let jobs: Api<Job> = Api::namespaced(admin.clone(), "ml");
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"parallelism": 1, "completions": 1, "completionMode": "Indexed",
                 "template": {"spec": {"containers": [{"name": "c", "image": "i"}],
                                       "restartPolicy": "Never"}}},
        "status": {"active": 7},
    }))
    .expect("a Job");
    let created = jobs
        .create(&PostParams::default(), &job)
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    let stale = created
        .metadata
        .resource_version
        .clone()
        .expect("a resourceVersion");

    // A write of the object: spec changes, status does not; generation bumped.
    let patched = jobs
        .patch(
            "j",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"parallelism": 2},
                                 "status": {"active": 1}})),
        )
        .await
        .expect("patch");
    assert_eq!(patched.spec.as_ref().and_then(|s| s.parallelism), Some(2));
    assert_eq!(patched.status.as_ref().and_then(|s| s.active), Some(7));
    assert_eq!(patched.metadata.generation, Some(2));
    // A write of /status: status changes, spec does not; generation kept.
    let patched = jobs
        .patch_status(
            "j",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"parallelism": 5},
                                 "status": {"active": 2}})),
        )
        .await
        .expect("patch status");
    assert_eq!(patched.spec.as_ref().and_then(|s| s.parallelism), Some(2));
    assert_eq!(patched.status.as_ref().and_then(|s| s.active), Some(2));
    assert_eq!(patched.metadata.generation, Some(2));
    // Labels only: no new generation. The same again: nothing stored.
    let labelled = jobs
        .patch(
            "j",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .expect("patch");
    assert_eq!(labelled.metadata.generation, Some(2));
    let again = jobs
        .patch(
            "j",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .expect("patch");
    assert_eq!(
        again.metadata.resource_version, labelled.metadata.resource_version,
        "a write that changes nothing"
    );

    // A stale resourceVersion: 409 Conflict, nothing written; the current one: written.
    let s = refusal(
        jobs.patch(
            "j",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": stale},
                                 "spec": {"parallelism": 3}})),
        )
        .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        "Operation cannot be fulfilled on jobs.batch \"j\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(
        jobs.get("j")
            .await
            .expect("get")
            .spec
            .and_then(|s| s.parallelism),
        Some(2)
    );
    let s = refusal(
        jobs.patch_status(
            "j",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": stale},
                                 "status": {"active": 0}})),
        )
        .await,
    );
    assert_eq!(s.code, 409, "a status write is guarded too");
    let current = labelled.metadata.resource_version.clone();
    jobs.patch(
        "j",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"resourceVersion": current},
                             "spec": {"parallelism": 3}})),
    )
    .await
    .expect("a write carrying the current resourceVersion");
    // PUT with a stale resourceVersion: 409 as well.
    let mut replaced = jobs.get("j").await.expect("get");
    replaced.metadata.resource_version = Some(stale.clone());
    let s = refusal(jobs.replace("j", &PostParams::default(), &replaced).await);
    assert_eq!(s.code, 409);

    // A create into another namespace than the URL's: 400.
    let configs: Api<ConfigMap> = Api::namespaced(admin.clone(), "ml");
    let elsewhere: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "other"},
    }))
    .expect("a ConfigMap");
    let s = refusal(configs.create(&PostParams::default(), &elsewhere).await);
    assert_eq!(
        (s.code, s.reason.as_str()),
        (400, "BadRequest"),
        "{}",
        s.message
    );

    // deletecollection by label and by status.phase.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "ml");
    for (name, phase, app) in [
        ("a", "Running", "x"),
        ("b", "Succeeded", "x"),
        ("c", "Failed", "x"),
        ("d", "Succeeded", "y"),
    ] {
        pods.create(
            &PostParams::default(),
            &pod(name, phase, json!({"app": app})),
        )
        .await
        .expect("create a pod");
    }
    let names = |pods: Vec<Pod>| -> Vec<String> {
        let mut names: Vec<String> = pods.into_iter().filter_map(|p| p.metadata.name).collect();
        names.sort();
        names
    };
    let gone = pods
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default()
                .labels("app=x")
                .fields("status.phase!=Running"),
        )
        .await
        .expect("deletecollection");
    let gone = gone.left().expect("the deleted pods").items;
    assert_eq!(names(gone), ["b", "c"]);
    let left = pods.list(&ListParams::default()).await.expect("list").items;
    assert_eq!(names(left), ["a", "d"]);
    let s = refusal(
        pods.delete_collection(
            &DeleteParams::default(),
            &ListParams::default().fields("spec.priority=1"),
        )
        .await,
    );
    assert_eq!(s.code, 400);
    assert_eq!(s.message, "field label not supported: spec.priority");

    // A Lease deleted is gone.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "trainscale-system");
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "trainscale-leader"},
        "spec": {"holderIdentity": "x"},
    }))
    .expect("a Lease");
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create the Lease");
    leases
        .delete("trainscale-leader", &DeleteParams::default())
        .await
        .expect("delete the Lease");
    assert!(
        leases
            .get_opt("trainscale-leader")
            .await
            .expect("get")
            .is_none()
    );

    // An eviction: the pod gets `DisruptionTarget` (a MODIFIED event), then goes (DELETED).
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "ml");
    let victim = pods
        .create(&PostParams::default(), &pod("victim", "Running", json!({})))
        .await
        .expect("create a pod");
    let since = victim.metadata.resource_version.clone().unwrap_or_default();
    let mut events = pods
        .watch(&WatchParams::default(), &since)
        .await
        .expect("a watch")
        .boxed();
    let evicted = pods
        .evict("victim", &EvictParams::default())
        .await
        .expect("evict");
    assert_eq!(
        (evicted.status, evicted.code),
        (Some(StatusSummary::Success), 201)
    );
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(10), events.next()).await {
            Ok(Some(Ok(WatchEvent::Modified(p)))) => {
                let disrupted = p.status.and_then(|s| s.conditions).is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
                });
                seen.push(format!("MODIFIED disrupted={disrupted}"));
            }
            Ok(Some(Ok(WatchEvent::Deleted(_)))) => seen.push("DELETED".to_string()),
            // kmock replays the live objects to every new watch first (module docs).
            Ok(Some(Ok(WatchEvent::Added(_)))) => {}
            other => panic!("expected the eviction's events, got {other:?} after {seen:?}"),
        }
    }
    assert_eq!(seen, ["MODIFIED disrupted=true", "DELETED"]);
    assert!(pods.get_opt("victim").await.expect("get").is_none());
    // A pod that does not exist: 404; a body naming another pod: 400.
    let s = refusal(pods.evict("victim", &EvictParams::default()).await);
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));
    let other = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                       "metadata": {"name": "someone-else"}});
    let s = refused_post(&pods, "eviction", "victim", &other).await;
    assert_eq!(
        (s.code, s.message.as_str()),
        (400, "name in URL does not match name in Eviction object")
    );

    // Compaction: a watch from before it ends with 410 Expired.
    let compacted: Value = harness_post(&admin, "/_harness/compact").await;
    assert!(
        compacted["compacted"]
            .as_str()
            .is_some_and(|rv| rv.parse::<u64>().is_ok()),
        "{compacted}"
    );
    let mut events = jobs
        .watch(&WatchParams::default(), &stale)
        .await
        .expect("a watch")
        .boxed();
    match events.next().await {
        Some(Ok(WatchEvent::Error(status))) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    let now = compacted["compacted"].as_str().unwrap_or_default();
    let mut events = jobs
        .watch(&WatchParams::default(), now)
        .await
        .expect("a watch")
        .boxed();
    assert!(
        matches!(events.next().await, Some(Ok(WatchEvent::Added(_)))),
        "a watch from the compacted resourceVersion streams"
    );
}

/// A pod bound to `node-1` (of no owner: the emulator's kubelet admits it) in `phase`.
fn bound_pod(name: &str, phase: &str) -> Pod {
    let mut pod = pod(name, phase, json!({}));
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some("node-1".to_string());
        spec.termination_grace_period_seconds = Some(20);
    }
    pod
}

/// DELETE of pod `name`, answered with the pod still there (terminating).
async fn delete_terminating(pods: &Api<Pod>, name: &str) -> Pod {
    let answer = pods.delete(name, &DeleteParams::default()).await;
    answer
        .expect("delete")
        .left()
        .unwrap_or_else(|| panic!("{name} is gone at once, not terminating"))
}

/// Waits until pod `name` is gone.
async fn until_gone(pods: &Api<Pod>, name: &str) {
    eventually(&format!("{name} removed"), || async {
        pods.get_opt(name)
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn deleted_pods_terminate_for_their_grace_period() {
    require_kmock();
    let emulator = spawn_emulator(&["--pod-grace", "1"]);
    let admin = emulator.admin().await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "ml");
    for p in [
        bound_pod("slow", "Running"),
        bound_pod("forced", "Running"),
        bound_pod("done", "Succeeded"),
        bound_pod("evicted", "Running"),
        pod("unbound", "Pending", json!({})),
    ] {
        pods.create(&PostParams::default(), &p)
            .await
            .expect("create a pod");
    }

    // A bound, running pod deleted: terminating, with the API server's grace period (its
    // `terminationGracePeriodSeconds`), still there; a second DELETE changes nothing.
    let deleted = delete_terminating(&pods, "slow").await;
    assert_eq!(deleted.metadata.deletion_grace_period_seconds, Some(20));
    assert!(deleted.metadata.deletion_timestamp.is_some());
    let again = delete_terminating(&pods, "slow").await;
    assert_eq!(
        again.metadata.resource_version,
        deleted.metadata.resource_version
    );
    // It cannot be bound, and its kubelet removes it (here after 1 s, `--pod-grace`).
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "slow"},
                         "target": {"kind": "Node", "name": "node-1"}});
    let s = refused_post(&pods, "binding", "slow", &binding).await;
    assert_eq!(s.code, 409, "{s:?}");
    until_gone(&pods, "slow").await;

    // Gone at once: a DELETE with grace 0 (a force delete), a pod that ended, an unbound pod.
    for (name, params) in [
        ("forced", DeleteParams::default().grace_period(0)),
        ("done", DeleteParams::default()),
        ("unbound", DeleteParams::default()),
    ] {
        let gone = pods.delete(name, &params).await.expect("delete");
        // The answer is the deleted object or a Status, never a pod left terminating.
        assert!(
            gone.left()
                .is_none_or(|p| p.metadata.deletion_timestamp.is_none())
        );
        assert!(
            pods.get_opt(name).await.expect("get").is_none(),
            "{name} is still there"
        );
    }

    // An eviction: the condition, then the grace period, then gone.
    pods.evict("evicted", &EvictParams::default())
        .await
        .expect("evict");
    let terminating = pods.get("evicted").await.expect("get the evicted pod");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let disrupted = terminating
        .status
        .and_then(|s| s.conditions)
        .is_some_and(|c| c.iter().any(|c| c.type_ == "DisruptionTarget"));
    assert!(disrupted, "the evicted pod carries DisruptionTarget");
    until_gone(&pods, "evicted").await;
}

/// The Job's condition of `kind`: `(status, reason)`.
fn job_condition(job: &Job, kind: &str) -> Option<(String, Option<String>)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// An Indexed Job as the operator makes one (label `trainscale.io/job`), its pods requesting
/// `cpu`.
fn trainer_job(name: &str, count: i32, cpu: &str, pod_spec: Value) -> Job {
    let mut spec = json!({"containers": [{"name": "c", "image": "i",
                                          "resources": {"requests": {"cpu": cpu}}}],
                          "restartPolicy": "Never"});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), pod_spec.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"trainscale.io/job": name}},
        "spec": {"parallelism": count, "completions": count, "completionMode": "Indexed",
                 "template": {"spec": spec}},
    }))
    .expect("a Job")
}

/// Polls `probe` until it returns `Some`, failing after [`DEADLINE`].
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `(name, node, phase)` of the pods of `ns` whose name starts with `prefix`, by name.
async fn pods_of(pods: &Api<Pod>, prefix: &str) -> Vec<(String, Option<String>, Option<String>)> {
    let mut out: Vec<_> = pods
        .list(&ListParams::default())
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                p.status.as_ref().and_then(|s| s.phase.clone()),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn jobs_complete_suspend_and_their_pods_go_where_they_fit() {
    require_kmock();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let nodes_file = dir.path().join("nodes.json");
    let node = |name: &str, zone: &str, cpu: &str, taints: Value, gpu: bool| {
        let mut allocatable = json!({"cpu": cpu, "memory": "16Gi", "pods": "10"});
        if gpu {
            allocatable["nvidia.com/gpu"] = json!("2");
        }
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": name, "labels": {"zone": zone}},
               "spec": {"taints": taints},
               "status": {"allocatable": allocatable, "capacity": allocatable,
                          "conditions": [{"type": "Ready", "status": "True"}]}})
    };
    let nodes = json!([
        node("a-small", "a", "2", json!([]), false),
        node(
            "b-gpu",
            "b",
            "8",
            json!([{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]),
            true
        ),
        node("c-large", "c", "16", json!([]), false),
    ]);
    std::fs::write(&nodes_file, nodes.to_string()).expect("the nodes file");
    let emulator = spawn_emulator(&[
        "--nodes",
        nodes_file.to_str().expect("a UTF-8 path"),
        "--period",
        "0.1",
    ]);
    let admin = emulator.admin().await;
    let jobs: Api<Job> = Api::namespaced(admin.clone(), "ml");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "ml");
    let create = |job: Job| {
        let jobs = jobs.clone();
        async move {
            jobs.create(&PostParams::default(), &job)
                .await
                .expect("create a Job")
        }
    };

    // completions 0: Complete at once, no pods.
    create(trainer_job("zero", 0, "1", json!({}))).await;
    let done = eventually("zero Complete", || async {
        let job = jobs.get("zero").await.expect("get");
        job_condition(&job, "Complete").is_some().then_some(job)
    })
    .await;
    assert_eq!(
        job_condition(&done, "Complete"),
        Some(("True".into(), Some("CompletionsReached".into())))
    );
    let status = done.status.clone().expect("a status");
    assert_eq!((status.succeeded, status.active), (Some(0), Some(0)));
    assert!(status.completion_time.is_some());

    // First fit in name order: the untainted a-small for two 1-CPU pods; b-gpu for the pod that
    // tolerates its taint and selects its zone; the 12-CPU pod fits nowhere.
    create(trainer_job("small", 2, "1", json!({}))).await;
    create(trainer_job(
        "gpu",
        1,
        "1",
        json!({"nodeSelector": {"zone": "b"},
               "tolerations": [{"key": "gpu", "operator": "Exists"}]}),
    ))
    .await;
    create(trainer_job(
        "huge",
        1,
        "12",
        json!({"nodeSelector": {"zone": "a"}}),
    ))
    .await;
    let placed = eventually("small and gpu pods Running", || async {
        let all = pods_of(&pods, "").await;
        (all.len() == 4
            && all
                .iter()
                .filter(|p| p.2.as_deref() == Some("Running"))
                .count()
                == 3)
            .then_some(all)
    })
    .await;
    let at = |name: &str| {
        placed
            .iter()
            .find(|p| p.0 == name)
            .and_then(|p| p.1.clone())
    };
    assert_eq!(at("small-0").as_deref(), Some("a-small"), "{placed:?}");
    assert_eq!(at("small-1").as_deref(), Some("a-small"), "{placed:?}");
    assert_eq!(at("gpu-0").as_deref(), Some("b-gpu"), "{placed:?}");
    let huge = pods.get("huge-0").await.expect("get");
    assert_eq!(huge.spec.as_ref().and_then(|s| s.node_name.clone()), None);
    assert_eq!(
        huge.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    let scheduled = huge
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled").cloned())
        .expect("a PodScheduled condition");
    assert_eq!(
        (scheduled.status.as_str(), scheduled.reason.as_deref()),
        ("False", Some("Unschedulable"))
    );
    let message = scheduled.message.unwrap_or_default();
    assert!(
        message.starts_with("0/3 nodes are available: ")
            && message.contains("1 Insufficient cpu")
            && message.contains("1 node(s) had untolerated taint {gpu: yes}")
            && message.contains("1 node(s) didn't match Pod's node affinity/selector"),
        "{message}"
    );
    // Still pending a few rounds later; then its node grows and the next round places it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let huge = pods.get("huge-0").await.expect("get");
    assert_eq!(
        huge.spec.and_then(|s| s.node_name),
        None,
        "huge fits nowhere"
    );
    Api::<Node>::all(admin.clone())
        .patch_status(
            "a-small",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"allocatable": {"cpu": "16"}}})),
        )
        .await
        .expect("grow a-small");
    eventually("huge placed on the grown node", || async {
        let pod = pods.get("huge-0").await.expect("get");
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        (node.as_deref() == Some("a-small") && phase.as_deref() == Some("Running")).then_some(())
    })
    .await;

    // Suspend: no pods, Suspended=True, no failure; resume: the pods come back.
    jobs.patch(
        "small",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": true}})),
    )
    .await
    .expect("suspend");
    eventually("small suspended", || async {
        let job = jobs.get("small").await.expect("get");
        let empty = pods_of(&pods, "small-").await.is_empty();
        (empty
            && job_condition(&job, "Suspended")
                == Some(("True".into(), Some("JobSuspended".into())))
            && job.status.as_ref().and_then(|s| s.active) == Some(0))
        .then_some(())
    })
    .await;
    jobs.patch(
        "small",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": false}})),
    )
    .await
    .expect("resume");
    eventually("small resumed", || async {
        let job = jobs.get("small").await.expect("get");
        let running = pods_of(&pods, "small-")
            .await
            .iter()
            .filter(|p| p.2.as_deref() == Some("Running"))
            .count();
        (running == 2
            && job_condition(&job, "Suspended")
                == Some(("False".into(), Some("JobResumed".into()))))
        .then_some(())
    })
    .await;
    let failures: std::collections::BTreeMap<String, u64> =
        harness_get(&admin, "/_harness/failures").await;
    assert!(
        failures.is_empty(),
        "suspending fails nothing: {failures:?}"
    );

    // Another scheduler binds a pod where it does not fit (b-gpu: 8 CPUs, 1 held): the kubelet
    // rejects it, OutOfcpu, and the Job controller counts the failure.
    create(trainer_job(
        "alien",
        1,
        "8",
        json!({"schedulerName": "trainscale",
               "tolerations": [{"key": "gpu", "operator": "Exists"}]}),
    ))
    .await;
    eventually("alien-0 created pending", || async {
        pods.get_opt("alien-0").await.expect("get").map(|_| ())
    })
    .await;
    let binding = json!({"apiVersion": "v1", "kind": "Binding",
                         "metadata": {"name": "alien-0"},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": "b-gpu"}});
    pods.create_subresource::<Value, Value>("binding", "alien-0", &PostParams::default(), &binding)
        .await
        .expect("bind alien-0");
    let failed: Vec<Value> = eventually("alien-0 Failed", || async {
        let failed: Vec<Value> = harness_get(&admin, "/_harness/failed-pods").await;
        (!failed.is_empty()).then_some(failed)
    })
    .await;
    assert_eq!(
        failed[0],
        json!({"namespace": "ml", "name": "alien-0", "reason": "OutOfcpu", "node": "b-gpu",
               "owner": "Job"})
    );
    let alien = eventually("alien counts one failure", || async {
        let job = jobs.get("alien").await.expect("get");
        (job.status.as_ref().and_then(|s| s.failed) == Some(1)).then_some(job)
    })
    .await;
    assert_eq!(
        job_condition(&alien, "Failed"),
        None,
        "backoffLimit 6 not reached"
    );
    let failures: std::collections::BTreeMap<String, u64> =
        harness_get(&admin, "/_harness/failures").await;
    assert_eq!(failures.get("ml/alien"), Some(&1), "{failures:?}");
    // The replacement is pending again, for trainscale to bind.
    eventually("alien-0 replaced, pending", || async {
        let pod = pods.get_opt("alien-0").await.expect("get")?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        (pod.spec.and_then(|s| s.node_name).is_none() && phase.as_deref() == Some("Pending"))
            .then_some(())
    })
    .await;
    assert!(denials(&admin).await.is_empty());
}

#[test]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
fn the_harness_self_test_passes() {
    require_kmock();
    python_check(
        &[&helper().to_string_lossy(), "--self-test"],
        "self-test: ",
        50,
    );
}

#[test]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
fn the_kueue_model_passes_its_live_check() {
    require_kmock();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/kueue_check.py");
    python_check(&[&script.to_string_lossy()], "kueue check: ", 20);
}

/// Runs `python3 args` and checks its last line, `<prefix>N of M checks passed`: every check
/// passed, and more than `at_least` of them.
fn python_check(args: &[&str], prefix: &str, at_least: u32) {
    let out = Command::new("python3")
        .args(args)
        .output()
        .expect("python3 runs the check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    let (passed, total) = last
        .strip_prefix(prefix)
        .and_then(|rest| rest.split_once(" checks passed"))
        .and_then(|(counts, _)| counts.split_once(" of "))
        .expect("a summary line");
    assert_eq!(passed, total, "{stdout}");
    assert!(total.parse::<u32>().is_ok_and(|n| n > at_least), "{stdout}");
}
