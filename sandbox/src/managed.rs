//! `metadata.managedFields`: who owns which fields, updated on every write that names a
//! field manager, and server-side apply with its conflicts.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::api_error::ApiError;
use crate::fieldset::{self, FieldPath, Walk};
use crate::listtypes::{ListType, list_type, same_item};
use crate::meta;
use crate::resources::ResourceType;
use crate::store::Subresource;

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: String,
    fields: BTreeSet<FieldPath>,
}

impl Entry {
    /// How a conflict names this manager (kube-apiserver's `printManager`): quoted, with its
    /// subresource, and for an update with the API version it wrote.
    fn conflict_name(&self) -> String {
        let mut name = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            name = format!("{name} with subresource {:?}", self.subresource);
        }
        if self.operation == "Update" {
            name = format!("{name} using {}", self.api_version);
        }
        name
    }

    fn parse(value: &Value) -> Entry {
        let text = |k: &str| value[k].as_str().unwrap_or_default().to_string();
        Entry {
            manager: text("manager"),
            operation: text("operation"),
            api_version: text("apiVersion"),
            time: text("time"),
            subresource: text("subresource"),
            fields: fieldset::from_fields_v1(&value["fieldsV1"]),
        }
    }

    fn render(&self) -> Value {
        let mut entry = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": fieldset::to_fields_v1(&self.fields),
        });
        if !self.subresource.is_empty() {
            entry["subresource"] = json!(self.subresource);
        }
        entry
    }

    fn is(&self, manager: &str, operation: &str, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource == subresource
    }
}

fn entries(object: &Value) -> Vec<Entry> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|e| e.iter().map(Entry::parse).collect())
        .unwrap_or_default()
}

fn store_entries(object: &mut Value, mut entries: Vec<Entry>) {
    // kube-apiserver's order (sortEncodedManagedFields): Apply before Update, then by time in
    // seconds (the format sorts as text), manager, API version, subresource.
    entries.sort_by(|p, q| {
        (
            &p.operation,
            &p.time,
            &p.manager,
            &p.api_version,
            &p.subresource,
        )
            .cmp(&(
                &q.operation,
                &q.time,
                &q.manager,
                &q.api_version,
                &q.subresource,
            ))
    });
    let kept: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(Entry::render)
        .collect();
    let value = (!kept.is_empty()).then(|| Value::Array(kept));
    meta::set_metadata_field(object, "managedFields", value);
}

fn walk_for(rt: &ResourceType, subresource: Subresource, containers: bool) -> Walk<'_> {
    Walk {
        schema: rt.schema.as_deref(),
        skip_status: rt.has_status() && subresource == Subresource::Main,
        containers,
    }
}

/// The fields an apply of `object` sets (SMD's `ToFieldSet`: leaves and list items).
fn fields_of(object: &Value, rt: &ResourceType, subresource: Subresource) -> BTreeSet<FieldPath> {
    fields_with(object, rt, subresource, false)
}

fn fields_with(
    object: &Value,
    rt: &ResourceType,
    subresource: Subresource,
    containers: bool,
) -> BTreeSet<FieldPath> {
    let all = fieldset::of_object(object, &walk_for(rt, subresource, containers));
    match subresource {
        Subresource::Main => all,
        Subresource::Status => all
            .into_iter()
            .filter(|p| p.first().is_some_and(|f| f == "f:status"))
            .collect(),
    }
}

fn subresource_name(subresource: Subresource) -> &'static str {
    match subresource {
        Subresource::Main => "",
        Subresource::Status => "status",
    }
}

/// Records an `Update` by `manager`: the fields it changed become its own and leave others.
/// Like SMD's compare of the live object (on create, the kind's zero object) with the new
/// one: leaves that changed, and maps, lists and items that were not there before.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    rt: &ResourceType,
    subresource: Subresource,
) {
    let now_fields = fields_with(new, rt, subresource, true);
    let zero = crate::defaults::zero_object(rt);
    let base = old.unwrap_or(&zero);
    let before = old
        .map(|old| fields_with(old, rt, subresource, true))
        .unwrap_or_default();
    let changed: BTreeSet<FieldPath> = now_fields
        .iter()
        .filter(|p| match p.last() {
            // A map, list or item is the manager's when this write brought it.
            Some(last) if last == "." => fieldset::value_at(base, p).is_none(),
            _ => fieldset::value_at(base, p) != fieldset::value_at(new, p) || !before.contains(*p),
        })
        .cloned()
        .collect();
    let removed: BTreeSet<FieldPath> = before.difference(&now_fields).cloned().collect();
    if changed.is_empty() && removed.is_empty() {
        return;
    }
    let sub = subresource_name(subresource);
    let mut all = entries(new);
    let mut found = false;
    for entry in &mut all {
        if entry.is(manager, "Update", sub) {
            found = true;
            entry.fields = entry.fields.difference(&removed).cloned().collect();
            entry.fields.extend(changed.iter().cloned());
            entry.time = meta::now();
            entry.api_version = rt.api_version();
        } else {
            entry.fields = entry
                .fields
                .iter()
                .filter(|p| !changed.contains(*p) && !removed.contains(*p))
                .cloned()
                .collect();
        }
    }
    if !found {
        all.push(Entry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: rt.api_version(),
            time: meta::now(),
            subresource: sub.to_string(),
            fields: changed,
        });
    }
    store_entries(new, all);
}

/// Merges an applied configuration into the live object: maps recursively, keyed lists item
/// by item, sets by union, everything else replaced.
fn merge_applied(
    live: &mut Value,
    config: &Value,
    names: &mut Vec<String>,
    schema: Option<&Value>,
) {
    match (live, config) {
        (Value::Object(live_map), Value::Object(config_map))
            if !fieldset::atomic_map(schema, names) =>
        {
            for (key, value) in config_map {
                names.push(key.clone());
                match live_map.get_mut(key) {
                    Some(existing) if !value.is_null() => {
                        merge_applied(existing, value, names, schema)
                    }
                    _ => {
                        live_map.insert(key.clone(), value.clone());
                    }
                }
                names.pop();
            }
        }
        (Value::Array(live_items), Value::Array(config_items)) => match list_type(schema, names) {
            ListType::Map(keys) if !keys.is_empty() => {
                let mut merged = Vec::new();
                for item in config_items {
                    match live_items.iter().position(|l| same_item(&keys, l, item)) {
                        Some(i) => {
                            let mut existing = live_items.remove(i);
                            merge_applied(&mut existing, item, names, schema);
                            merged.push(existing);
                        }
                        None => merged.push(item.clone()),
                    }
                }
                // Items the applier did not mention stay; removal of its own goes elsewhere.
                merged.append(live_items);
                *live_items = merged;
            }
            ListType::Set => {
                for item in config_items {
                    if !live_items.contains(item) {
                        live_items.push(item.clone());
                    }
                }
            }
            _ => *live_items = config_items.clone(),
        },
        (live, config) => *live = config.clone(),
    }
}

/// Server-side apply of `config` by `manager` over the live object (`None` creates): the
/// object to write, with managedFields updated, or a 409 listing the conflicts.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    rt: &ResourceType,
    subresource: Subresource,
    force: bool,
) -> Result<Value, ApiError> {
    let sub = subresource_name(subresource);
    let applied = fields_of(config, rt, subresource);
    let Some(live) = live else {
        let mut created = config.clone();
        store_entries(
            &mut created,
            vec![Entry {
                manager: manager.to_string(),
                operation: "Apply".into(),
                api_version: rt.api_version(),
                time: meta::now(),
                subresource: sub.to_string(),
                fields: applied,
            }],
        );
        return Ok(created);
    };
    let mut all = entries(live);
    let mut conflicts: Vec<(String, FieldPath)> = Vec::new();
    for entry in &all {
        if entry.is(manager, "Apply", sub) || entry.subresource != sub {
            continue;
        }
        for path in entry.fields.intersection(&applied) {
            // `.` owns an item's existence, which both sides agree on here.
            let existence = path.last().is_some_and(|p| p == ".");
            if !existence && fieldset::value_at(live, path) != fieldset::value_at(config, path) {
                conflicts.push((entry.conflict_name(), path.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&conflicts));
    }
    for entry in &mut all {
        if !entry.is(manager, "Apply", sub) {
            entry
                .fields
                .retain(|p| !conflicts.iter().any(|(_, c)| c == p));
        }
    }
    let previous: BTreeSet<FieldPath> = all
        .iter()
        .find(|e| e.is(manager, "Apply", sub))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let mut merged = live.clone();
    // The main resource takes everything but status; the status subresource only status.
    let mut body = match subresource {
        Subresource::Main => config.clone(),
        Subresource::Status => {
            json!({"status": config.get("status").cloned().unwrap_or(Value::Null)})
        }
    };
    if subresource == Subresource::Main
        && let Some(map) = body.as_object_mut()
    {
        map.remove("status");
    }
    if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        for system in [
            "managedFields",
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
        ] {
            metadata.remove(system);
        }
    }
    merge_applied(&mut merged, &body, &mut Vec::new(), rt.schema.as_deref());
    // Fields this manager applied before and no longer does go, unless someone else owns them.
    let owned_by_others: BTreeSet<FieldPath> = all
        .iter()
        .filter(|e| !e.is(manager, "Apply", sub))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    // Nor does what holds a field that stays (a map applied empty before and filled now): SMD
    // removes it, then adds back every field still applied or owned.
    let stays = |p: &FieldPath| {
        let p = match p.last() {
            Some(last) if last == "." => &p[..p.len() - 1],
            _ => &p[..],
        };
        applied
            .iter()
            .chain(owned_by_others.iter())
            .any(|q| q.len() > p.len() && q.starts_with(p))
    };
    let mut dropped: Vec<&FieldPath> = previous
        .difference(&applied)
        .filter(|p| !owned_by_others.contains(*p) && !stays(p))
        .collect();
    // Deepest first, so removing an item does not hide its fields.
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for path in dropped {
        fieldset::remove_at(&mut merged, path);
    }
    // An apply that changes nothing keeps its entry as it was, so it writes nothing.
    let unchanged = all
        .iter()
        .find(|e| e.is(manager, "Apply", sub))
        .filter(|e| e.fields == applied && e.api_version == rt.api_version())
        .map(|e| e.time.clone());
    let entry = Entry {
        manager: manager.to_string(),
        operation: "Apply".into(),
        api_version: rt.api_version(),
        time: unchanged.unwrap_or_else(meta::now),
        subresource: sub.to_string(),
        fields: applied,
    };
    match all.iter().position(|e| e.is(manager, "Apply", sub)) {
        Some(i) => all[i] = entry,
        None => all.push(entry),
    }
    store_entries(&mut merged, all);
    // The apply itself carries no resourceVersion precondition unless the config had one.
    meta::set_metadata_field(
        &mut merged,
        "resourceVersion",
        config["metadata"].get("resourceVersion").cloned(),
    );
    Ok(merged)
}

/// A 409 like kube-apiserver's `NewApplyConflict`: the causes are its only details.
fn conflict_error(conflicts: &[(String, FieldPath)]) -> ApiError {
    let count = conflicts.len();
    let lines: Vec<String> = conflicts
        .iter()
        .map(|(manager, path)| format!("conflict with {manager}: {}", fieldset::display(path)))
        .collect();
    let message = if count == 1 {
        format!("Apply failed with 1 conflict: {}", lines[0])
    } else {
        format!("Apply failed with {count} conflicts: {}", lines.join("\n"))
    };
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(manager, path)| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with {manager}"),
                "field": fieldset::display(path),
            })
        })
        .collect();
    let mut error = ApiError::new(409, "Conflict", message);
    error.details = Some(json!({"causes": causes}));
    error
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin;

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "web", "image": image}]}}}
        })
    }

    /// `manager`'s apply of `config` onto the Deployment `live` (its main resource).
    fn apply_deployment(
        live: Option<&Value>,
        config: &Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, ApiError> {
        let rt = builtin("apps", "Deployment").expect("deployments");
        apply(live, config, manager, &rt, Subresource::Main, force)
    }

    #[test]
    fn apply_creates_then_conflicts_with_another_manager() {
        let created =
            apply_deployment(None, &deployment(1, "nginx"), "alice", false).expect("create");
        assert_eq!(created["metadata"]["managedFields"][0]["manager"], "alice");
        assert_eq!(
            created["metadata"]["managedFields"][0]["operation"],
            "Apply"
        );
        // Same values by another manager: shared ownership, no conflict.
        let shared = apply_deployment(Some(&created), &deployment(1, "nginx"), "bob", false)
            .expect("shared");
        assert_eq!(
            shared["metadata"]["managedFields"].as_array().map(Vec::len),
            Some(2)
        );
        let error = apply_deployment(Some(&shared), &deployment(3, "nginx"), "bob", false)
            .expect_err("conflict");
        assert_eq!(error.code, 409);
        assert_eq!(
            error.message,
            r#"Apply failed with 1 conflict: conflict with "alice": .spec.replicas"#
        );
        let forced =
            apply_deployment(Some(&shared), &deployment(3, "nginx"), "bob", true).expect("forced");
        assert_eq!(forced["spec"]["replicas"], 3);
    }

    #[test]
    fn apply_removes_what_the_manager_stopped_applying() {
        let mut first = deployment(1, "nginx");
        first["metadata"]["labels"] = json!({"tier": "front"});
        let live = apply_deployment(None, &first, "alice", false).expect("create");
        let next =
            apply_deployment(Some(&live), &deployment(1, "nginx"), "alice", false).expect("apply");
        assert!(
            next["metadata"]
                .get("labels")
                .is_none_or(|l| l.get("tier").is_none())
        );
    }

    #[test]
    fn updates_take_ownership_of_changed_fields() {
        let rt = builtin("apps", "Deployment").expect("deployments");
        let live = apply_deployment(None, &deployment(1, "nginx"), "alice", false).expect("create");
        let mut scaled = live.clone();
        scaled["spec"]["replicas"] = json!(5);
        record_update(
            Some(&live),
            &mut scaled,
            "kubectl-scale",
            &rt,
            Subresource::Main,
        );
        let managers: Vec<&str> = scaled["metadata"]["managedFields"]
            .as_array()
            .map(|e| e.iter().filter_map(|e| e["manager"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(managers, ["alice", "kubectl-scale"]);
        let error = apply_deployment(Some(&scaled), &deployment(1, "nginx"), "alice", false)
            .expect_err("conflict");
        assert!(error.message.contains("kubectl-scale"), "{}", error.message);
    }
}
