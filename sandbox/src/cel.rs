//! A custom resource's validation rules (`x-kubernetes-validations`), evaluated as
//! kube-apiserver evaluates them after its schema validation: each rule with `self` bound to
//! the value at its schema node (and `oldSelf` to the old one, for a transition rule), its
//! failure an error at that node with the rule's message, its `messageExpression`'s, or
//! `failed rule: <rule>`; an object or list is not printed, a scalar is.
//!
//! On an update, an error at a value that did not change is dropped, as kube-apiserver's
//! validation ratcheting does (an object keeps a rule added after it was written): values are
//! paired by map key, and by key for a `map` list; elsewhere the nearest paired ancestor
//! decides. Kubernetes' own CEL libraries (quantities, URLs, IPs, `isSorted`, ...) are not
//! here: a rule that uses them does not compile, and is left unchecked with a warning in the
//! log, never refused on the emulator's account. The cost budget is not counted.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use cel_interpreter::{Context, Program, Value as Cel};
use serde_json::Value;

use crate::api_error::FieldError;
use crate::schema::{has_cel_rules, join};

/// Errors of the rules in `schema` (a structural schema) for `object`, `old` the stored object
/// on an update.
pub fn validate(schema: &Value, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let node = Node {
        path: String::new(),
        old,
        parent_unchanged: false,
    };
    walk(schema, object, &node, &mut errors);
    errors
}

/// Where the walk is: the field path, the old value paired with this one (on an update), and
/// whether the nearest paired ancestor is unchanged.
struct Node<'a> {
    path: String,
    old: Option<&'a Value>,
    parent_unchanged: bool,
}

impl<'a> Node<'a> {
    /// Whether an error here is ratcheted away: the value is as it was.
    fn unchanged(&self, value: &Value) -> bool {
        match self.old {
            Some(old) => old == value,
            None => self.parent_unchanged,
        }
    }

    fn child(&self, path: String, old: Option<&'a Value>, unchanged: bool) -> Node<'a> {
        Node {
            path,
            old,
            parent_unchanged: unchanged,
        }
    }
}

fn walk(schema: &Value, value: &Value, node: &Node<'_>, errors: &mut Vec<FieldError>) {
    if value.is_null() {
        return;
    }
    let unchanged = node.unchanged(value);
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        // Ratcheting: a rule that does not compare with oldSelf holds a changed value only (so
        // a status write does not evaluate the spec's rules).
        if !uses_old_self(rule) && unchanged {
            continue;
        }
        if let Some(error) = check_rule(rule, schema, value, node) {
            errors.push(error);
        }
    }
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let Some(child_schema) = schema["properties"]
                    .get(key)
                    .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
                    .filter(|child| has_cel_rules(child))
                else {
                    continue;
                };
                let old = node.old.and_then(|old| old.get(key));
                let next = node.child(join(&node.path, key), old, unchanged);
                walk(child_schema, child, &next, errors);
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = schema.get("items").filter(|items| has_cel_rules(items)) else {
                return;
            };
            for (index, item) in items.iter().enumerate() {
                let old = node.old.and_then(|old| paired_item(schema, old, item));
                let next = node.child(format!("{}[{index}]", node.path), old, unchanged);
                walk(item_schema, item, &next, errors);
            }
        }
        _ => {}
    }
}

/// The old item a new one pairs with: by its keys in a `map` list, by its value in a `set`;
/// an atomic list's items pair with nothing.
fn paired_item<'a>(schema: &Value, old: &'a Value, item: &Value) -> Option<&'a Value> {
    let old_items = old.as_array()?;
    match schema["x-kubernetes-list-type"].as_str() {
        Some("map") => {
            let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            old_items
                .iter()
                .find(|candidate| keys.iter().all(|key| candidate.get(*key) == item.get(*key)))
        }
        Some("set") => old_items.iter().find(|candidate| *candidate == item),
        _ => None,
    }
}

fn uses_old_self(rule: &Value) -> bool {
    rule["rule"].as_str().is_some_and(|r| r.contains("oldSelf"))
}

/// The error of `rule` on `value`, if it fails.
fn check_rule(rule: &Value, schema: &Value, value: &Value, node: &Node<'_>) -> Option<FieldError> {
    let source = rule["rule"].as_str()?;
    let mut context = Context::default();
    let resource = node.path.is_empty() || schema["x-kubernetes-embedded-resource"] == true;
    context.add_variable_from_value("self", self_value(value, resource));
    if uses_old_self(rule) {
        // A transition rule runs only where there is an old value to compare with.
        context.add_variable_from_value("oldSelf", self_value(node.old?, resource));
    }
    let holds = match program(source)?.execute(&context) {
        Ok(Cel::Bool(holds)) => holds,
        Ok(other) => {
            let detail = format!("rule did not evaluate to a bool: {other:?}, rule: {source}");
            return Some(invalid_at(&node.path, schema, value, &detail));
        }
        Err(error) => {
            let detail = format!("{error} evaluating rule: {}", rule_words(rule));
            return Some(invalid_at(&node.path, schema, value, &detail));
        }
    };
    if holds {
        return None;
    }
    let detail = rule["messageExpression"]
        .as_str()
        .and_then(|expression| match program(expression)?.execute(&context) {
            Ok(Cel::String(message)) => Some(message.to_string()),
            _ => None,
        })
        .unwrap_or_else(|| match rule["message"].as_str().map(str::trim) {
            Some(message) if !message.is_empty() => message.to_string(),
            _ => format!("failed rule: {}", rule_words(rule)),
        });
    let path = match rule["fieldPath"].as_str() {
        Some(field_path) => format!("{}{field_path}", node.path),
        None => node.path.clone(),
    };
    Some(match rule["reason"].as_str() {
        Some("FieldValueForbidden") => FieldError::forbidden(field(&path), &detail),
        Some("FieldValueRequired") => FieldError::required(field(&path), &detail),
        Some("FieldValueDuplicate") => FieldError {
            reason: "FieldValueDuplicate",
            field: field(&path),
            message: format!("Duplicate value: {value}"),
        },
        _ => invalid_at(&path, schema, value, &detail),
    })
}

/// The rule's message, or the rule itself without one (kube-apiserver's `ruleErrorString`).
fn rule_words(rule: &Value) -> String {
    match rule["message"].as_str().map(str::trim) {
        Some(message) if !message.is_empty() => message.to_string(),
        _ => rule["rule"].as_str().unwrap_or_default().trim().to_string(),
    }
}

/// kube-apiserver prints the root's path, which is none, as `<nil>`.
fn field(path: &str) -> String {
    if path.is_empty() {
        "<nil>".to_string()
    } else {
        path.trim_start_matches('.').to_string()
    }
}

/// An `Invalid` error at `path`: with the value when it is a scalar, without it for an
/// object or a list.
fn invalid_at(path: &str, schema: &Value, value: &Value, detail: &str) -> FieldError {
    let compound = matches!(schema["type"].as_str(), Some("object" | "array"))
        || value.is_object()
        || value.is_array();
    if compound {
        FieldError {
            reason: "FieldValueInvalid",
            field: field(path),
            message: format!("Invalid value: {detail}"),
        }
    } else {
        FieldError::invalid(field(path), value, detail)
    }
}

/// Each rule compiled once per process; `None` for one this interpreter cannot compile.
fn program(source: &str) -> Option<Arc<Program>> {
    static PROGRAMS: LazyLock<RwLock<HashMap<String, Option<Arc<Program>>>>> =
        LazyLock::new(Default::default);
    if let Some(known) = PROGRAMS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(source)
    {
        return known.clone();
    }
    let compiled = match Program::compile(source) {
        Ok(program) => Some(Arc::new(program)),
        Err(error) => {
            tracing::warn!(rule = source, %error, "the emulator cannot evaluate this validation rule; it is not checked");
            None
        }
    };
    PROGRAMS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert(source.to_string(), compiled.clone());
    compiled
}

/// `self` for a rule: of a resource (the root, an embedded one) the metadata holds only `name`
/// and `generateName`, all a rule may read of it (so managedFields are never converted).
fn self_value(value: &Value, resource: bool) -> Cel {
    let Some(fields) = value.as_object().filter(|_| resource) else {
        return to_cel(value);
    };
    let entries: HashMap<String, Cel> = fields
        .iter()
        .map(|(key, field)| {
            let converted = if key == "metadata" {
                let kept: HashMap<String, Cel> = ["name", "generateName"]
                    .into_iter()
                    .filter_map(|name| Some((name.to_string(), to_cel(field.get(name)?))))
                    .collect();
                Cel::Map(kept.into())
            } else {
                to_cel(field)
            };
            (key.clone(), converted)
        })
        .collect();
    Cel::Map(entries.into())
}

/// A JSON value as CEL sees it: an integer is an `int`, as kube-apiserver converts it.
fn to_cel(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Cel::Int(i),
            (None, Some(u), _) => Cel::UInt(u),
            (_, _, f) => Cel::Float(f.unwrap_or_default()),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => {
            let entries: HashMap<String, Cel> =
                map.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            Cel::Map(entries.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "x-kubernetes-validations": [{"rule": "size(self.metadata.name) <= 5", "message": "a short name"}],
            "properties": {
                "metadata": {"type": "object"},
                "spec": {"type": "object", "properties": {
                    "names": {"type": "array", "items": {"type": "string",
                        "x-kubernetes-validations": [{"rule": "self.matches('^[a-z]+$')", "message": "lowercase letters"}]}},
                    "replicas": {"type": "integer",
                        "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "never fewer"}]},
                    "mode": {"type": "string",
                        "x-kubernetes-validations": [{"rule": "self != 'off'", "reason": "FieldValueForbidden", "messageExpression": "'mode ' + self + ' is not allowed'"}]},
                    "upstream": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "x-kubernetes-validations": [{"rule": "!has(self.class) || self.class in ['K8s', 'Static']"}]}
                }}
            }
        })
    }

    fn comb(name: &str, spec: Value) -> Value {
        json!({"metadata": {"name": name}, "spec": spec})
    }

    fn messages(errors: Vec<FieldError>) -> Vec<String> {
        errors
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn rules_refuse_as_kube_apiserver_words_it() {
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            (
                "all hold",
                comb("a", json!({"names": ["x"], "upstream": {"class": "K8s"}})),
                vec![],
            ),
            (
                "the root's rule",
                comb("toolong", json!({})),
                vec!["<nil>: Invalid value: a short name"],
            ),
            (
                "a list item's rule, with the value",
                comb("a", json!({"names": ["ok", "Bad"]})),
                vec!["spec.names[1]: Invalid value: \"Bad\": lowercase letters"],
            ),
            (
                "an object's rule without a message",
                comb("a", json!({"upstream": {"class": "Nope"}})),
                vec![
                    "spec.upstream: Invalid value: failed rule: !has(self.class) || self.class in ['K8s', 'Static']",
                ],
            ),
            (
                "a reason and a message expression",
                comb("a", json!({"mode": "off"})),
                vec!["spec.mode: Forbidden: mode off is not allowed"],
            ),
            (
                "a transition rule on create",
                comb("a", json!({"replicas": 1})),
                vec![],
            ),
        ];
        for (name, object, expected) in cases {
            assert_eq!(
                messages(validate(&schema(), &object, None)),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn an_update_is_held_to_rules_where_it_changes_something() {
        let old = comb("toolong", json!({"names": ["Bad"], "replicas": 3}));
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            // Ratcheting: what was there already is not refused again.
            ("nothing changed", old.clone(), vec![]),
            (
                "a new bad name beside the old one",
                comb("toolong", json!({"names": ["Bad", "Worse"], "replicas": 3})),
                vec![
                    // The root changed (its spec did): its rule holds it again.
                    "<nil>: Invalid value: a short name",
                    // An atomic list's items pair with nothing: the list changed.
                    "spec.names[0]: Invalid value: \"Bad\": lowercase letters",
                    "spec.names[1]: Invalid value: \"Worse\": lowercase letters",
                ],
            ),
            (
                "fewer replicas",
                comb("toolong", json!({"names": ["Bad"], "replicas": 2})),
                vec![
                    "<nil>: Invalid value: a short name",
                    "spec.replicas: Invalid value: 2: never fewer",
                ],
            ),
        ];
        for (name, object, expected) in cases {
            assert_eq!(
                messages(validate(&schema(), &object, Some(&old))),
                expected,
                "{name}"
            );
        }
    }
}
