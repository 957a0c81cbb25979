//! SVG plots of a simulation: GPU utilisation over time, JCT CDF, queue length over time; one
//! line per run (policy/scheduler): every run its own colour (up to [`COLORS`]'s twelve), solid
//! with trainscale binding, dashed with the kube-scheduler model.

use std::path::Path;

use plotters::prelude::*;

use super::SimError;
use super::metrics::{RunResult, TickSample};
use super::scenario::SchedulerKind;

/// One colour per run, in run order (Tableau's twelve, dark and light pairs split apart).
const COLORS: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(0, 0, 0),
    RGBColor(174, 199, 232),
];

/// One plotted line: its label, whether it is dashed (the kube-scheduler model), its points.
type Series = (String, bool, Vec<(f64, f64)>);

/// Whether a run's line is dashed: runs under the kube-scheduler model.
fn dashed(r: &RunResult) -> bool {
    r.scheduler == SchedulerKind::KubeScheduler
}

/// At most this many points per line (averaged in bins), to keep the files small.
const MAX_POINTS: usize = 1500;

/// Writes `gpu_util.svg`, `jct_cdf.svg` and `queue_length.svg` into `dir`.
pub fn write_all(dir: &Path, scenario: &str, runs: &[RunResult]) -> Result<(), SimError> {
    let series = |f: fn(&TickSample) -> f64| -> Vec<Series> {
        runs.iter()
            .map(|r| {
                let pts: Vec<(f64, f64)> = r
                    .samples
                    .iter()
                    .map(|s| (s.time_s / 3600.0, f(s)))
                    .collect();
                (r.label(), dashed(r), downsample(&pts))
            })
            .collect()
    };
    lines(
        &dir.join("gpu_util.svg"),
        &format!("{scenario}: GPU utilisation"),
        "simulated hours",
        "GPUs bound / capacity",
        &series(|s| s.gpu_util),
        false,
    )?;
    lines(
        &dir.join("queue_length.svg"),
        &format!("{scenario}: jobs waiting below min"),
        "simulated hours",
        "queue length (jobs)",
        &series(|s| f64::from(s.queue_len)),
        false,
    )?;
    let cdfs: Vec<Series> = runs
        .iter()
        .map(|r| {
            let jcts = r.jcts();
            let n = r.jobs.len().max(1) as f64;
            let pts: Vec<(f64, f64)> = jcts
                .iter()
                .enumerate()
                .map(|(i, v)| (v.max(1.0), (i + 1) as f64 / n))
                .collect();
            (r.label(), dashed(r), downsample(&pts))
        })
        .collect();
    lines(
        &dir.join("jct_cdf.svg"),
        &format!("{scenario}: JCT CDF (unfinished jobs never reach 1)"),
        "JCT (s, log scale)",
        "fraction of jobs",
        &cdfs,
        true,
    )
}

/// Keeps at most [`MAX_POINTS`] points: means of equal-sized consecutive bins.
fn downsample(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points.to_vec();
    }
    let bin = points.len().div_ceil(MAX_POINTS);
    points
        .chunks(bin)
        .map(|c| {
            let n = c.len() as f64;
            (
                c.iter().map(|p| p.0).sum::<f64>() / n,
                c.iter().map(|p| p.1).sum::<f64>() / n,
            )
        })
        .collect()
}

fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    log_x: bool,
) -> Result<(), SimError> {
    let err = |e: &dyn std::fmt::Display| SimError::Plot {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let all = series.iter().flat_map(|(_, _, p)| p.iter());
    let x_max = all.clone().map(|p| p.0).fold(1.0f64, f64::max);
    let y_max = all.map(|p| p.1).fold(0.0f64, f64::max).max(1.0) * 1.05;
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .draw()
                .map_err(|e| err(&e))?;
            for (i, (name, dash, pts)) in series.iter().enumerate() {
                let color = COLORS[i % COLORS.len()];
                let style = color.stroke_width(2);
                let drawn = if *dash {
                    chart.draw_series(DashedLineSeries::new(pts.iter().copied(), 6, 4, style))
                } else {
                    chart.draw_series(LineSeries::new(pts.iter().copied(), style))
                };
                let dash = *dash;
                drawn
                    .map_err(|e| err(&e))?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        // Two strokes, with a gap between them when dashed.
                        let gap = if dash { 4 } else { 0 };
                        EmptyElement::at((x, y))
                            + PathElement::new(vec![(0, 0), (10 - gap, 0)], style)
                            + PathElement::new(vec![(10 + gap, 0), (20, 0)], style)
                    });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(&e))?;
        }};
    }
    if log_x {
        draw!(
            builder
                .build_cartesian_2d((1.0f64..x_max.max(10.0)).log_scale(), 0.0f64..y_max)
                .map_err(|e| err(&e))?
        );
    } else {
        draw!(
            builder
                .build_cartesian_2d(0.0f64..x_max, 0.0f64..y_max)
                .map_err(|e| err(&e))?
        );
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
