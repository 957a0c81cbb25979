//! Speedup models: how many worker-seconds per second a job makes with `n` data-parallel
//! workers (GPU replicas), and, for `pollux-throughput`, whether they span more than one node.

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
    /// Pollux's throughput model per application at its reference local batch size; sees
    /// whether the workers span more than one node.
    PolluxThroughput(BTreeMap<String, ThroughputParams>),
}

/// The fitted Pollux throughput parameters of one application (`pollux-throughput-params.csv`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThroughputParams {
    pub alpha_c: f64,
    pub beta_c: f64,
    pub alpha_n: f64,
    pub beta_n: f64,
    pub alpha_r: f64,
    pub beta_r: f64,
    pub gamma: f64,
    /// The fixed local batch size `m`.
    pub ref_local_bsz: f64,
}

impl ThroughputParams {
    /// Seconds per iteration of `k` workers: `(T_grad^γ + T_sync^γ)^(1/γ)` with
    /// `T_grad = α_c + β_c·m`, `T_sync` = 0 for one worker, `α_r + β_r·(k − 2)` on one node,
    /// `α_n + β_n·(k − 2)` across nodes.
    pub fn iteration_s(&self, k: u32, multi_node: bool) -> f64 {
        let grad = self.alpha_c + self.beta_c * self.ref_local_bsz;
        let sync = match (k, multi_node) {
            (0 | 1, _) => return grad,
            (k, false) => self.alpha_r + self.beta_r * f64::from(k - 2),
            (k, true) => self.alpha_n + self.beta_n * f64::from(k - 2),
        };
        (grad.powf(self.gamma) + sync.powf(self.gamma)).powf(1.0 / self.gamma)
    }

    /// `throughput(k, multi_node) / throughput(1, one node)`, throughput ∝ `k / T_iter`.
    pub fn speedup(&self, k: u32, multi_node: bool) -> f64 {
        if k == 0 {
            return 0.0;
        }
        f64::from(k) * self.iteration_s(1, false) / self.iteration_s(k, multi_node)
    }
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
            SpeedupSpec::PolluxThroughput { path } => load_throughput(path),
        }
    }

    /// Worker-seconds per second of an `application` job with `n` workers, spanning more than
    /// one node or not (only `pollux-throughput` looks at it).
    pub fn speedup(&self, application: &str, n: u32, multi_node: bool) -> f64 {
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
            SpeedupModel::PolluxThroughput(params) => match params.get(application) {
                Some(p) => p.speedup(n, multi_node),
                None => x,
            },
        }
    }

    /// Every application of the trace must have a curve (`pollux`) or parameters
    /// (`pollux-throughput`); `rows` gives `(application, trace row)`.
    pub fn check_applications<'a>(
        &self,
        rows: impl Iterator<Item = (&'a str, usize)>,
        trace: &Path,
    ) -> Result<(), SimError> {
        let known: Vec<&String> = match self {
            SpeedupModel::Pollux { curves, .. } => curves.keys().collect(),
            SpeedupModel::PolluxThroughput(params) => params.keys().collect(),
            _ => return Ok(()),
        };
        for (app, row) in rows {
            if !known.iter().any(|k| k.as_str() == app) {
                return Err(SimError::Row {
                    path: trace.to_path_buf(),
                    row,
                    column: "application".into(),
                    message: format!(
                        "{app:?} has no speedup curve (known: {})",
                        known
                            .iter()
                            .map(|k| k.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
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

/// Reads `pollux-throughput-params.csv` (`application, alpha_c, beta_c, alpha_n, beta_n,
/// alpha_r, beta_r, gamma, ref_local_bsz, ...`): one row per application.
fn load_throughput(path: &Path) -> Result<SpeedupModel, SimError> {
    let table = Table::read(path)?;
    let cols = table.columns(
        path,
        [
            "application",
            "alpha_c",
            "beta_c",
            "alpha_n",
            "beta_n",
            "alpha_r",
            "beta_r",
            "gamma",
            "ref_local_bsz",
        ],
    )?;
    let [app, ac, bc, an, bn, ar, br, gamma, bsz] = cols;
    let mut params = BTreeMap::new();
    for (row, fields) in &table.rows {
        let r = RowReader {
            path,
            row: *row,
            fields,
            header: &table.header,
        };
        let name = r.text(app)?.to_string();
        let p = ThroughputParams {
            alpha_c: r.float(ac, 0.0)?,
            beta_c: r.float(bc, 0.0)?,
            alpha_n: r.float(an, 0.0)?,
            beta_n: r.float(bn, 0.0)?,
            alpha_r: r.float(ar, 0.0)?,
            beta_r: r.float(br, 0.0)?,
            gamma: r.float(gamma, 0.0)?,
            ref_local_bsz: r.float(bsz, 0.0)?,
        };
        r.check(gamma, p.gamma >= 1.0, || format!("{} is below 1", p.gamma))?;
        r.check(bsz, p.ref_local_bsz >= 1.0, || {
            format!("{} is below 1", p.ref_local_bsz)
        })?;
        r.check(ac, p.alpha_c + p.beta_c * p.ref_local_bsz > 0.0, || {
            "the compute time alpha_c + beta_c * ref_local_bsz must be above zero".into()
        })?;
        r.check(app, !params.contains_key(&name), || {
            format!("{name:?} is listed twice")
        })?;
        params.insert(name, p);
    }
    if params.is_empty() {
        return Err(SimError::Table {
            path: path.to_path_buf(),
            message: "no parameter rows".into(),
        });
    }
    Ok(SpeedupModel::PolluxThroughput(params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_and_amdahl() {
        assert_eq!(SpeedupModel::Linear.speedup("x", 4, true), 4.0);
        assert_eq!(SpeedupModel::Linear.speedup("x", 0, false), 0.0);
        let a = SpeedupModel::Amdahl(0.5);
        assert_eq!(a.speedup("x", 1, false), 1.0);
        assert!((a.speedup("x", 2, true) - 4.0 / 3.0).abs() < 1e-12);
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
        assert_eq!(m.speedup("bert", 1, false), 1.0);
        assert!((m.speedup("bert", 3, false) - 2.4).abs() < 1e-12);
        assert_eq!(m.speedup("bert", 64, false), 3.0);
        let m = load_pollux(&path, 5).unwrap();
        assert_eq!(m.speedup("bert", 4, false), 2.0);
        let e = m
            .check_applications([("bert", 2), ("gpt", 3)].into_iter(), Path::new("t.csv"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("row 3") && e.contains("`application`") && e.contains("gpt"),
            "{e}"
        );
    }

    fn bundled_throughput() -> SpeedupModel {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("simulations/traces/pollux-throughput-params.csv");
        load_throughput(&path).unwrap()
    }

    #[test]
    fn bert_on_one_node_steps_about_1_8_times_faster_than_on_two() {
        let SpeedupModel::PolluxThroughput(params) = bundled_throughput() else {
            panic!("not the throughput model");
        };
        let bert = params["bert"];
        let ratio = bert.iteration_s(8, true) / bert.iteration_s(8, false);
        assert!((ratio - 1.8).abs() < 0.05, "{ratio}");
        // One worker: no sync; speedup(1) is 1 either way.
        assert_eq!(bert.iteration_s(1, true), 0.171936 + 0.058611 * 12.0);
        assert_eq!(bert.speedup(1, false), 1.0);
        let m = SpeedupModel::PolluxThroughput(params);
        let one = m.speedup("bert", 8, false);
        let two = m.speedup("bert", 8, true);
        assert!((one / two - ratio).abs() < 1e-12);
        assert!(one > two && two > 0.0);
    }

    #[test]
    fn throughput_matches_the_compact_curves_of_pollux_speedup_csv() {
        // pollux-speedup.csv evaluates the same fit with compact placement on 8-GPU nodes.
        let m = bundled_throughput();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/traces");
        let curves = load_pollux(&dir.join("pollux-speedup.csv"), 8).unwrap();
        for app in [
            "bert",
            "cifar10",
            "deepspeech2",
            "imagenet",
            "ncf",
            "yolov3",
        ] {
            for n in [1u32, 2, 4, 8, 16, 32] {
                let want = curves.speedup(app, n, false);
                let got = m.speedup(app, n, n > 8);
                assert!(
                    (got - want).abs() / want < 2e-3,
                    "{app} {n}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn a_bad_throughput_row_names_file_row_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.csv");
        let header =
            "application,alpha_c,beta_c,alpha_n,beta_n,alpha_r,beta_r,gamma,ref_local_bsz\n";
        let good = "bert,0.17,0.05,1.3,0.009,0.28,0.009,1.9,12\n";
        let cases = [
            (
                "bert,0.17,0.05,1.3,0.009,0.28,x,1.9,12\n",
                "row 3",
                "beta_r",
            ),
            (
                "gpt,0.17,0.05,1.3,0.009,0.28,0.009,0.5,12\n",
                "row 3",
                "gamma",
            ),
            (
                "gpt,0.17,0.05,1.3,0.009,0.28,0.009,1.9\n",
                "row 3",
                "ref_local_bsz",
            ),
            (
                "bert,0.17,0.05,1.3,0.009,0.28,0.009,1.9,12\n",
                "row 3",
                "application",
            ),
            (
                "gpt,0.17,0.05,-1.3,0.009,0.28,0.009,1.9,12\n",
                "row 3",
                "alpha_n",
            ),
        ];
        for (bad, row, column) in cases {
            std::fs::write(&path, format!("{header}{good}{bad}")).unwrap();
            let e = load_throughput(&path).unwrap_err().to_string();
            assert!(
                e.contains("p.csv") && e.contains(row) && e.contains(&format!("`{column}`")),
                "{column}: {e}"
            );
        }
        std::fs::write(&path, "application,alpha_c\nbert,1\n").unwrap();
        let e = load_throughput(&path).unwrap_err().to_string();
        assert!(e.contains("p.csv") && e.contains("`beta_c`"), "{e}");
        std::fs::write(&path, header).unwrap();
        let e = load_throughput(&path).unwrap_err().to_string();
        assert!(e.contains("no parameter rows"), "{e}");
        // An application of the trace without parameters.
        std::fs::write(&path, format!("{header}{good}")).unwrap();
        let m = load_throughput(&path).unwrap();
        let e = m
            .check_applications([("gpt", 7)].into_iter(), Path::new("t.csv"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("t.csv") && e.contains("row 7") && e.contains("gpt"),
            "{e}"
        );
    }
}
