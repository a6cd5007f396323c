//! How a Comb is named inside one layer: [`CombKey`], the namespace and name the controller's
//! queue, dependency graph and store key it by, and [`dependency_key`], the Comb a `dependsOn`
//! entry names. The controller, the admission webhook and `comb check` read `dependsOn` the same
//! way through it.

use std::fmt;

use serde::Serialize;

/// A Comb of a layer: namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct CombKey {
    pub namespace: String,
    pub name: String,
}

impl CombKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> CombKey {
        CombKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for CombKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The Comb a `dependsOn` entry names inside a layer: `name` in the Comb's own namespace,
/// `ns/name` in `ns`. `None` for an entry that cannot name a Comb (the step reports it).
pub fn dependency_key(reference: &str, namespace: &str) -> Option<CombKey> {
    let (ns, name) = match reference.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => (namespace, reference),
    };
    (!ns.is_empty() && !name.is_empty() && !name.contains('/')).then(|| CombKey::new(ns, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependency_keys() {
        for (reference, expected) in [
            ("db", Some(("platform", "db"))),
            ("infra/vault", Some(("infra", "vault"))),
            ("a/b/c", None),
            ("/db", None),
            ("db/", None),
            ("", None),
        ] {
            assert_eq!(
                dependency_key(reference, "platform"),
                expected.map(|(namespace, name)| CombKey::new(namespace, name)),
                "{reference:?}"
            );
        }
        assert_eq!(CombKey::new("infra", "vault").to_string(), "infra/vault");
    }
}
