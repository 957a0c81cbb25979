//! Every kind of bad input gets an error that names the object and the field.

#[path = "bad_input/names.rs"]
mod names;
#[path = "bad_input/simulate.rs"]
mod simulate;
#[path = "bad_input/types.rs"]
mod types;

#[path = "bad_input/dumps.rs"]
mod dumps;

use std::process::Command;

use trainscale::api::manifest::parse_documents;
use trainscale::api::validate::validate_document;
use trainscale::cluster::ClusterState;

/// The errors and warnings `validate` reports for one TrainingJob built from `spec` (JSON).
fn findings(spec: serde_json::Value) -> (Vec<String>, Vec<String>) {
    let doc = serde_json::json!({
        "apiVersion": "paddlepaddle.org/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "bad", "namespace": "ns"},
        "spec": spec,
    });
    let docs = parse_documents(&doc.to_string(), "test.json").unwrap();
    let report = validate_document(&docs[0], &Default::default());
    let text = |v: &[trainscale::api::FieldError]| v.iter().map(|p| p.to_string()).collect();
    (text(&report.errors), text(&report.warnings))
}

/// The errors `validate` reports for one TrainingJob built from `spec` (JSON).
fn problems(spec: serde_json::Value) -> Vec<String> {
    findings(spec).0
}

/// The warnings `validate` reports for a TrainingJob without errors.
fn warnings(spec: serde_json::Value) -> Vec<String> {
    let (errors, warnings) = findings(spec);
    assert_eq!(errors, Vec::<String>::new(), "warnings only were expected");
    warnings
}

fn good_spec() -> serde_json::Value {
    serde_json::json!({
        "fault_tolerant": true,
        "pserver": {"min-instance": 1, "max-instance": 1},
        "trainer": {
            "min-instance": 1, "max-instance": 4,
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": 1}}
        }
    })
}

fn with(path: &[&str], value: serde_json::Value) -> serde_json::Value {
    let mut spec = good_spec();
    let mut cur = &mut spec;
    for key in &path[..path.len() - 1] {
        cur = cur
            .as_object_mut()
            .unwrap()
            .entry(key.to_string())
            .or_insert(serde_json::json!({}));
    }
    cur[path[path.len() - 1]] = value;
    spec
}

fn assert_one(problems: &[String], expected: &str) {
    assert!(
        problems.iter().any(|p| p.contains(expected)),
        "expected a problem containing {expected:?}, got {problems:?}"
    );
    assert!(
        problems
            .iter()
            .all(|p| p.starts_with("TrainingJob ns/bad: ")),
        "{problems:?}"
    );
}

#[test]
fn a_good_job_has_no_problems() {
    assert_eq!(findings(good_spec()), (Vec::new(), Vec::new()));
}

#[test]
fn min_greater_than_max() {
    let p = problems(with(&["trainer", "min-instance"], 5.into()));
    assert_one(
        &p,
        "spec.trainer.min-instance: min-instance 5 is greater than max-instance 4",
    );
}

#[test]
fn negative_and_zero_counts() {
    let p = problems(with(&["trainer", "max-instance"], (-2).into()));
    assert_one(
        &p,
        "spec.trainer.max-instance: must not be negative, got -2",
    );
    let p = problems(with(&["trainer", "min-instance"], (-1).into()));
    assert_one(
        &p,
        "spec.trainer.min-instance: must not be negative, got -1",
    );
    let p = problems(with(&["pserver", "max-instance"], (-1).into()));
    assert_one(&p, "spec.pserver.min-instance: counts must not be negative");
    // Zero trainers at the minimum is an elastic job that starts from nothing: no finding.
    assert_eq!(
        findings(with(&["trainer", "min-instance"], 0.into())),
        (Vec::new(), Vec::new())
    );
    let w = warnings(with(&["pserver", "min-instance"], 0.into()));
    assert_one(
        &w,
        "spec.pserver.min-instance: 0: no parameter servers will be created",
    );
    let p = problems(with(&["port"], (-1).into()));
    assert_one(&p, "spec.port: must not be negative, got -1");
}

#[test]
fn bad_quantities() {
    for (value, why) in [
        ("12Qi", "unknown suffix"),
        ("-1", "is negative"),
        ("1.2.3", "is not a number"),
    ] {
        let p = problems(with(
            &["trainer", "resources", "requests", "memory"],
            value.into(),
        ));
        assert_one(&p, "spec.trainer.resources.requests.memory: quantity");
        assert_one(&p, why);
    }
    let p = problems(with(
        &["pserver", "resources", "limits", "cpu"],
        "2x".into(),
    ));
    assert_one(&p, "spec.pserver.resources.limits.cpu: quantity \"2x\"");
}

#[test]
fn elastic_without_fault_tolerance() {
    let w = warnings(with(&["fault_tolerant"], false.into()));
    assert_one(
        &w,
        "spec.fault_tolerant: the job is elastic but not fault tolerant: trainers restart",
    );
    assert_eq!(w.len(), 1, "{w:?}");
}

#[test]
fn unknown_framework_and_job_type() {
    let p = problems(with(
        &["frame_work"],
        serde_json::json!({"name": "caffe", "type": "ring"}),
    ));
    assert_one(&p, "spec.frame_work.name: unknown framework \"caffe\"");
    assert_one(&p, "spec.frame_work.type: unknown job type \"ring\"");
}

#[test]
fn elastic_trainer_without_requests() {
    let p = problems(with(&["trainer", "resources"], serde_json::json!({})));
    assert_one(
        &p,
        "spec.trainer.resources.requests: an elastic trainer needs",
    );
}

#[test]
fn priority_names_warn_and_walltime_errs() {
    let w = warnings(with(&["annotations", "priority"], "high".into()));
    assert_one(
        &w,
        "spec.annotations.priority: \"high\" is neither an integer nor the name of a PriorityClass",
    );
    assert_eq!(
        findings(with(&["annotations", "priority"], "-7".into())),
        (Vec::new(), Vec::new())
    );
    let p = problems(with(&["annotations", "walltime"], (-5).into()));
    assert_one(&p, "spec.annotations.walltime: must not be negative");
}

#[test]
fn wrong_types_name_the_field_path() {
    let p = problems(with(&["trainer", "min-instance"], "two".into()));
    assert_one(
        &p,
        "spec.trainer.min-instance: invalid type: string \"two\"",
    );
}

#[test]
fn other_kinds_are_reported() {
    let docs = parse_documents(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: n}\n---\nkind: ConfigMap\nmetadata: {name: d, namespace: n}\n",
        "f.yaml",
    )
    .unwrap();
    let report = validate_document(&docs[0], &Default::default());
    assert_eq!(
        report.errors[0].to_string(),
        "ConfigMap n/c: kind: is a ConfigMap, not a TrainingJob, PaddleJob, PyTorchTrainingJob, PyTorchJob, Job or JobSet"
    );
    // `validate` skips the first (see `unchecked_kind`), not one naming no apiVersion.
    assert_eq!(
        trainscale::cluster::kinds::unchecked_kind(&docs[0]).as_deref(),
        Some("v1 ConfigMap n/c (not a job kind)")
    );
    assert_eq!(trainscale::cluster::kinds::unchecked_kind(&docs[1]), None);
    let report = validate_document(&docs[1], &Default::default());
    assert_eq!(
        report.errors[0].to_string(),
        "ConfigMap n/d: apiVersion: required: a ConfigMap names its apiVersion"
    );
}

#[test]
fn cluster_state_skips_bad_objects_with_a_warning() {
    let dump = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
         "status": {"allocatable": {"cpu": "4", "memory": "12Qi"}}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"},
         "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
         "spec": {"nodeName": "n2", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1.2.3"}}}]}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q", "namespace": "ns"},
         "spec": {"containers": "not a list"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "ns"}},
    ]});
    let docs = parse_documents(&dump.to_string(), "dump.json").unwrap();
    let snap = ClusterState::from_documents(&docs);
    let warnings: Vec<String> = snap.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 4, "{warnings:?}");
    assert!(warnings[0].starts_with("Node n1: status.allocatable.memory: quantity \"12Qi\""));
    assert!(
        warnings[1]
            .starts_with("Pod ns/p: spec.containers[0].resources.requests.cpu: quantity \"1.2.3\"")
    );
    assert!(warnings[2].starts_with("Pod ns/q: spec.containers: invalid type"));
    assert!(warnings[3].starts_with("Service ns/s: kind:"));
    // The good node is there, the bad one is not, and the bad pod holds nothing.
    let n2 = snap.state.node_id_of("n2").unwrap();
    assert_eq!(snap.state.node(n2).unwrap().free().cpu_milli, 4000);
    assert!(snap.state.node_id_of("n1").is_none());
}

#[test]
fn validate_command_exit_codes() {
    let bin = env!("CARGO_BIN_EXE_trainscale");
    let ok = Command::new(bin)
        .args(["validate", "-f", "tests/fixtures/original-fields.yaml"])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("ok: TrainingJob paddlecloud/example"));

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: paddlepaddle.org/v1alpha1\nkind: TrainingJob\nmetadata: {name: a, namespace: n}\nspec:\n  fault_tolerant: true\n  pserver: {min-instance: 1, max-instance: 1}\n  trainer: {min-instance: 3, max-instance: 2, resources: {requests: {cpu: 12Qi}}}\n---\napiVersion: paddlepaddle.org/v1alpha1\nkind: TrainingJob\nmetadata: {name: b, namespace: n}\nspec:\n  pserver: {min-instance: 1, max-instance: 1}\n  trainer: {min-instance: 1, max-instance: 1, resources: {requests: {cpu: 1}}}\n",
    )
    .unwrap();
    let out = Command::new(bin)
        .args(["validate", "-f"])
        .arg(&bad)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("invalid: TrainingJob n/a: spec.trainer.min-instance: min-instance 3 is greater than max-instance 2"), "{stdout}");
    assert!(stdout.contains("invalid: TrainingJob n/a: spec.trainer.resources.requests.cpu: quantity \"12Qi\" has an unknown suffix"), "{stdout}");
    assert!(stdout.contains("ok: TrainingJob n/b"), "{stdout}");
    assert!(
        stdout.contains("2 object(s) checked, 1 invalid"),
        "{stdout}"
    );

    let missing = Command::new(bin)
        .args(["validate", "-f", "no/such/file.yaml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stdout).contains("error: no/such/file.yaml"));
}

#[test]
fn committed_crd_matches_the_generated_one() {
    let generated = trainscale::commands::crd::crd_yaml().unwrap();
    let committed = std::fs::read_to_string("deploy/crd.yaml").unwrap();
    assert_eq!(
        committed, generated,
        "deploy/crd.yaml is stale: run `cargo run -- crd > deploy/crd.yaml`"
    );
}

/// A dump of nodes with the given GPU resource maps, and an elastic GPU job wanting more.
fn gpu_dump(gpus: &[(&str, &str)]) -> Vec<trainscale::api::manifest::Document> {
    let mut items: Vec<serde_json::Value> = gpus
        .iter()
        .enumerate()
        .map(|(i, (resource, amount))| {
            serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("n{i}")},
             "status": {"allocatable": {"cpu": "64", "memory": "256Gi", *resource: *amount}}})
        })
        .collect();
    items.push(serde_json::json!({
        "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "j", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": good_spec(),
    }));
    let dump = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    parse_documents(&dump.to_string(), "dump.json").unwrap()
}

#[test]
fn absurd_node_allocatable_is_refused_and_free_counts_never_go_negative() {
    use trainscale::planner::{PlannerConfig, Policy, plan};
    let huge = (1i64 << 62).to_string();
    let docs = gpu_dump(&[
        ("nvidia.com/gpu", &huge),
        ("alpha.kubernetes.io/nvidia-gpu", &huge),
        ("nvidia.com/gpu", "8"),
    ]);
    let snap = ClusterState::from_documents(&docs);
    let warnings: Vec<String> = snap.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "Node n0: status.allocatable.nvidia.com/gpu: quantity \"4611686018427387904\" is more than a node can have (at most 1048576)"
        ),
        "{warnings:?}"
    );
    assert!(
        warnings[1].starts_with("Node n1: status.allocatable.alpha.kubernetes.io/nvidia-gpu:"),
        "{warnings:?}"
    );
    for policy in [Policy::Fulfillment, Policy::Edl, Policy::Static] {
        let config = PlannerConfig {
            policy,
            ..PlannerConfig::default()
        };
        let result = plan(&snap.state, &config);
        let s = &result.summary;
        assert!(
            s.free_gpus_after >= 0 && s.stranded_gpus_after >= 0,
            "{policy:?}: {s:?}"
        );
        assert!(s.free_gpus_after <= 8, "{policy:?}: {s:?}");
    }
    let free = trainscale::daemon::metrics::free_resources(&snap.state);
    assert_eq!(free.gpu, 8);

    // Through the command: the table never shows a negative count.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dump.json");
    let items: Vec<serde_json::Value> = docs.iter().map(|d| d.value.clone()).collect();
    std::fs::write(
        &path,
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    )
    .unwrap();
    let (text, warnings) = trainscale::commands::plan::plan_snapshot(
        &path,
        &PlannerConfig::default(),
        trainscale::commands::OutputFormat::Table,
    )
    .unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(!text.contains("free GPUs -"), "{text}");

    // CPU and memory have their own bound; at the bound a node is kept, and many such nodes sum
    // without wrapping.
    let docs = parse_documents(
        &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "big-memory"},
             "status": {"allocatable": {"cpu": "1", "memory": "1Ei"}}},
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "big-cpu"},
             "status": {"allocatable": {"cpu": "1E", "memory": "1"}}},
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "many-cores"},
             "status": {"allocatable": {"cpu": "9007199254741", "memory": "1"}}},
        ]})
        .to_string(),
        "dump.json",
    )
    .unwrap();
    let warnings: Vec<String> = ClusterState::from_documents(&docs)
        .warnings
        .iter()
        .map(|w| w.to_string())
        .collect();
    assert_eq!(
        warnings,
        [
            "Node big-memory: status.allocatable.memory: quantity \"1Ei\" is more than a node can have (at most 9007199254740992)",
            "Node big-cpu: status.allocatable.cpu: quantity \"1E\" is more than a node can have (at most 9007199254740992m)",
            "Node many-cores: status.allocatable.cpu: quantity \"9007199254741\" is more than a node can have (at most 9007199254740992m)",
        ]
    );
    let max = (1i64 << 20).to_string();
    let docs = gpu_dump(&vec![("nvidia.com/gpu", max.as_str()); 300]);
    let snap = ClusterState::from_documents(&docs);
    assert!(snap.warnings.is_empty(), "{:?}", snap.warnings);
    let result = plan(&snap.state, &PlannerConfig::default());
    assert!(result.summary.free_gpus_after > 299 << 20);
}

#[test]
fn a_speedup_annotation_that_does_not_parse_is_a_warning_naming_it() {
    let report = |value: &str| {
        let doc = serde_json::json!({
            "apiVersion": "paddlepaddle.org/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": "bad", "namespace": "ns",
                         "annotations": {"trainscale.io/speedup": value}},
            "spec": good_spec(),
        });
        let docs = parse_documents(&doc.to_string(), "test.json").unwrap();
        let report = validate_document(&docs[0], &Default::default());
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        report
            .warnings
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(report("1:1,2:1.9,4:3.5"), Vec::<String>::new());
    assert_eq!(report("amdahl:0.9"), Vec::<String>::new());
    let w = report("1:1,2:fast");
    assert_one(
        &w,
        "metadata.annotations[\"trainscale.io/speedup\"]: \"2:fast\": the speedup must be a number",
    );
    assert_one(
        &report("amdahl:2"),
        "the parallel fraction must be within 0 and 1",
    );
}

/// A pod whose init container asks for an unreadable quantity is refused naming that container's
/// field; a readable one counts as max(sum of containers, largest init container) + overhead.
#[test]
fn a_pods_request_names_a_bad_init_container() {
    let pod = |init_cpu: &str| -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "2"}}}],
                "initContainers": [
                    {"name": "i", "resources": {"requests": {"cpu": init_cpu, "memory": "4Gi"}}}],
                "overhead": {"cpu": "100m"}}}))
        .unwrap()
    };
    let err = trainscale::cluster::objects::read_pod(&pod("2x")).unwrap_err();
    assert_eq!(err.object, "Pod ml/p");
    assert_eq!(err.field, "spec.initContainers[0].resources.requests.cpu");
    let info = trainscale::cluster::objects::read_pod(&pod("2")).unwrap();
    assert_eq!(
        info.requests,
        trainscale::api::Resources::new(3_100, 4 << 30, 0)
    );
}

/// The built-in PriorityClasses exist in every cluster: named without being listed, they resolve
/// to their values in `validate`, `plan`/`state` and the daemon's state, with no warning.
#[test]
fn built_in_priority_classes_resolve_without_a_warning() {
    for (class, value) in [
        ("system-cluster-critical", 2_000_000_000),
        ("system-node-critical", 2_000_001_000),
    ] {
        assert_eq!(
            findings(with(&["annotations", "priority"], class.into())),
            (Vec::new(), Vec::new()),
            "{class}"
        );
        let text = std::fs::read_to_string("deploy/examples/007-batchjob-elastic.yaml").unwrap();
        let mut job = parse_documents(&text, "x").unwrap().remove(0).value;
        job["spec"]["template"]["spec"]["priorityClassName"] = class.into();
        let docs = parse_documents(&job.to_string(), "x.json").unwrap();
        let report = validate_document(&docs[0], &Default::default());
        assert!(
            report.errors.is_empty() && report.warnings.is_empty(),
            "{class}: {:?} {:?}",
            report.errors,
            report.warnings
        );
        let snap = ClusterState::from_documents(&docs);
        let (key, _, info) = snap.state.jobs().next().unwrap();
        assert_eq!(info.priority, value, "{class}");
        assert!(snap.state.warnings(key).is_empty(), "{class}");
    }
    // Another unlisted name still warns.
    let w = warnings(with(&["annotations", "priority"], "system-critical".into()));
    assert_one(
        &w,
        "\"system-critical\" is neither an integer nor the name of a PriorityClass",
    );
}
