//! Value parsers of the numeric and duration flags: an out-of-range value is a usage error
//! (clap prints `invalid value '0s' for '--interval <INTERVAL>': ...` and exits 2).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::api::names::{NameRule, job_name_problems, name_problems, printable, quoted};
use crate::daemon::parse_duration;
use crate::planner::Policy;

/// Longest `--interval`: a day.
pub const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);
/// Longest `--debounce`: an hour (the periodic pass comes first anyway).
pub const MAX_DEBOUNCE: Duration = Duration::from_secs(3600);
/// Longest `--cooldown`: a week, as a scenario's `cooldown_s`.
pub const MAX_COOLDOWN: Duration = Duration::from_secs(7 * 24 * 3600);

/// A duration in `min..=max`, written like `30s`.
fn duration_in(text: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() && !min.is_zero() {
        return Err("must be above zero".to_string());
    }
    if d < min || d > max {
        return Err(format!(
            "{} is not in {}..={}",
            humantime::format_duration(d),
            humantime::format_duration(min),
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

/// `--interval`: above zero (a zero period never ticks), at most [`MAX_INTERVAL`].
pub fn interval(text: &str) -> Result<Duration, String> {
    duration_in(text, Duration::from_millis(1), MAX_INTERVAL)
}

/// `--debounce`: above zero, at most [`MAX_DEBOUNCE`].
pub fn debounce(text: &str) -> Result<Duration, String> {
    duration_in(text, Duration::from_millis(1), MAX_DEBOUNCE)
}

/// `--cooldown`: zero (none) up to [`MAX_COOLDOWN`].
pub fn cooldown(text: &str) -> Result<Duration, String> {
    duration_in(text, Duration::ZERO, MAX_COOLDOWN)
}

/// Longest `--reservation-ttl`: an hour.
pub const MAX_RESERVATION_TTL: Duration = Duration::from_secs(3600);

/// `--reservation-ttl`: 1s up to [`MAX_RESERVATION_TTL`].
pub fn reservation_ttl(text: &str) -> Result<Duration, String> {
    duration_in(text, Duration::from_secs(1), MAX_RESERVATION_TTL)
}

/// Longest `--gang-timeout`: a day.
pub const MAX_GANG_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// `--gang-timeout`: zero (no limit) up to [`MAX_GANG_TIMEOUT`].
pub fn gang_timeout(text: &str) -> Result<Duration, String> {
    duration_in(text, Duration::ZERO, MAX_GANG_TIMEOUT)
}

/// Longest `--progress-stale-after`: 7 days.
pub const MAX_PROGRESS_STALE_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);

/// `--progress-stale-after`: 1s up to [`MAX_PROGRESS_STALE_AFTER`].
pub fn progress_stale_after(text: &str) -> Result<Duration, String> {
    duration_in(text, Duration::from_secs(1), MAX_PROGRESS_STALE_AFTER)
}

/// Longest `--scheduling-deadline`: 10 minutes.
pub const MAX_SCHEDULING_DEADLINE: Duration = Duration::from_secs(600);

/// `--scheduling-deadline`: 100ms up to [`MAX_SCHEDULING_DEADLINE`].
pub fn scheduling_deadline(text: &str) -> Result<Duration, String> {
    duration_in(text, Duration::from_millis(100), MAX_SCHEDULING_DEADLINE)
}

/// Longest `--write-deadline`: 1 hour.
pub const MAX_WRITE_DEADLINE: Duration = Duration::from_secs(3600);

/// `--write-deadline`: 1s up to [`MAX_WRITE_DEADLINE`].
pub fn write_deadline(text: &str) -> Result<Duration, String> {
    duration_in(text, Duration::from_secs(1), MAX_WRITE_DEADLINE)
}

/// `--scheduler-name`: "" (off) or a name as `spec.schedulerName` takes it, a DNS-1123
/// subdomain.
pub fn scheduler_name(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Ok(String::new());
    }
    name_as(text, NameRule::Subdomain)
}

/// A value parser whose refusal never echoes the value raw: clap's own message quotes it as
/// given, so a newline in it would start a line of its own; this one quotes it escaped
/// (`invalid value "a\nb" for '--namespace <NAMESPACE>': ...`) and exits 2 as clap does.
#[derive(Clone)]
pub struct Escaped<F>(pub F);

impl<T, F> clap::builder::TypedValueParser for Escaped<F>
where
    T: Clone + Send + Sync + 'static,
    F: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let text = value.to_string_lossy();
        (self.0)(&text).map_err(|why| {
            let flag = arg.map_or_else(|| "the value".to_string(), |a| format!("'{a}'"));
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!(
                    "invalid value {} for {}: {}\n",
                    quoted(&text),
                    printable(&flag),
                    printable(&why)
                ),
            )
            .with_cmd(cmd)
        })
    }
}

/// The API server's words for `text` under `rule`, as a flag's refusal.
fn name_as(text: &str, rule: NameRule) -> Result<String, String> {
    let problems = name_problems(text, rule);
    if problems.is_empty() {
        Ok(text.to_string())
    } else {
        Err(problems.join("; "))
    }
}

/// `--namespace`, `--lease-namespace`: a namespace, a DNS-1123 label as the API server takes it.
pub fn namespace(text: &str) -> Result<String, String> {
    name_as(text, NameRule::Label)
}

/// `--lease-name`: an object name, a DNS-1123 subdomain.
pub fn object_name(text: &str) -> Result<String, String> {
    name_as(text, NameRule::Subdomain)
}

/// A job named `NAMESPACE/NAME`: the namespace a DNS-1123 label, the name a subdomain, as the
/// API server takes them (checked before any request is made).
pub fn job_ref(text: &str) -> Result<(String, String), String> {
    let (namespace, name) = text
        .split_once('/')
        .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
        .ok_or_else(|| "name the job as NAMESPACE/NAME".to_string())?;
    let namespace = name_as(namespace, NameRule::Label)
        .map_err(|why| format!("namespace {}: {why}", quoted(namespace)))?;
    let name = name_as(name, NameRule::Subdomain)
        .map_err(|why| format!("name {}: {why}", quoted(name)))?;
    Ok((namespace, name))
}

/// `submit --pod-group`: a PodGroup's name, which is also the label value
/// `scheduling.x-k8s.io/pod-group` on every pod: a subdomain of at most 63 characters.
pub fn pod_group(text: &str) -> Result<String, String> {
    name_as(text, NameRule::LabelValueSubdomain)
}

/// `submit --job-name`: a TrainingJob name the API server takes and from which every object
/// the operator derives can exist (`<name>-trainer` is a Job: at most 63 characters).
pub fn training_job_name(text: &str) -> Result<String, String> {
    let meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: Some(text.to_string()),
        ..Default::default()
    };
    if text.is_empty() {
        return Err("a job needs a name".to_string());
    }
    name_as(text, NameRule::Subdomain)?;
    match job_name_problems(crate::api::JobKind::TrainingJob, "", &meta)
        .into_iter()
        .next()
    {
        None => Ok(text.to_string()),
        Some(e) => Err(e.problem),
    }
}

/// `--restart-limit`: a count, 0 (no limit) or more.
pub fn restart_limit(text: &str) -> Result<i32, String> {
    let value: i32 = text.trim().parse().map_err(|e: std::num::ParseIntError| {
        use std::num::IntErrorKind;
        match e.kind() {
            IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => {
                format!("{} is out of range (0 to {})", quoted(text), i32::MAX)
            }
            _ => format!("{} is not a whole number", quoted(text)),
        }
    })?;
    if value < 0 {
        return Err(format!("must not be negative (0: no limit), got {value}"));
    }
    Ok(value)
}

/// `--discovery-interval`: 1s up to 1h.
pub fn discovery_interval(text: &str) -> Result<Duration, String> {
    duration_in(text, Duration::from_secs(1), Duration::from_secs(3600))
}

/// One job kind of `--kinds`, by its lowercase name (`pytorchjob`).
pub fn job_kind(text: &str) -> Result<crate::api::JobKind, String> {
    let name = text.trim().to_ascii_lowercase();
    crate::api::JobKind::ALL
        .into_iter()
        .find(|k| k.flag_name() == name)
        .ok_or_else(|| {
            let known: Vec<&str> = crate::api::JobKind::ALL
                .iter()
                .map(|k| k.flag_name())
                .collect();
            format!(
                "{text:?} is not a job kind; expected one of {}",
                known.join(", ")
            )
        })
}

/// `--max-load-desired`: a number in (0, 1].
pub fn max_load_desired(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if !(value > 0.0 && value <= 1.0) {
        return Err(format!("{value} is not in (0, 1]"));
    }
    Ok(value)
}

/// `--min-marginal-speedup`: a relative speedup in [0, 1) (1 would stop every job growing past
/// one trainer, the most linear speedup adds).
pub fn min_marginal_speedup(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if !(0.0..1.0).contains(&value) {
        return Err(format!("{value} is not in [0, 1)"));
    }
    Ok(value)
}

/// `--progress-min-marginal-speedup`: added speed in units of one trainer's, in [0, 1] (no
/// trainer adds more than one trainer's speed).
pub fn progress_min_marginal_speedup(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if !(0.0..=1.0).contains(&value) {
        return Err(format!("{value} is not in [0, 1]"));
    }
    Ok(value)
}

/// `--starvation-bound`: 1s up to 7 days.
pub fn starvation_bound(text: &str) -> Result<Duration, String> {
    duration_in(text, Duration::from_secs(1), MAX_COOLDOWN)
}

/// `--now`: an RFC 3339 time, not before 1970, as seconds since the epoch.
pub fn rfc3339_seconds(text: &str) -> Result<i64, String> {
    let refused = |why: String| {
        format!("{text:?} is not an RFC 3339 time from 1970 on, like 2026-01-31T12:00:00Z ({why})")
    };
    let time = humantime::parse_rfc3339(text.trim()).map_err(|e| refused(e.to_string()))?;
    epoch_seconds(time).ok_or_else(|| refused("before 1970".to_string()))
}

/// Seconds since the epoch; `None` before 1970 or past i64.
pub fn epoch_seconds(time: SystemTime) -> Option<i64> {
    let since = time.duration_since(UNIX_EPOCH).ok()?;
    i64::try_from(since.as_secs()).ok()
}

/// The parser of `--policy` and `--policies`: the planner's policies by name, each listed in
/// `--help` with what it does (the planner's enum carries no CLI type).
pub fn policy() -> impl clap::builder::TypedValueParser<Value = Policy> {
    use clap::builder::TypedValueParser;
    let names =
        Policy::ALL.map(|p| clap::builder::PossibleValue::new(p.as_str()).help(p.summary()));
    clap::builder::PossibleValuesParser::new(names).try_map(|name| name.parse::<Policy>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_out_of_range_are_refused() {
        assert!(interval("0s").unwrap_err().contains("above zero"));
        assert!(interval("0ms").is_err());
        assert!(interval("25h").unwrap_err().contains("not in"));
        assert!(interval("500000000000y").is_err());
        assert_eq!(interval("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(interval("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(interval("24h"), Ok(MAX_INTERVAL));
        assert!(debounce("0s").is_err());
        assert!(debounce("2h").is_err());
        assert_eq!(debounce("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(cooldown("0s"), Ok(Duration::ZERO));
        assert!(reservation_ttl("0s").is_err());
        assert!(reservation_ttl("2h").is_err());
        assert_eq!(reservation_ttl("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(gang_timeout("0s"), Ok(Duration::ZERO));
        assert_eq!(gang_timeout("10m"), Ok(Duration::from_secs(600)));
        assert!(gang_timeout("25h").unwrap_err().contains("not in"));
        assert!(
            scheduling_deadline("0s")
                .unwrap_err()
                .contains("above zero")
        );
        assert!(scheduling_deadline("50ms").unwrap_err().contains("not in"));
        assert!(scheduling_deadline("11m").is_err());
        assert_eq!(scheduling_deadline("5s"), Ok(Duration::from_secs(5)));
        assert!(write_deadline("0s").unwrap_err().contains("above zero"));
        assert!(write_deadline("500ms").unwrap_err().contains("not in"));
        assert!(write_deadline("2h").is_err());
        assert_eq!(write_deadline("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(scheduler_name(""), Ok(String::new()));
        assert!(scheduler_name("my scheduler").is_err());
        assert!(scheduler_name("Upper_Sched").is_err());
        assert_eq!(job_ref("ml/job-1"), Ok(("ml".into(), "job-1".into())));
        assert!(
            job_ref("../x/y")
                .unwrap_err()
                .starts_with("namespace \"..\"")
        );
        assert!(job_ref("ml/a/b").unwrap_err().starts_with("name \"a/b\""));
        assert!(job_ref("job").unwrap_err().contains("NAMESPACE/NAME"));
        assert_eq!(scheduler_name("volcano"), Ok("volcano".to_string()));
        assert!(pod_group(&"g".repeat(64)).is_err());
        assert!(pod_group(&"g".repeat(63)).is_ok());
        assert!(
            restart_limit("99999999999")
                .unwrap_err()
                .contains("out of range")
        );
        assert!(
            restart_limit("x")
                .unwrap_err()
                .contains("not a whole number")
        );
        assert!(cooldown("8days").is_err());
        assert!(cooldown("soon").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn policy_names_every_policy_and_refuses_others() {
        use clap::builder::TypedValueParser;
        let command = clap::Command::new("t");
        let parse = |name: &str| policy().parse_ref(&command, None, std::ffi::OsStr::new(name));
        // Exhaustive: a new variant does not compile until it is numbered here, and then `ALL`
        // must list it for the numbers to be complete.
        let number = |p: Policy| match p {
            Policy::Fulfillment => 0,
            Policy::Edl => 1,
            Policy::Static => 2,
            Policy::Goodput => 3,
            Policy::Progress => 4,
        };
        let mut listed: Vec<usize> = Policy::ALL.iter().map(|p| number(*p)).collect();
        listed.sort_unstable();
        listed.dedup();
        assert_eq!(listed, (0..5).collect::<Vec<_>>());
        for p in Policy::ALL {
            assert_eq!(parse(p.as_str()).ok(), Some(p));
            assert!(!p.summary().is_empty());
        }
        assert!(parse("Fulfillment").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn max_load_desired_is_in_zero_one() {
        for bad in ["0", "-1", "NaN", "nan", "inf", "-inf", "1.0000001", "x", ""] {
            assert!(max_load_desired(bad).is_err(), "{bad}");
        }
        assert_eq!(max_load_desired("1"), Ok(1.0));
        assert_eq!(max_load_desired("0.97"), Ok(0.97));
        assert_eq!(max_load_desired("1e-9"), Ok(1e-9));
    }

    #[test]
    fn now_is_rfc3339_after_1970() {
        assert_eq!(rfc3339_seconds("1970-01-01T00:01:00Z"), Ok(60));
        assert!(rfc3339_seconds("1969-12-31T23:59:59Z").is_err());
        assert!(rfc3339_seconds("yesterday").is_err());
    }
}
