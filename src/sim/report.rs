//! Writing a simulation's results: `summary.json`, `timeseries.csv`, `jobs.csv`,
//! `jct_by_size.csv`, and the side-by-side terminal table.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::SimError;
use super::metrics::{BucketJct, HeldBy, PolicySummary, RunResult};

/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub scenario: String,
    pub policies: Vec<PolicySummary>,
}

impl Summary {
    /// The summary of every run.
    pub fn of(scenario: &str, runs: &[RunResult]) -> Summary {
        Summary {
            scenario: scenario.to_string(),
            policies: runs.iter().map(RunResult::summary).collect(),
        }
    }
}

fn write(path: &Path, text: &str) -> Result<(), SimError> {
    std::fs::write(path, text).map_err(|e| SimError::io(path, e))
}

fn opt(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.6}")).unwrap_or_default()
}

/// Writes every file of the results into `dir` (created when missing).
pub fn write_all(dir: &Path, summary: &Summary, runs: &[RunResult]) -> Result<(), SimError> {
    std::fs::create_dir_all(dir).map_err(|e| SimError::io(dir, e))?;
    let json = serde_json::to_string_pretty(summary).unwrap_or_default() + "\n";
    write(&dir.join("summary.json"), &json)?;

    let mut ts = String::from(
        "policy,scheduler,time_s,gpu_util,cpu_util,mem_util,gpus_bound,gpus_capacity,queue_len,running_jobs,pending_trainers,stranded_gpus,gpus_free_blocked,fulfillment_avg,pass_ms\n",
    );
    for r in runs {
        for s in &r.samples {
            let _ = writeln!(
                ts,
                "{},{},{},{:.6},{:.6},{:.6},{},{},{},{},{},{},{},{},{:.3}",
                r.policy.as_str(),
                r.scheduler.as_str(),
                s.time_s,
                s.gpu_util,
                s.cpu_util,
                s.mem_util,
                s.gpus_bound,
                s.gpus_capacity,
                s.queue_len,
                s.running_jobs,
                s.pending_trainers,
                s.stranded_gpus,
                s.gpus_free_blocked,
                opt(s.fulfillment_avg),
                s.pass_ms
            );
        }
    }
    write(&dir.join("timeseries.csv"), &ts)?;

    let mut jobs = String::from(
        "policy,scheduler,job_id,req_workers,req_gpus,submit_s,start_s,finish_s,jct_s,queue_s,rescales\n",
    );
    for r in runs {
        for j in &r.jobs {
            let _ = writeln!(
                jobs,
                "{},{},{},{},{},{},{},{},{},{},{}",
                r.policy.as_str(),
                r.scheduler.as_str(),
                j.id,
                j.req_workers,
                j.req_gpus,
                j.submit_s,
                opt(j.start_s),
                opt(j.finish_s),
                opt(j.jct_s()),
                opt(j.start_s.map(|s| s - j.submit_s)),
                j.rescales
            );
        }
    }
    write(&dir.join("jobs.csv"), &jobs)?;

    let mut sizes = String::from("policy,scheduler,gpus,jobs,completed,avg_jct_s,p99_jct_s\n");
    for b in runs.iter().flat_map(RunResult::jct_by_size) {
        let _ = writeln!(
            sizes,
            "{},{},{},{},{},{},{}",
            b.policy.as_str(),
            b.scheduler.as_str(),
            b.bucket,
            b.jobs,
            b.completed,
            opt(b.avg_jct_s),
            opt(b.p99_jct_s)
        );
    }
    write(&dir.join("jct_by_size.csv"), &sizes)?;
    Ok(())
}

/// Seconds as `12345 s` or hours when large.
fn secs(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v.abs() >= 36_000.0 => format!("{:.1} h", v / 3600.0),
        Some(v) => format!("{v:.0} s"),
    }
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// The side-by-side table of the runs (one column per policy and scheduler), then JCT by job
/// size (plain text, also valid Markdown).
pub fn table(summary: &Summary, runs: &[RunResult]) -> String {
    let p = &summary.policies;
    type Row = (&'static str, Box<dyn Fn(&PolicySummary) -> String>);
    let rows: Vec<Row> = vec![
        (
            "jobs completed",
            Box::new(|s| format!("{}/{}", s.jobs_completed, s.jobs_total)),
        ),
        ("avg JCT", Box::new(|s| secs(s.avg_jct_s))),
        ("p50 JCT", Box::new(|s| secs(s.p50_jct_s))),
        ("p99 JCT", Box::new(|s| secs(s.p99_jct_s))),
        ("makespan", Box::new(|s| secs(s.makespan_s))),
        ("avg queueing", Box::new(|s| secs(s.avg_queue_s))),
        ("GPU util", Box::new(|s| pct(s.gpu_util))),
        ("CPU util", Box::new(|s| pct(s.cpu_util))),
        ("memory util", Box::new(|s| pct(s.mem_util))),
        (
            "CPU/mem-stranded GPUs (avg)",
            Box::new(|s| format!("{:.2}", s.stranded_gpus_avg)),
        ),
        (
            "mean nodes spanned",
            Box::new(|s| {
                s.nodes_spanned_avg
                    .map(|f| format!("{f:.2}"))
                    .unwrap_or("-".into())
            }),
        ),
        (
            "stranded GPU-hours",
            Box::new(|s| format!("{:.0}", s.stranded_gpu_hours)),
        ),
        ("mean pod pending", Box::new(|s| secs(s.pod_pending_avg_s))),
        (
            "partial gangs (ticks / jobs)",
            Box::new(|s| format!("{} / {}", s.partial_gang_ticks, s.partial_gang_jobs)),
        ),
        ("GPU-hours", Box::new(|s| format!("{:.0}", s.gpu_hours))),
        (
            "job-time: gang / room / cooldown / max",
            Box::new(|s| {
                HeldBy::NAMES[..4]
                    .iter()
                    .map(|n| format!("{:.0}%", s.held_by.get(n).copied().unwrap_or(0.0) * 100.0))
                    .collect::<Vec<_>>()
                    .join(" / ")
            }),
        ),
        (
            "goodput",
            Box::new(|s| s.goodput.map(pct).unwrap_or("-".into())),
        ),
        (
            "rescales / job",
            Box::new(|s| format!("{:.3}", s.rescales_per_job)),
        ),
        (
            "fulfillment (avg)",
            Box::new(|s| {
                s.fulfillment_avg
                    .map(|f| format!("{f:.3}"))
                    .unwrap_or("-".into())
            }),
        ),
        (
            "pass p50 / p99 / max",
            Box::new(|s| {
                format!(
                    "{:.2} / {:.2} / {:.2} ms",
                    s.pass_ms_p50, s.pass_ms_p99, s.pass_ms_max
                )
            }),
        ),
    ];
    let mut grid: Vec<Vec<String>> = vec![
        std::iter::once(format!("scenario {}", summary.scenario))
            .chain(p.iter().map(label))
            .collect(),
    ];
    for (name, f) in &rows {
        grid.push(
            std::iter::once(name.to_string())
                .chain(p.iter().map(f))
                .collect(),
        );
    }
    let mut out = render(&grid);

    let buckets: Vec<Vec<BucketJct>> = runs.iter().map(RunResult::jct_by_size).collect();
    let mut grid = vec![
        std::iter::once("JCT by workers (avg / p99)".to_string())
            .chain(p.iter().map(label))
            .collect::<Vec<_>>(),
    ];
    if let Some(first) = buckets.first() {
        for (i, b) in first.iter().enumerate() {
            let name = format!("{} workers ({} jobs)", b.bucket, b.jobs);
            let mut row = vec![name];
            for run in &buckets {
                row.push(match run.get(i) {
                    Some(b) if b.completed < b.jobs => format!(
                        "{} / {} ({} unfinished)",
                        secs(b.avg_jct_s),
                        secs(b.p99_jct_s),
                        b.jobs - b.completed
                    ),
                    Some(b) => format!("{} / {}", secs(b.avg_jct_s), secs(b.p99_jct_s)),
                    None => "-".into(),
                });
            }
            grid.push(row);
        }
    }
    out.push('\n');
    out.push_str(&render(&grid));
    out
}

/// `policy/scheduler`.
fn label(s: &PolicySummary) -> String {
    format!("{}/{}", s.policy.as_str(), s.scheduler.as_str())
}

/// A Markdown-style table with padded columns.
fn render(grid: &[Vec<String>]) -> String {
    let cols = grid.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            grid.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |row: &[String]| {
        let cells: Vec<String> = (0..cols)
            .map(|c| {
                let s = row.get(c).map(String::as_str).unwrap_or("");
                if c == 0 {
                    format!("{s:<w$}", w = widths[c])
                } else {
                    format!("{s:>w$}", w = widths[c])
                }
            })
            .collect();
        format!("| {} |\n", cells.join(" | "))
    };
    let mut out = String::new();
    if let Some((head, rest)) = grid.split_first() {
        out.push_str(&line(head));
        let sep: Vec<String> = widths
            .iter()
            .enumerate()
            .map(|(c, w)| {
                if c == 0 {
                    "-".repeat(*w)
                } else {
                    format!("{}:", "-".repeat(w.saturating_sub(1)))
                }
            })
            .collect();
        out.push_str(&format!("| {} |\n", sep.join(" | ")));
        for r in rest {
            out.push_str(&line(r));
        }
    }
    out
}
