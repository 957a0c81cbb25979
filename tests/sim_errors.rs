//! Bad inputs: trace rows and scenario keys give errors naming file, row and column, or key.

use std::path::Path;

use trainscale::commands::simulate::{output_dir, simulate};
use trainscale::sim::{self, Scenario};

const HEADER: &str = "job_id,submit_time_s,orig_timestamp,vc,num_gpus,duration_s,gpu_time_s,application,gpus_per_worker,cpus_per_worker,mem_mib_per_worker,req_workers,min_workers,max_workers,work_worker_s";

const SCENARIO: &str = "cluster:
  node_pools: [{name: gpu, count: 1, cpu: 80, memory: 320Gi, gpus: 8}]
trace: {path: trace.csv, format: philly-pollux}
speedup: {model: linear}
";

fn setup(dir: &Path, scenario: &str, rows: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("trace.csv"), format!("{HEADER}\n{rows}")).unwrap();
    let path = dir.join("s.yaml");
    std::fs::write(&path, scenario).unwrap();
    path
}

fn load_error(scenario: &str, rows: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = setup(dir.path(), scenario, rows);
    match Scenario::load(&path) {
        Err(e) => e.to_string(),
        Ok(s) => sim::load_inputs(&s).unwrap_err().to_string(),
    }
}

#[test]
fn a_bad_trace_row_names_file_row_and_column() {
    let good = "a,0,-,vc,1,60,60,bert,1,10,38147,1,1,32,60\n";
    let cases = [
        (
            "b,x,-,vc,1,60,60,bert,1,10,38147,1,1,32,60\n",
            "submit_time_s",
        ),
        (
            "b,0,-,vc,1,60,60,bert,1,10,38147,1,1,32,-5\n",
            "work_worker_s",
        ),
        (
            "b,0,-,vc,1,60,60,bert,1,10,38147,0,1,32,60\n",
            "req_workers",
        ),
        ("b,0,-,vc,1,60,60,bert,1,10,38147,1,1,32\n", "work_worker_s"),
        ("B!,0,-,vc,1,60,60,bert,1,10,38147,1,1,32,60\n", "job_id"),
    ];
    for (bad, column) in cases {
        let e = load_error(SCENARIO, &format!("{good}{bad}"));
        assert!(
            e.contains("trace.csv")
                && e.contains("row 3")
                && e.contains(&format!("column `{column}`")),
            "{column}: {e}"
        );
    }
    // An application without a pollux curve names its row and column too.
    let pollux = SCENARIO.replace(
        "{model: linear}",
        &format!(
            "{{model: pollux, path: {}}}",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("simulations/traces/pollux-speedup.csv")
                .display()
        ),
    );
    let e = load_error(
        &pollux,
        &format!("{good}b,0,-,vc,1,60,60,gpt5,1,10,38147,1,1,32,60\n"),
    );
    assert!(
        e.contains("row 3") && e.contains("`application`") && e.contains("gpt5"),
        "{e}"
    );
    // A missing column is named.
    let dir = tempfile::tempdir().unwrap();
    let path = setup(dir.path(), SCENARIO, "");
    std::fs::write(dir.path().join("trace.csv"), "job_id,submit_time_s\na,0\n").unwrap();
    let s = Scenario::load(&path).unwrap();
    let e = sim::load_inputs(&s).unwrap_err().to_string();
    assert!(
        e.contains("trace.csv") && e.contains("`application`"),
        "{e}"
    );
}

#[test]
fn a_bad_scenario_key_is_named() {
    let rows = "a,0,-,vc,1,60,60,bert,1,10,38147,1,1,32,60\n";
    let cases = [
        (format!("{SCENARIO}interval: 60\n"), "interval"),
        (format!("{SCENARIO}rescale_cost_s: -1\n"), "rescale_cost_s"),
        (
            format!("{SCENARIO}max_load_desired: 1.5\n"),
            "max_load_desired",
        ),
        (SCENARIO.replace("gpus: 8", "gpus: 8, disk: 1"), "disk"),
        (
            SCENARIO.replace("count: 1", "count: -2"),
            "cluster.node_pools[0].count",
        ),
        (
            SCENARIO.replace("model: linear", "model: magic"),
            "speedup.model",
        ),
        (
            format!("{SCENARIO}faults: [{{at_s: 5, node_pool: gpu, count: 1, down_for_s: 0}}]\n"),
            "faults[0].down_for_s",
        ),
        (
            format!("{SCENARIO}policies: [static, fifo]\n"),
            "policies[1]",
        ),
        (
            format!("{SCENARIO}schedulers: [trainscale, volcano]\n"),
            "schedulers[1]",
        ),
        (
            SCENARIO.replace(
                "format: philly-pollux}",
                "format: philly-pollux, cpu_only: {every: 2, cpus: 0, memory_mib: 1}}",
            ),
            "trace.cpu_only.cpus",
        ),
    ];
    for (text, key) in cases {
        let e = load_error(&text, rows);
        assert!(e.contains("s.yaml") && e.contains(key), "{key}: {e}");
    }
    // Through the command too; a missing scenario file names it.
    let dir = tempfile::tempdir().unwrap();
    let path = setup(dir.path(), &format!("{SCENARIO}seed: many\n"), rows);
    let e = simulate(&path, Some(&dir.path().join("out")), &[], false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("seed"), "{e}");
    let e = simulate(&dir.path().join("nope.yaml"), None, &[], false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope.yaml"), "{e}");
}

#[test]
fn a_scenario_name_is_one_plain_directory_name() {
    let rows = "a,0,-,vc,1,60,60,bert,1,10,38147,1,1,32,60\n";
    for bad in [
        "../../escape",
        "a/b",
        "a\\\\b",
        "/abs",
        ".hidden",
        ".",
        "..",
        "x..y",
        "Upper",
        "a b",
        "é",
        "''",
    ] {
        let e = load_error(&format!("name: {bad}\n{SCENARIO}"), rows);
        assert!(e.contains("s.yaml: key `name`: "), "{bad}: {e}");
    }
    // A name from the file name is checked too.
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), SCENARIO, rows);
    let path = dir.path().join("Bad Name.yaml");
    std::fs::write(&path, SCENARIO).unwrap();
    let e = Scenario::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("key `name`: \"Bad Name\"") && e.contains("file name"),
        "{e}"
    );
    // Good names load, and land under the root.
    let good = setup(dir.path(), &format!("name: ok-1.2_x\n{SCENARIO}"), rows);
    let mut scenario = Scenario::load(&good).unwrap();
    assert_eq!(scenario.name, "ok-1.2_x");
    let root = dir.path().join("out");
    assert_eq!(output_dir(&root, &scenario).unwrap(), root.join("ok-1.2_x"));
    // A name set in code is checked again where the directory is built.
    for bad in ["../../escape", "..", "/abs", "a/b", ""] {
        scenario.name = bad.to_string();
        let e = output_dir(&root, &scenario).unwrap_err().to_string();
        assert!(e.contains("key `name`"), "{bad}: {e}");
    }
}

/// A trace VC that no queue names, without a catch-all queue, is an error naming `queues.queues`,
/// the VC and its first row; with `"*"` (or the VC named) the same trace loads.
#[test]
fn a_trace_vc_without_a_queue_is_named() {
    let rows = "a,0,-,va,1,60,60,bert,1,10,38147,1,1,32,60\n\
                b,0,-,vb,1,60,60,bert,1,10,38147,1,1,32,60\n\
                c,0,-,vb,1,60,60,bert,1,10,38147,1,1,32,60\n";
    let queues = |vcs: &str| {
        format!("{SCENARIO}queues:\n  queues:\n    - {{name: team-a, vcs: {vcs}, gpus: 8}}\n")
    };
    let e = load_error(&queues("[va]"), rows);
    assert!(
        e.contains("s.yaml: key `queues.queues`")
            && e.contains("VC \"vb\" (first at row 3)")
            && e.contains("\"*\""),
        "{e}"
    );
    for vcs in ["[va, vb]", "['*']", "[va, '*']"] {
        let dir = tempfile::tempdir().unwrap();
        let path = setup(dir.path(), &queues(vcs), rows);
        let scenario = Scenario::load(&path).unwrap();
        sim::load_inputs(&scenario).unwrap();
    }
}
