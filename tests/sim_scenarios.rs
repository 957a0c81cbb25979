//! Whole-simulation tests: exact JCTs on a hand-computable scenario, determinism, node failures,
//! and the files `trainscale simulate` writes.

use std::path::{Path, PathBuf};

use trainscale::commands::simulate::simulate;
use trainscale::planner::Policy;
use trainscale::sim::report::Summary;
use trainscale::sim::{self, RunResult, Scenario};

const HEADER: &str = "job_id,submit_time_s,orig_timestamp,vc,num_gpus,duration_s,gpu_time_s,application,gpus_per_worker,cpus_per_worker,mem_mib_per_worker,req_workers,min_workers,max_workers,work_worker_s";

const ALL: [Policy; 3] = [Policy::Fulfillment, Policy::Edl, Policy::Static];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A trace row: id, submit, req = min = max workers, work.
fn row(id: &str, submit: u32, min: u32, max: u32, req: u32, work: u32) -> String {
    format!("{id},{submit},-,vc,{req},0,0,bert,1,10,38147,{req},{min},{max},{work}")
}

fn write_scenario(dir: &Path, scenario: &str, trace_rows: &[String]) -> PathBuf {
    std::fs::write(
        dir.join("trace.csv"),
        format!("{HEADER}\n{}\n", trace_rows.join("\n")),
    )
    .unwrap();
    let path = dir.join("scenario.yaml");
    std::fs::write(&path, scenario).unwrap();
    path
}

fn run(path: &Path, policies: &[Policy]) -> Vec<RunResult> {
    let scenario = Scenario::load(path).unwrap();
    let (jobs, speedup) = sim::load_inputs(&scenario).unwrap();
    sim::run_policies(&scenario, &jobs, &speedup, policies, &mut |_, _, _| {})
}

/// One 8-GPU node, linear speedup, 60 s ticks, 30 s rescale cost; min == max == req, so the
/// simulated scheduler's first-fit binding alone decides and every policy must agree.
///
/// - a (4 trainers, 4000 worker-s) arrives at 0, is bound at the tick at 0, pays 30 s, runs at
///   4/s: done at 30 + 1000 = 1030, JCT 1030.
/// - b (8 trainers, 4000 worker-s) arrives at 30 and does not fit beside a; a's end at 1030 frees
///   the node, the tick at 1080 binds b, it pays 30 s and runs at 8/s: done at 1110 + 500 = 1610,
///   JCT 1580.
#[test]
fn hand_computable_two_jobs_on_one_node() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(
        dir.path(),
        "cluster:
  node_pools: [{name: gpu, count: 1, cpu: 80, memory: 320Gi, gpus: 8}]
trace: {path: trace.csv, format: philly-pollux}
speedup: {model: linear}
interval_s: 60
rescale_cost_s: 30
",
        &[row("a", 0, 4, 4, 4, 4000), row("b", 30, 8, 8, 8, 4000)],
    );
    for r in run(&path, &ALL) {
        let policy = r.policy.as_str();
        let jcts: Vec<Option<f64>> = r.jobs.iter().map(|j| j.jct_s()).collect();
        assert_eq!(jcts, vec![Some(1030.0), Some(1580.0)], "{policy}");
        assert_eq!(r.jobs[1].start_s, Some(1080.0), "{policy}");
        let s = r.summary();
        assert_eq!(s.avg_jct_s, Some(1305.0), "{policy}");
        assert_eq!(s.makespan_s, Some(1610.0), "{policy}");
        assert_eq!(s.avg_queue_s, Some((0.0 + 1050.0) / 2.0), "{policy}");
        assert_eq!(s.rescales_per_job, 0.0, "{policy}");
    }
}

/// Same node, no rescale cost, 10 s ticks, amdahl: exact arithmetic still holds.
#[test]
fn hand_computable_amdahl_without_rescale_cost() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(
        dir.path(),
        "cluster:
  node_pools: [{name: gpu, count: 1, cpu: 80, memory: 320Gi, gpus: 8}]
trace: {path: trace.csv, format: philly-pollux}
speedup: {model: 'amdahl:0.5'}
interval_s: 10
rescale_cost_s: 0
",
        // speedup(2) = 1 / (0.5 + 0.25) = 4/3: 400 worker-s take 300 s.
        &[row("a", 5, 2, 2, 2, 400)],
    );
    for r in run(&path, &ALL) {
        assert_eq!(r.jobs[0].start_s, Some(10.0));
        assert_eq!(r.jobs[0].finish_s, Some(310.0));
    }
}

fn sample_scenario(dir: &Path, limit: u32, faults: &str) -> PathBuf {
    let traces = repo().join("simulations/traces");
    let text = format!(
        "name: sample
cluster:
  node_pools: [{{name: gpu, count: 4, cpu: 96, memory: 768Gi, gpus: 8}}]
trace: {{path: {}, format: philly-pollux, limit_jobs: {limit}, time_scale: 0.5}}
speedup: {{model: pollux, path: {}}}
interval_s: 120
cooldown_s: 300
seed: 7
{faults}",
        traces.join("philly-pollux-2017w48.csv").display(),
        traces.join("pollux-speedup.csv").display(),
    );
    let path = dir.join("sample.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn without_pass_ms(summary: &Summary) -> serde_json::Value {
    let mut v = serde_json::to_value(summary).unwrap();
    for p in v["policies"].as_array_mut().unwrap() {
        let o = p.as_object_mut().unwrap();
        o.retain(|k, _| !k.starts_with("pass_ms_"));
    }
    v
}

#[test]
fn two_runs_are_identical_but_for_pass_latency() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample_scenario(
        dir.path(),
        120,
        "faults:\n  - {at_s: 3600, node_pool: gpu, count: 1, down_for_s: 7200}\n",
    );
    let a = run(&path, &ALL);
    let b = run(&path, &ALL);
    let sa = Summary::of("sample", &a);
    let sb = Summary::of("sample", &b);
    assert_eq!(without_pass_ms(&sa), without_pass_ms(&sb));
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.jobs, y.jobs);
        assert_eq!(x.samples.len(), y.samples.len());
    }
}

/// Every job of the trace completes or is reported unfinished, and the counts match; a job whose
/// gang can never fit again (a node lost for good) is the one reported unfinished.
#[test]
fn node_failures_lose_no_job() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample_scenario(
        dir.path(),
        150,
        "faults:
  - {at_s: 1800, node_pool: gpu, count: 2, down_for_s: 3600}
  - {at_s: 9000, node_pool: gpu, count: 1, down_for_s: 600}
  - {at_s: 20000, node_pool: gpu, count: 1}
",
    );
    let runs = run(&path, &ALL);
    let summary = Summary::of("sample", &runs);
    for (r, s) in runs.iter().zip(&summary.policies) {
        assert_eq!(r.jobs.len(), 150);
        assert_eq!(s.jobs_total, 150);
        assert_eq!(s.jobs_completed + r.unfinished(), s.jobs_total);
        for j in &r.jobs {
            if let Some(f) = j.finish_s {
                assert!(j.start_s.is_some_and(|s| s >= j.submit_s && f > s), "{j:?}");
            }
        }
    }

    // Two nodes; one fails for good before a 16-trainer gang arrives: it can never run.
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(
        dir.path(),
        "cluster:
  node_pools: [{name: gpu, count: 2, cpu: 96, memory: 768Gi, gpus: 8}]
trace: {path: trace.csv, format: philly-pollux}
speedup: {model: linear}
faults: [{at_s: 10, node_pool: gpu, count: 1}]
",
        &[
            row("small", 0, 4, 4, 4, 40_000),
            row("gang", 20, 16, 16, 16, 1600),
            row("late", 100, 1, 1, 1, 600),
        ],
    );
    for r in run(&path, &ALL) {
        let s = r.summary();
        assert_eq!((s.jobs_total, s.jobs_completed, r.unfinished()), (3, 2, 1));
        assert_eq!(r.jobs[1].finish_s, None);
        assert!(r.jobs[0].finish_s.is_some() && r.jobs[2].finish_s.is_some());
    }
}

#[test]
fn simulate_writes_summary_timeseries_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample_scenario(dir.path(), 60, "");
    let out = dir.path().join("out");
    let outcome = simulate(&path, Some(&out), &[Policy::Static, Policy::Edl], false).unwrap();
    for f in [
        "summary.json",
        "timeseries.csv",
        "jobs.csv",
        "jct_by_size.csv",
        "gpu_util.svg",
        "jct_cdf.svg",
        "queue_length.svg",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let top: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(top, ["policies", "scenario"]);
    assert_eq!(v["scenario"], "sample");
    let keys = [
        "policy",
        "jobs_total",
        "jobs_completed",
        "avg_jct_s",
        "p50_jct_s",
        "p99_jct_s",
        "makespan_s",
        "avg_queue_s",
        "gpu_util",
        "cpu_util",
        "mem_util",
        "stranded_gpus_avg",
        "rescales_per_job",
        "fulfillment_avg",
        "pass_ms_p50",
        "pass_ms_p99",
        "pass_ms_max",
    ];
    let policies = v["policies"].as_array().unwrap();
    assert_eq!(policies.len(), 2);
    assert_eq!(policies[0]["policy"], "static");
    for p in policies {
        let mut got: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = keys.to_vec();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }
    assert!(outcome.table.contains("| avg JCT"));
    assert!(outcome.table.contains(">=16 trainers") || outcome.table.contains("8 trainers"));
    let ts = std::fs::read_to_string(out.join("timeseries.csv")).unwrap();
    assert!(ts.starts_with("policy,time_s,gpu_util"));
    assert!(ts.lines().count() > 2);
}

#[test]
fn bundled_scenarios_load() {
    for name in ["default.yaml", "week.yaml"] {
        let s = Scenario::load(&repo().join("simulations").join(name)).unwrap();
        let (jobs, _) = sim::load_inputs(&s).unwrap();
        assert_eq!(s.total_gpus(), 256, "{name}");
        if name == "week.yaml" {
            assert_eq!(jobs.len(), 3322);
        }
    }
}

/// Priorities in the simulator come the daemon's way: the scenario declares PriorityClasses and
/// gives each trace VC a priority string, and the planner's starvation relief reclaims trainers
/// only from jobs of no higher priority. `a` (VC `other`, priority 0) grows to the whole node;
/// `c` needs 4 GPUs. Of class `high` (1000) it gets them by reclaim at the next pass; at `"-5"`
/// it waits for `a` to finish.
#[test]
fn vc_priorities_resolve_through_the_scenario_priority_classes() {
    let dir = tempfile::tempdir().unwrap();
    let rows = [
        "a,0,-,other,1,0,0,bert,1,10,38147,1,1,8,80000".to_string(),
        "c,600,-,team-c,4,0,0,bert,1,10,38147,4,4,4,4000".to_string(),
    ];
    let scenario = |c_priority: &str| {
        format!(
            "cluster:
  node_pools: [{{name: gpu, count: 1, cpu: 80, memory: 320Gi, gpus: 8}}]
trace: {{path: trace.csv, format: philly-pollux}}
speedup: {{model: linear}}
interval_s: 60
rescale_cost_s: 0
policies: [fulfillment]
priority_classes: [{{name: high, value: 1000}}]
vc_priorities: {{team-c: \"{c_priority}\"}}
"
        )
    };
    let start_of_c = |c_priority: &str| {
        let path = write_scenario(dir.path(), &scenario(c_priority), &rows);
        let result = &run(&path, &[Policy::Fulfillment])[0];
        let a = &result.jobs[0];
        let c = &result.jobs[1];
        (c.start_s.unwrap(), a.finish_s.unwrap())
    };
    let (high_start, _) = start_of_c("high");
    assert!(high_start <= 660.0, "high starts at {high_start}");
    let (low_start, a_finish) = start_of_c("-5");
    assert!(
        low_start >= a_finish,
        "low starts at {low_start}, a ends at {a_finish}"
    );

    // A VC naming an undeclared class is an error naming the key.
    let bad = write_scenario(
        dir.path(),
        "cluster:
  node_pools: [{name: gpu, count: 1, cpu: 80, memory: 320Gi, gpus: 8}]
trace: {path: trace.csv, format: philly-pollux}
vc_priorities: {team-c: urgent}
",
        &rows,
    );
    let e = Scenario::load(&bad).unwrap_err().to_string();
    assert!(
        e.contains("vc_priorities.team-c") && e.contains("urgent"),
        "{e}"
    );
}
