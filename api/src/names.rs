//! Kubernetes names, checked before they reach a request path. A name a Comb's author wrote
//! (a manifest's `metadata.name`, a Secret to replicate, a peer Comb) becomes a path segment
//! of a request (`/api/v1/namespaces/NS/secrets/NAME`), and the client does not escape it:
//! `db-password?x=1` would read `db-password`. So every such name is held to what the API server
//! accepts as a name, which needs no escaping.

/// A DNS-1123 label: lowercase letters, digits and `-`, alphanumeric at both ends, at most 63
/// characters (a namespace, a Service).
pub fn is_dns1123_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let end_ok = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(end_ok)
        && bytes.last().is_some_and(end_ok)
        && bytes.iter().all(|b| end_ok(b) || *b == b'-')
}

/// A DNS-1123 subdomain: DNS-1123 labels joined by `.`, at most 253 characters (the name of
/// most objects: a Secret, a ConfigMap, a Deployment, a custom resource).
pub fn is_dns1123_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns1123_label)
}

/// Why `name` cannot be the name of an object of API group `group`, or `None` when it can.
/// RBAC objects are named more freely by the API server (`system:aggregate-to-edit`): letters,
/// digits, `-`, `.`, `_` and `:`, never `.` or `..` alone. Every other object's name is held to
/// a DNS-1123 subdomain, as the API server holds custom resources and most built-in kinds.
pub fn object_name_problem(group: &str, name: &str) -> Option<String> {
    if group == "rbac.authorization.k8s.io" {
        let safe = name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':'));
        return (!safe || name.is_empty() || name == "." || name == ".." || name.len() > 253).then(
            || {
                format!(
                    "'{name}' is not a Kubernetes object name (letters, digits, -, ., _ and :, \
                     at most 253 characters)"
                )
            },
        );
    }
    (!is_dns1123_subdomain(name)).then(|| {
        format!(
            "'{name}' is not a Kubernetes object name (a DNS-1123 subdomain: lowercase letters, \
             digits, - and ., alphanumeric at both ends, at most 253 characters)"
        )
    })
}

/// Why `namespace` cannot be a namespace, or `None` when it can.
pub fn namespace_problem(namespace: &str) -> Option<String> {
    (!is_dns1123_label(namespace)).then(|| {
        format!(
            "'{namespace}' is not a namespace name (a DNS-1123 label: lowercase letters, digits \
             and -, alphanumeric at both ends, at most 63 characters)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_reach_a_path() {
        let long = "a".repeat(254);
        for (group, name, fine) in [
            ("", "db-password", true),
            ("", "db.password", true),
            ("", "db-password?x=1", false),
            ("", "db-password#x", false),
            ("", "../other", false),
            ("", "a/b", false),
            ("", "a%2Fb", false),
            ("", "DbPassword", false),
            ("", "", false),
            ("", "-db", false),
            ("", long.as_str(), false),
            ("example.com", "widget-1", true),
            (
                "rbac.authorization.k8s.io",
                "system:aggregate-to-edit",
                true,
            ),
            ("rbac.authorization.k8s.io", "MyRole_2", true),
            ("rbac.authorization.k8s.io", "..", false),
            ("rbac.authorization.k8s.io", "a?b", false),
            ("rbac.authorization.k8s.io", "a/b", false),
        ] {
            assert_eq!(
                object_name_problem(group, name).is_none(),
                fine,
                "{group} {name}"
            );
        }
        assert_eq!(
            object_name_problem("", "db-password?x=1").as_deref(),
            Some(
                "'db-password?x=1' is not a Kubernetes object name (a DNS-1123 subdomain: \
                 lowercase letters, digits, - and ., alphanumeric at both ends, at most 253 \
                 characters)"
            )
        );
        assert!(namespace_problem("team-a").is_none());
        for bad in ["team.a", "Team", "team-a?x", "", &"a".repeat(64)] {
            assert!(namespace_problem(bad).is_some(), "{bad}");
        }
    }
}
