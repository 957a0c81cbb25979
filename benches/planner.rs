//! One planning pass on generated clusters, every policy side by side:
//! S (100 nodes, 50 jobs), M (1,000 nodes, 500 jobs), L (10,000 nodes, 5,000 jobs, ~100,000 pods).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use trainscale::planner::{PlannerConfig, Policy, plan};
use trainscale::testkit::{ClusterShape, generate};

fn bench(c: &mut Criterion) {
    let sizes = [
        ("S", 100, 50, 9),
        ("M", 1_000, 500, 9),
        ("L", 10_000, 5_000, 9),
    ];
    let mut group = c.benchmark_group("plan");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    for (label, nodes, jobs, other_pods_per_node) in sizes {
        let state = generate(ClusterShape {
            nodes,
            jobs,
            bound_per_job: 3,
            other_pods_per_node,
            seed: 42,
        });
        for policy in [Policy::Fulfillment, Policy::Edl, Policy::Static] {
            let config = PlannerConfig {
                policy,
                ..PlannerConfig::default()
            };
            group.bench_with_input(
                BenchmarkId::new(
                    policy.as_str(),
                    format!("{label} {nodes}n {jobs}j {}p", state.pod_count()),
                ),
                &state,
                |b, s| b.iter(|| plan(black_box(s), &config)),
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
