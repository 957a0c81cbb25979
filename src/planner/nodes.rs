//! The free-resources index the planner places trainers with: best fit over CPU, memory and GPU,
//! within each node's free pod slots and free other resources (`rdma/hca`, `hugepages-2Mi`…).
//!
//! The room and pod slots of pods being deleted count as free here: they come free once those
//! pods are gone (seconds, within their grace period), and sizes decided on them last far
//! longer. A job shrunk for another's share is thus not shrunk again while its removed trainers
//! stop, nor a gang refused for room about to be free; the scheduler role binds into such room
//! only once it is free (it waits for room coming free). Their other resources still count as
//! taken until they are gone.

use std::collections::{HashMap, HashSet};

use foldhash::fast::RandomState;

use super::sorted_blocks::{Cursor, SortedBlocks};
use crate::api::Resources;
use crate::cluster::filters::{Eligibility, Extended, PodClassId};
use crate::cluster::{ClusterState, NodeId};

/// A trainer shape and the class of nodes it may go to: trainers of one shape are placed alike.
pub type Shape = (Resources, Option<PodClassId>);

/// How many fitting nodes a search looks at for one that strands nothing before taking the tightest.
const GOOD_FIT_SCAN: usize = 32;

/// Most trainer classes given a search set of their own (one bit each in [`NodeIndex::member`]):
/// a node's update moves its entry in each of its classes' sets too, so this bounds that work.
const CLASS_SETS: usize = 16;

/// Which set a trainer class's searches walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClassSearch {
    /// Not searched for yet.
    Unknown,
    /// The shared set, skipping nodes the class may not use.
    Shared,
    /// Its own set: [`NodeIndex::class_sets`]`[n]`.
    Own(usize),
}

/// Buffers for [`NodeIndex::fill`]'s batched set updates.
#[derive(Debug, Clone, Default)]
struct Batch {
    /// Entries out of and into the shared set.
    out: Vec<u128>,
    into: Vec<u128>,
    /// The part of `out` and `into` in one class set.
    class_out: Vec<u128>,
    class_into: Vec<u128>,
}

/// A node's free room and pod slots as [`NodeIndex`] keeps them, side by side (an update reads
/// and writes both).
#[derive(Debug, Clone, Copy, Default)]
struct Room {
    free: Resources,
    /// Free pod slots; below zero on a node holding more pods than its limit.
    slots: i32,
    /// A schedulable node's: the index holds nothing for other ids.
    schedulable: bool,
}

impl Room {
    /// `slots` moved by `n`, within the field.
    fn add_slots(&mut self, n: i64) {
        self.slots = clamp_slots(i64::from(self.slots).saturating_add(n));
    }
}

/// A count of pod slots as [`Room::slots`] holds it.
fn clamp_slots(n: i64) -> i32 {
    n.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

/// Schedulable nodes by free resources; placements and releases update it in O(log n).
///
/// Besides CPU, memory and GPU, a node takes only as many pods as it has free pod slots, and
/// only as many pods requesting another resource as its free amount of it holds: a node without
/// a free slot leaves the search sets; one without room in another resource is passed over by
/// the searches that request it.
#[derive(Debug, Clone)]
pub struct NodeIndex<'s> {
    /// The state the index was built from (pod limits, other resources bound pods request).
    state: &'s ClusterState,
    /// Which nodes each trainer class may use (kube-scheduler's static filters).
    eligibility: &'s Eligibility,
    /// Free resources and pod slots by node id, once the pods being deleted are gone
    /// ([`crate::cluster::NodeSlot::free_after_terminating`]).
    rooms: Vec<Room>,
    /// Other resources taken (positive) or given back (negative) since the index was built, by
    /// node and resource name.
    extended_taken: HashMap<(NodeId, &'s str), i64, RandomState>,
    /// Position of each node id in name order (the deterministic tie-break).
    rank: Vec<u32>,
    /// Node ids by rank.
    by_rank: Vec<NodeId>,
    /// How many nodes are schedulable (fixed for the index's life).
    schedulable_count: usize,
    /// Every schedulable node's (free GPU, free CPU, free memory, rank), packed by [`entry`],
    /// unless its free room is below [`NodeIndex::floor`] somewhere or it has no free pod slot.
    set: SortedBlocks,
    /// The smallest need searched for, per resource: a node with less free room in some
    /// resource fits no trainer and stays out of `set` (no index update, nothing to scan past).
    floor: Resources,
    /// Nodes given room back since [`NodeIndex::take_grown`] was last called.
    grown: Vec<NodeId>,
    /// Buffers for [`NodeIndex::fill`]'s batched set updates.
    batch: Batch,
    /// Searches that found no node since room was last given back: free room only shrinks
    /// meanwhile, so they would fail again. A class confined to full nodes would otherwise scan
    /// past every node with room it may not use, search after search.
    failed: HashSet<(Resources, Option<PodClassId>), RandomState>,
    /// How each trainer class's searches go, by class id, decided on its first search.
    search: Vec<ClassSearch>,
    /// For each class searched for that may use fewer than half the nodes (by
    /// [`NodeIndex::allowed_count`]), up to [`CLASS_SETS`]: the entries of `set` whose nodes it
    /// may use, so its searches do not pass over the nodes it may not (a zone's class over three
    /// nodes in four). A class kept off only a few nodes scans `set`: a set of its own would give
    /// most updates a second move (measured: steady constrained L pass slower, cold barely faster).
    class_sets: Vec<SortedBlocks>,
    /// Per node id, bit `n` set when the node is eligible for the class of `class_sets[n]`:
    /// the sets its updates touch besides `set`.
    member: Vec<u64>,
}

impl<'s> NodeIndex<'s> {
    /// Indexes the schedulable nodes of a state by their free resources.
    pub fn new(state: &'s ClusterState) -> Self {
        let unbounded = Resources::new(i64::MIN, i64::MIN, i64::MIN);
        Self::with_floor(state, unbounded)
    }

    /// [`NodeIndex::new`] for placing trainers of these shapes only: nodes that cannot host the
    /// smallest of them in some resource are left out of the search (searches for smaller needs
    /// would miss them).
    pub fn for_shapes(state: &'s ClusterState, shapes: impl Iterator<Item = Resources>) -> Self {
        let floor = shapes.reduce(|a, b| {
            Resources::new(
                a.cpu_milli.min(b.cpu_milli),
                a.memory.min(b.memory),
                a.gpu.min(b.gpu),
            )
        });
        Self::with_floor(state, floor.unwrap_or(Resources::ZERO))
    }

    fn with_floor(state: &'s ClusterState, floor: Resources) -> Self {
        let bound = state.node_id_bound();
        let mut index = NodeIndex {
            state,
            eligibility: state.eligibility(),
            rooms: vec![Room::default(); bound],
            extended_taken: HashMap::default(),
            rank: vec![u32::MAX; bound],
            by_rank: Vec::with_capacity(bound),
            schedulable_count: 0,
            set: SortedBlocks::default(),
            floor,
            grown: Vec::new(),
            batch: Batch::default(),
            failed: HashSet::default(),
            search: Vec::new(),
            class_sets: Vec::new(),
            member: vec![0; bound],
        };
        let mut entries = Vec::with_capacity(bound);
        for (id, slot) in state.nodes() {
            let rank = index.by_rank.len() as u32;
            index.by_rank.push(id);
            index.rank[id as usize] = rank;
            if slot.schedulable() {
                index.schedulable_count += 1;
                let free = slot.free_after_terminating();
                let slots = slot.free_pods_after_terminating();
                index.rooms[id as usize] = Room {
                    free,
                    slots: clamp_slots(slots),
                    schedulable: true,
                };
                if index.searchable(free, slots) {
                    entries.push(entry(free, rank));
                }
            }
        }
        // Sorted input lets the set be built in bulk.
        entries.sort_unstable();
        index.set = SortedBlocks::from_sorted(&entries);
        index
    }

    /// Whether a node with this free room and these free pod slots is in the search sets.
    fn searchable(&self, free: Resources, slots: i64) -> bool {
        searchable(self.floor, free, slots)
    }

    /// Whether trainers of `class` may go to node `id` (`None` takes every node).
    pub fn allowed(&self, class: Option<PodClassId>, id: NodeId) -> bool {
        class.is_none_or(|c| self.eligibility.eligible(c, id))
    }

    /// How many nodes trainers of `class` may use (`None`: every node id).
    pub fn allowed_count(&self, class: Option<PodClassId>) -> usize {
        class.map_or(self.rooms.len(), |c| self.eligibility.eligible_count(c))
    }

    /// Free resources of a schedulable node.
    pub fn free(&self, id: NodeId) -> Option<Resources> {
        self.rooms
            .get(id as usize)
            .filter(|r| r.schedulable)
            .map(|r| r.free)
    }

    /// Free pod slots of a schedulable node (0 for other ids; below 0 on a node holding more
    /// pods than its limit).
    pub fn slots(&self, id: NodeId) -> i64 {
        self.rooms
            .get(id as usize)
            .map_or(0, |r| i64::from(r.slots))
    }

    /// The other resources each trainer of `class` requests; `None` when it requests none.
    pub fn extended_of(&self, class: Option<PodClassId>) -> Option<&'s Extended> {
        let eligibility = self.eligibility;
        class
            .and_then(|c| eligibility.constraints(c))
            .map(|c| &c.extended)
            .filter(|e| !e.is_empty())
    }

    /// How much of other resource `name` node `id` has free now.
    fn extended_room(&self, id: NodeId, name: &'s str) -> i64 {
        let taken = self.extended_taken.get(&(id, name)).copied().unwrap_or(0);
        self.state.free_extended(id, name).saturating_sub(taken)
    }

    /// How many pods requesting `extended` each the free other resources of node `id` hold.
    fn extended_count(&self, id: NodeId, extended: &'s Extended) -> i64 {
        extended
            .iter()
            .filter(|(_, amount)| **amount > 0)
            .map(|(name, amount)| (self.extended_room(id, name) / amount).max(0))
            .min()
            .unwrap_or(i64::MAX)
    }

    /// How many trainers of `need` and `class` node `id` takes now (see [`NodeIndex::fits`]);
    /// whether the class may use the node is not checked.
    #[cfg(test)]
    pub fn fit_count(&self, id: NodeId, need: Resources, class: Option<PodClassId>) -> i64 {
        let Some(free) = self.free(id) else {
            return 0;
        };
        if !need.fits_in(&free) {
            return 0;
        }
        let mut n = need.fit_count(&free).min(self.slots(id));
        if let Some(extended) = self.extended_of(class) {
            n = n.min(self.extended_count(id, extended));
        }
        n.max(0)
    }

    /// Whether one more trainer of `need` and `class` fits node `id`: its free room, a free pod
    /// slot, and the other resources the class requests. Whether the class may use the node is
    /// not checked ([`NodeIndex::allowed`]).
    #[inline]
    pub fn fits(&self, id: NodeId, need: Resources, class: Option<PodClassId>) -> bool {
        self.free(id).is_some_and(|free| need.fits_in(&free))
            && self.slots(id) > 0
            && self
                .extended_of(class)
                .is_none_or(|extended| self.extended_count(id, extended) > 0)
    }

    /// [`NodeIndex::fits`] once `m` trainers of `give` and class `give_class` have left node
    /// `id` (their room, pod slots and other resources back).
    #[inline]
    pub fn fits_after(
        &self,
        id: NodeId,
        (need, class): (Resources, Option<PodClassId>),
        (give, give_class): (Resources, Option<PodClassId>),
        m: i64,
    ) -> bool {
        let Some(free) = self.free(id) else {
            return false;
        };
        if !need.fits_in(&(free + give.times(m))) || self.slots(id).saturating_add(m) < 1 {
            return false;
        }
        match self.extended_of(class) {
            None => true,
            Some(extended) => self.extended_fits_after(id, extended, give_class, m),
        }
    }

    /// Whether node `id` has `extended` free once `m` trainers of `give_class` have left it.
    fn extended_fits_after(
        &self,
        id: NodeId,
        extended: &'s Extended,
        give_class: Option<PodClassId>,
        m: i64,
    ) -> bool {
        let given = self.extended_of(give_class);
        extended.iter().all(|(name, amount)| {
            let back = given
                .and_then(|g| g.get(name))
                .map_or(0, |a| a.saturating_mul(m));
            self.extended_room(id, name).saturating_add(back) >= *amount
        })
    }

    /// Schedulable nodes whose free resources are below zero somewhere, in name order.
    pub fn overloaded(&self) -> Vec<NodeId> {
        self.by_rank
            .iter()
            .copied()
            .filter(|id| self.free(*id).is_some_and(|f| f.any_negative()))
            .collect()
    }

    /// The free room of all schedulable nodes together, counting no node below zero.
    pub fn total_free(&self) -> Resources {
        let free = self.rooms.iter().filter(|r| r.schedulable).map(|r| &r.free);
        free.fold(Resources::ZERO, |acc, f| {
            acc + Resources::new(f.cpu_milli.max(0), f.memory.max(0), f.gpu.max(0))
        })
    }

    /// How many nodes are schedulable (the length of [`NodeIndex::schedulable`]).
    pub fn schedulable_count(&self) -> usize {
        self.schedulable_count
    }

    /// Schedulable nodes and their free room, in name order.
    pub fn schedulable(&self) -> Vec<(NodeId, Resources)> {
        let mut nodes = Vec::with_capacity(self.by_rank.len());
        nodes.extend(
            self.by_rank
                .iter()
                .filter_map(|id| self.free(*id).map(|f| (*id, f))),
        );
        nodes
    }

    /// Name-order rank of a node (smaller sorts first).
    pub fn rank(&self, id: NodeId) -> u32 {
        self.rank.get(id as usize).copied().unwrap_or(u32::MAX)
    }

    /// Takes the room of `n` trainers of `need` and `class` on node `id`: their resources, pod
    /// slots and other resources.
    pub fn take(&mut self, id: NodeId, need: Resources, class: Option<PodClassId>, n: i64) {
        let extended = self.extended_of(class);
        self.change(id, need, extended, -n);
    }

    /// Gives back the room of `n` trainers of `need` and `class` on node `id`.
    pub fn give(&mut self, id: NodeId, need: Resources, class: Option<PodClassId>, n: i64) {
        let extended = self.extended_of(class);
        self.change(id, need, extended, n);
    }

    /// Takes the room of one pod of `need` requesting `extended` (of no trainer class) on node
    /// `id`.
    pub fn take_pod(&mut self, id: NodeId, need: Resources, extended: Option<&'s Extended>) {
        self.change(id, need, extended, -1);
    }

    /// Gives back (`n > 0`) or takes (`n < 0`) the room of `|n|` pods of `need` requesting
    /// `extended` each on node `id`.
    fn change(&mut self, id: NodeId, need: Resources, extended: Option<&'s Extended>, n: i64) {
        if n == 0 {
            return;
        }
        if let Some(extended) = extended {
            for (name, amount) in extended {
                let taken = self.extended_taken.entry((id, name.as_str())).or_insert(0);
                *taken = taken.saturating_sub(amount.saturating_mul(n));
            }
        }
        let rank = self.rank(id);
        let floor = self.floor;
        let member = self.member.get(id as usize).copied().unwrap_or(0);
        if let Some(room) = self.rooms.get_mut(id as usize).filter(|r| r.schedulable) {
            let old = searchable(floor, room.free, room.slots).then(|| entry(room.free, rank));
            room.free += need.times(n);
            room.add_slots(n);
            let new = searchable(floor, room.free, room.slots).then(|| entry(room.free, rank));
            let moved = |set: &mut SortedBlocks| {
                if let Some(old) = old {
                    set.remove(old);
                }
                if let Some(new) = new {
                    set.insert(new);
                }
            };
            moved(&mut self.set);
            for (n, set) in self.class_sets.iter_mut().enumerate() {
                if member >> n & 1 == 1 {
                    moved(set);
                }
            }
            if n > 0 {
                self.grown.push(id);
                self.failed.clear();
            }
        }
    }

    /// Decides on the first search for `class` which set its searches walk: a class kept off any
    /// node (a selector, an affinity, a taint it does not tolerate) gets its own set of the
    /// entries of the nodes it may use, while there are fewer than [`CLASS_SETS`].
    fn prepare(&mut self, class: Option<PodClassId>) {
        let Some(class) = class else { return };
        let slot = class as usize;
        if self.search.len() <= slot {
            self.search.resize(slot + 1, ClassSearch::Unknown);
        }
        if self.search[slot] != ClassSearch::Unknown {
            return;
        }
        // Kept off any node: a shared scan would walk past those nodes' entries on every search.
        let kept_off = self.eligibility.eligible_count(class) < self.allowed_count(None);
        if !kept_off || self.class_sets.len() >= CLASS_SETS {
            self.search[slot] = ClassSearch::Shared;
            return;
        }
        let n = self.class_sets.len();
        let eligibility = self.eligibility;
        let mut entries = Vec::new();
        for id in eligibility.eligible_nodes(class) {
            let Some(member) = self.member.get_mut(id as usize) else {
                continue;
            };
            *member |= 1 << n;
            if let Some(free) = self.free(id)
                && self.searchable(free, self.slots(id))
            {
                entries.push(entry(free, self.rank(id)));
            }
        }
        entries.sort_unstable();
        self.class_sets.push(SortedBlocks::from_sorted(&entries));
        self.search[slot] = ClassSearch::Own(n);
    }

    /// The set a search for `class` walks, and the class whose nodes it must still filter by
    /// (`None` when the set holds only nodes the class may use).
    fn search_set(&self, class: Option<PodClassId>) -> (&SortedBlocks, Option<PodClassId>) {
        let own = class.and_then(|c| match self.search.get(c as usize) {
            Some(ClassSearch::Own(n)) => self.class_sets.get(*n),
            _ => None,
        });
        match own {
            Some(set) => (set, None),
            None => (&self.set, class),
        }
    }

    /// Gives back what [`NodeIndex::fill`] calls took (`(node, shape, trainers)`, in the order
    /// taken), as if they had not run: the nodes are not recorded as grown.
    pub fn undo_fills(&mut self, taken: &[(NodeId, Shape, i64)]) {
        let grown = self.grown.len();
        for &(node, (need, class), n) in taken.iter().rev() {
            self.give(node, need, class, n);
        }
        self.grown.truncate(grown);
    }

    /// Whether any node was given room back since [`NodeIndex::take_grown`] was last called.
    pub fn has_grown(&self) -> bool {
        !self.grown.is_empty()
    }

    /// The nodes given room back since the last call, each once, in id order.
    pub fn take_grown(&mut self) -> Vec<NodeId> {
        let mut grown = std::mem::take(&mut self.grown);
        grown.sort_unstable();
        grown.dedup();
        grown
    }

    /// [`NodeIndex::best_fit`] on every node but `except`.
    #[cfg(test)]
    pub fn best_fit_except(&mut self, need: Resources, except: NodeId) -> Option<NodeId> {
        let Some(free) = self.free(except) else {
            return self.best_fit(need, None);
        };
        if !self.searchable(free, self.slots(except)) {
            return self.best_fit(need, None);
        }
        let held = entry(free, self.rank(except));
        self.set.remove(held);
        let found = self.best_fit(need, None);
        self.set.insert(held);
        found
    }

    /// The best node for one trainer of `need`, if any node fits it.
    ///
    /// GPU trainers go to the node with the fewest free GPUs that fits, preferring one left either
    /// with no free GPU or with room for another such trainer (so no GPU is stranded); CPU-only
    /// trainers go first to nodes without free GPUs. Ties go to the tightest CPU fit, then name.
    /// Only nodes `class` may use, with a free pod slot and the other resources the class
    /// requests, are considered.
    pub fn best_fit(&mut self, need: Resources, class: Option<PodClassId>) -> Option<NodeId> {
        if self.failed.contains(&(need, class)) {
            return None;
        }
        self.prepare(class);
        let extended = self.extended_of(class);
        let found = BestFits::new(self, need, class, extended).next();
        if found.is_none() {
            self.failed.insert((need, class));
        }
        found
    }

    /// [`NodeIndex::best_fit`] for one pod of no trainer class (every schedulable node may take
    /// it) requesting `extended` besides `need`.
    pub fn best_fit_pod(
        &mut self,
        need: Resources,
        extended: Option<&'s Extended>,
    ) -> Option<NodeId> {
        match extended.filter(|e| !e.is_empty()) {
            None => self.best_fit(need, None),
            Some(extended) => BestFits::new(self, need, None, Some(extended)).next(),
        }
    }

    /// Places up to `count` trainers of `need` exactly as repeated [`NodeIndex::best_fit`] calls
    /// would, each chosen node taking as many as fit there (its room, pod slots and other
    /// resources; or as are left): appends the chunks
    /// `(node, trainers)` in order and returns how many trainers were placed (fewer than `count`
    /// when no node fits another).
    ///
    /// One scan serves the whole batch: a node filled to the brim no longer fits and its new
    /// entry sorts below the scan, so the next best fit is further along the same scan.
    pub fn fill(
        &mut self,
        need: Resources,
        class: Option<PodClassId>,
        count: i64,
        chunks: &mut Vec<(NodeId, i64)>,
    ) -> i64 {
        let first = chunks.len();
        let mut left = count;
        if count > 0 && self.failed.contains(&(need, class)) {
            return 0;
        }
        self.prepare(class);
        let extended = self.extended_of(class);
        let mut fits = BestFits::new(self, need, class, extended);
        while left > 0 {
            let Some(node) = fits.next() else { break };
            // The scan found the need fits: as many as the room, slots and other resources take.
            let room = self.rooms.get(node as usize).copied().unwrap_or_default();
            let mut n = need.fit_count(&room.free).min(i64::from(room.slots));
            if let Some(extended) = extended {
                n = n.min(self.extended_count(node, extended));
            }
            let n = n.min(left).max(1);
            chunks.push((node, n));
            left -= n;
        }
        // The filled nodes leave their places in the set and take new ones, as two sorted
        // batches: the nodes of one scan sit side by side in the set, and one pass over their
        // blocks costs less than a search and a move per node.
        let mut batch = std::mem::take(&mut self.batch);
        batch.out.clear();
        batch.into.clear();
        let floor = self.floor;
        let mut members = 0;
        for &(node, n) in &chunks[first..] {
            let rank = self.rank(node);
            members |= self.member.get(node as usize).copied().unwrap_or(0);
            if let Some(room) = self.rooms.get_mut(node as usize).filter(|r| r.schedulable) {
                if searchable(floor, room.free, room.slots) {
                    batch.out.push(entry(room.free, rank));
                }
                room.free -= need.times(n);
                room.add_slots(-n);
                if searchable(floor, room.free, room.slots) {
                    batch.into.push(entry(room.free, rank));
                }
            }
            if let Some(extended) = extended {
                for (name, amount) in extended {
                    let taken = self
                        .extended_taken
                        .entry((node, name.as_str()))
                        .or_insert(0);
                    *taken = taken.saturating_add(amount.saturating_mul(n));
                }
            }
        }
        batch.out.sort_unstable();
        batch.into.sort_unstable();
        self.set.remove_sorted(&batch.out);
        self.set.insert_sorted(&batch.into);
        // The class sets holding some of the nodes take the same moves, theirs filtered out.
        for (n, set) in self.class_sets.iter_mut().enumerate() {
            if members >> n & 1 == 0 {
                continue;
            }
            let mine = |key: &&u128| {
                let id = self.by_rank.get(rank_of(**key) as usize);
                id.and_then(|id| self.member.get(*id as usize))
                    .is_some_and(|m| m >> n & 1 == 1)
            };
            batch.class_out.clear();
            batch.class_out.extend(batch.out.iter().filter(mine));
            batch.class_into.clear();
            batch.class_into.extend(batch.into.iter().filter(mine));
            set.remove_sorted(&batch.class_out);
            set.insert_sorted(&batch.class_into);
        }
        self.batch = batch;
        // Trainers were left over: every node returned is full for this need, and no other fits.
        if left > 0 {
            self.failed.insert((need, class));
        }
        count - left
    }
}

/// The successive best fits for trainers of one need, each node assumed filled (so it no longer
/// fits) once returned: the first is [`NodeIndex::best_fit`], each next one what `best_fit`
/// returns after the previous node was filled.
struct BestFits<'a> {
    index: &'a NodeIndex<'a>,
    need: Resources,
    /// The trainer class whose nodes the scan keeps, skipping the others (`None`: every node
    /// of the set it walks).
    filter: Option<PodClassId>,
    /// The other resources each pod requests: nodes without that much free are skipped.
    extended: Option<&'a Extended>,
    bounds: Option<NeedBounds>,
    /// GPU level the cursor is on.
    level: i64,
    cursor: Cursor<'a>,
    /// Fitting nodes passed over because a trainer there would strand GPUs, in scan order (a
    /// ring of at most [`GOOD_FIT_SCAN`]).
    stranding: [NodeId; GOOD_FIT_SCAN],
    stranding_head: usize,
    stranding_len: usize,
}

impl<'a> BestFits<'a> {
    fn new(
        index: &'a NodeIndex<'a>,
        need: Resources,
        class: Option<PodClassId>,
        extended: Option<&'a Extended>,
    ) -> Self {
        debug_assert!(index.floor.fits_in(&need), "search below the index floor");
        let level = need.gpu.max(0);
        let (set, filter) = index.search_set(class);
        BestFits {
            index,
            need,
            filter,
            extended,
            bounds: NeedBounds::of(need),
            level,
            cursor: set.cursor(pack(level, need.cpu_milli, i64::MIN, 0)),
            stranding: [0; GOOD_FIT_SCAN],
            stranding_head: 0,
            stranding_len: 0,
        }
    }

    /// Whether the node of an entry at GPU level `level` fits the need, and if so whether it is
    /// then left with no free GPU or with room for another such trainer.
    fn judge(&self, packed: u128, level: i64) -> Option<bool> {
        match &self.bounds {
            Some(bounds) => bounds.judge(packed, level),
            // A clamped key is only an order; the fit is checked on the exact free room.
            None => {
                let free = self
                    .index
                    .free(self.index.by_rank[rank_of(packed) as usize])?;
                if !self.need.fits_in(&free) {
                    return None;
                }
                let left = free - self.need;
                Some(left.gpu == 0 || self.need.gpu == 0 || self.need.fits_in(&left))
            }
        }
    }

    /// The oldest passed-over stranding node, taken out of the ring.
    fn take_stranding(&mut self) -> Option<NodeId> {
        if self.stranding_len == 0 {
            return None;
        }
        let id = self.stranding[self.stranding_head];
        self.stranding_head = (self.stranding_head + 1) % GOOD_FIT_SCAN;
        self.stranding_len -= 1;
        Some(id)
    }
}

impl Iterator for BestFits<'_> {
    type Item = NodeId;

    /// The first node that strands nothing before [`GOOD_FIT_SCAN`] stranding fits were seen,
    /// else the first stranding fit. Nodes returned earlier are not looked at again.
    fn next(&mut self) -> Option<NodeId> {
        while self.stranding_len < GOOD_FIT_SCAN {
            let Some(packed) = self.cursor.next() else {
                break;
            };
            let gpu = gpu_of(packed);
            if gpu != self.level {
                self.level = gpu;
                self.cursor
                    .seek(pack(gpu, self.need.cpu_milli, i64::MIN, 0));
                continue;
            }
            let Some(strands_nothing) = self.judge(packed, gpu) else {
                continue;
            };
            let id = self.index.by_rank[rank_of(packed) as usize];
            if !self.index.allowed(self.filter, id) {
                continue;
            }
            if let Some(extended) = self.extended
                && self.index.extended_count(id, extended) < 1
            {
                continue;
            }
            if strands_nothing {
                return Some(id);
            }
            let slot = (self.stranding_head + self.stranding_len) % GOOD_FIT_SCAN;
            self.stranding[slot] = id;
            self.stranding_len += 1;
        }
        self.take_stranding()
    }
}

/// A trainer's need as packed field values, so a scan judges a node from its index entry alone.
struct NeedBounds {
    /// The need's memory and GPU, and the CPU, memory and GPU of two such trainers.
    memory: u128,
    gpu: i64,
    twice: (u128, u128, i64),
}

impl NeedBounds {
    /// `None` when the need or twice it reaches a clamped field value (where a key only orders).
    fn of(need: Resources) -> Option<Self> {
        let exact = |value: i64, bits: u32| {
            let half = 1i64 << (bits - 1);
            let twice = value.checked_mul(2)?;
            (value > -half && twice > -half && value < half - 1 && twice < half - 1)
                .then(|| (field(value, bits), field(twice, bits)))
        };
        let (_, cpu_twice) = exact(need.cpu_milli, CPU_BITS)?;
        let (memory, memory_twice) = exact(need.memory, MEMORY_BITS)?;
        exact(need.gpu, GPU_BITS)?;
        Some(NeedBounds {
            memory,
            gpu: need.gpu,
            twice: (cpu_twice, memory_twice, need.gpu * 2),
        })
    }

    /// For an entry at GPU level `level` whose CPU is at least the need's (the scan starts
    /// there): `None` if the need does not fit, else whether the fit strands no GPU.
    fn judge(&self, packed: u128, level: i64) -> Option<bool> {
        let memory = memory_field(packed);
        if memory < self.memory {
            return None;
        }
        let (cpu_twice, memory_twice, gpu_twice) = self.twice;
        Some(
            self.gpu == 0
                || level == self.gpu
                || (cpu_field(packed) >= cpu_twice && memory >= memory_twice && level >= gpu_twice),
        )
    }
}

/// Whether a node with `free` room and `slots` free pod slots is in the search sets: it has a
/// pod slot and at least `floor` free.
fn searchable(floor: Resources, free: Resources, slots: impl Into<i64>) -> bool {
    let slots: i64 = slots.into();
    slots > 0 && floor.fits_in(&free)
}

/// A node's place in the index: free GPU, CPU, memory and name rank, packed into one integer
/// that orders like the tuple (cheaper to compare and store). Values beyond the field widths
/// (more than 127 free GPUs, 2,147 free cores or 32 PiB) are clamped, so such nodes only lose
/// their best-fit order among themselves; fits are always checked on the exact free room.
fn entry(free: Resources, rank: u32) -> u128 {
    pack(free.gpu, free.cpu_milli, free.memory, rank)
}

const GPU_BITS: u32 = 8;
const CPU_BITS: u32 = 32;
const MEMORY_BITS: u32 = 56;
const RANK_BITS: u32 = 32;
const _: () = assert!(GPU_BITS + CPU_BITS + MEMORY_BITS + RANK_BITS == 128);

/// `value` clamped to a signed field of `bits` bits and offset to be unsigned.
fn field(value: i64, bits: u32) -> u128 {
    let half = 1i64 << (bits - 1);
    (value.clamp(-half, half - 1) + half) as u128
}

fn pack(gpu: i64, cpu_milli: i64, memory: i64, rank: u32) -> u128 {
    (field(gpu, GPU_BITS) << (CPU_BITS + MEMORY_BITS + RANK_BITS))
        | (field(cpu_milli, CPU_BITS) << (MEMORY_BITS + RANK_BITS))
        | (field(memory, MEMORY_BITS) << RANK_BITS)
        | u128::from(rank)
}

/// The (clamped) free GPU of a packed entry.
fn gpu_of(packed: u128) -> i64 {
    (packed >> (CPU_BITS + MEMORY_BITS + RANK_BITS)) as i64 - (1i64 << (GPU_BITS - 1))
}

/// The (offset, clamped) free CPU field of a packed entry.
fn cpu_field(packed: u128) -> u128 {
    (packed >> (MEMORY_BITS + RANK_BITS)) & ((1 << CPU_BITS) - 1)
}

/// The (offset, clamped) free memory field of a packed entry.
fn memory_field(packed: u128) -> u128 {
    (packed >> RANK_BITS) & ((1 << MEMORY_BITS) - 1)
}

fn rank_of(packed: u128) -> u32 {
    packed as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NodeInfo;
    use proptest::prelude::*;

    proptest! {
        /// Packed entries order like the tuples they pack within the field widths.
        #[test]
        fn packed_entries_order_like_tuples(
            a in (-128i64..128, -(1i64 << 31)..(1i64 << 31), -(1i64 << 55)..(1i64 << 55), any::<u32>()),
            b in (-128i64..128, -(1i64 << 31)..(1i64 << 31), -(1i64 << 55)..(1i64 << 55), any::<u32>()),
        ) {
            let (pa, pb) = (pack(a.0, a.1, a.2, a.3), pack(b.0, b.1, b.2, b.3));
            prop_assert_eq!(a.cmp(&b), pa.cmp(&pb));
            prop_assert_eq!((gpu_of(pa), rank_of(pa)), (a.0, a.3));
        }

        /// Judging a node from its packed entry agrees with judging its exact free room, for
        /// every entry a scan for the need reaches (at or above the need's CPU and GPU), free
        /// room beyond the field widths included.
        #[test]
        fn packed_judgement_agrees_with_exact_room(
            need in (0i64..100_000, 0i64..(1 << 40), 0i64..70),
            free in (-(1i64 << 33)..(1i64 << 33), -(1i64 << 57)..(1i64 << 57), -10i64..300),
        ) {
            let need = Resources::new(need.0, need.1, need.2);
            let free = Resources::new(free.0, free.1, free.2);
            let packed = entry(free, 0);
            let reached = gpu_of(packed) >= need.gpu
                && packed >= pack(gpu_of(packed), need.cpu_milli, i64::MIN, 0);
            prop_assume!(reached);
            let exact = need.fits_in(&free).then(|| {
                let left = free - need;
                left.gpu == 0 || need.gpu == 0 || need.fits_in(&left)
            });
            if let Some(bounds) = NeedBounds::of(need) {
                prop_assert_eq!(bounds.judge(packed, gpu_of(packed)), exact);
            }
        }
    }

    proptest! {
        /// One `fill` gives exactly the chunks of repeated best fits, each node filled as far as
        /// it takes, and leaves the same free room behind; GPU nodes that would strand GPUs and
        /// more stranding fits than one scan looks at included.
        #[test]
        fn fill_matches_repeated_best_fits(
            nodes in proptest::collection::vec((1i64..16, 1i64..16, 0i64..5), 1..80),
            need in (1i64..6, 1i64..6, 0i64..3),
            count in 0i64..120,
        ) {
            let s = state_of_sizes(&nodes);
            let need = Resources::new(need.0 * 1000, need.1 << 30, need.2);
            fill_matches(&s, need, count)?;
        }
    }

    proptest! {
        /// Leaving out nodes below the floor of the shapes searched changes no search: fills of
        /// those shapes, with room given back between them, pick the same nodes as a full index.
        #[test]
        fn floor_changes_no_search(
            nodes in proptest::collection::vec((0i64..16, 0i64..16, 0i64..5), 1..60),
            shapes in proptest::collection::vec((1i64..6, 1i64..6, 0i64..3), 1..4),
            ops in proptest::collection::vec((0usize..4, 0i64..30, any::<bool>()), 1..12),
        ) {
            let s = state_of_sizes(&nodes);
            let shapes: Vec<Resources> = shapes
                .iter()
                .map(|(cpu, memory, gpu)| Resources::new(cpu * 1000, memory << 30, *gpu))
                .collect();
            let mut full = NodeIndex::new(&s);
            let mut floored = NodeIndex::for_shapes(&s, shapes.iter().copied());
            for (pick, count, give_back) in ops {
                let need = shapes[pick % shapes.len()];
                let (mut a, mut b) = (Vec::new(), Vec::new());
                prop_assert_eq!(full.fill(need, None, count, &mut a), floored.fill(need, None, count, &mut b));
                prop_assert_eq!(&a, &b);
                if give_back && let Some(&(node, n)) = a.first() {
                    full.give(node, need, None, n);
                    floored.give(node, need, None, n);
                }
                for shape in &shapes {
                    prop_assert_eq!(full.best_fit(*shape, None), floored.best_fit(*shape, None));
                    if let Some(&(node, _)) = a.first() {
                        prop_assert_eq!(
                            full.best_fit_except(*shape, node),
                            floored.best_fit_except(*shape, node)
                        );
                    }
                }
            }
            prop_assert_eq!(full.schedulable(), floored.schedulable());
        }
    }

    proptest! {
        /// Searches of a class through a set of its own (one zone's, a quarter of the nodes) pick
        /// exactly what a filtered scan of the shared set picks, as do those of a class kept off
        /// tainted nodes and of no class: fills, takes and give-backs of every class in between,
        /// each class's set built on its first search wherever the others left the room.
        #[test]
        fn class_sets_match_filtered_scans(
            nodes in proptest::collection::vec((1i64..16, 1i64..16, 0i64..5, 0u8..4, any::<bool>()), 1..80),
            shapes in proptest::collection::vec((1i64..6, 1i64..6, 0i64..3), 1..3),
            ops in proptest::collection::vec((0usize..3, 0usize..4, 0i64..30, 0u8..3), 1..16),
        ) {
            let sizes: Vec<(i64, i64, i64)> = nodes.iter().map(|n| (n.0, n.1, n.2)).collect();
            let mut s = state_of_sizes(&sizes);
            let zones: Vec<(u8, bool)> = nodes.iter().map(|n| (n.3, n.4)).collect();
            let classes = zone_classes(&mut s, &zones);
            let shapes: Vec<Resources> = shapes
                .iter()
                .map(|(cpu, memory, gpu)| Resources::new(cpu * 1000, memory << 30, *gpu))
                .collect();
            let mut own = NodeIndex::for_shapes(&s, shapes.iter().copied());
            let mut scan = NodeIndex::for_shapes(&s, shapes.iter().copied());
            scan.search = vec![ClassSearch::Shared; 64];
            let mut taken: Vec<(NodeId, Resources, Option<PodClassId>, i64)> = Vec::new();
            for (pick, class, count, action) in ops {
                let need = shapes[pick % shapes.len()];
                let class = classes[class];
                match action {
                    0 => {
                        let (mut a, mut b) = (Vec::new(), Vec::new());
                        prop_assert_eq!(own.fill(need, class, count, &mut a), scan.fill(need, class, count, &mut b));
                        prop_assert_eq!(&a, &b);
                        prop_assert!(a.iter().all(|(node, _)| own.allowed(class, *node)));
                        taken.extend(a.iter().map(|&(node, n)| (node, need, class, n)));
                    }
                    1 => {
                        let found = own.best_fit(need, class);
                        prop_assert_eq!(found, scan.best_fit(need, class));
                        if let Some(node) = found {
                            own.take(node, need, class, 1);
                            scan.take(node, need, class, 1);
                            taken.push((node, need, class, 1));
                        }
                    }
                    _ => {
                        if let Some((node, need, class, n)) = taken.pop() {
                            own.give(node, need, class, n);
                            scan.give(node, need, class, n);
                        }
                    }
                }
                prop_assert_eq!(own.best_fit(need, class), scan.best_fit(need, class));
            }
            for class in classes {
                for shape in &shapes {
                    prop_assert_eq!(own.best_fit(*shape, class), scan.best_fit(*shape, class));
                }
            }
            prop_assert!(own.class_sets.len() <= 3);
            prop_assert_eq!(own.schedulable(), scan.schedulable());
        }
    }

    /// One node as the exact model of [`NodeIndex`] sees it.
    #[derive(Debug, Clone)]
    struct ModelNode {
        id: NodeId,
        free: Resources,
        slots: i64,
        rdma: i64,
    }

    /// A search as [`NodeIndex::best_fit`] documents it, over every node at once: the nodes
    /// that fit (room, a pod slot, the rdma a trainer asks), by (free GPU, CPU, memory, name);
    /// the first that strands no GPU unless [`GOOD_FIT_SCAN`] stranding fits come before it,
    /// else the first stranding fit.
    fn model_best_fit(nodes: &[ModelNode], need: Resources, rdma: i64) -> Option<usize> {
        let mut fitting: Vec<usize> = (0..nodes.len())
            .filter(|&i| {
                let n = &nodes[i];
                need.fits_in(&n.free) && n.slots >= 1 && n.rdma >= rdma
            })
            .collect();
        // Nodes are named in id order: the id is the name's rank.
        fitting.sort_by_key(|&i| {
            let f = nodes[i].free;
            (f.gpu, f.cpu_milli, f.memory, nodes[i].id)
        });
        let mut stranding = Vec::new();
        for i in fitting {
            let left = nodes[i].free - need;
            if left.gpu == 0 || need.gpu == 0 || need.fits_in(&left) {
                return Some(i);
            }
            stranding.push(i);
            if stranding.len() == GOOD_FIT_SCAN {
                break;
            }
        }
        stranding.first().copied()
    }

    /// How many trainers node `n` of the model takes.
    fn model_count(n: &ModelNode, need: Resources, rdma: i64) -> i64 {
        let by_rdma = if rdma > 0 { n.rdma / rdma } else { i64::MAX };
        need.fit_count(&n.free).min(n.slots).min(by_rdma)
    }

    proptest! {
        /// Fills, best fits and give-backs agree with the exact model, pod slots (nodes with a
        /// pod limit and pods bound already) and another resource (`rdma/hca`, asked for by one
        /// trainer class) included: no node is given more trainers than its free slots or rdma
        /// hold, and the free room, slots and rdma left are the model's.
        #[test]
        fn searches_match_an_exact_model_with_pod_slots(
            nodes in proptest::collection::vec(
                ((1i64..16, 1i64..16, 0i64..5), (0i64..6, 0u32..4, 0i64..4)),
                1..60,
            ),
            ops in proptest::collection::vec(((1i64..4, 1i64..4, 0i64..3), any::<bool>(), 0i64..40, 0u8..3), 1..14),
        ) {
            use crate::api::JobKey;
            use crate::cluster::PodInfo;
            use crate::cluster::filters::{NodeTraits, PodConstraints};
            use crate::cluster::objects::PodPhase;
            use std::sync::Arc;
            let sizes: Vec<(i64, i64, i64)> = nodes.iter().map(|n| n.0).collect();
            let mut s = state_of_sizes(&sizes);
            for (i, (_, (max_pods, bound, rdma))) in nodes.iter().enumerate() {
                let name = format!("n{i:03}");
                let mut traits = NodeTraits {
                    name: name.clone(),
                    ready: true,
                    max_pods: Some(*max_pods),
                    ..NodeTraits::default()
                };
                if *rdma > 0 {
                    traits.extended.insert("rdma/hca".to_string(), *rdma);
                }
                s.set_node_traits(&name, traits);
                // Pods bound already take slots (and the first of them one rdma, if any).
                for p in 0..*bound {
                    let mut extended = Extended::new();
                    if p == 0 && *rdma > 0 {
                        extended.insert("rdma/hca".to_string(), 1);
                    }
                    s.set_pod(
                        ("kube-system".into(), format!("{name}-{p}")),
                        Some(PodInfo {
                            node: Some(name.clone()),
                            phase: PodPhase::Running,
                            requests: Resources::ZERO,
                            terminating: false,
                            owner: None,
                            created: 0,
                            index: None,
                            extended,
                            priority: 0,
                            claim: None,
                        }),
                    );
                }
            }
            let key = JobKey::new("ns", "rdma");
            let class = PodConstraints {
                extended: Extended::from([("rdma/hca".to_string(), 1)]),
                ..PodConstraints::default()
            };
            s.set_trainer_class(&key, Some(Arc::new(class)));
            let rdma_class = s.job(&key).and_then(|j| j.class);
            prop_assert!(rdma_class.is_some());
            let mut model: Vec<ModelNode> = s
                .nodes()
                .map(|(id, slot)| ModelNode {
                    id,
                    free: slot.free(),
                    slots: s.free_pod_slots(id),
                    rdma: s.free_extended(id, "rdma/hca"),
                })
                .collect();
            let mut index = NodeIndex::new(&s);
            let mut taken: Vec<(NodeId, Resources, Option<PodClassId>, i64)> = Vec::new();
            for ((cpu, memory, gpu), with_rdma, count, action) in ops {
                let need = Resources::new(cpu * 1000, memory << 30, gpu);
                let (class, rdma) = if with_rdma { (rdma_class, 1) } else { (None, 0) };
                match action {
                    0 => {
                        let mut chunks = Vec::new();
                        let placed = index.fill(need, class, count, &mut chunks);
                        let mut expected = Vec::new();
                        let mut left = count;
                        while left > 0 {
                            let Some(i) = model_best_fit(&model, need, rdma) else { break };
                            let n = model_count(&model[i], need, rdma).min(left);
                            model[i].free -= need.times(n);
                            model[i].slots -= n;
                            model[i].rdma -= rdma * n;
                            expected.push((model[i].id, n));
                            left -= n;
                        }
                        prop_assert_eq!(&chunks, &expected);
                        prop_assert_eq!(placed, count - left);
                        taken.extend(chunks.iter().map(|&(node, n)| (node, need, class, n)));
                    }
                    1 => {
                        let found = index.best_fit(need, class);
                        let expected = model_best_fit(&model, need, rdma);
                        prop_assert_eq!(found, expected.map(|i| model[i].id));
                        if let (Some(node), Some(i)) = (found, expected) {
                            index.take(node, need, class, 1);
                            model[i].free -= need;
                            model[i].slots -= 1;
                            model[i].rdma -= rdma;
                            taken.push((node, need, class, 1));
                        }
                    }
                    _ => {
                        if let Some((node, need, class, n)) = taken.pop() {
                            index.give(node, need, class, n);
                            let rdma = if class.is_some() { 1 } else { 0 };
                            if let Some(m) = model.iter_mut().find(|m| m.id == node) {
                                m.free += need.times(n);
                                m.slots += n;
                                m.rdma += rdma * n;
                            }
                        }
                    }
                }
                for m in &model {
                    prop_assert_eq!(index.free(m.id), Some(m.free));
                    prop_assert_eq!(index.slots(m.id), m.slots);
                    prop_assert_eq!(
                        index.fit_count(m.id, need, rdma_class),
                        if need.fits_in(&m.free) { model_count(m, need, 1).max(0) } else { 0 }
                    );
                }
            }
        }
    }

    /// Labels node `n` of `s` with zone `z{zones[n].0}` and taints it when `zones[n].1`; the
    /// classes: none, a selector of zone `z0`, one of `z1`, and no constraints (kept off the
    /// tainted nodes).
    fn zone_classes(s: &mut ClusterState, zones: &[(u8, bool)]) -> [Option<PodClassId>; 4] {
        use crate::api::JobKey;
        use crate::cluster::filters::{NodeTraits, PodConstraints, Taint, TaintEffect};
        use std::sync::Arc;
        for (n, (zone, tainted)) in zones.iter().enumerate() {
            let name = format!("n{n:03}");
            let mut traits = NodeTraits {
                name: name.clone(),
                ready: true,
                ..NodeTraits::default()
            };
            traits.labels.insert("zone".to_string(), format!("z{zone}"));
            if *tainted {
                traits.taints.push(Taint {
                    key: "dedicated".to_string(),
                    value: "inference".to_string(),
                    effect: TaintEffect::NoSchedule,
                });
            }
            s.set_node_traits(&name, traits);
        }
        let mut class = |name: &str, zone: Option<&str>| {
            let key = JobKey::new("ns", name);
            let mut c = PodConstraints::default();
            if let Some(zone) = zone {
                c.node_selector.insert("zone".to_string(), zone.to_string());
            }
            s.set_trainer_class(&key, Some(Arc::new(c)));
            s.job(&key).and_then(|j| j.class)
        };
        let (z0, z1, plain) = (
            class("a", Some("z0")),
            class("b", Some("z1")),
            class("c", None),
        );
        [None, z0, z1, plain]
    }

    /// A state of nodes `n000`, `n001`, … with (cores, GiB, GPUs) each.
    fn state_of_sizes(nodes: &[(i64, i64, i64)]) -> ClusterState {
        let named: Vec<(String, Resources)> = nodes
            .iter()
            .enumerate()
            .map(|(n, (cpu, memory, gpu))| {
                (
                    format!("n{n:03}"),
                    Resources::new(cpu * 1000, memory << 30, *gpu),
                )
            })
            .collect();
        let refs: Vec<(&str, Resources)> =
            named.iter().map(|(name, r)| (name.as_str(), *r)).collect();
        state(&refs)
    }

    /// Checks one `fill` against repeated best fits on the same state.
    fn fill_matches(s: &ClusterState, need: Resources, count: i64) -> Result<(), TestCaseError> {
        let mut one_by_one = NodeIndex::new(s);
        let mut expected = Vec::new();
        let mut left = count;
        while left > 0 {
            let Some(node) = one_by_one.best_fit(need, None) else {
                break;
            };
            let n = one_by_one.fit_count(node, need, None).min(left).max(1);
            one_by_one.take(node, need, None, n);
            expected.push((node, n));
            left -= n;
        }
        let mut swept = NodeIndex::new(s);
        let mut chunks = Vec::new();
        let placed = swept.fill(need, None, count, &mut chunks);
        prop_assert_eq!(&chunks, &expected);
        prop_assert_eq!(placed, count - left);
        prop_assert_eq!(swept.schedulable(), one_by_one.schedulable());
        prop_assert_eq!(swept.best_fit(need, None), one_by_one.best_fit(need, None));
        Ok(())
    }

    #[test]
    fn fill_matches_best_fits_past_the_stranding_scan_limit() {
        // 40 nodes where a 1-GPU trainer would strand a GPU, then nodes where it would not: best
        // fit takes the first stranding node once it has seen GOOD_FIT_SCAN of them.
        let mut nodes: Vec<(String, Resources)> = (0..40)
            .map(|n| (format!("s{n:02}"), Resources::new(1000, 8 << 30, 2)))
            .collect();
        nodes.extend((0..8).map(|n| (format!("t{n:02}"), Resources::new(3000, 8 << 30, 3))));
        nodes.extend((0..8).map(|n| (format!("u{n:02}"), Resources::new(2000, 8 << 30, 2))));
        let named: Vec<(&str, Resources)> = nodes.iter().map(|(n, r)| (n.as_str(), *r)).collect();
        let s = state(&named);
        for count in [1, 10, 33, 50, 70, 200] {
            fill_matches(&s, Resources::new(1000, 1 << 30, 1), count)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn fill_prefers_nodes_that_strand_no_gpu_and_reports_a_shortfall() {
        // a: 2 GPUs but CPU for one 1-GPU trainer (strands one); b: 2 GPUs, CPU for two.
        let s = state(&[
            ("a", Resources::new(1000, 64 << 30, 2)),
            ("b", Resources::new(2000, 64 << 30, 2)),
        ]);
        let mut idx = NodeIndex::new(&s);
        let (a, b) = (s.node_id_of("a").unwrap(), s.node_id_of("b").unwrap());
        let mut chunks = Vec::new();
        let placed = idx.fill(Resources::new(1000, 1 << 30, 1), None, 4, &mut chunks);
        assert_eq!(chunks, vec![(b, 2), (a, 1)]);
        assert_eq!(placed, 3);
        assert_eq!(idx.free(a), Some(Resources::new(0, 63 << 30, 1)));
    }

    #[test]
    fn nodes_beyond_the_field_widths_are_still_found_by_their_exact_room() {
        let s = state(&[
            ("huge", Resources::new(3_000_000, 64 << 30, 300)),
            ("small", Resources::new(8000, 64 << 30, 1)),
        ]);
        let mut idx = NodeIndex::new(&s);
        let huge = s.node_id_of("huge");
        assert_eq!(idx.best_fit(Resources::new(1000, 1 << 30, 200), None), huge);
        assert_eq!(
            idx.best_fit(Resources::new(2_500_000, 1 << 30, 0), None),
            huge
        );
        assert_eq!(idx.best_fit(Resources::new(1000, 1 << 30, 301), None), None);
        assert_eq!(
            idx.best_fit(Resources::new(3_000_001, 1 << 30, 1), None),
            None
        );
    }

    fn state(nodes: &[(&str, Resources)]) -> ClusterState {
        let mut s = ClusterState::new();
        for (name, r) in nodes {
            s.set_node(
                name,
                Some(NodeInfo {
                    allocatable: *r,
                    schedulable: true,
                }),
            );
        }
        s
    }

    #[test]
    fn gpu_trainer_takes_the_tightest_gpu_node() {
        let s = state(&[
            ("a", Resources::new(8000, 64 << 30, 8)),
            ("b", Resources::new(8000, 64 << 30, 2)),
            ("c", Resources::new(8000, 64 << 30, 0)),
        ]);
        let mut idx = NodeIndex::new(&s);
        let b = s.node_id_of("b");
        assert_eq!(idx.best_fit(Resources::new(1000, 1 << 30, 2), None), b);
        assert_eq!(
            idx.best_fit(Resources::new(1000, 1 << 30, 3), None),
            s.node_id_of("a")
        );
        assert_eq!(idx.best_fit(Resources::new(1000, 1 << 30, 9), None), None);
    }

    #[test]
    fn cpu_trainer_prefers_nodes_without_free_gpus() {
        let s = state(&[
            ("gpu", Resources::new(8000, 64 << 30, 8)),
            ("cpu", Resources::new(4000, 64 << 30, 0)),
        ]);
        let mut idx = NodeIndex::new(&s);
        assert_eq!(
            idx.best_fit(Resources::new(1000, 1 << 30, 0), None),
            s.node_id_of("cpu")
        );
        // Too big for the CPU node: falls back to the GPU node.
        assert_eq!(
            idx.best_fit(Resources::new(6000, 1 << 30, 0), None),
            s.node_id_of("gpu")
        );
    }

    #[test]
    fn avoids_stranding_gpus_when_it_can() {
        // Node a: 2 free GPUs but CPU for one trainer only; node b: 2 GPUs and CPU for two.
        let s = state(&[
            ("a", Resources::new(1000, 64 << 30, 2)),
            ("b", Resources::new(2000, 64 << 30, 2)),
        ]);
        let mut idx = NodeIndex::new(&s);
        assert_eq!(
            idx.best_fit(Resources::new(1000, 1 << 30, 1), None),
            s.node_id_of("b")
        );
    }

    #[test]
    fn memory_is_checked_and_adjust_moves_entries() {
        let s = state(&[("a", Resources::new(4000, 4 << 30, 0))]);
        let mut idx = NodeIndex::new(&s);
        let a = s.node_id_of("a").unwrap();
        assert_eq!(idx.best_fit(Resources::new(1000, 5 << 30, 0), None), None);
        let t = Resources::new(1000, 2 << 30, 0);
        idx.take(a, t, None, 1);
        idx.take(a, t, None, 1);
        assert_eq!(idx.best_fit(t, None), None);
        idx.give(a, t, None, 1);
        assert_eq!(idx.best_fit(t, None), Some(a));
        assert_eq!(idx.free(a), Some(Resources::new(3000, 2 << 30, 0)));
    }
}
