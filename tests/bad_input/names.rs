//! Issue 32, item 1: names and namespaces as the API server checks them, the names trainscale
//! derives from a job's name, and name and count flags.

use std::process::Command;

use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use trainscale::api::JobKind;
use trainscale::api::manifest::parse_documents;
use trainscale::api::validate::validate_document;
use trainscale::cluster::ClusterState;
use trainscale::cluster::report::skipped_jobs;
use trainscale::daemon::{Store, WatchEvent};

fn training_job(name: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "paddlepaddle.org/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
        "spec": super::good_spec(),
    })
}

/// `validate`'s errors for one object, as printed.
fn errors_of(doc: Value) -> Vec<String> {
    let docs = parse_documents(&doc.to_string(), "test.json").unwrap();
    let report = validate_document(&docs[0], &Default::default());
    report.errors.iter().map(|e| e.to_string()).collect()
}

#[test]
fn names_and_namespaces_the_api_server_refuses_are_errors() {
    let long = "a".repeat(300);
    for name in ["../../etc/passwd", "a/b", "Bad Name", ".", &long, "a\nb"] {
        let errors = errors_of(training_job(name, "ns"));
        assert_eq!(errors.len(), 1, "{name:?}: {errors:?}");
        assert!(
            errors[0].contains(": metadata.name: invalid value ")
                && (errors[0].contains("RFC 1123 subdomain") || name.len() > 253),
            "{name:?}: {errors:?}"
        );
        assert!(!errors[0].contains('\n'), "{errors:?}");
    }
    let errors = errors_of(training_job(&long, "ns"));
    assert!(
        errors[0].contains("must be no more than 253 characters"),
        "{errors:?}"
    );
    let errors = errors_of(training_job("ok", "../x"));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("TrainingJob ../x/ok: metadata.namespace: invalid value \"../x\": a lowercase RFC 1123 label"),
        "{errors:?}"
    );
    assert!(errors_of(training_job("good-name-v2", "team-a")).is_empty());
}

#[test]
fn a_name_whose_derived_objects_cannot_exist_is_an_error_naming_them() {
    let sixty = "j".repeat(60);
    let errors = errors_of(training_job(&sixty, "ns"));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(&format!(
            "metadata.name: \"{sixty}\" is too long for the job's Job \"{sixty}-trainer\" (68 characters): must be no more than 63 characters"
        )),
        "{errors:?}"
    );
    // 53 characters: the last trainer pod's hostname `<name>-trainer-3` is 63, the limit.
    assert!(errors_of(training_job(&"j".repeat(53), "ns")).is_empty());
    // A PaddleJob runs as the same objects.
    let mut paddle = training_job(&sixty, "ns");
    paddle["apiVersion"] = json!("paddlepaddle.org/v1");
    paddle["kind"] = json!("PaddleJob");
    paddle["spec"] = json!({"pserver": {"replicas": 1}, "worker": {"replicas": 2}});
    let errors = errors_of(paddle);
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("PaddleJob ns/") && e.contains("-trainer\" (68 characters)")),
        "{errors:?}"
    );
}

#[test]
fn a_name_whose_trainer_pods_cannot_have_a_hostname_is_an_error() {
    // The Job controller names an Indexed Job's pod `<job>-<index>`: a DNS-1123 label. With
    // max-instance 4 the last is `<name>-trainer-3`; `<name>-trainer` (62) is a valid Job name.
    let long = "j".repeat(54);
    let errors = errors_of(training_job(&long, "ns"));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(&format!(
            "metadata.name: \"{long}\" gives the trainer pods hostnames up to \"{long}-trainer-3\" (64 characters"
        )) && errors[0].contains("must be no more than 63 characters"),
        "{errors:?}"
    );
    // A dot makes a valid subdomain but no hostname.
    let errors = errors_of(training_job("resnet.v2", "ns"));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("\"resnet.v2-trainer-3\"") && errors[0].contains("RFC 1123 label"),
        "{errors:?}"
    );
    // More trainers, longer hostnames: 53 characters and max-instance 11 reach index 10.
    let mut many = training_job(&"j".repeat(53), "ns");
    many["spec"]["trainer"]["max-instance"] = json!(11);
    let errors = errors_of(many);
    assert!(
        errors.len() == 1 && errors[0].contains("-trainer-10\" (64 characters"),
        "{errors:?}"
    );
}

#[test]
fn pod_group_and_scheduler_names_are_checked_as_the_pods_carry_them() {
    let with_spec = |field: &str, value: &str| {
        let mut doc = training_job("job", "ns");
        match field.split_once('.') {
            Some((outer, inner)) => doc["spec"][outer][inner] = json!(value),
            None => doc["spec"][field] = json!(value),
        }
        errors_of(doc)
    };
    // The PodGroup's name is also every pod's `scheduling.x-k8s.io/pod-group` label value.
    let long = "g".repeat(64);
    let errors = with_spec("podGroupName", &long);
    assert!(
        errors.len() == 1
            && errors[0].contains("spec.podGroupName: invalid value")
            && errors[0].contains("must be no more than 63 characters"),
        "{errors:?}"
    );
    assert!(with_spec("podGroupName", &"g".repeat(63)).is_empty());
    for field in ["schedulerName", "annotations.scheduler"] {
        let errors = with_spec(field, "Bad Sched");
        assert!(
            errors.len() == 1
                && errors[0].contains(&format!("spec.{field}: invalid value \"Bad Sched\""))
                && errors[0].contains("RFC 1123 subdomain"),
            "{field}: {errors:?}"
        );
        assert!(with_spec(field, "volcano").is_empty(), "{field}");
    }
}

#[test]
fn other_kinds_follow_their_own_rule() {
    let kubeflow = |name: &str| {
        let text = std::fs::read_to_string("deploy/examples/005-pytorchjob-elastic.yaml").unwrap();
        let docs = parse_documents(&text, "x").unwrap();
        let mut doc = docs
            .into_iter()
            .find(|d| d.kind() == "PyTorchJob")
            .unwrap()
            .value;
        doc["metadata"]["name"] = json!(name);
        doc
    };
    // A PyTorchJob's name is a DNS-1035 label, as the training operator's webhook checks it.
    assert!(errors_of(kubeflow(&"p".repeat(63))).is_empty());
    for bad in ["Bad_Name", "resnet.v2", "9resnet", &"p".repeat(64)] {
        let errors = errors_of(kubeflow(bad));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with(&format!(
                "PyTorchJob ml/{bad}: metadata.name: invalid value"
            )),
            "{errors:?}"
        );
    }
    let errors = errors_of(kubeflow("resnet.v2"));
    assert!(errors[0].contains("DNS-1035"), "{errors:?}");
    // A batch/v1 Job's name is also its pods' job-name label: at most 63.
    let text = std::fs::read_to_string("deploy/examples/007-batchjob-elastic.yaml").unwrap();
    let mut job = parse_documents(&text, "x").unwrap().remove(0).value;
    job["metadata"]["name"] = json!("b".repeat(64));
    let errors = errors_of(job);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("metadata.name") && e.contains("no more than 63")),
        "{errors:?}"
    );
}

#[test]
fn a_bad_name_is_skipped_and_listed_by_plan_state_and_the_daemon() {
    let sixty = "j".repeat(60);
    let items = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
         "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": 8}}},
        training_job(&sixty, "ns"),
        training_job("fine", "ns"),
    ]});
    let docs = parse_documents(&items.to_string(), "dump.json").unwrap();
    let snap = ClusterState::from_documents(&docs);
    let skipped = skipped_jobs(&snap.state);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].name, sixty);
    assert_eq!(skipped[0].field, "metadata.name");
    assert!(skipped[0].message.contains("-trainer\""), "{skipped:?}");

    let mut store = Store::new();
    let wrap = |e| WatchEvent::JobObject(JobKind::TrainingJob, e);
    store.handle(wrap(Event::Init));
    for name in [sixty.as_str(), "fine"] {
        let job: DynamicObject = serde_json::from_value(training_job(name, "ns")).unwrap();
        store.handle(wrap(Event::InitApply(job)));
    }
    store.handle(wrap(Event::InitDone));
    let invalid = store.unreported_invalid();
    assert_eq!(invalid.len(), 1, "{invalid:?}");
    assert_eq!(&*invalid[0].key.name, sixty.as_str());
    assert_eq!(invalid[0].problems[0].field, "metadata.name");
    assert_eq!(store.skipped_counts()[&JobKind::TrainingJob], 1);
}

/// Every line of `out` starts with one of `prefixes`.
fn lines_start_with(out: &str, prefixes: &[&str]) {
    for line in out.lines() {
        assert!(
            prefixes.iter().any(|p| line.starts_with(p)),
            "forged line {line:?} in:\n{out}"
        );
    }
}

#[test]
fn a_newline_in_a_name_forges_no_output_line() {
    let bin = env!("CARGO_BIN_EXE_trainscale");
    let dir = tempfile::tempdir().unwrap();
    let forged = "x\nok: TrainingJob ns/forged";
    let file = dir.path().join("jobs.json");
    let items = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
         "status": {"allocatable": {"cpu": "8", "memory": "16Gi"}}},
        training_job(forged, "ns"),
        training_job("y", "ns\nok: TrainingJob ns/forged2"),
    ]});
    std::fs::write(&file, items.to_string()).unwrap();
    let out = Command::new(bin)
        .args(["validate", "-f"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    lines_start_with(
        &stdout,
        &[
            "skipped: v1 Node n1 ",
            "invalid: ",
            "warning: ",
            "ok: ",
            "2 object(s)",
        ],
    );
    assert!(
        !stdout
            .lines()
            .any(|l| l.starts_with("ok: TrainingJob ns/forged")),
        "{stdout}"
    );
    assert!(stdout.contains("x\\nok: TrainingJob ns/forged"), "{stdout}");

    for command in ["state", "plan"] {
        let out = Command::new(bin)
            .args([command, "--snapshot"])
            .arg(&file)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !text.lines().any(|l| l.starts_with("ok: ")),
            "{command}: {text}"
        );
        assert!(
            text.contains("x\\nok: TrainingJob ns/forged"),
            "{command}: {text}"
        );
    }
}

#[test]
fn submit_refuses_a_job_name_the_api_server_would() {
    let bin = env!("CARGO_BIN_EXE_trainscale");
    let long_group = "g".repeat(64);
    let submit_with = |name: &str, namespace: &str, extra: &[&str]| {
        Command::new(bin)
            .args(["submit", "--job-name", name, "--namespace", namespace])
            .args([
                "--entry-point",
                "python train.py",
                "--memory",
                "1Gi",
                "--cpu",
                "1",
            ])
            .args(["--image", "img", "--dry-run"])
            .args(extra)
            .output()
            .unwrap()
    };
    let submit = |name: &str, namespace: &str| submit_with(name, namespace, &[]);
    let out = submit("../../x", "default");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty(), "printed a job");
    assert!(
        stderr.contains(
            "invalid value \"../../x\" for '--job-name <JOB_NAME>': a lowercase RFC 1123 subdomain"
        ),
        "{stderr}"
    );
    let out = submit(&"j".repeat(60), "default");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("-trainer\" (68 characters)"), "{stderr}");
    let out = submit("ok", "Bad NS");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'--namespace <NAMESPACE>'"));
    let flag = |args: &[&str]| submit_with("ok", "default", args);
    for (args, named) in [
        (
            vec!["--scheduler-name", "Bad Sched"],
            "'--scheduler-name <SCHEDULER_NAME>': a lowercase RFC 1123 subdomain",
        ),
        (
            vec!["--pod-group", &long_group],
            "'--pod-group <POD_GROUP>': must be no more than 63 characters",
        ),
    ] {
        let out = flag(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
    let out = flag(&["--scheduler-name", "volcano", "--pod-group", "group-a"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = submit("fine", "default");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("name: fine"));
}

#[test]
fn run_range_checks_namespaces_and_counts_at_parse_time() {
    let bin = env!("CARGO_BIN_EXE_trainscale");
    for (args, flag) in [
        (&["--namespace", "../x"][..], "'--namespace <NAMESPACE>'"),
        (
            &["--lease-namespace", "Bad NS"][..],
            "'--lease-namespace <LEASE_NAMESPACE>'",
        ),
        (&["--lease-name", "a/b"][..], "'--lease-name <LEASE_NAME>'"),
        (
            &["--restart-limit=-1"][..],
            "'--restart-limit <RESTART_LIMIT>'",
        ),
        (
            &["--restart-limit", "99999999999"][..],
            "'--restart-limit <RESTART_LIMIT>': \"99999999999\" is out of range",
        ),
        (
            &["--scheduler-name", "Upper_Sched"][..],
            "'--scheduler-name <SCHEDULER_NAME>': a lowercase RFC 1123 subdomain",
        ),
        (
            &["--namespace", "a\nerror: forged"][..],
            "'--namespace <NAMESPACE>'",
        ),
    ] {
        let out = Command::new(bin)
            .arg("run")
            .args(args)
            .env_remove("KUBECONFIG")
            .env_remove("POD_NAMESPACE")
            .env("TRAINSCALE_KUBECONFIG", "/nonexistent")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: invalid value ") && stderr.contains(flag),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.lines().any(|l| l.starts_with("error: forged")),
            "{stderr}"
        );
    }
}

#[test]
fn a_pod_with_a_name_the_api_server_refuses_is_named_and_skipped() {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "Bad Pod", "namespace": "ml"},
        "spec": {"containers": [{"name": "c"}]}}))
    .unwrap();
    let e = trainscale::cluster::objects::read_pod(&pod).unwrap_err();
    assert_eq!(e.object, "Pod ml/Bad Pod");
    assert_eq!(e.field, "metadata.name");
}

#[test]
fn progress_checks_the_job_it_names_before_connecting() {
    let bin = env!("CARGO_BIN_EXE_trainscale");
    for (job, named) in [
        ("../x/y", "namespace \"..\": a lowercase RFC 1123 label"),
        (
            "ml/Bad Name",
            "name \"Bad Name\": a lowercase RFC 1123 subdomain",
        ),
        ("job", "name the job as NAMESPACE/NAME"),
    ] {
        let out = Command::new(bin)
            .args(["progress", job, "--done", "1"])
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{job}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value {job:?} for '<JOB>': {named}")),
            "{job}: {stderr}"
        );
    }
}

#[test]
fn a_generate_name_stands_for_the_name_with_five_random_characters() {
    let generated = |kind: &str, prefix: &str| {
        let mut doc = training_job("x", "ns");
        doc["metadata"] = json!({"generateName": prefix, "namespace": "ns"});
        if kind == "PaddleJob" {
            doc["apiVersion"] = json!("paddlepaddle.org/v1");
            doc["kind"] = json!("PaddleJob");
            doc["spec"] = json!({"pserver": {"replicas": 1}, "worker": {"replicas": 2,
                "template": {"spec": {"containers": [{"name": "w",
                    "resources": {"requests": {"cpu": "1"}}}]}}}});
        }
        errors_of(doc)
    };
    for kind in ["TrainingJob", "PaddleJob"] {
        assert_eq!(generated(kind, "resnet-"), Vec::<String>::new(), "{kind}");
    }
    // `<prefix>xxxxx-trainer-3` is 63 at a 48-character prefix (max-instance 4).
    assert!(generated("TrainingJob", &"j".repeat(48)).is_empty());
    let errors = generated("TrainingJob", &"j".repeat(49));
    assert_eq!(
        errors,
        [format!(
            "TrainingJob ns/{p}: metadata.generateName: \"{p}xxxxx\" (generateName \"{p}\" and 5 random characters) gives the trainer pods hostnames up to \"{p}xxxxx-trainer-3\" (64 characters; the Job controller names an Indexed Job's pod `<job>-<index>`): must be no more than 63 characters",
            p = "j".repeat(49)
        )]
    );
    // A prefix the API server refuses, as it checks one (a trailing '-' is fine).
    let errors = generated("TrainingJob", "Bad.");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("TrainingJob ns/Bad.: metadata.generateName: invalid value \"Bad.\": a lowercase RFC 1123 subdomain"),
        "{errors:?}"
    );
    // Neither name nor generateName: an error still.
    let mut nameless = training_job("x", "ns");
    nameless["metadata"] = json!({"namespace": "ns"});
    let errors = errors_of(nameless);
    assert!(
        errors
            .iter()
            .any(|e| e
                .ends_with("metadata.name: a job needs a name: name or generateName is required")),
        "{errors:?}"
    );
    // The sized kinds check a generateName prefix the same way.
    let text = std::fs::read_to_string("deploy/examples/005-pytorchjob-elastic.yaml").unwrap();
    let mut pytorch = parse_documents(&text, "x")
        .unwrap()
        .into_iter()
        .find(|d| d.kind() == "PyTorchJob")
        .unwrap()
        .value;
    pytorch["metadata"] = json!({"generateName": "imagenet-", "namespace": "ml"});
    assert!(errors_of(pytorch.clone()).is_empty());
    pytorch["metadata"]["generateName"] = json!("Imagenet_");
    let errors = errors_of(pytorch);
    assert!(
        errors.len() == 1
            && errors[0].contains("metadata.generateName: invalid value \"Imagenet_\""),
        "{errors:?}"
    );
}

#[test]
fn submit_refuses_a_name_too_long_for_the_trainer_hostnames_as_a_usage_error() {
    let bin = env!("CARGO_BIN_EXE_trainscale");
    let submit = |name: &str, trainers: &[&str]| {
        Command::new(bin)
            .args(["submit", "--job-name", name, "--entry-point", "python t.py"])
            .args([
                "--memory",
                "1Gi",
                "--cpu",
                "1",
                "--image",
                "img",
                "--dry-run",
            ])
            .args(trainers)
            .output()
            .unwrap()
    };
    // 54 characters: `<name>-trainer` is 62, but `<name>-trainer-2` (3 trainers) is 64.
    let name = "j".repeat(54);
    let out = submit(&name, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty(), "printed a job");
    assert_eq!(
        stderr,
        format!(
            "error: invalid value \"{name}\" for '--job-name <JOB_NAME>': \"{name}\" gives the trainer pods hostnames up to \"{name}-trainer-2\" (64 characters; the Job controller names an Indexed Job's pod `<job>-<index>`): must be no more than 63 characters (trainer count up to 3)\n"
        )
    );
    // The count decides: at 53 characters `<name>-trainer-2` is 63, `<name>-trainer-10` 64.
    let name = "j".repeat(53);
    let out = submit(&name, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = submit(&name, &["--min-trainers", "1", "--max-trainers", "11"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("-trainer-10\" (64 characters")
            && stderr.ends_with("(trainer count up to 11)\n"),
        "{stderr}"
    );
}
