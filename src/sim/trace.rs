//! The job trace: `philly-pollux` CSV, one job per row (columns in `simulations/traces/README.md`).
//!
//! A row that does not parse is an error naming the file, the row (its line number, the header
//! being row 1) and the column.

use std::path::Path;

use super::SimError;
use super::horizon::MAX_HORIZON_S;
use super::scenario::TraceSpec;

/// One job of the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    pub id: String,
    /// Row (line number) in the trace file.
    pub row: usize,
    /// Submit time in simulated seconds (after `time_scale`).
    pub submit_s: f64,
    pub application: String,
    /// The trace's virtual cluster (team) of the job, or "" when the trace has no `vc` column.
    pub vc: String,
    pub gpus_per_worker: i64,
    pub cpus_per_worker: i64,
    pub mem_mib_per_worker: i64,
    /// The rigid size (the `static` policy's gang).
    pub req_workers: i32,
    pub min_workers: i32,
    pub max_workers: i32,
    /// Work to do, in seconds on one worker.
    pub work_worker_s: f64,
}

/// Bytes in the trace's unit of memory, the MiB.
pub const MIB: i64 = 1 << 20;

impl TraceJob {
    /// One worker's request: CPU, memory (MiB in the trace) and GPUs.
    pub fn worker(&self) -> crate::api::Resources {
        crate::api::Resources::new(
            self.cpus_per_worker.saturating_mul(1000),
            self.mem_mib_per_worker.saturating_mul(MIB),
            self.gpus_per_worker,
        )
    }
}

const COLUMNS: [&str; 10] = [
    "job_id",
    "submit_time_s",
    "application",
    "gpus_per_worker",
    "cpus_per_worker",
    "mem_mib_per_worker",
    "req_workers",
    "min_workers",
    "max_workers",
    "work_worker_s",
];

/// A CSV file split into a header and rows of fields (no quoting: the traces have none).
pub(crate) struct Table {
    pub header: Vec<String>,
    /// (row number, fields)
    pub rows: Vec<(usize, Vec<String>)>,
}

impl Table {
    pub(crate) fn read(path: &Path) -> Result<Table, SimError> {
        let text = std::fs::read_to_string(path).map_err(|e| SimError::io(path, e))?;
        let mut lines = text.lines().enumerate();
        let header = loop {
            match lines.next() {
                Some((_, l)) if l.trim().is_empty() => continue,
                Some((_, l)) => break split(l),
                None => {
                    return Err(SimError::Table {
                        path: path.to_path_buf(),
                        message: "empty file, expected a header row".into(),
                    });
                }
            }
        };
        let rows = lines
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| (i + 1, split(l)))
            .collect();
        Ok(Table { header, rows })
    }

    /// Index of each named column; a missing one is an error naming it.
    pub(crate) fn columns<const N: usize>(
        &self,
        path: &Path,
        names: [&str; N],
    ) -> Result<[usize; N], SimError> {
        let mut out = [0; N];
        for (slot, name) in out.iter_mut().zip(names) {
            *slot = self
                .header
                .iter()
                .position(|h| h == name)
                .ok_or_else(|| SimError::Table {
                    path: path.to_path_buf(),
                    message: format!("the header has no column `{name}`"),
                })?;
        }
        Ok(out)
    }
}

fn split(line: &str) -> Vec<String> {
    line.trim_end_matches('\r')
        .split(',')
        .map(|f| f.trim().to_string())
        .collect()
}

/// Reads fields of one row by column, with errors naming file, row and column.
pub(crate) struct RowReader<'a> {
    pub path: &'a Path,
    pub row: usize,
    pub fields: &'a [String],
    pub header: &'a [String],
}

impl RowReader<'_> {
    fn err(&self, col: usize, message: String) -> SimError {
        SimError::Row {
            path: self.path.to_path_buf(),
            row: self.row,
            column: self.header.get(col).cloned().unwrap_or_default(),
            message,
        }
    }

    pub(crate) fn text(&self, col: usize) -> Result<&str, SimError> {
        match self.fields.get(col) {
            None => Err(self.err(
                col,
                format!(
                    "missing: the row has {} fields, the header {}",
                    self.fields.len(),
                    self.header.len()
                ),
            )),
            Some(f) if f.is_empty() => Err(self.err(col, "empty".into())),
            Some(f) => Ok(f),
        }
    }

    pub(crate) fn int(
        &self,
        col: usize,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<i64, SimError> {
        let t = self.text(col)?;
        let v: i64 = t
            .parse()
            .map_err(|_| self.err(col, format!("{t:?} is not an integer")))?;
        if !range.contains(&v) {
            return Err(self.err(
                col,
                format!("{v} is not in {}..={}", range.start(), range.end()),
            ));
        }
        Ok(v)
    }

    pub(crate) fn float(&self, col: usize, min: f64) -> Result<f64, SimError> {
        let t = self.text(col)?;
        let v: f64 = t
            .parse()
            .map_err(|_| self.err(col, format!("{t:?} is not a number")))?;
        if !v.is_finite() {
            return Err(self.err(col, format!("{t:?} is not a finite number")));
        }
        if v < min {
            return Err(self.err(col, format!("{v} is below {min}")));
        }
        Ok(v)
    }

    pub(crate) fn check(
        &self,
        col: usize,
        ok: bool,
        message: impl FnOnce() -> String,
    ) -> Result<(), SimError> {
        if ok {
            Ok(())
        } else {
            Err(self.err(col, message()))
        }
    }
}

/// Reads the trace named by a scenario: rows `skip_jobs..skip_jobs + limit_jobs`, submit times
/// scaled by `time_scale`, reshaped by `multi_gpu_workers` and `cpu_only`, sorted by submit time
/// (ties: row order).
pub fn load(spec: &TraceSpec) -> Result<Vec<TraceJob>, SimError> {
    let path = spec.path.as_path();
    let table = Table::read(path)?;
    let [id, submit, app, gpw, cpw, mem, req, min, max, work] = table.columns(path, COLUMNS)?;
    let vc = table.header.iter().position(|h| h == "vc");
    let take = spec.limit_jobs.unwrap_or(usize::MAX);
    let mut jobs = Vec::new();
    // Row of each job id so far: an id names one job.
    let mut rows_of: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (data_row, (row, fields)) in table
        .rows
        .iter()
        .enumerate()
        .skip(spec.skip_jobs)
        .take(take)
    {
        let r = RowReader {
            path,
            row: *row,
            fields,
            header: &table.header,
        };
        const MAX_WORKERS: i64 = 100_000;
        let mut job = TraceJob {
            id: r.text(id)?.to_string(),
            row: *row,
            submit_s: r.float(submit, 0.0)? * spec.time_scale,
            application: r.text(app)?.to_string(),
            vc: match vc {
                Some(col) => r.text(col)?.to_string(),
                None => String::new(),
            },
            gpus_per_worker: r.int(gpw, 0..=1024)?,
            cpus_per_worker: r.int(cpw, 0..=100_000)?,
            mem_mib_per_worker: r.int(mem, 0..=1 << 40)?,
            req_workers: r.int(req, 1..=MAX_WORKERS)? as i32,
            min_workers: r.int(min, 1..=MAX_WORKERS)? as i32,
            max_workers: r.int(max, 1..=MAX_WORKERS)? as i32,
            work_worker_s: r.float(work, 0.0)?,
        };
        r.check(id, valid_name(&job.id), || {
            format!(
                "{:?} is not a valid name (lowercase letters, digits, '-', '.')",
                job.id
            )
        })?;
        r.check(submit, job.submit_s <= MAX_HORIZON_S, || {
            format!(
                "{:e} s (after time_scale) is past the simulator's horizon cap of {MAX_HORIZON_S:e} s (about 3.2 years)",
                job.submit_s
            )
        })?;
        if let Some(first) = rows_of.insert(job.id.clone(), *row) {
            return Err(r.err(
                id,
                format!(
                    "job_id {:?} is also the id of row {first}: each row is one job",
                    job.id
                ),
            ));
        }
        r.check(max, job.min_workers <= job.max_workers, || {
            format!(
                "{} is below min_workers {}",
                job.max_workers, job.min_workers
            )
        })?;
        // The rigid baseline (`static`) runs a job at its requested size, the elastic policies
        // between its bounds: a request outside them is no job both can run.
        r.check(
            req,
            (job.min_workers..=job.max_workers).contains(&job.req_workers),
            || {
                format!(
                    "{} is outside [min_workers, max_workers] = [{}, {}]",
                    job.req_workers, job.min_workers, job.max_workers
                )
            },
        )?;
        r.check(
            cpw,
            job.gpus_per_worker + job.cpus_per_worker + job.mem_mib_per_worker > 0,
            || "a worker must request some CPU, memory or GPU".into(),
        )?;
        r.check(work, job.work_worker_s > 0.0, || {
            "must be above zero".into()
        })?;
        if !reshape_multi_gpu(&mut job, data_row, spec) {
            reshape_cpu_only(&mut job, data_row, spec);
        }
        jobs.push(job);
    }
    // Nothing to replay: a report of no jobs would read as a result.
    if jobs.is_empty() {
        return Err(SimError::Table {
            path: path.to_path_buf(),
            message: format!(
                "no job to replay: {} data rows, skip_jobs {}, limit_jobs {}",
                table.rows.len(),
                spec.skip_jobs,
                spec.limit_jobs
                    .map_or_else(|| "unset".to_string(), |n| n.to_string())
            ),
        });
    }
    jobs.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s).then(a.row.cmp(&b.row)));
    Ok(jobs)
}

/// `trace.multi_gpu_workers`: a job of at least `min_gpus` GPUs runs as workers of
/// `per_worker_gpus[data_row % len]` GPUs when that is a multiple of its GPUs per worker and
/// divides its GPUs; each new worker stands for `f` old ones (`f` = new / old GPUs per worker):
/// its CPU and memory are `f` times the old, `req_workers` and `max_workers` are divided by `f`
/// (`max` at least the new `req`), `min_workers` is `ceil(min / f)`. The work is unchanged: it is
/// counted in seconds on one GPU. Returns whether the job was reshaped.
fn reshape_multi_gpu(job: &mut TraceJob, data_row: usize, spec: &TraceSpec) -> bool {
    let Some(m) = &spec.multi_gpu_workers else {
        return false;
    };
    let gpus = job.gpus_per_worker * i64::from(job.req_workers);
    if job.gpus_per_worker == 0 || gpus < m.min_gpus || m.per_worker_gpus.is_empty() {
        return false;
    }
    let g = m.per_worker_gpus[data_row % m.per_worker_gpus.len()];
    if g % job.gpus_per_worker != 0 || gpus % g != 0 {
        return false;
    }
    let f = g / job.gpus_per_worker;
    let Ok(f32) = i32::try_from(f) else {
        return false;
    };
    job.gpus_per_worker = g;
    job.cpus_per_worker *= f;
    job.mem_mib_per_worker *= f;
    job.req_workers /= f32;
    job.min_workers = (job.min_workers + f32 - 1) / f32;
    job.max_workers = (job.max_workers / f32).max(job.req_workers);
    true
}

/// `trace.cpu_only`: the job of 0-based data row `d` with `d % every == every - 1` runs with
/// workers of `cpus` cores, `memory_mib` MiB and no GPU; its worker counts and work are kept.
fn reshape_cpu_only(job: &mut TraceJob, data_row: usize, spec: &TraceSpec) {
    let Some(c) = &spec.cpu_only else {
        return;
    };
    if c.every > 0 && data_row % c.every == c.every - 1 {
        job.gpus_per_worker = 0;
        job.cpus_per_worker = c.cpus;
        job.mem_mib_per_worker = c.memory_mib;
    }
}

/// Data-parallel replicas of `workers` trainers of `gpus_per_worker` GPUs each: one per GPU, one
/// per trainer for CPU-only jobs. Speedup models count these.
pub fn replicas(workers: u32, gpus_per_worker: i64) -> u32 {
    let per = u32::try_from(gpus_per_worker.max(1)).unwrap_or(u32::MAX);
    workers.saturating_mul(per)
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 200
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

/// Which size class a job falls in, by requested workers: `1`, `2-4`, `8`, `>=16`, or `other`.
pub fn size_bucket(req_workers: i32) -> &'static str {
    match req_workers {
        1 => "1",
        2..=4 => "2-4",
        8 => "8",
        n if n >= 16 => ">=16",
        _ => "other",
    }
}

/// The size buckets in report order.
pub const SIZE_BUCKETS: [&str; 5] = ["1", "2-4", "8", ">=16", "other"];

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "job_id,submit_time_s,orig_timestamp,vc,num_gpus,duration_s,gpu_time_s,application,gpus_per_worker,cpus_per_worker,mem_mib_per_worker,req_workers,min_workers,max_workers,work_worker_s";

    fn load_text(body: &str) -> Result<Vec<TraceJob>, SimError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        std::fs::write(&path, format!("{HEADER}\n{body}")).unwrap();
        load(&TraceSpec {
            path,
            limit_jobs: None,
            skip_jobs: 0,
            time_scale: 0.5,
            multi_gpu_workers: None,
            cpu_only: None,
        })
    }

    #[test]
    fn reads_rows_sorted_and_scaled() {
        let jobs = load_text(
            "b,20,x,vc,1,66,66,bert,1,10,100,1,1,32,66\n\
             a,10,x,vc,2,66,66,bert,1,10,100,2,1,32,120\n",
        )
        .unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].id, "a");
        assert_eq!(jobs[0].submit_s, 5.0);
        assert_eq!(jobs[0].row, 3);
        assert_eq!(jobs[1].work_worker_s, 66.0);
    }

    #[test]
    fn bad_rows_name_file_row_and_column() {
        let e = load_text(
            "a,10,x,vc,1,66,66,bert,1,10,100,1,1,32,66\n\
             b,20,x,vc,1,66,66,bert,1,ten,100,1,1,32,66\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("t.csv") && e.contains("row 3") && e.contains("`cpus_per_worker`"),
            "{e}"
        );
        let e = load_text("a,10,x,vc,1,66,66,bert,1,10,100,1,4,2,66\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("row 2") && e.contains("`max_workers`"), "{e}");
        let e = load_text("a,10,x,vc,1,66,66,bert,1,10,100,1,1\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("row 2") && e.contains("`max_workers`") && e.contains("missing"),
            "{e}"
        );
    }

    #[test]
    fn multi_gpu_workers_and_cpu_only_reshape_rows() {
        use crate::sim::scenario::{CpuOnly, MultiGpuWorkers};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        // Data rows 0..5: 16 GPUs, 8 GPUs, 4 GPUs, 1 GPU, 32 GPUs, 1 GPU.
        let body = "a,0,x,vc,16,66,66,bert,1,10,100,16,1,32,66\n\
                    b,1,x,vc,8,66,66,bert,1,10,100,8,1,8,66\n\
                    c,2,x,vc,4,66,66,bert,1,10,100,4,1,32,66\n\
                    d,3,x,vc,1,66,66,bert,1,10,100,1,1,32,66\n\
                    e,4,x,vc,32,66,66,bert,1,10,100,32,1,64,66\n\
                    f,5,x,vc,1,66,66,bert,1,10,100,1,1,32,66\n";
        std::fs::write(&path, format!("{HEADER}\n{body}")).unwrap();
        let spec = TraceSpec {
            path,
            limit_jobs: None,
            skip_jobs: 1,
            time_scale: 1.0,
            multi_gpu_workers: Some(MultiGpuWorkers {
                min_gpus: 8,
                per_worker_gpus: vec![4, 8],
            }),
            cpu_only: Some(CpuOnly {
                every: 3,
                cpus: 16,
                memory_mib: 4096,
            }),
        };
        let jobs = load(&spec).unwrap();
        let shape = |j: &TraceJob| {
            (
                j.id.clone(),
                j.gpus_per_worker,
                j.cpus_per_worker,
                j.mem_mib_per_worker,
                j.req_workers,
                j.min_workers,
                j.max_workers,
            )
        };
        let got: Vec<_> = jobs.iter().map(shape).collect();
        assert_eq!(
            got,
            vec![
                // Row 1 (odd): 8-GPU workers.
                ("b".into(), 8, 80, 800, 1, 1, 1),
                // Row 2: 4 GPUs is below min_gpus; 2 % 3 == 2: CPU-only.
                ("c".into(), 0, 16, 4096, 4, 1, 32),
                ("d".into(), 1, 10, 100, 1, 1, 32),
                // Row 4 (even): 4-GPU workers.
                ("e".into(), 4, 40, 400, 8, 1, 16),
                // Row 5: CPU-only.
                ("f".into(), 0, 16, 4096, 1, 1, 32),
            ]
        );
        assert!(jobs.iter().all(|j| j.work_worker_s == 66.0));
        assert_eq!(replicas(2, 4), 8);
        assert_eq!(replicas(3, 0), 3);
    }

    #[test]
    fn buckets() {
        assert_eq!(size_bucket(1), "1");
        assert_eq!(size_bucket(3), "2-4");
        assert_eq!(size_bucket(8), "8");
        assert_eq!(size_bucket(32), ">=16");
        assert_eq!(size_bucket(6), "other");
        assert_eq!(size_bucket(0), "other");
    }
}
