//! A job's declared speedup curve (annotation `trainscale.io/speedup`), as the `goodput` policy
//! reads it: `"1:1,2:1.9,4:3.5,8:6.1"` (trainers:speedup points, interpolated) or
//! `"amdahl:0.95"` (the parallel fraction of Amdahl's law).
//!
//! A declared curve never promises more than linear speedup, and its gains never grow with size:
//! the curve is normalised to `s(1) = 1`, then each trainer's relative gain
//! `s(n+1)/s(n) − 1` is capped at what linear speedup would give (`1/n`) and at the gain of the
//! trainer before it. So declaring a steep curve cannot win a job more than a linear one would.

/// The annotation a job declares its speedup curve in.
pub const SPEEDUP_ANNOTATION: &str = "trainscale.io/speedup";

/// Most points a declared curve may have, and the largest trainer count a point may name.
const MAX_POINTS: usize = 64;
const MAX_POINT_TRAINERS: u32 = 1 << 20;

/// A parsed speedup curve: the relative gain of each trainer, capped as the module says.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedupCurve {
    /// `gains[n - 1]` is the relative gain of going from `n` to `n + 1` trainers, for `n` up to
    /// the curve's last point (exclusive); past it the last gain shrinks as linear growth's would.
    gains: Vec<f64>,
    /// How speedup goes on past the gains listed.
    tail: Tail,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tail {
    /// `s(n) = s_end + slope·(n − end)` past `end` (a declared points curve).
    Linear { end: u32, s_end: f64, slope: f64 },
    /// Amdahl's law with parallel fraction `p` for every `n`.
    Amdahl { p: f64 },
}

/// Why an annotation value is not a speedup curve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpeedupError(String);

impl SpeedupCurve {
    /// Linear speedup: every trainer adds `1/n`.
    pub fn linear_gain(n: i32) -> f64 {
        if n <= 0 {
            f64::INFINITY
        } else {
            1.0 / f64::from(n)
        }
    }

    /// Parses an annotation value (see the module doc).
    pub fn parse(text: &str) -> Result<SpeedupCurve, SpeedupError> {
        let text = text.trim();
        let bad = |why: String| SpeedupError(why);
        if let Some(p) = text.strip_prefix("amdahl:") {
            let p: f64 = p.trim().parse().map_err(|_| {
                bad(format!(
                    "{text:?}: the parallel fraction after \"amdahl:\" must be a number"
                ))
            })?;
            if !(0.0..=1.0).contains(&p) {
                return Err(bad(format!(
                    "{text:?}: the parallel fraction must be within 0 and 1, got {p}"
                )));
            }
            return Ok(SpeedupCurve {
                gains: Vec::new(),
                tail: Tail::Amdahl { p },
            });
        }
        let mut points: Vec<(u32, f64)> = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            let (n, s) = part.split_once(':').ok_or_else(|| {
                bad(format!(
                    "{part:?} is not a trainers:speedup point (write \"1:1,2:1.9,4:3.5\" or \"amdahl:0.95\")"
                ))
            })?;
            let n: u32 = n.trim().parse().map_err(|_| {
                bad(format!(
                    "{part:?}: the trainer count must be a positive integer"
                ))
            })?;
            let s: f64 = s
                .trim()
                .parse()
                .map_err(|_| bad(format!("{part:?}: the speedup must be a number")))?;
            if n == 0 || n > MAX_POINT_TRAINERS {
                return Err(bad(format!(
                    "{part:?}: the trainer count must be within 1 and {MAX_POINT_TRAINERS}"
                )));
            }
            if !s.is_finite() || s <= 0.0 {
                return Err(bad(format!(
                    "{part:?}: the speedup must be a positive number"
                )));
            }
            if points.last().is_some_and(|&(last, _)| n <= last) {
                return Err(bad(format!(
                    "{part:?}: points must name increasing trainer counts"
                )));
            }
            points.push((n, s));
        }
        if points.len() > MAX_POINTS {
            return Err(bad(format!(
                "at most {MAX_POINTS} points, got {}",
                points.len()
            )));
        }
        Ok(Self::from_points(&points))
    }

    /// The capped curve through `points` (increasing trainer counts, positive speedups); before
    /// the first point speedup is linear up to it.
    fn from_points(points: &[(u32, f64)]) -> SpeedupCurve {
        // Speedup at n by linear interpolation, linear from (0, 0) before the first point.
        let raw = |n: u32| -> f64 {
            let mut prev = (0u32, 0.0f64);
            for &(pn, ps) in points {
                if n <= pn {
                    let t = f64::from(n - prev.0) / f64::from(pn - prev.0);
                    return prev.1 + t * (ps - prev.1);
                }
                prev = (pn, ps);
            }
            prev.1
        };
        let end = points.last().map_or(1, |p| p.0).max(1);
        let s1 = raw(1);
        let mut gains = Vec::with_capacity(end as usize);
        let mut cap = 1.0f64;
        for n in 1..end {
            let gain = (raw(n + 1) / raw(n) - 1.0)
                .min(Self::linear_gain(n as i32))
                .min(cap)
                .max(0.0);
            cap = gain;
            gains.push(gain);
        }
        // The capped curve's speedup at the last point, relative to s(1).
        let s_end: f64 = gains.iter().map(|g| 1.0 + g).product();
        let last_slope = match points {
            [.., (a, sa), (b, sb)] => (sb - sa) / f64::from(b - a) / s1,
            _ => 1.0,
        };
        SpeedupCurve {
            gains,
            tail: Tail::Linear {
                end,
                s_end,
                slope: last_slope.max(0.0),
            },
        }
    }

    /// [`SpeedupCurve::speedup`] of a job's curve at `n ≥ 1` trainers, or `n` (linear) for a
    /// job without one.
    pub fn speedup_of(curve: Option<&SpeedupCurve>, n: i32) -> f64 {
        curve.map_or(f64::from(n), |c| c.speedup(n))
    }

    /// [`SpeedupCurve::gain`] of a job's curve, or [`SpeedupCurve::linear_gain`] for a job
    /// without one.
    pub fn gain_of(curve: Option<&SpeedupCurve>, n: i32) -> f64 {
        curve.map_or_else(|| Self::linear_gain(n), |c| c.gain(n))
    }

    /// The relative gain `s(n+1)/s(n) − 1` of the `(n+1)`-th trainer, capped (see the module
    /// doc); infinite at `n <= 0`.
    pub fn gain(&self, n: i32) -> f64 {
        if n <= 0 {
            return f64::INFINITY;
        }
        let linear = Self::linear_gain(n);
        match self.tail {
            Tail::Amdahl { p } => {
                let s = |n: f64| 1.0 / ((1.0 - p) + p / n);
                let n = f64::from(n);
                (s(n + 1.0) / s(n) - 1.0).clamp(0.0, linear)
            }
            Tail::Linear { end, s_end, slope } => {
                if let Some(g) = self.gains.get(n as usize - 1) {
                    return *g;
                }
                let past = f64::from(n) - f64::from(end);
                let s = s_end + slope * past;
                let cap = self.gains.last().copied().unwrap_or(1.0);
                (slope / s).min(linear).min(cap).max(0.0)
            }
        }
    }

    /// Speedup at `n` trainers relative to one (the product of the gains below `n`).
    pub fn speedup(&self, n: i32) -> f64 {
        (1..n).map(|k| 1.0 + self.gain(k)).product()
    }

    /// The capped curve through a table of speedups at 1, 2, 3, … trainers (`speedups[n - 1]`
    /// for `n`; a value that is not positive and finite counts as linear).
    pub fn from_table(speedups: &[f64]) -> SpeedupCurve {
        let points: Vec<(u32, f64)> = speedups
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let n = i as u32 + 1;
                (
                    n,
                    if s.is_finite() && s > 0.0 {
                        s
                    } else {
                        f64::from(n)
                    },
                )
            })
            .collect();
        Self::from_points(&points)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn points_interpolate_and_cap_at_linear() {
        let c = SpeedupCurve::parse("1:1,2:1.9,4:3.5,8:6.1").unwrap();
        assert!(close(c.gain(1), 0.9));
        // 3 trainers interpolate to 2.7: the 3rd adds 0.8/1.9.
        assert!(close(c.gain(2), 0.8 / 1.9));
        assert!(close(c.speedup(4), 3.5));
        assert!(close(c.speedup(8), 6.1));
        // Past the last point the last slope (0.65 per trainer) goes on.
        assert!(close(c.gain(8), 0.65 / 6.1));
        // A steeper-than-linear declaration wins nothing over linear.
        let steep = SpeedupCurve::parse("1:1,2:4,4:16").unwrap();
        for n in 1..10 {
            assert!(steep.gain(n) <= SpeedupCurve::linear_gain(n) + 1e-12, "{n}");
        }
        assert!(close(steep.gain(1), 1.0));
    }

    #[test]
    fn gains_never_grow_with_size() {
        let c = SpeedupCurve::parse("1:1,2:1.2,4:3.9,16:10").unwrap();
        for n in 1..40 {
            assert!(c.gain(n + 1) <= c.gain(n) + 1e-12, "{n}");
        }
    }

    #[test]
    fn amdahl_matches_the_law() {
        let c = SpeedupCurve::parse("amdahl:0.95").unwrap();
        let s = |n: f64| 1.0 / (0.05 + 0.95 / n);
        assert!(close(c.gain(4), s(5.0) / s(4.0) - 1.0));
        let linear = SpeedupCurve::parse("amdahl:1").unwrap();
        assert!(close(linear.gain(3), 1.0 / 3.0));
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        for (text, says) in [
            ("fast", "not a trainers:speedup point"),
            ("1:1,x:2", "trainer count must be a positive integer"),
            ("1:1,2:y", "speedup must be a number"),
            ("0:1", "within 1 and"),
            ("1:1,2:-1", "positive number"),
            ("1:1,2:NaN", "positive number"),
            ("2:1,1:2", "increasing trainer counts"),
            ("amdahl:1.5", "within 0 and 1"),
            ("amdahl:x", "must be a number"),
            ("", "not a trainers:speedup point"),
        ] {
            let err = SpeedupCurve::parse(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }
}
