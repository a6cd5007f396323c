//! Label and field selectors with kube-apiserver's grammar and matching rules.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::api_error::ApiError;
use crate::resources::ResourceType;

#[derive(Debug, Clone, PartialEq)]
pub enum LabelOp {
    Equals(String),
    NotEquals(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
    GreaterThan(i64),
    LessThan(i64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct LabelRequirement {
    pub key: String,
    pub op: LabelOp,
}

/// A parsed label selector: every requirement must hold (an empty one matches everything).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector {
    pub requirements: Vec<LabelRequirement>,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Equals,
    DoubleEquals,
    NotEquals,
    Bang,
    Open,
    Close,
    Comma,
    In,
    NotIn,
    Greater,
    Less,
}

fn describe(token: &Token) -> String {
    match token {
        Token::Ident(s) => s.clone(),
        Token::Equals => "=".into(),
        Token::DoubleEquals => "==".into(),
        Token::NotEquals => "!=".into(),
        Token::Bang => "!".into(),
        Token::Open => "(".into(),
        Token::Close => ")".into(),
        Token::Comma => ",".into(),
        Token::In => "in".into(),
        Token::NotIn => "notin".into(),
        Token::Greater => ">".into(),
        Token::Less => "<".into(),
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '<' | '>')
}

fn lex(input: &str) -> Vec<Token> {
    let chars: Vec<char> = input.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        let (token, width) = match (c, next) {
            ('=', Some('=')) => (Token::DoubleEquals, 2),
            ('!', Some('=')) => (Token::NotEquals, 2),
            ('=', _) => (Token::Equals, 1),
            ('!', _) => (Token::Bang, 1),
            ('(', _) => (Token::Open, 1),
            (')', _) => (Token::Close, 1),
            (',', _) => (Token::Comma, 1),
            ('>', _) => (Token::Greater, 1),
            ('<', _) => (Token::Less, 1),
            _ => {
                let start = i;
                while i < chars.len() && !chars[i].is_whitespace() && !is_special(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                tokens.push(match word.as_str() {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    _ => Token::Ident(word),
                });
                continue;
            }
        };
        tokens.push(token);
        i += width;
    }
    tokens
}

fn parse_error(detail: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("unable to parse requirement: {detail}"))
}

struct Parser {
    tokens: Vec<Token>,
    position: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.position)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.position).cloned();
        self.position += 1;
        token
    }

    fn identifier(&mut self, what: &str) -> Result<String, ApiError> {
        match self.next() {
            Some(Token::Ident(s)) => Ok(s),
            Some(other) => Err(parse_error(format!(
                "found '{}', expected: {what}",
                describe(&other)
            ))),
            None => Err(parse_error(format!("found '', expected: {what}"))),
        }
    }

    fn value_set(&mut self) -> Result<BTreeSet<String>, ApiError> {
        match self.next() {
            Some(Token::Open) => {}
            Some(other) => {
                return Err(parse_error(format!(
                    "found '{}', expected: '('",
                    describe(&other)
                )));
            }
            None => return Err(parse_error("found '', expected: '('")),
        }
        let mut values = BTreeSet::new();
        loop {
            match self.next() {
                Some(Token::Close) => break,
                Some(Token::Ident(v)) => {
                    values.insert(v);
                    match self.next() {
                        Some(Token::Comma) => {}
                        Some(Token::Close) => break,
                        Some(other) => {
                            return Err(parse_error(format!(
                                "found '{}', expected: ',' or ')'",
                                describe(&other)
                            )));
                        }
                        None => return Err(parse_error("found '', expected: ')'")),
                    }
                }
                // `(a,,b)` and `(,a)` hold the empty value.
                Some(Token::Comma) => {
                    values.insert(String::new());
                }
                Some(other) => {
                    return Err(parse_error(format!(
                        "found '{}', expected: ',', ')' or identifier",
                        describe(&other)
                    )));
                }
                None => return Err(parse_error("found '', expected: ')'")),
            }
        }
        if values.is_empty() {
            return Err(parse_error(
                "for 'in', 'notin' operators, values set can't be empty",
            ));
        }
        Ok(values)
    }

    /// A single value after `=`, `==` or `!=`; absent means the empty value (`app=`).
    fn single_value(&mut self) -> String {
        match self.peek() {
            Some(Token::Ident(_)) => match self.next() {
                Some(Token::Ident(v)) => v,
                _ => String::new(),
            },
            _ => String::new(),
        }
    }

    fn requirement(&mut self) -> Result<LabelRequirement, ApiError> {
        if self.peek() == Some(&Token::Bang) {
            self.next();
            let key = self.identifier("identifier")?;
            validate_label_key(&key)?;
            return Ok(LabelRequirement {
                key,
                op: LabelOp::DoesNotExist,
            });
        }
        let key = self.identifier("identifier")?;
        validate_label_key(&key)?;
        let op = match self.peek() {
            None | Some(Token::Comma) => LabelOp::Exists,
            Some(_) => match self.next() {
                Some(Token::Equals | Token::DoubleEquals) => LabelOp::Equals(self.single_value()),
                Some(Token::NotEquals) => LabelOp::NotEquals(self.single_value()),
                Some(Token::In) => LabelOp::In(self.value_set()?),
                Some(Token::NotIn) => LabelOp::NotIn(self.value_set()?),
                Some(token @ (Token::Greater | Token::Less)) => {
                    let raw = self.identifier("integer")?;
                    let number: i64 = raw.parse().map_err(|_| {
                        parse_error(format!(
                            "for 'Gt', 'Lt' operators, the value must be an integer: {raw:?}"
                        ))
                    })?;
                    if token == Token::Greater {
                        LabelOp::GreaterThan(number)
                    } else {
                        LabelOp::LessThan(number)
                    }
                }
                Some(other) => {
                    return Err(parse_error(format!(
                        "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                        describe(&other)
                    )));
                }
                None => LabelOp::Exists,
            },
        };
        match &op {
            LabelOp::Equals(v) | LabelOp::NotEquals(v) => validate_label_value(v)?,
            LabelOp::In(values) | LabelOp::NotIn(values) => {
                for v in values {
                    validate_label_value(v)?;
                }
            }
            _ => {}
        }
        Ok(LabelRequirement { key, op })
    }
}

/// The rules of a label key: an optional DNS-subdomain prefix and a name of at most 63 chars.
pub fn label_key_error(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Some(
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into(),
        );
    }
    if name.is_empty() {
        return Some("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Some("name part must be no more than 63 characters".into());
    }
    if !is_qualified_name_part(name) {
        return Some("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into());
    }
    None
}

/// The rules of a label value: empty, or at most 63 chars of the qualified-name alphabet.
pub fn label_value_error(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    if value.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    if !is_qualified_name_part(value) {
        return Some("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into());
    }
    None
}

fn validate_label_key(key: &str) -> Result<(), ApiError> {
    match label_key_error(key) {
        Some(e) => Err(parse_error(format!("invalid label key {key:?}: {e}"))),
        None => Ok(()),
    }
}

fn validate_label_value(value: &str) -> Result<(), ApiError> {
    match label_value_error(value) {
        Some(e) => Err(parse_error(format!("invalid label value: {value:?}: {e}"))),
        None => Ok(()),
    }
}

fn is_qualified_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    let alnum = |b: u8| b.is_ascii_alphanumeric();
    !bytes.is_empty()
        && alnum(bytes[0])
        && alnum(bytes[bytes.len() - 1])
        && bytes
            .iter()
            .all(|b| alnum(*b) || matches!(b, b'-' | b'_' | b'.'))
}

/// RFC 1123 subdomain: lowercase alphanumerics, '-' and '.', at most 253 chars.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && !s.is_empty() && s.split('.').all(is_dns_label_chars)
}

/// RFC 1123 label: lowercase alphanumerics and '-', at most 63 chars.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && is_dns_label_chars(s)
}

fn is_dns_label_chars(s: &str) -> bool {
    let bytes = s.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && alnum(bytes[0])
        && alnum(bytes[bytes.len() - 1])
        && bytes.iter().all(|b| alnum(*b) || *b == b'-')
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    pub fn parse(input: &str) -> Result<Self, ApiError> {
        let mut parser = Parser {
            tokens: lex(input),
            position: 0,
        };
        let mut requirements = Vec::new();
        if parser.peek().is_none() {
            return Ok(LabelSelector { requirements });
        }
        loop {
            requirements.push(parser.requirement()?);
            match parser.next() {
                None => break,
                Some(Token::Comma) => {}
                Some(other) => {
                    return Err(parse_error(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        describe(&other)
                    )));
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// Builds the selector of a `metav1.LabelSelector` object (matchLabels + matchExpressions).
    pub fn from_label_selector_object(selector: &Value) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        if let Some(labels) = selector["matchLabels"].as_object() {
            for (key, value) in labels {
                requirements.push(LabelRequirement {
                    key: key.clone(),
                    op: LabelOp::Equals(value.as_str().unwrap_or_default().to_string()),
                });
            }
        }
        if let Some(expressions) = selector["matchExpressions"].as_array() {
            for expression in expressions {
                let key = expression["key"].as_str().unwrap_or_default().to_string();
                let values: BTreeSet<String> = expression["values"]
                    .as_array()
                    .map(|v| {
                        v.iter()
                            .filter_map(|s| s.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                let op = match expression["operator"].as_str() {
                    Some("In") => LabelOp::In(values),
                    Some("NotIn") => LabelOp::NotIn(values),
                    Some("Exists") => LabelOp::Exists,
                    Some("DoesNotExist") => LabelOp::DoesNotExist,
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "{other:?} is not a valid label selector operator"
                        )));
                    }
                };
                requirements.push(LabelRequirement { key, op });
            }
        }
        Ok(LabelSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object["metadata"]["labels"].as_object();
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.requirements.iter().all(|r| {
            let value = label(&r.key);
            match &r.op {
                LabelOp::Equals(v) => value == Some(v.as_str()),
                LabelOp::NotEquals(v) => value != Some(v.as_str()),
                LabelOp::In(set) => value.is_some_and(|x| set.contains(x)),
                LabelOp::NotIn(set) => !value.is_some_and(|x| set.contains(x)),
                LabelOp::Exists => value.is_some(),
                LabelOp::DoesNotExist => value.is_none(),
                LabelOp::GreaterThan(n) => value
                    .and_then(|x| x.parse::<i64>().ok())
                    .is_some_and(|x| x > *n),
                LabelOp::LessThan(n) => value
                    .and_then(|x| x.parse::<i64>().ok())
                    .is_some_and(|x| x < *n),
            }
        })
    }
}

/// One `field=value` or `field!=value` term of a field selector.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldRequirement {
    pub field: String,
    pub value: String,
    pub equal: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldSelector {
    pub requirements: Vec<FieldRequirement>,
}

/// Fields beyond metadata.name/namespace that kube-apiserver lets a kind be selected by.
fn extra_fields(rt: &ResourceType) -> &'static [&'static str] {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "Event") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "Event") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "Secret") => &["type"],
        ("", "Namespace") => &["status.phase"],
        ("", "Node") => &["spec.unschedulable"],
        ("", "Service") => &["spec.clusterIP", "spec.type"],
        ("apps", "ReplicaSet") => &["status.replicas"],
        ("batch", "Job") => &["status.successful"],
        _ => &[],
    }
}

/// The string form of a field, as kube-apiserver's field sets hold it (missing = empty).
fn field_value(object: &Value, field: &str) -> String {
    let value = match field {
        // Core events are selected by `source` meaning the reporting component.
        "source" => object.pointer("/source/component"),
        _ => {
            let pointer = format!("/{}", field.replace('.', "/"));
            object.pointer(&pointer)
        }
    };
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn split_unescaped(input: &str, separator: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut escaped = false;
    for c in input.chars() {
        if escaped {
            current.push('\\');
            current.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == separator {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    if escaped {
        current.push('\\');
    }
    parts.push(current);
    parts
}

fn unescape(value: &str) -> Result<String, ApiError> {
    let mut out = String::new();
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => {
                    return Err(ApiError::bad_request(format!(
                        "invalid field selector: invalid escape sequence: \\{e}"
                    )));
                }
                None => {
                    return Err(ApiError::bad_request(
                        "invalid field selector: unterminated escape sequence",
                    ));
                }
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter and checks its fields are selectable for `rt`.
    pub fn parse(input: &str, rt: &ResourceType) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        for term in split_unescaped(input, ',') {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let (field, value, equal) = if let Some((f, v)) = term.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, v, true)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{input}'; can't understand '{term}'"
                )));
            };
            let field = field.trim().to_string();
            let known = field == "metadata.name"
                || field == "metadata.namespace"
                || extra_fields(rt).contains(&field.as_str());
            if !known {
                // Kinds with fields of their own convert labels themselves and say so in
                // their old words; the rest go through the generic check, which lists.
                let message = if extra_fields(rt).is_empty() {
                    format!(
                        r#"{field:?} is not a known field selector: only "metadata.name", "metadata.namespace""#
                    )
                } else {
                    format!("field label not supported: {field}")
                };
                return Err(ApiError::bad_request(message));
            }
            requirements.push(FieldRequirement {
                field,
                value: unescape(value.trim())?,
                equal,
            });
        }
        Ok(FieldSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.requirements
            .iter()
            .all(|r| (field_value(object, &r.field) == r.value) == r.equal)
    }

    /// The single `metadata.name=x` this selector pins, if it does (watch of one object).
    pub fn exact_name(&self) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == "metadata.name" && r.equal)
            .map(|r| r.value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin;
    use serde_json::json;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"name": "x", "namespace": "default", "labels": labels}})
    }

    #[test]
    fn label_selector_grammar() {
        let web = labelled(json!({"app": "web", "tier": "front", "rank": "5", "empty": ""}));
        let bare = labelled(json!({}));
        // (selector, matches web, matches bare)
        let cases = [
            ("", true, true),
            ("app=web", true, false),
            ("app==web", true, false),
            ("app = web", true, false),
            ("app!=web", false, true),
            ("app!=db", true, true),
            ("app in (web, db)", true, false),
            ("app in (db)", false, false),
            ("app notin (db)", true, true),
            ("app notin (web,db)", false, true),
            ("app", true, false),
            ("!app", false, true),
            ("app,tier=front", true, false),
            ("app=web,tier!=front", false, false),
            ("rank>4", true, false),
            ("rank<5", false, false),
            ("empty=", true, false),
            ("example.com/team", false, false),
            ("app in (web),!missing", true, false),
        ];
        for (selector, on_web, on_bare) in cases {
            let parsed =
                LabelSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
            assert_eq!(parsed.matches(&web), on_web, "{selector} on web");
            assert_eq!(parsed.matches(&bare), on_bare, "{selector} on bare");
        }
    }

    #[test]
    fn bad_label_selectors_are_bad_requests() {
        for selector in [
            "app in web",
            "app in ()",
            "app=web=x",
            "=web",
            "app in (web",
            "Bad Key=1",
            "-app=x",
            "app=-bad",
            "rank>x",
            "app,",
        ] {
            let error = LabelSelector::parse(selector).expect_err(selector);
            assert_eq!(error.code, 400, "{selector}");
            assert!(
                error.message.starts_with("unable to parse requirement"),
                "{selector}: {}",
                error.message
            );
        }
    }

    #[test]
    fn label_selector_object() {
        let selector = LabelSelector::from_label_selector_object(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]
        }))
        .expect("valid");
        assert!(selector.matches(&labelled(json!({"app": "web", "tier": "front"}))));
        assert!(!selector.matches(&labelled(json!({"app": "web"}))));
    }

    #[test]
    fn field_selectors() {
        let pods = builtin("", "Pod").expect("pods");
        let cms = builtin("", "ConfigMap").expect("cms");
        let pod = json!({"metadata": {"name": "a", "namespace": "ns1"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let cases = [
            ("metadata.name=a", true),
            ("metadata.name==a", true),
            ("metadata.name!=a", false),
            ("metadata.namespace=ns1,metadata.name=a", true),
            ("metadata.namespace=ns2", false),
            ("status.phase=Running", true),
            ("spec.nodeName=", false),
            ("spec.schedulerName=", true),
        ];
        for (selector, expected) in cases {
            let parsed = FieldSelector::parse(selector, &pods).expect(selector);
            assert_eq!(parsed.matches(&pod), expected, "{selector}");
        }
        let error =
            FieldSelector::parse("status.phase=Running", &cms).expect_err("not a configmap field");
        let unknown = FieldSelector::parse("spec.bogus=x", &pods).expect_err("not a pod field");
        assert_eq!(unknown.message, "field label not supported: spec.bogus");
        assert_eq!(
            error.message,
            r#""status.phase" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        assert_eq!(
            FieldSelector::parse("metadata.name=a\\,b", &cms)
                .expect("escaped")
                .requirements[0]
                .value,
            "a,b"
        );
        assert!(FieldSelector::parse("metadata.name", &cms).is_err());
    }
}
