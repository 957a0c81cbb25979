//! Simulations with Kueue queues: quota respected at every tick, borrowing within the cohort while
//! the other queue idles, none without a cohort, admission before any pod, and the queue
//! outputs (`queues.csv`, the queue table).

use std::path::{Path, PathBuf};

use trainscale::commands::simulate::simulate;
use trainscale::planner::Policy;
use trainscale::sim::{self, RunResult, Scenario};

const HEADER: &str = "job_id,submit_time_s,orig_timestamp,vc,num_gpus,duration_s,gpu_time_s,application,gpus_per_worker,cpus_per_worker,mem_mib_per_worker,req_workers,min_workers,max_workers,work_worker_s";

/// A trace row: id, submit, VC, min, max, requested workers (1 GPU each), work.
fn row(id: &str, submit: u32, vc: &str, (min, max, req): (u32, u32, u32), work: u32) -> String {
    format!("{id},{submit},-,{vc},{req},0,0,bert,1,10,38147,{req},{min},{max},{work}")
}

/// One 8-GPU node, linear speedup, 60 s ticks, 30 s rescale cost; queues `team-a` (VC `va`)
/// and `team-b` (VC `vb`) of 4 GPUs each; `queues` is the rest of the `queues` section.
fn scenario(dir: &Path, cohort: bool, a_borrowing: &str, rows: &[String]) -> PathBuf {
    std::fs::write(
        dir.join("trace.csv"),
        format!("{HEADER}\n{}\n", rows.join("\n")),
    )
    .unwrap();
    let cohort = if cohort { "  cohort: c\n" } else { "" };
    let text = format!(
        "name: two-queues
cluster:
  node_pools: [{{name: gpu, count: 1, cpu: 80, memory: 320Gi, gpus: 8}}]
trace: {{path: trace.csv, format: philly-pollux}}
speedup: {{model: linear}}
interval_s: 60
rescale_cost_s: 30
queues:
{cohort}  queues:
    - {{name: team-a, vcs: [va], gpus: 4{a_borrowing}}}
    - {{name: team-b, vcs: [vb], gpus: 4}}
"
    );
    let path = dir.join("scenario.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn run(path: &Path, policies: &[Policy]) -> Vec<RunResult> {
    let scenario = Scenario::load(path).unwrap();
    let (jobs, speedup) = sim::load_inputs(&scenario).unwrap();
    sim::run_policies(&scenario, &jobs, &speedup, policies, &mut |_, _, _| {})
}

/// `a` (team-a, elastic 1..8, long) arrives first; `b` (team-b, 2 workers) at 600 s.
fn jobs() -> Vec<String> {
    vec![
        row("a", 0, "va", (1, 8, 1), 6 * 3600),
        row("b", 600, "vb", (2, 2, 2), 1200),
    ]
}

/// Per tick: GPUs admitted to team-a and team-b, and whether each queue's bound GPUs are within
/// what it has admitted.
fn admitted(r: &RunResult) -> Vec<(f64, i64, i64)> {
    r.samples
        .iter()
        .map(|s| {
            assert_eq!(s.queues.len(), 2);
            for q in &s.queues {
                assert!(q.bound <= q.admitted, "{}: {:?}", s.time_s, s.queues);
            }
            (s.time_s, s.queues[0].admitted, s.queues[1].admitted)
        })
        .collect()
}

/// In a cohort with a borrowing limit of 2, team-a grows into team-b's idle quota up to 6 GPUs,
/// never more; team-b's job is admitted into the 2 GPUs left as soon as it arrives.
#[test]
fn a_queue_borrows_what_the_other_leaves_up_to_its_borrowing_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario(dir.path(), true, ", borrowing_limit: 2", &jobs());
    for r in run(&path, &[Policy::Fulfillment, Policy::Goodput, Policy::Edl]) {
        let policy = r.policy.as_str();
        let ticks = admitted(&r);
        for &(t, a, b) in &ticks {
            assert!(a <= 6, "{policy} at {t}: team-a holds {a} > 4 + 2");
            assert!(a + b <= 8, "{policy} at {t}: the cohort holds {}", a + b);
        }
        // Borrowing used while team-b idles (before b arrives at 600 s).
        assert!(
            ticks.iter().any(|&(t, a, b)| t < 600.0 && b == 0 && a == 6),
            "{policy}: {ticks:?}"
        );
        // b is admitted at the first tick after its arrival and runs at once.
        assert_eq!(r.jobs[1].start_s, Some(600.0), "{policy}");
        assert!(r.jobs.iter().all(|j| j.finish_s.is_some()), "{policy}");
        assert_eq!(r.queues[0].deferred_scale_ups, 0, "{policy}");
        assert_eq!(r.queues[1].deferred_scale_ups, 0, "{policy}");
        assert_eq!(
            r.jobs.iter().map(|j| j.queue).collect::<Vec<_>>(),
            vec![Some(0), Some(1)]
        );
    }
}

/// Without a borrowing limit team-a takes the whole node while team-b idles. When team-b's job
/// arrives its Workload waits: team-a's job gives the borrowed GPUs back (shrinks; nothing is
/// preempted) and Kueue admits it at the next tick; while it waited it held neither quota nor
/// GPUs.
#[test]
fn without_a_limit_the_cohort_lends_everything_and_takes_it_back_for_a_waiting_workload() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario(dir.path(), true, "", &jobs());
    let r = &run(&path, &[Policy::Fulfillment])[0];
    let ticks = admitted(r);
    assert!(
        ticks.iter().any(|&(t, a, _)| t < 600.0 && a == 8),
        "{ticks:?}"
    );
    let a_done = r.jobs[0].finish_s.unwrap();
    let b_start = r.jobs[1].start_s.unwrap();
    assert_eq!(b_start, 660.0, "{ticks:?}");
    assert!(
        b_start < a_done,
        "b started at {b_start}, a done at {a_done}"
    );
    // The cohort never holds more than its 8 GPUs, and b waited holding nothing.
    assert!(ticks.iter().all(|&(_, a, b)| a + b <= 8), "{ticks:?}");
    for s in r.samples.iter().filter(|s| s.time_s < 660.0) {
        assert_eq!(s.queues[1], Default::default(), "{}", s.time_s);
    }
    assert_eq!(r.queues[0].deferred_scale_ups, 0);
}

/// Without a cohort each queue is held to its nominal quota, even while the other idles.
#[test]
fn without_a_cohort_a_queue_never_exceeds_its_quota() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario(dir.path(), false, "", &jobs());
    for r in run(&path, &[Policy::Fulfillment, Policy::Goodput, Policy::Edl]) {
        let ticks = admitted(&r);
        assert!(ticks.iter().all(|&(_, a, b)| a <= 4 && b <= 4), "{ticks:?}");
        assert!(ticks.iter().any(|&(_, a, _)| a == 4), "{ticks:?}");
        assert_eq!(r.jobs[1].start_s, Some(600.0));
    }
}

/// A rigid job (`static`) is admitted at its requested size, only when that fits: `c` (4
/// workers) waits behind `a` (4 workers) in team-a while team-b's `b` runs beside them.
#[test]
fn rigid_jobs_are_admitted_whole_in_fifo_order() {
    let dir = tempfile::tempdir().unwrap();
    let rows = vec![
        row("a", 0, "va", (1, 8, 4), 4000),
        row("c", 10, "va", (1, 8, 4), 4000),
        row("b", 20, "vb", (2, 2, 2), 1200),
    ];
    let path = scenario(dir.path(), false, "", &rows);
    let r = &run(&path, &[Policy::Static])[0];
    for (t, a, b) in admitted(r) {
        assert!(a <= 4 && b <= 4, "{t}: {a} {b}");
    }
    let a_done = r.jobs[0].finish_s.unwrap();
    assert!(r.jobs[1].start_s.unwrap() > a_done);
    assert_eq!(r.jobs[2].start_s, Some(60.0));
}

/// `simulate` writes `queues.csv` (a line per run and queue, and the all-job line) and the
/// queue table; without queues it writes neither.
#[test]
fn queue_outputs_name_every_queue_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario(dir.path(), true, ", borrowing_limit: 2", &jobs());
    let out = dir.path().join("out");
    let outcome = simulate(&path, Some(&out), &[Policy::Fulfillment], false).unwrap();
    let csv = std::fs::read_to_string(out.join("queues.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "policy,scheduler,queue,nominal_gpus,nominal_share,waiting_h,used_share,demand_share,\
         entitled_share,jobs,completed,avg_jct_s,p99_jct_s,deferred_scale_ups"
    );
    assert_eq!(lines.len(), 4, "{csv}");
    assert!(lines[1].starts_with("fulfillment,trainscale,team-a,4,0.500000,"));
    assert!(lines[2].starts_with("fulfillment,trainscale,team-b,4,0.500000,"));
    assert!(lines[3].starts_with("fulfillment,trainscale,(all),8,1.000000,"));
    // team-b's one job is admitted and bound at the tick of its arrival, at its max: team-b
    // never waits; its JCT is 30 s of rescale cost plus 1200 / 2.
    let b: Vec<&str> = lines[2].split(',').collect();
    assert_eq!(
        &b[5..14],
        [
            "0.000",
            "",
            "",
            "",
            "1",
            "1",
            "630.000000",
            "630.000000",
            "0"
        ]
    );
    // team-a waits (below its max) throughout, borrowing 2 GPUs beyond its quota share.
    let a: Vec<&str> = lines[1].split(',').collect();
    let share = |i: usize| a[i].parse::<f64>().unwrap();
    assert_eq!((share(7), share(8)), (1.0, 0.5), "{csv}");
    assert!(share(6) > 0.5 && share(6) <= 0.75, "{csv}");
    for column in [
        "queue",
        "nominal",
        "used while waiting",
        "demand",
        "min(quota, demand)",
        "used − min",
        "avg JCT",
        "p99 JCT",
        "team-a",
        "team-b",
        "(all)",
    ] {
        assert!(
            outcome.table.contains(column),
            "{column}: {}",
            outcome.table
        );
    }

    // The same trace without queues: no queue outputs.
    let plain = dir.path().join("plain.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let cut = text.find("queues:").unwrap();
    std::fs::write(&plain, &text[..cut]).unwrap();
    let out = dir.path().join("plain");
    let outcome = simulate(&plain, Some(&out), &[Policy::Fulfillment], false).unwrap();
    assert!(!out.join("queues.csv").exists());
    assert!(!outcome.table.contains("min(quota, demand)"));
}
