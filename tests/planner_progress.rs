//! The `progress` policy on hand-built clusters: the job that finishes soonest grows first, up
//! to where its next trainer adds too little; jobs without progress are placed by how long they
//! have existed; a job held at min past the starvation bound goes first.

mod common;

use std::sync::Arc;

use common::*;
use trainscale::api::speedup::SpeedupCurve;
use trainscale::api::{JobKey, Resources};
use trainscale::cluster::{ClusterState, JobInfo, ProgressEstimate};
use trainscale::planner::explain::explain_all;
use trainscale::planner::{PlannerConfig, Policy, Reason, ScalePlan, plan};

fn key(name: &str) -> JobKey {
    JobKey::new("ns", name)
}

fn target(p: &ScalePlan, name: &str) -> i32 {
    p.job(&key(name)).unwrap().target
}

fn progress() -> PlannerConfig {
    PlannerConfig {
        policy: Policy::Progress,
        now: 1000,
        ..PlannerConfig::default()
    }
}

/// [`progress`] without the spare stage: room no job wants at the threshold stays idle.
fn no_spare() -> PlannerConfig {
    PlannerConfig {
        progress_spare_min_marginal_speedup: 0.9,
        ..progress()
    }
}

/// A job of 1-GPU trainers from `min` to `max`, created at 0, with `remaining` one-trainer
/// seconds left (none: no report) and a declared curve.
fn job(min: i32, max: i32, remaining: Option<f64>, curve: Option<&str>) -> JobInfo {
    JobInfo {
        speedup: curve.map(|c| Arc::new(SpeedupCurve::parse(c).unwrap())),
        progress: remaining.map(|r| ProgressEstimate {
            remaining_worker_s: r,
        }),
        ..job_info(min, max, Resources::new(1_000, GIB, 1))
    }
}

/// One node with `gpus` GPUs (and ample CPU and memory).
fn cluster(gpus: i64) -> ClusterState {
    let mut s = ClusterState::new();
    add_node(&mut s, "n", 1_000_000, 4096, gpus);
    s
}

#[test]
fn the_nearly_done_job_grows_first() {
    // Both at min 1 on a node of 6 GPUs: 4 spare. "near" has 600 s left, "far" 60,000 s.
    for (near_first, names) in [(true, ["a", "b"]), (false, ["b", "a"])] {
        let mut s = cluster(6);
        let (near, far) = (names[0], names[1]);
        add_job(&mut s, near, job(1, 4, Some(600.0), None), 1, &["n"]);
        add_job(&mut s, far, job(1, 8, Some(60_000.0), None), 1, &["n"]);
        let p = plan(&s, &progress());
        // The nearly done job takes all it may use (4), the other the rest.
        assert_eq!((target(&p, near), target(&p, far)), (4, 2), "{near_first}");
        // `fulfillment` evens out fulfillment instead.
        let f = plan(&s, &PlannerConfig::default());
        assert_eq!((target(&f, near), target(&f, far)), (3, 3));
    }
}

#[test]
fn remaining_time_counts_the_speedup_at_the_current_size() {
    // "a" has more work (4,000 s) but runs on 4 trainers with linear speedup: 1,000 s left;
    // "b" has 1,500 s of work on 1 trainer: 1,500 s left. One spare GPU goes to "a".
    let mut s = cluster(6);
    add_job(
        &mut s,
        "a",
        job(1, 8, Some(4_000.0), None),
        4,
        &["n", "n", "n", "n"],
    );
    add_job(&mut s, "b", job(1, 8, Some(1_500.0), None), 1, &["n"]);
    let p = plan(&s, &progress());
    assert_eq!((target(&p, "a"), target(&p, "b")), (5, 1));
}

#[test]
fn a_trainer_adding_less_than_the_threshold_is_not_given() {
    // s = 1, 1.9, 2.7, 3.5, 4.3, …: the 2nd trainer adds 0.9 of one trainer's speed, the
    // others 0.8.
    let curve = Some("1:1,2:1.9,4:3.5");
    let mut s = cluster(8);
    add_job(&mut s, "a", job(1, 8, Some(100.0), curve), 1, &["n"]);
    let p = plan(&s, &no_spare());
    assert_eq!(target(&p, "a"), 2);
    assert_eq!(p.job(&key("a")).unwrap().reason, Reason::ScaleUp);
    let lower = PlannerConfig {
        progress_min_marginal_speedup: 0.8,
        ..no_spare()
    };
    // The curve goes on past 4 at 0.8 per trainer: every trainer holds 0.8.
    assert_eq!(target(&plan(&s, &lower), "a"), 8);
    let off = PlannerConfig {
        progress_min_marginal_speedup: 0.0,
        ..progress()
    };
    assert_eq!(target(&plan(&s, &off), "a"), 8);
    // At its useful max the next pass holds it there for the marginal gain.
    let mut s = cluster(8);
    add_job(&mut s, "a", job(1, 8, Some(100.0), curve), 2, &["n", "n"]);
    let p = plan(&s, &no_spare());
    assert_eq!(target(&p, "a"), 2);
    assert_eq!(p.job(&key("a")).unwrap().reason, Reason::LowGain);
}

#[test]
fn room_no_job_wants_goes_past_the_useful_size_by_the_spare_threshold() {
    // "a" finishes soonest; its 2nd trainer adds 0.9, every later one 0.8 (useful max 2 at
    // 0.9, spare max 8 at the default 0.8). "b" is linear and long, max 4. 8 GPUs.
    let curve = Some("1:1,2:1.9,4:3.5");
    let jobs = |s: &mut ClusterState, a: i32| {
        let on_n = vec!["n"; a as usize];
        add_job(s, "a", job(1, 8, Some(100.0), curve), a, &on_n);
        add_job(s, "b", job(1, 4, Some(1e6), None), 1, &["n"]);
    };
    let mut s = cluster(8);
    jobs(&mut s, 1);
    // Without the spare stage "a" stops at 2, "b" takes 4, two GPUs stay idle.
    let p = plan(&s, &no_spare());
    assert_eq!((target(&p, "a"), target(&p, "b")), (2, 4));
    // With it "a" takes the two no job wants at 0.9, and stops there (no room left).
    let p = plan(&s, &progress());
    assert_eq!((target(&p, "a"), target(&p, "b")), (4, 4));
    assert_eq!(p.job(&key("a")).unwrap().reason, Reason::ScaleUp);
    // The next pass keeps them: nothing past the useful size is trimmed up to the spare max.
    let mut s = cluster(8);
    jobs(&mut s, 4);
    let p = plan(&s, &progress());
    assert_eq!((target(&p, "a"), target(&p, "b")), (4, 4));
    // Where the spare threshold is not met either ("a" at 8, threshold 0.85), the pass trims
    // back to the useful size.
    let strict = PlannerConfig {
        progress_spare_min_marginal_speedup: 0.85,
        ..progress()
    };
    let mut s = cluster(8);
    jobs(&mut s, 7);
    let p = plan(&s, &strict);
    assert_eq!(target(&p, "a"), 2);
    assert_eq!(p.job(&key("a")).unwrap().reason, Reason::LowGain);
    // explain gives the progress thresholds (not goodput's flag) and what more trainers add.
    let notes = explain_all(&s, &p, &strict);
    let i = p.jobs.iter().position(|j| &*j.key.name == "a").unwrap();
    let m = &notes[i].message;
    assert!(
        m.contains("at most 0.80 of one trainer's speed each on average")
            && m.contains("--progress-spare-min-marginal-speedup 0.85"),
        "{m}"
    );
}

#[test]
fn jobs_without_progress_are_taken_to_need_as_long_again_as_they_have_existed() {
    // At now = 1,000 s: "old" was created at 0 and "young" at 900, neither reports; they are
    // taken to have 1,000 s and 100 s left. "known" reports `left` seconds.
    let targets = |gpus: i64, young_max: i32, left: f64| {
        let mut s = cluster(gpus);
        add_job(&mut s, "known", job(1, 3, Some(left), None), 1, &["n"]);
        add_job(&mut s, "old", job(1, 8, None, None), 1, &["n"]);
        let young = JobInfo {
            created: 900,
            ..job(1, young_max, None, None)
        };
        add_job(&mut s, "young", young, 1, &["n"]);
        let p = plan(&s, &progress());
        (target(&p, "known"), target(&p, "old"), target(&p, "young"))
    };
    // 2 spare, a day left: behind both; the younger takes the spare GPUs.
    assert_eq!(targets(5, 8, 86_400.0), (1, 1, 3));
    // 3 spare, 500 s left: after "young" (100 s, to its max 2), before "old" (1,000 s).
    assert_eq!(targets(6, 2, 500.0), (3, 1, 2));
    // 2 spare, 50 s left: first.
    assert_eq!(targets(5, 8, 50.0), (3, 1, 1));
}

#[test]
fn a_job_held_at_min_past_the_bound_goes_first() {
    // Room for one more trainer. "old" has been at min since its creation at 0 and reports the
    // longest remaining time; "short" finishes soonest.
    let mut s = cluster(3);
    add_job(&mut s, "old", job(1, 4, Some(1e6), None), 1, &["n"]);
    // "short" was rescaled (down to min) at 3 h.
    let short = JobInfo {
        last_scale: Some(3 * 3600),
        ..job(1, 4, Some(10.0), None)
    };
    add_job(&mut s, "short", short, 1, &["n"]);
    let before = PlannerConfig {
        now: 3 * 3600 + 60,
        starvation_bound_s: 4 * 3600,
        ..progress()
    };
    let p = plan(&s, &before);
    assert_eq!((target(&p, "old"), target(&p, "short")), (1, 2));
    // At 5 h "old" has been at min for 5 h, past the bound; "short" for 2 h.
    let after = PlannerConfig {
        now: 5 * 3600,
        ..before
    };
    let p = plan(&s, &after);
    assert_eq!((target(&p, "old"), target(&p, "short")), (2, 1));
}

#[test]
fn explain_names_the_job_ahead_that_finishes_sooner() {
    let mut s = cluster(3);
    add_job(&mut s, "near", job(1, 4, Some(600.0), None), 1, &["n"]);
    add_job(&mut s, "far", job(1, 4, Some(6_000.0), None), 1, &["n"]);
    let config = progress();
    let p = plan(&s, &config);
    assert_eq!((target(&p, "near"), target(&p, "far")), (2, 1));
    let notes = explain_all(&s, &p, &config);
    let i = p.jobs.iter().position(|j| &*j.key.name == "far").unwrap();
    let m = &notes[i].message;
    assert!(
        m.contains("ns/near finishes sooner: 600 s left vs 6000 s (5400 s sooner)"),
        "{m}"
    );
}
