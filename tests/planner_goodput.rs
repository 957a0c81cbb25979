//! The `goodput` policy and the fairness cap on declared max-instance, on hand-built clusters.

mod common;

use std::sync::Arc;

use common::*;
use trainscale::api::speedup::SpeedupCurve;
use trainscale::api::{JobKey, Resources};
use trainscale::cluster::{ClusterState, JobInfo};
use trainscale::planner::{PlannerConfig, Policy, Reason, ScalePlan, plan};

fn key(name: &str) -> JobKey {
    JobKey::new("ns", name)
}

fn target(p: &ScalePlan, name: &str) -> i32 {
    p.job(&key(name)).unwrap().target
}

fn reason(p: &ScalePlan, name: &str) -> Reason {
    p.job(&key(name)).unwrap().reason
}

fn gpu_trainer() -> Resources {
    Resources::new(1_000, GIB, 1)
}

fn goodput() -> PlannerConfig {
    PlannerConfig {
        policy: Policy::Goodput,
        ..PlannerConfig::default()
    }
}

/// A job of 1-GPU trainers from `min` to `max`, at min and pending, with a declared curve.
fn job(min: i32, max: i32, curve: Option<&str>) -> JobInfo {
    JobInfo {
        speedup: curve.map(|c| Arc::new(SpeedupCurve::parse(c).unwrap())),
        ..job_info(min, max, gpu_trainer())
    }
}

/// One node with `gpus` GPUs (and ample CPU and memory).
fn cluster(gpus: i64) -> ClusterState {
    let mut s = ClusterState::new();
    add_node(&mut s, "n", 1_000_000, 4096, gpus);
    s
}

#[test]
fn spare_trainers_go_where_the_next_one_speeds_up_most() {
    // a: 0.9 for its 2nd trainer, 0.8/1.9 = 0.42 for its 3rd, 0.8/2.7 = 0.30 for its 4th;
    // b (Amdahl 0.5): 0.33 for its 2nd.
    let curves = [("a", "1:1,2:1.9,4:3.5"), ("b", "amdahl:0.5")];
    for (gpus, want_a, want_b) in [(3, 2, 1), (4, 3, 1), (5, 3, 2)] {
        let mut s = cluster(gpus);
        for (name, curve) in curves {
            add_job(&mut s, name, job(1, 8, Some(curve)), 1, &[]);
        }
        let p = plan(&s, &goodput());
        assert_eq!(
            (target(&p, "a"), target(&p, "b")),
            (want_a, want_b),
            "{gpus} GPUs"
        );
    }
}

#[test]
fn fulfillment_ignores_the_curves() {
    // The same jobs under `fulfillment`: equal ranges, so equal shares of the 3 spare GPUs.
    let mut s = cluster(5);
    add_job(&mut s, "a", job(1, 8, Some("1:1,2:1.9,4:3.5")), 1, &[]);
    add_job(&mut s, "b", job(1, 8, Some("amdahl:0.5")), 1, &[]);
    let p = plan(&s, &PlannerConfig::default());
    assert_eq!((target(&p, "a"), target(&p, "b")), (3, 2));
    let mut s = cluster(6);
    add_job(&mut s, "a", job(1, 8, Some("1:1,2:1.9,4:3.5")), 1, &[]);
    add_job(&mut s, "b", job(1, 8, Some("amdahl:0.5")), 1, &[]);
    // Four spare GPUs: fulfillment 3 and 3; goodput gives a its 2nd and 3rd (0.9, 0.42), b
    // its 2nd (0.33), then a its 4th (0.30) before b its 3rd (0.125).
    let p = plan(&s, &PlannerConfig::default());
    assert_eq!((target(&p, "a"), target(&p, "b")), (3, 3));
    let p = plan(&s, &goodput());
    assert_eq!((target(&p, "a"), target(&p, "b")), (4, 2));
}

#[test]
fn without_curves_jobs_are_linear_and_equal_gains_tie_by_fulfillment() {
    // Linear speedup: the next trainer adds 1/n, so counts even out; at equal counts the less
    // fulfilled job (the one with the larger range) goes first.
    let mut s = cluster(7);
    add_job(&mut s, "small", job(1, 4, None), 1, &[]);
    add_job(&mut s, "large", job(1, 16, None), 1, &[]);
    let p = plan(&s, &goodput());
    assert_eq!((target(&p, "small"), target(&p, "large")), (3, 4));
}

#[test]
fn a_steeper_than_linear_declaration_wins_nothing() {
    // "1:1,2:4,4:16" claims superlinear speedup: capped at linear, it ties with a linear job.
    let mut s = cluster(6);
    add_job(&mut s, "greedy", job(1, 8, Some("1:1,2:4,4:16")), 1, &[]);
    add_job(&mut s, "plain", job(1, 8, None), 1, &[]);
    let p = plan(&s, &goodput());
    assert_eq!((target(&p, "greedy"), target(&p, "plain")), (3, 3));
}

#[test]
fn min_marginal_speedup_stops_growth_where_trainers_add_too_little() {
    // Both running at min.
    let mut s = cluster(16);
    add_job(&mut s, "a", job(1, 8, Some("1:1,2:1.9,4:3.5")), 1, &["n"]);
    add_job(&mut s, "b", job(1, 8, Some("amdahl:0.5")), 1, &["n"]);
    let config = PlannerConfig {
        min_marginal_speedup: 0.35,
        ..goodput()
    };
    let p = plan(&s, &config);
    // a's 3rd trainer adds 0.42, its 4th 0.30; b's 2nd adds 0.33.
    assert_eq!((target(&p, "a"), target(&p, "b")), (3, 1));
    assert_eq!(reason(&p, "a"), Reason::ScaleUp);
    assert_eq!(reason(&p, "b"), Reason::LowGain);
    // A job already above its useful size is brought down to it.
    let mut s = cluster(16);
    add_job(
        &mut s,
        "a",
        job(1, 8, Some("1:1,2:1.9,4:3.5")),
        5,
        &["n"; 5],
    );
    let p = plan(&s, &config);
    assert_eq!(target(&p, "a"), 3);
    assert_eq!(reason(&p, "a"), Reason::LowGain);
}

#[test]
fn a_huge_declared_max_shares_as_what_the_cluster_could_give() {
    // Room for 12 trainers: a job declaring max 1,000,000 shares with a job of max 8 exactly as
    // a job of max 12 would.
    for policy in [Policy::Fulfillment, Policy::Goodput] {
        let config = PlannerConfig {
            policy,
            ..PlannerConfig::default()
        };
        let shares = |greedy_max: i32| {
            let mut s = cluster(12);
            add_job(&mut s, "greedy", job(1, greedy_max, None), 1, &[]);
            add_job(&mut s, "modest", job(1, 8, None), 1, &[]);
            let p = plan(&s, &config);
            (target(&p, "greedy"), target(&p, "modest"))
        };
        let gamed = shares(1_000_000);
        assert_eq!(gamed, shares(12), "{policy:?}");
        // The modest job is not starved of spare trainers by the declaration.
        assert!(gamed.1 >= 4, "{policy:?}: {gamed:?}");
    }
}
