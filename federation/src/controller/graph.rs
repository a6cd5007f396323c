//! The dependencies between the Combs of one layer: who to wake when a Comb changes status, and
//! the cycles that keep Combs Blocked for good.

use std::collections::{BTreeMap, BTreeSet};

use petgraph::algo::kosaraju_scc;
use petgraph::graphmap::DiGraphMap;

use crate::engine::keys::CombKey;

/// Edges from each Comb to the Combs it depends on, the same edges the other way, and the
/// cycles they make, kept as edges change: a step asks who depends on a Comb and which cycle it
/// is in, and a walk of the whole graph for either made every step cost as much as the layer
/// has dependencies (a layer converging stepped its Combs in time growing with their square).
#[derive(Debug, Default)]
pub struct DependencyGraph {
    edges: BTreeMap<CombKey, BTreeSet<CombKey>>,
    dependents: BTreeMap<CombKey, BTreeSet<CombKey>>,
    cycles: Vec<Vec<CombKey>>,
}

/// What changing a Comb's dependencies changed beyond its own edges.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DependencyChange {
    /// The cycles are not those of before.
    pub cycles_changed: bool,
    /// Combs it no longer depends on (they may have no dependent left).
    pub dropped: Vec<CombKey>,
}

impl DependencyGraph {
    /// Records the dependencies of `key`; `None` when they are those it had.
    pub fn set(
        &mut self,
        key: &CombKey,
        dependencies: BTreeSet<CombKey>,
    ) -> Option<DependencyChange> {
        let unchanged = match self.edges.get(key) {
            Some(old) => *old == dependencies,
            None => dependencies.is_empty(),
        };
        if unchanged {
            return None;
        }
        // Only a cycle through `key` can appear or go (or change its members) when `key`'s
        // edges change: any other cycle's paths do not pass through it.
        let was_cyclic = self.reaches_itself(key);
        let old = if dependencies.is_empty() {
            self.edges.remove(key).unwrap_or_default()
        } else {
            self.edges
                .insert(key.clone(), dependencies.clone())
                .unwrap_or_default()
        };
        let dropped: Vec<CombKey> = old.difference(&dependencies).cloned().collect();
        for dependency in &dropped {
            if let Some(dependents) = self.dependents.get_mut(dependency) {
                dependents.remove(key);
                if dependents.is_empty() {
                    self.dependents.remove(dependency);
                }
            }
        }
        for dependency in dependencies.difference(&old) {
            self.dependents
                .entry(dependency.clone())
                .or_default()
                .insert(key.clone());
        }
        let cycles_changed = if was_cyclic || self.reaches_itself(key) {
            let cycles = self.find_cycles();
            let changed = cycles != self.cycles;
            self.cycles = cycles;
            changed
        } else {
            false
        };
        Some(DependencyChange {
            cycles_changed,
            dropped,
        })
    }

    /// The Combs that depend on `key`, sorted.
    pub fn dependents_of(&self, key: &CombKey) -> Vec<CombKey> {
        self.dependents
            .get(key)
            .map(|dependents| dependents.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether some Comb depends on `key`.
    pub fn is_depended_on(&self, key: &CombKey) -> bool {
        self.dependents.contains_key(key)
    }

    /// Every cycle, one per strongly connected component, each as a path that starts and ends
    /// at its smallest Comb (`a -> b -> a`), sorted.
    pub fn cycles(&self) -> &[Vec<CombKey>] {
        &self.cycles
    }

    /// Whether a path of dependencies leads from `key` back to it: the walk covers only what
    /// `key` depends on, directly or not.
    fn reaches_itself(&self, key: &CombKey) -> bool {
        let mut seen: BTreeSet<&CombKey> = BTreeSet::new();
        let mut next: Vec<&CombKey> = self.edges.get(key).into_iter().flatten().collect();
        while let Some(node) = next.pop() {
            if node == key {
                return true;
            }
            if seen.insert(node) {
                next.extend(self.edges.get(node).into_iter().flatten());
            }
        }
        false
    }

    /// The cycles of the whole graph, found anew. Kosaraju's search, petgraph's iterative one:
    /// a long chain of dependencies cannot overflow the stack (its Tarjan recurses).
    fn find_cycles(&self) -> Vec<Vec<CombKey>> {
        let mut graph: DiGraphMap<&CombKey, ()> = DiGraphMap::new();
        for (dependent, dependencies) in &self.edges {
            graph.add_node(dependent);
            for dependency in dependencies {
                graph.add_edge(dependent, dependency, ());
            }
        }
        let mut cycles: Vec<Vec<CombKey>> = kosaraju_scc(&graph)
            .into_iter()
            .filter_map(|component| self.cycle_through(&component.into_iter().collect()))
            .collect();
        cycles.sort();
        cycles
    }

    /// A cycle inside `component` from its smallest member back to it, if there is one (a
    /// single Comb is a cycle only when it depends on itself).
    fn cycle_through(&self, component: &BTreeSet<&CombKey>) -> Option<Vec<CombKey>> {
        let start = *component.first()?;
        // Breadth-first within the component for the shortest way back to `start`.
        let mut previous: BTreeMap<&CombKey, &CombKey> = BTreeMap::new();
        let mut frontier = vec![start];
        while !frontier.is_empty() {
            let mut next = Vec::new();
            for node in frontier {
                for child in self.edges.get(node).into_iter().flatten() {
                    if !component.contains(&child) {
                        continue;
                    }
                    if child == start {
                        // Walked back from `node` to `start`, then turned around.
                        let mut path = vec![start.clone()];
                        let mut at = node;
                        while at != start {
                            path.push(at.clone());
                            at = previous.get(at)?;
                        }
                        path.push(start.clone());
                        path.reverse();
                        return Some(path);
                    }
                    if !previous.contains_key(child) {
                        previous.insert(child, node);
                        next.push(child);
                    }
                }
            }
            frontier = next;
        }
        None
    }
}

/// A Comb of some layer: (layer index, key).
pub type LayerComb = (usize, CombKey);

/// Which Combs borrow from which peers across layers, so that a peer's status change wakes its
/// borrowers at once.
#[derive(Debug, Default)]
pub struct BorrowIndex {
    peer_of: BTreeMap<LayerComb, LayerComb>,
    /// A peer's borrowers, sorted: most peers have one (a `BTreeSet` takes a ~600-byte node for
    /// it).
    borrowers: BTreeMap<LayerComb, Vec<LayerComb>>,
}

impl BorrowIndex {
    /// Records the peer `borrower` borrows from (`None`: none, or not known).
    pub fn set(&mut self, borrower: &LayerComb, peer: Option<LayerComb>) {
        if self.peer_of.get(borrower) == peer.as_ref() {
            return;
        }
        if let Some(old) = self.peer_of.remove(borrower)
            && let Some(borrowers) = self.borrowers.get_mut(&old)
        {
            if let Ok(place) = borrowers.binary_search(borrower) {
                borrowers.remove(place);
            }
            if borrowers.is_empty() {
                self.borrowers.remove(&old);
            }
        }
        if let Some(peer) = peer {
            let borrowers = self.borrowers.entry(peer.clone()).or_default();
            if let Err(place) = borrowers.binary_search(borrower) {
                borrowers.insert(place, borrower.clone());
            }
            self.peer_of.insert(borrower.clone(), peer);
        }
    }

    /// The Combs that borrow from `peer`.
    pub fn borrowers_of(&self, peer: &LayerComb) -> Vec<LayerComb> {
        self.borrowers.get(peer).cloned().unwrap_or_default()
    }
}

/// `a -> b -> a; c -> c`: cycles as the reference example prints them.
pub fn describe_cycles(cycles: &[Vec<CombKey>]) -> String {
    cycles
        .iter()
        .map(|cycle| {
            cycle
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" -> ")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> CombKey {
        CombKey::new("ns", name)
    }

    fn graph(edges: &[(&str, &[&str])]) -> DependencyGraph {
        let mut graph = DependencyGraph::default();
        for (from, to) in edges {
            graph.set(&key(from), to.iter().map(|name| key(name)).collect());
        }
        graph
    }

    #[test]
    fn dependents_and_changes() {
        let mut graph = graph(&[("mailer", &["db", "nats"]), ("api", &["db"])]);
        assert_eq!(
            graph.dependents_of(&key("db")),
            vec![key("api"), key("mailer")]
        );
        assert_eq!(graph.dependents_of(&key("mailer")), Vec::<CombKey>::new());
        assert_eq!(graph.set(&key("api"), [key("db")].into()), None);
        assert_eq!(
            graph.set(&key("api"), BTreeSet::new()),
            Some(DependencyChange {
                cycles_changed: false,
                dropped: vec![key("db")]
            })
        );
        assert_eq!(graph.dependents_of(&key("db")), vec![key("mailer")]);
        assert!(graph.is_depended_on(&key("db")));
        assert_eq!(
            graph
                .set(&key("mailer"), BTreeSet::new())
                .map(|change| change.dropped),
            Some(vec![key("db"), key("nats")])
        );
        assert_eq!(graph.set(&key("mailer"), BTreeSet::new()), None);
        assert!(!graph.is_depended_on(&key("db")));
    }

    #[test]
    fn cycles() {
        type Edges<'a> = Vec<(&'a str, &'a [&'a str])>;
        let cases: Vec<(Edges, &str)> = vec![
            (vec![("a", &["b"]), ("b", &["c"])], ""),
            (vec![("a", &["b"]), ("b", &["a"])], "ns/a -> ns/b -> ns/a"),
            (vec![("a", &["a"])], "ns/a -> ns/a"),
            (
                vec![("c", &["a"]), ("a", &["b"]), ("b", &["c", "d"]), ("d", &[])],
                "ns/a -> ns/b -> ns/c -> ns/a",
            ),
            (
                vec![
                    ("a", &["b"]),
                    ("b", &["a"]),
                    ("x", &["y"]),
                    ("y", &["x"]),
                    ("z", &["a"]),
                ],
                "ns/a -> ns/b -> ns/a; ns/x -> ns/y -> ns/x",
            ),
            // The shortest way back from the smallest member.
            (
                vec![("a", &["b", "c"]), ("b", &["c"]), ("c", &["a"])],
                "ns/a -> ns/c -> ns/a",
            ),
        ];
        for (edges, expected) in cases {
            assert_eq!(
                describe_cycles(graph(&edges).cycles()),
                expected,
                "{edges:?}"
            );
        }
    }

    #[test]
    fn the_cycles_kept_are_those_found_anew_after_every_change() {
        use rand::rngs::StdRng;
        use rand::{Rng as _, SeedableRng as _};

        // Changes of one Comb's edges at a time, in a small graph where cycles come, go, merge
        // and change members that are not on their reported path: what is kept must always
        // equal a search of the whole graph.
        let names = ["a", "b", "c", "d", "e", "f"];
        let mut graph = DependencyGraph::default();
        let mut rng = StdRng::seed_from_u64(0x2545_f491_4f6c_dd1d);
        for change in 0..2_000 {
            let from = names[rng.random_range(0..names.len())];
            let dependencies: BTreeSet<CombKey> = names
                .iter()
                .filter(|_| rng.random_ratio(1, 4))
                .map(|name| key(name))
                .collect();
            let before = graph.cycles().to_vec();
            let told = graph.set(&key(from), dependencies);
            assert_eq!(graph.cycles(), graph.find_cycles(), "change {change}");
            let changed = told.is_some_and(|told| told.cycles_changed);
            assert_eq!(changed, before != graph.cycles(), "change {change}");
            for name in names {
                let dependents: Vec<CombKey> = graph
                    .edges
                    .iter()
                    .filter(|(_, dependencies)| dependencies.contains(&key(name)))
                    .map(|(dependent, _)| dependent.clone())
                    .collect();
                assert_eq!(
                    graph.dependents_of(&key(name)),
                    dependents,
                    "change {change}"
                );
            }
        }
    }

    #[test]
    fn borrowers() {
        let mut index = BorrowIndex::default();
        let prod_db = (0, key("db"));
        index.set(&(1, key("db")), Some(prod_db.clone()));
        index.set(&(2, key("db")), Some(prod_db.clone()));
        assert_eq!(
            index.borrowers_of(&prod_db),
            vec![(1, key("db")), (2, key("db"))]
        );
        index.set(&(2, key("db")), Some((1, key("db"))));
        assert_eq!(index.borrowers_of(&prod_db), vec![(1, key("db"))]);
        assert_eq!(index.borrowers_of(&(1, key("db"))), vec![(2, key("db"))]);
        index.set(&(1, key("db")), None);
        assert!(index.borrowers_of(&prod_db).is_empty());
    }

    #[test]
    fn a_long_chain_does_not_overflow() {
        let names: Vec<String> = (0..20_000).map(|i| format!("c{i:05}")).collect();
        let mut graph = DependencyGraph::default();
        for pair in names.windows(2) {
            graph.set(&key(&pair[0]), [key(&pair[1])].into());
        }
        assert!(graph.cycles().is_empty());
        graph.set(&key(&names[19_999]), [key(&names[0])].into());
        assert_eq!(graph.cycles()[0].len(), 20_001);
    }
}
