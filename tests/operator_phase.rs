//! The phase machine, pure: "" → Creating → Running ⇄ Scaling → Succeed / Failed / Timeout.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use trainscale::api::{TrainingJobPhase as P, TrainingJobStatus};
use trainscale::operator::phase::{
    JobOutcome, Observation, PhasePolicy, ReplicaCounts, TrainerCounts, next_status,
    walltime_remaining,
};

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn obs(master_ready: i32, pserver_ready: i32, parallelism: i32, ready: i32) -> Observation {
    Observation {
        master: Some(ReplicaCounts {
            desired: 1,
            ready: master_ready,
        }),
        pserver: Some(ReplicaCounts {
            desired: 2,
            ready: pserver_ready,
        }),
        trainer: Some(TrainerCounts {
            parallelism,
            active: ready,
            ready,
            ..Default::default()
        }),
        pserver_max_restarts: 0,
    }
}

const FT: PhasePolicy = PhasePolicy {
    fault_tolerant: true,
    walltime_seconds: 0,
    restart_limit: 5,
};

#[test]
fn creating_then_running_sets_start_time_once() {
    let t0 = at("2026-01-01T00:00:00Z");
    let s = next_status(&TrainingJobStatus::default(), &obs(0, 0, 2, 0), &FT, t0);
    assert_eq!(s.phase, P::Creating);
    assert_eq!(s.start_time, None);
    let s = next_status(&s, &obs(1, 2, 2, 2), &FT, at("2026-01-01T00:01:00Z"));
    assert_eq!(s.phase, P::Running);
    assert_eq!(s.start_time, Some(Time(at("2026-01-01T00:01:00Z"))));
    // startTime persists through later passes.
    let s = next_status(&s, &obs(1, 2, 2, 2), &FT, at("2026-01-01T00:05:00Z"));
    assert_eq!(s.start_time, Some(Time(at("2026-01-01T00:01:00Z"))));
    assert_eq!(s.replica_statuses.len(), 3);
    assert_eq!(s.replica_statuses[2].state, "running");
    assert_eq!(s.replica_statuses[2].resource_states["running"], 2);
}

#[test]
fn running_and_scaling_alternate_with_the_trainer_count() {
    let t = at("2026-01-01T00:00:00Z");
    let running = next_status(&TrainingJobStatus::default(), &obs(1, 2, 2, 2), &FT, t);
    assert_eq!(running.phase, P::Running);
    let up = next_status(&running, &obs(1, 2, 5, 2), &FT, t);
    assert_eq!(up.phase, P::Scaling);
    let settled = next_status(&up, &obs(1, 2, 5, 5), &FT, t);
    assert_eq!(settled.phase, P::Running);
    let down = next_status(&settled, &obs(1, 2, 3, 5), &FT, t);
    assert_eq!(down.phase, P::Scaling);
    // A restarting pserver does not send a running job back to Creating.
    let degraded = next_status(&settled, &obs(1, 1, 5, 5), &FT, t);
    assert_eq!(degraded.phase, P::Running);
}

#[test]
fn walltime_ends_a_job_with_timeout() {
    let policy = PhasePolicy {
        walltime_seconds: 60,
        ..FT
    };
    let t0 = at("2026-01-01T00:00:00Z");
    let s = next_status(&TrainingJobStatus::default(), &obs(1, 2, 2, 2), &policy, t0);
    assert_eq!(s.phase, P::Running);
    assert_eq!(
        walltime_remaining(&s, &policy, at("2026-01-01T00:00:20Z"))
            .unwrap()
            .as_secs(),
        41
    );
    let s = next_status(&s, &obs(1, 2, 2, 2), &policy, at("2026-01-01T00:01:00Z"));
    assert_eq!(s.phase, P::Running, "exactly the walltime is not over it");
    let s = next_status(&s, &obs(1, 2, 2, 2), &policy, at("2026-01-01T00:01:01Z"));
    assert_eq!(s.phase, P::Timeout);
    assert_eq!(s.reason, "ran 61 s, longer than the walltime of 60 s");
    assert_eq!(
        walltime_remaining(&s, &policy, at("2026-01-01T00:02:00Z")),
        None
    );
    // Finished is final.
    let again = next_status(&s, &obs(1, 2, 2, 2), &policy, at("2026-01-01T00:03:00Z"));
    assert_eq!(again, s);
}

#[test]
fn a_job_that_never_started_does_not_time_out() {
    let policy = PhasePolicy {
        walltime_seconds: 60,
        ..FT
    };
    let s = next_status(
        &TrainingJobStatus::default(),
        &obs(0, 0, 2, 0),
        &policy,
        at("2026-01-01T00:00:00Z"),
    );
    let s = next_status(&s, &obs(0, 0, 2, 0), &policy, at("2026-01-02T00:00:00Z"));
    assert_eq!(s.phase, P::Creating);
}

#[test]
fn the_pserver_restart_limit_fails_the_job() {
    let mut o = obs(1, 2, 2, 2);
    o.pserver_max_restarts = 4;
    let s = next_status(
        &TrainingJobStatus::default(),
        &o,
        &FT,
        at("2026-01-01T00:00:00Z"),
    );
    assert_eq!(s.phase, P::Running);
    o.pserver_max_restarts = 5;
    let s = next_status(&s, &o, &FT, at("2026-01-01T00:00:10Z"));
    assert_eq!(s.phase, P::Failed);
    assert_eq!(
        s.reason,
        "a pserver restarted 5 times, reaching the restart limit 5"
    );
    assert_eq!(serde_json::to_value(s.phase).unwrap(), "Failed");
    // 0 disables the limit.
    let off = PhasePolicy {
        restart_limit: 0,
        ..FT
    };
    let s = next_status(
        &TrainingJobStatus::default(),
        &o,
        &off,
        at("2026-01-01T00:00:00Z"),
    );
    assert_eq!(s.phase, P::Running);
}

#[test]
fn trainer_outcomes_end_the_job() {
    let t = at("2026-01-01T00:00:00Z");
    let mut o = obs(1, 2, 2, 0);
    o.trainer.as_mut().unwrap().succeeded = 2;
    o.trainer.as_mut().unwrap().outcome = Some(JobOutcome::Complete);
    assert_eq!(
        next_status(&TrainingJobStatus::default(), &o, &FT, t).phase,
        P::Succeed
    );

    let mut o = obs(1, 2, 2, 0);
    o.trainer.as_mut().unwrap().outcome = Some(JobOutcome::Failed {
        reason: "BackoffLimitExceeded".into(),
        message: "Job has reached the specified backoff limit".into(),
    });
    let s = next_status(&TrainingJobStatus::default(), &o, &FT, t);
    assert_eq!(s.phase, P::Failed);
    assert_eq!(
        s.reason,
        "trainer Job failed: BackoffLimitExceeded: Job has reached the specified backoff limit"
    );

    // Not fault tolerant: one failed trainer fails the job; fault tolerant: only all of them.
    let mut o = obs(1, 2, 2, 1);
    o.trainer.as_mut().unwrap().failed = 1;
    let non_ft = PhasePolicy {
        fault_tolerant: false,
        ..FT
    };
    assert_eq!(
        next_status(&TrainingJobStatus::default(), &o, &non_ft, t).phase,
        P::Failed
    );
    assert_ne!(
        next_status(&TrainingJobStatus::default(), &o, &FT, t).phase,
        P::Failed
    );
    let mut o = obs(1, 2, 2, 0);
    o.trainer.as_mut().unwrap().failed = 2;
    assert_eq!(
        next_status(&TrainingJobStatus::default(), &o, &FT, t).reason,
        "all 2 trainers failed"
    );
}

#[test]
fn released_persists() {
    let s = TrainingJobStatus {
        phase: P::Succeed,
        released: true,
        ..Default::default()
    };
    let next = next_status(&s, &obs(1, 2, 2, 2), &FT, at("2026-01-01T00:00:00Z"));
    assert!(next.released);
}

#[test]
fn trainers_is_the_observed_parallelism_and_kept_when_unobserved() {
    let t = at("2026-01-01T00:00:00Z");
    let s = next_status(&TrainingJobStatus::default(), &obs(1, 2, 2, 0), &FT, t);
    assert_eq!(s.trainers, Some(2));
    let s = next_status(&s, &obs(1, 2, 5, 2), &FT, t);
    assert_eq!(s.trainers, Some(5));
    let unobserved = Observation {
        trainer: None,
        ..obs(1, 2, 5, 2)
    };
    assert_eq!(next_status(&s, &unobserved, &FT, t).trainers, Some(5));
}
