//! `trainscale run` outside any cluster: one line on stderr, exit code 2.

use std::process::Command;

#[test]
fn no_kubeconfig_and_no_cluster_exits_2_with_one_line() {
    let home = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .arg("run")
        .env_remove("KUBECONFIG")
        .env_remove("TRAINSCALE_KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: no Kubernetes configuration"),
        "{stderr}"
    );
}

#[test]
fn bad_durations_are_refused() {
    let output = Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .args(["run", "--interval", "soon"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("not a duration"), "{stderr}");
}
