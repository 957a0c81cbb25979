//! Issue 32, items 2, 4 and 6: duplicates in a manifest or dump are errors naming both, the
//! YAML reader's budget grows with the input, and dumps are read object by object.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};
use trainscale::api::manifest::parse_documents;
use trainscale::cluster::{ClusterState, DumpError};
use trainscale::testkit::dump::{DumpShape, node, write_dump};

fn trainscale(args: &[&str], file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .args(args)
        .arg(file)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {}})
}

#[test]
fn a_duplicate_json_key_is_an_error_naming_the_key_and_where_it_is() {
    let text = r#"{"apiVersion": "v1", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b"},
         "status": {"capacity": {"cpu": "64",
                                 "cpu": "4"}}}
    ], "kind": "List"}"#;
    let err = parse_documents(text, "dump.json").unwrap_err().to_string();
    assert!(err.contains("duplicate key `cpu`"), "{err}");
    assert!(err.contains("items[1] at status.capacity"), "{err}");
    assert!(err.contains("line 5"), "{err}");
    assert!(err.contains("(after Node a)"), "{err}");
    // The List's own keys too, and YAML's as before.
    let err = parse_documents(r#"{"kind": "List", "items": [], "items": []}"#, "d.json")
        .unwrap_err()
        .to_string();
    assert!(err.contains("duplicate key `items`"), "{err}");
    let err = parse_documents("kind: Node\nmetadata: {name: a}\nkind: Pod\n", "d.yaml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("d.yaml") && err.contains("kind"), "{err}");
    // In the reader's user-facing words, with the line: no advice on the reader's options.
    assert!(err.contains("duplicate mapping key `kind`"), "{err}");
    assert!(err.contains("line 3"), "{err}");
    assert!(!err.contains("DuplicateKeyPolicy"), "{err}");
}

#[test]
fn two_nodes_of_one_name_in_a_dump_are_an_error_naming_both_in_plan_state_and_explain() {
    let mut small = node(0, 4);
    small["metadata"]["name"] = json!("node-000001");
    let dump = list(vec![
        node(1, 64),
        json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"trainer": {"min-instance": 1, "max-instance": 2,
                "resources": {"requests": {"cpu": "1"}}}}}),
        small,
    ]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dump.json");
    std::fs::write(&path, dump.to_string()).unwrap();
    let runs = [
        trainscale(&["plan", "--snapshot"], &path),
        trainscale(&["state", "--snapshot"], &path),
        trainscale(&["explain", "ns/j", "--snapshot"], &path),
    ];
    for out in runs {
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("Node node-000001 is twice in the input")
                && err.contains("dump.json items[0] and ")
                && err.contains("dump.json items[2]"),
            "{err}"
        );
    }
}

#[test]
fn two_jobs_of_one_name_in_validate_are_an_error_naming_both() {
    let job = "apiVersion: paddlepaddle.org/v1alpha1\nkind: TrainingJob\nmetadata: {name: j, namespace: ns}\nspec:\n  trainer: {min-instance: 1, max-instance: 2, resources: {requests: {cpu: 1}}}\n";
    let other = job.replace("name: j,", "name: k,");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.yaml");
    std::fs::write(&path, format!("{job}---\n{other}---\n{job}")).unwrap();
    let out = trainscale(&["validate", "-f"], &path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("invalid: TrainingJob ns/j: metadata.name: ")
            && stdout.contains("jobs.yaml document 1 again at ")
            && stdout.contains("jobs.yaml document 3"),
        "{stdout}"
    );
    assert!(stdout.contains("ok: TrainingJob ns/k"), "{stdout}");
}

/// A List of `nodes` generated Nodes as block YAML.
fn yaml_nodes(nodes: usize) -> String {
    let items: Vec<Value> = (0..nodes).map(|n| node(n, 96)).collect();
    serde_saphyr::to_string(&list(items)).unwrap()
}

#[test]
fn a_yaml_dump_past_the_fixed_budget_and_a_manifest_of_30000_documents_are_read() {
    // 7,000 Nodes are some 300,000 YAML nodes, past serde_saphyr's default 250,000.
    let yaml = yaml_nodes(7_000);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dump.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let snap = ClusterState::from_file(&path).unwrap();
    assert!(snap.warnings.is_empty(), "{:?}", &snap.warnings[..1]);
    assert!(snap.state.node_id_of("node-006999").is_some());

    let manifest: String = (0..30_000)
        .map(|i| format!("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: p{i}}}\nvalue: {i}\n---\n"))
        .collect();
    let docs = parse_documents(&manifest, "many.yaml").unwrap();
    assert_eq!(docs.len(), 30_000);
    assert_eq!(docs[29_999].origin, "many.yaml document 30000");
}

#[test]
fn a_budget_breach_names_the_document_and_the_last_object_and_an_alias_bomb_is_refused() {
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..9 {
        let prev = char::from(b'a' + level - 1);
        let this = char::from(b'a' + level);
        bomb.push_str(&format!(
            "{this}: &{this} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
        ));
    }
    let text = format!(
        "kind: Node\napiVersion: v1\nmetadata: {{name: a}}\n---\nkind: Node\napiVersion: v1\nmetadata: {{name: b}}\n---\n{bomb}"
    );
    let err = parse_documents(&text, "bomb.yaml").unwrap_err().to_string();
    assert!(
        err.starts_with("bomb.yaml: too large for the YAML reader in document 3 at f.")
            && err.contains(" (after Node b)"),
        "{err}"
    );
}

#[test]
fn a_large_generated_dump_is_read_object_by_object_and_its_duplicates_named() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, duplicate_nodes: usize| {
        let path = dir.path().join(name);
        let shape = DumpShape {
            nodes: 3_000,
            jobs: 1_500,
            trainers_per_job: 2,
            duplicate_nodes,
        };
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        write_dump(&mut out, shape).unwrap();
        drop(out);
        path
    };
    let clean = write("clean.json", 0);
    let snap = ClusterState::from_file(&clean).unwrap();
    assert!(snap.warnings.is_empty(), "{:?}", &snap.warnings[..1]);
    let report = trainscale::cluster::report::StateReport::of(&snap.state);
    assert_eq!(report.nodes.len(), 3_000);
    assert_eq!(report.jobs.len(), 1_500);
    let last = report.jobs.iter().find(|j| j.name == "job-001499").unwrap();
    assert_eq!((last.namespace.as_str(), last.bound), ("team-49", 2));

    let twice = write("twice.json", 2);
    match ClusterState::from_file(&twice) {
        Err(e @ DumpError::Duplicates { .. }) => {
            let text = e.to_string();
            // 3,000 nodes, 1,500 × (TrainingJob, Job, 2 Pods): the copies are items 9000 and 9001.
            assert!(text.contains("2 object(s) twice"), "{text}");
            assert!(
                text.contains("Node node-000000 is twice in the input: ")
                    && text.contains("twice.json items[0] and ")
                    && text.contains("twice.json items[9000]")
                    && text.contains("twice.json items[9001]"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_duplicate_key_outside_a_list_names_where_it_is() {
    let dir = tempfile::tempdir().unwrap();
    for (file, text, at) in [
        (
            "node.json",
            r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"},
                "status": {"capacity": {"cpu": "4", "cpu": "64"}}}"#,
            " at status.capacity: duplicate key `cpu`",
        ),
        (
            "array.json",
            r#"[{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}},
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b", "name": "c"}}]"#,
            "in document 2 at metadata (after Node a): duplicate key `name`",
        ),
        (
            "node.yaml",
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: a\n  labels: {x: '1', x: '2'}\n",
            "in document 1 at metadata.labels: duplicate mapping key `x`",
        ),
    ] {
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        let out = trainscale(&["state", "--snapshot"], &path);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{file}: {err}");
        assert!(err.contains(at), "{file}: {err}");
    }
}

#[test]
fn a_dump_of_no_object_is_an_error_as_validate_says() {
    let dir = tempfile::tempdir().unwrap();
    for (file, text) in [
        ("empty.json", ""),
        ("blank.yaml", "\n\n"),
        ("array.json", "[]"),
        (
            "list.json",
            r#"{"apiVersion": "v1", "kind": "List", "items": []}"#,
        ),
    ] {
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        for args in [
            &["plan", "--snapshot"][..],
            &["state", "--snapshot"][..],
            &["explain", "ns/j", "--snapshot"][..],
        ] {
            let out = trainscale(args, &path);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{file} {args:?}: {err}");
            assert!(
                err.contains(&format!("{file}: no objects found")),
                "{file} {args:?}: {err}"
            );
            assert!(out.stdout.is_empty(), "{file} {args:?}");
        }
    }
}

#[test]
fn node_and_priority_class_names_are_checked_as_the_api_server_checks_them() {
    let mut bad_node = node(1, 8);
    bad_node["metadata"]["name"] = json!("Bad_Node");
    let dump = list(vec![
        node(0, 8),
        bad_node,
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "High Prio"}, "value": 1000}),
    ]);
    let docs = parse_documents(&dump.to_string(), "dump.json").unwrap();
    let snap = ClusterState::from_documents(&docs);
    let warnings: Vec<String> = snap.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with("Node Bad_Node: metadata.name: invalid value \"Bad_Node\": a lowercase RFC 1123 subdomain"),
        "{warnings:?}"
    );
    assert!(
        warnings[1]
            .starts_with("PriorityClass High Prio: metadata.name: invalid value \"High Prio\""),
        "{warnings:?}"
    );
    assert_eq!(snap.state.nodes().count(), 1);
}

#[test]
fn a_training_job_and_a_paddle_job_of_one_name_are_an_error_naming_both() {
    let job = "metadata: {name: j, namespace: ns}\nspec:\n  fault_tolerant: true\n  trainer: {min-instance: 1, max-instance: 2, resources: {requests: {cpu: 1}}}\n";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.yaml");
    let training = format!("apiVersion: paddlepaddle.org/v1alpha1\nkind: TrainingJob\n{job}");
    let paddle = format!("apiVersion: paddlepaddle.org/v1\nkind: PaddleJob\n{job}");
    let elsewhere = paddle.replace("namespace: ns", "namespace: other");
    std::fs::write(&path, format!("{training}---\n{paddle}---\n{elsewhere}")).unwrap();
    let out = trainscale(&["validate", "-f"], &path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("ok: TrainingJob ns/j"), "{stdout}");
    assert!(
        stdout.contains(
            "invalid: PaddleJob ns/j: metadata.name: the namespace and name of TrainingJob ns/j at "
        ) && stdout.contains("jobs.yaml document 1 (here ")
            && stdout.contains("jobs.yaml document 2): the operator derives the same"),
        "{stdout}"
    );
    assert!(stdout.contains("ok: PaddleJob other/j"), "{stdout}");
}

#[test]
fn validate_skips_objects_of_other_kinds_with_a_line_each() {
    let job = "apiVersion: paddlepaddle.org/v1alpha1\nkind: TrainingJob\nmetadata: {name: j, namespace: ns}\nspec:\n  fault_tolerant: true\n  pserver: {min-instance: 1, max-instance: 1}\n  trainer: {min-instance: 1, max-instance: 2, resources: {requests: {cpu: 1}}}\n";
    let bundle = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: ns}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: j, namespace: ns}}\nspec: {{clusterIP: None}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{namespace: ns}}\n---\n{job}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bundle.yaml");
    std::fs::write(&path, &bundle).unwrap();
    let out = trainscale(&["validate", "-f"], &path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let origin = path.display();
    assert_eq!(
        stdout,
        format!(
            "skipped: v1 Namespace ns (not a job kind)\n\
             skipped: v1 Service ns/j (not a job kind)\n\
             skipped: v1 ConfigMap at {origin} document 3 (not a job kind)\n\
             ok: TrainingJob ns/j\n\
             1 object(s) checked, 0 invalid, 0 warning(s), 3 skipped (not a job kind)\n"
        )
    );
    // A job kind's name in another API group is another operator's resource: skipped too.
    let others = "apiVersion: kubeflow.org/v1\nkind: PaddleJob\nmetadata: {name: paddle-simple-cpu, namespace: default}\nspec: {}\n---\napiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v, namespace: default}\nspec: {}\n";
    let path = dir.path().join("others.yaml");
    std::fs::write(&path, others).unwrap();
    let out = trainscale(&["validate", "-f"], &path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.starts_with(
            "skipped: kubeflow.org/v1 PaddleJob default/paddle-simple-cpu (not a job kind)\n\
             skipped: batch.volcano.sh/v1alpha1 Job default/v (not a job kind)\n"
        ),
        "{stdout}"
    );
    // No kind, no apiVersion, or a job kind under a version it does not have: errors still.
    for (object, says) in [
        (
            "apiVersion: v1\nmetadata: {name: x, namespace: ns}\n",
            "kind: has no kind",
        ),
        (
            "kind: Service\nmetadata: {name: s, namespace: ns}\n",
            "invalid: Service ns/s: apiVersion: required: a Service names its apiVersion",
        ),
        (
            "apiVersion: paddlepaddle.org/v9\nkind: TrainingJob\nmetadata: {name: t, namespace: ns}\n",
            "invalid: TrainingJob ns/t: apiVersion: \"paddlepaddle.org/v9\" is not paddlepaddle.org/v1alpha1",
        ),
    ] {
        std::fs::write(&path, format!("{object}---\n{bundle}")).unwrap();
        let out = trainscale(&["validate", "-f"], &path);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{stdout}");
        assert!(stdout.contains(says), "{says:?} in {stdout}");
        assert!(
            stdout.ends_with(
                "2 object(s) checked, 1 invalid, 0 warning(s), 3 skipped (not a job kind)\n"
            ),
            "{stdout}"
        );
    }
}

#[test]
fn a_file_given_twice_to_validate_is_read_once() {
    let job = "apiVersion: paddlepaddle.org/v1alpha1\nkind: TrainingJob\nmetadata: {name: j, namespace: ns}\nspec:\n  fault_tolerant: true\n  pserver: {min-instance: 1, max-instance: 1}\n  trainer: {min-instance: 1, max-instance: 2, resources: {requests: {cpu: 1}}}\n";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.yaml");
    std::fs::write(&path, job).unwrap();
    let again = dir.path().join(".").join("a.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .args(["validate", "-f"])
        .arg(&path)
        .arg("-f")
        .arg(&path)
        .arg(&again)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(
        stdout,
        "ok: TrainingJob ns/j\n1 object(s) checked, 0 invalid, 0 warning(s)\n"
    );
    // Two files holding one job are still two objects of one name.
    let copy = dir.path().join("b.yaml");
    std::fs::write(&copy, job).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .args(["validate", "-f"])
        .arg(&path)
        .arg(&copy)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("again at "), "{stdout}");
}

#[test]
fn priority_classes_the_api_server_refuses_are_errors_and_skipped_in_dumps() {
    // ValidatePriorityClass: a `system-` name must be a built-in class with its exact value
    // (and globalDefault false); any other name's value is at most 1,000,000,000.
    let class = |name: &str, value: i64| {
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value})
    };
    let job = |name: &str, priority: &str| {
        json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"fault_tolerant": true, "annotations": {"priority": priority},
                "pserver": {"min-instance": 1, "max-instance": 1},
                "trainer": {"min-instance": 1, "max-instance": 2,
                    "resources": {"requests": {"cpu": "1"}}}}})
    };
    let items = vec![
        class("system-mine", 5),
        class("system-node-critical", 5),
        class("too-high", 1_000_000_001),
        class("fine", 1_000_000_000),
        node(0, 64),
        job("a", "too-high"),
        job("b", "system-node-critical"),
        job("c", "fine"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bundle.json");
    std::fs::write(&path, list(items.clone()).to_string()).unwrap();

    let out = trainscale(&["validate", "-f"], &path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for line in [
        "invalid: PriorityClass system-mine: metadata.name: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class\n",
        "invalid: PriorityClass system-node-critical: metadata.name: priority class names with 'system-' prefix are reserved for system use only. error: value of system-node-critical PriorityClass must be 2000001000\n",
        "invalid: PriorityClass too-high: value: 1000000001: maximum allowed value of a user defined priority is 1000000000\n",
        "ok: PriorityClass fine\n",
        // A refused class does not exist: a job naming it is ordered as 0, a built-in name as
        // the built-in class.
        "warning: TrainingJob ns/a: spec.annotations.priority: \"too-high\" is neither an integer nor the name of a PriorityClass",
        "ok: TrainingJob ns/b\n",
        "ok: TrainingJob ns/c\n",
    ] {
        assert!(stdout.contains(line), "{line} in {stdout}");
    }

    // A dump: each refused class is a warning naming it; everything else is planned.
    let docs = parse_documents(&list(items).to_string(), "dump.json").unwrap();
    let snap = ClusterState::from_documents(&docs);
    let warnings: Vec<String> = snap.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "PriorityClass system-mine: metadata.name: priority class names with 'system-' prefix"
        ),
        "{warnings:?}"
    );
    assert!(
        warnings[1].starts_with("PriorityClass system-node-critical: metadata.name: "),
        "{warnings:?}"
    );
    assert!(
        warnings[2].starts_with("PriorityClass too-high: value: "),
        "{warnings:?}"
    );
    assert_eq!(snap.state.nodes().count(), 1);
    let report = trainscale::cluster::report::StateReport::of(&snap.state);
    assert_eq!(report.jobs.len(), 3);
    let priority = |name: &str| {
        snap.state
            .jobs()
            .find(|(key, _, _)| key.name.as_ref() == name)
            .map(|(_, _, info)| info.priority)
    };
    assert_eq!(priority("a"), Some(0));
    assert_eq!(priority("b"), Some(2_000_001_000));
    assert_eq!(priority("c"), Some(1_000_000_000));
    let out = trainscale(&["plan", "--snapshot"], &path);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("PriorityClass too-high: value: "),
        "{}",
        stderr(&out)
    );
}

#[test]
fn validate_reads_a_directory_as_kubectl_reads_f_dir() {
    let job = |name: &str| {
        format!(
            "apiVersion: paddlepaddle.org/v1alpha1\nkind: TrainingJob\nmetadata: {{name: {name}, namespace: ns}}\nspec:\n  fault_tolerant: true\n  pserver: {{min-instance: 1, max-instance: 1}}\n  trainer: {{min-instance: 1, max-instance: 2, resources: {{requests: {{cpu: 1}}}}}}\n"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("manifests");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("b.yaml"), job("b")).unwrap();
    let a = serde_json::to_string(&serde_saphyr::from_str::<Value>(&job("a")).unwrap()).unwrap();
    std::fs::write(root.join("a.json"), a).unwrap();
    std::fs::write(root.join("c.yml"), job("c")).unwrap();
    std::fs::write(root.join("notes.txt"), "not a manifest").unwrap();
    std::fs::write(
        root.join("d.YAML"),
        "not read: extensions match as kubectl's",
    )
    .unwrap();
    std::fs::write(root.join("sub").join("e.yaml"), job("e")).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_trainscale"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let root_arg = root.to_str().unwrap();
    let (code, stdout) = run(&["validate", "-f", root_arg]);
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(
        stdout,
        "ok: TrainingJob ns/a\nok: TrainingJob ns/b\nok: TrainingJob ns/c\n3 object(s) checked, 0 invalid, 0 warning(s)\n"
    );
    // -R: subdirectories too, depth first in name order; a file named itself is read whatever
    // its extension, and once however often it is reached.
    let named = root.join("sub").join("e.yaml");
    let (code, stdout) = run(&["validate", "-R", "-f", root_arg, named.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.ends_with("ok: TrainingJob ns/c\nok: TrainingJob ns/e\n4 object(s) checked, 0 invalid, 0 warning(s)\n"),
        "{stdout}"
    );
    // A directory without manifests is an error naming it; the other paths are still read.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (code, stdout) = run(&[
        "validate",
        "-f",
        empty.to_str().unwrap(),
        named.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.starts_with(&format!(
            "error: {}: a directory without .json, .yaml or .yml files (-R reads its subdirectories)\nok: TrainingJob ns/e\n",
            empty.display()
        )),
        "{stdout}"
    );
}

#[test]
fn a_training_job_and_a_paddle_job_of_one_name_in_a_dump_plan_the_first_and_name_both() {
    // Pods and trainer Jobs are told apart by kind (a PaddleJob's pods carry its label, a
    // trainer Job's owner names its kind), but the operator names the children of both
    // `<name>-trainer`, `<name>-master`, ...: only one of the two could run.
    let job = |api: &str, kind: &str, namespace: &str| {
        json!({"apiVersion": api, "kind": kind,
            "metadata": {"name": "j", "namespace": namespace},
            "spec": {"fault_tolerant": true, "pserver": {"min-instance": 1, "max-instance": 1},
                "trainer": {"min-instance": 1, "max-instance": 2,
                    "resources": {"requests": {"cpu": "1"}}}}})
    };
    let dump = list(vec![
        node(0, 64),
        job("paddlepaddle.org/v1alpha1", "TrainingJob", "ns"),
        job("paddlepaddle.org/v1", "PaddleJob", "ns"),
        job("paddlepaddle.org/v1", "PaddleJob", "other"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dump.json");
    std::fs::write(&path, dump.to_string()).unwrap();
    let origin = path.display();
    let problem = format!(
        "the namespace and name of TrainingJob ns/j at {origin} items[1] (here {origin} items[2]): the operator derives the same `<name>-trainer` Job"
    );
    let out = trainscale(&["plan", "--output", "json", "--snapshot"], &path);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let planned: Vec<String> = plan["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            format!(
                "{} {}/{}",
                j["kind"].as_str().unwrap(),
                j["namespace"].as_str().unwrap(),
                j["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(planned, ["TrainingJob ns/j", "PaddleJob other/j"]);
    let skipped = plan["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(
        (
            &skipped[0]["kind"],
            &skipped[0]["namespace"],
            &skipped[0]["field"]
        ),
        (&json!("PaddleJob"), &json!("ns"), &json!("metadata.name"))
    );
    assert!(
        skipped[0]["message"]
            .as_str()
            .unwrap()
            .starts_with(&problem),
        "{skipped:?}"
    );
    // state lists it as invalid, explain explains the first.
    let out = trainscale(&["state", "--snapshot"], &path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "invalid: PaddleJob ns/j: metadata.name: {problem}"
        )),
        "{stdout}"
    );
    let out = trainscale(&["explain", "ns/j", "--snapshot"], &path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("TrainingJob ns/j: 0 → 2 trainers"),
        "{stdout}"
    );
}
