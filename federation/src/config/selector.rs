//! Comb patterns of the layer configuration (`borrow.combs`, `borrow.local`, `stubs`):
//! `NAME` or `NAMESPACE/NAME`, where `*` stands for any run of characters.

/// Why `pattern` cannot be a Comb pattern, if it cannot.
pub fn pattern_problem(pattern: &str) -> Option<String> {
    if pattern.is_empty() {
        return Some("an empty pattern; write a Comb name, NAMESPACE/NAME or *".to_string());
    }
    if pattern.matches('/').count() > 1 {
        return Some(format!(
            "'{pattern}' has more than one '/'; write NAME or NAMESPACE/NAME"
        ));
    }
    if pattern.split('/').any(str::is_empty) {
        return Some(format!(
            "'{pattern}' has an empty part; write NAME or NAMESPACE/NAME"
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '*' | '/');
    if !pattern.chars().all(allowed) {
        return Some(format!(
            "'{pattern}' holds characters a Comb name cannot have (letters, digits, -, _, . and the wildcard *)"
        ));
    }
    None
}

/// Whether any of `patterns` matches the Comb `namespace/name`. A pattern without `/` matches
/// the name in every namespace.
pub fn matches_any(patterns: &[String], namespace: &str, name: &str) -> bool {
    patterns
        .iter()
        .any(|pattern| match pattern.split_once('/') {
            Some((ns_pattern, name_pattern)) => {
                glob(ns_pattern, namespace) && glob(name_pattern, name)
            }
            None => glob(pattern, name),
        })
}

/// `*`-only glob matching: `*` is any run of characters, everything else matches itself.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let Some(first) = parts.next() else {
        return text.is_empty();
    };
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let middle: Vec<&str> = parts.collect();
    let Some((last, middle)) = middle.split_last() else {
        // No `*` at all: the whole text must have been the prefix.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let cases = [
            ("*", "anything", true),
            ("*", "", true),
            ("nats", "nats", true),
            ("nats", "nats2", false),
            ("nats*", "nats-monitor", true),
            ("*-db", "orders-db", true),
            ("*-db", "db", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
            ("ab*ba", "abba", true),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(glob(pattern, text), expected, "{pattern} ~ {text}");
        }
    }

    #[test]
    fn matches_names_and_namespaces() {
        let patterns = vec!["db".to_string(), "platform/nats*".to_string()];
        assert!(matches_any(&patterns, "anywhere", "db"));
        assert!(matches_any(&patterns, "platform", "nats-monitor"));
        assert!(!matches_any(&patterns, "staging", "nats"));
        assert!(!matches_any(&[], "platform", "db"));
    }

    #[test]
    fn problems() {
        assert_eq!(pattern_problem("*"), None);
        assert_eq!(pattern_problem("platform/db"), None);
        assert_eq!(
            pattern_problem("a/b/c").as_deref(),
            Some("'a/b/c' has more than one '/'; write NAME or NAMESPACE/NAME")
        );
        assert_eq!(
            pattern_problem("/db").as_deref(),
            Some("'/db' has an empty part; write NAME or NAMESPACE/NAME")
        );
        assert_eq!(
            pattern_problem("my db").as_deref(),
            Some(
                "'my db' holds characters a Comb name cannot have (letters, digits, -, _, . and the wildcard *)"
            )
        );
    }
}
