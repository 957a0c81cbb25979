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

/// Runs the binary without any `TRAINSCALE_*` setting or cluster, with `env` added.
fn trainscale(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_trainscale"));
    command
        .args(args)
        .env("HOME", home.path())
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT");
    for (key, _) in std::env::vars() {
        if key.starts_with("TRAINSCALE_") {
            command.env_remove(key);
        }
    }
    command.envs(env.iter().copied());
    command.output().unwrap()
}

/// Exit code 2 and clap's `invalid value` error naming `flag`, without a panic.
fn assert_usage_error(args: &[&str], env: &[(&str, &str)], flag: &str, why: &str) {
    let output = trainscale(args, env);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
    assert!(
        stderr.starts_with("error: invalid value")
            && stderr.contains(&format!("'{flag} <"))
            && stderr.contains(why),
        "{args:?} {env:?}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn out_of_range_flags_are_usage_errors_naming_the_flag() {
    let cases: [(&[&str], &str, &str); 15] = [
        (
            &["run", "--min-marginal-speedup", "NaN"],
            "--min-marginal-speedup",
            "not in [0, 1)",
        ),
        (
            &["run", "--min-marginal-speedup", "1"],
            "--min-marginal-speedup",
            "not in [0, 1)",
        ),
        (
            &[
                "plan",
                "--snapshot",
                "x.json",
                "--min-marginal-speedup",
                "-0.1",
            ],
            "--min-marginal-speedup",
            "not in [0, 1)",
        ),
        (&["run", "--interval", "0s"], "--interval", "above zero"),
        (&["run", "--interval", "400days"], "--interval", "not in"),
        (&["run", "--debounce", "0ms"], "--debounce", "above zero"),
        (&["run", "--cooldown", "1year"], "--cooldown", "not in"),
        (
            &["run", "--max-load-desired", "NaN"],
            "--max-load-desired",
            "not in (0, 1]",
        ),
        (
            &["run", "--max-load-desired", "inf"],
            "--max-load-desired",
            "not in (0, 1]",
        ),
        (
            &["run", "--max-load-desired", "0"],
            "--max-load-desired",
            "not in (0, 1]",
        ),
        (
            &["run", "--max-load-desired", "-0.5"],
            "--max-load-desired",
            "not in (0, 1]",
        ),
        (
            &["plan", "--snapshot", "x.json", "--max-load-desired", "-1"],
            "--max-load-desired",
            "not in (0, 1]",
        ),
        (
            &["plan", "--snapshot", "x.json", "--max-load-desired", "1.5"],
            "--max-load-desired",
            "not in (0, 1]",
        ),
        (
            &["plan", "--snapshot", "x.json", "--cooldown", "30days"],
            "--cooldown",
            "not in",
        ),
        (
            &[
                "plan",
                "--snapshot",
                "x.json",
                "--now",
                "1969-12-31T23:59:59Z",
            ],
            "--now",
            "from 1970 on",
        ),
    ];
    for (args, flag, why) in cases {
        assert_usage_error(args, &[], flag, why);
    }
    // The environment fallbacks go through the same checks.
    assert_usage_error(
        &["run"],
        &[("TRAINSCALE_INTERVAL", "0s")],
        "--interval",
        "above zero",
    );
    assert_usage_error(
        &["run"],
        &[("TRAINSCALE_MAX_LOAD_DESIRED", "NaN")],
        "--max-load-desired",
        "not in (0, 1]",
    );
}

#[test]
fn in_range_flags_get_past_parsing() {
    // Valid values reach the kubeconfig lookup, which fails outside a cluster.
    let output = trainscale(
        &[
            "run",
            "--interval",
            "1ms",
            "--debounce",
            "1h",
            "--cooldown",
            "0s",
            "--max-load-desired",
            "1",
        ],
        &[("TRAINSCALE_INTERVAL", "24h")],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("error: no Kubernetes configuration"),
        "{stderr}"
    );
    let output = trainscale(
        &["run"],
        &[
            ("TRAINSCALE_INTERVAL", "24h"),
            ("TRAINSCALE_MAX_LOAD_DESIRED", "0.5"),
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("error: no Kubernetes configuration"),
        "{stderr}"
    );
}
