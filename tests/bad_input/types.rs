//! Issue 32, item 3 (not trace rows): fields typed as the API server's schema types them —
//! `spec` an object, ports 1 to 65535, replica counts not negative, one spec per replica type —
//! and `validate`, `plan`/`state` and the daemon agreeing on each.

use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use trainscale::api::JobKind;
use trainscale::api::manifest::parse_documents;
use trainscale::api::validate::validate_document;
use trainscale::cluster::ClusterState;
use trainscale::cluster::report::skipped_jobs;
use trainscale::daemon::{Store, WatchEvent};

/// The first object of `kind` in an example manifest.
fn example(file: &str, kind: &str) -> Value {
    let text = std::fs::read_to_string(format!("deploy/examples/{file}")).unwrap();
    parse_documents(&text, file)
        .unwrap()
        .into_iter()
        .find(|d| d.kind() == kind)
        .unwrap()
        .value
}

fn training_job(spec: Value) -> Value {
    json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "bad", "namespace": "ns"}, "spec": spec})
}

/// One of every kind, from the examples.
fn every_kind() -> Vec<(JobKind, Value)> {
    let mut paddle = training_job(super::good_spec());
    paddle["apiVersion"] = json!("paddlepaddle.org/v1");
    paddle["kind"] = json!("PaddleJob");
    vec![
        (JobKind::TrainingJob, training_job(super::good_spec())),
        (JobKind::PaddleJob, paddle),
        (
            JobKind::PyTorchTrainingJob,
            example("003-pytorchtrainingjob-elastic.yaml", "PyTorchTrainingJob"),
        ),
        (
            JobKind::PyTorchJob,
            example("005-pytorchjob-elastic.yaml", "PyTorchJob"),
        ),
        (
            JobKind::BatchJob,
            example("007-batchjob-elastic.yaml", "Job"),
        ),
        (
            JobKind::JobSet,
            example("008-jobset-elastic.yaml", "JobSet"),
        ),
    ]
}

/// The error fields `validate`, the dump reader (`plan`, `state`) and the daemon's store each
/// find in `doc`, in that order.
fn fields_everywhere(kind: JobKind, doc: &Value) -> [Vec<String>; 3] {
    let docs = parse_documents(&doc.to_string(), "x.json").unwrap();
    let validate: Vec<String> = validate_document(&docs[0], &Default::default())
        .errors
        .iter()
        .map(|e| e.field.clone())
        .collect();
    let snap = ClusterState::from_documents(&docs);
    let state: Vec<String> = skipped_jobs(&snap.state)
        .into_iter()
        .map(|p| p.field)
        .collect();
    let mut store = Store::new();
    store.expect_job_kinds(&[kind]);
    let mut value = doc.clone();
    value["metadata"]["resourceVersion"] = json!("1");
    if kind == JobKind::BatchJob {
        // A batch/v1 Job comes through the Job watch; one whose spec does not decode never
        // reaches the store (kube's watch refuses it), so only decodable ones are fed.
        let job: Option<k8s_openapi::api::batch::v1::Job> = serde_json::from_value(value).ok();
        store.handle(WatchEvent::Job(Event::Init));
        if let Some(job) = job {
            store.handle(WatchEvent::Job(Event::InitApply(job)));
        }
        store.handle(WatchEvent::Job(Event::InitDone));
    } else {
        let wrap = |e| WatchEvent::JobObject(kind, e);
        store.handle(wrap(Event::Init));
        let object: DynamicObject = serde_json::from_value(value).unwrap();
        store.handle(wrap(Event::InitApply(object)));
        store.handle(wrap(Event::InitDone));
    }
    let daemon: Vec<String> = store
        .unreported_invalid()
        .into_iter()
        .flat_map(|j| j.problems)
        .map(|p| p.field)
        .collect();
    [validate, state, daemon]
}

/// `field` is an error of `doc` in `validate`, `plan`/`state` and the daemon alike.
fn refused_everywhere(kind: JobKind, doc: &Value, field: &str) {
    let [validate, state, daemon] = fields_everywhere(kind, doc);
    assert!(
        validate.iter().any(|f| f == field),
        "{kind}: validate {validate:?}"
    );
    assert_eq!(state, validate, "{kind}: plan/state and validate differ");
    assert_eq!(daemon, validate, "{kind}: the daemon and validate differ");
}

#[test]
fn a_spec_that_is_no_object_is_an_error_naming_spec_for_every_kind() {
    for (kind, mut doc) in every_kind() {
        for not_an_object in [json!([]), json!("text"), json!(3)] {
            doc["spec"] = not_an_object.clone();
            let docs = parse_documents(&doc.to_string(), "x.json").unwrap();
            let report = validate_document(&docs[0], &Default::default());
            assert_eq!(report.errors.len(), 1, "{kind}: {:?}", report.errors);
            assert_eq!(report.errors[0].field, "spec", "{kind}");
            assert!(
                report.errors[0]
                    .problem
                    .starts_with("must be of type object"),
                "{kind}: {}",
                report.errors[0]
            );
        }
        doc["spec"] = json!([]);
        if kind != JobKind::BatchJob {
            refused_everywhere(kind, &doc, "spec");
        }
    }
}

#[test]
fn nested_objects_and_lists_are_typed_too() {
    let mut spec = super::good_spec();
    spec["trainer"] = json!([]);
    refused_everywhere(JobKind::TrainingJob, &training_job(spec), "spec.trainer");
    let mut t9k = example("003-pytorchtrainingjob-elastic.yaml", "PyTorchTrainingJob");
    t9k["spec"]["elastic"] = json!([1]);
    refused_everywhere(JobKind::PyTorchTrainingJob, &t9k, "spec.elastic");
    let mut t9k = example("003-pytorchtrainingjob-elastic.yaml", "PyTorchTrainingJob");
    t9k["spec"]["replicaSpecs"] = json!({"type": "worker"});
    refused_everywhere(JobKind::PyTorchTrainingJob, &t9k, "spec.replicaSpecs");
    let mut kubeflow = example("005-pytorchjob-elastic.yaml", "PyTorchJob");
    kubeflow["spec"]["pytorchReplicaSpecs"]["Worker"] = json!([]);
    refused_everywhere(
        JobKind::PyTorchJob,
        &kubeflow,
        "spec.pytorchReplicaSpecs.Worker",
    );
    let docs = parse_documents(&kubeflow.to_string(), "x.json").unwrap();
    let errors = validate_document(&docs[0], &Default::default()).errors;
    assert_eq!(errors[0].problem, "must be of type object, got array");
}

#[test]
fn ports_are_1_to_65535() {
    let with_port = |field: &str, port: i64| {
        let mut spec = super::good_spec();
        spec[field] = json!(port);
        training_job(spec)
    };
    for (field, port) in [
        ("port", 70000),
        ("port", -1),
        ("trainer_port", 65536),
        ("trainer_port", -5),
    ] {
        refused_everywhere(
            JobKind::TrainingJob,
            &with_port(field, port),
            &format!("spec.{field}"),
        );
    }
    // The range the operator opens must end by 65535.
    let mut spec = super::good_spec();
    spec["port"] = json!(65535);
    spec["ports_num"] = json!(2);
    let [errors, ..] = fields_everywhere(JobKind::TrainingJob, &training_job(spec));
    assert_eq!(errors, vec!["spec.port"]);
    for ok in [0, 1, 7164, 65534] {
        let [errors, ..] = fields_everywhere(JobKind::TrainingJob, &with_port("port", ok));
        assert!(errors.is_empty(), "{ok}: {errors:?}");
    }
}

#[test]
fn replica_counts_are_not_negative_on_every_kind() {
    let mut t9k = example("003-pytorchtrainingjob-elastic.yaml", "PyTorchTrainingJob");
    t9k["spec"]["replicaSpecs"][0]["replicas"] = json!(-4);
    refused_everywhere(
        JobKind::PyTorchTrainingJob,
        &t9k,
        "spec.replicaSpecs[0].replicas",
    );
    // Also when the job is not planned (elastic training off).
    t9k["spec"]["elastic"]["enable"] = json!(false);
    refused_everywhere(
        JobKind::PyTorchTrainingJob,
        &t9k,
        "spec.replicaSpecs[0].replicas",
    );

    let mut kubeflow = example("005-pytorchjob-elastic.yaml", "PyTorchJob");
    kubeflow["spec"]["pytorchReplicaSpecs"]["Master"] = json!({"replicas": -1});
    refused_everywhere(
        JobKind::PyTorchJob,
        &kubeflow,
        "spec.pytorchReplicaSpecs.Master.replicas",
    );

    let mut jobset = example("008-jobset-elastic.yaml", "JobSet");
    jobset["spec"]["replicatedJobs"][0]["replicas"] = json!(-2);
    refused_everywhere(JobKind::JobSet, &jobset, "spec.replicatedJobs[0].replicas");

    let mut batch = example("007-batchjob-elastic.yaml", "Job");
    batch["spec"]["completions"] = json!(-3);
    refused_everywhere(JobKind::BatchJob, &batch, "spec.completions");
}

#[test]
fn one_spec_per_replica_type() {
    let mut t9k = example("003-pytorchtrainingjob-elastic.yaml", "PyTorchTrainingJob");
    let worker = t9k["spec"]["replicaSpecs"][0].clone();
    let mut again = worker.clone();
    again["type"] = json!("Worker");
    t9k["spec"]["replicaSpecs"] = json!([worker, again]);
    refused_everywhere(JobKind::PyTorchTrainingJob, &t9k, "spec.replicaSpecs[1]");
    let docs = parse_documents(&t9k.to_string(), "x.json").unwrap();
    let errors = validate_document(&docs[0], &Default::default()).errors;
    assert!(
        errors[0]
            .problem
            .contains("spec.replicaSpecs[0] and spec.replicaSpecs[1]"),
        "{errors:?}"
    );

    let mut jobset = example("008-jobset-elastic.yaml", "JobSet");
    let first = jobset["spec"]["replicatedJobs"][0].clone();
    jobset["spec"]["replicatedJobs"]
        .as_array_mut()
        .unwrap()
        .push(first);
    let last = jobset["spec"]["replicatedJobs"].as_array().unwrap().len() - 1;
    refused_everywhere(
        JobKind::JobSet,
        &jobset,
        &format!("spec.replicatedJobs[{last}]"),
    );
}

#[test]
fn requests_stay_within_limits_and_extended_resources_are_whole() {
    let refused = [
        (
            json!({"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "1"}}),
            "spec.trainer.resources.requests.cpu",
            "\"2\" is more than the limit \"1\"",
        ),
        (
            json!({"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "0.5"}}),
            "spec.trainer.resources.limits.nvidia.com/gpu",
            "\"0.5\": must be an integer",
        ),
        (
            json!({"requests": {"cpu": "1", "nvidia.com/gpu": 1}}),
            "spec.trainer.resources.requests.nvidia.com/gpu",
            "\"1\" has no limit",
        ),
        (
            json!({"requests": {"cpu": "1", "nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}),
            "spec.trainer.resources.requests.nvidia.com/gpu",
            "\"1\" is not the limit \"2\"",
        ),
    ];
    for (resources, field, says) in refused {
        let mut spec = super::good_spec();
        spec["trainer"]["resources"] = resources.clone();
        let doc = training_job(spec);
        refused_everywhere(JobKind::TrainingJob, &doc, field);
        let docs = parse_documents(&doc.to_string(), "x.json").unwrap();
        let report = validate_document(&docs[0], &Default::default());
        assert!(
            report
                .errors
                .iter()
                .any(|e| e.field == field && e.problem.contains(says)),
            "{resources}: {:?}",
            report.errors
        );
    }
    // What the API server takes: a request below its limit, a whole GPU written in thousandths,
    // a request left to default to its limit.
    let mut spec = super::good_spec();
    spec["trainer"]["resources"] = json!({
        "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1000m"},
        "limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1, "example.com/fpga": 2}
    });
    let docs = parse_documents(&training_job(spec).to_string(), "x.json").unwrap();
    let report = validate_document(&docs[0], &Default::default());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
}

#[test]
fn an_extended_resource_is_an_integer_as_the_api_server_reads_it_in_thousandths_rounded_up() {
    // `ValidateResourceQuantityValue`: `MilliValue() % 1000 != 0` is "must be an integer", and
    // `MilliValue` rounds up: 999999999n and 999000001n are 1000m (taken, one device),
    // 1000000001n is 1001m.
    let with = |amount: &str| {
        let mut spec = super::good_spec();
        spec["trainer"]["resources"] = json!({
            "requests": {"cpu": "1", "example.com/foo": amount},
            "limits": {"example.com/foo": amount}
        });
        training_job(spec)
    };
    for taken in ["999999999n", "999000001n", "2000m", "1E"] {
        let docs = parse_documents(&with(taken).to_string(), "x.json").unwrap();
        let report = validate_document(&docs[0], &Default::default());
        assert!(report.errors.is_empty(), "{taken}: {:?}", report.errors);
        let [_, state, daemon] = fields_everywhere(JobKind::TrainingJob, &with(taken));
        assert!(
            state.is_empty() && daemon.is_empty(),
            "{taken}: {state:?} {daemon:?}"
        );
    }
    for refused in ["1000000001n", "500m", "1.5"] {
        let doc = with(refused);
        for part in ["requests", "limits"] {
            refused_everywhere(
                JobKind::TrainingJob,
                &doc,
                &format!("spec.trainer.resources.{part}.example.com/foo"),
            );
        }
        let docs = parse_documents(&doc.to_string(), "x.json").unwrap();
        let report = validate_document(&docs[0], &Default::default());
        assert_eq!(report.errors.len(), 2, "{refused}: {:?}", report.errors);
        assert!(
            report.errors[0].to_string().starts_with(&format!(
                "TrainingJob ns/bad: spec.trainer.resources.requests.example.com/foo: \"{refused}\": must be an integer"
            )),
            "{}",
            report.errors[0]
        );
    }
}

/// Sets every `cpu` under a `requests` or `limits` map in `value` to `amount`.
fn set_cpu(value: &mut Value, amount: &str) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                if matches!(key.as_str(), "requests" | "limits")
                    && let Some(cpu) = inner.get_mut("cpu")
                {
                    *cpu = json!(amount);
                }
                set_cpu(inner, amount);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| set_cpu(v, amount)),
        _ => {}
    }
}

#[test]
fn a_quantity_past_i64_is_taken_as_the_api_server_takes_it_and_saturates() {
    // ParseQuantity keeps a decimal quantity of any size (inf.Dec) and caps a binary one at
    // 2^63-1; the validation of a container's resources only wants it non-negative.
    for (kind, mut doc) in every_kind() {
        set_cpu(&mut doc, "1E");
        assert!(doc.to_string().contains("\"1E\""), "{kind}");
        let [validate, state, daemon] = fields_everywhere(kind, &doc);
        assert!(
            validate.is_empty() && state.is_empty() && daemon.is_empty(),
            "{kind}: {validate:?} {state:?} {daemon:?}"
        );
    }
    // A dump: a job and a pod past i64 millicores are read and saturated (a Node keeps its own
    // bound, 2^53, past which it is refused: `absurd_node_allocatable_is_refused...`).
    let node = trainscale::testkit::dump::node(0, 8);
    let mut job = training_job(super::good_spec());
    job["spec"]["trainer"]["resources"] = json!({"requests": {"cpu": "1E", "memory": "1e30"}});
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "big", "namespace": "ns"},
        "spec": {"nodeName": "node-000000",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1e40"}}}]},
        "status": {"phase": "Running"}});
    let dump = json!({"apiVersion": "v1", "kind": "List", "items": [node, job, pod]});
    let docs = parse_documents(&dump.to_string(), "dump.json").unwrap();
    let snap = ClusterState::from_documents(&docs);
    assert!(snap.warnings.is_empty(), "{:?}", snap.warnings);
    assert!(skipped_jobs(&snap.state).is_empty());
    let report = trainscale::cluster::report::StateReport::of(&snap.state);
    assert_eq!(report.nodes.len(), 1);
    assert_eq!(report.jobs.len(), 1);
    let result = trainscale::planner::plan(&snap.state, &Default::default());
    assert_eq!(result.jobs.len(), 1);
    assert_eq!(result.jobs[0].target, 0, "a trainer of 1E cpu fits no node");
}

#[test]
fn huge_pages_are_whole_pages_of_a_size_that_parses() {
    // `IsHugePageResourceValueDivisible`: the size after `hugepages-` parses as a positive whole
    // quantity and the amount's `Value()` is a multiple of it ("... is not positive integer
    // multiple of hugepages-2Mi").
    let with = |name: &str, amount: &str| {
        let mut spec = super::good_spec();
        spec["trainer"]["resources"] = json!({
            "requests": {"cpu": "1", name: amount},
            "limits": {name: amount}
        });
        training_job(spec)
    };
    for (name, amount, says) in [
        (
            "hugepages-2Mi",
            "3Mi",
            "\"3Mi\" is not positive integer multiple of hugepages-2Mi",
        ),
        (
            "hugepages-abc",
            "2Mi",
            "the page size is not a quantity: quantity \"abc\"",
        ),
        (
            "hugepages-0",
            "2Mi",
            "the page size \"0\" is not a positive whole quantity",
        ),
        (
            "hugepages-1.5",
            "3",
            "the page size \"1.5\" is not a positive whole quantity",
        ),
    ] {
        let doc = with(name, amount);
        for part in ["requests", "limits"] {
            let field = format!("spec.trainer.resources.{part}.{name}");
            refused_everywhere(JobKind::TrainingJob, &doc, &field);
            let docs = parse_documents(&doc.to_string(), "x.json").unwrap();
            let errors = validate_document(&docs[0], &Default::default()).errors;
            assert!(
                errors.iter().any(|e| e.field == field
                    && e.to_string().starts_with("TrainingJob ns/bad: ")
                    && e.problem.contains(says)),
                "{name}: {amount}: {errors:?}"
            );
        }
    }
    for (name, amount) in [
        ("hugepages-2Mi", "4Mi"),
        ("hugepages-1Gi", "0"),
        ("hugepages-1Gi", "2Gi"),
    ] {
        let [validate, state, daemon] =
            fields_everywhere(JobKind::TrainingJob, &with(name, amount));
        assert!(
            validate.is_empty() && state.is_empty() && daemon.is_empty(),
            "{name}: {amount}: {validate:?} {state:?} {daemon:?}"
        );
    }
    // A worker template's container is named in the field.
    let mut batch = example("007-batchjob-elastic.yaml", "Job");
    batch["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "1"}, "limits": {"hugepages-2Mi": "3Mi"}});
    refused_everywhere(
        JobKind::BatchJob,
        &batch,
        "spec.template.spec.containers[0].resources.limits.hugepages-2Mi",
    );
}

#[test]
fn a_worker_template_is_checked_as_the_api_server_checks_its_pods() {
    let resources = json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}});
    let mut t9k = example("003-pytorchtrainingjob-elastic.yaml", "PyTorchTrainingJob");
    t9k["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["resources"] =
        resources.clone();
    refused_everywhere(
        JobKind::PyTorchTrainingJob,
        &t9k,
        "spec.replicaSpecs[0].template.spec.containers[0].resources.requests.cpu",
    );
    let mut batch = example("007-batchjob-elastic.yaml", "Job");
    batch["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/gpu": "1.5"}});
    refused_everywhere(
        JobKind::BatchJob,
        &batch,
        "spec.template.spec.containers[0].resources.limits.nvidia.com/gpu",
    );
}

/// `validate`'s errors and warnings for `doc`, as printed.
fn findings_of(doc: &Value) -> (Vec<String>, Vec<String>) {
    let docs = parse_documents(&doc.to_string(), "x.json").unwrap();
    let report = validate_document(&docs[0], &Default::default());
    let text = |v: &[trainscale::api::FieldError]| v.iter().map(|e| e.to_string()).collect();
    (text(&report.errors), text(&report.warnings))
}

#[test]
fn kubeflow_replica_types_are_read_as_the_training_operator_reads_them() {
    let job = example("005-pytorchjob-elastic.yaml", "PyTorchJob");
    let worker = job["spec"]["pytorchReplicaSpecs"]["Worker"].clone();
    let with_specs = |specs: Value| {
        let mut doc = job.clone();
        doc["spec"]["pytorchReplicaSpecs"] = specs;
        doc
    };
    // Its webhook refuses a type other than Master and Worker.
    let chief = with_specs(json!({"Worker": worker, "Chief": worker}));
    refused_everywhere(
        JobKind::PyTorchJob,
        &chief,
        "spec.pytorchReplicaSpecs.Chief",
    );
    let (errors, _) = findings_of(&chief);
    assert!(
        errors[0].contains("unsupported replica type \"Chief\": supported values: Master, Worker"),
        "{errors:?}"
    );
    // Its defaulting folds `worker` into `Worker`: both given is one type twice.
    let twice = with_specs(json!({"Worker": worker, "worker": worker}));
    refused_everywhere(
        JobKind::PyTorchJob,
        &twice,
        "spec.pytorchReplicaSpecs.Worker",
    );
    let (errors, _) = findings_of(&twice);
    assert!(
        errors[0].contains("replica type Worker is given 2 times (Worker, worker)"),
        "{errors:?}"
    );
    // `worker` alone is a Worker the webhook renames on create; as stored (no webhook ran) it
    // is not the field trainscale resizes: left alone, and said so.
    let lower = with_specs(json!({"worker": worker}));
    let (errors, warnings) = findings_of(&lower);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(
        warnings.len() == 1
            && warnings[0].contains(
                "spec.pytorchReplicaSpecs: not planned: the replica type is written \"worker\""
            ),
        "{warnings:?}"
    );
    // A missing bound defaults to the other: a fixed size, left alone rather than invalid.
    for missing in ["minReplicas", "maxReplicas"] {
        let mut doc = job.clone();
        doc["spec"]["elasticPolicy"]
            .as_object_mut()
            .unwrap()
            .remove(missing);
        let (errors, warnings) = findings_of(&doc);
        assert!(errors.is_empty(), "{missing}: {errors:?}");
        assert!(
            warnings.iter().any(|w| w.contains(
                "spec.elasticPolicy: not planned: minReplicas and maxReplicas are not both set"
            )),
            "{missing}: {warnings:?}"
        );
    }
    // A bound given alone is still checked.
    let mut doc = job.clone();
    doc["spec"]["elasticPolicy"] = json!({"maxReplicas": -3});
    let (errors, _) = findings_of(&doc);
    assert!(
        errors.len() == 1 && errors[0].contains("spec.elasticPolicy.maxReplicas: -3 is negative"),
        "{errors:?}"
    );
    assert_eq!(findings_of(&job).0, Vec::<String>::new());
}

#[test]
fn defaults_and_spellings_the_kinds_operators_accept_are_read() {
    // JobSet's webhook defaults a replicated Job's completion mode to Indexed.
    let mut jobset = example("008-jobset-elastic.yaml", "JobSet");
    jobset["spec"]["replicatedJobs"][1]["template"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("completionMode");
    assert_eq!(findings_of(&jobset).0, Vec::<String>::new());
    jobset["spec"]["replicatedJobs"][1]["template"]["spec"]["completionMode"] = json!("NonIndexed");
    let (errors, _) = findings_of(&jobset);
    assert!(
        errors.len() == 1 && errors[0].contains("completionMode: must be Indexed"),
        "{errors:?}"
    );
    // T9k spells its switches `enabled` too: a paused job is left alone either way.
    for spelling in ["enable", "enabled"] {
        let mut t9k = example("003-pytorchtrainingjob-elastic.yaml", "PyTorchTrainingJob");
        t9k["spec"]["runMode"] = json!({"pause": {spelling: true}});
        let (errors, warnings) = findings_of(&t9k);
        assert!(errors.is_empty(), "{spelling}: {errors:?}");
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("not planned: the job is paused")),
            "{spelling}: {warnings:?}"
        );
    }
}

#[test]
fn an_indexed_job_is_never_sized_past_a_hostname_the_api_server_refuses() {
    let batch = |name: &str, max: &str| {
        let mut job = example("007-batchjob-elastic.yaml", "Job");
        job["metadata"]["name"] = json!(name);
        job["metadata"]["annotations"]["trainscale.io/max-replicas"] = json!(max);
        job
    };
    // 61 characters: `<name>-7` is 63, the limit; at max 12, `<name>-11` is 64.
    let name = "e".repeat(61);
    assert_eq!(findings_of(&batch(&name, "8")).0, Vec::<String>::new());
    let doc = batch(&name, "12");
    refused_everywhere(JobKind::BatchJob, &doc, "metadata.name");
    assert_eq!(
        findings_of(&doc).0,
        [format!(
            "Job ml/{name}: metadata.name: \"{name}\" gives the pods hostnames up to \"{name}-11\" (64 characters, at trainscale.io/max-replicas 12, which trainscale sizes it up to; the Job controller names an Indexed Job's pod `<job>-<index>`, which the API server wants a DNS-1123 label): must be no more than 63 characters"
        )]
    );
    // At its own completions, as the API server checks it on create, whether sized or not.
    let name = "e".repeat(62);
    let mut doc = batch(&name, "2");
    doc["spec"]["suspend"] = json!(true);
    let (errors, _) = findings_of(&doc);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(&format!(
            "up to \"{name}-1\" (64 characters, at spec.completions 2;"
        )),
        "{errors:?}"
    );
    // A NonIndexed Job's pods have generated names: nothing to check.
    let mut doc = batch(&name, "12");
    doc["spec"]["completionMode"] = json!("NonIndexed");
    assert_eq!(findings_of(&doc).0, Vec::<String>::new());
}

#[test]
fn huge_pages_are_not_overcommitted_and_need_cpu_or_memory() {
    let refused = [
        (
            json!({"requests": {"cpu": "1", "hugepages-2Mi": "1Gi"}}),
            "spec.trainer.resources.requests.hugepages-2Mi",
            "TrainingJob ns/bad: spec.trainer.resources.requests.hugepages-2Mi: \"1Gi\" has no limit: the API server refuses huge pages requested without one (Limit must be set for non overcommitable resources)",
        ),
        (
            json!({"requests": {"cpu": "1", "hugepages-1Gi": "1Gi"}, "limits": {"hugepages-1Gi": "2Gi"}}),
            "spec.trainer.resources.requests.hugepages-1Gi",
            "TrainingJob ns/bad: spec.trainer.resources.requests.hugepages-1Gi: \"1Gi\" is not the limit \"2Gi\": the API server refuses huge pages requested below or above its limit",
        ),
        (
            json!({"requests": {"nvidia.com/gpu": 1, "hugepages-2Mi": "1Gi"},
                   "limits": {"nvidia.com/gpu": 1, "hugepages-2Mi": "1Gi"}}),
            "spec.trainer.resources",
            "TrainingJob ns/bad: spec.trainer.resources: HugePages require cpu or memory: the API server refuses a container asking for huge pages without a cpu or memory request or limit",
        ),
    ];
    for (resources, field, says) in refused {
        let mut spec = super::good_spec();
        spec["trainer"]["resources"] = resources.clone();
        let doc = training_job(spec);
        refused_everywhere(JobKind::TrainingJob, &doc, field);
        assert_eq!(findings_of(&doc).0, [says], "{resources}");
    }
    // A limit alone stands for the request; equal amounts and cpu or memory anywhere are fine.
    for resources in [
        json!({"limits": {"memory": "2Gi", "hugepages-2Mi": "1Gi"}}),
        json!({"requests": {"hugepages-1Gi": "2Gi"}, "limits": {"cpu": "1", "hugepages-1Gi": "2Gi"}}),
    ] {
        let mut spec = super::good_spec();
        spec["trainer"]["resources"] = resources.clone();
        assert_eq!(
            findings_of(&training_job(spec)).0,
            Vec::<String>::new(),
            "{resources}"
        );
    }
    // In a pod template too.
    let mut batch = example("007-batchjob-elastic.yaml", "Job");
    batch["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "1", "hugepages-2Mi": "64Mi"}});
    refused_everywhere(
        JobKind::BatchJob,
        &batch,
        "spec.template.spec.containers[0].resources.requests.hugepages-2Mi",
    );
}

#[test]
fn resource_names_the_api_server_refuses_are_errors_naming_the_field() {
    for (name, says) in [
        ("gpu", "must be a standard resource type or fully qualified"),
        ("storage", "must be a standard resource for containers"),
        ("foo", "must be a standard resource type or fully qualified"),
        (
            "NVIDIA.com/gpu",
            "prefix part a lowercase RFC 1123 subdomain",
        ),
        (
            "requests.nvidia.com/gpu",
            "doesn't follow extended resource name standard",
        ),
    ] {
        let mut spec = super::good_spec();
        spec["trainer"]["resources"]["requests"][name] = json!("1");
        spec["trainer"]["resources"]["limits"][name] = json!("1");
        let doc = training_job(spec);
        let field = format!("spec.trainer.resources.requests.{name}");
        refused_everywhere(JobKind::TrainingJob, &doc, &field);
        let errors = findings_of(&doc).0;
        assert_eq!(errors.len(), 2, "{name}: {errors:?}");
        for (error, part) in errors.iter().zip(["requests", "limits"]) {
            let expected = format!(
                "TrainingJob ns/bad: spec.trainer.resources.{part}.{name}: invalid resource name {name:?}: {says}"
            );
            assert!(
                error.starts_with(&expected),
                "{error:?} is not {expected:?}"
            );
        }
    }
    // The names the API server takes: standard ones, huge pages, a domain's, kubernetes.io's.
    let mut spec = super::good_spec();
    spec["trainer"]["resources"] = json!({
        "requests": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"},
        "limits": {"example.com/fpga": 1, "alpha.kubernetes.io/nvidia-gpu": 1, "hugepages-2Mi": "2Mi"}
    });
    assert_eq!(findings_of(&training_job(spec)).0, Vec::<String>::new());
    // In a pod template too.
    let mut t9k = example("003-pytorchtrainingjob-elastic.yaml", "PyTorchTrainingJob");
    t9k["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"] =
        json!({"gpu": 1});
    refused_everywhere(
        JobKind::PyTorchTrainingJob,
        &t9k,
        "spec.replicaSpecs[0].template.spec.containers[0].resources.limits.gpu",
    );
}

#[test]
fn jobset_names_follow_the_jobset_webhook_and_the_max_hostname() {
    let jobset = |name: &str| {
        let mut js = example("008-jobset-elastic.yaml", "JobSet");
        js["metadata"]["name"] = json!(name);
        js
    };
    // The child Jobs `<jobset>-<replicatedJob>-<index>` are DNS-1035 labels: a letter first.
    let doc = jobset("1llm");
    refused_everywhere(JobKind::JobSet, &doc, "metadata.name");
    let errors = findings_of(&doc).0;
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].starts_with("JobSet ml/1llm: metadata.name: \"1llm\" names replicated Job \"launcher\"'s Jobs up to \"1llm-launcher-0\" (15 characters; JobSet's webhook wants a DNS-1035 label): a DNS-1035 label must consist of"),
        "{errors:?}"
    );
    // Pods `<child Job>-<podIndex>-abcde`: 44 characters make the launcher's 63, 45 its 64.
    assert_eq!(
        findings_of(&jobset(&"j".repeat(44))).0,
        Vec::<String>::new()
    );
    let name = "j".repeat(45);
    let doc = jobset(&name);
    refused_everywhere(JobKind::JobSet, &doc, "metadata.name");
    assert_eq!(
        findings_of(&doc).0,
        [format!(
            "JobSet ml/{name}: metadata.name: \"{name}\" names replicated Job \"launcher\"'s pods up to \"{name}-launcher-0-0-abcde\" (64 characters, `-abcde` standing for 5 random ones; JobSet's webhook wants a DNS-1035 label): JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"
        )]
    );
    // The elastic replicated Job is resized up to its max: its Job's last pod hostname
    // `<jobset>-workers-0-<max-1>` must stay a DNS-1123 label.
    let mut doc = jobset(&name);
    doc["spec"]["replicatedJobs"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    doc["metadata"]["annotations"]["trainscale.io/max-replicas"] = json!("20000000");
    refused_everywhere(JobKind::JobSet, &doc, "metadata.name");
    assert_eq!(
        findings_of(&doc).0,
        [format!(
            "JobSet ml/{name}: metadata.name: \"{name}\"'s replicated Job \"workers\" (its Job \"{name}-workers-0\") gives the pods hostnames up to \"{name}-workers-0-19999999\" (64 characters, at trainscale.io/max-replicas 20000000, which trainscale sizes it up to; the Job controller names an Indexed Job's pod `<job>-<index>`, which the API server wants a DNS-1123 label): must be no more than 63 characters"
        )]
    );
    doc["metadata"]["annotations"]["trainscale.io/max-replicas"] = json!("10000000");
    assert_eq!(findings_of(&doc).0, Vec::<String>::new());
}

#[test]
fn a_pytorch_job_runs_one_master() {
    let mut job = example("005-pytorchjob-elastic.yaml", "PyTorchJob");
    let mut master = job["spec"]["pytorchReplicaSpecs"]["Worker"].clone();
    master["replicas"] = json!(1);
    job["spec"]["pytorchReplicaSpecs"]["Master"] = master;
    assert_eq!(findings_of(&job).0, Vec::<String>::new());
    for n in [0, 2] {
        job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = json!(n);
        refused_everywhere(
            JobKind::PyTorchJob,
            &job,
            "spec.pytorchReplicaSpecs.Master.replicas",
        );
        assert_eq!(
            findings_of(&job).0,
            [format!(
                "PyTorchJob ml/elastic-example-imagenet: spec.pytorchReplicaSpecs.Master.replicas: must be 1, got {n}: the training operator's webhook refuses any other master count"
            )]
        );
    }
}

#[test]
fn a_pytorch_job_master_without_replicas_is_one_master() {
    // The training operator's defaulting (`setDefaultReplicas`, pytorchjob_defaults.go) sets a
    // nil `replicas` to 1 before its webhook checks the master count: the job is accepted.
    let mut job = example("005-pytorchjob-elastic.yaml", "PyTorchJob");
    let mut master = job["spec"]["pytorchReplicaSpecs"]["Worker"].clone();
    master.as_object_mut().unwrap().remove("replicas");
    job["spec"]["pytorchReplicaSpecs"]["Master"] = master;
    assert_eq!(findings_of(&job).0, Vec::<String>::new());
    let [validate, state, daemon] = fields_everywhere(JobKind::PyTorchJob, &job);
    assert!(
        validate.is_empty() && state.is_empty() && daemon.is_empty(),
        "{validate:?} {state:?} {daemon:?}"
    );
    let docs = parse_documents(&job.to_string(), "x.json").unwrap();
    let snap = ClusterState::from_documents(&docs);
    let planned: Vec<_> = snap
        .state
        .jobs()
        .map(|(key, _, info)| (key.kind, info.min, info.max))
        .collect();
    assert_eq!(planned, [(JobKind::PyTorchJob, 1, 4)]);
}

#[test]
fn a_worker_templates_scheduler_name_is_a_subdomain() {
    let mut t9k = example("003-pytorchtrainingjob-elastic.yaml", "PyTorchTrainingJob");
    t9k["spec"]["replicaSpecs"][0]["template"]["spec"]["schedulerName"] = json!("Bad Sched");
    let mut kubeflow = example("005-pytorchjob-elastic.yaml", "PyTorchJob");
    kubeflow["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] =
        json!("Bad Sched");
    let mut batch = example("007-batchjob-elastic.yaml", "Job");
    batch["spec"]["template"]["spec"]["schedulerName"] = json!("Bad Sched");
    let mut jobset = example("008-jobset-elastic.yaml", "JobSet");
    jobset["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["schedulerName"] =
        json!("Bad Sched");
    for (kind, mut doc, field) in [
        (
            JobKind::PyTorchTrainingJob,
            t9k,
            "spec.replicaSpecs[0].template.spec.schedulerName",
        ),
        (
            JobKind::PyTorchJob,
            kubeflow,
            "spec.pytorchReplicaSpecs.Worker.template.spec.schedulerName",
        ),
        (JobKind::BatchJob, batch, "spec.template.spec.schedulerName"),
        (
            JobKind::JobSet,
            jobset,
            "spec.replicatedJobs[1].template.spec.template.spec.schedulerName",
        ),
    ] {
        refused_everywhere(kind, &doc, field);
        let (errors, _) = findings_of(&doc);
        assert_eq!(errors.len(), 1, "{kind}: {errors:?}");
        assert!(
            errors[0].contains(&format!(
                "{field}: invalid value \"Bad Sched\": a lowercase RFC 1123 subdomain"
            )),
            "{kind}: {errors:?}"
        );
        let set = |doc: &mut Value, value: &str| {
            let pointer = format!("/{}", field.replace(['.', '['], "/").replace(']', ""));
            *doc.pointer_mut(&pointer).unwrap() = json!(value);
        };
        set(&mut doc, "volcano");
        assert_eq!(findings_of(&doc).0, Vec::<String>::new(), "{kind}");
    }
}
