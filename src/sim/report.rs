//! Writing a simulation's results: `summary.json`, `timeseries.csv`, `jobs.csv`,
//! `jct_by_size.csv`, `queues.csv` (with Kueue queues), and the side-by-side terminal table.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::SimError;
use super::metrics::{BucketJct, HeldBy, PolicySummary, QueueSummary, RunResult};

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

    if runs.iter().any(|r| !r.queues.is_empty()) {
        write(&dir.join("queues.csv"), &queues_csv(summary, runs))?;
    }
    Ok(())
}

/// The all-job line of a run in the queue table and `queues.csv` (no queue can be so named).
const ALL_JOBS: &str = "(all)";

/// The all-job line of a run: the queues' nominal GPUs summed, the run's JCT.
fn all_jobs(s: &PolicySummary, queues: &[QueueSummary], cluster_gpus: i64) -> QueueSummary {
    let nominal_gpus = queues.iter().map(|q| q.nominal_gpus).sum::<i64>();
    QueueSummary {
        policy: s.policy,
        scheduler: s.scheduler,
        queue: ALL_JOBS.to_string(),
        nominal_gpus,
        nominal_share: nominal_gpus as f64 / cluster_gpus.max(1) as f64,
        waiting_h: 0.0,
        used_share: None,
        demand_share: None,
        entitled_share: None,
        jobs: s.jobs_total,
        completed: s.jobs_completed,
        avg_jct_s: s.avg_jct_s,
        p99_jct_s: s.p99_jct_s,
        deferred_scale_ups: queues.iter().map(|q| q.deferred_scale_ups).sum(),
    }
}

/// Per run, its queues' lines then its all-job line.
fn queue_lines(summary: &Summary, runs: &[RunResult]) -> Vec<QueueSummary> {
    let mut out = Vec::new();
    for (s, r) in summary.policies.iter().zip(runs) {
        let Some(first) = r.queues.first() else {
            continue;
        };
        let queues = r.queue_summaries();
        let all = all_jobs(s, &queues, first.cluster_gpus);
        out.extend(queues);
        out.push(all);
    }
    out
}

/// `queues.csv`: one line per run and queue, and a `(all)` line per run.
pub fn queues_csv(summary: &Summary, runs: &[RunResult]) -> String {
    let mut out = String::from(
        "policy,scheduler,queue,nominal_gpus,nominal_share,waiting_h,used_share,demand_share,entitled_share,jobs,completed,avg_jct_s,p99_jct_s,deferred_scale_ups\n",
    );
    for q in queue_lines(summary, runs) {
        let _ = writeln!(
            out,
            "{},{},{},{},{:.6},{:.3},{},{},{},{},{},{},{},{}",
            q.policy.as_str(),
            q.scheduler.as_str(),
            q.queue,
            q.nominal_gpus,
            q.nominal_share,
            q.waiting_h,
            opt(q.used_share),
            opt(q.demand_share),
            opt(q.entitled_share),
            q.jobs,
            q.completed,
            opt(q.avg_jct_s),
            opt(q.p99_jct_s),
            q.deferred_scale_ups
        );
    }
    out
}

/// The queue table: per run and queue, the nominal share, the hours it had waiting work, the
/// shares used and demanded meanwhile, min(quota, demand) and the gap, its jobs and their JCT,
/// and its scale-ups Kueue could not admit at once.
pub fn queue_table(summary: &Summary, runs: &[RunResult]) -> String {
    let lines = queue_lines(summary, runs);
    if lines.is_empty() {
        return String::new();
    }
    let share = |v: Option<f64>| v.map(pct).unwrap_or("-".into());
    let mut grid = vec![
        [
            "queues (shares of the cluster's GPUs)",
            "queue",
            "nominal",
            "waiting",
            "used while waiting",
            "demand",
            "min(quota, demand)",
            "used − min",
            "jobs",
            "avg JCT",
            "p99 JCT",
            "scale-ups waited",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for q in &lines {
        let gap = q
            .used_share
            .zip(q.entitled_share)
            .map(|(u, e)| format!("{:+.1} pt", (u - e) * 100.0))
            .unwrap_or("-".into());
        let jobs = if q.completed < q.jobs {
            format!("{} ({} unfinished)", q.jobs, q.jobs - q.completed)
        } else {
            q.jobs.to_string()
        };
        grid.push(vec![
            format!("{}/{}", q.policy.as_str(), q.scheduler.as_str()),
            q.queue.clone(),
            format!("{} ({})", pct(q.nominal_share), q.nominal_gpus),
            if q.queue == ALL_JOBS {
                "-".into()
            } else {
                format!("{:.1} h", q.waiting_h)
            },
            share(q.used_share),
            share(q.demand_share),
            share(q.entitled_share),
            gap,
            jobs,
            secs(q.avg_jct_s),
            secs(q.p99_jct_s),
            q.deferred_scale_ups.to_string(),
        ]);
    }
    render(&grid)
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
/// size, then with Kueue queues the queue table (plain text, also valid Markdown).
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
        ("worst wait", Box::new(|s| secs(s.max_queue_s))),
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
    let queues = queue_table(summary, runs);
    if !queues.is_empty() {
        out.push('\n');
        out.push_str(&queues);
    }
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
