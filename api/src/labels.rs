//! Label and annotation keys a Comb puts on its resources, all derived from one prefix.

use std::collections::BTreeMap;

/// The prefix of every key unless configured otherwise (trailing `/` included).
pub const DEFAULT_PREFIX: &str = "comb.internal/";
/// The label that names who manages a resource.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// The keys of a label prefix `P`: `P+comb`, `P+comb-namespace`, `P+restartedAt`,
/// `P+applied-digest`, `P+keep`, `P+adopt`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelKeys {
    prefix: String,
    name_label: String,
    namespace_label: String,
    restart_annotation: String,
    digest_annotation: String,
    keep_annotation: String,
    adopt_annotation: String,
}

impl Default for LabelKeys {
    fn default() -> Self {
        LabelKeys::new(DEFAULT_PREFIX)
    }
}

impl LabelKeys {
    /// The keys of `prefix`, which should end in `/` (e.g. `example.com/`).
    pub fn new(prefix: &str) -> LabelKeys {
        LabelKeys {
            prefix: prefix.to_string(),
            name_label: format!("{prefix}comb"),
            namespace_label: format!("{prefix}comb-namespace"),
            restart_annotation: format!("{prefix}restartedAt"),
            digest_annotation: format!("{prefix}applied-digest"),
            keep_annotation: format!("{prefix}keep"),
            adopt_annotation: format!("{prefix}adopt"),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    /// The label carrying the Comb's name.
    pub fn name_label(&self) -> &str {
        &self.name_label
    }
    /// The label carrying the Comb's namespace; it tells same-named Combs of different
    /// namespaces apart where they share resources.
    pub fn namespace_label(&self) -> &str {
        &self.namespace_label
    }
    /// The Pod template annotation `restart` sets and deploy keeps.
    pub fn restart_annotation(&self) -> &str {
        &self.restart_annotation
    }
    /// The annotation holding the digest of the manifest a resource was applied from.
    pub fn digest_annotation(&self) -> &str {
        &self.digest_annotation
    }
    /// The annotation (`"true"`) that keeps a resource when its Comb is deleted.
    pub fn keep_annotation(&self) -> &str {
        &self.keep_annotation
    }
    /// The annotation (`NAMESPACE/NAME`) by which whoever may write an object hands it to a
    /// Comb, as Helm's `meta.helm.sh/release-name` and `-namespace` hand one to a release
    /// ([`crate::ownership`]).
    pub fn adopt_annotation(&self) -> &str {
        &self.adopt_annotation
    }

    /// The labels every resource of the Comb gets, Pod templates of workloads included.
    pub fn comb_labels(
        &self,
        name: &str,
        namespace: &str,
        managed_by: &str,
    ) -> BTreeMap<String, String> {
        BTreeMap::from([
            (self.name_label.clone(), name.to_string()),
            (self.namespace_label.clone(), namespace.to_string()),
            (MANAGED_BY_LABEL.to_string(), managed_by.to_string()),
        ])
    }

    /// `P+comb=<name>,P+comb-namespace=<namespace>`: everything of this Comb.
    pub fn label_selector(&self, name: &str, namespace: &str) -> String {
        format!(
            "{}={name},{}={namespace}",
            self.name_label, self.namespace_label
        )
    }

    /// `P+comb=<name>`: the name label only, as status and deploy read live objects (a
    /// same-named Comb of another namespace that applied a shared resource last still counts).
    pub fn name_selector(&self, name: &str) -> String {
        format!("{}={name}", self.name_label)
    }

    /// The annotation (`"true"`) by which a Secret or ConfigMap opts in to being replicated:
    /// without it, no Comb gets a copy (as Linkerd's `mirror.linkerd.io/exported`).
    pub fn replicable_annotation(&self) -> String {
        format!("{}replicable", self.prefix)
    }
}

/// Whether `value` can be a label value the way a Comb name must:
/// `\A[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?\z`, at most 63 characters.
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let end_ok = |b: &u8| b.is_ascii_alphanumeric();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(end_ok)
        && bytes.last().is_some_and(end_ok)
        && bytes
            .iter()
            .all(|b| end_ok(b) || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_prefix() {
        let keys = LabelKeys::default();
        assert_eq!(keys.name_label(), "comb.internal/comb");
        assert_eq!(keys.namespace_label(), "comb.internal/comb-namespace");
        assert_eq!(keys.restart_annotation(), "comb.internal/restartedAt");
        assert_eq!(keys.digest_annotation(), "comb.internal/applied-digest");
        assert_eq!(keys.keep_annotation(), "comb.internal/keep");
        assert_eq!(keys.adopt_annotation(), "comb.internal/adopt");
        assert_eq!(
            keys.label_selector("nats", "platform"),
            "comb.internal/comb=nats,comb.internal/comb-namespace=platform"
        );
        assert_eq!(keys.name_selector("nats"), "comb.internal/comb=nats");
        let custom = LabelKeys::new("example.com/");
        assert_eq!(custom.restart_annotation(), "example.com/restartedAt");
        assert_eq!(custom.digest_annotation(), "example.com/applied-digest");
        assert_eq!(
            serde_json::to_string(&keys.comb_labels("nats", "platform", "comb")).unwrap(),
            r#"{"app.kubernetes.io/managed-by":"comb","comb.internal/comb":"nats","comb.internal/comb-namespace":"platform"}"#
        );
    }

    #[test]
    fn label_values() {
        let long_ok = "x".repeat(63);
        for valid in ["nats", "a", "Nats_2.b-c", long_ok.as_str()] {
            assert!(is_label_value(valid), "{valid}");
        }
        let long_bad = "x".repeat(64);
        for invalid in [long_bad.as_str(), "nats!", "-nats", "nats.", "na ts", ""] {
            assert!(!is_label_value(invalid), "{invalid}");
        }
    }
}
