//! The `fulfillment` policy on hand-built clusters, including the original's weaknesses fixed.

mod common;

use common::*;
use trainscale::api::{JobKey, Resources};
use trainscale::cluster::ClusterState;
use trainscale::planner::{PlannerConfig, Policy, Reason, ScalePlan, plan};

fn fulfillment() -> PlannerConfig {
    PlannerConfig::default()
}

fn edl() -> PlannerConfig {
    PlannerConfig {
        policy: Policy::Edl,
        ..PlannerConfig::default()
    }
}

fn key(name: &str) -> JobKey {
    JobKey::new("ns", name)
}

fn target(p: &ScalePlan, name: &str) -> i32 {
    p.job(&key(name)).unwrap().target
}

fn gpu_trainer() -> Resources {
    Resources::new(10_000, 40 * GIB, 1)
}

#[test]
fn scales_up_onto_free_room_with_placements() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 32_000, 256, 4);
    add_job(&mut s, "j", job_info(1, 8, gpu_trainer()), 1, &["a"]);
    let p = plan(&s, &fulfillment());
    let j = p.job(&key("j")).unwrap();
    // 32 cores and 4 GPUs: 3 trainers of 10 cores / 1 GPU fit, one is already there.
    assert_eq!(j.target, 3);
    assert_eq!(j.reason, Reason::ScaleUp);
    assert_eq!(j.placements.len(), 1);
    assert_eq!(
        (Some(j.placements[0].node), j.placements[0].trainers),
        (s.node_id_of("a"), 2)
    );
    assert_eq!(p.summary.trainers_added, 2);
}

#[test]
fn no_pile_up_one_job_at_max_while_others_sit_at_min() {
    // Three identical elastic jobs at min on room for 12 more trainers.
    let mut s = ClusterState::new();
    for n in ["a", "b"] {
        add_node(&mut s, n, 80_000, 512, 8);
    }
    for name in ["x", "y", "z"] {
        add_job(&mut s, name, job_info(1, 9, gpu_trainer()), 1, &[]);
    }
    let p = plan(&s, &fulfillment());
    let targets: Vec<i32> = ["x", "y", "z"].iter().map(|n| target(&p, n)).collect();
    // 16 GPUs for three jobs: 6, 5, 5 (max-min fair), not one at max.
    assert_eq!(targets.iter().sum::<i32>(), 16);
    assert!(
        targets.iter().max().unwrap() - targets.iter().min().unwrap() <= 1,
        "{targets:?}"
    );

    // The original's frozen sort pushes the least fulfilled job to max and the other to min
    // (edl-autoscaler.md §5.1.2): one 8-GPU node, a at 2 of 1..6, b at 4 of 1..6.
    let mut s = ClusterState::new();
    s.set_node(
        "n1",
        Some(trainscale::cluster::NodeInfo {
            allocatable: Resources::new(2000, 10_000_000_000, 8),
            schedulable: true,
        }),
    );
    let t = Resources::new(100, 1_000_000, 1);
    add_job(&mut s, "a", job_info(1, 6, t), 2, &["n1"; 2]);
    add_job(&mut s, "b", job_info(1, 6, t), 4, &["n1"; 4]);
    let e = plan(
        &s,
        &PlannerConfig {
            max_load_desired: 0.9,
            ..edl()
        },
    );
    assert_eq!((target(&e, "a"), target(&e, "b")), (6, 1));
    // Fulfillment hands the two free GPUs to a, which ends level with b.
    let f = plan(&s, &fulfillment());
    assert_eq!((target(&f, "a"), target(&f, "b")), (4, 4));
}

#[test]
fn no_gpu_trainer_on_a_node_without_a_free_gpu() {
    let mut s = ClusterState::new();
    add_node(&mut s, "cpu-only", 96_000, 768, 0);
    add_node(&mut s, "gpu", 96_000, 768, 2);
    add_job(&mut s, "j", job_info(1, 8, gpu_trainer()), 1, &["gpu"]);
    let p = plan(&s, &fulfillment()).into_owned();
    let j = p.job(&key("j")).unwrap();
    assert_eq!(j.target, 2);
    assert_eq!(
        j.named(&s)
            .placements
            .iter()
            .map(|c| c.node)
            .collect::<Vec<_>>(),
        ["gpu"]
    );
    // The next pass, after the plan is applied, finds no GPU anywhere: no_fit, nothing placed.
    apply_plan(&mut s, &p);
    let again = plan(&s, &fulfillment());
    let j = again.job(&key("j")).unwrap();
    assert_eq!((j.target, j.reason), (2, Reason::NoFit));
    assert!(j.placements.is_empty());
}

#[test]
fn gpu_jobs_near_the_limit_do_not_churn() {
    // A GPU-heavy cluster at 15/16 GPUs: the original's 0.97 threshold flips trainers up and
    // down every pass; one threshold for both directions leaves a settled cluster alone.
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 96_000, 768, 8);
    add_node(&mut s, "b", 96_000, 768, 8);
    add_job(&mut s, "x", job_info(2, 12, gpu_trainer()), 8, &["a"; 8]);
    add_job(&mut s, "y", job_info(2, 12, gpu_trainer()), 7, &["b"; 7]);
    let mut changes = 0;
    for _ in 0..5 {
        let p = plan(&s, &fulfillment()).into_owned();
        changes += p.summary.trainers_added + p.summary.trainers_removed;
        apply_plan(&mut s, &p);
    }
    // One trainer added in the first pass (the free GPU), then nothing moves.
    assert_eq!(changes, 1);
    let p = plan(&s, &fulfillment());
    assert!(p.jobs.iter().all(|j| j.target == j.current));

    // The original, on the same settled cluster, keeps planning changes.
    let e = plan(&s, &edl());
    assert!(e.summary.trainers_removed > 0, "{:?}", e.jobs);
}

#[test]
fn zero_request_jobs_terminate() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 1000, 1, 0);
    add_job(&mut s, "free", job_info(1, 50, Resources::ZERO), 1, &["a"]);
    let p = plan(&s, &fulfillment());
    assert_eq!(target(&p, "free"), 50);
    assert!(p.warnings.is_empty());
    // The original livelocks on zero-request GPU jobs; its run stops only at the cap.
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 1000, 1, 8);
    add_job(
        &mut s,
        "g",
        job_info(1, 50, Resources::new(0, 0, 1)),
        1,
        &["a"],
    );
    let cfg = PlannerConfig {
        edl_iteration_cap: 50,
        ..edl()
    };
    assert!(!plan(&s, &cfg).warnings.is_empty());
    assert!(plan(&s, &fulfillment()).warnings.is_empty());
}

#[test]
fn starving_gang_reclaims_from_the_most_fulfilled_job() {
    // One 8-GPU node full of x (at max); y arrives needing a gang of 2.
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 96_000, 768, 8);
    add_job(
        &mut s,
        "x",
        job_info(2, 8, Resources::new(4000, 16 * GIB, 1)),
        8,
        &["a"; 8],
    );
    add_job(
        &mut s,
        "y",
        job_info(2, 4, Resources::new(4000, 16 * GIB, 1)),
        2,
        &[],
    );
    let p = plan(&s, &fulfillment()).into_owned();
    let (x, y) = (p.job(&key("x")).unwrap(), p.job(&key("y")).unwrap());
    // y's gang of 2 comes from x; then one more moves for fairness: both end at 0.5.
    assert_eq!((x.target, x.reason), (5, Reason::Reclaimed));
    assert_eq!(
        (x.removals[0].node, x.removals[0].trainers),
        (s.node_id_of("a"), 3)
    );
    assert_eq!((y.target, y.reason), (3, Reason::ScaleUp));
    assert_eq!(y.placements[0].trainers, 3);
    assert_eq!((x.fulfillment_after, y.fulfillment_after), (0.5, 0.5));
    // Applied, the plan is stable: the next pass moves nothing back.
    apply_plan(&mut s, &p);
    let again = plan(&s, &fulfillment());
    assert_eq!(
        again.summary.trainers_added + again.summary.trainers_removed,
        0
    );
}

#[test]
fn no_reclaim_from_higher_priority_or_when_the_gang_cannot_fit() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 96_000, 768, 8);
    let mut high = job_info(2, 8, Resources::new(4000, 16 * GIB, 1));
    high.priority = 10;
    add_job(&mut s, "x", high, 8, &["a"; 8]);
    add_job(
        &mut s,
        "y",
        job_info(2, 4, Resources::new(4000, 16 * GIB, 1)),
        2,
        &[],
    );
    let p = plan(&s, &fulfillment());
    assert_eq!(p.job(&key("x")).unwrap().target, 8);
    assert_eq!(p.job(&key("y")).unwrap().reason, Reason::Starving);

    // A gang bigger than x could ever give back (x stays at min 2): nothing is taken.
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 96_000, 768, 8);
    add_job(
        &mut s,
        "x",
        job_info(2, 8, Resources::new(4000, 16 * GIB, 1)),
        8,
        &["a"; 8],
    );
    add_job(
        &mut s,
        "y",
        job_info(7, 8, Resources::new(4000, 16 * GIB, 1)),
        7,
        &[],
    );
    let p = plan(&s, &fulfillment());
    let x = p.job(&key("x")).unwrap();
    assert_eq!((x.target, x.reason), (8, Reason::Unchanged));
    assert!(x.removals.is_empty());
    let y = p.job(&key("y")).unwrap();
    assert_eq!((y.target, y.reason), (7, Reason::Starving));
    assert!(y.placements.is_empty());
}

#[test]
fn overload_shrinks_the_most_fulfilled_first_never_below_min() {
    // Node a lost half its capacity: 12 trainers of 4 cores on 32 cores.
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 48_000, 768, 0);
    let t = Resources::new(4000, GIB, 0);
    add_job(&mut s, "x", job_info(2, 8, t), 8, &["a"; 8]);
    add_job(&mut s, "y", job_info(2, 8, t), 4, &["a"; 4]);
    add_node(&mut s, "a", 32_000, 768, 0);
    let p = plan(&s, &fulfillment());
    let (x, y) = (p.job(&key("x")).unwrap(), p.job(&key("y")).unwrap());
    // 4 trainers must go, all from x (more fulfilled), which ends level with y.
    assert_eq!((x.target, x.reason), (4, Reason::Overload));
    assert_eq!(x.removals[0].trainers, 4);
    assert_eq!(y.target, 4);
    assert!(p.summary.trainers_removed == 4);
}

#[test]
fn cooldown_holds_a_recently_scaled_job() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 96_000, 768, 8);
    let mut info = job_info(1, 8, gpu_trainer());
    info.last_scale = Some(1_000);
    add_job(&mut s, "j", info, 2, &["a", "a"]);
    let cfg = PlannerConfig {
        now: 1_100,
        cooldown_s: 300,
        ..fulfillment()
    };
    let j = plan(&s, &cfg).job(&key("j")).cloned().unwrap();
    assert_eq!((j.target, j.reason), (2, Reason::Cooldown));
    let later = PlannerConfig { now: 1_300, ..cfg };
    assert_eq!(
        plan(&s, &later).job(&key("j")).unwrap().reason,
        Reason::ScaleUp
    );
}

#[test]
fn over_max_is_brought_down_pending_first() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 96_000, 768, 8);
    // 6 trainers wanted, max 4; 3 bound, 3 pending.
    add_job(
        &mut s,
        "j",
        job_info(1, 4, gpu_trainer()),
        6,
        &["a", "a", "a"],
    );
    let j = plan(&s, &fulfillment()).job(&key("j")).cloned().unwrap();
    assert_eq!(j.target, 4);
    assert_eq!(j.reason, Reason::OverMax);
    assert_eq!(j.placements[0].trainers, 1);
    assert_eq!(j.removals.len(), 1);
    assert_eq!((j.removals[0].node, j.removals[0].trainers), (None, 2));
}

#[test]
fn pending_trainers_are_placed_or_removed() {
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 20_000, 768, 8);
    // 4 wanted, 1 bound, room for one more (CPU): one placed, two removed (pending).
    add_job(&mut s, "j", job_info(1, 4, gpu_trainer()), 4, &["a"]);
    let j = plan(&s, &fulfillment()).job(&key("j")).cloned().unwrap();
    assert_eq!(j.target, 2);
    assert_eq!(j.reason, Reason::Overload);
    assert_eq!(j.placements[0].trainers, 1);
    assert_eq!((j.removals[0].node, j.removals[0].trainers), (None, 2));
}

#[test]
fn cpu_trainers_leave_gpu_nodes_to_gpu_jobs() {
    let mut s = ClusterState::new();
    add_node(&mut s, "cpu", 40_000, 256, 0);
    add_node(&mut s, "gpu", 40_000, 256, 4);
    add_job(
        &mut s,
        "c",
        job_info(1, 4, Resources::new(10_000, GIB, 0)),
        1,
        &[],
    );
    add_job(&mut s, "g", job_info(1, 4, gpu_trainer()), 1, &[]);
    let p = plan(&s, &fulfillment());
    let c = p.job(&key("c")).unwrap();
    let g = p.job(&key("g")).unwrap();
    assert_eq!(
        c.named(&s)
            .placements
            .iter()
            .map(|n| n.node)
            .collect::<Vec<_>>(),
        ["cpu"]
    );
    assert_eq!((g.target, g.named(&s).placements[0].node), (4, "gpu"));
}

/// Pods above a job's parallelism are on their way out (the Job controller removes them): the
/// room they hold is not an overload to shrink for, they are not the job's trainers, and their
/// room counts as coming free (here one core beyond the two kept: the job may take it).
#[test]
fn pods_the_controller_is_removing_are_no_overload() {
    let trainer = Resources::new(1000, GIB, 0);
    let mut state = ClusterState::new();
    add_node(&mut state, "n", 3000, 16, 0);
    let key = key("shrunk");
    state.set_training_job(key.clone(), Some(job_info(1, 4, trainer)));
    // Parallelism just went 4 -> 2: indexes 2 and 3 still run and overfill the node by one.
    state.set_trainer_job(key.clone(), Some(Some(2)));
    for index in 0..4u32 {
        state.set_pod(
            ("ns".into(), format!("shrunk-{index}")),
            Some(trainscale::testkit::trainer_pod(
                &key,
                Some("n".into()),
                trainer,
                Some(index),
            )),
        );
    }
    let p = plan(&state, &fulfillment());
    let job = p.job(&key).unwrap();
    assert_eq!((job.current, job.target), (2, 3), "{job:?}");
    assert!(job.removals.is_empty(), "{job:?}");
    assert_eq!(job.named(&state).placements.len(), 1, "{job:?}");
}

#[test]
fn a_trainer_placed_earlier_in_the_pass_moves_to_make_room() {
    // x's next trainer (1 core, 1 GPU) fits best on a (its one GPU); y's (6 cores, 1 GPU) then
    // fits nowhere (b has GPUs but 4 cores) unless x's trainer moves to b: the repair moves it.
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 8_000, 64, 1);
    add_node(&mut s, "b", 4_000, 64, 2);
    add_node(&mut s, "c", 7_000, 64, 2);
    add_job(
        &mut s,
        "x",
        job_info(1, 2, Resources::new(1_000, GIB, 1)),
        1,
        &["c"],
    );
    add_job(
        &mut s,
        "y",
        job_info(1, 2, Resources::new(6_000, GIB, 1)),
        1,
        &["c"],
    );
    let p = plan(&s, &fulfillment()).into_owned();
    let nodes = |name: &str| {
        p.job(&key(name))
            .unwrap()
            .named(&s)
            .placements
            .iter()
            .map(|c| (c.node.to_string(), c.trainers))
            .collect::<Vec<_>>()
    };
    assert_eq!((target(&p, "x"), target(&p, "y")), (2, 2));
    assert_eq!(nodes("x"), [("b".to_string(), 1)]);
    assert_eq!(nodes("y"), [("a".to_string(), 1)]);
}

/// A node taken out of scheduling (`kubectl cordon`, or a kubelet gone NotReady) with `name`'s
/// allocatable kept.
fn cordon(s: &mut ClusterState, name: &str, cpu_milli: i64, mem_gib: i64, gpu: i64) {
    s.set_node(
        name,
        Some(trainscale::cluster::NodeInfo {
            allocatable: Resources::new(cpu_milli, mem_gib * GIB, gpu),
            schedulable: false,
        }),
    );
}

#[test]
fn a_cordoned_node_keeps_its_trainers_and_takes_no_new_ones() {
    // x runs 4 trainers on a, which is then cordoned; b is empty.
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 96_000, 768, 8);
    add_node(&mut s, "b", 96_000, 768, 8);
    add_job(&mut s, "x", job_info(1, 8, gpu_trainer()), 4, &["a"; 4]);
    cordon(&mut s, "a", 96_000, 768, 8);
    let p = plan(&s, &fulfillment()).into_owned();
    let x = p.job(&key("x")).unwrap();
    // Cordoning evicts nothing: the 4 stay, and growth goes to b only.
    assert_eq!((x.target, x.reason), (8, Reason::ScaleUp));
    assert!(x.removals.is_empty(), "{:?}", x.removals);
    let onto: Vec<_> = x
        .placements
        .iter()
        .map(|p| (Some(p.node), p.trainers))
        .collect();
    assert_eq!(onto, vec![(s.node_id_of("b"), 4)]);
    // Applied, the next pass changes nothing.
    apply_plan(&mut s, &p);
    let again = plan(&s, &fulfillment());
    assert_eq!(
        again.summary.trainers_added + again.summary.trainers_removed,
        0
    );
}

#[test]
fn no_job_shrinks_for_room_on_a_cordoned_node() {
    // x holds all 8 GPUs of a, which is cordoned; y's gang of 2 needs room. Shrinking x would
    // free room on a node that takes no pod, so y waits and x keeps its size.
    let mut s = ClusterState::new();
    add_node(&mut s, "a", 96_000, 768, 8);
    let t = Resources::new(4000, 16 * GIB, 1);
    add_job(&mut s, "x", job_info(2, 8, t), 8, &["a"; 8]);
    add_job(&mut s, "y", job_info(2, 4, t), 2, &[]);
    cordon(&mut s, "a", 96_000, 768, 8);
    let p = plan(&s, &fulfillment()).into_owned();
    let (x, y) = (p.job(&key("x")).unwrap(), p.job(&key("y")).unwrap());
    assert_eq!(x.target, 8, "{:?}", x.reason);
    assert!(x.removals.is_empty(), "{:?}", x.removals);
    assert_eq!((y.target, y.reason), (2, Reason::Starving));
    assert!(y.placements.is_empty(), "{:?}", y.placements);
}
