//! Property tests of Kueue's quota as capacity: on random clusters of ClusterQueues (in cohorts
//! or alone, with borrowing and lending limits) and Kueue-managed jobs admitted within them, no
//! plan of any policy takes any queue past its quota and what it may borrow, or any cohort past
//! its total; every plan is deterministic, and a job Kueue has not admitted is never planned.

mod common;

use common::*;
use proptest::prelude::*;
use serde_json::json;
use trainscale::api::{JobKey, JobKind};
use trainscale::cluster::ClusterState;
use trainscale::cluster::quota::QuotaRoom;
use trainscale::planner::{PlannerConfig, Policy, Reason, plan};
use trainscale::testkit::kueue::{
    bind_workers, cluster_queue_json, local_queue, pytorch_job, resource_flavor, workload_json,
};

#[derive(Debug, Clone)]
struct Queue {
    cohort: Option<u8>,
    gpus: i64,
    cpus: i64,
    borrow: Option<i64>,
    lend: Option<i64>,
}

#[derive(Debug, Clone)]
struct Job {
    min: i32,
    max: i32,
    current: i32,
    cpus: i64,
    gpus: i64,
    queue: Option<usize>,
    /// Admitted for one fewer, the scale-up slice waiting.
    slice: bool,
    bound: bool,
}

#[derive(Debug, Clone)]
struct Case {
    nodes: Vec<(i64, i64)>,
    queues: Vec<Queue>,
    jobs: Vec<Job>,
}

fn case() -> impl Strategy<Value = Case> {
    let node = (2i64..=16, 0i64..=8);
    let queue = (
        prop_oneof![Just(None), Just(Some(0u8)), Just(Some(1u8))],
        0i64..=10,
        0i64..=24,
        proptest::option::of(0i64..=6),
        proptest::option::of(0i64..=10),
    )
        .prop_map(|(cohort, gpus, cpus, borrow, lend)| Queue {
            cohort,
            gpus,
            cpus,
            borrow,
            lend: lend.map(|l| l.min(gpus)),
        });
    let job = (
        1i32..=3,
        0i32..=6,
        0i32..=4,
        1i64..=4,
        0i64..=2,
        proptest::option::of(0usize..3),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(min, extra, current, cpus, gpus, queue, slice, bound)| Job {
                min,
                max: min + extra,
                current: current.clamp(1, min + extra),
                cpus,
                gpus,
                queue,
                slice,
                bound,
            },
        );
    (
        proptest::collection::vec(node, 1..=4),
        proptest::collection::vec(queue, 1..=3),
        proptest::collection::vec(job, 1..=6),
    )
        .prop_map(|(nodes, queues, jobs)| Case {
            nodes,
            queues,
            jobs,
        })
}

fn key(i: usize) -> JobKey {
    JobKey::of_kind(JobKind::PyTorchJob, "ml", format!("j{i}"))
}

/// The state of a case. A labelled job is admitted (for its size, or one fewer with the slice
/// for its size waiting) only when its queue has room for its size, as Kueue admits; otherwise
/// its Workload waits.
fn build(case: &Case) -> ClusterState {
    let mut s = ClusterState::new();
    for (i, (cpus, gpus)) in case.nodes.iter().enumerate() {
        add_node(&mut s, &format!("n{i}"), cpus * 1000, 256, *gpus);
    }
    s.apply_resource_flavor(&resource_flavor("default"))
        .unwrap();
    for (i, q) in case.queues.iter().enumerate() {
        let (cpus, gpus) = (q.cpus.to_string(), q.gpus.to_string());
        let borrow = q.borrow.map(|b| b.to_string());
        let lend = q.lend.map(|l| l.to_string());
        let cohort = q.cohort.map(|c| format!("c{c}"));
        let cq = cluster_queue_json(
            &format!("q{i}"),
            cohort.as_deref(),
            "default",
            &[
                ("cpu", &cpus, None, None),
                ("memory", "10000Gi", None, None),
                ("nvidia.com/gpu", &gpus, borrow.as_deref(), lend.as_deref()),
            ],
        );
        s.apply_cluster_queue(&serde_json::from_value(cq).unwrap())
            .unwrap();
        let name = format!("q{i}");
        s.apply_local_queue(&local_queue("ml", &name, &name))
            .unwrap();
    }
    // Workers of waiting slices: (queue, CPUs, GPUs) each.
    let mut claims: Vec<(String, i64, i64)> = Vec::new();
    for (i, j) in case.jobs.iter().enumerate() {
        let queue = j
            .queue
            .filter(|q| *q < case.queues.len())
            .map(|q| format!("q{q}"));
        let (cpu, gpu) = (j.cpus.to_string(), j.gpus.to_string());
        let request = (cpu.as_str(), "1Gi", gpu.as_str());
        let job = pytorch_job(
            "ml",
            &format!("j{i}"),
            (j.min, j.max, j.current),
            queue.as_deref(),
            request,
        );
        s.apply_job(&job).unwrap();
        let per_pod = [
            ("cpu", cpu.as_str()),
            ("memory", "1Gi"),
            ("nvidia.com/gpu", gpu.as_str()),
        ];
        let Some(cq) = queue else {
            if j.bound {
                bind_workers(&mut s, &key(i), "n0", 0, j.current as usize, request);
            }
            continue;
        };
        let slice = j.slice && j.current >= 2;
        let admitted = if slice { j.current - 1 } else { j.current };
        // The room as the Workloads and the waiting slices leave it.
        let fits = {
            let mut room = QuotaRoom::new(s.quota());
            let need = |room: &QuotaRoom, cpus: i64, gpus: i64| -> Vec<(u32, i64)> {
                [("cpu", cpus * 1000), ("nvidia.com/gpu", gpus)]
                    .into_iter()
                    .filter(|(_, a)| *a > 0)
                    .map(|(r, a)| (room.id("default", r).unwrap(), a))
                    .collect()
            };
            for (queue, cpus, gpus) in &claims {
                let q = room.queue(queue).unwrap();
                let claim = need(&room, *cpus, *gpus);
                room.take(q, &claim, 1);
            }
            let q = room.queue(&cq).unwrap();
            room.fit(q, &need(&room, j.cpus, j.gpus)).0 >= i64::from(j.current)
        };
        if fits && slice {
            claims.push((cq.clone(), j.cpus, j.gpus));
        }
        let mut wl = workload_json(
            &format!("j{i}-1"),
            &key(i),
            admitted,
            &per_pod,
            fits.then_some((cq.as_str(), "default", admitted)),
        );
        // Queued in its LocalQueue: one that does not fit waits there (and may be given quota).
        wl["spec"]["queueName"] = serde_json::json!(cq);
        s.apply_workload(&serde_json::from_value(wl).unwrap())
            .unwrap();
        if fits && slice {
            let mut slice = workload_json(&format!("j{i}-2"), &key(i), j.current, &per_pod, None);
            slice["metadata"]["annotations"] =
                json!({"kueue.x-k8s.io/workload-slice-replacement-for": format!("ml/j{i}-1")});
            s.apply_workload(&serde_json::from_value(slice).unwrap())
                .unwrap();
        }
        if fits && j.bound {
            bind_workers(&mut s, &key(i), "n0", 0, admitted as usize, request);
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_plan_takes_a_queue_past_its_quota_or_a_cohort_past_its_total(case in case()) {
        let s = build(&case);
        // As built, every queue is within its quota (pending slices included).
        let mut before = QuotaRoom::new(s.quota());
        for (key, _, _) in s.jobs() {
            if let Some(k) = s.quota().job(key) {
                let q = before.queue(&k.cluster_queue).unwrap();
                let need = before.need(q, &k.worker, Vec::new).unwrap();
                let current = s.job(key).unwrap().current();
                before.take(q, &need, i64::from((current - k.admitted()).max(0)));
            }
        }
        prop_assert_eq!(before.overdrawn(), None, "as built");
        for policy in [Policy::Fulfillment, Policy::Goodput, Policy::Edl, Policy::Static] {
            let config = PlannerConfig { policy, ..PlannerConfig::default() };
            let p = plan(&s, &config);
            prop_assert_eq!(&p, &plan(&s, &config), "{:?} is not deterministic", policy);
            let mut after = QuotaRoom::new(s.quota());
            for job in &p.jobs {
                let Some(k) = s.quota().job(&job.key) else {
                    continue;
                };
                // Never one Kueue has not admitted.
                prop_assert!(s.quota().held(&job.key).is_none());
                let q = after.queue(&k.cluster_queue).unwrap();
                let need = after.need(q, &k.worker, Vec::new).unwrap();
                // As the planned sizes apply: workers beyond the admission are charged, and a
                // shrink frees its workers' quota in place (Kueue updates the Workload), so the
                // same pass may give it to another job (whose slice Kueue admits after).
                let admitted = k.admitted();
                after.take(q, &need, i64::from((job.target - admitted).max(0)));
                after.give(q, &need, i64::from((admitted - job.target).max(0)));
                if job.reason == Reason::AwaitingAdmission {
                    prop_assert_eq!(job.target, job.current);
                }
                // Quota given back shrinks a job, never below its min.
                if job.reason == Reason::Reclaimed {
                    prop_assert!(job.target < job.current && job.target >= job.min, "{:?}", job);
                }
            }
            prop_assert_eq!(after.overdrawn(), None, "{:?}: {:#?}", policy, p.jobs);
        }
    }
}
