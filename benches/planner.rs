//! One planning pass on generated clusters, every policy side by side:
//! S (100 nodes, 50 jobs), M (1,000 nodes, 500 jobs), L (10,000 nodes, 5,000 elastic jobs,
//! ~100,000 pods), and in `plan_large` the L shape at 50,000 and 100,000 nodes. Two states of
//! each: `steady` is what a pass finds in operation (the cluster settled by an applied pass, then
//! 5% of the jobs finished and as many arrived); `cold` is the worst case, every job's trainers
//! still to hand out on a mostly empty cluster.

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use trainscale::api::JobKey;
use trainscale::cluster::{ClusterState, ProgressEstimate};
use trainscale::daemon::sizing::{Decision, Known, decide, merged};
use trainscale::planner::explain::explain_all;
use trainscale::planner::{PlannerConfig, Policy, aligned, plan};
use trainscale::testkit::{ClusterShape, PLANNER_BENCH_CHURN, generate, steady, steady_under};

/// The allocator the `trainscale` binary runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Benches one pass of each policy on the steady and the cold state of `shape`.
fn bench_states(
    group: &mut BenchmarkGroup<'_, WallTime>,
    label: &str,
    shape: ClusterShape,
    policies: &[Policy],
) {
    for (state_name, state) in [
        ("steady", steady(shape, PLANNER_BENCH_CHURN)),
        ("cold", generate(shape)),
    ] {
        for &policy in policies {
            let config = PlannerConfig {
                policy,
                ..PlannerConfig::default()
            };
            let id = BenchmarkId::new(
                policy.as_str(),
                format!(
                    "{label} {state_name} ({} nodes, {} jobs, {} pods)",
                    shape.nodes,
                    shape.jobs,
                    state.pod_count()
                ),
            );
            group.bench_with_input(id, &state, |b, s| b.iter(|| plan(black_box(s), &config)));
        }
    }
}

/// A group of ten samples after half a second's warm-up, measured for `seconds` (criterion's
/// defaults, 100 samples over 5 s after 3 s, would stretch far past that at these pass times).
fn short_group<'c>(c: &'c mut Criterion, name: &str, seconds: u64) -> BenchmarkGroup<'c, WallTime> {
    let mut group = c.benchmark_group(name);
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(seconds));
    group
}

fn bench(c: &mut Criterion) {
    let sizes = [("S", 100, 50), ("M", 1_000, 500), ("L", 10_000, 5_000)];
    let mut group = short_group(c, "plan", 2);
    for (label, nodes, jobs) in sizes {
        let shape = ClusterShape::planner_bench(nodes, jobs);
        bench_states(
            &mut group,
            label,
            shape,
            &[
                Policy::Fulfillment,
                Policy::Goodput,
                Policy::Edl,
                Policy::Static,
            ],
        );
    }
    group.finish();
}

/// `progress` beside `goodput` at L, every job reporting a remaining work spread over 1 minute
/// to about a day (by its name rank: deterministic), on the steady and the cold state.
fn bench_progress(c: &mut Criterion) {
    let mut group = short_group(c, "plan_progress", 2);
    let shape = ClusterShape::planner_bench(10_000, 5_000);
    // Every job reports: its remaining work spread over a day, by its rank.
    let report = |state: &mut ClusterState| {
        let jobs: Vec<_> = state
            .jobs()
            .map(|(key, _, info)| (key.clone(), info.clone()))
            .collect();
        for (rank, (key, mut info)) in jobs.into_iter().enumerate() {
            info.progress = Some(ProgressEstimate {
                remaining_worker_s: 60.0 + (rank as f64 * 7919.0) % 86_400.0,
            });
            state.set_training_job(key, Some(info));
        }
    };
    for policy in [Policy::Goodput, Policy::Progress] {
        let config = PlannerConfig {
            policy,
            ..PlannerConfig::default()
        };
        let mut cold = generate(shape);
        report(&mut cold);
        // Steady under the policy benched: settled by its own pass, as the daemon would be.
        let steady = steady_under(shape, PLANNER_BENCH_CHURN, &config, report);
        for (state_name, state) in [("steady", steady), ("cold", cold)] {
            let id = BenchmarkId::new(
                policy.as_str(),
                format!("L {state_name} with progress ({} pods)", state.pod_count()),
            );
            group.bench_with_input(id, &state, |b, s| b.iter(|| plan(black_box(s), &config)));
        }
    }
    group.finish();
}

/// The L shape scaled to 50,000 nodes / 25,000 jobs (~238k pods cold) and 100,000 nodes /
/// 50,000 jobs (~476k pods cold): the sizes managed Kubernetes now offers for training. Ten
/// samples each (criterion's least), every policy but `edl` (seconds a pass at this size).
fn bench_large(c: &mut Criterion) {
    let mut group = short_group(c, "plan_large", 3);
    for (label, nodes, jobs) in [("50k", 50_000, 25_000), ("100k", 100_000, 50_000)] {
        bench_states(
            &mut group,
            label,
            ClusterShape::planner_bench(nodes, jobs),
            &[Policy::Fulfillment, Policy::Goodput, Policy::Static],
        );
    }
    group.finish();
}

/// The L cluster with kube-scheduler's filters in play: every tenth node tainted, one job in ten
/// selecting a zone and one in ten tolerating the taint (see `testkit::constrain`). The ids read
/// `L steady constrained (...)` as in the README.
fn bench_constrained(c: &mut Criterion) {
    let mut group = short_group(c, "plan_constrained", 2);
    let shape = ClusterShape::constrained_bench(10_000, 5_000);
    bench_states(
        &mut group,
        "L",
        shape,
        &[Policy::Fulfillment, Policy::Static],
    );
    group.finish();
}

/// The explanations of every job of an L pass (`plan` and `explain` compute them after the pass;
/// the daemon's pass does not): the cost of asking "why" of the whole cluster at once.
fn bench_explain(c: &mut Criterion) {
    let mut group = short_group(c, "explain", 2);
    let shape = ClusterShape::planner_bench(10_000, 5_000);
    for (state_name, state) in [
        ("steady", steady(shape, PLANNER_BENCH_CHURN)),
        ("cold", generate(shape)),
    ] {
        let config = PlannerConfig::default();
        let result = plan(&state, &config);
        let id = BenchmarkId::new("explain_all", format!("L {state_name}"));
        group.bench_with_input(id, &state, |b, s| {
            b.iter(|| explain_all(black_box(s), &result, &config))
        });
    }
    group.finish();
}

/// The daemon's pass with its sizing conditions decided (`daemon::sizing::decide`) beside the
/// plan alone, on the steady L state: `settled`, every job's conditions already say its decision
/// (no message computed); `5% changed`, one job in twenty has a new decision (its message is
/// computed). The budget: within 10% of the plan alone.
fn bench_sizing(c: &mut Criterion) {
    let mut group = short_group(c, "sizing", 2);
    let state = steady(
        ClusterShape::planner_bench(10_000, 5_000),
        PLANNER_BENCH_CHURN,
    );
    let config = PlannerConfig::default();
    let first = plan(&state, &config);
    let now = "2026-11-26T00:00:00Z".parse().unwrap_or_default();
    // Keyed as the daemon's store keeps job objects.
    let written: BTreeMap<JobKey, (Decision, Vec<Condition>)> =
        decide(&state, &first, &config, &[])
            .into_iter()
            .map(|u| {
                let conditions = merged(&u.existing, &u.desired, now);
                (u.key, (u.decision, conditions))
            })
            .collect();
    let settled: Vec<Known> = aligned(
        written.iter().map(|(k, (d, c))| (k, (d, c.as_slice()))),
        &first.jobs,
        |k| written.get(k).map(|(d, c)| (d, c.as_slice())),
    )
    .into_iter()
    .map(|w| Known {
        explained: w.map(|(d, _)| d),
        conditions: w.map_or(&[], |(_, c)| c),
        resource_version: None,
    })
    .collect();
    // One job in twenty (or only the first) with a decision not yet explained.
    let renewed = |every: usize| -> Vec<Known> {
        settled
            .iter()
            .enumerate()
            .map(|(i, k)| Known {
                explained: k.explained.filter(|_| i % every != 0),
                ..*k
            })
            .collect()
    };
    let (twentieth, one) = (renewed(20), renewed(usize::MAX));
    group.bench_function("L steady: plan alone", |b| {
        b.iter(|| plan(black_box(&state), &config))
    });
    group.bench_function("L steady: plan + sizing, settled", |b| {
        b.iter(|| {
            let p = plan(black_box(&state), &config);
            decide(&state, &p, &config, &settled).len()
        })
    });
    let changed = twentieth.iter().filter(|k| k.explained.is_none()).count();
    group.bench_function(
        format!("L steady: plan + sizing, {changed} decisions changed"),
        |b| {
            b.iter(|| {
                let p = plan(black_box(&state), &config);
                decide(&state, &p, &config, &twentieth).len()
            })
        },
    );
    group.bench_function("L steady: plan + sizing, 1 decision changed", |b| {
        b.iter(|| {
            let p = plan(black_box(&state), &config);
            decide(&state, &p, &config, &one).len()
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    bench,
    bench_progress,
    bench_large,
    bench_constrained,
    bench_explain,
    bench_sizing
);
criterion_main!(benches);
