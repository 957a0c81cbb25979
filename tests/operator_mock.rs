//! Reconcile against kube's mock service: a tiny in-memory API server records every request, so
//! the tests assert the method, path and body of each call and the exact objects created. The
//! operator's caches are fed as its label-selected watches would be: with the labelled objects
//! the server starts with, and with each object a write returns.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use kube::client::Body;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use trainscale::api::{PaddleJob, TrainingJob, TrainingJobPhase};
use trainscale::operator::{
    CacheWriters, Caches, Context, OperatorConfig, PodGroupMode, reconcile, reconcile_paddle_job,
};

const NS: &str = "team";
const UID: &str = "6d1f0d3c-0000-4000-8000-000000000001";
const NOW: &str = "2026-01-01T12:00:00Z";

/// One request the fake API server saw.
#[derive(Debug, Clone)]
struct Call {
    method: String,
    path: String,
    body: Option<Value>,
}

impl Call {
    fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

#[derive(Default)]
struct Fake {
    objects: BTreeMap<String, Value>,
    calls: Vec<Call>,
}

fn merge(target: &mut Value, patch: &Value) {
    if let Value::Object(p) = patch {
        if !target.is_object() {
            *target = json!({});
        }
        if let Value::Object(t) = target {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
    } else {
        *target = patch.clone();
    }
}

fn status_json(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "reason": reason, "code": code, "message": format!("{reason} (fake)")})
}

fn matches_selector(obj: &Value, selector: &str) -> bool {
    selector.split(',').all(|term| match term.split_once('=') {
        Some((k, v)) => obj["metadata"]["labels"][k] == json!(v),
        None => obj["metadata"]["labels"].get(term).is_some(),
    })
}

impl Fake {
    fn handle(
        &mut self,
        method: &str,
        path: &str,
        query: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let selector = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("labelSelector="))
            .map(|s| s.replace("%3D", "=").replace("%2C", ","));
        match method {
            "GET" => {
                if let Some(obj) = self.objects.get(path) {
                    return (200, obj.clone());
                }
                if let Some(sel) = selector {
                    let prefix = format!("{path}/");
                    let items: Vec<Value> = self
                        .objects
                        .iter()
                        .filter(|(k, _)| k.starts_with(&prefix) && !k[prefix.len()..].contains('/'))
                        .filter(|(_, v)| matches_selector(v, &sel))
                        .map(|(_, v)| v.clone())
                        .collect();
                    return (
                        200,
                        json!({"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items}),
                    );
                }
                (404, status_json(404, "NotFound"))
            }
            "POST" => {
                let mut obj = body.unwrap_or(Value::Null);
                let name = obj["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let key = format!("{path}/{name}");
                if self.objects.contains_key(&key) {
                    return (409, status_json(409, "AlreadyExists"));
                }
                obj["metadata"]["uid"] = json!(format!("uid-{name}"));
                self.objects.insert(key, obj.clone());
                (201, obj)
            }
            "PATCH" => {
                let key = path.strip_suffix("/status").unwrap_or(path);
                match self.objects.get_mut(key) {
                    Some(obj) => {
                        merge(obj, &body.unwrap_or(Value::Null));
                        (200, obj.clone())
                    }
                    None => (404, status_json(404, "NotFound")),
                }
            }
            "DELETE" => {
                let sel = selector.unwrap_or_default();
                let prefix = format!("{path}/");
                self.objects
                    .retain(|k, v| !(k.starts_with(&prefix) && matches_selector(v, &sel)));
                (
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
                )
            }
            _ => (405, status_json(405, "MethodNotAllowed")),
        }
    }
}

/// Whether the operator's watches select `obj` (owned objects by the job label, pserver pods by
/// the pserver label), as the API server's label selector would.
fn watched(obj: &Value) -> bool {
    let labels = &obj["metadata"]["labels"];
    match obj["kind"].as_str() {
        Some("Pod") => labels.get("paddle-job-pserver").is_some(),
        _ => labels.get("trainscale.io/job").is_some(),
    }
}

/// Delivers `obj` to the caches when a watch would.
fn deliver(writers: &mut CacheWriters, obj: &Value) {
    if watched(obj) {
        let object: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
        writers.apply(&object).unwrap();
    }
}

fn job_path(name: &str) -> String {
    format!("/apis/paddlepaddle.org/v1alpha1/namespaces/{NS}/trainingjobs/{name}")
}
fn rs_path(name: &str) -> String {
    format!("/apis/apps/v1/namespaces/{NS}/replicasets/{name}")
}
fn batch_path(name: &str) -> String {
    format!("/apis/batch/v1/namespaces/{NS}/jobs/{name}")
}
fn cm_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/configmaps/{name}")
}

/// Serves `objects` from a fake API server while `body` runs with a context on its client; returns
/// what the server saw once `body` is done and the context dropped.
async fn serve<F, Fut, T>(
    config: OperatorConfig,
    objects: Vec<(String, Value)>,
    body: F,
) -> (T, Fake)
where
    F: FnOnce(Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    serve_caching(config, objects, true, body).await
}

/// [`serve`], the caches seeing the objects written only when `cache_writes` (else they stay
/// behind, as watches lagging the server).
async fn serve_caching<F, Fut, T>(
    config: OperatorConfig,
    objects: Vec<(String, Value)>,
    cache_writes: bool,
    body: F,
) -> (T, Fake)
where
    F: FnOnce(Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let (caches, mut writers) = Caches::new(config.podgroups);
    writers.mark_listed();
    for (_, obj) in &objects {
        deliver(&mut writers, obj);
    }
    let mut fake = Fake::default();
    fake.objects.extend(objects);
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().to_string();
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or_default().to_string();
            let bytes = request.into_body().collect_bytes().await.unwrap();
            let body =
                (!bytes.is_empty()).then(|| serde_json::from_slice::<Value>(&bytes).unwrap());
            let (code, reply) = fake.handle(&method, &path, &query, body.clone());
            if cache_writes && code < 300 && (method == "POST" || method == "PATCH") {
                deliver(&mut writers, &reply);
            }
            let full = if query.is_empty() {
                path
            } else {
                format!("{path}?{query}")
            };
            fake.calls.push(Call {
                method,
                path: full,
                body,
            });
            let response = Response::builder()
                .status(StatusCode::from_u16(code).unwrap())
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                .unwrap();
            send.send_response(response);
        }
        fake
    });
    let client = kube::Client::new(service, NS);
    let now: Timestamp = NOW.parse().unwrap();
    let ctx = Arc::new(Context::new(client, config, caches).with_clock(move || now));
    let out = body(ctx).await;
    let fake = server.await.unwrap();
    (out, fake)
}

/// Runs one reconcile of `job` against a fake API server holding `objects` (plus the job).
async fn run(
    job: &TrainingJob,
    config: OperatorConfig,
    mut objects: Vec<(String, Value)>,
) -> (Result<Action, String>, Fake) {
    objects.push((
        job_path(&job.metadata.name.clone().unwrap_or_default()),
        serde_json::to_value(job).unwrap(),
    ));
    let job = Arc::new(job.clone());
    serve(config, objects, |ctx| async move {
        reconcile(job, ctx).await.map_err(|e| e.to_string())
    })
    .await
}

fn training_job(yaml: &str) -> TrainingJob {
    let mut job: TrainingJob = serde_saphyr::from_str(yaml).unwrap();
    job.metadata.namespace = Some(NS.to_string());
    job.metadata.uid = Some(UID.to_string());
    job
}

fn lines(fake: &Fake) -> Vec<String> {
    fake.calls.iter().map(Call::line).collect()
}

fn body_of<'a>(fake: &'a Fake, method: &str, path: &str) -> &'a Value {
    fake.calls
        .iter()
        .find(|c| c.method == method && c.path == path)
        .and_then(|c| c.body.as_ref())
        .unwrap_or_else(|| panic!("no {method} {path} in {:#?}", lines(fake)))
}

fn owner_ref() -> Value {
    json!([{
        "apiVersion": "paddlepaddle.org/v1alpha1",
        "kind": "TrainingJob",
        "name": "ft",
        "uid": UID,
        "controller": true,
        "blockOwnerDeletion": true
    }])
}

fn env_value(container: &Value, name: &str) -> Value {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no env {name}"))
}

const FT_ELASTIC: &str = r#"
apiVersion: paddlepaddle.org/v1alpha1
kind: TrainingJob
metadata:
  name: ft
spec:
  image: paddle:1.0
  port: 7164
  ports_num: 1
  ports_num_for_sparse: 1
  fault_tolerant: true
  passes: 10
  annotations:
    priority: "3"
  master:
    tolerations:
    - {key: role, operator: Equal, value: master, effect: NoSchedule}
  pserver:
    min-instance: 2
    max-instance: 2
    resources:
      requests: {cpu: 500m, memory: 600Mi}
      limits: {cpu: 800m, memory: 1Gi}
    node_selector: {pool: ps}
  trainer:
    entrypoint: python train.py --name "two words"
    workspace: /home/job-1/
    min-instance: 2
    max-instance: 6
    resources:
      requests: {cpu: 200m, memory: 200Mi}
      limits: {cpu: 200m, memory: 200Mi}
    envs: {LR: "0.1"}
    grace_period_seconds: 30
    pre_stop_cmd: [sh, -c, save-checkpoint]
    tolerations:
    - {key: role, operator: Equal, value: trainer, effect: NoSchedule}
"#;

#[tokio::test]
async fn fault_tolerant_elastic_job_creates_master_pservers_and_indexed_trainers() {
    let job = training_job(FT_ELASTIC);
    let (result, fake) = run(&job, OperatorConfig::default(), vec![]).await;
    assert!(matches!(result, Ok(a) if a == Action::requeue(std::time::Duration::from_secs(30))));
    assert_eq!(
        lines(&fake),
        vec![
            format!("POST /api/v1/namespaces/{NS}/configmaps"),
            format!("POST /apis/apps/v1/namespaces/{NS}/replicasets"),
            format!("POST /apis/apps/v1/namespaces/{NS}/replicasets"),
            format!("POST /apis/batch/v1/namespaces/{NS}/jobs"),
            format!("PATCH {}/status", job_path("ft")),
        ]
    );

    let trainer = &fake.objects[&batch_path("ft-trainer")];
    let expected_trainer = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "ft-trainer",
            "namespace": NS,
            "labels": {"paddle-job": "ft", "trainscale.io/job": "ft"},
            "ownerReferences": owner_ref(),
            "uid": "uid-ft-trainer"
        },
        "spec": {
            "backoffLimit": 30,
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]},
            "template": {
                "metadata": {
                    "annotations": {"priority": "3"},
                    "labels": {"paddle-job": "ft", "priority": "3", "trainscale.io/role": "trainer"}
                },
                "spec": {
                    "containers": [{
                        "name": "trainer",
                        "image": "paddle:1.0",
                        "command": ["python", "train.py", "--name", "two words"],
                        "env": [
                            {"name": "PADDLE_JOB_NAME", "value": "ft"},
                            {"name": "TRAINERS", "value": "2"},
                            {"name": "TRAINERS_FILE", "value": "/etc/trainscale/trainers"},
                            {"name": "PSERVERS", "value": "2"},
                            {"name": "ENTRY", "value": "python train.py --name \"two words\""},
                            {"name": "TOPOLOGY", "value": "python train.py --name \"two words\""},
                            {"name": "TRAINER_PACKAGE", "value": "/home/job-1/"},
                            {"name": "PADDLE_INIT_PORT", "value": "7164"},
                            {"name": "PADDLE_INIT_TRAINER_COUNT", "value": "1"},
                            {"name": "PADDLE_INIT_PORTS_NUM", "value": "1"},
                            {"name": "PADDLE_INIT_PORTS_NUM_FOR_SPARSE", "value": "1"},
                            {"name": "PADDLE_INIT_NUM_GRADIENT_SERVERS", "value": "2"},
                            {"name": "PADDLE_INIT_NUM_PASSES", "value": "10"},
                            {"name": "PADDLE_INIT_USE_GPU", "value": "0"},
                            {"name": "LD_LIBRARY_PATH", "value": "/usr/local/cuda/lib64"},
                            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "TRAINER_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
                            {"name": "LR", "value": "0.1"}
                        ],
                        "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "save-checkpoint"]}}},
                        "resources": {
                            "limits": {"cpu": "200m", "memory": "200Mi"},
                            "requests": {"cpu": "200m", "memory": "200Mi"}
                        },
                        "volumeMounts": [{"mountPath": "/etc/trainscale", "name": "trainscale-trainers", "readOnly": true}]
                    }],
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 30,
                    "tolerations": [{"effect": "NoSchedule", "key": "role", "operator": "Equal", "value": "trainer"}],
                    "volumes": [{"configMap": {"name": "ft-trainers"}, "name": "trainscale-trainers"}]
                }
            }
        }
    });
    assert_eq!(
        trainer,
        &expected_trainer,
        "{}",
        serde_json::to_string_pretty(trainer).unwrap()
    );

    let master = &fake.objects[&rs_path("ft-master")];
    assert_eq!(master["metadata"]["ownerReferences"], owner_ref());
    assert_eq!(
        master["metadata"]["labels"],
        json!({"paddle-job-master": "ft", "trainscale.io/job": "ft"})
    );
    assert_eq!(master["spec"]["replicas"], 1);
    assert_eq!(
        master["spec"]["selector"],
        json!({"matchLabels": {"paddle-job-master": "ft"}})
    );
    let mpod = &master["spec"]["template"]["spec"];
    assert_eq!(mpod["restartPolicy"], "Always");
    assert_eq!(
        mpod["containers"][0]["command"],
        json!(["paddle_k8s", "start_master"])
    );
    assert_eq!(
        mpod["containers"][0]["ports"],
        json!([{"containerPort": 8080}])
    );
    assert_eq!(
        mpod["containers"][0]["resources"],
        json!({
        "limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "500Mi"}})
    );
    assert_eq!(mpod["containers"][1]["name"], "etcd");
    // Each role its own tolerations (the original gave masters the trainer's).
    assert_eq!(mpod["tolerations"][0]["value"], "master");
    assert!(mpod.get("schedulerName").is_none());

    let pserver = &fake.objects[&rs_path("ft-pserver")];
    assert_eq!(pserver["spec"]["replicas"], 2);
    let ppod = &pserver["spec"]["template"]["spec"];
    assert_eq!(
        ppod["containers"][0]["command"],
        json!(["paddle_k8s", "start_new_pserver"])
    );
    assert_eq!(
        ppod["containers"][0]["ports"],
        json!([{"containerPort": 7164}, {"containerPort": 7165}])
    );
    assert_eq!(ppod["nodeSelector"], json!({"pool": "ps"}));
    assert!(ppod.get("tolerations").is_none());
    assert_eq!(
        pserver["spec"]["template"]["metadata"]["labels"]["paddle-job-pserver"],
        "ft"
    );

    // The cluster model tells the kinds apart by this label: a TrainingJob's pods never carry it.
    for path in [
        rs_path("ft-master"),
        rs_path("ft-pserver"),
        batch_path("ft-trainer"),
    ] {
        let labels = &fake.objects[&path]["spec"]["template"]["metadata"]["labels"];
        assert!(labels["trainscale.io/role"].is_string(), "{labels}");
        assert!(labels.get("paddle-job-name").is_none(), "{path}: {labels}");
    }

    let cm = &fake.objects[&cm_path("ft-trainers")];
    assert_eq!(cm["data"], json!({"trainers": "2"}));
    assert_eq!(cm["metadata"]["ownerReferences"], owner_ref());

    let status = body_of(&fake, "PATCH", &format!("{}/status", job_path("ft")));
    assert_eq!(
        status,
        &json!({"status": {
            "phase": "Creating",
            "reason": null,
            "released": false,
            "startTime": null,
            "trainers": 2,
            "replica_statuses": [
                {"training_resource_type": "master", "state": "starting", "resource_states": {"running": 0, "starting": 1}},
                {"training_resource_type": "pserver", "state": "starting", "resource_states": {"running": 0, "starting": 2}},
                {"training_resource_type": "trainer", "state": "starting", "resource_states": {"failed": 0, "running": 0, "starting": 0, "succeeded": 0}}
            ]
        }})
    );
}

const NON_FT: &str = r#"
apiVersion: paddlepaddle.org/v1alpha1
kind: TrainingJob
metadata: {name: ft}
spec:
  image: paddle:1.0
  pserver:
    min-instance: 3
    max-instance: 3
    entrypoint: "python ps.py"
    resources: {requests: {cpu: "1", memory: 1Gi}}
  trainer:
    min-instance: 4
    max-instance: 4
    resources: {requests: {cpu: "2", memory: 2Gi}}
"#;

/// min-instance 0: the trainer Job is created held at zero trainers (suspended, counts 1,
/// marked as trainscale's), never with `completions: 0`, which an Indexed Job completes at once
/// and the job would be marked Succeed without having run.
#[tokio::test]
async fn min_zero_creates_the_trainer_job_suspended_never_with_zero_completions() {
    let job = training_job(&NON_FT.replace("min-instance: 4", "min-instance: 0"));
    let (result, fake) = run(&job, OperatorConfig::default(), vec![]).await;
    assert!(result.is_ok(), "{result:?}");
    let trainer = &fake.objects[&batch_path("ft-trainer")];
    assert_eq!(trainer["spec"]["suspend"], true);
    assert_eq!(trainer["spec"]["parallelism"], 1);
    assert_eq!(trainer["spec"]["completions"], 1);
    assert_eq!(
        trainer["metadata"]["annotations"]["trainscale.io/zero-trainers"],
        "true"
    );
    assert_eq!(
        fake.objects[&cm_path("ft-trainers")]["data"]["trainers"],
        "0"
    );
    let status = &fake.objects[&job_path("ft")]["status"];
    assert_ne!(status["phase"], "Succeed", "{status}");
    assert_eq!(status["trainers"], 0, "{status}");
}

/// Many jobs reconciled at once before the caches have listed: each is requeued at once, with no
/// request and no wait (awaiting the caches' readiness woke only the last of many waiting
/// reconciles, so the operator served one job of many).
#[tokio::test]
async fn reconciles_before_the_caches_list_requeue_at_once_without_requests() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, NS);
    let (caches, mut writers) = Caches::new(PodGroupMode::None);
    assert_eq!(caches.unsynced(), Some("configmaps"));
    let ctx = Arc::new(Context::new(
        client,
        OperatorConfig::default(),
        caches.clone(),
    ));
    let jobs: Vec<Arc<TrainingJob>> = (0..20)
        .map(|i| {
            Arc::new(training_job(
                &NON_FT.replace("name: ft", &format!("name: job-{i}")),
            ))
        })
        .collect();
    let all = futures::future::join_all(jobs.iter().map(|job| reconcile(job.clone(), ctx.clone())));
    let results = tokio::time::timeout(std::time::Duration::from_secs(5), all)
        .await
        .expect("every reconcile returns while the caches have not listed");
    for result in results {
        assert_eq!(
            result.map_err(|e| e.to_string()),
            Ok(Action::requeue(std::time::Duration::from_secs(2)))
        );
    }
    assert!(
        futures::FutureExt::now_or_never(handle.next_request()).is_none(),
        "no request before the caches list"
    );
    writers.mark_listed();
    assert_eq!(caches.unsynced(), None);
}

#[tokio::test]
async fn non_fault_tolerant_job_has_pservers_but_no_master() {
    let job = training_job(NON_FT);
    let (result, fake) = run(&job, OperatorConfig::default(), vec![]).await;
    assert!(result.is_ok(), "{result:?}");
    assert!(!fake.objects.contains_key(&rs_path("ft-master")));
    assert!(!lines(&fake).iter().any(|l| l.contains("ft-master")));
    let pserver = &fake.objects[&rs_path("ft-pserver")];
    assert_eq!(pserver["spec"]["replicas"], 3);
    let c = &pserver["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["command"], json!(["python", "ps.py"]));
    assert_eq!(env_value(c, "PSERVERS")["value"], "3");
    assert_eq!(env_value(c, "TRAINERS")["value"], "4");
    let trainer = &fake.objects[&batch_path("ft-trainer")];
    assert_eq!(trainer["spec"]["backoffLimit"], 0);
    assert_eq!(trainer["spec"]["parallelism"], 4);
    assert_eq!(trainer["spec"]["completions"], 4);
    let tc = &trainer["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(tc["command"], json!(["paddle_k8s", "start_trainer"]));
    assert_eq!(env_value(tc, "PADDLE_INIT_TRAINER_COUNT")["value"], "2");
}

#[tokio::test]
async fn nccl2_job_has_no_pservers_and_trainer_ports() {
    let job = training_job(
        r#"
apiVersion: paddlepaddle.org/v1alpha1
kind: TrainingJob
metadata: {name: ft}
spec:
  image: paddle:1.0
  trainer_port: 6170
  trainer_ports_num: 2
  host_network: true
  frame_work: {name: paddle, type: nccl2}
  trainer:
    min-instance: 2
    max-instance: 2
    resources: {requests: {cpu: "1"}}
"#,
    );
    let (result, fake) = run(&job, OperatorConfig::default(), vec![]).await;
    assert!(result.is_ok(), "{result:?}");
    assert!(
        !lines(&fake)
            .iter()
            .any(|l| l.contains("replicasets") || l.contains("pods"))
    );
    let pod = &fake.objects[&batch_path("ft-trainer")]["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["ports"],
        json!([{"containerPort": 6170}, {"containerPort": 6171}])
    );
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(env_value(&pod["containers"][0], "PSERVERS")["value"], "0");
}

#[tokio::test]
async fn gpu_job_requests_gpus_and_sets_gpu_env() {
    let job = training_job(
        r#"
apiVersion: paddlepaddle.org/v1alpha1
kind: TrainingJob
metadata: {name: ft}
spec:
  image: paddle:gpu
  fault_tolerant: true
  pserver: {min-instance: 1, max-instance: 1}
  trainer:
    min-instance: 1
    max-instance: 4
    resources:
      requests: {cpu: "4", memory: 8Gi}
      limits: {nvidia.com/gpu: "2"}
"#,
    );
    let (result, fake) = run(&job, OperatorConfig::default(), vec![]).await;
    assert!(result.is_ok(), "{result:?}");
    let c = &fake.objects[&batch_path("ft-trainer")]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["resources"]["limits"], json!({"nvidia.com/gpu": "2"}));
    assert_eq!(env_value(c, "PADDLE_INIT_USE_GPU")["value"], "1");
    assert_eq!(env_value(c, "PADDLE_INIT_TRAINER_COUNT")["value"], "2");
    assert_eq!(c["command"], json!(["paddle_k8s", "start_new_trainer"]));
}

const COSCHEDULED: &str = r#"
apiVersion: paddlepaddle.org/v1alpha1
kind: TrainingJob
metadata:
  name: ft
  annotations:
    scheduling.volcano.sh/queue-name: research
    trainscale.io/priority-class-name: high
  labels:
    kueue.x-k8s.io/queue-name: team-queue
spec:
  image: paddle:1.0
  fault_tolerant: true
  schedulerName: volcano
  podGroupName: ft-gang
  pserver:
    min-instance: 2
    max-instance: 2
    resources: {requests: {cpu: 500m, memory: 1Gi}}
  trainer:
    min-instance: 3
    max-instance: 8
    resources:
      requests: {cpu: "2", memory: 4Gi}
      limits: {nvidia.com/gpu: "1"}
"#;

fn assert_pod_joins_group(pod_template: &Value, scheduler: &str, protected: bool) {
    assert_eq!(pod_template["spec"]["schedulerName"], scheduler);
    assert_eq!(
        pod_template["metadata"]["annotations"]["scheduling.k8s.io/group-name"],
        "ft-gang"
    );
    assert_eq!(
        pod_template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"],
        "ft-gang"
    );
    let preemptable = &pod_template["metadata"]["annotations"]["volcano.sh/preemptable"];
    if protected {
        assert_eq!(preemptable, "false");
    } else {
        assert!(preemptable.is_null());
    }
    assert_eq!(pod_template["spec"]["priorityClassName"], "high");
}

#[tokio::test]
async fn volcano_job_gets_a_podgroup_of_the_gang_minimum() {
    let job = training_job(COSCHEDULED);
    let config = OperatorConfig {
        podgroups: PodGroupMode::Volcano,
        ..Default::default()
    };
    let (result, fake) = run(&job, config, vec![]).await;
    assert!(result.is_ok(), "{result:?}");
    let path = format!("/apis/scheduling.volcano.sh/v1beta1/namespaces/{NS}/podgroups");
    assert!(
        !lines(&fake).iter().any(|l| l.starts_with("GET")),
        "{:#?}",
        lines(&fake)
    );
    let body = body_of(&fake, "POST", &path);
    assert_eq!(
        body,
        &json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {
                "name": "ft-gang",
                "namespace": NS,
                "labels": {"trainscale.io/job": "ft"},
                "ownerReferences": owner_ref()
            },
            "spec": {
                // 1 master + 2 pservers + 3 trainers (the trainer min, not the current count).
                "minMember": 6,
                "minResources": {"cpu": "8", "memory": "14836Mi", "nvidia.com/gpu": "3"},
                "queue": "research",
                "priorityClassName": "high"
            }
        })
    );
    assert_pod_joins_group(
        &fake.objects[&rs_path("ft-master")]["spec"]["template"],
        "volcano",
        true,
    );
    assert_pod_joins_group(
        &fake.objects[&rs_path("ft-pserver")]["spec"]["template"],
        "volcano",
        true,
    );
    assert_pod_joins_group(
        &fake.objects[&batch_path("ft-trainer")]["spec"]["template"],
        "volcano",
        false,
    );
}

#[tokio::test]
async fn scheduler_plugins_job_gets_a_coscheduling_podgroup() {
    let mut job = training_job(COSCHEDULED);
    job.spec.scheduler_name = "scheduler-plugins-scheduler".to_string();
    let config = OperatorConfig {
        podgroups: PodGroupMode::SchedulerPlugins,
        ..Default::default()
    };
    let (result, fake) = run(&job, config, vec![]).await;
    assert!(result.is_ok(), "{result:?}");
    let body = body_of(
        &fake,
        "POST",
        &format!("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NS}/podgroups"),
    );
    assert_eq!(body["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
    assert_eq!(body["metadata"]["ownerReferences"], owner_ref());
    assert_eq!(
        body["spec"],
        json!({
            "minMember": 6,
            "minResources": {"cpu": "8", "memory": "14836Mi", "nvidia.com/gpu": "3"},
            "scheduleTimeoutSeconds": 60
        })
    );
    let sched = "scheduler-plugins-scheduler";
    assert_pod_joins_group(
        &fake.objects[&rs_path("ft-master")]["spec"]["template"],
        sched,
        true,
    );
    assert_pod_joins_group(
        &fake.objects[&batch_path("ft-trainer")]["spec"]["template"],
        sched,
        false,
    );
}

#[tokio::test]
async fn kueue_labels_the_trainer_job_and_marks_it_elastic() {
    let job = training_job(COSCHEDULED);
    let config = OperatorConfig {
        kueue: true,
        ..Default::default()
    };
    let (result, fake) = run(&job, config, vec![]).await;
    assert!(result.is_ok(), "{result:?}");
    assert!(!lines(&fake).iter().any(|l| l.contains("podgroups")));
    let trainer = &fake.objects[&batch_path("ft-trainer")];
    assert_eq!(
        trainer["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
        "team-queue"
    );
    assert_eq!(
        trainer["metadata"]["annotations"]["kueue.x-k8s.io/elastic-job"],
        "true"
    );
    assert_eq!(trainer["spec"]["suspend"], true);
    // Only the trainer Job goes through Kueue.
    assert!(
        fake.objects[&rs_path("ft-master")]["metadata"]["labels"]
            .get("kueue.x-k8s.io/queue-name")
            .is_none()
    );
}

fn running_children(parallelism: i32, ready: i32) -> Vec<(String, Value)> {
    let owner = owner_ref();
    let meta = |name: &str| {
        json!({"name": name, "namespace": NS, "ownerReferences": owner.clone(),
               "labels": {"trainscale.io/job": "ft"}})
    };
    vec![
        (
            cm_path("ft-trainers"),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("ft-trainers"), "data": {"trainers": "2"}}),
        ),
        (
            rs_path("ft-master"),
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta("ft-master"),
            "spec": {"replicas": 1, "selector": {}}, "status": {"replicas": 1, "readyReplicas": 1}}),
        ),
        (
            rs_path("ft-pserver"),
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta("ft-pserver"),
            "spec": {"replicas": 2, "selector": {}}, "status": {"replicas": 2, "readyReplicas": 2}}),
        ),
        (
            batch_path("ft-trainer"),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("ft-trainer"),
            "spec": {"parallelism": parallelism, "completions": parallelism, "template": {}},
            "status": {"active": ready, "ready": ready}}),
        ),
    ]
}

fn pserver_pod(name: &str, restarts: i32) -> (String, Value) {
    (
        format!("/api/v1/namespaces/{NS}/pods/{name}"),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": NS, "labels": {"paddle-job-pserver": "ft"}},
               "status": {"containerStatuses": [{"name": "pserver", "image": "x", "imageID": "", "ready": true,
                          "restartCount": restarts}]}}),
    )
}

#[tokio::test]
async fn existing_children_are_read_not_recreated_and_the_job_runs() {
    let job = training_job(FT_ELASTIC);
    let mut objects = running_children(2, 2);
    objects.push(pserver_pod("ft-pserver-a", 1));
    // Another job's pserver, far past the restart limit, does not count for this one.
    let (other, mut pod) = pserver_pod("other-pserver-a", 9);
    pod["metadata"]["labels"]["paddle-job-pserver"] = json!("other");
    objects.push((other, pod));
    let (result, fake) = run(&job, OperatorConfig::default(), objects).await;
    assert!(result.is_ok(), "{result:?}");
    assert!(
        !lines(&fake).iter().any(|l| l.starts_with("POST")),
        "{:#?}",
        lines(&fake)
    );
    let status = body_of(&fake, "PATCH", &format!("{}/status", job_path("ft")));
    assert_eq!(status["status"]["phase"], "Running");
    assert_eq!(status["status"]["startTime"], NOW);
}

#[tokio::test]
async fn a_rescale_by_the_daemon_updates_the_trainers_configmap_and_shows_scaling() {
    let mut job = training_job(FT_ELASTIC);
    job.status = Some(trainscale::api::TrainingJobStatus {
        phase: TrainingJobPhase::Running,
        start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T11:00:00Z".parse().unwrap(),
        )),
        ..Default::default()
    });
    let objects = running_children(5, 2);
    let (result, fake) = run(&job, OperatorConfig::default(), objects).await;
    assert!(result.is_ok(), "{result:?}");
    let patch = body_of(&fake, "PATCH", &cm_path("ft-trainers"));
    assert_eq!(patch, &json!({"data": {"trainers": "5"}}));
    let status = body_of(&fake, "PATCH", &format!("{}/status", job_path("ft")));
    assert_eq!(status["status"]["phase"], "Scaling");
    assert_eq!(status["status"]["startTime"], "2026-01-01T11:00:00Z");
}

#[tokio::test]
async fn walltime_ends_the_job_with_timeout_and_stops_the_trainers() {
    let mut job = training_job(FT_ELASTIC);
    job.spec.annotations.walltime = 600;
    job.status = Some(trainscale::api::TrainingJobStatus {
        phase: TrainingJobPhase::Running,
        start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T11:00:00Z".parse().unwrap(),
        )),
        ..Default::default()
    });
    let objects = running_children(2, 2);
    let (result, fake) = run(&job, OperatorConfig::default(), objects).await;
    assert_eq!(result, Ok(Action::await_change()));
    let suspend = body_of(&fake, "PATCH", &batch_path("ft-trainer"));
    assert_eq!(suspend, &json!({"spec": {"suspend": true}}));
    let status = body_of(&fake, "PATCH", &format!("{}/status", job_path("ft")));
    assert_eq!(status["status"]["phase"], "Timeout");
    assert_eq!(
        status["status"]["reason"],
        "ran 3600 s, longer than the walltime of 600 s"
    );
    assert_eq!(status["status"]["startTime"], "2026-01-01T11:00:00Z");
}

/// Under `--kueue`, Kueue owns `spec.suspend` (it lifts a suspension while the Workload is
/// admitted): the trainer Job is stopped by zero trainers instead, which completes an Indexed Job.
#[tokio::test]
async fn under_kueue_a_timeout_stops_the_trainers_without_touching_suspend() {
    let mut job = training_job(FT_ELASTIC);
    job.spec.annotations.walltime = 600;
    job.status = Some(trainscale::api::TrainingJobStatus {
        phase: TrainingJobPhase::Running,
        start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T11:00:00Z".parse().unwrap(),
        )),
        ..Default::default()
    });
    let mut objects = running_children(2, 2);
    // The operator creates trainer Jobs Indexed.
    if let Some((_, trainer)) = objects
        .iter_mut()
        .find(|(p, _)| *p == batch_path("ft-trainer"))
    {
        trainer["spec"]["completionMode"] = json!("Indexed");
    }
    let config = OperatorConfig {
        kueue: true,
        ..OperatorConfig::default()
    };
    let (result, fake) = run(&job, config, objects).await;
    assert_eq!(result, Ok(Action::await_change()));
    let stop = body_of(&fake, "PATCH", &batch_path("ft-trainer"));
    assert_eq!(stop, &json!({"spec": {"parallelism": 0, "completions": 0}}));
    let status = body_of(&fake, "PATCH", &format!("{}/status", job_path("ft")));
    assert_eq!(status["status"]["phase"], "Timeout");
}

#[tokio::test]
async fn pserver_restart_limit_fails_the_job() {
    let job = training_job(FT_ELASTIC);
    let mut objects = running_children(2, 2);
    objects.push(pserver_pod("ft-pserver-a", 1));
    objects.push(pserver_pod("ft-pserver-b", 5));
    let (result, fake) = run(&job, OperatorConfig::default(), objects).await;
    assert_eq!(result, Ok(Action::await_change()));
    let status = body_of(&fake, "PATCH", &format!("{}/status", job_path("ft")));
    assert_eq!(status["status"]["phase"], "Failed");
    assert_eq!(
        status["status"]["reason"],
        "a pserver restarted 5 times, reaching the restart limit 5"
    );
}

#[tokio::test]
async fn autoclean_releases_a_finished_job_once() {
    let mut job = training_job(FT_ELASTIC);
    job.status = Some(trainscale::api::TrainingJobStatus {
        phase: TrainingJobPhase::Succeed,
        ..Default::default()
    });
    let mut objects = running_children(2, 0);
    if let Some((_, trainer)) = objects.iter_mut().find(|(k, _)| k.ends_with("ft-trainer")) {
        trainer["status"] =
            json!({"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]});
    }
    let config = OperatorConfig {
        autoclean: true,
        ..Default::default()
    };
    let (result, fake) = run(&job, config, objects).await;
    assert_eq!(result, Ok(Action::await_change()));
    assert_eq!(
        lines(&fake),
        vec![
            format!("PATCH {}", rs_path("ft-master")),
            format!("PATCH {}", rs_path("ft-pserver")),
            format!(
                "DELETE /api/v1/namespaces/{NS}/pods?&fieldSelector=status.phase%21%3DPending%2Cstatus.phase%21%3DRunning%2Cstatus.phase%21%3DUnknown&labelSelector=paddle-job%3Dft"
            ),
            format!("PATCH {}/status", job_path("ft")),
        ]
    );
    assert_eq!(
        body_of(&fake, "PATCH", &rs_path("ft-master")),
        &json!({"spec": {"replicas": 0}})
    );
    let status = body_of(&fake, "PATCH", &format!("{}/status", job_path("ft")));
    assert_eq!(status["status"]["released"], true);
    assert_eq!(status["status"]["phase"], "Succeed");
}

#[tokio::test]
async fn an_invalid_job_fails_with_a_reason_and_creates_nothing() {
    let mut job = training_job(FT_ELASTIC);
    job.spec.trainer.min_instance = 7;
    let (result, fake) = run(&job, OperatorConfig::default(), vec![]).await;
    assert_eq!(result, Ok(Action::await_change()));
    assert_eq!(
        lines(&fake),
        vec![format!("PATCH {}/status", job_path("ft"))]
    );
    let status = body_of(&fake, "PATCH", &format!("{}/status", job_path("ft")));
    assert_eq!(status["status"]["phase"], "Failed");
    assert_eq!(
        status["status"]["reason"],
        "invalid TrainingJob: spec.trainer.min-instance: min-instance 7 is greater than max-instance 6"
    );
}

/// Issue 32: a name whose `<name>-trainer` Job could not exist fails the job naming that Job,
/// before any create (no create that fails on every pass).
#[tokio::test]
async fn a_name_too_long_for_its_trainer_job_fails_and_creates_nothing() {
    let mut job = training_job(FT_ELASTIC);
    let name = "j".repeat(60);
    job.metadata.name = Some(name.clone());
    let (result, fake) = run(&job, OperatorConfig::default(), vec![]).await;
    assert_eq!(result, Ok(Action::await_change()));
    assert_eq!(
        lines(&fake),
        vec![format!("PATCH {}/status", job_path(&name))]
    );
    let status = body_of(&fake, "PATCH", &format!("{}/status", job_path(&name)));
    assert_eq!(status["status"]["phase"], "Failed");
    let reason = status["status"]["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("Job \"{name}-trainer\" (68 characters)")),
        "{reason}"
    );
}

#[tokio::test]
async fn an_object_owned_by_someone_else_fails_the_job() {
    let job = training_job(NON_FT);
    let objects = vec![(
        rs_path("ft-pserver"),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": "ft-pserver", "namespace": NS, "labels": {"trainscale.io/job": "ft"}},
               "spec": {"replicas": 1, "selector": {}}}),
    )];
    let (result, fake) = run(&job, OperatorConfig::default(), objects).await;
    assert_eq!(result, Ok(Action::await_change()));
    let status = body_of(&fake, "PATCH", &format!("{}/status", job_path("ft")));
    assert_eq!(status["status"]["phase"], "Failed");
    assert!(
        status["status"]["reason"]
            .as_str()
            .unwrap()
            .contains("is not owned by TrainingJob team/ft")
    );
}

#[tokio::test]
async fn an_existing_object_missing_from_the_cache_requeues_then_fails_the_job() {
    let job = training_job(NON_FT);
    // Not labelled trainscale.io/job, so the watches never deliver it.
    let objects = vec![(
        rs_path("ft-pserver"),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": "ft-pserver", "namespace": NS},
               "spec": {"replicas": 1, "selector": {}}}),
    )];
    let job = Arc::new(job);
    let mut stored = objects.clone();
    stored.push((job_path("ft"), serde_json::to_value(job.as_ref()).unwrap()));
    let (results, fake) = serve(OperatorConfig::default(), stored, |ctx| async move {
        let first = reconcile(job.clone(), ctx.clone()).await;
        let later: Timestamp = "2026-01-01T12:00:31Z".parse().unwrap();
        let ctx = Arc::new((*ctx).clone().with_clock(move || later));
        let second = reconcile(job, ctx).await;
        [first, second].map(|r| r.map_err(|e| e.to_string()))
    })
    .await;
    // First pass: the create answers AlreadyExists; the cache may be behind, so requeue soon
    // without reading the object and without writing the status.
    assert_eq!(
        results[0],
        Ok(Action::requeue(std::time::Duration::from_secs(2)))
    );
    assert_eq!(results[1], Ok(Action::await_change()));
    let calls = lines(&fake);
    assert!(!calls.iter().any(|l| l.starts_with("GET")), "{calls:#?}");
    let creates = format!("POST /apis/apps/v1/namespaces/{NS}/replicasets");
    assert_eq!(
        calls.iter().filter(|l| **l == creates).count(),
        2,
        "{calls:#?}"
    );
    assert_eq!(
        calls.iter().filter(|l| l.ends_with("/status")).count(),
        1,
        "{calls:#?}"
    );
    // 31 s later it is still not cached: someone else's object.
    let status = body_of(&fake, "PATCH", &format!("{}/status", job_path("ft")));
    assert_eq!(status["status"]["phase"], "Failed");
    assert_eq!(
        status["status"]["reason"],
        "creating the job's objects: ReplicaSet team/ft-pserver exists and is not labelled \
         trainscale.io/job=ft: not created for TrainingJob team/ft"
    );
}

#[tokio::test]
async fn an_unchanged_status_is_not_written() {
    let mut job = training_job(FT_ELASTIC);
    let objects = running_children(2, 2);
    let (_, first) = run(&job, OperatorConfig::default(), objects.clone()).await;
    let mut written =
        body_of(&first, "PATCH", &format!("{}/status", job_path("ft")))["status"].clone();
    if let Value::Object(fields) = &mut written {
        fields.retain(|_, v| !v.is_null());
    }
    assert_eq!(written["phase"], "Running");
    job.status = Some(serde_json::from_value(written).unwrap());
    let (result, second) = run(&job, OperatorConfig::default(), objects).await;
    assert_eq!(
        result,
        Ok(Action::requeue(std::time::Duration::from_secs(30)))
    );
    // A settled job costs no request at all: the children come from the caches.
    assert!(lines(&second).is_empty(), "{:#?}", lines(&second));
}

/// Seed 001, unchanged.
const SEED_001: &str = r#"
apiVersion: paddlepaddle.org/v1
kind: PaddleJob
metadata:
  name: paddlejob
  namespace: testspace
spec:
  image: "<Your-docker-repo>/fluid_job_train_test:1.0"
  port: 7164
  ports_num: 1
  ports_num_for_sparse: 1
  mountPath: "/home/work/namespace/"
  pserver:
    min-instance: 2
    max-instance: 2
    resources:
      limits: {cpu: "800m", memory: "1Gi"}
      requests: {cpu: "500m", memory: "600Mi"}
  trainer:
    entrypoint: "python /home/job-1/train.py"
    workspace: "/home/job-1/"
    passes: 10
    min-instance: 2
    max-instance: 6
    resources:
      limits: {cpu: "200m", memory: "200Mi"}
      requests: {cpu: "200m", memory: "200Mi"}
"#;

const SEED_NS: &str = "testspace";
const PADDLE_STATUS: &str =
    "/apis/paddlepaddle.org/v1/namespaces/testspace/paddlejobs/paddlejob/status";

fn seed_paddle_job() -> PaddleJob {
    let mut job: PaddleJob = serde_saphyr::from_str(SEED_001).unwrap();
    job.metadata.uid = Some(UID.to_string());
    job
}

fn paddle_owner_ref() -> Value {
    json!([{
        "apiVersion": "paddlepaddle.org/v1",
        "kind": "PaddleJob",
        "name": "paddlejob",
        "uid": UID,
        "controller": true,
        "blockOwnerDeletion": true
    }])
}

/// Runs one reconcile of the PaddleJob `job` against a fake API server holding `objects` (plus
/// the job).
async fn run_paddle(
    job: &PaddleJob,
    mut objects: Vec<(String, Value)>,
) -> (Result<Action, String>, Fake) {
    objects.push((
        PADDLE_STATUS.trim_end_matches("/status").to_string(),
        serde_json::to_value(job).unwrap(),
    ));
    let job = Arc::new(job.clone());
    serve(OperatorConfig::default(), objects, |ctx| async move {
        reconcile_paddle_job(job, ctx)
            .await
            .map_err(|e| e.to_string())
    })
    .await
}

fn events_path(ns: &str) -> String {
    format!("/apis/events.k8s.io/v1/namespaces/{ns}/events")
}

const NOT_FT_WARNING: &str = "spec.fault_tolerant: the job is elastic but not fault tolerant: \
    trainers restart when it is resized and must re-read their count (/etc/trainscale/trainers) \
    on restart";

#[tokio::test]
async fn seed_paddle_job_creates_pservers_and_indexed_trainers_it_owns() {
    let job = seed_paddle_job();
    let (result, fake) = run_paddle(&job, vec![]).await;
    assert_eq!(
        result,
        Ok(Action::requeue(std::time::Duration::from_secs(30)))
    );
    let rs = format!("/apis/apps/v1/namespaces/{SEED_NS}/replicasets");
    let jobs = format!("/apis/batch/v1/namespaces/{SEED_NS}/jobs");
    let cms = format!("/api/v1/namespaces/{SEED_NS}/configmaps");
    assert_eq!(
        lines(&fake),
        vec![
            format!("POST {}", events_path(SEED_NS)),
            format!("POST {cms}"),
            format!("POST {rs}"),
            format!("POST {jobs}"),
            format!("PATCH {PADDLE_STATUS}"),
        ]
    );

    let pserver = &fake.objects[&format!("{rs}/paddlejob-pserver")];
    assert_eq!(pserver["metadata"]["ownerReferences"], paddle_owner_ref());
    assert_eq!(pserver["spec"]["replicas"], 2);
    assert_eq!(
        pserver["spec"]["selector"],
        json!({"matchLabels": {"paddle-job-pserver": "paddlejob"}})
    );
    assert_eq!(
        pserver["spec"]["template"]["metadata"]["labels"],
        json!({"paddle-job-name": "paddlejob", "paddle-job-pserver": "paddlejob",
               "trainscale.io/role": "pserver"})
    );
    let pc = &pserver["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(pc["image"], "<Your-docker-repo>/fluid_job_train_test:1.0");
    assert_eq!(
        pc["resources"],
        json!({"limits": {"cpu": "800m", "memory": "1Gi"},
               "requests": {"cpu": "500m", "memory": "600Mi"}})
    );

    let trainer = &fake.objects[&format!("{jobs}/paddlejob-trainer")];
    assert_eq!(trainer["metadata"]["ownerReferences"], paddle_owner_ref());
    assert_eq!(trainer["spec"]["completionMode"], "Indexed");
    assert_eq!(trainer["spec"]["parallelism"], 2);
    assert_eq!(trainer["spec"]["completions"], 2);
    assert_eq!(
        trainer["spec"]["template"]["metadata"]["labels"],
        json!({"paddle-job": "paddlejob", "paddle-job-name": "paddlejob",
               "trainscale.io/role": "trainer"})
    );
    let tc = &trainer["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(tc["command"], json!(["python", "/home/job-1/train.py"]));
    assert_eq!(env_value(tc, "PADDLE_INIT_NUM_PASSES")["value"], "10");
    assert_eq!(env_value(tc, "PSERVERS")["value"], "2");
    assert!(!lines(&fake).iter().any(|l| l.contains("paddlejob-master")));

    let cm = &fake.objects[&format!("{cms}/paddlejob-trainers")];
    assert_eq!(cm["metadata"]["ownerReferences"], paddle_owner_ref());

    let status = body_of(&fake, "PATCH", PADDLE_STATUS);
    assert_eq!(status["status"]["phase"], "Creating");
    assert_eq!(status["status"]["trainers"], 2);
    assert_eq!(
        fake.objects[PADDLE_STATUS.trim_end_matches("/status")]["status"]["trainers"],
        2
    );

    // Elastic but not fault tolerant: created, and told once as a Warning Event on the PaddleJob.
    let event = body_of(&fake, "POST", &events_path(SEED_NS));
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "SpecWarning");
    assert_eq!(event["action"], "Validate");
    assert_eq!(
        event["note"],
        NOT_FT_WARNING.replace("spec.fault_tolerant:", "spec.trainer:"),
        "a PaddleJob has no fault_tolerant field"
    );
    assert_eq!(event["reportingController"], "trainscale-operator");
    assert_eq!(
        event["regarding"],
        json!({"apiVersion": "paddlepaddle.org/v1", "kind": "PaddleJob", "name": "paddlejob",
               "namespace": SEED_NS, "uid": UID})
    );
}

#[tokio::test]
async fn an_invalid_paddle_job_fails_naming_its_own_fields() {
    let mut job = seed_paddle_job();
    job.spec.trainer.passes = -1;
    let (result, fake) = run_paddle(&job, vec![]).await;
    assert_eq!(result, Ok(Action::await_change()));
    assert_eq!(lines(&fake), vec![format!("PATCH {PADDLE_STATUS}")]);
    let status = body_of(&fake, "PATCH", PADDLE_STATUS);
    assert_eq!(status["status"]["phase"], "Failed");
    assert_eq!(
        status["status"]["reason"],
        "invalid PaddleJob: spec.trainer.passes: must not be negative, got -1"
    );
}

#[tokio::test]
async fn a_paddle_job_child_owned_by_someone_else_names_the_paddle_job() {
    let job = seed_paddle_job();
    let objects = vec![(
        format!("/apis/apps/v1/namespaces/{SEED_NS}/replicasets/paddlejob-pserver"),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": "paddlejob-pserver", "namespace": SEED_NS,
                            "labels": {"trainscale.io/job": "paddlejob"}},
               "spec": {"replicas": 1, "selector": {}}}),
    )];
    let (result, fake) = run_paddle(&job, objects).await;
    assert_eq!(result, Ok(Action::await_change()));
    let status = body_of(&fake, "PATCH", PADDLE_STATUS);
    assert_eq!(status["status"]["phase"], "Failed");
    assert_eq!(
        status["status"]["reason"],
        "creating the job's objects: ReplicaSet testspace/paddlejob-pserver exists and is not \
         owned by PaddleJob testspace/paddlejob"
    );
}

/// The calls of each reconcile, split after each status write (every pass below ends with one).
fn passes(fake: &Fake, status_path: &str) -> Vec<Vec<Call>> {
    let mut out = vec![Vec::new()];
    for call in &fake.calls {
        let last = out.len() - 1;
        out[last].push(call.clone());
        if call.method == "PATCH" && call.path == status_path {
            out.push(Vec::new());
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

#[tokio::test]
async fn spec_warnings_are_one_event_per_generation() {
    let mut job = training_job(FT_ELASTIC);
    job.spec.fault_tolerant = false;
    job.metadata.generation = Some(1);
    job.metadata.resource_version = Some("10".to_string());
    let mut edited = job.clone();
    edited.metadata.generation = Some(2);
    edited.metadata.resource_version = Some("11".to_string());
    edited.spec.pserver.min_instance = 0;
    let objects = vec![(job_path("ft"), serde_json::to_value(&job).unwrap())];
    let runs = [job.clone(), job, edited];
    let (results, fake) = serve(OperatorConfig::default(), objects, |ctx| async move {
        let mut results = Vec::new();
        for job in runs {
            results.push(reconcile(Arc::new(job), ctx.clone()).await.is_ok());
        }
        results
    })
    .await;
    assert_eq!(results, [true, true, true]);

    let status_path = format!("{}/status", job_path("ft"));
    let counts: Vec<usize> = passes(&fake, &status_path)
        .iter()
        .map(|p| {
            p.iter()
                .filter(|c| c.path.starts_with(&events_path(NS)))
                .count()
        })
        .collect();
    assert_eq!(counts, [1, 0, 1], "{:#?}", lines(&fake));

    let events: Vec<&Call> = fake
        .calls
        .iter()
        .filter(|c| c.path.starts_with(&events_path(NS)))
        .collect();
    assert!(events.iter().all(|c| c.method == "POST"), "{events:#?}");
    let first = events[0].body.as_ref().unwrap();
    assert_eq!(first["type"], "Warning");
    assert_eq!(first["reason"], "SpecWarning");
    assert_eq!(first["note"], NOT_FT_WARNING);
    assert_eq!(
        first["regarding"],
        json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob", "name": "ft",
               "namespace": NS, "uid": UID, "resourceVersion": "10"})
    );
    let second = events[1].body.as_ref().unwrap();
    assert_eq!(
        second["note"],
        format!(
            "spec.pserver.min-instance: 0: no parameter servers will be created, although this \
             job type uses them; {NOT_FT_WARNING}"
        )
    );
    assert_eq!(second["regarding"]["resourceVersion"], "11");

    // Warnings do not stop the job: its trainers are created and it is not failed.
    assert!(fake.objects.contains_key(&batch_path("ft-trainer")));
    let status = body_of(&fake, "PATCH", &status_path);
    assert_eq!(status["status"]["phase"], "Creating");
}

#[tokio::test]
async fn a_job_without_pservers_wanted_gets_no_pserver_replica_set() {
    let mut job = training_job(FT_ELASTIC);
    job.spec.pserver.min_instance = 0;
    job.spec.pserver.max_instance = 0;
    let (result, fake) = run(&job, OperatorConfig::default(), vec![]).await;
    assert_eq!(
        result,
        Ok(Action::requeue(std::time::Duration::from_secs(30)))
    );
    assert!(
        !lines(&fake)
            .iter()
            .any(|l| l.contains("ft-pserver") || l.contains("/pods")),
        "{:#?}",
        lines(&fake)
    );
    assert!(fake.objects.contains_key(&rs_path("ft-master")));
    let trainer = &fake.objects[&batch_path("ft-trainer")];
    let tc = &trainer["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(env_value(tc, "PSERVERS")["value"], "0");
    let event = body_of(&fake, "POST", &events_path(NS));
    assert_eq!(
        event["note"],
        "spec.pserver.min-instance: 0: no parameter servers will be created, although this job \
         type uses them"
    );
    let status = body_of(&fake, "PATCH", &format!("{}/status", job_path("ft")));
    assert_eq!(status["status"]["phase"], "Creating");
    assert_eq!(
        status["status"]["replica_statuses"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "master and trainer only"
    );
}

/// A child the operator created is not created again while its watch cache has not shown it yet
/// (client-go's expectations): the next reconcile waits for the cache instead of sending a
/// create that can only answer AlreadyExists.
#[tokio::test]
async fn a_child_created_but_not_yet_cached_is_not_created_again() {
    let job = Arc::new(training_job(NON_FT));
    let stored = vec![(job_path("ft"), serde_json::to_value(job.as_ref()).unwrap())];
    let (results, fake) =
        serve_caching(OperatorConfig::default(), stored, false, |ctx| async move {
            let first = reconcile(job.clone(), ctx.clone()).await;
            let second = reconcile(job, ctx).await;
            [first, second].map(|r| r.map_err(|e| e.to_string()))
        })
        .await;
    assert!(results[0].is_ok(), "{results:?}");
    assert_eq!(
        results[1],
        Ok(Action::requeue(std::time::Duration::from_secs(2)))
    );
    let calls = lines(&fake);
    let mut creates: Vec<&String> = calls
        .iter()
        .filter(|l| l.starts_with("POST") && !l.contains("/events"))
        .collect();
    assert!(!creates.is_empty(), "{calls:#?}");
    let all = creates.len();
    creates.sort();
    creates.dedup();
    assert_eq!(creates.len(), all, "a child created twice: {calls:#?}");
}
