//! Which nodes pass [`check_static`] for which pod class, kept up to date as nodes and classes
//! come and go. Pods with equal constraints share a class, so eligibility is evaluated once per
//! (class, node), never per pod × node.

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::fast::RandomState;

use super::check::check_static;
use super::message::Unfit;
use super::node::NodeTraits;
use super::pod::PodConstraints;

/// A pod class: the id of one set of interned [`PodConstraints`].
pub type PodClassId = u32;

/// One live class.
#[derive(Debug, Clone)]
struct Class {
    constraints: Arc<PodConstraints>,
    /// How many holders acquired it and have not released it.
    holders: u32,
    /// How many known nodes fail [`check_static`] for it.
    ineligible: u32,
    /// Bit `n` is set when node `n` is known and passes.
    nodes: Vec<u64>,
}

impl Class {
    fn get(&self, node: usize) -> bool {
        self.nodes
            .get(node / 64)
            .is_some_and(|word| word >> (node % 64) & 1 == 1)
    }

    fn put(&mut self, node: usize, on: bool) {
        let word = node / 64;
        if word >= self.nodes.len() {
            if !on {
                return;
            }
            self.nodes.resize(word + 1, 0);
        }
        let bit = 1u64 << (node % 64);
        if on {
            self.nodes[word] |= bit;
        } else {
            self.nodes[word] &= !bit;
        }
    }
}

/// Eligibility of every live pod class on every known node: a bitset over node ids per class,
/// and per class the count of ineligible nodes.
#[derive(Debug, Clone, Default)]
pub struct Eligibility {
    classes: Vec<Option<Class>>,
    /// Ids of forgotten classes, reused before new ones.
    free: Vec<PodClassId>,
    interned: HashMap<Arc<PodConstraints>, PodClassId, RandomState>,
    nodes: Vec<Option<Arc<NodeTraits>>>,
}

impl Eligibility {
    /// No classes, no nodes.
    pub fn new() -> Self {
        Self::default()
    }

    fn class(&self, class: PodClassId) -> Option<&Class> {
        self.classes.get(class as usize).and_then(Option::as_ref)
    }

    /// Interns constraints (equal constraints → same id) and counts a holder; evaluates the new
    /// class against every node once.
    pub fn acquire(&mut self, constraints: Arc<PodConstraints>) -> PodClassId {
        if let Some(&id) = self.interned.get(constraints.as_ref())
            && let Some(Some(class)) = self.classes.get_mut(id as usize)
        {
            class.holders = class.holders.saturating_add(1);
            return id;
        }
        let mut class = Class {
            constraints: Arc::clone(&constraints),
            holders: 1,
            ineligible: 0,
            nodes: vec![0; self.nodes.len().div_ceil(64)],
        };
        for (n, traits) in self.nodes.iter().enumerate() {
            if let Some(traits) = traits {
                if check_static(&constraints, traits).is_ok() {
                    class.put(n, true);
                } else {
                    class.ineligible = class.ineligible.saturating_add(1);
                }
            }
        }
        let id = match self.free.pop() {
            Some(id) => {
                if let Some(slot) = self.classes.get_mut(id as usize) {
                    *slot = Some(class);
                }
                id
            }
            None => {
                self.classes.push(Some(class));
                (self.classes.len() - 1) as PodClassId
            }
        };
        self.interned.insert(constraints, id);
        id
    }

    /// Drops a holder; a class with no holder is forgotten and its id reused. Unknown ids are
    /// ignored.
    pub fn release(&mut self, class: PodClassId) {
        let Some(slot) = self.classes.get_mut(class as usize) else {
            return;
        };
        let Some(entry) = slot.as_mut() else {
            return;
        };
        entry.holders = entry.holders.saturating_sub(1);
        if entry.holders > 0 {
            return;
        }
        if let Some(gone) = slot.take() {
            self.interned.remove(gone.constraints.as_ref());
        }
        self.free.push(class);
    }

    /// Sets (`Some`) or removes (`None`) the traits of node id `node` (dense ids, reused after
    /// removal); re-evaluates that node against every live class, unless its traits are unchanged.
    pub fn set_node(&mut self, node: u32, traits: Option<Arc<NodeTraits>>) {
        let n = node as usize;
        if n >= self.nodes.len() {
            if traits.is_none() {
                return;
            }
            self.nodes.resize(n + 1, None);
        }
        let old = std::mem::replace(&mut self.nodes[n], traits.clone());
        if let (Some(old), Some(new)) = (&old, &traits)
            && (Arc::ptr_eq(old, new) || old == new)
        {
            return;
        }
        for class in self.classes.iter_mut().flatten() {
            if old.is_some() && !class.get(n) {
                class.ineligible = class.ineligible.saturating_sub(1);
            }
            let now = match &traits {
                Some(t) => {
                    let ok = check_static(&class.constraints, t).is_ok();
                    if !ok {
                        class.ineligible = class.ineligible.saturating_add(1);
                    }
                    ok
                }
                None => false,
            };
            class.put(n, now);
        }
    }

    /// O(1): whether [`check_static`] passes for this class on this node (false for unknown
    /// class or node ids).
    #[inline]
    pub fn eligible(&self, class: PodClassId, node: u32) -> bool {
        self.class(class).is_some_and(|c| c.get(node as usize))
    }

    /// Why this class does not fit this node, recomputed; `None` when it fits or either id is unknown.
    pub fn why_not(&self, class: PodClassId, node: u32) -> Option<Unfit> {
        let constraints = self.constraints(class)?;
        let traits = self.traits(node)?;
        check_static(constraints, traits).err()
    }

    /// The constraints of a live class.
    pub fn constraints(&self, class: PodClassId) -> Option<&Arc<PodConstraints>> {
        self.class(class).map(|c| &c.constraints)
    }

    /// The traits of a known node.
    pub fn traits(&self, node: u32) -> Option<&Arc<NodeTraits>> {
        self.nodes.get(node as usize).and_then(Option::as_ref)
    }

    /// Whether every known node is eligible for this class (lets callers skip filtering); false
    /// for an unknown class.
    pub fn all_eligible(&self, class: PodClassId) -> bool {
        self.class(class).is_some_and(|c| c.ineligible == 0)
    }

    /// How many nodes are eligible for this class (0 for an unknown class).
    pub fn eligible_count(&self, class: PodClassId) -> usize {
        self.class(class)
            .map_or(0, |c| c.nodes.iter().map(|w| w.count_ones() as usize).sum())
    }

    /// How many holders a live class has (0 for an unknown id).
    pub fn holders(&self, class: PodClassId) -> u32 {
        self.class(class).map_or(0, |c| c.holders)
    }

    /// The eligible node ids of a class, ascending (none for an unknown class).
    pub fn eligible_nodes(&self, class: PodClassId) -> impl Iterator<Item = u32> + '_ {
        let words = self.class(class).map_or(&[][..], |c| c.nodes.as_slice());
        words.iter().enumerate().flat_map(|(w, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = rest.trailing_zeros();
                rest &= rest - 1;
                Some((w as u32) * 64 + bit)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn node(name: &str, zone: &str) -> Arc<NodeTraits> {
        Arc::new(NodeTraits {
            name: name.into(),
            labels: BTreeMap::from([("zone".to_string(), zone.to_string())]),
            ready: true,
            ..Default::default()
        })
    }

    fn in_zone(zone: &str) -> Arc<PodConstraints> {
        Arc::new(PodConstraints {
            node_selector: BTreeMap::from([("zone".to_string(), zone.to_string())]),
            ..Default::default()
        })
    }

    #[test]
    fn equal_constraints_share_a_class() {
        let mut e = Eligibility::new();
        let a = e.acquire(in_zone("a"));
        let a2 = e.acquire(in_zone("a"));
        let b = e.acquire(in_zone("b"));
        assert_eq!(a, a2);
        assert_ne!(a, b);
        assert_eq!(e.holders(a), 2);
        assert_eq!(
            e.constraints(a).map(|c| c.as_ref()),
            Some(in_zone("a").as_ref())
        );
    }

    #[test]
    fn a_released_class_is_forgotten_and_its_id_reused() {
        let mut e = Eligibility::new();
        e.set_node(0, Some(node("n0", "a")));
        let a = e.acquire(in_zone("a"));
        e.acquire(in_zone("a"));
        e.release(a);
        assert!(e.eligible(a, 0), "still one holder");
        e.release(a);
        assert_eq!(e.constraints(a), None);
        assert!(!e.eligible(a, 0));
        assert!(!e.all_eligible(a));
        // The id comes back for new constraints, evaluated afresh.
        let b = e.acquire(in_zone("b"));
        assert_eq!(b, a);
        assert!(!e.eligible(b, 0));
        assert_eq!(e.holders(b), 1);
        // Releasing unknown ids does nothing.
        e.release(99);
        e.release(b);
        e.release(b);
        assert_eq!(e.holders(b), 0);
    }

    #[test]
    fn new_class_is_evaluated_against_every_node() {
        let mut e = Eligibility::new();
        e.set_node(0, Some(node("n0", "a")));
        e.set_node(1, Some(node("n1", "b")));
        e.set_node(70, Some(node("n70", "a")));
        let a = e.acquire(in_zone("a"));
        assert!(e.eligible(a, 0));
        assert!(!e.eligible(a, 1));
        assert!(e.eligible(a, 70));
        assert!(!e.eligible(a, 2), "unknown node");
        assert!(!e.eligible(a, u32::MAX));
        assert!(!e.eligible(12345, 0), "unknown class");
        assert!(!e.all_eligible(12345));
        assert_eq!(e.why_not(12345, 0), None);
        assert!(!e.all_eligible(a));
        assert_eq!(e.eligible_nodes(a).collect::<Vec<_>>(), vec![0, 70]);
        assert_eq!(e.why_not(a, 1), Some(Unfit::NodeAffinity));
        assert_eq!(e.why_not(a, 0), None);
        assert_eq!(e.why_not(a, 2), None);
        let any = e.acquire(Arc::new(PodConstraints::default()));
        assert!(e.all_eligible(any));
    }

    #[test]
    fn node_changes_re_evaluate_every_class() {
        let mut e = Eligibility::new();
        let a = e.acquire(in_zone("a"));
        let any = e.acquire(Arc::new(PodConstraints::default()));
        assert!(e.all_eligible(a), "no nodes: vacuously all");
        e.set_node(5, Some(node("n5", "a")));
        assert!(e.eligible(a, 5) && e.eligible(any, 5));
        assert!(e.all_eligible(a));
        // Relabelled: no longer in zone a.
        e.set_node(5, Some(node("n5", "b")));
        assert!(!e.eligible(a, 5) && e.eligible(any, 5));
        assert!(!e.all_eligible(a) && e.all_eligible(any));
        // Same traits again: nothing changes.
        e.set_node(5, Some(node("n5", "b")));
        assert!(!e.all_eligible(a));
        // Cordoned: no class fits.
        let cordoned = Arc::new(NodeTraits {
            unschedulable: true,
            ..(*node("n5", "a")).clone()
        });
        e.set_node(5, Some(cordoned));
        assert!(!e.eligible(a, 5) && !e.eligible(any, 5));
        assert_eq!(e.why_not(any, 5), Some(Unfit::Unschedulable));
        // Removed: not eligible, and no longer counted as ineligible.
        e.set_node(5, None);
        assert!(!e.eligible(any, 5));
        assert!(e.all_eligible(a) && e.all_eligible(any));
        assert_eq!(e.traits(5), None);
        // The id is reused for another node.
        e.set_node(5, Some(node("other", "a")));
        assert!(e.eligible(a, 5));
        assert_eq!(e.traits(5).map(|t| t.name.as_str()), Some("other"));
        // Removing a never-seen id does nothing.
        e.set_node(1000, None);
        assert_eq!(e.traits(1000), None);
    }

    #[test]
    fn counts_stay_right_through_many_changes() {
        let mut e = Eligibility::new();
        let a = e.acquire(in_zone("a"));
        for n in 0..200u32 {
            e.set_node(
                n,
                Some(node(&format!("n{n}"), if n % 3 == 0 { "a" } else { "b" })),
            );
        }
        let b = e.acquire(in_zone("b"));
        for n in (0..200u32).step_by(2) {
            e.set_node(n, None);
        }
        for class in [a, b] {
            let brute: Vec<u32> = (0..200u32)
                .filter(|&n| {
                    e.traits(n)
                        .zip(e.constraints(class))
                        .is_some_and(|(t, c)| check_static(c, t).is_ok())
                })
                .collect();
            assert_eq!(e.eligible_nodes(class).collect::<Vec<_>>(), brute);
        }
        // Every remaining node in zone a: class b becomes all-eligible only when none is left in b.
        for n in (1..200u32).step_by(2) {
            e.set_node(n, Some(node(&format!("n{n}"), "a")));
        }
        assert!(e.all_eligible(a));
        assert!(!e.all_eligible(b));
    }

    mod random {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Op {
            Node(u32, Option<(u8, bool)>),
            Acquire(Option<u8>),
            Release(usize),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (0u32..140, proptest::option::of((0u8..3, any::<bool>())))
                    .prop_map(|(n, t)| Op::Node(n, t)),
                proptest::option::of(0u8..3).prop_map(Op::Acquire),
                (0usize..16).prop_map(Op::Release),
            ]
        }

        proptest! {
            /// After any sequence of changes, the stored answers equal `check_static` computed afresh.
            #[test]
            fn matches_brute_force(ops in proptest::collection::vec(op(), 1..120)) {
                let mut e = Eligibility::new();
                let mut held: Vec<PodClassId> = Vec::new();
                for op in ops {
                    match op {
                        Op::Node(n, t) => e.set_node(n, t.map(|(zone, cordoned)| {
                            Arc::new(NodeTraits {
                                unschedulable: cordoned,
                                ..(*node(&format!("n{n}"), &zone.to_string())).clone()
                            })
                        })),
                        Op::Acquire(zone) => held.push(e.acquire(match zone {
                            Some(z) => in_zone(&z.to_string()),
                            None => Arc::new(PodConstraints::default()),
                        })),
                        Op::Release(i) => {
                            if !held.is_empty() {
                                let class = held.swap_remove(i % held.len());
                                e.release(class);
                            }
                        }
                    }
                    for &class in &held {
                        let Some(c) = e.constraints(class).cloned() else {
                            return Err(TestCaseError::fail("held class forgotten"));
                        };
                        let mut all = true;
                        for n in 0..140u32 {
                            let want = e.traits(n).is_some_and(|t| check_static(&c, t).is_ok());
                            all &= want || e.traits(n).is_none();
                            prop_assert_eq!(e.eligible(class, n), want);
                        }
                        prop_assert_eq!(e.all_eligible(class), all);
                        let holders = held.iter().filter(|&&h| h == class).count() as u32;
                        prop_assert_eq!(e.holders(class), holders);
                    }
                }
            }
        }
    }
}
