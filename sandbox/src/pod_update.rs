//! What an update of a Pod may change, as kube-apiserver's `ValidatePodUpdate` decides: the
//! images of its containers, a shorter `activeDeadlineSeconds`, added tolerations, removed
//! scheduling gates (and, while gated, added node selectors and node affinity), and nothing else
//! of its spec. The node a Pod runs on is set by the scheduler's binding, never by an update, so
//! a replace of a bound Pod from a manifest without `spec.nodeName` is refused too.
//!
//! The values compared are the stored JSON after defaulting, where kube-apiserver compares typed
//! structs with `Semantic.DeepEqual`: a missing field, `null`, `[]` and `{}` are all equal here,
//! as a nil and an empty slice or map are there.

use serde_json::{Value, json};

use crate::api_error::FieldError;

/// An absent field.
const NULL: &Value = &Value::Null;

/// kube-apiserver's `updatablePodSpecFields`, joined as its message joins them.
const UPDATABLE_FIELDS: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,\
`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),\
`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// The field errors of replacing `old`'s spec with `new`'s (both whole Pods), in
/// kube-apiserver's order; it stops where it stops.
pub fn errors(old: &Value, new: &Value) -> Vec<FieldError> {
    let (old, new) = (&old["spec"], &new["spec"]);
    let mut errors = Vec::new();
    for list in ["containers", "initContainers"] {
        let (found, stop) = container_updates(list, &old[list], &new[list]);
        errors.extend(found);
        if stop {
            return errors;
        }
    }
    if let Some((error, stop)) =
        active_deadline_update(&old["activeDeadlineSeconds"], &new["activeDeadlineSeconds"])
    {
        errors.push(error);
        if stop {
            return errors;
        }
    }
    errors.extend(only_added_tolerations(
        &old["tolerations"],
        &new["tolerations"],
    ));
    errors.extend(only_deleted_scheduling_gates(
        &old["schedulingGates"],
        &new["schedulingGates"],
    ));
    if same(old, new) {
        return errors;
    }

    // What may change is set back to the old values; whatever differs after that may not.
    let mut munged = new.clone();
    for list in ["containers", "initContainers"] {
        let old_items = items(&old[list]);
        if let Some(containers) = munged[list].as_array_mut() {
            for (container, before) in containers.iter_mut().zip(old_items) {
                container["image"] = before["image"].clone();
            }
        }
    }
    for field in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
        set(&mut munged, field, old[field].clone());
    }
    let old_grace = old["terminationGracePeriodSeconds"].as_i64();
    if old_grace.is_some_and(|g| g < 0) && munged["terminationGracePeriodSeconds"] == json!(1) {
        set(
            &mut munged,
            "terminationGracePeriodSeconds",
            old["terminationGracePeriodSeconds"].clone(),
        );
    }
    if !items(&old["schedulingGates"]).is_empty() {
        errors.extend(gated_mutations(old, &mut munged));
    }
    if !same(&munged, old) {
        let mut changes = Vec::new();
        describe_changes("spec", old, &munged, &mut changes);
        errors.push(FieldError::forbidden(
            "spec",
            &format!(
                "pod updates may not change fields other than {UPDATABLE_FIELDS}\n{}",
                changes.join("\n")
            ),
        ));
    }
    errors
}

/// `ValidateContainerUpdates`: the errors, and whether validation stops there (a container was
/// added or removed).
fn container_updates(list: &str, old: &Value, new: &Value) -> (Vec<FieldError>, bool) {
    let (old, new) = (items(old), items(new));
    if old.len() != new.len() {
        let error = FieldError::forbidden(
            format!("spec.{list}"),
            "pod updates may not add or remove containers",
        );
        return (vec![error], true);
    }
    let mut errors = Vec::new();
    for (index, container) in new.iter().enumerate() {
        let image = container["image"].as_str().unwrap_or_default();
        let field = format!("spec.{list}[{index}].image");
        if image.is_empty() {
            errors.push(FieldError::required(field.clone(), ""));
        }
        if image.trim().len() != image.len() {
            errors.push(FieldError::invalid(
                field,
                &container["image"],
                "must not have leading or trailing whitespace",
            ));
        }
    }
    (errors, false)
}

/// The one error of a change of `activeDeadlineSeconds`, and whether validation stops there:
/// it may be set, or lowered, but not raised or removed.
fn active_deadline_update(old: &Value, new: &Value) -> Option<(FieldError, bool)> {
    const FIELD: &str = "spec.activeDeadlineSeconds";
    match (old.as_i64(), new.as_i64()) {
        (_, Some(seconds)) if !(0..=i64::from(i32::MAX)).contains(&seconds) => Some((
            FieldError::invalid(
                FIELD,
                new,
                &format!("must be between 0 and {}, inclusive", i32::MAX),
            ),
            true,
        )),
        (Some(before), Some(seconds)) if before < seconds => Some((
            FieldError::invalid(FIELD, new, "must be less than or equal to previous value"),
            true,
        )),
        (Some(_), None) => Some((
            FieldError::invalid(
                FIELD,
                &Value::Null,
                "must not update from a positive integer to nil value",
            ),
            false,
        )),
        _ => None,
    }
}

/// Every old toleration must still be there, its `tolerationSeconds` aside.
fn only_added_tolerations(old: &Value, new: &Value) -> Option<FieldError> {
    let without_seconds = |toleration: &Value| {
        let mut toleration = toleration.clone();
        set(&mut toleration, "tolerationSeconds", Value::Null);
        toleration
    };
    let new: Vec<Value> = items(new).iter().map(without_seconds).collect();
    let kept = items(old).iter().all(|before| {
        new.iter()
            .any(|after| same(&without_seconds(before), after))
    });
    (!kept).then(|| {
        FieldError::forbidden(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        )
    })
}

/// Scheduling gates may only be removed.
fn only_deleted_scheduling_gates(old: &Value, new: &Value) -> Vec<FieldError> {
    let before: Vec<&Value> = items(old).iter().map(|gate| &gate["name"]).collect();
    items(new)
        .iter()
        .enumerate()
        .filter(|(_, gate)| !before.contains(&&gate["name"]))
        .map(|(index, gate)| {
            FieldError::forbidden(
                format!("spec.schedulingGates[{index}].name"),
                &format!(
                    "only deletion is allowed, but found new scheduling gate '{}'",
                    gate["name"].as_str().unwrap_or_default()
                ),
            )
        })
        .collect()
}

/// A Pod held by scheduling gates may gain node selectors and node affinity terms' requirements
/// (nothing else of them changes); `munged` gets the old ones back once they are judged.
fn gated_mutations(old: &Value, munged: &mut Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let selector = &munged["nodeSelector"];
    if !same(selector, &old["nodeSelector"]) {
        let removed_or_changed = old["nodeSelector"]
            .as_object()
            .into_iter()
            .flatten()
            .any(|(key, value)| selector.get(key) != Some(value));
        if removed_or_changed {
            errors.push(FieldError::invalid(
                "spec.nodeSelector",
                selector,
                "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
            ));
        }
        set(munged, "nodeSelector", old["nodeSelector"].clone());
    }
    let old_affinity = &old["affinity"]["nodeAffinity"];
    if !same(&munged["affinity"]["nodeAffinity"], old_affinity) {
        errors.extend(node_affinity_mutation(
            old_affinity,
            &munged["affinity"]["nodeAffinity"],
        ));
        if !munged["affinity"].is_object() {
            munged["affinity"] = json!({});
        }
        set(
            &mut munged["affinity"],
            "nodeAffinity",
            old_affinity.clone(),
        );
    }
    errors
}

/// `validateNodeAffinityMutation`: required node selector terms, once there are any, keep
/// their number and only gain requirements.
fn node_affinity_mutation(old: &Value, new: &Value) -> Vec<FieldError> {
    const TERMS: &str = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
    let required = "requiredDuringSchedulingIgnoredDuringExecution";
    if is_empty(&old[required]) {
        return Vec::new();
    }
    let old_terms = items(&old[required]["nodeSelectorTerms"]);
    let new_terms = items(&new[required]["nodeSelectorTerms"]);
    if !old_terms.is_empty() && old_terms.len() != new_terms.len() {
        return vec![FieldError::invalid(
            TERMS,
            &Value::Array(new_terms.to_vec()),
            "no additions/deletions to non-empty NodeSelectorTerms list are allowed",
        )];
    }
    old_terms
        .iter()
        .zip(new_terms)
        .enumerate()
        .filter(|(_, (before, after))| !term_only_gains(before, after))
        .map(|(index, (_, after))| {
            FieldError::invalid(
                format!("{TERMS}[{index}]"),
                after,
                "only additions are allowed (no mutations or deletions)",
            )
        })
        .collect()
}

/// `validateNodeSelectorTermHasOnlyAdditions`.
fn term_only_gains(old: &Value, new: &Value) -> bool {
    let lists = ["matchExpressions", "matchFields"];
    if lists.iter().all(|list| items(&old[*list]).is_empty())
        && lists.iter().any(|list| !items(&new[*list]).is_empty())
    {
        return false;
    }
    lists.iter().all(|list| {
        let (before, after) = (items(&old[*list]), items(&new[*list]));
        after.len() >= before.len()
            && before
                .iter()
                .zip(after)
                .all(|(before, after)| same(before, after))
    })
}

/// Equal as kube-apiserver's `Semantic.DeepEqual` sees typed values: an absent field, `null`,
/// `[]` and `{}` are the same empty value.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        _ if is_empty(a) && is_empty(b) => true,
        (Value::Object(a), Value::Object(b)) => a
            .keys()
            .chain(b.keys())
            .all(|key| same(a.get(key).unwrap_or(NULL), b.get(key).unwrap_or(NULL))),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b))
        }
        _ => a == b,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.is_empty(),
        _ => false,
    }
}

fn items(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// Sets `field` of the object `target`, or removes it when `value` is null.
fn set(target: &mut Value, field: &str, value: Value) {
    if let Some(fields) = target.as_object_mut() {
        if value.is_null() {
            fields.remove(field);
        } else {
            fields.insert(field.to_string(), value);
        }
    }
}

/// One line per changed field, `path: old -> new`, where kube-apiserver prints a Go diff of the
/// two specs: the part of the message after its first line is the emulator's own.
fn describe_changes(path: &str, old: &Value, new: &Value, lines: &mut Vec<String>) {
    if same(old, new) {
        return;
    }
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let (before, after) = (a.get(key).unwrap_or(NULL), b.get(key).unwrap_or(NULL));
                describe_changes(&format!("{path}.{key}"), before, after, lines);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (index, (before, after)) in a.iter().zip(b).enumerate() {
                describe_changes(&format!("{path}[{index}]"), before, after, lines);
            }
        }
        _ => lines.push(format!("  {path}: {old} -> {new}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    fn base() -> Value {
        json!({
            "containers": [{"name": "c", "image": "nginx:1", "imagePullPolicy": "IfNotPresent"}],
            "nodeName": "node-1",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
        })
    }

    /// `base()` with `change` applied to its spec.
    fn changed(change: impl FnOnce(&mut Value)) -> Value {
        let mut spec = base();
        change(&mut spec);
        pod(spec)
    }

    /// Each error as `field: message`, the message up to its first line.
    fn summary(errors: &[FieldError]) -> Vec<String> {
        errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message.lines().next().unwrap_or("")))
            .collect()
    }

    const FORBIDDEN: &str = "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

    #[test]
    fn what_an_update_may_change() {
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("nothing", pod(base()), vec![]),
            (
                "an image",
                changed(|s| s["containers"][0]["image"] = json!("nginx:2")),
                vec![],
            ),
            (
                "an empty list where there was none",
                changed(|s| s["initContainers"] = json!([])),
                vec![],
            ),
            (
                "an environment variable",
                changed(|s| s["containers"][0]["env"] = json!([{"name": "A", "value": "1"}])),
                vec![FORBIDDEN],
            ),
            (
                "the node, dropped by a replace",
                changed(|s| set(s, "nodeName", Value::Null)),
                vec![FORBIDDEN],
            ),
            (
                "a container added",
                changed(|s| {
                    s["containers"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": "d", "image": "busybox"}))
                }),
                vec!["spec.containers: Forbidden: pod updates may not add or remove containers"],
            ),
            (
                "an image emptied",
                changed(|s| s["containers"][0]["image"] = json!("")),
                vec!["spec.containers[0].image: Required value"],
            ),
            (
                "an image with a space",
                changed(|s| s["containers"][0]["image"] = json!(" nginx")),
                vec![
                    "spec.containers[0].image: Invalid value: \" nginx\": must not have leading or trailing whitespace",
                ],
            ),
            (
                "a deadline set",
                changed(|s| s["activeDeadlineSeconds"] = json!(60)),
                vec![],
            ),
            (
                "a toleration added, one's seconds changed",
                changed(|s| {
                    s["tolerations"][0]["tolerationSeconds"] = json!(30);
                    s["tolerations"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"key": "x", "operator": "Exists"}));
                }),
                vec![],
            ),
            (
                "a toleration removed",
                changed(|s| s["tolerations"] = json!([])),
                vec![
                    "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds",
                ],
            ),
            (
                "a scheduling gate added",
                changed(|s| s["schedulingGates"] = json!([{"name": "example.com/hold"}])),
                vec![
                    "spec.schedulingGates[0].name: Forbidden: only deletion is allowed, but found new scheduling gate 'example.com/hold'",
                ],
            ),
            (
                "the grace period",
                changed(|s| s["terminationGracePeriodSeconds"] = json!(10)),
                vec![FORBIDDEN],
            ),
        ];
        for (name, new, expected) in cases {
            assert_eq!(summary(&errors(&pod(base()), &new)), expected, "{name}");
        }
    }

    #[test]
    fn a_negative_grace_period_may_become_1() {
        let with_grace =
            |seconds: i64| changed(|s| s["terminationGracePeriodSeconds"] = json!(seconds));
        assert_eq!(
            summary(&errors(&with_grace(-1), &with_grace(1))),
            Vec::<String>::new()
        );
        assert_eq!(
            summary(&errors(&with_grace(-1), &with_grace(2))),
            [FORBIDDEN]
        );
    }

    #[test]
    fn the_deadline_may_only_come_closer() {
        let with_deadline = |seconds: Value| {
            changed(|s| {
                if !seconds.is_null() {
                    s["activeDeadlineSeconds"] = seconds
                }
            })
        };
        let old = with_deadline(json!(60));
        let cases = [
            (json!(30), vec![]),
            (json!(60), vec![]),
            (
                json!(90),
                vec![
                    "spec.activeDeadlineSeconds: Invalid value: 90: must be less than or equal to previous value",
                ],
            ),
            (
                json!(-1),
                vec![
                    "spec.activeDeadlineSeconds: Invalid value: -1: must be between 0 and 2147483647, inclusive",
                ],
            ),
            (
                Value::Null,
                vec![
                    "spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive integer to nil value",
                ],
            ),
        ];
        for (seconds, expected) in cases {
            let new = with_deadline(seconds.clone());
            assert_eq!(summary(&errors(&old, &new)), expected, "{seconds}");
        }
    }

    #[test]
    fn a_gated_pod_may_gain_node_selectors_and_affinity() {
        let gated = |change: &dyn Fn(&mut Value)| {
            changed(|s| {
                set(s, "nodeName", Value::Null);
                s["schedulingGates"] = json!([{"name": "example.com/hold"}]);
                s["nodeSelector"] = json!({"zone": "a"});
                s["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": ["1"]}]}]}}});
                change(s);
            })
        };
        let old = gated(&|_| {});
        let extra = json!({"key": "j", "operator": "Exists"});
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            (
                "a selector added",
                gated(&|s| s["nodeSelector"]["disk"] = json!("ssd")),
                vec![],
            ),
            (
                "a selector changed",
                gated(&|s| s["nodeSelector"]["zone"] = json!("b")),
                vec![
                    "spec.nodeSelector: Invalid value: {\"zone\":\"b\"}: only additions to spec.nodeSelector are allowed (no mutations or deletions)",
                ],
            ),
            (
                "a requirement added to a term",
                gated(&|s| {
                    s["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                        ["nodeSelectorTerms"][0]["matchExpressions"]
                        .as_array_mut()
                        .unwrap()
                        .push(extra.clone())
                }),
                vec![],
            ),
            (
                "a term added",
                gated(&|s| {
                    s["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                        ["nodeSelectorTerms"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"matchExpressions": [extra.clone()]}))
                }),
                vec![
                    "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: Invalid value: [{\"matchExpressions\":[{\"key\":\"k\",\"operator\":\"In\",\"values\":[\"1\"]}]},{\"matchExpressions\":[{\"key\":\"j\",\"operator\":\"Exists\"}]}]: no additions/deletions to non-empty NodeSelectorTerms list are allowed",
                ],
            ),
            (
                "the gate removed and a selector added",
                gated(&|s| {
                    s["schedulingGates"] = json!([]);
                    s["nodeSelector"]["disk"] = json!("ssd");
                }),
                vec![],
            ),
        ];
        for (name, new, expected) in cases {
            assert_eq!(summary(&errors(&old, &new)), expected, "{name}");
        }
    }

    #[test]
    fn the_message_names_what_changed() {
        let new = changed(|s| set(s, "nodeName", Value::Null));
        let errors = errors(&pod(base()), &new);
        let [error] = errors.as_slice() else {
            panic!("one error expected, got {errors:?}");
        };
        assert!(
            error
                .message
                .ends_with("\n  spec.nodeName: \"node-1\" -> null"),
            "{}",
            error.message
        );
    }
}
