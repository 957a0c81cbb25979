//! Every job says why it is at its size: the messages of each reason on small hand-made
//! clusters, queue positions, and `explain`.

mod common;

use common::*;
use trainscale::api::Resources;
use trainscale::cluster::{ClusterState, JobInfo};
use trainscale::commands::explain::explain_job;
use trainscale::planner::explain::{Explanation, explain_all};
use trainscale::planner::{PlannerConfig, Policy, Reason, plan};

fn explained(s: &ClusterState, config: &PlannerConfig) -> Vec<(String, Reason, Explanation)> {
    let p = plan(s, config);
    let e = explain_all(s, &p, config);
    p.jobs
        .iter()
        .zip(e)
        .map(|(j, e)| (j.key.name.to_string(), j.reason, e))
        .collect()
}

fn of<'a>(
    all: &'a [(String, Reason, Explanation)],
    name: &str,
) -> &'a (String, Reason, Explanation) {
    all.iter().find(|(n, _, _)| n == name).unwrap()
}

#[test]
fn a_trainer_larger_than_any_node_names_the_gpu_shortfall() {
    let mut s = ClusterState::new();
    add_node(&mut s, "node-00001", 64_000, 512, 8);
    add_node(&mut s, "node-00002", 64_000, 512, 8);
    let huge = Resources::new(8_000, 8 * GIB, 64);
    add_job(&mut s, "huge", job_info(1, 4, huge), 1, &[]);
    let all = explained(&s, &PlannerConfig::default());
    let (_, reason, e) = of(&all, "huge");
    assert_eq!(*reason, Reason::Starving);
    assert_eq!(e.queue_position, Some(1));
    assert!(
        e.message.contains(
            "waits for its gang: a trainer of 64 nvidia.com/gpu, 8 cpu, 8Gi memory does not fit: \
             every trainer needs 64 nvidia.com/gpu, more than any node has (the largest: 8 on node-00001)"
        ),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("1st in line for 64 nvidia.com/gpu"),
        "{}",
        e.message
    );
}

#[test]
fn memory_blocks_while_gpus_are_free() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 64_000, 256, 8);
    // A CPU job holds 200 GiB of the node's memory.
    add_job(
        &mut s,
        "cpu",
        job_info(1, 1, Resources::new(1_000, 200 * GIB, 0)),
        1,
        &["a"],
    );
    add_job(
        &mut s,
        "gpu",
        job_info(1, 4, Resources::new(1_000, 40 * GIB, 1)),
        1,
        &["a"],
    );
    let all = explained(&s, &PlannerConfig::default());
    let (_, reason, e) = of(&all, "gpu");
    // 256 − 200 − 40 = 16 GiB left, 7 GPUs free.
    assert_eq!(*reason, Reason::NoFit);
    assert!(
        e.message.contains(
            "at 1 of max 4: a trainer of 1 nvidia.com/gpu, 1 cpu, 40Gi memory does not fit: the \
             largest free block on one node is 16Gi memory (a)"
        ),
        "{}",
        e.message
    );
    assert_eq!(e.queue_position, Some(1));
    let (_, reason, e) = of(&all, "cpu");
    assert_eq!(*reason, Reason::Unchanged);
    assert_eq!(e.message, "fixed size 1");
    assert_eq!(e.queue_position, None);
}

#[test]
fn queue_positions_follow_the_policy_order_and_name_who_is_ahead() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 64_000, 512, 4);
    let t = Resources::new(1_000, GIB, 1);
    // Two jobs of range 1..9 on 4 GPUs: both get 2 and want more; a third at its max.
    add_job(&mut s, "x", job_info(1, 9, t), 1, &[]);
    add_job(&mut s, "y", job_info(1, 9, t), 1, &[]);
    let all = explained(&s, &PlannerConfig::default());
    let positions: Vec<Option<u32>> = ["x", "y"]
        .iter()
        .map(|n| of(&all, n).2.queue_position)
        .collect();
    assert_eq!(positions, vec![Some(1), Some(2)]);
    let y = &of(&all, "y").2.message;
    assert!(
        y.contains("2nd in line for 1 nvidia.com/gpu, 1 cpu, 1Gi memory; ahead: ns/x"),
        "{y}"
    );
    assert!(
        y.contains("the largest free block on one node is 0 nvidia.com/gpu (a)"),
        "{y}"
    );
}

#[test]
fn cooldown_and_max_instance_messages() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 64_000, 512, 8);
    let t = Resources::new(1_000, GIB, 1);
    add_job(
        &mut s,
        "cool",
        JobInfo {
            last_scale: Some(1_764_000_000),
            ..job_info(1, 8, t)
        },
        2,
        &["a", "a"],
    );
    add_job(&mut s, "full", job_info(1, 2, t), 2, &["a", "a"]);
    let config = PlannerConfig {
        now: 1_764_000_060,
        cooldown_s: 120,
        ..PlannerConfig::default()
    };
    let all = explained(&s, &config);
    assert_eq!(
        of(&all, "cool").2.message,
        "rescaled to 2 at 2025-11-24T16:00:00Z; the cooldown allows the next rescale after \
         2025-11-24T16:02:00Z"
    );
    assert_eq!(of(&all, "cool").2.queue_position, None);
    assert_eq!(of(&all, "full").2.message, "at max-instance 2");
}

#[test]
fn explain_names_the_room_that_would_let_a_job_grow_and_fails_on_a_missing_job() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 64_000, 512, 2);
    let t = Resources::new(1_000, GIB, 1);
    add_job(&mut s, "x", job_info(1, 4, t), 2, &["a", "a"]);
    let e = explain_job(&s, &PlannerConfig::default(), "ns/x").unwrap();
    assert_eq!((e.target, e.queue_position), (2, Some(1)));
    assert_eq!(
        e.would_grow_with.as_deref(),
        Some(
            "one more node with 1 nvidia.com/gpu, 1 cpu, 1Gi memory free (labelled as its other \
             nodes) lets it reach 3 trainers"
        )
    );
    let missing = explain_job(&s, &PlannerConfig::default(), "ns/nope").unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("job ns/nope is not in the cluster"),
        "{missing}"
    );
}

#[test]
fn explain_says_why_a_job_kueue_has_not_admitted_is_left_alone() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 64_000, 512, 2);
    let t = Resources::new(1_000, GIB, 1);
    add_job(&mut s, "queued", job_info(2, 4, t), 2, &[]);
    s.set_trainer_job_suspended(&trainscale::api::JobKey::new("ns", "queued"), true);
    let e = explain_job(&s, &PlannerConfig::default(), "ns/queued").unwrap_err();
    assert_eq!(
        e.to_string(),
        "job ns/queued is left alone: its trainer Job is suspended (not admitted by Kueue yet) \
         (spec.suspend of its trainer Job)"
    );
}

#[test]
fn explain_names_a_job_above_min_whose_shrink_lets_the_job_grow() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 64_000, 512, 7);
    let t = Resources::new(1_000, GIB, 1);
    // A full node of 7 GPUs: a at 5 of 1..9 (fulfillment against the 7 the cluster holds: 0.67),
    // b at 2 of 1..3 (0.5); moving a trainer from a to b would leave a less fulfilled than b is,
    // so b waits, first in line.
    add_job(&mut s, "a", job_info(1, 9, t), 5, &["a"; 5]);
    add_job(&mut s, "b", job_info(1, 3, t), 2, &["a", "a"]);
    let e = explain_job(&s, &PlannerConfig::default(), "ns/b").unwrap();
    assert_eq!((e.current, e.target, e.queue_position), (2, 2, Some(1)));
    assert_eq!(
        e.would_grow_if_shrunk.as_deref(),
        Some("ns/a shrinking to its min (5 → 1) lets it reach 3 trainers")
    );
    assert!(e.would_grow_with.is_some());
    // `edl` leaves a job whose min is its max alone: the shrink is applied before it plans.
    let edl = PlannerConfig {
        policy: Policy::Edl,
        ..PlannerConfig::default()
    };
    let e = explain_job(&s, &edl, "ns/b").unwrap();
    assert_eq!(
        e.would_grow_if_shrunk.as_deref(),
        Some("ns/a shrinking to its min (5 → 1) lets it reach 3 trainers")
    );
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(
        json["would_grow_if_shrunk"],
        "ns/a shrinking to its min (5 → 1) lets it reach 3 trainers"
    );
}

#[test]
fn explain_names_no_shrink_when_none_lets_the_job_grow() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 64_000, 512, 4);
    let t = Resources::new(1_000, GIB, 1);
    add_job(&mut s, "a", job_info(1, 4, t), 3, &["a"; 3]);
    // b's trainer needs 8 GPUs: no shrink on a 4-GPU node makes room for it.
    add_job(
        &mut s,
        "b",
        job_info(1, 2, Resources::new(1_000, GIB, 8)),
        1,
        &[],
    );
    let e = explain_job(&s, &PlannerConfig::default(), "ns/b").unwrap();
    assert_eq!((e.target, e.queue_position), (1, Some(1)));
    assert_eq!(e.would_grow_if_shrunk, None);
    let json = serde_json::to_value(&e).unwrap();
    assert!(json.get("would_grow_if_shrunk").is_none(), "{json}");
}

/// A job at its min whose trainers fit nowhere waits for its gang: the added node that would hold
/// it is found (its target does not move, its gang gets placed), not reported as not enough.
#[test]
fn explain_finds_the_node_that_places_a_waiting_gang() {
    let mut s = ClusterState::new();
    add_node(&mut s, "node-1", 64_000, 512, 8);
    let huge = Resources::new(8_000, 8 * GIB, 64);
    add_job(&mut s, "huge", job_info(1, 2, huge), 1, &[]);
    let e = explain_job(&s, &PlannerConfig::default(), "ns/huge").unwrap();
    assert_eq!(e.reason, "starving");
    assert_eq!(
        e.would_grow_with.as_deref(),
        Some(
            "one more node with 64 nvidia.com/gpu, 8 cpu, 8Gi memory free (labelled as its other \
             nodes) lets its gang of 1 be placed"
        )
    );
}

/// The bundled example dump with one more TrainingJob whose trainers need 64 GPUs each, written
/// to a temporary file.
fn dump_with_a_64_gpu_job() -> tempfile::NamedTempFile {
    let text = std::fs::read_to_string("simulations/examples/cluster.json").unwrap();
    let mut dump: serde_json::Value = serde_json::from_str(&text).unwrap();
    let huge = serde_json::json!({
        "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "huge", "namespace": "team-c",
                     "creationTimestamp": "2026-11-21T09:00:00Z"},
        "spec": {"image": "paddlepaddle/paddle:2.6", "fault_tolerant": true,
                 "pserver": {"min-instance": 1, "max-instance": 1,
                             "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                 "trainer": {"entrypoint": "python train.py", "min-instance": 1, "max-instance": 2,
                             "resources": {"requests": {"cpu": "8", "memory": "8Gi"},
                                           "limits": {"cpu": "8", "memory": "8Gi",
                                                      "nvidia.com/gpu": "64"}}}},
    });
    dump["items"].as_array_mut().unwrap().push(huge);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), dump.to_string()).unwrap();
    file
}

fn trainscale(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .args(args)
        .output()
        .unwrap()
}

/// On a dump: `plan --output json` gives every planned job a message, and the 64-GPU job's names
/// the GPU shortfall with a queue position; `explain` names the same shortfall; `explain` of a
/// job that does not exist fails naming it.
#[test]
fn plan_and_explain_on_a_dump_name_the_gpu_shortfall() {
    let dump = dump_with_a_64_gpu_job();
    let path = dump.path().to_str().unwrap();
    let shortfall = "every trainer needs 64 nvidia.com/gpu, more than any node has";
    let at = ["--now", "2026-11-22T00:00:00Z"];

    let out = trainscale(&[&["plan", "--snapshot", path, "--output", "json"][..], &at].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let jobs = plan["jobs"].as_array().unwrap();
    assert!(jobs.len() >= 4, "{jobs:?}");
    for job in jobs {
        let message = job["message"].as_str().unwrap_or("");
        assert!(!message.is_empty(), "no message: {job}");
    }
    let huge = jobs.iter().find(|j| j["name"] == "huge").unwrap();
    assert!(
        huge["message"].as_str().unwrap().contains(shortfall),
        "{huge}"
    );
    assert!(huge["queue_position"].as_u64().is_some(), "{huge}");

    let out = trainscale(&[&["explain", "team-c/huge", "--snapshot", path][..], &at].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(shortfall), "{text}");
    assert!(text.contains("queue position: "), "{text}");

    let out = trainscale(&["explain", "team-c/missing", "--snapshot", path]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("team-c/missing"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn requests_read_with_units_and_names() {
    use trainscale::planner::explain::{bytes, describe};
    assert_eq!(bytes(32_000_000_000), "32G");
    assert_eq!(bytes(64 * GIB), "64Gi");
    assert_eq!(bytes(1_500), "1500");
    assert_eq!(
        describe(Resources::new(10_000, 32_000_000_000, 2)),
        "2 nvidia.com/gpu, 10 cpu, 32G memory"
    );
}

#[test]
fn a_gang_placed_below_what_the_job_asks_is_not_a_scale_up() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 4_000, 64, 0);
    let t = Resources::new(1_000, GIB, 0);
    // Asks 5 with 3 bound: a gang of min 4 is placed on the node's 4 CPUs, the 5th has no room.
    add_job(&mut s, "g", job_info(4, 8, t), 5, &["a", "a", "a"]);
    let all = explained(&s, &PlannerConfig::default());
    let (_, reason, e) = of(&all, "g");
    assert_eq!(*reason, Reason::NoFit, "{}", e.message);
    assert!(
        e.message.starts_with("asks 5, 4 placed (5 → 4) of max 8: "),
        "{}",
        e.message
    );
}

#[test]
fn fulfillment_is_reported_against_what_the_cluster_holds() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 20_000, 64, 0);
    let t = Resources::new(1_000, GIB, 0);
    // max-instance 1000 where 20 trainers fit: 13 of 0..20 is 0.65, not 0.013.
    add_job(&mut s, "big", job_info(0, 1000, t), 13, &["a"; 13]);
    let p = plan(&s, &PlannerConfig::default());
    let job = p.jobs.iter().find(|j| &*j.key.name == "big").unwrap();
    assert_eq!(job.target, 20);
    assert!((job.fulfillment_before - 0.65).abs() < 1e-9, "{job:?}");
    assert!((job.fulfillment_after - 1.0).abs() < 1e-9, "{job:?}");
    assert!((p.summary.min_fulfillment - 1.0).abs() < 1e-9);
}

#[test]
fn a_policy_that_holds_a_job_says_so_before_room() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 64_000, 512, 8);
    let t = Resources::new(1_000, GIB, 1);
    add_job(&mut s, "j", job_info(1, 4, t), 1, &["a"]);
    let config = |policy| PlannerConfig {
        policy,
        ..PlannerConfig::default()
    };
    let all = explained(&s, &config(Policy::Static));
    let e = &of(&all, "j").2;
    assert!(e.message.contains("the static policy"), "{}", e.message);
    // edl: CPU requests kept under a load of 1% of the cluster's CPU; a trainer would fit.
    let edl = PlannerConfig {
        max_load_desired: 0.01,
        ..config(Policy::Edl)
    };
    let all = explained(&s, &edl);
    let (_, reason, e) = of(&all, "j");
    assert_ne!(*reason, Reason::ScaleUp);
    assert!(
        e.message.contains("--max-load-desired 0.01"),
        "{}",
        e.message
    );
}
