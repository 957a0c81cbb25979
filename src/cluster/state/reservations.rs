//! Room the scheduler holds for trainers it placed before any watch event shows them bound: a
//! position whose pod the Job controller has not created yet, or a pod just bound whose update
//! has not arrived. A reservation counts exactly like a bound trainer at its position (node room,
//! the job's bound trainers, its controller positions), so no two passes hand out the same room.
//! It ends when a live trainer is bound at its position, when the job's size drops below it, when
//! its node or job goes, or when it lapses.

use super::{ClusterState, Position};
use crate::api::{JobKey, Resources};
use crate::cluster::objects::{PodInfo, PodPhase, Role};

/// Room held for one trainer position (with the other resources its job's trainer class
/// requests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The trainer as it is accounted (bound to the reserved node).
    pod: PodInfo,
    /// Seconds since the epoch after which the reservation lapses.
    pub expires: i64,
    /// The position's pod was sent to be bound here: the reservation stands for it until its
    /// update arrives (kube-scheduler's "assumed" pod), and the pod is not bound again.
    pub assumed: bool,
}

impl Reservation {
    /// The reserved node.
    pub fn node(&self) -> &str {
        self.pod.node.as_deref().unwrap_or("")
    }

    /// The room held.
    pub fn requests(&self) -> Resources {
        self.pod.requests
    }
}

/// The name a reservation takes in its job's positions (no pod has an empty name).
const RESERVED: &str = "";

impl ClusterState {
    /// Holds `requests` on `node` for trainer position `index` of `job` until `expires` (seconds
    /// since the epoch), replacing any reservation of that position; `assumed` when the position's
    /// pod is being bound there (see [`Reservation::assumed`]).
    pub fn reserve(
        &mut self,
        job: &JobKey,
        index: u32,
        node: &str,
        requests: Resources,
        expires: i64,
        assumed: bool,
    ) {
        self.unreserve(job, index);
        // The job's trainers request other resources as their class says.
        let extended = self
            .jobs
            .get(job)
            .and_then(|slot| slot.class)
            .and_then(|class| self.eligibility.constraints(class))
            .map(|c| c.extended.clone())
            .unwrap_or_default();
        let pod = PodInfo {
            node: Some(node.to_string()),
            phase: PodPhase::Pending,
            requests,
            terminating: false,
            owner: Some((job.clone(), Role::Trainer)),
            created: 0,
            index: Some(index),
            extended,
            priority: 0,
            claim: None,
        };
        self.account_pod(&pod, 1);
        if let Some(p) = Position::of(&pod) {
            self.position(RESERVED, p);
        }
        self.reservations.insert(
            (job.clone(), index),
            Reservation {
                pod,
                expires,
                assumed,
            },
        );
    }

    /// Gives back the room held for position `index` of `job`; whether there was any.
    pub fn unreserve(&mut self, job: &JobKey, index: u32) -> bool {
        let Some(reservation) = self.reservations.remove(&(job.clone(), index)) else {
            return false;
        };
        if let Some(p) = Position::of(&reservation.pod) {
            self.unposition(RESERVED, p);
        }
        self.account_pod(&reservation.pod, -1);
        true
    }

    /// Gives back every reservation of `job` at position `from` or above.
    pub fn unreserve_from(&mut self, job: &JobKey, from: u32) {
        if self.reservations.is_empty() {
            return;
        }
        let doomed: Vec<u32> = self
            .reservations
            .range((job.clone(), from)..)
            .take_while(|((k, _), _)| k == job)
            .map(|((_, index), _)| *index)
            .collect();
        for index in doomed {
            self.unreserve(job, index);
        }
    }

    /// Gives back every reservation on node `name`.
    pub(super) fn unreserve_node(&mut self, name: &str) {
        self.unreserve_where(|r| r.node() == name);
    }

    /// Gives back every reservation that lapsed at `now`; how many.
    pub fn expire_reservations(&mut self, now: i64) -> usize {
        self.unreserve_where(|r| r.expires <= now)
    }

    fn unreserve_where(&mut self, doomed: impl Fn(&Reservation) -> bool) -> usize {
        if self.reservations.is_empty() {
            return 0;
        }
        let keys: Vec<(JobKey, u32)> = self
            .reservations
            .iter()
            .filter(|(_, r)| doomed(r))
            .map(|(k, _)| k.clone())
            .collect();
        for (job, index) in &keys {
            self.unreserve(job, *index);
        }
        keys.len()
    }

    /// The reservation of position `index` of `job`, if any.
    pub fn reservation(&self, job: &JobKey, index: u32) -> Option<&Reservation> {
        self.reservations.get(&(job.clone(), index))
    }

    /// The reservations of `job`, by position: a range of the map, not a scan of every job's.
    pub fn reservations_of<'a>(
        &'a self,
        job: &'a JobKey,
    ) -> impl Iterator<Item = (u32, &'a Reservation)> + 'a {
        self.reservations
            .range((job.clone(), 0)..)
            .take_while(move |((k, _), _)| k == job)
            .map(|((_, index), r)| (*index, r))
    }

    /// Every reservation, by job and position.
    pub fn reservations(&self) -> impl Iterator<Item = (&JobKey, u32, &Reservation)> + '_ {
        self.reservations.iter().map(|((k, i), r)| (k, *i, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NodeInfo;
    use crate::testkit::{job_info, trainer_pod};

    const GIB: i64 = 1 << 30;

    fn state() -> (ClusterState, JobKey, Resources) {
        let trainer = Resources::new(1000, GIB, 1);
        let mut state = ClusterState::new();
        state.set_node(
            "a",
            Some(NodeInfo {
                allocatable: Resources::new(8000, 16 * GIB, 8),
                schedulable: true,
            }),
        );
        let key = JobKey::new("ns", "j");
        state.set_training_job(key.clone(), Some(job_info(1, 8, trainer, 0)));
        state.set_trainer_job(key.clone(), Some(Some(2)));
        (state, key, trainer)
    }

    #[test]
    fn a_reservation_holds_room_and_a_position_until_its_trainer_is_bound() {
        let (mut state, key, trainer) = state();
        let a = state.node_id_of("a").unwrap();
        let free = state.node(a).unwrap().free();
        state.reserve(&key, 1, "a", trainer, 100, false);
        assert_eq!(state.node(a).unwrap().free(), free - trainer);
        let slot = state.job(&key).unwrap();
        assert_eq!(
            slot.controller_positions(state.size_cap()),
            vec![None, Some(a)]
        );
        assert_eq!(slot.trainers.bound, 1);
        // The pod of index 1 appears pending: the reservation stays.
        let pending = trainer_pod(&key, None, trainer, Some(1));
        state.set_pod(("ns".into(), "j-1".into()), Some(pending));
        assert!(state.reservation(&key, 1).is_some());
        // It is bound: its own accounting replaces the reservation's.
        let bound = trainer_pod(&key, Some("a".into()), trainer, Some(1));
        state.set_pod(("ns".into(), "j-1".into()), Some(bound));
        assert!(state.reservation(&key, 1).is_none());
        assert_eq!(state.node(a).unwrap().free(), free - trainer);
        assert_eq!(state.job(&key).unwrap().trainers.bound, 1);
    }

    /// A job's reservations are its own only, in position order, whatever the other jobs'
    /// names (one a prefix of its name, one sorting just before or after it).
    #[test]
    fn reservations_of_a_job_are_its_own_in_position_order() {
        let (mut state, key, trainer) = state();
        let neighbours = [JobKey::new("ns", "i"), JobKey::new("ns", "jj")];
        for other in &neighbours {
            state.set_training_job(other.clone(), Some(job_info(1, 8, trainer, 0)));
            state.set_trainer_job(other.clone(), Some(Some(2)));
            state.reserve(other, 0, "a", trainer, 100, false);
        }
        state.reserve(&key, 3, "a", trainer, 100, false);
        state.reserve(&key, 1, "a", trainer, 100, true);
        let own: Vec<(u32, bool)> = state
            .reservations_of(&key)
            .map(|(index, r)| (index, r.assumed))
            .collect();
        assert_eq!(own, [(1, true), (3, false)]);
        let scanned: Vec<u32> = state
            .reservations()
            .filter(|(job, _, _)| **job == key)
            .map(|(_, index, _)| index)
            .collect();
        assert_eq!(scanned, [1, 3]);
        assert_eq!(state.reservations_of(&JobKey::new("ns", "none")).count(), 0);
    }

    #[test]
    fn a_lowered_size_a_deleted_node_and_time_end_reservations() {
        let (mut state, key, trainer) = state();
        let a = state.node_id_of("a").unwrap();
        let free = state.node(a).unwrap().free();
        state.reserve(&key, 0, "a", trainer, 100, false);
        state.reserve(&key, 1, "a", trainer, 50, false);
        // The same size again (a status update) keeps both; a raise too.
        state.set_trainer_job(key.clone(), Some(Some(2)));
        state.set_trainer_job(key.clone(), Some(Some(3)));
        assert_eq!(state.reservations().count(), 2);
        state.set_trainer_job(key.clone(), Some(Some(1)));
        assert_eq!(state.reservations().count(), 1);
        assert_eq!(state.expire_reservations(99), 0);
        assert_eq!(state.expire_reservations(100), 1);
        assert_eq!(state.node(a).unwrap().free(), free);
        state.reserve(&key, 0, "a", trainer, 100, false);
        state.delete_node("a");
        assert_eq!(state.reservations().count(), 0);
        assert_eq!(state.job(&key).unwrap().trainers.bound, 0);
    }
}
