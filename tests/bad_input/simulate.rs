//! Issue 32 item 5 (and item 3's trace rows): `simulate` ends on any trace it accepts, keeps a
//! bounded number of samples, and refuses a trace that cannot end or names one job twice.

use std::path::Path;

use trainscale::planner::Policy;
use trainscale::sim::{self, Scenario, horizon};

const HEADER: &str = "job_id,submit_time_s,orig_timestamp,vc,num_gpus,duration_s,gpu_time_s,application,gpus_per_worker,cpus_per_worker,mem_mib_per_worker,req_workers,min_workers,max_workers,work_worker_s";

fn scenario(extra: &str) -> String {
    format!(
        "cluster:
  node_pools: [{{name: gpu, count: 1, cpu: 80, memory: 320Gi, gpus: 8}}]
trace: {{path: trace.csv, format: philly-pollux}}
speedup: {{model: linear}}
policies: [fulfillment]
schedulers: [trainscale]
{extra}"
    )
}

/// Writes the scenario and trace into `dir` and loads them.
fn load(dir: &Path, scenario: &str, rows: &str) -> Result<(Scenario, Vec<sim::TraceJob>), String> {
    std::fs::write(dir.join("trace.csv"), format!("{HEADER}\n{rows}")).unwrap();
    let path = dir.join("s.yaml");
    std::fs::write(&path, scenario).unwrap();
    let s = Scenario::load(&path).map_err(|e| e.to_string())?;
    let (jobs, _) = sim::load_inputs(&s).map_err(|e| e.to_string())?;
    Ok((s, jobs))
}

fn load_error(rows: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    match load(dir.path(), &scenario(""), rows) {
        Err(e) => e,
        Ok(_) => panic!("accepted: {rows}"),
    }
}

#[test]
fn a_submit_time_past_the_horizon_cap_is_refused_naming_the_row() {
    let e = load_error("a,1e20,-,vc,1,60,60,bert,1,10,1000,1,1,4,60\n");
    assert!(
        e.contains("row 2") && e.contains("`submit_time_s`") && e.contains("horizon cap"),
        "{e}"
    );
}

#[test]
fn a_value_that_is_not_a_finite_number_is_refused_as_such() {
    for (value, shown) in [
        ("NaN", "\"NaN\""),
        ("inf", "\"inf\""),
        ("-Infinity", "\"-Infinity\""),
    ] {
        let e = load_error(&format!("a,0,-,vc,1,60,60,bert,1,10,1000,1,1,4,{value}\n"));
        assert!(
            e.contains("row 2")
                && e.contains("`work_worker_s`")
                && e.contains(&format!("{shown} is not a finite number")),
            "{e}"
        );
    }
}

#[test]
fn a_trace_without_a_job_to_replay_is_refused() {
    let e = load_error("");
    assert!(
        e.contains("trace.csv") && e.contains("no job to replay: 0 data rows"),
        "{e}"
    );
}

#[test]
fn work_that_cannot_end_within_the_horizon_cap_is_refused_naming_the_row() {
    let e = load_error("a,0,-,vc,1,60,60,bert,1,10,1000,1,1,4,1e300\n");
    assert!(
        e.contains("row 2") && e.contains("`work_worker_s`") && e.contains("cannot end"),
        "{e}"
    );
}

#[test]
fn two_rows_with_one_job_id_are_refused_naming_both() {
    let rows = "a,0,-,vc,1,60,60,bert,1,10,1000,1,1,4,60\n\
                b,5,-,vc,1,60,60,bert,1,10,1000,1,1,4,60\n\
                a,9,-,vc,1,60,60,bert,1,10,1000,1,1,4,60\n";
    let e = load_error(rows);
    assert!(
        e.contains("row 4") && e.contains("row 2") && e.contains("`job_id`"),
        "{e}"
    );
}

#[test]
fn a_job_past_the_tick_cap_is_refused_naming_the_row_and_interval_s() {
    let dir = tempfile::tempdir().unwrap();
    let e = load(
        dir.path(),
        &scenario("interval_s: 1\n"),
        "a,9e7,-,vc,1,60,60,bert,1,10,1000,1,1,4,60\n",
    )
    .err()
    .unwrap_or_default();
    assert!(
        e.contains("row 2") && e.contains("cannot end") && e.contains("ticks of interval_s 1 s"),
        "{e}"
    );
}

#[test]
fn a_long_run_keeps_a_bounded_number_of_samples_weighted_by_ticks() {
    // One job submitted after 200,000 one-second ticks: the run ends, with at most
    // MAX_SAMPLES samples standing for every tick.
    let dir = tempfile::tempdir().unwrap();
    let (s, jobs) = load(
        dir.path(),
        &scenario("interval_s: 1\n"),
        "a,200000,-,vc,1,60,60,bert,1,10,1000,1,1,4,60\n",
    )
    .unwrap();
    let speedup = sim::SpeedupModel::load(&s.speedup).unwrap();
    let runs = sim::run_policies(
        &s,
        &jobs,
        &speedup,
        &[Policy::Fulfillment],
        &mut |_, _, _| {},
    );
    let run = &runs[0];
    assert_eq!(run.unfinished(), 0);
    let samples = run.samples.len();
    assert!(samples < horizon::MAX_SAMPLES, "{samples} samples");
    let ticks: u64 = run.samples.iter().map(|t| u64::from(t.ticks)).sum();
    // A tick a second from 0 to the job's end (200,000 s + its 60 s of work, rescale included).
    assert!((200_000..=200_200).contains(&ticks), "{ticks} ticks");
    // Busy for 1 GPU of 8 during ~60 of ~200,060 s: the weighted mean sees it, tiny.
    let util = run.summary().gpu_util;
    assert!(util > 0.0 && util < 1e-3, "{util}");
}

#[test]
fn a_job_that_can_never_run_on_the_cluster_is_named_with_why() {
    let dir = tempfile::tempdir().unwrap();
    // The cluster: one node of 80 CPU, 320 GiB, 8 GPUs.
    let rows = "fits,0,-,vc,1,60,60,bert,1,10,1000,1,1,4,60\n\
                huge,0,-,vc,1,60,60,bert,1,10,999999999,1,1,4,60\n\
                gang,0,-,vc,1,60,60,bert,1,10,1000,9,9,12,60\n";
    let (s, jobs) = load(dir.path(), &scenario(""), rows).unwrap();
    let never: Vec<(usize, String)> = sim::never_run(&s, &jobs)
        .into_iter()
        .map(|(job, why)| (job.row, why))
        .collect();
    assert_eq!(never.len(), 2, "{never:?}");
    assert_eq!(never[0].0, 3);
    assert!(never[0].1.contains("fits no node"), "{never:?}");
    assert_eq!(never[1].0, 4);
    assert!(
        never[1].1.contains("hold 8 workers") && never[1].1.contains("min_workers 9"),
        "{never:?}"
    );
}

#[test]
fn a_requested_size_outside_the_bounds_is_refused_naming_the_row() {
    for (req, min, max) in [(8, 1, 4), (1, 2, 4)] {
        let e = load_error(&format!(
            "a,0,-,vc,1,60,60,bert,1,10,1000,{req},{min},{max},60\n"
        ));
        assert!(
            e.contains("row 2")
                && e.contains("`req_workers`")
                && e.contains(&format!(
                    "{req} is outside [min_workers, max_workers] = [{min}, {max}]"
                )),
            "{e}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    assert!(
        load(
            dir.path(),
            &scenario(""),
            "a,0,-,vc,1,60,60,bert,1,10,1000,4,1,4,60\n"
        )
        .is_ok()
    );
}

#[test]
fn a_priority_class_the_api_server_refuses_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let rows = "a,0,-,vc,1,60,60,bert,1,10,1000,1,1,4,60\n";
    for (classes, field, says) in [
        (
            "[{name: system-mine, value: 5}]",
            "priority_classes[0].name",
            "system-mine is not a known system priority class",
        ),
        (
            "[{name: low, value: 1}, {name: high, value: 1000000001}]",
            "priority_classes[1].value",
            "1000000001",
        ),
    ] {
        let text = scenario(&format!("priority_classes: {classes}\n"));
        let e = load(dir.path(), &text, rows).err().unwrap_or_default();
        assert!(e.contains(field) && e.contains(says), "{classes}: {e}");
    }
    let text = scenario("priority_classes: [{name: high, value: 1000000000}]\n");
    assert!(load(dir.path(), &text, rows).is_ok());
}
