//! Profiling aid for the planning pass: builds the L cluster of `benches/planner.rs` (or S / M,
//! or the 50k / 100k node shapes, L scaled)
//! and times each policy on it, with what the pass did; `profile` repeats only `fulfillment`
//! (for `perf record`).
//!
//! `cargo run --release --example profile_pass -- [S|M|L|50k|100k] [steady|cold] [exact] [profile [goodput|edl|static]] [digest]
//! [after-steady] [bench-order] [shrunk] [churn=N] [jobs=N]`
//!
//! `profile` prints the median and fastest pass; `PASSES` sets how many (default 100).
//! `after-steady` and `bench-order` build other states first, as `benches/planner.rs` does, to
//! check whether the heap they leave behind changes the timing.
//!
//! `shrunk` cuts the allocatable GPUs of every 50th node to two below what its pods use, as when a
//! node's allocatable falls under its bound pods: each pass then relieves that many overloaded
//! nodes.
//!
//! `digest` prints a checksum of each policy's plan instead of timing it: a speed-up that should
//! change no plan must leave every checksum as it was. From 50,000 nodes on `edl` is left out
//! (minutes a pass).

use std::collections::BTreeMap;

use trainscale::planner::{PlannerConfig, Policy, plan};
use trainscale::testkit::{ClusterShape, PLANNER_BENCH_CHURN, generate, steady};

/// The allocator the `trainscale` binary runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let (nodes, jobs) = if has("S") {
        (100, 50)
    } else if has("M") {
        (1_000, 500)
    } else if has("50k") {
        (50_000, 25_000)
    } else if has("100k") {
        (100_000, 50_000)
    } else {
        (10_000, 5_000)
    };
    // `jobs=N`: N jobs instead (fewer jobs than the shape's leave every job room to reach its
    // max, so a pass has no contention to decide).
    let jobs = args
        .iter()
        .find_map(|a| a.strip_prefix("jobs=")?.parse().ok())
        .unwrap_or(jobs);
    // `constrained`: taints, zone labels and job selectors (`testkit::constrain`).
    let shape = if has("constrained") {
        ClusterShape::constrained_bench(nodes, jobs)
    } else {
        ClusterShape::planner_bench(nodes, jobs)
    };
    // `after-steady`: build the settled state first and keep it, as the bench does before its
    // cold state (the cold state's memory then lies where the bench's does).
    let _settled = has("after-steady").then(|| steady(shape, PLANNER_BENCH_CHURN));
    // `bench-order`: plan on the S and M states first, as the bench process has by then.
    if has("bench-order") {
        for (n, j) in [(100, 50), (1_000, 500)] {
            let small = ClusterShape::planner_bench(n, j);
            let states = [steady(small, PLANNER_BENCH_CHURN), generate(small)];
            for s in &states {
                std::hint::black_box(plan(s, &PlannerConfig::default()));
            }
        }
    }
    // `churn=N`: one job in N finished and as many arrived before the steady pass (default
    // the bench's).
    let churn = args
        .iter()
        .find_map(|a| a.strip_prefix("churn=")?.parse().ok())
        .unwrap_or(PLANNER_BENCH_CHURN);
    let mut state = if has("cold") {
        generate(shape)
    } else {
        steady(shape, churn)
    };
    if has("shrunk") {
        // Every 50th node overloaded by two GPUs.
        let shrink: Vec<(String, trainscale::cluster::NodeInfo)> = state
            .nodes()
            .step_by(50)
            .filter_map(|(_, n)| {
                let mut info = n.info.clone()?;
                info.allocatable.gpu = (n.used.gpu - 2).max(0);
                Some((n.name.to_string(), info))
            })
            .collect();
        for (name, info) in shrink {
            state.set_node(&name, Some(info));
        }
    }
    let (cap, used) = (state.total_capacity(), state.bound_requests());
    println!(
        "{nodes} nodes, {jobs} jobs, {} pods; GPUs used {}/{}",
        state.pod_count(),
        used.gpu,
        cap.gpu
    );
    if has("profile") {
        // PASSES sets how many (for callgrind, fewer).
        let passes: usize = std::env::var("PASSES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100);
        // `goodput`, `edl` or `static` profiles that policy instead.
        let policy = if has("goodput") {
            Policy::Goodput
        } else if has("edl") {
            Policy::Edl
        } else if has("static") {
            Policy::Static
        } else {
            Policy::Fulfillment
        };
        let config = PlannerConfig {
            policy,
            ..PlannerConfig::default()
        };
        let mut ms: Vec<f64> = (0..passes)
            .map(|_| {
                let started = std::time::Instant::now();
                std::hint::black_box(plan(&state, &config));
                started.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        if let (Some(min), Some(median)) = (ms.first(), ms.get(ms.len() / 2)) {
            let name = policy.as_str();
            println!("{name} {median:9.3} ms median {min:9.3} ms min over {passes} passes");
        }
        return;
    }
    // `exact` also times `fulfillment` without bulk steps.
    let exact = PlannerConfig {
        bulk_min_trainers: u32::MAX,
        ..PlannerConfig::default()
    };
    let runs = [
        Policy::Fulfillment,
        Policy::Goodput,
        Policy::Edl,
        Policy::Static,
    ]
    .map(|policy| {
        (
            policy.as_str(),
            PlannerConfig {
                policy,
                ..PlannerConfig::default()
            },
        )
    });
    // `edl` takes minutes a pass from 50,000 nodes on (README): left out there.
    let large = nodes >= 50_000;
    for (name, config) in runs
        .into_iter()
        .filter(|(_, config)| !(large && config.policy == Policy::Edl))
        .chain(has("exact").then_some(("exact", exact)))
    {
        let result = plan(&state, &config);
        if has("digest") {
            let json = serde_json::to_string(&result.named_jobs(&state)).unwrap_or_default();
            println!("{name:<12} plan checksum {:016x}", fnv1a(json.as_bytes()));
            continue;
        }
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        for j in &result.jobs {
            *reasons.entry(format!("{:?}", j.reason)).or_default() += 1;
        }
        // The median of many runs: one run on a shared 2-core machine is noisy.
        let mut runs_ms: Vec<f64> = (0..31)
            .map(|_| {
                let started = std::time::Instant::now();
                std::hint::black_box(plan(&state, &config));
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        runs_ms.sort_by(f64::total_cmp);
        println!(
            "{:<12} {:>10.3} ms median {:>10.3} ms min  +{} -{} trainers, min fulfillment {:.3}, {reasons:?}",
            name,
            runs_ms[runs_ms.len() / 2],
            runs_ms[0],
            result.summary.trainers_added,
            result.summary.trainers_removed,
            result.summary.min_fulfillment,
        );
    }
}

/// FNV-1a over `bytes`: a stable checksum (the std hasher may change between releases).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
