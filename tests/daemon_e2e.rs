//! End-to-end smoke test over real HTTP on loopback: the `trainscale run` binary against the kmock
//! Kubernetes emulator (PyPI `kmock` 0.8, driven by `tests/e2e/kmock_cluster.py`).
//!
//! It syncs, scales the elastic TrainingJob's trainer Job up onto the roomy node, writes the scale
//! record, and exits cleanly on SIGTERM. Skipped with a message only when `CI` is unset and Python
//! or kmock is missing; in CI (`.ci/run` installs kmock) a missing emulator fails the test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use trainscale::api::{ScaleResults, TrainingJob};

const DEADLINE: Duration = Duration::from_secs(60);

/// Kills a child process when dropped (a failed assertion must not leak processes).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kmock_available() -> bool {
    Command::new("python3")
        .args(["-c", "import kmock"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Status code of a plain GET on the daemon's port, if it answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

async fn client(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn run_scales_up_an_elastic_job_against_kmock() {
    if !kmock_available() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but python3 with kmock is missing: pip install 'kmock==0.8.*'"
        );
        eprintln!(
            "SKIPPED daemon_e2e: python3 with kmock not found (pip install 'kmock==0.8.*'); CI installs it"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/kmock_cluster.py");
    let mut emulator = Guard(
        Command::new("python3")
            .arg(&helper)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--lifetime", "90"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut ready_line = String::new();
    BufReader::new(emulator.0.stdout.take().unwrap())
        .read_line(&mut ready_line)
        .unwrap();
    assert!(
        ready_line.starts_with("READY "),
        "emulator said {ready_line:?}"
    );

    let port = free_port();
    let daemon = Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--interval",
            "1s",
            "--debounce",
            "200ms",
            "--cooldown",
            "0s",
        ])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "info")
        .spawn()
        .unwrap();
    let mut daemon = Guard(daemon);

    // Caches sync: /readyz turns 200.
    let started = Instant::now();
    while http_status(port, "/readyz") != Some(200) {
        assert!(
            started.elapsed() < DEADLINE,
            "the daemon never became ready"
        );
        assert!(
            daemon.0.try_wait().unwrap().is_none(),
            "the daemon exited early"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(http_status(port, "/healthz"), Some(200));

    // The trainer Job grows to the job's max (the node has room for all four trainers) and the
    // TrainingJob gets a True scale record with phase Scaling.
    let client = client(&kubeconfig).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "ml");
    let tjs: Api<TrainingJob> = Api::namespaced(client, "ml");
    let (parallelism, status) = loop {
        let job = jobs.get("mnist-trainer").await.unwrap();
        let tj = tjs.get("mnist").await.unwrap();
        let parallelism = job.spec.and_then(|s| s.parallelism).unwrap_or(0);
        let records = tj
            .status
            .clone()
            .map(|s| s.scale_records.scale_records)
            .unwrap_or_default();
        if parallelism > 1 && !records.is_empty() {
            break (parallelism, tj.status.unwrap_or_default());
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no scale-up within {DEADLINE:?}: parallelism {parallelism}, {} records",
            records.len()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(parallelism, 4);
    let record = &status.scale_records.scale_records[0];
    assert_eq!(record.status, ScaleResults::True);
    assert_eq!(record.additional, 3);
    assert_eq!(status.phase.as_str(), "Scaling");

    // SIGTERM: a clean exit, promptly.
    let pid = daemon.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let stopping = Instant::now();
    let exit = loop {
        if let Some(status) = daemon.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            stopping.elapsed() < Duration::from_secs(15),
            "no exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(exit.success(), "exit status {exit}");
    // Closing the emulator's stdin ends it.
    drop(emulator.0.stdin.take());
}
