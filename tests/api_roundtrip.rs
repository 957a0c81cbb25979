//! Manifests in the original operator's field names, and a recorded List, survive a round trip.

use std::path::Path;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::Value;
use trainscale::api::manifest::{parse_documents, read_documents};
use trainscale::api::validate::validate_training_job;
use trainscale::api::{ScaleResults, TrainingJob, TrainingJobPhase};

/// Drops zero values (`""`, `false`, `0`, `null`, `{}`, `[]`), which the Go types write and ours
/// leave out; everything else must come back exactly.
fn without_defaults(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, without_defaults(v)))
                .filter(|(_, v)| !is_zero(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_defaults).collect()),
        other => other,
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

#[test]
fn original_field_names_round_trip() {
    let docs = read_documents(Path::new("tests/fixtures/original-fields.yaml")).unwrap();
    assert_eq!(docs.len(), 1);
    let job: TrainingJob = docs[0].decode().unwrap();

    assert_eq!(job.spec.trainer.min_instance, 2);
    assert_eq!(job.spec.trainer.max_instance, 6);
    assert_eq!(job.spec.master.etcd_endpoint, "http://etcd:2379");
    assert_eq!(job.spec.master.grace_period_seconds, Some(30));
    assert_eq!(job.spec.master.pre_stop_cmd, ["sh", "-c", "echo bye"]);
    assert_eq!(job.spec.volume_mounts[0].mount_path, "/data");
    assert_eq!(job.spec.annotations.walltime, 3600);
    assert_eq!(job.spec.frame_work.as_ref().unwrap().job_type, "multi");
    assert_eq!(job.spec.scheduler_name, "volcano");
    assert_eq!(job.spec.pod_group_name, "example-pg");
    assert!(job.spec.pserver.index_succeed);
    let status = job.status.as_ref().unwrap();
    assert_eq!(status.phase, TrainingJobPhase::Running);
    assert_eq!(status.scale_records.scale_records.len(), 2);
    assert_eq!(
        status.scale_records.scale_records[1].status,
        ScaleResults::False
    );
    assert_eq!(status.replica_statuses[0].resource_states["running"], 3);
    assert!(status.start_time.is_some());

    // Serializing gives back the manifest (less fields that hold their zero value).
    let back = serde_json::to_value(&job).unwrap();
    assert_eq!(
        without_defaults(back.clone()),
        without_defaults(docs[0].value.clone())
    );
    let again: TrainingJob = serde_json::from_value(back).unwrap();
    assert_eq!(again.spec, job.spec);
    assert_eq!(again.status, job.status);
    assert_eq!(again.metadata, job.metadata);
    assert!(
        validate_training_job(&job).is_empty(),
        "{:?}",
        validate_training_job(&job)
    );
}

#[test]
fn helper_methods_follow_the_original() {
    let docs = read_documents(Path::new("tests/fixtures/original-fields.yaml")).unwrap();
    let job: TrainingJob = docs[0].decode().unwrap();
    assert!(job.elastic());
    assert_eq!(job.stored_parallelism(), 3);
    assert_eq!(job.fulfillment(), 0.25);
    assert_eq!(job.gpu().unwrap(), 1);
    assert!(job.need_gpu().unwrap());
    assert_eq!(job.trainer_gpu_limit().unwrap(), 1);
    assert_eq!(job.trainer_cpu_request_milli().unwrap(), 2000);
    // 8Gi = 8589934592 bytes → ceil to 10^6 → 8590.
    assert_eq!(job.trainer_mem_request_mega().unwrap(), 8590);
    assert_eq!(job.priority(&Default::default()).value, 5);
}

/// A trainer that gives only limits requests them, as the API server defaults requests to
/// limits: the planner must not see it as free.
#[test]
fn a_trainer_with_only_limits_requests_its_limits() {
    let job: TrainingJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "limits", "namespace": "ns"},
        "spec": {"trainer": {"min-instance": 1, "max-instance": 4,
                             "resources": {"requests": {"memory": "1Gi"},
                                           "limits": {"cpu": "3", "memory": "2Gi"}}}}
    }))
    .unwrap();
    assert_eq!(job.trainer_cpu_request_milli().unwrap(), 3000);
    // The request named wins over the limit: 1Gi → 1074 (10^6 bytes, rounded up).
    assert_eq!(job.trainer_mem_request_mega().unwrap(), 1074);
}

#[test]
fn fulfillment_edges() {
    let mut job: TrainingJob = serde_json::from_value(
        serde_json::json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "j", "namespace": "n"},
            "spec": {"trainer": {"min-instance": 3, "max-instance": 3}}}),
    )
    .unwrap();
    assert!(!job.elastic());
    assert_eq!(job.fulfillment(), 1.0);
    job.spec.trainer.max_instance = 5;
    // No replicaSpec: current is 0, below min.
    assert_eq!(job.fulfillment(), -1.5);
}

#[test]
fn recorded_list_round_trips_object_by_object() {
    let docs = read_documents(Path::new("simulations/examples/cluster.json")).unwrap();
    assert!(docs.len() > 15);
    for doc in &docs {
        let back = match doc.kind() {
            "Node" => serde_json::to_value(doc.decode::<Node>().unwrap()).unwrap(),
            "Pod" => serde_json::to_value(doc.decode::<Pod>().unwrap()).unwrap(),
            "Job" => serde_json::to_value(doc.decode::<Job>().unwrap()).unwrap(),
            "TrainingJob" => serde_json::to_value(doc.decode::<TrainingJob>().unwrap()).unwrap(),
            other => panic!("unexpected kind {other}"),
        };
        assert_eq!(
            without_defaults(back),
            without_defaults(doc.value.clone()),
            "{}",
            doc.origin
        );
    }
}

#[test]
fn yaml_and_json_read_the_same() {
    let yaml = std::fs::read_to_string("tests/fixtures/original-fields.yaml").unwrap();
    let from_yaml = parse_documents(&yaml, "y").unwrap();
    let json = serde_json::to_string(&from_yaml[0].value).unwrap();
    let from_json = parse_documents(&json, "j").unwrap();
    assert_eq!(from_yaml[0].value, from_json[0].value);
}
