//! The pure builders: pod templates, ports, env, PodGroup bodies.

use serde_json::json;
use trainscale::api::{JobKind, PaddleJob, TrainingJob};
use trainscale::operator::pod::{Role, command, own_scheduler_blockers, role_ports, scheduling};
use trainscale::operator::podgroup::{format_quantity, min_member, min_resources};
use trainscale::operator::{OperatorConfig, PodGroupMode, desired};

fn job(yaml: &str) -> TrainingJob {
    let mut job: TrainingJob = serde_saphyr::from_str(yaml).unwrap();
    job.metadata.namespace = Some("ns".into());
    job.metadata.uid = Some("u".into());
    job
}

#[test]
fn entrypoints_are_split_as_a_shell_would() {
    let j = job(
        "metadata: {name: a}\nspec:\n  trainer: {entrypoint: \"python 'my train.py' --x=\\\"a b\\\"\"}\n",
    );
    assert_eq!(
        command(&j, Role::Trainer).unwrap(),
        ["python", "my train.py", "--x=a b"]
    );
    let bad = job("metadata: {name: a}\nspec:\n  trainer: {entrypoint: \"python 'unclosed\"}\n");
    let err = command(&bad, Role::Trainer).unwrap_err();
    assert_eq!(err.field, "spec.trainer.entrypoint");
}

#[test]
fn ports_follow_the_job_type() {
    let legacy =
        job("metadata: {name: a}\nspec: {port: 7000, ports_num: 2, ports_num_for_sparse: 1}\n");
    assert_eq!(role_ports(&legacy).pserver, [7000, 7001, 7002]);
    let nccl = job("metadata: {name: a}\nspec: {is_nccl: true}\n");
    assert_eq!(role_ports(&nccl).trainer, [7164, 7165]);
    let tf = job(
        "metadata: {name: a}\nspec: {trainer_port: 9000, trainer_ports_num: 1, frame_work: {name: tensorflow, type: multi}}\n",
    );
    assert_eq!(role_ports(&tf).trainer, [9000]);
    assert_eq!(role_ports(&tf).pserver, [7164, 7165]);
    let local = job("metadata: {name: a}\nspec: {frame_work: {name: paddle, type: local}}\n");
    assert!(role_ports(&local).pserver.is_empty() && role_ports(&local).trainer.is_empty());
}

#[test]
fn scheduler_annotation_overrides_spec_and_podgroups_default_the_group() {
    let j = job("metadata: {name: a}\nspec: {schedulerName: x, annotations: {scheduler: y}}\n");
    let s = scheduling(&j, &OperatorConfig::default());
    assert_eq!(s.scheduler_name.as_deref(), Some("y"));
    assert_eq!(s.group, None);
    let plain = job("metadata: {name: a}\nspec: {}\n");
    let s = scheduling(
        &plain,
        &OperatorConfig {
            podgroups: PodGroupMode::Volcano,
            ..Default::default()
        },
    );
    assert_eq!(s.scheduler_name.as_deref(), Some("volcano"));
    assert_eq!(s.group.as_deref(), Some("a"));
    assert!(!scheduling(&plain, &OperatorConfig::default()).co_scheduled());
}

#[test]
fn jobs_naming_no_scheduler_get_trainscale_unless_their_volumes_need_binding() {
    let config = OperatorConfig {
        scheduler_name: Some("trainscale".into()),
        ..Default::default()
    };
    let plain = job("metadata: {name: a}\nspec: {}\n");
    let s = scheduling(&plain, &config);
    assert_eq!(s.scheduler_name.as_deref(), Some("trainscale"));
    // trainscale's own name is no batch scheduler: no gang scheduling follows from it.
    assert!(!s.co_scheduled());
    let desired = desired(&plain, JobKind::TrainingJob, &config).unwrap();
    let template = desired.trainer.spec.unwrap().template.spec.unwrap();
    assert_eq!(template.scheduler_name.as_deref(), Some("trainscale"));
    // A job naming Volcano keeps it.
    let volcano = job("metadata: {name: a}\nspec: {schedulerName: volcano}\n");
    assert_eq!(
        scheduling(&volcano, &config).scheduler_name.as_deref(),
        Some("volcano")
    );
    // A persistentVolumeClaim volume needs volume binding: default scheduler, and a warning.
    let pvc = job(
        "metadata: {name: a}\nspec:\n  volumes: [{name: data, persistentVolumeClaim: {claimName: d}}]\n",
    );
    assert_eq!(scheduling(&pvc, &config).scheduler_name, None);
    let blockers = own_scheduler_blockers(&pvc);
    assert_eq!(blockers.len(), 1);
    assert_eq!(blockers[0].field, "spec.volumes[0]");
    assert!(blockers[0].problem.contains("default scheduler"));
    // With the scheduler role off, nothing is named.
    assert_eq!(
        scheduling(&plain, &OperatorConfig::default()).scheduler_name,
        None
    );
}

#[test]
fn gang_minimum_counts_master_pservers_and_trainer_min() {
    let j = job(
        "metadata: {name: a}\nspec:\n  pserver: {min-instance: 2, resources: {limits: {cpu: 500m, memory: 1Gi}}}\n  trainer: {min-instance: 3, max-instance: 9, resources: {requests: {cpu: 250m, memory: 100M}}}\n",
    );
    assert_eq!(min_member(&j, true, true), 6);
    assert_eq!(min_member(&j, false, true), 5);
    assert_eq!(min_member(&j, false, false), 3);
    let r = min_resources(&j, false, true).unwrap();
    // pserver limits stand in for the missing requests; 2×1Gi + 3×100M.
    assert_eq!(r["cpu"], "1750m");
    assert_eq!(r["memory"], (2 * (1i64 << 30) + 300_000_000).to_string());
    assert_eq!(
        format_quantity("memory", 3 * (1i128 << 30) * 1_000_000_000),
        "3Gi"
    );
    assert_eq!(format_quantity("cpu", 1024 * 1_000_000_000), "1024");
}

#[test]
fn every_child_is_owned_and_labelled() {
    let j = job(
        "metadata: {name: a}\nspec:\n  fault_tolerant: true\n  pserver: {min-instance: 1}\n  trainer: {min-instance: 1, max-instance: 2}\n",
    );
    let d = desired(
        &j,
        JobKind::TrainingJob,
        &OperatorConfig {
            podgroups: PodGroupMode::SchedulerPlugins,
            ..Default::default()
        },
    )
    .unwrap();
    let metas = [
        serde_json::to_value(&d.trainers_config).unwrap(),
        serde_json::to_value(d.pod_group.as_ref().unwrap()).unwrap(),
        serde_json::to_value(d.master.as_ref().unwrap()).unwrap(),
        serde_json::to_value(d.pserver.as_ref().unwrap()).unwrap(),
        serde_json::to_value(&d.trainer).unwrap(),
    ];
    for m in metas {
        assert_eq!(m["metadata"]["ownerReferences"][0]["uid"], "u");
        assert_eq!(m["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(m["metadata"]["labels"]["trainscale.io/job"], "a");
    }
    // A job without a uid cannot own anything.
    let mut orphan = j.clone();
    orphan.metadata.uid = None;
    assert!(desired(&orphan, JobKind::TrainingJob, &OperatorConfig::default()).is_err());
}

#[test]
fn probes_host_network_and_volumes_are_honoured() {
    let j = job(r#"
metadata: {name: a}
spec:
  host_network: true
  volumes: [{name: data, emptyDir: {}}]
  VolumeMounts: [{name: data, mountPath: /data}]
  pserver:
    min-instance: 1
    readiness_probe: {tcpSocket: {port: 7164}, periodSeconds: 5}
    grace_period_seconds: 10
  trainer: {min-instance: 1, max-instance: 1}
"#);
    let d = desired(&j, JobKind::TrainingJob, &OperatorConfig::default()).unwrap();
    let ps = serde_json::to_value(d.pserver.unwrap()).unwrap();
    let pod = &ps["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["terminationGracePeriodSeconds"], 10);
    assert_eq!(
        pod["containers"][0]["readinessProbe"],
        json!({"tcpSocket": {"port": 7164}, "periodSeconds": 5})
    );
    assert!(
        pod["containers"][0].get("lifecycle").is_none(),
        "no preStop without a command"
    );
    assert_eq!(pod["volumes"][0]["name"], "data");
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0],
        json!({"name": "data", "mountPath": "/data"})
    );
}

fn paddle_job() -> PaddleJob {
    let mut job: PaddleJob = serde_saphyr::from_str(
        r#"
apiVersion: paddlepaddle.org/v1
kind: PaddleJob
metadata: {name: pj, namespace: ns, uid: u}
spec:
  pserver: {min-instance: 2, max-instance: 2, resources: {requests: {cpu: 500m}}}
  trainer:
    entrypoint: "python train.py"
    passes: 3
    min-instance: 2
    max-instance: 6
    resources: {requests: {cpu: 200m, memory: 200Mi}}
"#,
    )
    .unwrap();
    job.metadata.uid = Some("u".into());
    job
}

fn template_labels(object: &serde_json::Value) -> &serde_json::Value {
    &object["spec"]["template"]["metadata"]["labels"]
}

#[test]
fn paddle_job_children_are_owned_by_the_paddle_job_and_its_pods_labelled() {
    let view = paddle_job().as_training_job();
    let config = OperatorConfig {
        podgroups: PodGroupMode::Volcano,
        ..Default::default()
    };
    let d = desired(&view, JobKind::PaddleJob, &config).unwrap();
    assert!(d.master.is_none(), "a PaddleJob has no master");
    let owner = json!([{"apiVersion": "paddlepaddle.org/v1", "kind": "PaddleJob", "name": "pj",
                        "uid": "u", "controller": true, "blockOwnerDeletion": true}]);
    let pserver = serde_json::to_value(d.pserver.as_ref().unwrap()).unwrap();
    let trainer = serde_json::to_value(&d.trainer).unwrap();
    for object in [
        serde_json::to_value(&d.trainers_config).unwrap(),
        serde_json::to_value(d.pod_group.as_ref().unwrap()).unwrap(),
        pserver.clone(),
        trainer.clone(),
    ] {
        assert_eq!(object["metadata"]["ownerReferences"], owner);
        assert_eq!(object["metadata"]["labels"]["trainscale.io/job"], "pj");
    }
    assert_eq!(
        template_labels(&pserver),
        &json!({"paddle-job-name": "pj", "paddle-job-pserver": "pj", "trainscale.io/role": "pserver",
                "scheduling.x-k8s.io/pod-group": "pj"})
    );
    assert_eq!(
        pserver["spec"]["selector"],
        json!({"matchLabels": {"paddle-job-pserver": "pj"}})
    );
    assert_eq!(pserver["spec"]["replicas"], 2);
    assert_eq!(
        template_labels(&trainer),
        &json!({"paddle-job": "pj", "paddle-job-name": "pj", "trainscale.io/role": "trainer",
                "scheduling.x-k8s.io/pod-group": "pj"})
    );
    assert_eq!(trainer["spec"]["parallelism"], 2);
    assert_eq!(trainer["spec"]["completions"], 2);
    assert_eq!(trainer["spec"]["completionMode"], "Indexed");
    // Not fault tolerant: any trainer failure fails the job.
    assert_eq!(trainer["spec"]["backoffLimit"], 0);
}

#[test]
fn training_job_pods_do_not_carry_the_paddle_job_label() {
    let j = job(
        "metadata: {name: a}\nspec:\n  fault_tolerant: true\n  pserver: {min-instance: 1}\n  trainer: {min-instance: 1, max-instance: 2}\n",
    );
    let d = desired(&j, JobKind::TrainingJob, &OperatorConfig::default()).unwrap();
    for object in [
        serde_json::to_value(d.master.as_ref().unwrap()).unwrap(),
        serde_json::to_value(d.pserver.as_ref().unwrap()).unwrap(),
        serde_json::to_value(&d.trainer).unwrap(),
    ] {
        let labels = template_labels(&object);
        assert!(labels["trainscale.io/role"].is_string(), "{labels}");
        assert!(labels.get("paddle-job-name").is_none(), "{labels}");
    }
    assert_eq!(
        serde_json::to_value(&d.trainer).unwrap()["metadata"]["ownerReferences"][0]["kind"],
        "TrainingJob"
    );
}

#[test]
fn pserver_min_instance_zero_creates_no_pserver_replica_set() {
    let j = job(
        "metadata: {name: a}\nspec:\n  pserver: {min-instance: 0, max-instance: 2}\n  trainer: {min-instance: 1, max-instance: 1}\n",
    );
    let d = desired(&j, JobKind::TrainingJob, &OperatorConfig::default()).unwrap();
    assert!(d.pserver.is_none());
    assert!(d.master.is_none());
    let trainer = serde_json::to_value(&d.trainer).unwrap();
    let env = &trainer["spec"]["template"]["spec"]["containers"][0]["env"];
    let pservers = env
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "PSERVERS")
        .unwrap();
    assert_eq!(pservers["value"], "0");
}

#[test]
fn problems_building_a_paddle_job_name_the_paddle_job() {
    let mut pj = paddle_job();
    pj.spec.trainer.entrypoint = "python 'unclosed".into();
    let err = desired(
        &pj.as_training_job(),
        JobKind::PaddleJob,
        &OperatorConfig::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("PaddleJob ns/pj: spec.trainer.entrypoint: cannot split"),
        "{err}"
    );
    let mut orphan = paddle_job();
    orphan.metadata.uid = None;
    let err = desired(
        &orphan.as_training_job(),
        JobKind::PaddleJob,
        &OperatorConfig::default(),
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "PaddleJob ns/pj: metadata.uid is missing");
}
