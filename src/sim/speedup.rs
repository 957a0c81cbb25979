//! Speedup models: how many worker-seconds per second a job makes with `n` trainers.

use std::collections::BTreeMap;
use std::path::Path;

use super::SimError;
use super::scenario::SpeedupSpec;
use super::trace::{RowReader, Table};

/// A loaded speedup model.
#[derive(Debug, Clone, PartialEq)]
pub enum SpeedupModel {
    /// `n`.
    Linear,
    /// `1 / (p + (1 - p) / n)`.
    Amdahl(f64),
    /// Per-application curves at the simulated GPUs per node: `(workers, speedup)` sorted by
    /// workers; linear interpolation between points, flat beyond the last, `n` below the first.
    Pollux {
        gpus_per_node: u32,
        curves: BTreeMap<String, Vec<(f64, f64)>>,
    },
}

impl SpeedupModel {
    /// Builds the model a scenario names, reading its table when it has one.
    pub fn load(spec: &SpeedupSpec) -> Result<SpeedupModel, SimError> {
        match spec {
            SpeedupSpec::Linear => Ok(SpeedupModel::Linear),
            SpeedupSpec::Amdahl(p) => Ok(SpeedupModel::Amdahl(*p)),
            SpeedupSpec::Pollux {
                path,
                gpus_per_node,
            } => load_pollux(path, *gpus_per_node),
        }
    }

    /// Worker-seconds per second with `n` trainers of an `application` job.
    pub fn speedup(&self, application: &str, n: u32) -> f64 {
        if n == 0 {
            return 0.0;
        }
        let x = f64::from(n);
        match self {
            SpeedupModel::Linear => x,
            SpeedupModel::Amdahl(p) => 1.0 / (p + (1.0 - p) / x),
            SpeedupModel::Pollux { curves, .. } => match curves.get(application) {
                Some(points) => interpolate(points, x),
                None => x,
            },
        }
    }

    /// Every application of the trace must have a curve (pollux only); `rows` gives
    /// `(application, trace row)`.
    pub fn check_applications<'a>(
        &self,
        rows: impl Iterator<Item = (&'a str, usize)>,
        trace: &Path,
    ) -> Result<(), SimError> {
        let SpeedupModel::Pollux { curves, .. } = self else {
            return Ok(());
        };
        for (app, row) in rows {
            if !curves.contains_key(app) {
                return Err(SimError::Row {
                    path: trace.to_path_buf(),
                    row,
                    column: "application".into(),
                    message: format!(
                        "{app:?} has no speedup curve (known: {})",
                        curves.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                });
            }
        }
        Ok(())
    }
}

fn interpolate(points: &[(f64, f64)], x: f64) -> f64 {
    let Some(&(first_n, first_s)) = points.first() else {
        return x;
    };
    if x <= first_n {
        return first_s * x / first_n;
    }
    for w in points.windows(2) {
        let (n0, s0) = w[0];
        let (n1, s1) = w[1];
        if x <= n1 {
            return s0 + (s1 - s0) * (x - n0) / (n1 - n0);
        }
    }
    points.last().map(|p| p.1).unwrap_or(x)
}

/// Reads `pollux-speedup.csv` (`application, gpus_per_node, num_workers, ..., speedup, ...`) and
/// keeps the curves of the listed `gpus_per_node` nearest to the requested one (ties: the larger).
fn load_pollux(path: &Path, gpus_per_node: u32) -> Result<SpeedupModel, SimError> {
    let table = Table::read(path)?;
    let [app, gpn, workers, speedup] = table.columns(
        path,
        ["application", "gpus_per_node", "num_workers", "speedup"],
    )?;
    let mut all: BTreeMap<(u32, String), Vec<(f64, f64)>> = BTreeMap::new();
    for (row, fields) in &table.rows {
        let r = RowReader {
            path,
            row: *row,
            fields,
            header: &table.header,
        };
        let a = r.text(app)?.to_string();
        let g = r.int(gpn, 1..=1024)? as u32;
        let n = r.int(workers, 1..=1_000_000)? as f64;
        let s = r.float(speedup, 0.0)?;
        all.entry((g, a)).or_default().push((n, s));
    }
    let Some(chosen) = all
        .keys()
        .map(|(g, _)| *g)
        .min_by_key(|g| (g.abs_diff(gpus_per_node), std::cmp::Reverse(*g)))
    else {
        return Err(SimError::Table {
            path: path.to_path_buf(),
            message: "no speedup rows".into(),
        });
    };
    if chosen != gpus_per_node {
        tracing::warn!(
            requested = gpus_per_node,
            used = chosen,
            "no speedup curves for this many GPUs per node; using the nearest"
        );
    }
    let mut curves = BTreeMap::new();
    for ((g, a), mut points) in all {
        if g != chosen {
            continue;
        }
        points.sort_by(|x, y| x.0.total_cmp(&y.0));
        points.dedup_by(|x, y| x.0 == y.0);
        curves.insert(a, points);
    }
    Ok(SpeedupModel::Pollux {
        gpus_per_node: chosen,
        curves,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_and_amdahl() {
        assert_eq!(SpeedupModel::Linear.speedup("x", 4), 4.0);
        assert_eq!(SpeedupModel::Linear.speedup("x", 0), 0.0);
        let a = SpeedupModel::Amdahl(0.5);
        assert_eq!(a.speedup("x", 1), 1.0);
        assert!((a.speedup("x", 2) - 4.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn pollux_interpolates_and_holds_flat() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.csv");
        std::fs::write(
            &path,
            "application,gpus_per_node,num_workers,speedup\n\
             bert,8,1,1.0\nbert,8,2,1.8\nbert,8,4,3.0\nbert,4,1,1.0\nbert,4,4,2.0\n",
        )
        .unwrap();
        let m = load_pollux(&path, 8).unwrap();
        assert_eq!(m.speedup("bert", 1), 1.0);
        assert!((m.speedup("bert", 3) - 2.4).abs() < 1e-12);
        assert_eq!(m.speedup("bert", 64), 3.0);
        let m = load_pollux(&path, 5).unwrap();
        assert_eq!(m.speedup("bert", 4), 2.0);
        let e = m
            .check_applications([("bert", 2), ("gpt", 3)].into_iter(), Path::new("t.csv"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("row 3") && e.contains("`application`") && e.contains("gpt"),
            "{e}"
        );
    }
}
