//! Kueue's quota as capacity, on hand-made clusters: every Kueue-managed job within its
//! ClusterQueue's quota and what it may borrow in its cohort, max-min fair within and across
//! queues, a job stopped by quota saying which queue and resource, a pending scale-up kept as it
//! is, every policy within quota, and nothing changed without Kueue objects.

mod common;

use common::*;
use serde_json::json;
use trainscale::api::kueue::ClusterQueue;
use trainscale::api::{JobKey, JobKind, PyTorchJob};
use trainscale::cluster::ClusterState;
use trainscale::daemon::sizing::verdicts;
use trainscale::planner::explain::explain_all;
use trainscale::planner::{KueueNote, PlannerConfig, Policy, Reason, ScalePlan, plan};
use trainscale::testkit::kueue::{
    bind_workers, cluster_queue, local_queue, pytorch_job, pytorch_job_json, resource_flavor,
    workload, workload_json,
};

/// One GPU worker: 1 CPU, 4Gi, 1 GPU.
const WORKER: (&str, &str, &str) = ("1", "4Gi", "1");
const PER_POD: &[(&str, &str)] = &[("cpu", "1"), ("memory", "4Gi"), ("nvidia.com/gpu", "1")];

fn key(name: &str) -> JobKey {
    JobKey::of_kind(JobKind::PyTorchJob, "ml", name)
}

fn config(policy: Policy) -> PlannerConfig {
    PlannerConfig {
        policy,
        ..PlannerConfig::default()
    }
}

/// A ClusterQueue of flavor `default` with `gpus` GPUs (borrowing limit `borrow`) and ample
/// CPU and memory.
fn gpu_queue(name: &str, cohort: Option<&str>, gpus: &str, borrow: Option<&str>) -> ClusterQueue {
    cluster_queue(
        name,
        cohort,
        "default",
        &[
            ("cpu", "1000", None, None),
            ("memory", "4000Gi", None, None),
            ("nvidia.com/gpu", gpus, borrow, None),
        ],
    )
}

/// Four nodes of 16 CPUs, 64 GiB and 8 GPUs; flavor `default`; the queues; LocalQueue `ml/<cq>`
/// for each.
fn cluster(queues: &[ClusterQueue]) -> ClusterState {
    let mut s = ClusterState::new();
    for n in 0..4 {
        add_node(&mut s, &format!("n{n}"), 16_000, 64, 8);
    }
    s.apply_resource_flavor(&resource_flavor("default"))
        .unwrap();
    for cq in queues {
        s.apply_cluster_queue(cq).unwrap();
        let name = cq.metadata.name.as_deref().unwrap();
        s.apply_local_queue(&local_queue("ml", name, name)).unwrap();
    }
    s
}

/// A PyTorchJob in queue `cq` of `current` workers (`min..=max`), admitted for them and
/// running on `n0`.
fn admitted_job(s: &mut ClusterState, name: &str, sizes: (i32, i32, i32), cq: &str) {
    admitted_on(s, name, sizes, cq, "n0");
}

fn target(p: &ScalePlan, name: &str) -> i32 {
    p.job(&key(name)).unwrap().target
}

fn reason(p: &ScalePlan, name: &str) -> Reason {
    p.job(&key(name)).unwrap().reason
}

/// GPUs the plan's jobs in `cq` hold at their targets.
fn gpus_in(s: &ClusterState, p: &ScalePlan, cq: &str) -> i32 {
    p.jobs
        .iter()
        .filter(|j| {
            s.quota()
                .job(&j.key)
                .is_some_and(|k| &*k.cluster_queue == cq)
        })
        .map(|j| j.target)
        .sum()
}

fn message(s: &ClusterState, p: &ScalePlan, config: &PlannerConfig, name: &str) -> String {
    let i = p.jobs.iter().position(|j| *j.key == key(name)).unwrap();
    explain_all(s, p, config).swap_remove(i).message
}

#[test]
fn jobs_share_their_cohort_max_min_fair_within_quota_and_borrowing() {
    // team-a: 8 GPUs; team-b: 4. 32 GPUs of nodes: only the quota holds the jobs back.
    let mut s = cluster(&research());
    for (name, cq) in [("a1", "team-a"), ("a2", "team-a"), ("b1", "team-b")] {
        admitted_job(&mut s, name, (1, 8, 2), cq);
    }
    let p = plan(&s, &PlannerConfig::default());
    // 12 GPUs in the cohort: four each, whatever queue a job is in.
    for name in ["a1", "a2", "b1"] {
        assert_eq!(target(&p, name), 4, "{name}");
        assert_eq!(reason(&p, name), Reason::QuotaExhausted, "{name}");
    }
    assert_eq!(
        p.job(&key("b1")).unwrap().kueue.as_deref(),
        Some(&KueueNote::QuotaExhausted {
            cluster_queue: "team-b".into(),
            flavor: "default".into(),
            resource: "nvidia.com/gpu".into(),
        })
    );
    assert_eq!(
        (gpus_in(&s, &p, "team-a"), gpus_in(&s, &p, "team-b")),
        (8, 4)
    );
    let m = message(&s, &p, &PlannerConfig::default(), "b1");
    assert_eq!(
        m,
        "grows 2 → 4, then ClusterQueue team-b: nvidia.com/gpu quota exhausted (4 of 4 used, \
         may borrow 0 more in cohort research; a worker needs 1)"
    );

    // team-b alone wants more: it borrows what team-a leaves unused, up to its limit.
    let mut s = cluster(&[
        gpu_queue("team-a", Some("research"), "8", None),
        gpu_queue("team-b", Some("research"), "4", Some("3")),
    ]);
    admitted_job(&mut s, "a1", (2, 2, 2), "team-a");
    admitted_job(&mut s, "b1", (1, 16, 2), "team-b");
    let p = plan(&s, &PlannerConfig::default());
    assert_eq!(target(&p, "b1"), 7);
    assert_eq!(
        message(&s, &p, &PlannerConfig::default(), "b1"),
        "grows 2 → 7, then ClusterQueue team-b: nvidia.com/gpu quota exhausted (7 of 4 used, \
         may borrow 0 more in cohort research; a worker needs 1)"
    );
}

#[test]
fn within_a_queue_the_least_fulfilled_job_gets_quota_first() {
    let mut s = cluster(&[gpu_queue("team-a", None, "6", None)]);
    // a1 at 1 of 1..4 (fulfillment 0), a2 at 3 of 1..10 (2/9): two GPUs left.
    admitted_job(&mut s, "a1", (1, 4, 1), "team-a");
    admitted_job(&mut s, "a2", (1, 10, 3), "team-a");
    let p = plan(&s, &PlannerConfig::default());
    assert_eq!((target(&p, "a1"), target(&p, "a2")), (2, 4));
    let m = message(&s, &p, &PlannerConfig::default(), "a2");
    assert_eq!(
        m,
        "grows 3 → 4, then ClusterQueue team-a: nvidia.com/gpu quota exhausted (6 of 6 used; \
         no cohort to borrow from; a worker needs 1)"
    );
}

#[test]
fn a_queue_at_its_quota_does_not_grow_and_says_so_in_its_condition() {
    let mut s = cluster(&[gpu_queue("team-a", None, "4", None)]);
    admitted_job(&mut s, "a1", (1, 8, 4), "team-a");
    for policy in [
        Policy::Fulfillment,
        Policy::Goodput,
        Policy::Edl,
        Policy::Static,
    ] {
        let config = config(policy);
        let p = plan(&s, &config);
        let j = p.job(&key("a1")).unwrap();
        assert_eq!(j.target, 4, "{policy:?}");
        if policy == Policy::Static {
            // Static never grows a job: nothing for the quota to stop.
            continue;
        }
        assert_eq!(j.reason, Reason::QuotaExhausted, "{policy:?}");
        let [_, limited] = verdicts(j, &[]);
        assert_eq!(limited, ("ScalingLimited", "True", "QuotaExhausted"));
        assert_eq!(
            message(&s, &p, &config, "a1"),
            "at 4 of max 8: ClusterQueue team-a: nvidia.com/gpu quota exhausted (4 of 4 used; \
             no cohort to borrow from; a worker needs 1)"
        );
    }
}

#[test]
fn a_pending_scale_up_keeps_its_size_and_its_claim_on_the_quota() {
    let mut s = cluster(&[gpu_queue("team-a", None, "8", None)]);
    admitted_job(&mut s, "a1", (1, 8, 2), "team-a");
    // a2 asks 5: Kueue admitted 2, the slice for 5 waits.
    admitted_job(&mut s, "a2", (1, 8, 2), "team-a");
    s.apply_job(&pytorch_job("ml", "a2", (1, 8, 5), Some("team-a"), WORKER))
        .unwrap();
    let mut slice = workload_json("a2-2", &key("a2"), 5, PER_POD, None);
    slice["metadata"]["annotations"] =
        json!({"kueue.x-k8s.io/workload-slice-replacement-for": "ml/a2-1"});
    s.apply_workload(&serde_json::from_value(slice).unwrap())
        .unwrap();
    let config = PlannerConfig::default();
    let p = plan(&s, &config);
    let a2 = p.job(&key("a2")).unwrap();
    assert_eq!((a2.target, a2.reason), (5, Reason::AwaitingAdmission));
    let [_, limited] = verdicts(a2, &[]);
    assert_eq!(limited, ("ScalingLimited", "True", "AwaitingAdmission"));
    assert_eq!(
        message(&s, &p, &config, "a2"),
        "keeps 5: its scale-up waits for Kueue to admit Workload a2-2 (ClusterQueue team-a; \
         2 of 5 workers admitted)"
    );
    // The 3 GPUs a2's slice waits for are not given to a1: 8 − 5 = 3 for it.
    assert_eq!(target(&p, "a1"), 3);
    // edl and static keep it too.
    for policy in [Policy::Edl, Policy::Static] {
        let p = plan(&s, &self::config(policy));
        let a2 = p.job(&key("a2")).unwrap();
        assert_eq!((a2.target, a2.reason), (5, Reason::AwaitingAdmission));
        assert!(target(&p, "a1") <= 3, "{policy:?}");
    }
}

#[test]
fn quota_no_node_can_use_goes_to_the_jobs_quota_stopped() {
    // team-a: 8 GPUs, 2 in use. a1's workers need 9 CPUs each: n0 holds its one, other pods
    // hold 10 CPUs of n2 and n3, so only n1 takes another. The fair split of the 6 left gives
    // a1 3 (of the 4 its shape could have on empty nodes) and a2 5 (of 8); a1 can use only 2,
    // and a2 gets the third.
    let mut s = cluster(&[gpu_queue("team-a", None, "8", None)]);
    let big = ("9", "4Gi", "1");
    let job = pytorch_job("ml", "a1", (1, 8, 1), Some("team-a"), big);
    s.apply_job(&job).unwrap();
    let per_pod: &[(&str, &str)] = &[("cpu", "9"), ("memory", "4Gi"), ("nvidia.com/gpu", "1")];
    let wl = workload(
        "a1-1",
        &key("a1"),
        1,
        per_pod,
        Some(("team-a", "default", 1)),
    );
    s.apply_workload(&wl).unwrap();
    bind_workers(&mut s, &key("a1"), "n0", 0, 1, big);
    admitted_job(&mut s, "a2", (1, 8, 1), "team-a");
    for node in ["n2", "n3"] {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("other-{node}"), "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c",
                "resources": {"requests": {"cpu": "10"}}}]},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        s.apply_pod(&pod).unwrap();
    }
    let p = plan(&s, &PlannerConfig::default());
    assert_eq!((target(&p, "a1"), target(&p, "a2")), (2, 6));
    assert_eq!(reason(&p, "a2"), Reason::QuotaExhausted);
    // a1 grew as far as nodes let it: no quota note.
    assert_eq!(reason(&p, "a1"), Reason::ScaleUp);
    assert!(p.job(&key("a1")).unwrap().kueue.is_none());
    assert_eq!(gpus_in(&s, &p, "team-a"), 8);
}

#[test]
fn without_kueue_objects_the_plan_is_unchanged() {
    let build = |labelled: bool, kueue: bool| {
        let mut s = ClusterState::new();
        for n in 0..4 {
            add_node(&mut s, &format!("n{n}"), 16_000, 64, 8);
        }
        for (name, sizes) in [("a1", (1, 8, 2)), ("a2", (2, 12, 3)), ("a3", (1, 4, 1))] {
            let queue = labelled.then_some("team-a");
            s.apply_job(&pytorch_job("ml", name, sizes, queue, WORKER))
                .unwrap();
            bind_workers(&mut s, &key(name), "n1", 0, sizes.2 as usize, WORKER);
        }
        if kueue {
            // A Workload alone (no ClusterQueue) makes no quota.
            let wl = workload(
                "a1-1",
                &key("a1"),
                2,
                PER_POD,
                Some(("team-a", "default", 2)),
            );
            s.apply_workload(&wl).unwrap();
        }
        s
    };
    let plain = build(false, false);
    let labelled = build(true, true);
    for policy in [
        Policy::Fulfillment,
        Policy::Goodput,
        Policy::Edl,
        Policy::Static,
    ] {
        let summary = |s: &ClusterState| {
            plan(s, &config(policy))
                .jobs
                .iter()
                .map(|j| {
                    (
                        j.key.name.to_string(),
                        j.target,
                        j.reason,
                        j.placements.len(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(summary(&plain), summary(&labelled), "{policy:?}");
    }
}

#[test]
fn plan_on_a_dump_sizes_kueue_jobs_within_their_quota() {
    // tests/fixtures/kueue-dump.json: three nodes of 8 GPUs; ClusterQueues team-a (8 GPUs) and
    // team-b (2) in cohort research; PyTorchJobs alpha and beta (team-a) and gamma (team-b) at 2
    // workers, admitted; delta (team-b) waiting for quota; free, not Kueue's.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .args([
            "plan",
            "--snapshot",
            "tests/fixtures/kueue-dump.json",
            "--output",
            "json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let job = |name: &str| {
        plan["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == name)
            .unwrap_or_else(|| panic!("{name} not planned: {stdout}"))
            .clone()
    };
    // 10 GPUs in the cohort, 6 in use: team-a's jobs take its 8 (what a queue lends is its own
    // again when its jobs want it); gamma gives one of team-b's 2 to delta, its queue-mate whose
    // Workload waits (a waiting job comes before growth above min).
    for (name, target, cq) in [("alpha", 4, "team-a"), ("beta", 4, "team-a")] {
        let j = job(name);
        assert_eq!(j["target"], target, "{name}: {j}");
        assert_eq!(j["reason"], "quota_exhausted", "{name}");
        assert_eq!(
            j["kueue"],
            json!({"kind": "quota_exhausted", "cluster_queue": cq, "flavor": "a100",
                   "resource": "nvidia.com/gpu"})
        );
    }
    let gamma = job("gamma");
    assert_eq!(
        (gamma["target"].clone(), gamma["reason"].clone()),
        (json!(1), json!("reclaimed"))
    );
    assert_eq!(
        gamma["kueue"],
        json!({"kind": "reclaimed", "cluster_queue": "team-b", "cohort": "research",
               "resource": "nvidia.com/gpu", "borrowing": false})
    );
    assert!(
        gamma["message"]
            .as_str()
            .unwrap()
            .starts_with("gives back nvidia.com/gpu quota (2 → 1) to Workloads waiting in its own ClusterQueue team-b"),
        "{gamma}"
    );
    assert_eq!(
        job("alpha")["message"],
        "grows 2 → 4, then ClusterQueue team-a: nvidia.com/gpu quota exhausted (8 of 8 used, \
         may borrow 0 more in cohort research; a worker needs 1)"
    );
    // Not Kueue's: only the nodes hold it.
    assert_eq!(
        (job("free")["target"].clone(), job("free")["reason"].clone()),
        (json!(4), json!("scale_up"))
    );
    assert!(job("free").get("kueue").is_none());
    assert_eq!(
        plan["left_alone"],
        json!([{"kind": "PyTorchJob", "namespace": "ml", "name": "delta",
                "field": "status.admission of its Workload",
                "message": "not admitted by Kueue (ClusterQueue team-b): its Workload waits for quota"}])
    );
}

#[test]
fn a_resource_the_queue_does_not_cover_stops_growth_and_is_named() {
    // The queue covers CPU, memory and GPUs; the admitted Workload's pods also request an FPGA
    // (the queue's coverage changed since): Kueue would admit no scale-up slice.
    let mut s = cluster(&[gpu_queue("team-a", None, "8", None)]);
    s.apply_job(&pytorch_job("ml", "a1", (1, 8, 2), Some("team-a"), WORKER))
        .unwrap();
    let per_pod: &[(&str, &str)] = &[
        ("cpu", "1"),
        ("memory", "4Gi"),
        ("nvidia.com/gpu", "1"),
        ("example.com/fpga", "1"),
    ];
    let wl = workload(
        "a1-1",
        &key("a1"),
        2,
        per_pod,
        Some(("team-a", "default", 2)),
    );
    s.apply_workload(&wl).unwrap();
    bind_workers(&mut s, &key("a1"), "n0", 0, 2, WORKER);
    let config = PlannerConfig::default();
    let p = plan(&s, &config);
    let a1 = p.job(&key("a1")).unwrap();
    assert_eq!((a1.target, a1.reason), (2, Reason::QuotaExhausted));
    assert_eq!(
        a1.kueue.as_deref(),
        Some(&KueueNote::NotCovered {
            cluster_queue: "team-a".into(),
            resource: "example.com/fpga".into(),
            flavor: None,
        })
    );
    assert_eq!(
        message(&s, &p, &config, "a1"),
        "at 2 of max 8: ClusterQueue team-a has no example.com/fpga quota: Kueue admits no more \
         of its workers, which request example.com/fpga"
    );
}

// ---------------------------------------------------------------------------------------------
// Borrowed quota given back: to a lender's waiting Workload, and to a lender's growing jobs.

/// A PyTorchJob in queue `cq` of `current` workers (`min..=max`), admitted for them and
/// running on `node`.
fn admitted_on(
    s: &mut ClusterState,
    name: &str,
    (min, max, current): (i32, i32, i32),
    cq: &str,
    node: &str,
) {
    let job = pytorch_job("ml", name, (min, max, current), Some(cq), WORKER);
    s.apply_job(&job).unwrap();
    let wl = workload(
        &format!("{name}-1"),
        &key(name),
        current,
        PER_POD,
        Some((cq, "default", current)),
    );
    s.apply_workload(&wl).unwrap();
    bind_workers(s, &key(name), node, 0, current as usize, WORKER);
}

/// A PyTorchJob of `asked` workers whose Workload waits in LocalQueue `ml/<cq>`.
fn waiting_job(s: &mut ClusterState, name: &str, asked: i32, cq: &str) {
    let job = pytorch_job("ml", name, (1, asked, asked), Some(cq), WORKER);
    s.apply_job(&job).unwrap();
    let mut wl = workload_json(&format!("{name}-1"), &key(name), asked, PER_POD, None);
    wl["spec"]["queueName"] = json!(cq);
    s.apply_workload(&serde_json::from_value(wl).unwrap())
        .unwrap();
}

/// ClusterQueues team-a (8 GPUs) and team-b (4) in cohort research.
fn research() -> [ClusterQueue; 2] {
    [
        gpu_queue("team-a", Some("research"), "8", None),
        gpu_queue("team-b", Some("research"), "4", None),
    ]
}

/// team-a (8 GPUs) holds 12 in cohort research (a1 at 8, a2 at 4: 4 borrowed); team-b (4) is
/// unused and its Workload of 3 (b1) waits.
fn lender_waits() -> ClusterState {
    let mut s = cluster(&research());
    admitted_on(&mut s, "a1", (1, 8, 8), "team-a", "n0");
    admitted_on(&mut s, "a2", (1, 8, 4), "team-a", "n1");
    waiting_job(&mut s, "b1", 3, "team-b");
    s
}

#[test]
fn a_borrowing_queue_gives_back_what_a_lenders_waiting_workload_needs() {
    // team-a: 8 GPUs, holding 12 (4 borrowed); team-b: 4, unused, its Workload of 3 waits.
    let mut s = lender_waits();
    let config = PlannerConfig::default();
    let p = plan(&s, &config);
    assert!(p.job(&key("b1")).is_none(), "a waiting job is left alone");
    // The most served job gives the 3 GPUs back; the cohort's 12 then hold team-a's 9 and the
    // Workload's 3.
    assert_eq!((target(&p, "a1"), target(&p, "a2")), (5, 4));
    assert_eq!(reason(&p, "a1"), Reason::Reclaimed);
    // a2 would grow, but the quota holds it.
    assert_eq!(reason(&p, "a2"), Reason::QuotaExhausted);
    assert_eq!(
        p.job(&key("a1")).unwrap().kueue.as_deref(),
        Some(&KueueNote::Reclaimed {
            cluster_queue: "team-a".into(),
            cohort: Some("research".into()),
            resource: "nvidia.com/gpu".into(),
            borrowing: true,
            lending: false,
        })
    );
    let why = message(&s, &p, &config, "a1");
    assert!(
        why.starts_with(
            "gives back nvidia.com/gpu quota ClusterQueue team-a borrows (8 → 5): queues of \
             cohort research need their nominal quota"
        ),
        "{why}"
    );
    // Once Kueue admits it, nothing more is given back.
    let mut wl = workload_json(
        "b1-1",
        &key("b1"),
        3,
        PER_POD,
        Some(("team-b", "default", 3)),
    );
    wl["spec"]["queueName"] = json!("team-b");
    s.apply_workload(&serde_json::from_value(wl).unwrap())
        .unwrap();
    let a1 = pytorch_job("ml", "a1", (1, 8, 5), Some("team-a"), WORKER);
    s.apply_job(&a1).unwrap();
    s.apply_workload(&workload(
        "a1-1",
        &key("a1"),
        5,
        PER_POD,
        Some(("team-a", "default", 5)),
    ))
    .unwrap();
    let p = plan(&s, &config);
    assert_eq!(reason(&p, "a1"), Reason::QuotaExhausted);
    assert_eq!(gpus_in(&s, &p, "team-a") + gpus_in(&s, &p, "team-b"), 12);
}

#[test]
fn a_shrink_kueue_has_not_applied_yet_is_not_taken_back_the_next_pass() {
    // As above: a1 gave 3 GPUs back for team-b's waiting Workload, and the next pass runs
    // after its Job says 5 but before Kueue updated its Workload (still 8 admitted) or
    // admitted b1. The 3 are the Workload's: a1 must not grow into them again.
    let mut s = lender_waits();
    let config = PlannerConfig::default();
    assert_eq!(target(&plan(&s, &config), "a1"), 5);
    let a1 = pytorch_job("ml", "a1", (1, 8, 5), Some("team-a"), WORKER);
    s.apply_job(&a1).unwrap();
    let p = plan(&s, &config);
    assert_eq!((target(&p, "a1"), target(&p, "a2")), (5, 4));
    assert_eq!(reason(&p, "a2"), Reason::QuotaExhausted);
}

#[test]
fn nothing_is_given_back_below_min_within_nominal_or_without_a_waiting_workload() {
    let queues = research();
    // team-a borrows 4 with jobs at their min: Kueue may preempt them; trainscale does not.
    let mut s = cluster(&queues);
    admitted_on(&mut s, "a1", (8, 10, 8), "team-a", "n0");
    admitted_on(&mut s, "a2", (4, 8, 4), "team-a", "n1");
    waiting_job(&mut s, "b1", 3, "team-b");
    let p = plan(&s, &PlannerConfig::default());
    assert_eq!((target(&p, "a1"), target(&p, "a2")), (8, 4));
    // A Workload that must borrow more than the cohort's jobs above min could give holds
    // nothing: no job shrinks for a start that cannot come.
    let mut s = cluster(&queues);
    admitted_on(&mut s, "a1", (7, 8, 8), "team-a", "n0");
    admitted_on(&mut s, "a2", (3, 8, 4), "team-a", "n1");
    waiting_job(&mut s, "b1", 5, "team-b");
    let p = plan(&s, &PlannerConfig::default());
    assert_eq!((target(&p, "a1"), target(&p, "a2")), (8, 4));
    // team-a within its nominal quota keeps it, whatever waits in team-b; team-b's own job
    // above min makes room in team-b's quota for its queue-mate.
    let mut s = cluster(&queues);
    admitted_on(&mut s, "a1", (1, 8, 8), "team-a", "n0");
    admitted_on(&mut s, "b2", (1, 4, 4), "team-b", "n1");
    waiting_job(&mut s, "b1", 3, "team-b");
    let p = plan(&s, &PlannerConfig::default());
    assert_eq!((target(&p, "a1"), target(&p, "b2")), (8, 1));
    assert_eq!(
        p.job(&key("b2")).unwrap().kueue.as_deref(),
        Some(&KueueNote::Reclaimed {
            cluster_queue: "team-b".into(),
            cohort: Some("research".into()),
            resource: "nvidia.com/gpu".into(),
            borrowing: false,
            lending: false,
        })
    );
}

#[test]
fn a_workload_that_must_borrow_gets_room_from_jobs_above_min_borrowers_first() {
    let queues = research();
    // team-a borrows 4 of team-b's; b1 asks 5, more than team-b's nominal 4: admitted only by
    // borrowing 1, which team-a's jobs above min can give. The borrower gives all 5.
    let mut s = cluster(&queues);
    admitted_on(&mut s, "a1", (1, 8, 8), "team-a", "n0");
    admitted_on(&mut s, "a2", (1, 8, 4), "team-a", "n1");
    waiting_job(&mut s, "b1", 5, "team-b");
    let p = plan(&s, &PlannerConfig::default());
    assert_eq!(target(&p, "a1") + target(&p, "a2"), 7);
    assert_eq!(reason(&p, "a1"), Reason::Reclaimed);
    // team-a within its nominal quota, team-b at its own with a job at min: b1 (2) must
    // borrow, and only team-a's growth above min can make room. A job waiting to start comes
    // before growth above min, across the cohort as within a queue.
    let mut s = cluster(&queues);
    admitted_on(&mut s, "a1", (1, 8, 8), "team-a", "n0");
    admitted_on(&mut s, "b2", (4, 4, 4), "team-b", "n1");
    waiting_job(&mut s, "b1", 2, "team-b");
    let config = PlannerConfig::default();
    let p = plan(&s, &config);
    // (b2, at min = max, is not elastic: the plan leaves it out.)
    assert!(p.job(&key("b2")).is_none());
    assert_eq!(target(&p, "a1"), 6);
    assert_eq!(
        p.job(&key("a1")).unwrap().kueue.as_deref(),
        Some(&KueueNote::Reclaimed {
            cluster_queue: "team-a".into(),
            cohort: Some("research".into()),
            resource: "nvidia.com/gpu".into(),
            borrowing: false,
            lending: true,
        })
    );
    let why = message(&s, &p, &config, "a1");
    assert!(
        why.starts_with(
            "gives back nvidia.com/gpu quota of ClusterQueue team-a (8 → 6) to Workloads of \
             cohort research waiting to start"
        ),
        "{why}"
    );
    // When team-b's own job is above min, team-b gives first, down to its min (3 of b1's 6),
    // and team-a lends only the rest.
    let mut s = cluster(&queues);
    admitted_on(&mut s, "a1", (1, 8, 8), "team-a", "n0");
    admitted_on(&mut s, "b2", (1, 4, 4), "team-b", "n1");
    waiting_job(&mut s, "b1", 6, "team-b");
    let p = plan(&s, &PlannerConfig::default());
    assert_eq!((target(&p, "a1"), target(&p, "b2")), (5, 1));
}

#[test]
fn a_lenders_growing_job_takes_its_nominal_quota_back_from_a_borrower() {
    // team-b uses 1 of its 4; team-a borrows the other 3. b2 wants to grow to 4.
    let mut s = cluster(&research());
    admitted_on(&mut s, "a1", (1, 8, 8), "team-a", "n0");
    admitted_on(&mut s, "a2", (1, 8, 3), "team-a", "n1");
    admitted_on(&mut s, "b2", (1, 4, 1), "team-b", "n2");
    let p = plan(&s, &PlannerConfig::default());
    assert_eq!(gpus_in(&s, &p, "team-a"), 8);
    assert_eq!(target(&p, "b2"), 4);
    assert_eq!(reason(&p, "a1"), Reason::Reclaimed);
    // `edl` grows b2 by the same ceilings, so it gives the same quota back (it grew b2 and
    // kept a1 at 8 before: the cohort 3 GPUs over).
    let p = plan(&s, &config(Policy::Edl));
    assert_eq!(target(&p, "b2"), 4);
    assert_eq!(gpus_in(&s, &p, "team-a"), 8);
    assert_eq!(reason(&p, "a1"), Reason::Reclaimed);
    // Without a cohort nothing is borrowed, so nothing goes back.
    let mut s = cluster(&[
        gpu_queue("team-a", None, "11", None),
        gpu_queue("team-b", None, "4", None),
    ]);
    admitted_on(&mut s, "a1", (1, 8, 8), "team-a", "n0");
    admitted_on(&mut s, "a2", (1, 8, 3), "team-a", "n1");
    admitted_on(&mut s, "b2", (1, 4, 1), "team-b", "n2");
    let p = plan(&s, &PlannerConfig::default());
    assert_eq!((target(&p, "a1"), target(&p, "a2")), (8, 3));
    assert_eq!(target(&p, "b2"), 4);
}

#[test]
fn progress_gives_quota_no_job_wants_at_its_threshold_to_its_spare_sizes() {
    // Queue "a": 8 GPUs. "j" declares a curve whose 2nd trainer adds 0.9 and every later one
    // 0.8 (useful size 2 at 0.9, spare size 8 at 0.8); "k" is linear, max 4. Neither reports
    // progress (both taken to have as long left as they have existed: equal, "j" first by
    // name). The nodes hold 32 GPUs: quota is the limit.
    let mut s = cluster(&[gpu_queue("a", None, "8", None)]);
    let mut j = pytorch_job_json("ml", "j", (1, 8, 1), Some("a"), WORKER);
    j["metadata"]["annotations"] = json!({"trainscale.io/speedup": "1:1,2:1.9,4:3.5"});
    s.apply_job(&serde_json::from_value::<PyTorchJob>(j).unwrap())
        .unwrap();
    let wl = workload("j-1", &key("j"), 1, PER_POD, Some(("a", "default", 1)));
    s.apply_workload(&wl).unwrap();
    bind_workers(&mut s, &key("j"), "n0", 0, 1, WORKER);
    admitted_job(&mut s, "k", (1, 4, 1), "a");
    let progress = PlannerConfig {
        now: 1_767_229_200, // 2026-01-01T01:00:00Z
        ..config(Policy::Progress)
    };
    // Without the spare stage: 2 and 4, two GPUs of quota idle.
    let no_spare = PlannerConfig {
        progress_spare_min_marginal_speedup: 0.9,
        ..progress.clone()
    };
    let p = plan(&s, &no_spare);
    assert_eq!((target(&p, "j"), target(&p, "k")), (2, 4));
    // With it "j" takes the two no job wants at 0.9, within the queue's 8.
    let p = plan(&s, &progress);
    assert_eq!((target(&p, "j"), target(&p, "k")), (4, 4));
    assert_eq!(gpus_in(&s, &p, "a"), 8);
}

#[test]
fn quota_beyond_what_the_nodes_hold_leaves_fairness_as_without_kueue() {
    // Eight jobs (1..=64 workers, at 1) on 32 GPUs; team-a's 100 GPUs are more than the nodes
    // hold. Water-filled in quota, each would stop near 12 workers, a level that moves with
    // what every job could ask; the nodes give each 4. Fulfillment counts against the nodes,
    // as without Kueue (it used to count against the quota level, so jobs whose fulfillments
    // crossed traded a worker back and forth between passes).
    let build = |queue: Option<&str>| {
        let mut s = cluster(&[gpu_queue("team-a", None, "100", None)]);
        for i in 0..8 {
            let name = format!("j{i}");
            s.apply_job(&pytorch_job("ml", &name, (1, 64, 1), queue, WORKER))
                .unwrap();
            if let Some(cq) = queue {
                let admitted = Some((cq, "default", 1));
                s.apply_workload(&workload(
                    &format!("{name}-1"),
                    &key(&name),
                    1,
                    PER_POD,
                    admitted,
                ))
                .unwrap();
            }
            bind_workers(&mut s, &key(&name), &format!("n{}", i % 4), 0, 1, WORKER);
        }
        s
    };
    let config = PlannerConfig::default();
    let (with, without) = (build(Some("team-a")), build(None));
    let (with, without) = (plan(&with, &config), plan(&without, &config));
    for i in 0..8 {
        let name = format!("j{i}");
        let (a, b) = (
            with.job(&key(&name)).unwrap(),
            without.job(&key(&name)).unwrap(),
        );
        assert_eq!(a.target, 4, "{name}");
        assert_eq!((a.target, a.reason), (b.target, b.reason), "{name}");
        assert_eq!(
            (a.fulfillment_before, a.fulfillment_after),
            (b.fulfillment_before, b.fulfillment_after),
            "{name}"
        );
    }
}

#[test]
fn static_counts_on_no_quota_given_back() {
    // team-a (2 GPUs) borrows 5 of team-b's 7 with j0 at 7; team-b's j1 runs 1 of its min 3.
    // The cohort has 1 GPU unused. `fulfillment` takes j0 down so j1 reaches its min; `static`
    // resizes no running job, so j1's gang of 3 does not fit the quota and waits.
    let mut s = cluster(&[
        gpu_queue("team-a", Some("research"), "2", None),
        gpu_queue("team-b", Some("research"), "7", None),
    ]);
    admitted_on(&mut s, "j0", (1, 7, 7), "team-a", "n0");
    admitted_on(&mut s, "j1", (3, 4, 1), "team-b", "n1");
    let p = plan(&s, &PlannerConfig::default());
    assert_eq!(reason(&p, "j0"), Reason::Reclaimed);
    assert!(target(&p, "j1") >= 3);
    let p = plan(&s, &config(Policy::Static));
    assert_eq!(target(&p, "j1"), 1);
    assert_eq!(reason(&p, "j1"), Reason::QuotaExhausted);
    assert!(p.job(&key("j0")).is_none_or(|j| j.target == 7));
}
