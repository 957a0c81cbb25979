//! The water-filling queue. Jobs with the same fulfillment and the same fulfillment after one more
//! trainer differ only by tie rank, so the queue keeps one small heap per such level and a heap of
//! levels: a pop touches a few dozen entries instead of one heap of every job.

use std::collections::{BinaryHeap, HashMap};

use foldhash::fast::RandomState;

use super::candidates::Candidate;

/// A job's place in the queue (greatest first): its share and what breaks equal shares
/// ([`Candidate::share_at`], [`Candidate::second_at`]), each as an integer that is greater the
/// lower the float, then the job's tie rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub now: u64,
    pub next: u64,
    pub tie: u32,
    pub job: usize,
}

impl Key {
    fn level(&self) -> (u64, u64) {
        (self.now, self.next)
    }
}

/// Which jobs water-filling queues (not cooling, not starving, at or above min, below max), and
/// their tie ranks.
#[derive(Debug, Clone, Copy)]
pub struct Queueing<'a> {
    pub cooling: &'a [bool],
    pub starving: &'a [bool],
    pub ties: &'a [u32],
}

impl<'a> Queueing<'a> {
    /// The queueing of a pass's jobs: which cool down, which wait for their gang, their ties.
    pub fn new(cooling: &'a [bool], starving: &'a [bool], ties: &'a [u32]) -> Self {
        Queueing {
            cooling,
            starving,
            ties,
        }
    }

    /// Whether job `i` is queued.
    pub fn queues(&self, jobs: &[Candidate], i: usize) -> bool {
        let j = &jobs[i];
        !self.cooling[i] && !self.starving[i] && j.planned >= j.min && j.planned < j.ceiling()
    }

    /// Job `i`'s key at its planned count.
    pub fn key(&self, jobs: &[Candidate], i: usize) -> Key {
        key_at(&jobs[i], self.ties[i], i, jobs[i].planned)
    }
}

/// A max-priority queue of [`Key`]s; pops in the same order as a `BinaryHeap<Key>`.
#[derive(Debug, Default)]
pub struct FillQueue {
    /// Levels with at least one job queued.
    levels: BinaryHeap<(u64, u64)>,
    /// Jobs queued at each level, by (tie, job); emptied heaps stay for reuse.
    members: HashMap<(u64, u64), BinaryHeap<(u32, usize)>, RandomState>,
}

impl FillQueue {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, key: Key) {
        let members = self.members.entry(key.level()).or_default();
        if members.is_empty() {
            self.levels.push(key.level());
        }
        members.push((key.tie, key.job));
    }

    /// The greatest key, if any.
    pub fn peek(&self) -> Option<Key> {
        let level = *self.levels.peek()?;
        let &(tie, job) = self.members.get(&level)?.peek()?;
        Some(Key {
            now: level.0,
            next: level.1,
            tie,
            job,
        })
    }

    /// How many keys share the greatest key's level (fulfillment now and after one more trainer).
    pub fn top_level_len(&self) -> usize {
        self.levels
            .peek()
            .and_then(|level| self.members.get(level))
            .map_or(0, BinaryHeap::len)
    }

    /// Removes every key at the greatest key's level and appends them to `out`, greatest first
    /// (the order `pop` gives them).
    pub fn pop_level(&mut self, out: &mut Vec<Key>) {
        let Some(level) = self.levels.pop() else {
            return;
        };
        let Some(members) = self.members.get_mut(&level) else {
            return;
        };
        let first = out.len();
        out.extend(members.drain().map(|(tie, job)| Key {
            now: level.0,
            next: level.1,
            tie,
            job,
        }));
        out[first..].sort_unstable_by(|a, b| b.cmp(a));
    }

    /// Removes and returns the greatest key.
    pub fn pop(&mut self) -> Option<Key> {
        let level = *self.levels.peek()?;
        let members = self.members.get_mut(&level)?;
        let (tie, job) = members.pop()?;
        if members.is_empty() {
            self.levels.pop();
        }
        Some(Key {
            now: level.0,
            next: level.1,
            tie,
            job,
        })
    }
}

/// The key of job `i` (tie rank `tie`) at `planned` trainers.
pub fn key_at(j: &Candidate, tie: u32, i: usize, planned: i32) -> Key {
    Key {
        now: lowest_first(j.share_at(planned)),
        next: lowest_first(j.second_at(planned)),
        tie,
        job: i,
    }
}

/// A float as an integer that is greater the lower the float (total order; no NaN arises here).
pub fn lowest_first(f: f64) -> u64 {
    let bits = f.to_bits();
    let ascending = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    !ascending
}

/// Each job's tie rank: greater for higher priority, then older, then namespace/name first.
pub fn tie_ranks(jobs: &[Candidate]) -> Vec<u32> {
    // Candidates come in namespace/name order, so a job's index is its name rank.
    let mut order: Vec<u128> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            debug_assert_eq!(j.rank, i);
            packed_order(j.priority, j.created, i as u32)
        })
        .collect();
    order.sort_unstable();
    let mut ties = vec![0u32; jobs.len()];
    for (position, packed) in order.iter().enumerate() {
        ties[*packed as u32 as usize] = u32::MAX - position as u32;
    }
    ties
}

/// [`Candidate::order_key`] (higher priority, then older, then name rank) packed into one
/// integer that orders the same, with the rank in the low 32 bits.
fn packed_order(priority: i32, created: i64, rank: u32) -> u128 {
    let priority = u128::from(!((priority as u32) ^ (1 << 31)));
    let created = u128::from((created as u64) ^ (1 << 63));
    (priority << 96) | (created << 32) | u128::from(rank)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;

    proptest! {
        /// The packed order key orders like the tuple it packs, extremes included.
        #[test]
        fn packed_order_orders_like_the_order_key(
            a in (any::<i32>(), any::<i64>(), any::<u32>()),
            b in (any::<i32>(), any::<i64>(), any::<u32>()),
        ) {
            let packed = |(p, c, r): (i32, i64, u32)| packed_order(p, c, r);
            let tuple = |(p, c, r): (i32, i64, u32)| (Reverse(p), c, r);
            prop_assert_eq!(packed(a).cmp(&packed(b)), tuple(a).cmp(&tuple(b)));
            prop_assert_eq!(packed(a) as u32, a.2);
        }
    }

    #[test]
    fn lowest_first_reverses_float_order() {
        let floats = [-2.0, -0.5, 0.0, 1e-300, 0.25, 1.0, 1.5, 1e300];
        for pair in floats.windows(2) {
            assert!(lowest_first(pair[0]) > lowest_first(pair[1]), "{pair:?}");
        }
    }

    proptest! {
        /// Popping a whole level gives the keys `pop` would give next, in the same order.
        #[test]
        fn pop_level_gives_what_pops_give(keys in prop::collection::vec((0u64..3, 0u64..3), 1..60)) {
            let mut queue = FillQueue::new();
            let mut reference = BinaryHeap::new();
            for (job, (now, next)) in keys.into_iter().enumerate() {
                let key = Key { now, next, tie: job as u32 * 7 % 251, job };
                queue.push(key);
                reference.push(key);
            }
            while queue.peek().is_some() {
                let len = queue.top_level_len();
                let mut level = Vec::new();
                queue.pop_level(&mut level);
                prop_assert_eq!(level.len(), len);
                for key in level {
                    prop_assert_eq!(Some(key), reference.pop());
                }
            }
            prop_assert!(reference.is_empty());
        }

        /// Any mix of pushes and pops gives what a plain binary heap gives.
        #[test]
        fn pops_like_a_binary_heap(ops in prop::collection::vec((any::<bool>(), 0u64..4, 0u64..4), 0..200)) {
            let mut queue = FillQueue::new();
            let mut reference = BinaryHeap::new();
            for (job, (push, now, next)) in ops.into_iter().enumerate() {
                if push {
                    // Tie ranks are unique per job, as in the pass.
                    let key = Key { now, next, tie: job as u32 * 7 % 251, job };
                    queue.push(key);
                    reference.push(key);
                } else {
                    prop_assert_eq!(queue.pop(), reference.pop());
                }
                prop_assert_eq!(queue.peek(), reference.peek().copied());
            }
            while let Some(key) = reference.pop() {
                prop_assert_eq!(queue.pop(), Some(key));
            }
            prop_assert_eq!(queue.pop(), None);
        }
    }
}
