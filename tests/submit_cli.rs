//! `trainscale submit`: the manifest validates and round-trips; bad flags are refused by name.

use std::process::Command;

use trainscale::api::TrainingJob;
use trainscale::api::manifest::parse_documents;
use trainscale::commands::submit::{ManifestFormat, SubmitArgs, build_training_job, render};
use trainscale::commands::validate::validate_files;

fn args() -> SubmitArgs {
    SubmitArgs {
        job_name: "paddle-job".into(),
        entry_point: "python train.py".into(),
        memory: "1G".into(),
        cpu: "3".into(),
        image: "yancey1989/paddle-job".into(),
        pservers: 3,
        namespace: "yanxu".into(),
        workspace: Some("/example/word2vec".into()),
        cephfs_monitors: vec!["172.19.32.166:6789".into()],
        ..Default::default()
    }
}

fn round_trip(job: &TrainingJob, format: ManifestFormat) {
    let text = render(job, format).unwrap();
    let docs = parse_documents(&text, "out").unwrap();
    assert_eq!(docs.len(), 1);
    let back: TrainingJob = docs[0].decode().unwrap();
    assert_eq!(
        serde_json::to_value(&back).unwrap(),
        serde_json::to_value(job).unwrap()
    );
    assert_eq!(back.spec, job.spec);
    assert_eq!(back.metadata, job.metadata);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.yaml");
    std::fs::write(&path, &text).unwrap();
    let outcome = validate_files(&[path]);
    assert!(outcome.ok(true), "{}", outcome.render());
}

#[test]
fn the_sdk_example_validates_and_round_trips() {
    let job = build_training_job(&args()).unwrap();
    assert_eq!(job.spec.pserver.min_instance, 3);
    assert_eq!(job.spec.trainer.min_instance, 3);
    assert_eq!(
        job.spec.volumes[0].cephfs.as_ref().unwrap().user.as_deref(),
        Some("admin")
    );
    assert_eq!(job.spec.volume_mounts[0].mount_path, "/mnt/cephfs");
    round_trip(&job, ManifestFormat::Yaml);
    round_trip(&job, ManifestFormat::Json);
}

#[test]
fn elastic_gpu_and_nccl2_jobs_validate() {
    let elastic = SubmitArgs {
        min_trainers: Some(2),
        max_trainers: Some(8),
        gpu: 1,
        ..args()
    };
    let job = build_training_job(&elastic).unwrap();
    assert!(job.spec.fault_tolerant && job.elastic());
    assert_eq!(job.gpu().unwrap(), 1);
    round_trip(&job, ManifestFormat::Yaml);
    let nccl = SubmitArgs {
        pservers: 0,
        trainers: Some(4),
        scheduler_name: Some("volcano".into()),
        pod_group: Some("g".into()),
        ..args()
    };
    let job = build_training_job(&nccl).unwrap();
    assert_eq!(job.spec.frame_work.as_ref().unwrap().job_type, "nccl2");
    assert_eq!(job.spec.pod_group_name, "g");
    round_trip(&job, ManifestFormat::Yaml);
}

#[test]
fn invalid_combinations_name_the_flag() {
    let cases = [
        (
            SubmitArgs {
                trainers: Some(2),
                min_trainers: Some(1),
                ..args()
            },
            "--trainers:",
        ),
        (
            SubmitArgs {
                min_trainers: Some(2),
                ..args()
            },
            "--max-trainers:",
        ),
        (
            SubmitArgs {
                min_trainers: Some(5),
                max_trainers: Some(2),
                ..args()
            },
            "--min-trainers:",
        ),
        (
            SubmitArgs {
                cpu: "lots".into(),
                ..args()
            },
            "--cpu:",
        ),
        (
            SubmitArgs {
                memory: "0".into(),
                ..args()
            },
            "--memory:",
        ),
        (
            SubmitArgs {
                pservers: -1,
                ..args()
            },
            "--pservers:",
        ),
        (
            SubmitArgs {
                entry_point: "python 'x".into(),
                ..args()
            },
            "--entry-point:",
        ),
        (
            SubmitArgs {
                cephfs_monitors: vec![],
                cephfs_user: Some("u".into()),
                ..args()
            },
            "--cephfs-user:",
        ),
        (
            SubmitArgs {
                trainers: Some(0),
                ..args()
            },
            "--trainers:",
        ),
    ];
    for (a, flag) in cases {
        let err = build_training_job(&a).unwrap_err().to_string();
        assert!(err.starts_with(flag), "{err} should name {flag}");
    }
}

#[test]
fn the_binary_prints_a_manifest_by_default_and_refuses_bad_flags() {
    let bin = env!("CARGO_BIN_EXE_trainscale");
    let out = Command::new(bin)
        .args([
            "submit",
            "--job-name",
            "j",
            "--entry-point",
            "python t.py",
            "--memory",
            "1Gi",
            "--cpu",
            "1",
            "--image",
            "img",
            "--min-trainers",
            "1",
            "--max-trainers",
            "4",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let job: TrainingJob = parse_documents(&text, "stdout").unwrap()[0]
        .decode()
        .unwrap();
    assert_eq!(job.spec.trainer.max_instance, 4);

    let out = Command::new(bin)
        .args([
            "submit",
            "--job-name",
            "j",
            "--entry-point",
            "x",
            "--memory",
            "1Gi",
            "--cpu",
            "1",
            "--image",
            "img",
            "--max-trainers",
            "4",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--min-trainers"));
}
