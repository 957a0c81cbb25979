//! Kueue's quota arithmetic on one snapshot of the model, as its scheduler cache does it
//! (`pkg/cache/scheduler/resource_node.go`), for flat cohorts: a ClusterQueue may take what its
//! lending limit keeps for itself and is unused, plus what its cohort has unused (the members'
//! nominal quotas less what they keep, less what they use beyond what they keep), the latter at
//! most its borrowing limit beyond its own lendable quota. Flavors stay apart: a worker is
//! charged to the flavors its job's admission assigned.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::QuotaModel;
use super::read::{FlavorResource, PerResource, QueueInfo, Quota, WorkerSet};

/// A ClusterQueue's index in a [`QuotaRoom`].
pub type QueueId = usize;

/// Why a job's workers cannot be charged to its ClusterQueue at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The queue has no quota for `resource` (in `flavor`, when admission assigned one):
    /// Kueue admits no pod requesting it.
    Uncovered {
        resource: Arc<str>,
        flavor: Option<Arc<str>>,
    },
    /// The queue admits nothing new (why).
    Inactive(String),
}

/// What one more worker of a job takes: `(flavor-resource id, amount)` in its ClusterQueue.
pub type Need = Vec<(u32, i64)>;

/// Why a ClusterQueue's jobs give quota back ([`QuotaRoom::owes`]); the first comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Owed {
    /// It borrows quota that waiting Workloads or other queues' growing jobs of its cohort need,
    /// or its own waiting Workloads need what its jobs hold above min.
    Borrowed,
    /// Within its nominal quota, its jobs' workers above min go to Workloads of its cohort
    /// waiting to start that the cohort's unused quota does not cover.
    Lent,
}

/// Quota and usage of a flavor and resource as a message shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub nominal: i64,
    pub used: i64,
    /// What the queue could still take.
    pub available: i64,
}

#[derive(Debug, Clone)]
struct QueueRoom<'m> {
    info: &'m QueueInfo,
    cohort: Option<usize>,
    /// By flavor-resource id.
    quota: Vec<Option<Quota>>,
    usage: Vec<i64>,
    /// Unused nominal quota its own waiting Workloads ask for (see [`QuotaRoom::growth`]).
    waiting: Vec<i64>,
    /// Unused nominal quota its own running jobs want to grow into (see [`QuotaRoom::growth`]).
    claims: Vec<i64>,
    inactive: Option<String>,
}

impl QueueRoom<'_> {
    /// What is left of its claim on flavor-resource `f`: its own jobs' growth uses it up.
    fn claim_left(&self, f: usize) -> i64 {
        let nominal = self.quota[f].map_or(0, |q| q.nominal);
        let unused = nominal
            .saturating_sub(self.usage[f])
            .saturating_sub(self.waiting[f])
            .max(0);
        self.claims[f].min(unused)
    }
}

#[derive(Debug, Clone)]
struct CohortRoom {
    name: Arc<str>,
    /// The members' nominal quotas less what their lending limits keep, by flavor-resource id.
    subtree: Vec<i64>,
    /// The members' usage beyond what their lending limits keep.
    usage: Vec<i64>,
    /// The members' [`QueueRoom::waiting`], summed.
    waiting: Vec<i64>,
}

/// Every ClusterQueue's quota and usage, changed as a pass charges workers.
#[derive(Debug, Clone)]
pub struct QuotaRoom<'m> {
    frs: Vec<FlavorResource>,
    ids: HashMap<Arc<str>, HashMap<Arc<str>, u32>>,
    queues: Vec<QueueRoom<'m>>,
    queue_ids: BTreeMap<&'m str, QueueId>,
    cohorts: Vec<CohortRoom>,
}

/// What a queue keeps from lending: `max(0, nominal − lendingLimit)`, 0 without a limit.
fn kept(q: Option<Quota>) -> i64 {
    q.and_then(|q| q.lending_limit.map(|l| q.nominal.saturating_sub(l).max(0)))
        .unwrap_or(0)
}

impl<'m> QuotaRoom<'m> {
    /// The room as the model's ClusterQueues and Workloads leave it.
    pub fn new(model: &'m QuotaModel) -> Self {
        let mut room = QuotaRoom {
            frs: Vec::new(),
            ids: HashMap::new(),
            queues: Vec::new(),
            queue_ids: BTreeMap::new(),
            cohorts: Vec::new(),
        };
        for info in model.cluster_queues() {
            for (flavor, resource, _) in info.quotas() {
                room.intern(flavor, resource);
            }
            for (flavor, resource) in model.usage(&info.name).into_iter().flat_map(|u| u.keys()) {
                room.intern(flavor, resource);
            }
        }
        let n = room.frs.len();
        let mut cohort_ids: BTreeMap<&str, usize> = BTreeMap::new();
        for info in model.cluster_queues() {
            let mut quota = vec![None; n];
            for (flavor, resource, q) in info.quotas() {
                if let Some(id) = room.id(flavor, resource) {
                    quota[id as usize] = Some(q);
                }
            }
            let mut usage = vec![0i64; n];
            for ((flavor, resource), amount) in model.usage(&info.name).into_iter().flatten() {
                if let Some(id) = room.id(flavor, resource) {
                    usage[id as usize] = *amount;
                }
            }
            let cohort = info.cohort.as_ref().map(|name| {
                *cohort_ids.entry(name).or_insert_with(|| {
                    room.cohorts.push(CohortRoom {
                        name: Arc::clone(name),
                        subtree: vec![0; n],
                        usage: vec![0; n],
                        waiting: vec![0; n],
                    });
                    room.cohorts.len() - 1
                })
            });
            if let Some(c) = cohort {
                let cohort = &mut room.cohorts[c];
                for fr in 0..n {
                    let keep = kept(quota[fr]);
                    let nominal = quota[fr].map_or(0, |q| q.nominal);
                    cohort.subtree[fr] = cohort.subtree[fr].saturating_add(nominal - keep);
                    cohort.usage[fr] =
                        cohort.usage[fr].saturating_add(usage[fr].saturating_sub(keep).max(0));
                }
            }
            let inactive = match &info.stop_policy {
                Some(policy) => Some(format!("its spec.stopPolicy is {policy}")),
                None => info
                    .flavors()
                    .find(|f| !model.flavor_exists(f))
                    .map(|f| format!("ResourceFlavor {f} does not exist")),
            };
            room.queue_ids.insert(&info.name, room.queues.len());
            room.queues.push(QueueRoom {
                info,
                cohort,
                quota,
                usage,
                waiting: vec![0; n],
                claims: vec![0; n],
                inactive,
            });
        }
        room
    }

    /// Holds quota for waiting Workloads (not yet admitted, not a scale-up slice), each whole,
    /// in Kueue's order: first those that fit in their queue's unused nominal quota plus what the
    /// queue's own jobs could give back (`reclaimable(q, fr)`: their workers above min), oldest
    /// first, as Kueue admits a Workload that needs no borrowing ahead of anyone's borrowing and
    /// reclaims lent quota for it (`reclaimWithinCohort`); then those that must borrow, oldest
    /// first, where the cohort's unused quota plus what every member's jobs could give back
    /// covers them (and the queue's borrowing limit allows). A job waiting to start comes before
    /// growth above min, within a queue and across the cohort, as in the pass.
    pub fn hold_for_waiting(
        &mut self,
        model: &QuotaModel,
        reclaimable: impl Fn(QueueId, u32) -> i64,
    ) {
        let mut waiting: Vec<(&super::WorkloadInfo, QueueId, Need, i32)> = model
            .waiting()
            .filter_map(|(cq, w)| {
                let q = self.queue(cq)?;
                let worker = w.worker.as_ref().filter(|s| s.asked > 0)?;
                let need = self.need(q, worker, Vec::new).ok()?;
                Some((w, q, need, worker.asked))
            })
            .collect();
        waiting.sort_by(|(a, ..), (b, ..)| (a.created, &a.name).cmp(&(b.created, &b.name)));
        let mut borrowing = Vec::new();
        for (_, q, need, asked) in waiting {
            if self.fits_nominal(q, &need, asked, &reclaimable) {
                self.hold(q, &need, asked);
            } else {
                borrowing.push((q, need, asked));
            }
        }
        for (q, need, asked) in borrowing {
            if self.fits_cohort(q, &need, asked, &reclaimable) {
                self.hold(q, &need, asked);
            }
        }
    }

    /// Whether `asked` workers of `need` fit in queue `q`'s unused nominal quota (less what is
    /// held) plus what its own jobs could give back.
    fn fits_nominal(
        &self,
        q: QueueId,
        need: &Need,
        asked: i32,
        reclaimable: &impl Fn(QueueId, u32) -> i64,
    ) -> bool {
        need.iter().all(|&(fr, amount)| {
            amount.saturating_mul(i64::from(asked)) <= self.own_room(q, fr, reclaimable)
        })
    }

    /// Queue `q`'s unused nominal quota of flavor-resource `fr`, less what is held, plus what
    /// its own jobs could give back.
    fn own_room(&self, q: QueueId, fr: u32, reclaimable: &impl Fn(QueueId, u32) -> i64) -> i64 {
        let queue = &self.queues[q];
        let f = fr as usize;
        let nominal = queue.quota[f].map_or(0, |q| q.nominal);
        nominal
            .saturating_sub(queue.usage[f])
            .saturating_sub(queue.waiting[f])
            .saturating_add(reclaimable(q, fr))
    }

    /// Whether `asked` workers of `need` fit, by borrowing, in queue `q`'s cohort: its unused
    /// quota (less what is held) plus what every member could lend by giving back its jobs'
    /// workers above min, within `q`'s borrowing limit.
    fn fits_cohort(
        &self,
        q: QueueId,
        need: &Need,
        asked: i32,
        reclaimable: &impl Fn(QueueId, u32) -> i64,
    ) -> bool {
        let queue = &self.queues[q];
        let Some(c) = queue.cohort else {
            return false;
        };
        let cohort = &self.cohorts[c];
        need.iter().all(|&(fr, amount)| {
            let f = fr as usize;
            let asked = amount.saturating_mul(i64::from(asked));
            // What members could give back that the cohort may lend (not what a lending limit
            // keeps).
            let lendable: i64 = (0..self.queues.len())
                .filter(|&o| self.queues[o].cohort == Some(c))
                .map(|o| {
                    let member = &self.queues[o];
                    let lent = member.usage[f].saturating_sub(kept(member.quota[f])).max(0);
                    reclaimable(o, fr).min(lent)
                })
                .fold(0i64, i64::saturating_add);
            let unused = cohort.subtree[f]
                .saturating_sub(cohort.usage[f])
                .saturating_sub(cohort.waiting[f]);
            let within_limit = queue.quota[f]
                .and_then(|quota| quota.borrowing_limit)
                .is_none_or(|limit| {
                    asked <= self.own_room(q, fr, reclaimable).saturating_add(limit)
                });
            within_limit && asked <= unused.saturating_add(lendable)
        })
    }

    /// Holds room for `asked` workers of `need` for a waiting Workload of queue `q`.
    fn hold(&mut self, q: QueueId, need: &Need, asked: i32) {
        for &(fr, amount) in need {
            let f = fr as usize;
            let total = amount.saturating_mul(i64::from(asked));
            let queue = &mut self.queues[q];
            queue.waiting[f] = queue.waiting[f].saturating_add(total);
            if let Some(c) = queue.cohort {
                let cohort = &mut self.cohorts[c];
                cohort.waiting[f] = cohort.waiting[f].saturating_add(total);
            }
        }
    }

    /// Claims each queue's unused nominal quota (after what [`QuotaRoom::hold_for_waiting`]
    /// held) for its own running jobs' growth, `wanted(q, fr)` at most: what a queue lends is
    /// its own again when its jobs want it, so no other queue may keep borrowing it.
    pub fn claim_for_growth(&mut self, wanted: impl Fn(QueueId, u32) -> i64) {
        for q in 0..self.queues.len() {
            for f in 0..self.frs.len() {
                let queue = &self.queues[q];
                let nominal = queue.quota[f].map_or(0, |q| q.nominal);
                let unused = nominal
                    .saturating_sub(queue.usage[f])
                    .saturating_sub(queue.waiting[f])
                    .max(0);
                let claim = unused.min(wanted(q, f as u32).max(0));
                if claim == 0 {
                    continue;
                }
                self.queues[q].claims[f] = claim;
            }
        }
    }

    /// What ClusterQueue `q`'s running jobs may still grow by in flavor-resource `fr`: what it
    /// may take ([`QuotaRoom::available`]) less the unused nominal quota that waiting Workloads
    /// of its cohort (its own included) ask for and that the other queues claim for their own
    /// jobs' growth. Below zero when it borrows quota they need: that much is to be given back.
    pub fn growth(&self, q: QueueId, fr: u32) -> i64 {
        let queue = &self.queues[q];
        let f = fr as usize;
        let held = match queue.cohort {
            Some(c) => {
                let claimed: i64 = self
                    .queues
                    .iter()
                    .enumerate()
                    .filter(|(other, o)| *other != q && o.cohort == Some(c))
                    .map(|(_, o)| o.claim_left(f))
                    .sum();
                self.cohorts[c].waiting[f].saturating_add(claimed)
            }
            None => queue.waiting[f],
        };
        self.available(q, fr).saturating_sub(held)
    }

    /// The most of flavor-resource `fr` ClusterQueue `q` could ever hold: its nominal quota,
    /// with a cohort what the cohort lends plus what its lending limit keeps, at most its
    /// nominal quota plus its borrowing limit.
    pub fn pool(&self, q: QueueId, fr: u32) -> i64 {
        let queue = &self.queues[q];
        let f = fr as usize;
        let quota = queue.quota[f];
        let nominal = quota.map_or(0, |q| q.nominal);
        let Some(c) = queue.cohort else {
            return nominal;
        };
        let cohort = self.cohorts[c].subtree[f].saturating_add(kept(quota));
        match quota.and_then(|q| q.borrowing_limit) {
            Some(limit) => cohort.min(nominal.saturating_add(limit)),
            None => cohort,
        }
    }

    /// Whether ClusterQueue `q` uses more of flavor-resource `fr` than its nominal quota.
    pub fn borrows(&self, q: QueueId, fr: u32) -> bool {
        let queue = &self.queues[q];
        let f = fr as usize;
        queue.usage[f] > queue.quota[f].map_or(0, |q| q.nominal)
    }

    /// Whether ClusterQueue `q` may be made to give back flavor-resource `fr` to others' growth:
    /// it borrows, or its own waiting Workloads hold some.
    fn gives_back(&self, q: QueueId, fr: u32) -> bool {
        self.borrows(q, fr) || self.queues[q].waiting[fr as usize] > 0
    }

    /// Whether ClusterQueue `q`'s jobs must give back flavor-resource `fr` now, and why.
    pub fn owes(&self, q: QueueId, fr: u32) -> Option<Owed> {
        if self.gives_back(q, fr) {
            return (self.growth(q, fr) < 0).then_some(Owed::Borrowed);
        }
        let c = self.queues[q].cohort?;
        let waiting = self.cohorts[c].waiting[fr as usize];
        (waiting > 0 && self.available(q, fr).saturating_sub(waiting) < 0).then_some(Owed::Lent)
    }

    /// Whether any queue's waiting Workloads or growing jobs hold quota (so borrowing may be
    /// reclaimed).
    pub fn holds_for_waiting(&self) -> bool {
        self.queues
            .iter()
            .any(|q| q.waiting.iter().chain(&q.claims).any(|w| *w > 0))
    }

    fn intern(&mut self, flavor: &Arc<str>, resource: &Arc<str>) {
        let next = self.frs.len() as u32;
        let by_resource = self.ids.entry(Arc::clone(flavor)).or_default();
        if !by_resource.contains_key(resource) {
            by_resource.insert(Arc::clone(resource), next);
            self.frs.push((Arc::clone(flavor), Arc::clone(resource)));
        }
    }

    /// The id of `flavor` and `resource`, when some ClusterQueue names them.
    pub fn id(&self, flavor: &str, resource: &str) -> Option<u32> {
        self.ids.get(flavor)?.get(resource).copied()
    }

    /// The ClusterQueue named `name`.
    pub fn queue(&self, name: &str) -> Option<QueueId> {
        self.queue_ids.get(name).copied()
    }

    /// The ClusterQueue at `q`.
    pub fn info(&self, q: QueueId) -> &'m QueueInfo {
        self.queues[q].info
    }

    /// The cohort of the ClusterQueue at `q`, by name.
    pub fn cohort(&self, q: QueueId) -> Option<&Arc<str>> {
        self.queues[q].cohort.map(|c| &self.cohorts[c].name)
    }

    /// The flavor and resource of id `fr`.
    pub fn flavor_resource(&self, fr: u32) -> &FlavorResource {
        &self.frs[fr as usize]
    }

    /// What one more worker takes in ClusterQueue `q`: per resource of `per_pod` (the
    /// admission's per-pod charge, else `fallback`), plus one `pods` when the queue covers pods,
    /// in the flavor admission assigned (else the first flavor of the group covering it). An
    /// error when the queue admits nothing new or covers a requested resource with no quota.
    pub fn need(
        &self,
        q: QueueId,
        worker: &WorkerSet,
        fallback: impl FnOnce() -> PerResource,
    ) -> Result<Need, Stop> {
        let queue = &self.queues[q];
        if let Some(why) = &queue.inactive {
            return Err(Stop::Inactive(why.clone()));
        }
        let mut per_pod = if worker.per_pod.is_empty() {
            fallback()
        } else {
            worker.per_pod.clone()
        };
        if queue.info.covers("pods") && !per_pod.iter().any(|(r, _)| &**r == "pods") {
            per_pod.push((Arc::from("pods"), 1));
        }
        let mut need = Vec::with_capacity(per_pod.len());
        for (resource, amount) in per_pod.into_iter().filter(|(_, a)| *a > 0) {
            let uncovered = |flavor: Option<&Arc<str>>| Stop::Uncovered {
                resource: Arc::clone(&resource),
                flavor: flavor.cloned(),
            };
            let Some(group) = queue.info.group_of(&resource) else {
                return Err(uncovered(None));
            };
            let assigned = worker
                .flavors
                .iter()
                .find(|(r, _)| *r == resource)
                .map(|(_, f)| f);
            let Some(flavor) = assigned.or_else(|| group.flavors.first().map(|(f, _)| f)) else {
                return Err(uncovered(None));
            };
            match self.id(flavor, &resource) {
                Some(fr) if queue.quota[fr as usize].is_some() => need.push((fr, amount)),
                _ => return Err(uncovered(Some(flavor))),
            }
        }
        Ok(need)
    }

    /// How much more of flavor-resource `fr` ClusterQueue `q` may take (below zero when it holds
    /// more than it may).
    pub fn available(&self, q: QueueId, fr: u32) -> i64 {
        let queue = &self.queues[q];
        let f = fr as usize;
        let quota = queue.quota[f];
        let nominal = quota.map_or(0, |q| q.nominal);
        let keep = kept(quota);
        let usage = queue.usage[f];
        let Some(c) = queue.cohort else {
            return nominal.saturating_sub(usage);
        };
        let cohort = &self.cohorts[c];
        let mut from_cohort = cohort.subtree[f].saturating_sub(cohort.usage[f]);
        if let Some(limit) = quota.and_then(|q| q.borrowing_limit) {
            let lent = nominal.saturating_sub(keep);
            let used_there = usage.saturating_sub(keep).max(0);
            from_cohort = from_cohort.min(lent.saturating_sub(used_there).saturating_add(limit));
        }
        keep.saturating_sub(usage)
            .max(0)
            .saturating_add(from_cohort)
    }

    /// How many more workers of `need` ClusterQueue `q` takes, and the flavor-resource that
    /// stops the next one (`None` when `need` is empty: nothing limits it).
    pub fn fit(&self, q: QueueId, need: &Need) -> (i64, Option<u32>) {
        need.iter()
            .map(|&(fr, amount)| ((self.growth(q, fr) / amount).max(0), Some(fr)))
            .min_by_key(|(n, _)| *n)
            .unwrap_or((i64::MAX, None))
    }

    /// Charges `n` workers of `need` to ClusterQueue `q` (beyond what its lending limit keeps,
    /// to its cohort too).
    pub fn take(&mut self, q: QueueId, need: &Need, n: i64) {
        if n > 0 {
            self.shift(q, need, n);
        }
    }

    /// Takes `n` workers of `need` back from ClusterQueue `q` (the reverse of
    /// [`QuotaRoom::take`]).
    pub fn give(&mut self, q: QueueId, need: &Need, n: i64) {
        if n > 0 {
            self.shift(q, need, -n);
        }
    }

    /// Changes ClusterQueue `q`'s usage by `n` workers of `need` (fewer when negative), and its
    /// cohort's by the change in what it uses beyond what its lending limit keeps.
    fn shift(&mut self, q: QueueId, need: &Need, n: i64) {
        for &(fr, amount) in need {
            let f = fr as usize;
            let queue = &mut self.queues[q];
            let keep = kept(queue.quota[f]);
            let beyond_keep_before = queue.usage[f].saturating_sub(keep).max(0);
            queue.usage[f] = queue.usage[f].saturating_add(amount.saturating_mul(n));
            let beyond_keep_after = queue.usage[f].saturating_sub(keep).max(0);
            if let Some(c) = queue.cohort {
                let cohort = &mut self.cohorts[c];
                cohort.usage[f] = cohort.usage[f]
                    .saturating_add(beyond_keep_after.saturating_sub(beyond_keep_before));
            }
        }
    }

    /// Quota, usage and room of flavor-resource `fr` in ClusterQueue `q`.
    pub fn standing(&self, q: QueueId, fr: u32) -> Standing {
        let queue = &self.queues[q];
        Standing {
            nominal: queue.quota[fr as usize].map_or(0, |q| q.nominal),
            used: queue.usage[fr as usize],
            available: self.available(q, fr),
        }
    }

    /// The first ClusterQueue and flavor-resource it holds more of than it may, if any.
    pub fn overdrawn(&self) -> Option<(QueueId, u32)> {
        (0..self.queues.len()).find_map(|q| {
            (0..self.frs.len() as u32)
                .find(|&fr| {
                    self.queues[q].quota[fr as usize].is_some() && self.available(q, fr) < 0
                })
                .map(|fr| (q, fr))
        })
    }
}
