//! `explain` against a live cluster: one LIST of each resource through kube's mock service builds
//! the same state as the dump of those objects; a job kind without its CRD (404) is skipped, a
//! refused LIST (403) names the resource; an unusable kubeconfig is one line, exit 1.

use std::path::Path;
use std::process::Command;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;
use trainscale::api::JobKey;
use trainscale::cluster::ClusterState;
use trainscale::commands::live::{list_documents, read_cluster};
use trainscale::planner::{PlannerConfig, plan};

#[path = "support/mock_api.rs"]
mod mock_api;

use mock_api::{MockHandle, api_status, expect, respond};

const DUMP: &str = "simulations/examples/cluster.json";

/// The dump's items of `api_version`/`kind`, without `apiVersion` and `kind` (as a LIST's items
/// come).
fn items_of(api_version: &str, kind: &str) -> Vec<Value> {
    let dump: Value = serde_json::from_str(&std::fs::read_to_string(DUMP).unwrap()).unwrap();
    dump["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["apiVersion"] == api_version && i["kind"] == kind)
        .map(|i| {
            let mut i = i.clone();
            let o = i.as_object_mut().unwrap();
            o.remove("apiVersion");
            o.remove("kind");
            i
        })
        .collect()
}

fn list_of(kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": format!("{kind}List"),
           "metadata": {"resourceVersion": "7"}, "items": items})
}

/// Answers the LISTs in order: the dump's nodes, pods, Jobs and TrainingJobs, no PriorityClass,
/// no PyTorch job, and 404 for PaddleJobs (CRD not installed).
async fn serve_dump(mut handle: MockHandle) {
    let answers: [(&str, Option<(&str, &str)>); 9] = [
        ("/api/v1/nodes", Some(("v1", "Node"))),
        ("/api/v1/pods", Some(("v1", "Pod"))),
        ("/apis/batch/v1/jobs", Some(("batch/v1", "Job"))),
        (
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            Some(("scheduling.k8s.io/v1", "PriorityClass")),
        ),
        (
            "/apis/paddlepaddle.org/v1alpha1/trainingjobs",
            Some(("paddlepaddle.org/v1alpha1", "TrainingJob")),
        ),
        ("/apis/paddlepaddle.org/v1/paddlejobs", None),
        (
            "/apis/batch.tensorstack.dev/v1beta1/pytorchtrainingjobs",
            Some(("batch.tensorstack.dev/v1beta1", "PyTorchTrainingJob")),
        ),
        (
            "/apis/kubeflow.org/v1/pytorchjobs",
            Some(("kubeflow.org/v1", "PyTorchJob")),
        ),
        // The elastic Jobs are among the Jobs above; JobSets are not served here.
        ("/apis/jobset.x-k8s.io/v1alpha2/jobsets", None),
    ];
    for (path, kind) in answers {
        let (_, _, _, send) = expect(&mut handle, Method::GET, path).await;
        match kind {
            Some((api_version, kind)) => respond(
                send,
                StatusCode::OK,
                list_of(kind, items_of(api_version, kind)),
            ),
            None => respond(
                send,
                StatusCode::NOT_FOUND,
                api_status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ),
            ),
        }
    }
}

#[tokio::test]
async fn live_lists_build_the_state_the_dump_builds() {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let server = tokio::spawn(serve_dump(handle));
    let live = read_cluster(&client).await.unwrap();
    server.await.unwrap();
    assert!(live.warnings.is_empty(), "{:?}", live.warnings);
    let dump = ClusterState::from_file(Path::new(DUMP)).unwrap();
    let state = &live.state;
    assert_eq!(state.nodes().count(), 4);
    assert!(state.node_id_of("gpu-a").is_some());
    assert_eq!(state.pod_count(), dump.state.pod_count());
    assert_eq!(state.pod_count(), 12);
    let key = JobKey::new("team-b", "bert");
    let bert = state.job(&key).unwrap();
    assert!(bert.info.is_some() && bert.has_trainer_job);
    assert_eq!((bert.current(), bert.trainers.bound), (3, 2));
    assert_eq!(bert.trainers, dump.state.job(&key).unwrap().trainers);
    assert_eq!(state.jobs().count(), dump.state.jobs().count());
    // Live and dump plan alike.
    let config = PlannerConfig::default();
    let targets = |s: &ClusterState| -> Vec<(String, i32, i32)> {
        plan(s, &config)
            .jobs
            .iter()
            .map(|j| (j.key.to_string(), j.current, j.target))
            .collect()
    };
    assert_eq!(targets(state), targets(&dump.state));
}

#[tokio::test]
async fn a_refused_list_names_the_resource() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let server = tokio::spawn(async move {
        for path in ["/api/v1/nodes", "/api/v1/pods", "/apis/batch/v1/jobs"] {
            let (_, _, _, send) = expect(&mut handle, Method::GET, path).await;
            respond(send, StatusCode::OK, list_of("X", Vec::new()));
        }
        let (_, _, _, send) = expect(
            &mut handle,
            Method::GET,
            "/apis/scheduling.k8s.io/v1/priorityclasses",
        )
        .await;
        respond(
            send,
            StatusCode::FORBIDDEN,
            api_status(403, "Forbidden", "priorityclasses is forbidden"),
        );
    });
    let e = list_documents(&client).await.unwrap_err();
    server.await.unwrap();
    let message = format!("{e:#}");
    assert!(
        message.starts_with("listing priorityclasses.scheduling.k8s.io: "),
        "{message}"
    );
    assert!(message.contains("forbidden"), "{message}");
}

#[test]
fn explain_without_snapshot_and_an_unusable_kubeconfig_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("kubeconfig");
    std::fs::write(&garbage, "clusters: [ {name: \n").unwrap();
    let missing = dir.path().join("nope");
    for path in [&missing, &garbage] {
        let output = Command::new(env!("CARGO_BIN_EXE_trainscale"))
            .args(["explain", "team-b/bert", "--kubeconfig"])
            .arg(path)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with(&format!(
                "error: cannot read kubeconfig {}: ",
                path.display()
            )),
            "{stderr}"
        );
        assert!(output.stdout.is_empty());
    }
}
