//! Manifests written for the original operators are accepted and planned: the seed examples
//! validate with exactly their warnings, priority names resolve through PriorityClasses, and a
//! job skipped for an error is listed with its field.

use std::path::Path;
use std::process::Command;

use trainscale::api::manifest::read_documents;
use trainscale::api::{JobKey, JobKind};
use trainscale::cluster::ClusterState;
use trainscale::commands::OutputFormat;
use trainscale::commands::plan::plan_snapshot;
use trainscale::planner::PlannerConfig;

const BIN: &str = env!("CARGO_BIN_EXE_trainscale");

/// `(exit code, stdout)` of `trainscale validate [--strict] -f <file>`.
fn validate(file: &str, strict: bool) -> (Option<i32>, String) {
    let mut args = vec!["validate"];
    if strict {
        args.push("--strict");
    }
    args.extend(["-f", file]);
    let out = Command::new(BIN).args(&args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn warning_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect()
}

const NOT_FAULT_TOLERANT: &str = "the job is elastic but not fault tolerant: trainers restart when \
     it is resized and must re-read their count (/etc/trainscale/trainers) on restart";

#[test]
fn seed_examples_validate_and_strict_flags_exactly_the_lints() {
    let cases: [(&str, Vec<String>); 4] = [
        (
            "tests/fixtures/seeds/000-api-doc.yaml",
            vec![format!(
                "warning: TrainingJob default/example-api-doc: spec.fault_tolerant: {NOT_FAULT_TOLERANT}"
            )],
        ),
        (
            "tests/fixtures/seeds/001-paddlejob.yaml",
            vec![format!(
                "warning: PaddleJob testspace/paddlejob: spec.trainer: {NOT_FAULT_TOLERANT}"
            )],
        ),
        (
            "tests/fixtures/seeds/002-go-api.yaml",
            vec![
                "warning: TrainingJob paddlecloud/example: spec.annotations.priority: \"high\" is \
                 neither an integer nor the name of a PriorityClass; ordered as 0"
                    .to_string(),
            ],
        ),
        ("tests/fixtures/seeds/004-sdk.yaml", vec![]),
    ];
    for (file, expected) in cases {
        let (code, stdout) = validate(file, false);
        assert_eq!(code, Some(0), "{file}: {stdout}");
        assert_eq!(warning_lines(&stdout), expected, "{file}");
        assert!(!stdout.contains("invalid:"), "{file}: {stdout}");
        let (strict_code, strict_out) = validate(file, true);
        let want = if expected.is_empty() { 0 } else { 1 };
        assert_eq!(strict_code, Some(want), "{file} --strict: {strict_out}");
        assert_eq!(warning_lines(&strict_out), expected, "{file} --strict");
    }
}

#[test]
fn a_priority_class_in_the_same_files_resolves_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let class = dir.path().join("class.yaml");
    std::fs::write(
        &class,
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args([
            "validate",
            "--strict",
            "-f",
            "tests/fixtures/seeds/002-go-api.yaml",
        ])
        .arg("-f")
        .arg(&class)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(warning_lines(&stdout).is_empty(), "{stdout}");
}

fn key(name: &str) -> JobKey {
    JobKey::new("team", name)
}

#[test]
fn priorities_resolve_by_number_class_or_zero_and_follow_class_changes() {
    let docs = read_documents(Path::new("tests/fixtures/priorities-dump.json")).unwrap();
    let mut state = ClusterState::from_documents(&docs).state;
    let priority =
        |s: &ClusterState, name: &str| s.job(&key(name)).unwrap().info.as_ref().unwrap().priority;
    assert_eq!(priority(&state, "high"), 1000);
    assert_eq!(priority(&state, "seven"), 7);
    assert_eq!(priority(&state, "urgent"), 0);
    assert_eq!(priority(&state, "no-pservers"), 0);
    assert_eq!(state.warnings(&key("urgent")).len(), 1);
    assert!(state.warnings(&key("high")).is_empty());

    // A class arriving after the job (watch order is arbitrary) re-resolves it, and so does a
    // deletion.
    state.set_priority_class("urgent", Some(50));
    assert_eq!(priority(&state, "urgent"), 50);
    assert!(state.warnings(&key("urgent")).is_empty());
    state.delete_priority_class("high");
    assert_eq!(priority(&state, "high"), 0);
    assert_eq!(
        state.warnings(&key("high"))[0].field,
        "spec.annotations.priority"
    );
}

#[test]
fn plan_plans_all_six_in_priority_order_and_lists_the_skipped_one() {
    let (text, other_warnings) = plan_snapshot(
        Path::new("tests/fixtures/priorities-dump.json"),
        &PlannerConfig::default(),
        OutputFormat::Json,
    )
    .unwrap();
    assert!(other_warnings.is_empty(), "{other_warnings:?}");
    let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    let jobs = plan["jobs"].as_array().unwrap();
    let target = |kind: &str, name: &str| {
        jobs.iter()
            .find(|j| j["kind"] == kind && j["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} not planned: {text}"))["target"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(jobs.len(), 6, "{text}");
    // Room for two gangs of 2 one-CPU trainers: the two highest priorities get it although they
    // are the newest; the others (priority 0, the unknown class included) wait.
    assert_eq!(target("TrainingJob", "high"), 2);
    assert_eq!(target("TrainingJob", "seven"), 2);
    for name in ["urgent", "no-pservers", "not-fault-tolerant"] {
        assert_eq!(target("TrainingJob", name), 0, "{name}");
    }
    assert_eq!(target("PaddleJob", "paddlejob"), 0);
    assert_eq!(
        plan["skipped"],
        serde_json::json!([{
            "kind": "TrainingJob", "namespace": "team", "name": "broken",
            "field": "spec.trainer.min-instance",
            "message": "min-instance 5 is greater than max-instance 2"
        }])
    );
    let warned: Vec<(&str, &str)> = plan["job_warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["name"].as_str().unwrap(), w["field"].as_str().unwrap()))
        .collect();
    assert_eq!(
        warned,
        vec![
            ("no-pservers", "spec.pserver.min-instance"),
            ("not-fault-tolerant", "spec.fault_tolerant"),
            ("paddlejob", "spec.trainer"),
            ("urgent", "spec.annotations.priority"),
        ]
    );
}

#[test]
fn paddle_job_pods_and_trainer_job_belong_to_the_paddle_job() {
    let docs = read_documents(Path::new("tests/fixtures/priorities-dump.json")).unwrap();
    let mut state = ClusterState::from_documents(&docs).state;
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "paddlejob-trainer-0", "namespace": "team",
                     "labels": {"paddle-job": "paddlejob", "paddle-job-name": "paddlejob"}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "trainer",
                 "resources": {"requests": {"cpu": "200m", "memory": "200Mi"}}}]},
        "status": {"phase": "Running"}
    }))
    .unwrap();
    state.apply_pod(&pod).unwrap();
    let trainer_job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "paddlejob-trainer", "namespace": "team",
                     "ownerReferences": [{"apiVersion": "paddlepaddle.org/v1", "kind": "PaddleJob",
                                          "name": "paddlejob", "uid": "u", "controller": true}]},
        "spec": {"parallelism": 1, "template": {"spec": {"containers": []}}}
    }))
    .unwrap();
    state.apply_batch_job(&trainer_job);
    let paddle = JobKey::of_kind(JobKind::PaddleJob, "team", "paddlejob");
    let slot = state.job(&paddle).unwrap();
    assert_eq!(slot.trainers.bound, 1);
    assert_eq!(slot.current(), 1);
    // The TrainingJob key of the same name holds nothing.
    assert!(state.job(&key("paddlejob")).is_none());
}
