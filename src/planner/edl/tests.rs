//! Tests of the `edl` policy against edl-autoscaler.md §2 and §5.1.

use super::*;
use crate::api::Resources;
use crate::cluster::{NodeInfo, PodInfo, PodPhase, Role};
use crate::planner::{self, Policy, ScalePlan};

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

fn add_node(state: &mut ClusterState, name: &str, cpu: &str, mem: &str, gpu: i64) {
    let allocatable = Resources::new(q(cpu).milli_ceil(), q(mem).value_ceil(), gpu);
    state.set_node(
        name,
        Some(NodeInfo {
            allocatable,
            schedulable: true,
        }),
    );
}

/// Adds `ns/name` with trainer Job parallelism `current`; `res` is [gpu limit, cpu, memory].
fn add_job(
    state: &mut ClusterState,
    name: &str,
    (min, max, current): (i32, i32, i32),
    res: [&str; 3],
    phase: TrainingJobPhase,
) -> JobKey {
    let exact = res.map(q);
    let info = JobInfo {
        min,
        max,
        trainer: Resources::new(
            exact[1].milli_ceil(),
            exact[2].value_ceil(),
            exact[0].value_ceil(),
        ),
        exact,
        priority: 0,
        priority_class: None,
        created: 0,
        phase,
        stored_parallelism: Some(current),
        last_scale: None,
        speedup: None,
        progress: None,
    };
    let key = JobKey::new("ns", name);
    state.set_training_job(key.clone(), Some(info));
    state.set_trainer_job(key.clone(), Some(Some(current)));
    key
}

fn running(state: &mut ClusterState, name: &str, sizes: (i32, i32, i32), res: [&str; 3]) -> JobKey {
    add_job(state, name, sizes, res, TrainingJobPhase::Running)
}

fn add_pod(
    state: &mut ClusterState,
    node: Option<&str>,
    requests: Resources,
    owner: Option<&JobKey>,
) {
    let name = format!("pod-{}", state.pod_count());
    let info = PodInfo {
        node: node.map(str::to_string),
        phase: if node.is_some() {
            PodPhase::Running
        } else {
            PodPhase::Pending
        },
        requests,
        terminating: false,
        owner: owner.map(|k| (k.clone(), Role::Trainer)),
        created: 0,
        index: None,
        extended: Default::default(),
        priority: 0,
        claim: None,
    };
    state.set_pod(("ns".to_string(), name), Some(info));
}

/// Adds `n` trainer pods of `key` on `node` (`None`: not bound).
fn add_trainers(state: &mut ClusterState, key: &JobKey, node: Option<&str>, n: u32) {
    let requests = state
        .job(key)
        .and_then(|s| s.info.as_ref())
        .unwrap()
        .trainer;
    for _ in 0..n {
        add_pod(state, node, requests, Some(key));
    }
}

fn config(max_load: f64, cap: u32) -> PlannerConfig {
    PlannerConfig {
        policy: Policy::Edl,
        max_load_desired: max_load,
        edl_iteration_cap: cap,
        ..PlannerConfig::default()
    }
}

fn run(state: &ClusterState, max_load: f64, cap: u32) -> ScalePlan<'_> {
    planner::plan(state, &config(max_load, cap))
}

/// (name, target, reason) of every planned job.
fn outcome<'a>(plan: &'a ScalePlan<'_>) -> Vec<(&'a str, i32, Reason)> {
    plan.jobs
        .iter()
        .map(|j| (&*j.key.name, j.target, j.reason))
        .collect()
}

/// A removal from the node named `node` of `state`.
fn removal(state: &ClusterState, node: Option<&str>, trainers: u32) -> Removal {
    Removal {
        node: node.map(|n| state.node_id_of(n).unwrap()),
        trainers,
    }
}

fn dry(current: i64, (min, max): (i64, i64), res: [&str; 3]) -> DryJob {
    let exact = res.map(q);
    DryJob {
        current,
        min,
        max,
        ceiling: max,
        cpu_milli: exact[1].milli_ceil(),
        memory_mega: exact[2].mega_ceil(),
        gpu: exact[0].value_ceil(),
        fulfillment: fulfillment_of(current, min, max),
        exact,
        extended: Extended::new(),
    }
}

fn big_resource() -> ClusterResource {
    ClusterResource {
        cpu_total_milli: 100_000,
        cpu_request_milli: 20_000,
        memory_total_mega: 100_000,
        memory_request_mega: 20_000,
        gpu_total: 4,
        gpu_limit: 3,
        nodes: vec![NodeIdle {
            name: "n1".into(),
            cpu_idle_milli: 80_000,
            memory_free_mega: 80_000,
            pods_free: 110,
            extended_free: Extended::new(),
        }],
    }
}

#[test]
fn cluster_resource_from_state() {
    let mut state = ClusterState::new();
    add_node(&mut state, "n1", "2", "1500000", 1);
    state.set_node(
        "n0",
        Some(NodeInfo {
            allocatable: Resources::new(8000, 8_000_000_000, 2),
            schedulable: false,
        }),
    );
    add_pod(&mut state, Some("n1"), Resources::new(500, 1, 0), None);
    add_pod(&mut state, None, Resources::new(250, 2_000_001, 1), None);
    let r = ClusterResource::from_state(&state);
    assert_eq!(
        r,
        ClusterResource {
            cpu_total_milli: 2000,
            cpu_request_milli: 750,
            memory_total_mega: 2,
            memory_request_mega: 3,
            gpu_total: 1,
            gpu_limit: 1,
            nodes: vec![NodeIdle {
                name: "n1".into(),
                cpu_idle_milli: 1500,
                memory_free_mega: 1,
                pods_free: 109,
                extended_free: Extended::new(),
            }],
        }
    );
}

#[test]
fn cpu_threshold_truncates_the_float_product() {
    let mut state = ClusterState::new();
    add_node(&mut state, "n1", "10", "100G", 0);
    let a = running(&mut state, "a", (1, 12, 2), ["0", "100m", "1M"]);
    add_trainers(&mut state, &a, Some("n1"), 2);
    add_pod(&mut state, Some("n1"), Resources::new(4800, 0, 0), None);
    // 10000 * 0.57 = 5699.999… → 5699: growth stops at 5600 + 100 > 5699 (8 trainers, not 9).
    let plan = run(&state, 0.57, 10_000);
    assert_eq!(outcome(&plan), vec![("a", 8, Reason::ScaleUp)]);
    assert_eq!(plan.jobs[0].fulfillment_after, 7.0 / 11.0);
    // 10000 * 0.58 = 5800: `>=` lets requests reach the threshold exactly.
    let plan = run(&state, 0.58, 10_000);
    assert_eq!(outcome(&plan), vec![("a", 10, Reason::ScaleUp)]);
    assert!(plan.warnings.is_empty());
}

#[test]
fn memory_test_is_strict_on_the_total() {
    let build = |node_mem: &str| {
        let mut state = ClusterState::new();
        add_node(&mut state, "n1", "10", node_mem, 0);
        let a = running(&mut state, "a", (1, 10, 3), ["0", "100m", "500M"]);
        add_trainers(&mut state, &a, Some("n1"), 3);
        state
    };
    // 2000 - 1500 = 500 Mega free, request 500: no scale-up.
    let state = build("2G");
    let plan = run(&state, 1.0, 10_000);
    assert_eq!(outcome(&plan), vec![("a", 3, Reason::NoFit)]);
    // One byte more rounds the total up to 2001: 501 > 500, one trainer fits.
    let state = build("2000000001");
    let plan = run(&state, 1.0, 10_000);
    assert_eq!(outcome(&plan), vec![("a", 4, Reason::ScaleUp)]);
}

#[test]
fn gpu_scale_up_ignores_max_load_scale_down_does_not() {
    let mut r = big_resource();
    let job = dry(3, (1, 10), ["1", "1", "1M"]);
    // Up: 4 - 3 >= 1 although 3 GPUs already exceed 4 * 0.5.
    assert_eq!(scale_dry_run(&mut r, &job, 0, 0.5, false), 1);
    assert_eq!(
        (r.gpu_limit, r.cpu_request_milli, r.memory_request_mega),
        (4, 21_000, 20_001)
    );
    assert_eq!(
        (r.nodes[0].cpu_idle_milli, r.nodes[0].memory_free_mega),
        (79_000, 79_999)
    );
    // No GPU left: 0, and nothing moves (the node search hit, the delta is 0).
    assert_eq!(scale_dry_run(&mut r, &job, 1, 0.5, false), 0);
    assert_eq!((r.gpu_limit, r.nodes[0].cpu_idle_milli), (4, 79_000));
    // Down: 4 > int(4 * 0.5) = 2, so −1; totals go back, the node's idle does not.
    assert_eq!(scale_dry_run(&mut r, &job, 1, 0.5, true), -1);
    assert_eq!(
        (r.gpu_limit, r.cpu_request_milli, r.memory_request_mega),
        (3, 20_000, 20_000)
    );
    assert_eq!(
        (r.nodes[0].cpu_idle_milli, r.nodes[0].memory_free_mega),
        (79_000, 79_999)
    );
}

#[test]
fn gpu_job_grows_to_the_gpu_total_at_full_load() {
    let mut state = ClusterState::new();
    add_node(&mut state, "n1", "100", "1T", 4);
    let a = running(&mut state, "a", (1, 10, 1), ["1", "1", "1G"]);
    add_trainers(&mut state, &a, Some("n1"), 1);
    let plan = run(&state, 1.0, 10_000);
    assert_eq!(outcome(&plan), vec![("a", 4, Reason::ScaleUp)]);
}

#[test]
fn gpu_churn_stops_only_when_a_node_is_drained() {
    // §5.1.1: +1 in the up pass (GPU against the total), −1 in the down pass (against
    // int(4 * 0.5) = 2); each phantom +1 takes 100m from n1 for good: 3800m idle → 38 rounds,
    // the 39th changes nothing.
    let mut state = ClusterState::new();
    add_node(&mut state, "n1", "4", "100G", 4);
    let a = running(&mut state, "a", (1, 10, 2), ["1", "100m", "1G"]);
    add_trainers(&mut state, &a, Some("n1"), 2);
    let plan = run(&state, 0.5, 39);
    assert_eq!(outcome(&plan), vec![("a", 2, Reason::NoFit)]);
    assert!(plan.warnings.is_empty());
    let plan = run(&state, 0.5, 38);
    assert_eq!(outcome(&plan), vec![("a", 2, Reason::NoFit)]);
    assert_eq!(plan.warnings.len(), 1);
}

#[test]
fn overload_scales_down_to_min_not_below() {
    let mut state = ClusterState::new();
    add_node(&mut state, "n1", "16", "100G", 0);
    add_node(&mut state, "n2", "16", "100G", 0);
    add_pod(&mut state, Some("n1"), Resources::new(10_000, 0, 0), None);
    let a = running(&mut state, "a", (3, 10, 8), ["0", "1", "1G"]);
    add_trainers(&mut state, &a, Some("n1"), 2);
    add_trainers(&mut state, &a, Some("n2"), 4);
    add_trainers(&mut state, &a, None, 2);
    // Requests 18000m stay above int(32000 * 0.25) = 8000 all the way down to min.
    let plan = run(&state, 0.25, 10_000);
    assert_eq!(outcome(&plan), vec![("a", 3, Reason::Overload)]);
    let job = &plan.jobs[0];
    assert_eq!((job.current, job.min, job.max), (8, 3, 10));
    assert_eq!(
        (job.fulfillment_before, job.fulfillment_after),
        (5.0 / 7.0, 0.0)
    );
    assert_eq!(
        job.removals,
        vec![removal(&state, None, 2), removal(&state, Some("n2"), 3)]
    );
    assert!(job.placements.is_empty());
}

#[test]
fn over_max_is_cut_in_one_step_by_the_up_pass() {
    // b (fulfillment 0) goes first; a's cut of 2 in the first up pass lowers the request total,
    // which lets b grow twice more in later iterations (on n2; n1's idle is never given back).
    let mut state = ClusterState::new();
    add_node(&mut state, "n1", "13", "100G", 0);
    add_node(&mut state, "n2", "3", "100G", 0);
    let a = running(&mut state, "a", (1, 10, 12), ["0", "1", "1M"]);
    add_trainers(&mut state, &a, Some("n1"), 12);
    let b = running(&mut state, "b", (1, 5, 1), ["0", "1", "1M"]);
    add_trainers(&mut state, &b, Some("n1"), 1);
    add_pod(&mut state, None, Resources::new(2000, 0, 0), None);
    let plan = run(&state, 1.0, 10_000);
    assert_eq!(
        outcome(&plan),
        vec![("a", 10, Reason::OverMax), ("b", 4, Reason::ScaleUp)]
    );
    assert_eq!(plan.jobs[0].removals, vec![removal(&state, Some("n1"), 2)]);
    assert!(plan.jobs[1].removals.is_empty());
}

#[test]
fn over_max_branches_of_scale_dry_run() {
    let job = dry(12, (1, 10), ["0", "1", "10M"]);
    // Up pass: max - planned in one step; totals follow, the node does not.
    let mut r = big_resource();
    assert_eq!(scale_dry_run(&mut r, &job, 0, 0.97, false), -2);
    assert_eq!(
        (r.cpu_request_milli, r.memory_request_mega),
        (18_000, 19_980)
    );
    assert_eq!(r.nodes, big_resource().nodes);
    assert_eq!(scale_dry_run(&mut r, &job, -2, 0.97, false), 0);
    // Down pass: −1 per call while above max, though the cluster is not loaded.
    let mut r = big_resource();
    assert_eq!(scale_dry_run(&mut r, &job, 0, 0.97, true), -1);
    assert_eq!(
        (r.cpu_request_milli, r.memory_request_mega),
        (19_000, 19_990)
    );
    assert_eq!(scale_dry_run(&mut r, &job, -1, 0.97, true), -1);
    assert_eq!(scale_dry_run(&mut r, &job, -2, 0.97, true), 0);
    assert_eq!(r.cpu_request_milli, 18_000);
    assert_eq!(r.nodes, big_resource().nodes);
}

#[test]
fn frozen_order_pushes_the_least_fulfilled_job_to_max() {
    // §5.1.2: a (fulfillment 0.2) is grown first in every up pass, b (0.6) is cut first in every
    // down pass (GPU 8 > int(8 * 0.9) = 7), so a ends at max and b at min. b's phantom +1/−1
    // then drains n1's idle CPU (1400m − 5 × 100m = 900m → 9 rounds): 14 iterations in all.
    let mut state = ClusterState::new();
    add_node(&mut state, "n1", "2", "10G", 8);
    let a = running(&mut state, "a", (1, 6, 2), ["1", "100m", "1M"]);
    add_trainers(&mut state, &a, Some("n1"), 2);
    let b = running(&mut state, "b", (1, 6, 4), ["1", "100m", "1M"]);
    add_trainers(&mut state, &b, Some("n1"), 4);
    let plan = run(&state, 0.9, 14);
    assert_eq!(
        outcome(&plan),
        vec![("a", 6, Reason::ScaleUp), ("b", 1, Reason::Overload)]
    );
    assert!(plan.warnings.is_empty());
    assert_eq!(plan.jobs[1].removals, vec![removal(&state, Some("n1"), 3)]);
    assert_eq!(
        (
            plan.jobs[0].fulfillment_after,
            plan.jobs[1].fulfillment_after
        ),
        (1.0, 0.0)
    );
    assert_eq!(run(&state, 0.9, 13).warnings.len(), 1);
}

#[test]
fn comparator_breaks_ties_on_exact_gpu_cpu_memory() {
    let jobs = vec![
        dry(1, (1, 5), ["1", "1", "1"]),     // x
        dry(1, (1, 5), ["0", "2", "5"]),     // y
        dry(1, (1, 5), ["0", "2", "3"]),     // z
        dry(1, (1, 5), ["0", "1", "9"]),     // w
        dry(1, (1, 5), ["0", "1000m", "2"]), // v: cpu equal to w's exactly
        dry(0, (1, 5), ["4", "8", "8G"]),    // u: lowest fulfillment wins
    ];
    assert_eq!(sorted_order(&jobs), vec![5, 4, 3, 2, 1, 0]);
    // "2" bytes after "1" byte, although both are 1 Mega.
    let m2 = dry(1, (1, 5), ["0", "1", "2"]);
    let m1 = dry(1, (1, 5), ["0", "1", "1"]);
    assert_eq!((m1.memory_mega, m2.memory_mega), (1, 1));
    assert_eq!(compare(&m2, &m1), Ordering::Greater);
    assert_eq!(sorted_order(&[m2, m1.clone()]), vec![1, 0]);
    // Full ties keep input order (deviation 2).
    assert_eq!(sorted_order(&[m1.clone(), m1]), vec![0, 1]);
}

#[test]
fn one_byte_of_memory_decides_who_grows() {
    let mut state = ClusterState::new();
    add_node(&mut state, "n1", "3", "1G", 0);
    let a = running(&mut state, "a", (1, 3, 1), ["0", "1", "2"]);
    add_trainers(&mut state, &a, Some("n1"), 1);
    let b = running(&mut state, "b", (1, 3, 1), ["0", "1", "1"]);
    add_trainers(&mut state, &b, Some("n1"), 1);
    let plan = run(&state, 1.0, 10_000);
    assert_eq!(
        outcome(&plan),
        vec![("a", 1, Reason::NoFit), ("b", 2, Reason::ScaleUp)]
    );
}

#[test]
fn non_elastic_jobs_are_untouched() {
    let mut state = ClusterState::new();
    add_node(&mut state, "n1", "10", "100G", 0);
    let e = running(&mut state, "e", (1, 10, 1), ["0", "1", "1M"]);
    add_trainers(&mut state, &e, Some("n1"), 1);
    let fixed = running(&mut state, "fixed", (3, 3, 3), ["0", "1", "1M"]);
    add_trainers(&mut state, &fixed, Some("n1"), 3);
    let over = running(&mut state, "over", (2, 2, 4), ["0", "1", "1M"]);
    add_trainers(&mut state, &over, Some("n1"), 4);
    let small = running(&mut state, "small", (3, 3, 1), ["0", "1", "1M"]);
    add_trainers(&mut state, &small, Some("n1"), 1);
    // 9000m requested of 10000m: e gets the one trainer left.
    let plan = run(&state, 1.0, 10_000);
    assert_eq!(
        outcome(&plan),
        vec![
            ("e", 2, Reason::ScaleUp),
            ("fixed", 3, Reason::Unchanged),
            ("over", 4, Reason::Unchanged),
            ("small", 1, Reason::Unchanged),
        ]
    );
    assert!(plan.jobs.iter().all(|j| j.removals.is_empty()));
}

#[test]
fn candidates_are_running_jobs_or_all_unfinished_when_one_is_pending() {
    let mut state = ClusterState::new();
    add_node(&mut state, "n1", "100", "100G", 0);
    let run_key = running(&mut state, "run", (1, 4, 1), ["0", "1", "1M"]);
    add_trainers(&mut state, &run_key, Some("n1"), 1);
    let creating = add_job(
        &mut state,
        "creating",
        (1, 4, 1),
        ["0", "1", "1M"],
        TrainingJobPhase::Creating,
    );
    add_trainers(&mut state, &creating, Some("n1"), 1);
    add_job(
        &mut state,
        "done",
        (1, 4, 1),
        ["0", "1", "1M"],
        TrainingJobPhase::Succeed,
    );
    let plan = run(&state, 1.0, 10_000);
    assert_eq!(outcome(&plan), vec![("run", 4, Reason::ScaleUp)]);
    // A job with trainers wanted and none bound is pending: every unfinished job is a candidate.
    add_job(
        &mut state,
        "wait",
        (1, 4, 2),
        ["0", "1", "1M"],
        TrainingJobPhase::Creating,
    );
    let plan = run(&state, 1.0, 10_000);
    assert_eq!(
        outcome(&plan),
        vec![
            ("creating", 4, Reason::ScaleUp),
            ("run", 4, Reason::ScaleUp),
            ("wait", 4, Reason::ScaleUp),
        ]
    );
}

#[test]
fn removals_are_the_top_controller_positions() {
    // Unindexed pods (a NonIndexed Job): bound ones hold the lowest positions oldest (then by
    // name) first, pending ones the top; the controller removes the top first.
    let mut state = ClusterState::new();
    add_node(&mut state, "n-b", "10", "10G", 0);
    add_node(&mut state, "n-a", "10", "10G", 0);
    let a = running(&mut state, "a", (1, 10, 5), ["0", "1", "1M"]);
    add_trainers(&mut state, &a, Some("n-b"), 2);
    add_trainers(&mut state, &a, Some("n-a"), 2);
    add_trainers(&mut state, &a, None, 1);
    let slot = state.job(&a).unwrap();
    assert_eq!(
        removals(&state, slot, 4),
        vec![
            removal(&state, None, 1),
            removal(&state, Some("n-a"), 2),
            removal(&state, Some("n-b"), 1)
        ]
    );
    assert_eq!(removals(&state, slot, 1), vec![removal(&state, None, 1)]);
    assert!(removals(&state, slot, 0).is_empty());
}

#[test]
fn iteration_cap_ends_a_zero_request_gpu_livelock() {
    // §5.1.1: no CPU or memory to drain, so +1 (4 - 3 >= 1) and −1 (4 > int(4 * 0.97) = 3)
    // alternate forever. Each +1 takes one of the node's pod slots and, like its CPU in the
    // original, the −1 gives none back (deviation 4): the node takes 2^16 pods, more than the
    // iterations.
    let mut state = ClusterState::new();
    add_node(&mut state, "n1", "10", "10G", 4);
    state.set_node_traits(
        "n1",
        crate::cluster::filters::NodeTraits {
            name: "n1".into(),
            ready: true,
            max_pods: Some(1 << 16),
            ..Default::default()
        },
    );
    let a = running(&mut state, "a", (1, 10, 3), ["1", "0", "0"]);
    add_trainers(&mut state, &a, Some("n1"), 3);
    let plan = planner::plan(
        &state,
        &config(0.97, PlannerConfig::default().edl_iteration_cap),
    );
    assert_eq!(outcome(&plan), vec![("a", 3, Reason::NoFit)]);
    assert_eq!(plan.warnings.len(), 1);
    assert!(plan.warnings[0].contains("10000 outer iterations"));
    let plan = run(&state, 0.97, 7);
    assert_eq!(outcome(&plan), vec![("a", 3, Reason::NoFit)]);
    assert!(plan.warnings[0].contains("within 7 outer"));
    // On a node of the default 110 pods the slots run out first, and the run settles.
    state.set_node_traits(
        "n1",
        crate::cluster::filters::NodeTraits {
            name: "n1".into(),
            ready: true,
            ..Default::default()
        },
    );
    let plan = run(&state, 0.97, 10_000);
    assert_eq!(outcome(&plan), vec![("a", 3, Reason::NoFit)]);
    assert!(plan.warnings.is_empty());
}
