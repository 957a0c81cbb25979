//! Whole-simulation tests: exact JCTs on a hand-computable scenario, determinism, node failures,
//! and the files `trainscale simulate` writes.

use std::path::{Path, PathBuf};

use trainscale::commands::simulate::simulate;
use trainscale::planner::Policy;
use trainscale::sim::report::Summary;
use trainscale::sim::{self, RunResult, Scenario, SchedulerKind};

const HEADER: &str = "job_id,submit_time_s,orig_timestamp,vc,num_gpus,duration_s,gpu_time_s,application,gpus_per_worker,cpus_per_worker,mem_mib_per_worker,req_workers,min_workers,max_workers,work_worker_s";

const ALL: [Policy; 4] = [
    Policy::Fulfillment,
    Policy::Goodput,
    Policy::Edl,
    Policy::Static,
];

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

/// One 8-GPU node, linear speedup, 60 s ticks, 30 s rescale cost.
const ONE_NODE_60S: &str = "cluster:
  node_pools: [{name: gpu, count: 1, cpu: 80, memory: 320Gi, gpus: 8}]
trace: {path: trace.csv, format: philly-pollux}
speedup: {model: linear}
interval_s: 60
rescale_cost_s: 30
";

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
        ONE_NODE_60S,
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
        // GPUs held: a's 4 over [0, 1030], b's 8 over [1080, 1610]; work 8000 worker-s.
        let held = 4.0 * 1030.0 + 8.0 * 530.0;
        assert!(
            (s.gpu_hours - held / 3600.0).abs() < 1e-9,
            "{policy}: {}",
            s.gpu_hours
        );
        let goodput = s.goodput.unwrap();
        assert!(
            (goodput - 8000.0 / held).abs() < 1e-9,
            "{policy}: {goodput}"
        );
        // Job-time by what held each job: b waits for its gang, both run at their max.
        let share = |k: &str| s.held_by.get(k).copied().unwrap_or(0.0);
        // (`edl` has no gangs: b is at its max, waiting for room.)
        if r.policy != Policy::Edl {
            assert!(share("waiting for gang") > 0.0, "{policy}: {:?}", s.held_by);
        }
        assert!(share("at max") > 0.0, "{policy}: {:?}", s.held_by);
        assert!((s.held_by.values().sum::<f64>() - 1.0).abs() < 1e-9);
    }
}

/// `static` is rigid: a job of min 1, max 8, requested 4 runs as one gang of 4 from its start to
/// its end (0 rescales), where `fulfillment` grows it to 8.
#[test]
fn static_runs_the_requested_gang_and_never_resizes() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(dir.path(), ONE_NODE_60S, &[row("a", 0, 1, 8, 4, 4000)]);
    let runs = run(&path, &[Policy::Static, Policy::Fulfillment]);
    let rigid = &runs[0];
    assert_eq!(rigid.jobs[0].jct_s(), Some(30.0 + 4000.0 / 4.0));
    assert_eq!(rigid.jobs[0].rescales, 0);
    assert!((rigid.summary().gpu_hours - 4.0 * 1030.0 / 3600.0).abs() < 1e-9);
    // Elastic: starts at 1 at the tick at 0 and grows to 8 at once (one rescale, 8 GPUs).
    let elastic = &runs[1];
    assert!(elastic.jobs[0].jct_s().unwrap() < 1030.0);
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

/// The mixed shapes of `mixed.yaml` (4- and 8-GPU workers, CPU-only jobs, the throughput model)
/// on a small cluster: every job completes under every policy and both schedulers, and every
/// run is reported.
#[test]
fn a_small_mixed_scenario_completes_every_job_under_both_schedulers() {
    let dir = tempfile::tempdir().unwrap();
    let traces = repo().join("simulations/traces");
    let path = dir.path().join("mixed-small.yaml");
    std::fs::write(
        &path,
        format!(
            "cluster:
  node_pools: [{{name: gpu, count: 4, cpu: 96, memory: 768Gi, gpus: 8}}]
trace:
  path: {}
  format: philly-pollux
  limit_jobs: 120
  time_scale: 0.5
  multi_gpu_workers: {{min_gpus: 4, per_worker_gpus: [4, 2]}}
  cpu_only: {{every: 6, cpus: 16, memory_mib: 65536}}
speedup: {{model: pollux-throughput, path: {}}}
schedulers: [trainscale, kube-scheduler]
interval_s: 120
cooldown_s: 300
seed: 3
faults: [{{at_s: 3600, node_pool: gpu, count: 1, down_for_s: 3600}}]
",
            traces.join("philly-pollux-2017w48.csv").display(),
            traces.join("pollux-throughput-params.csv").display(),
        ),
    )
    .unwrap();
    let runs = run(&path, &ALL);
    assert_eq!(runs.len(), 8);
    for r in &runs {
        let s = r.summary();
        assert_eq!(
            (s.jobs_completed, s.jobs_total),
            (120, 120),
            "{}",
            r.label()
        );
        let spanned = s.nodes_spanned_avg.unwrap_or(1.0);
        assert!((1.0..=4.0).contains(&spanned), "{}: {spanned}", r.label());
    }
    let labels: Vec<String> = runs.iter().map(RunResult::label).collect();
    assert_eq!(labels[0], "fulfillment/trainscale");
    assert_eq!(labels[1], "fulfillment/kube-scheduler");
    // The kube-scheduler model is deterministic too.
    let again = run(&path, &[Policy::Edl]);
    assert_eq!(again[1].label(), "edl/kube-scheduler");
    assert_eq!(again[1].jobs, runs[5].jobs);
    assert_eq!(
        again[1].summary().stranded_gpu_hours,
        runs[5].summary().stranded_gpu_hours
    );
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
        "scheduler",
        "jobs_total",
        "jobs_completed",
        "avg_jct_s",
        "p50_jct_s",
        "p99_jct_s",
        "makespan_s",
        "avg_queue_s",
        "max_queue_s",
        "gpu_util",
        "cpu_util",
        "mem_util",
        "stranded_gpus_avg",
        "rescales_per_job",
        "gpu_hours",
        "goodput",
        "fulfillment_avg",
        "nodes_spanned_avg",
        "stranded_gpu_hours",
        "pod_pending_avg_s",
        "partial_gang_ticks",
        "partial_gang_jobs",
        "held_by",
        "pass_ms_p50",
        "pass_ms_p99",
        "pass_ms_max",
    ];
    let policies = v["policies"].as_array().unwrap();
    assert_eq!(policies.len(), 2);
    assert_eq!(policies[0]["policy"], "static");
    assert_eq!(policies[0]["scheduler"], "trainscale");
    for p in policies {
        let mut got: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = keys.to_vec();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }
    assert!(outcome.table.contains("| avg JCT"));
    assert!(outcome.table.contains("| static/trainscale"));
    assert!(outcome.table.contains("| mean nodes spanned"));
    assert!(outcome.table.contains("| 1 workers ("));
    assert!(outcome.table.contains("| GPU-hours") && outcome.table.contains("| goodput"));
    let ts = std::fs::read_to_string(out.join("timeseries.csv")).unwrap();
    assert!(ts.starts_with("policy,scheduler,time_s,gpu_util"));
    assert!(ts.lines().count() > 2);
}

#[test]
fn bundled_scenarios_load() {
    for name in [
        "default.yaml",
        "week.yaml",
        "mixed.yaml",
        "week-queues.yaml",
    ] {
        let s = Scenario::load(&repo().join("simulations").join(name)).unwrap();
        let (jobs, _) = sim::load_inputs(&s).unwrap();
        assert_eq!(s.total_gpus(), 256, "{name}");
        if name.starts_with("week") {
            assert_eq!(jobs.len(), 3322);
        }
        if name == "week-queues.yaml" {
            // The queues' nominal GPUs are the cluster's, and every VC has a queue.
            let queues = s.queues.as_ref().unwrap();
            assert_eq!(queues.queues.iter().map(|q| q.gpus).sum::<i64>(), 256);
            assert!(jobs.iter().all(|j| queues.queue_of(&j.vc).is_some()));
        }
        if name == "mixed.yaml" {
            assert_eq!(s.schedulers.len(), 2);
            let shapes = |g: i64| jobs.iter().filter(|j| j.gpus_per_worker == g).count();
            assert_eq!(jobs.len(), 1000);
            assert!(shapes(0) >= 80 && shapes(4) > 0 && shapes(8) > 0, "{name}");
            assert!(
                jobs.iter()
                    .all(|j| j.gpus_per_worker != 8 || j.cpus_per_worker == 80)
            );
        }
    }
}

/// Two 8-GPU nodes; one bert job of two 4-GPU trainers (req = min = max = 2). The plan places
/// both on one node; kube-scheduler's LeastAllocated spreads them over both. Under
/// `pollux-throughput` the spread job steps slower, by exactly the model's ratio.
#[test]
fn kube_scheduler_spreads_a_job_that_trainscale_packs() {
    let dir = tempfile::tempdir().unwrap();
    let params = repo().join("simulations/traces/pollux-throughput-params.csv");
    let path = write_scenario(
        dir.path(),
        &format!(
            "cluster:
  node_pools: [{{name: gpu, count: 2, cpu: 96, memory: 768Gi, gpus: 8}}]
trace: {{path: trace.csv, format: philly-pollux}}
speedup: {{model: pollux-throughput, path: {}}}
schedulers: [trainscale, kube-scheduler]
interval_s: 60
rescale_cost_s: 0
",
            params.display()
        ),
        &["a,0,-,vc,8,0,0,bert,4,40,100000,2,2,2,80000".to_string()],
    );
    let scenario = Scenario::load(&path).unwrap();
    let (jobs, speedup) = sim::load_inputs(&scenario).unwrap();
    let runs = sim::run_policies(
        &scenario,
        &jobs,
        &speedup,
        &[Policy::Fulfillment],
        &mut |_, _, _| {},
    );
    assert_eq!(runs.len(), 2);
    let (packed, spread) = (&runs[0], &runs[1]);
    assert_eq!(packed.scheduler, SchedulerKind::Trainscale);
    assert_eq!(spread.scheduler, SchedulerKind::KubeScheduler);
    let (p, s) = (packed.summary(), spread.summary());
    assert_eq!((p.jobs_completed, s.jobs_completed), (1, 1));
    assert_eq!(p.nodes_spanned_avg, Some(1.0));
    assert_eq!(s.nodes_spanned_avg, Some(2.0));
    // Both start at the tick at 0; run time = work / speedup(8 replicas, one or two nodes).
    let run_time = |r: &RunResult| r.jobs[0].finish_s.unwrap() - r.jobs[0].start_s.unwrap();
    let want = |multi| 80000.0 / speedup.speedup("bert", 8, multi);
    assert!((run_time(packed) - want(false)).abs() < 1e-6);
    assert!((run_time(spread) - want(true)).abs() < 1e-6);
    let ratio = run_time(spread) / run_time(packed);
    assert!((ratio - 1.8).abs() < 0.05, "{ratio}");
    assert_eq!((s.pod_pending_avg_s, s.partial_gang_ticks), (Some(0.0), 0));
}

/// Two 8-GPU nodes and three jobs of 8-GPU trainers: `x` (1 trainer, 6000 s) and `y`
/// (1 trainer, 12000 s) take a node each at 0; `b`, a gang of 2 (600 s), arrives at 100.
/// When `x` ends at 6000, trainscale binds nothing of `b` (its gang does not fit whole): the free
/// node's 8 GPUs are stranded for 100 ticks while `b`'s trainers stay pending. kube-scheduler
/// binds one of `b`'s pods there: a partial gang for those 100 ticks, nothing stranded. Both
/// start `b` at 12000.
#[test]
fn partial_gangs_and_stranded_gpus_under_both_schedulers() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(
        dir.path(),
        "cluster:
  node_pools: [{name: gpu, count: 2, cpu: 96, memory: 768Gi, gpus: 8}]
trace: {path: trace.csv, format: philly-pollux}
speedup: {model: linear}
schedulers: [trainscale, kube-scheduler]
interval_s: 60
rescale_cost_s: 0
policies: [static]
",
        &[
            "x,0,-,vc,8,0,0,bert,8,80,100000,1,1,1,48000".to_string(),
            "y,0,-,vc,8,0,0,bert,8,80,100000,1,1,1,96000".to_string(),
            "b,100,-,vc,16,0,0,bert,8,80,100000,2,2,2,9600".to_string(),
        ],
    );
    let runs = run(&path, &[Policy::Static]);
    assert_eq!(runs.len(), 2);
    for r in &runs {
        let finish: Vec<Option<f64>> = r.jobs.iter().map(|j| j.finish_s).collect();
        assert_eq!(
            finish,
            vec![Some(6000.0), Some(12000.0), Some(12600.0)],
            "{}",
            r.label()
        );
    }
    let (ts, kube) = (runs[0].summary(), runs[1].summary());
    assert_eq!((ts.partial_gang_ticks, ts.partial_gang_jobs), (0, 0));
    assert!((ts.stranded_gpu_hours - 100.0 * 8.0 * 60.0 / 3600.0).abs() < 1e-9);
    assert_eq!(ts.pod_pending_avg_s, Some(2.0 * 11900.0 / 4.0));
    assert_eq!((kube.partial_gang_ticks, kube.partial_gang_jobs), (100, 1));
    assert_eq!(kube.stranded_gpu_hours, 0.0);
    assert_eq!(kube.pod_pending_avg_s, Some((5900.0 + 11900.0) / 4.0));
    // One trainer each for x and y, two on two nodes for b (600 s).
    assert_eq!(ts.nodes_spanned_avg, Some(2.0));
}
